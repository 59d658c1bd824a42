"""The one reader of ``.local/services.env`` (written by ``python -m services up``), for
tests, benchmarks and examples."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent.parent / ".local" / "services.env"


class ServicesEnvError(Exception):
    """The services' addresses are not there: the services were not started."""


def load_env(path: Path | None = None, *, environ_wins: bool = True) -> dict[str, str]:
    """``KEY=VALUE`` lines of the services file (``$SPARK_EXT_SERVICES_ENV`` or
    ``.local/services.env``); blank lines and ``#`` comments are skipped. With
    ``environ_wins``, environment variables of the same names override the file."""
    path = path or Path(os.environ.get("SPARK_EXT_SERVICES_ENV", DEFAULT))
    if not path.exists():
        raise ServicesEnvError(f"{path} not found: run `make services` first")
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            values[k.strip()] = v.strip()
    if environ_wins:
        values.update({k: os.environ[k] for k in values if k in os.environ})
    return values
