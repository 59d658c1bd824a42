"""Stage 1 in the JVM: spark-ext's companion jar folds events into partials, so events never
cross into Python.

The jar (``dev.sparkext:spark-ext-native_2.13``, shipped in the wheel as ``spark_ext/jars/``,
added by ``spark_ext.configure`` or named with ``spark-submit --packages``) holds
``dev.sparkext.windows.FrameFold.fold(Dataset<Row>, String)``. It returns the same wire rows
as ``stages.stage1`` (``state.py``: one Arrow IPC blob of partials per bucket, in the
partials' schema, and the ``SEEN`` rows), so stage 2 is the same either way.

``fold`` uses it when the session is a classic one whose JVM can load the class and every
aggregate has a native form: ``count`` / ``sum`` / ``avg`` / ``min`` / ``max`` and any
``UserAggregate`` whose state columns read columns by name, and the co-moments (variances,
standard deviations, ``linreg_slope``). Otherwise (Spark Connect, no jar, a state column
computed by a Python function) Python folds, as before. ``SPARK_EXT_WINDOWS_FOLD`` chooses:
``auto`` (default), ``python`` (always Python) or ``jvm`` (fail unless the JVM folds).

What the JVM receives: the bucket (computed by Spark as before), timestamps as µs since
the epoch and dates as days (``unix_micros`` / ``unix_date``, so no calendar conversion
happens in Java), and a JSON spec: ``kind``, ``keys``, ``ts``, ``bucket``, ``part`` (the
clock's column or null), ``slide_us``, ``gap_us``, ``buckets``, ``streaming``, ``schema``
(an empty Arrow IPC stream of the partials' schema, base64) and ``ops`` (per aggregate
prefix: ``{"kind": "columns", "columns": [{"state", "fn", "input", "float"}]}`` or
``{"kind": "moments", "inputs": [...]}``).
"""

from __future__ import annotations

import base64
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from spark_ext.errors import ConfigurationError
from spark_ext.release import ARTIFACT, VERSION, coordinate
from spark_ext.windows import state as ws
from spark_ext.windows.aggregate import UserAggregate, _CoMoments
from spark_ext.windows.state import BUCKET

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_ext.windows.stages import Spec

log = logging.getLogger(__name__)

CLASS = "dev.sparkext.windows.FrameFold"
ENV = "SPARK_EXT_WINDOWS_FOLD"
_MODES = ("auto", "python", "jvm")
# Spark types the JVM fold reads (as a key; numeric and temporal ones also as an input).
_KEY_TYPES = ("string", "boolean", "tinyint", "smallint", "int", "bigint", "float", "double", "date",
              "timestamp", "timestamp_ntz")
_INPUT_TYPES = _KEY_TYPES[2:]


class NativeFoldError(ConfigurationError):
    """The JVM fold was required (``SPARK_EXT_WINDOWS_FOLD=jvm``) but cannot run."""


def version() -> str:
    return VERSION


def mode() -> str:
    m = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if m not in _MODES:
        raise NativeFoldError(f"{ENV}={m!r}; use one of {', '.join(_MODES)}")
    return m


def fold(src: DataFrame, spec: Spec) -> DataFrame | None:
    """Stage 1's wire rows from the JVM, or None when Python must fold (see the module doc).

    ``src``: the events with the columns stage 1 reads and ``BUCKET`` (and ``PART_KEY``)."""
    m = mode()
    if m == "python":
        return None
    why, ops = _ops(spec, src)
    jvm = _fold_class(src) if ops is not None else None
    if jvm is not None and (jar := _jar_version(jvm)) != version():
        # Another release's jar (e.g. an older --packages coordinate) may read the spec otherwise.
        why, jvm = (f"the session's {ARTIFACT} jar is version {jar}, this spark-ext is {version()}; "
                    f"use --packages {coordinate()}"), None
        if m == "auto":
            log.warning("windows fold in Python: %s", why)
    if ops is None or jvm is None:
        if m == "jvm":
            raise NativeFoldError(f"{ENV}=jvm but the JVM cannot fold these windows: "
                                  f"{why or _no_class(src)}; unset {ENV} to let Python fold")
        return None
    from pyspark.sql import functions as F
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    cols = []
    for f in src.schema.fields:  # timestamps and dates as integers: no calendar logic in Java
        t, c = f.dataType.simpleString(), F.col(f"`{f.name}`")
        if t == "timestamp":
            c = F.unix_micros(c)
        elif t == "timestamp_ntz":
            c = F.expr(f"timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', `{f.name}`)")
        elif t == "date":
            c = F.unix_date(c)
        cols.append(c.alias(f.name))
    events = src.select(*cols)
    doc = {"kind": spec.kind, "keys": list(spec.keys), "ts": spec.ts, "bucket": BUCKET, "part": spec.part_col,
           "slide_us": spec.slide_us, "gap_us": spec.gap_us, "buckets": spec.buckets,
           "streaming": spec.streaming,
           "schema": base64.b64encode(ws.to_ipc(spec.stage1_schema.empty_table())).decode(), "ops": ops}
    jdf = jvm.fold(events._jdf, json.dumps(doc))
    return ClassicDataFrame(jdf, src.sparkSession)


def _ops(spec: Spec, src: DataFrame) -> tuple[str, list[dict[str, Any]] | None]:
    """(why not, None) or ("", the ops' native form)."""
    types = {f.name: f.dataType.simpleString() for f in src.schema.fields}
    for k in spec.keys:
        if types[k] not in _KEY_TYPES:
            return f"key {k!r} has type {types[k]}", None
    out: list[dict[str, Any]] = []
    for prefix, op in spec.ops.items():
        reads = [*op.inputs, *[c.input for c in getattr(op, "columns", ()) if isinstance(c.input, str)]]
        if any(types.get(c) not in _INPUT_TYPES for c in reads):
            return f"aggs[{prefix!r}] reads a column of a type the JVM fold does not read", None
        if type(op) is _CoMoments:
            out.append({"prefix": prefix, "kind": "moments", "inputs": list(op.inputs)})
        elif type(op) is UserAggregate and all(not callable(c.input) for c in op.columns):
            out.append({"prefix": prefix, "kind": "columns", "columns": [
                {"state": c.name, "fn": c.fn, "input": c.input, "float": c.as_float} for c in op.columns]})
        else:
            return f"aggs[{prefix!r}] ({op!r}) is computed by Python only", None
    return "", out


def has_jvm(session: Any) -> bool:
    """A classic session, whose JVM this process reaches; False for a Spark Connect client."""
    return getattr(session, "_jvm", None) is not None


def _fold_class(src: DataFrame) -> Any:
    """The py4j class ``FrameFold`` in ``src``'s JVM; None on Spark Connect or without the jar."""
    if not has_jvm(src.sparkSession):
        return None
    from py4j.java_gateway import JavaClass

    cls = src.sparkSession._jvm
    for part in CLASS.split("."):
        cls = getattr(cls, part)
    return cls if isinstance(cls, JavaClass) else None


def _jar_version(cls: Any) -> str:
    """The jar's release; a build from before jars carried one has no ``version()``."""
    from py4j.protocol import Py4JError

    try:
        return str(cls.version())
    except Py4JError:
        return "older than 0.1.0 (no version)"


def _no_class(src: DataFrame) -> str:
    if not has_jvm(src.sparkSession):
        return "the session has no JVM of its own (Spark Connect)"
    return (f"class {CLASS} is not on the session's classpath; build a session with "
            f"spark_ext.configure(builder), or spark-submit --packages {coordinate()}")
