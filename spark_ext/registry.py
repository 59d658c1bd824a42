"""Which class implements ``option("connector", name)``: the registry the core owns.

Connectors register themselves; the core never imports them. A connector package
declares entry points in its distribution metadata (``pyproject.toml``)::

    [project.entry-points."spark_ext.sinks"]
    kafka = "spark_ext.connectors.kafka:KafkaSink"

Groups: ``spark_ext.sources`` (``SourceConnector`` classes), ``spark_ext.sinks``
(``SinkConnector`` classes) and ``spark_ext.doctors`` (operator tools, a
``main(argv) -> int`` reached through ``spark-ext doctor <name> ...``, in a module that
may also define ``status(argv) -> int`` for ``spark-ext status <name> ...``; a
``spark_ext.doctor.Doctor``'s ``main`` and ``status`` are both). Entry points are
read from the installed distributions, so they work in every Python process Spark
starts, on the driver and on executors, as long as the package is installed there.
``register`` adds an entry for the current process only (tests, notebooks).
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Callable
from functools import cache
from importlib.metadata import distributions, entry_points

from spark_ext.errors import MissingExtraError, MissingOptionError, UnknownConnectorError

SOURCES = "spark_ext.sources"
SINKS = "spark_ext.sinks"
DOCTORS = "spark_ext.doctors"

DISTRIBUTION = "spark-ext"

_extra: dict[str, dict[str, str]] = {SOURCES: {}, SINKS: {}, DOCTORS: {}}


@cache
def _installed(group: str) -> dict[str, str]:
    return {ep.name.lower(): ep.value for ep in entry_points(group=group)}


@cache
def _installed_in_folders(group: str) -> dict[str, str]:
    """``_installed`` without the zip archives on ``sys.path``. Spark puts pyspark.zip and
    its spark-core jar first on the path of every Python process it starts; the full search
    reads their listings too, 0.1-0.2 s of each query's planning process. Installed
    packages sit in folders, so a name is looked for here first (among folders, the first
    distribution on the path that names it wins, as in the full search)."""
    found: dict[str, str] = {}
    folders = [p for p in sys.path if os.path.isdir(p or ".")]
    for dist in distributions(path=folders):
        for ep in dist.entry_points.select(group=group):
            found.setdefault(ep.name.lower(), ep.value)
    return found


def _target(value: str) -> tuple[str, str, list[str]]:
    """``"module:attr [extra1,extra2]"`` -> (module, attr, extras)."""
    ref, _, extras = value.partition("[")
    module, _, attr = ref.strip().partition(":")
    return module, attr.strip(), [e.strip() for e in extras.rstrip("] ").split(",") if e.strip()]


def register(group: str, name: str, target: str) -> None:
    """Add ``name`` -> ``"module:attribute"`` to ``group`` in this process."""
    _extra[group][name.lower()] = target


def available(group: str) -> dict[str, str]:
    """Every name of ``group`` -> its ``"module:attribute"`` target."""
    return {**_installed(group), **_extra[group]}


def load(group: str, name: str | None, what: str, attribute: str | None = None) -> object:
    """The object registered as ``name`` in ``group``; ``what`` names the caller in errors.

    ``attribute``: another attribute of the registered module (a doctor module's
    ``status`` beside its ``main``), so one entry point serves both commands.

    Raises ``MissingOptionError`` / ``UnknownConnectorError`` naming the valid choices.
    """
    key = (name or "").strip().lower()
    known = {**_installed_in_folders(group), **_extra[group]}
    if key not in known:
        known = available(group)  # a package in an archive, or an unknown name to list choices for
    choices = ", ".join(sorted(known)) or "none (is spark-ext installed in this Python?)"
    if name is None:
        raise MissingOptionError(
            f"{what} needs option 'connector'; set .option('connector', ...) to one of {choices}"
        )
    if key not in known:
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownConnectorError(
            f"unknown connector {name!r} for {what}{hint}; valid connectors: {choices}"
        )
    module, attr, extras = _target(known[key])
    try:
        # The attribute too: a connector package imports its source or sink when named.
        return getattr(importlib.import_module(module), attribute or attr)
    except ModuleNotFoundError as e:
        # Only a missing client library is the user's to install; a missing module of our
        # own is a broken installation and stays the error it is.
        if not extras or (e.name or "").split(".")[0] == "spark_ext":
            raise
        spec = f"{DISTRIBUTION}[{','.join(extras)}]"
        raise MissingExtraError(
            f"{what} connector {key!r} needs the Python package {e.name!r}, which is not installed in "
            f"this Python ({sys.executable}); install the connector's extra: pip install '{spec}' "
            "(on a cluster, in the environment the executors run too)"
        ) from None


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """A package's module ``__getattr__``: ``exports`` maps a name to the submodule that
    defines it, imported when the name is first asked for. A connector package's source
    and sink load apart, so a Python worker that only reads (a source's planning worker, a
    read task) never imports the sink's modules (each import costs a worker tens of
    milliseconds at its first task)."""

    def __getattr__(name: str) -> object:
        sub = exports.get(name)
        if sub is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{sub}"), name)

    return __getattr__
