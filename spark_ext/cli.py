"""The ``spark-ext`` command (also ``python -m spark_ext``).

``spark-ext doctor <connector> ...`` runs that connector's operator tool, and
``spark-ext status <connector> ...`` shows its sinks; both are the ``main`` and ``status``
of the connector's doctor module (a ``spark_ext.doctor.Doctor``), found through the
``spark_ext.doctors`` registry group, e.g.::

    spark-ext doctor jdbc list --url postgresql+psycopg2://user@host/db
    spark-ext status jdbc --url postgresql+psycopg2://user@host/db --json
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import cast

from spark_ext import registry

_USAGE = ("usage: spark-ext doctor <connector> ...\n"
          "       spark-ext status <connector> [--json] ...\n"
          "(connectors with a doctor: {})")
# command -> the function of the doctor's module it runs (None: the entry point's own)
_COMMANDS: dict[str, str | None] = {"doctor": None, "status": "status"}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    doctors = sorted(registry.available(registry.DOCTORS))
    if len(args) < 2 or args[0] not in _COMMANDS or args[1] in ("-h", "--help"):
        print(_USAGE.format(", ".join(doctors) or "none"), file=sys.stderr)
        return 0 if args[1:2] in (["-h"], ["--help"]) else 2
    command, name = args[0], args[1]
    if name.lower() not in doctors:
        print(f"error: no {command} for connector {name!r}; choose one of {', '.join(doctors)}",
              file=sys.stderr)
        return 2
    try:
        tool = registry.load(registry.DOCTORS, name, f"spark-ext {command}", attribute=_COMMANDS[command])
    except AttributeError:  # a third-party doctor that predates status
        print(f"error: the {name} doctor has no {command} command", file=sys.stderr)
        return 2
    return cast(Callable[[list[str]], int], tool)(args[2:])


if __name__ == "__main__":
    sys.exit(main())
