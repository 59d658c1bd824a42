"""The ``spark-ext`` command (also ``python -m spark_ext``).

``spark-ext doctor <connector> ...`` runs that connector's operator tool, found through
the ``spark_ext.doctors`` registry group, e.g.::

    spark-ext doctor jdbc list --url postgresql+psycopg2://user@host/db
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import cast

from spark_ext import registry

_USAGE = "usage: spark-ext doctor <connector> ...   (connectors with a doctor: {})"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    doctors = sorted(registry.available(registry.DOCTORS))
    if len(args) < 2 or args[0] != "doctor" or args[1] in ("-h", "--help"):
        print(_USAGE.format(", ".join(doctors) or "none"), file=sys.stderr)
        return 0 if args[1:2] in (["-h"], ["--help"]) else 2
    if args[1].lower() not in doctors:
        print(f"error: no doctor for connector {args[1]!r}; choose one of {', '.join(doctors)}",
              file=sys.stderr)
        return 2
    tool = cast(Callable[[list[str]], int],
                registry.load(registry.DOCTORS, args[1], "spark-ext doctor"))
    return tool(args[2:])


if __name__ == "__main__":
    sys.exit(main())
