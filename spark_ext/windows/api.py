"""The public functions of ``spark_ext.windows``: arguments checked, the two stages wired into Spark.

``tumbling`` / ``sliding`` / ``session`` turn their arguments into one ``Spec`` (raising
``WindowError`` on the driver for anything unusable) and build the plan: stage 1
(the companion jar's JVM fold, ``native.py``, or ``mapInArrow``), the shuffle by bucket,
stage 2 (``applyInArrow`` in batch, ``applyInPandasWithState`` in streaming, or
``applyInArrow`` over versioned files with ``state_location``); the stages
themselves are ``stages.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_ext import compat
from spark_ext.options import Option, OptionSpec
from spark_ext.windows import frames as fr
from spark_ext.windows import native, versioned
from spark_ext.windows import state as ws
from spark_ext.windows.aggregate import AggregateOperation
from spark_ext.windows.frames import WindowError
from spark_ext.windows.stages import Spec, batch_stage2, files_stage2, stage1, stream_stage2
from spark_ext.windows.state import BUCKET, NOW, PART_KEY, WIRE
from spark_ext.windows.windower import HIDDEN_COUNT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The arguments of ``tumbling`` / ``sliding`` / ``session``, for the reference (its table is
#: generated from this; a test holds the keyword defaults equal to ``sliding``'s signature).
ARGUMENTS = OptionSpec.of(
    Option("keys", "Column names to group by (a list, or one name).", required=True),
    Option("timestamp", "The event-time column (timestamp or timestamp_ntz).", required=True),
    Option("size", "`tumbling`, `sliding`: the window length, e.g. `'60 seconds'`.", required=True),
    Option("slide", "`sliding`: how often a window starts; `size` must be a multiple of it.", required=True),
    Option("timeout", "`session`: events of a key at most this far apart share a session.", required=True),
    Option("aggs", "Output column -> aggregate (`spark_ext.windows.aggregate`).", required=True),
    Option("lateness", "How far behind the coalesced watermark an event may be.", default="0 seconds"),
    Option("partition_column", "The source partition of each row (e.g. the Kafka source's `partition`), or "
           "several columns that name it together; the watermark is the minimum over partitions that are "
           "not idle. `\"partition\"` on a frame with the Kafka source's `topic` column means "
           "`(\"topic\", \"partition\")`.", shown="none: the input is one stream"),
    Option("idle_timeout", "A partition without events this long (processing time) stops holding the "
           "watermark back; `None`: never.", default="60 seconds"),
    Option("buckets", "Stage 2's key buckets; keep it unchanged across restarts of one checkpoint.",
           shown="`spark.sql.shuffle.partitions`"),
    Option("metrics", "Streaming: the name of the observed metrics (`late_events`) in the query's progress; "
           "give each windowed aggregation of one query its own.", default="windows"),
    Option("emit_when_idle", "Streaming: emit the windows the watermark passes while no input arrives. "
           "Needs a `processingTime` trigger and an `idle_timeout` of at least twice the trigger "
           "interval.", default=False, shown="`False`"),
    Option("state_location", "Streaming: keep the windows' state in versioned files under this directory "
           "(a path every executor reaches, or an `s3://`, `gs://`, `hdfs://` URI) instead of Spark's state "
           "store: faster per batch. One per checkpoint; not with `emit_when_idle`.",
           shown="none: Spark's state store"),
)

_UNITS = {"microsecond": 1, "millisecond": 1000, "second": 10**6, "minute": 60 * 10**6,
          "hour": 3600 * 10**6, "day": 86400 * 10**6}
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]+?)s?\s*$")


def duration_us(text: str, what: str) -> int:
    """``"10 seconds"`` -> 10_000_000 µs; WindowError naming ``what`` otherwise."""
    m = _DURATION.match(text.lower()) if isinstance(text, str) else None
    if not m or m.group(2) not in _UNITS:
        raise WindowError(f"{what} is {text!r}; write a duration such as '10 seconds', '500 milliseconds', "
                          "'1 minute'")
    return int(m.group(1)) * _UNITS[m.group(2)]


def tumbling(df: DataFrame, keys: Sequence[str], timestamp: str, size: str,
             aggs: Mapping[str, AggregateOperation], **kw: Any) -> DataFrame:
    """Windows ``[n * size, (n + 1) * size)``; see ``sliding`` for the options."""
    return sliding(df, keys, timestamp, size, size, aggs, **kw)


def sliding(df: DataFrame, keys: Sequence[str], timestamp: str, size: str, slide: str,
            aggs: Mapping[str, AggregateOperation], *, lateness: str = "0 seconds",
            partition_column: str | Sequence[str] | None = None, idle_timeout: str | None = "60 seconds",
            buckets: int | None = None, metrics: str = "windows", emit_when_idle: bool = False,
            state_location: str | None = None) -> DataFrame:
    """Windows of ``size`` every ``slide`` (size a multiple of slide), per key. Driver.

    ``lateness``: how far behind the coalesced watermark an event may be. ``partition_column``:
    the source partition of each row, coalesced over as in Jet: an integer column, or several
    columns that name it together; ``"partition"`` on a frame that also has the Kafka
    source's string ``topic`` column means ``("topic", "partition")``, since partition 0 of
    two topics are two partitions. ``None`` treats the input as one stream. ``metrics``: in
    streaming, the name of the observed metrics in the query's progress, ``late_events``
    being the events dropped as late in that batch
    (``lastProgress["observedMetrics"]["windows"]["late_events"]``); give each windowed
    aggregation of one query its own. ``emit_when_idle``: in streaming, emit
    the windows the watermark passes while no input arrives (a partition going idle, or the
    input stopping), within about one trigger interval; it needs a ``processingTime``
    trigger (Spark then runs a batch every trigger, and would never end an ``availableNow``
    query) and an ``idle_timeout`` of at least twice the trigger interval.
    ``state_location``: in streaming, keep the windows' state in versioned files under this
    directory (every executor must reach it) instead of Spark's state store, which saves
    each batch the state store's round trip (``versioned.py``); give each checkpoint its
    own. Bad arguments raise ``WindowError`` here.
    """
    size_us, slide_us = duration_us(size, "size"), duration_us(slide, "slide")
    spec = _spec(df, "sliding", keys, timestamp, aggs, slide_us, fr.frames_per_window(size_us, slide_us), 0,
                 lateness, partition_column, idle_timeout, buckets, metrics, emit_when_idle, state_location)
    return _build(df, spec)


def session(df: DataFrame, keys: Sequence[str], timestamp: str, timeout: str,
            aggs: Mapping[str, AggregateOperation], **kw: Any) -> DataFrame:
    """Session windows: events of a key closer than ``timeout`` share one window
    ``[first, last + timeout)``, merged across batches in any arrival order."""
    gap_us = duration_us(timeout, "timeout")
    if gap_us <= 0:
        raise WindowError("timeout must be positive, e.g. '30 seconds'")
    a = ARGUMENTS
    spec = _spec(df, "session", keys, timestamp, aggs, 0, 0, gap_us,
                 kw.pop("lateness", a.default_str("lateness")), kw.pop("partition_column", None),
                 kw.pop("idle_timeout", a.default_str("idle_timeout")),
                 kw.pop("buckets", None), kw.pop("metrics", a.default_str("metrics")),
                 kw.pop("emit_when_idle", a.default_bool("emit_when_idle")), kw.pop("state_location", None))
    if kw:
        raise WindowError(f"unknown argument(s) {sorted(kw)}")
    return _build(df, spec)


def _spec(df: DataFrame, kind: str, keys: Sequence[str], ts: str, aggs: Mapping[str, AggregateOperation],
          slide_us: int, k: int, gap_us: int, lateness: str, part_col: str | Sequence[str] | None,
          idle: str | None, buckets: int | None, metrics: str, emit_when_idle: bool,
          state_location: str | None) -> Spec:
    from pyspark.sql.types import StringType, TimestampNTZType, TimestampType

    cols = {f.name: f.dataType for f in df.schema.fields}
    if isinstance(keys, str):
        keys = [keys]
    part_cols = (part_col,) if isinstance(part_col, str) else tuple(part_col or ())
    for c in [*keys, ts, *part_cols]:
        if c not in cols:
            raise WindowError(f"column {c!r} is not in the DataFrame (columns: {sorted(cols)})")
    integers = ("tinyint", "smallint", "int", "bigint")
    if len(part_cols) == 1 and cols[part_cols[0]].simpleString() not in integers:
        raise WindowError(f"partition_column {part_cols[0]!r} has type {cols[part_cols[0]].simpleString()}; "
                          "give the integer source partition (the Kafka source's 'partition' column), or "
                          "the columns that name it together, e.g. ('topic', 'partition')")
    if part_cols == ("partition",) and isinstance(cols.get("topic"), StringType):
        part_cols = ("topic", "partition")  # the Kafka source's rows: one clock per topic-partition
    if not isinstance(cols[ts], TimestampType | TimestampNTZType):
        raise WindowError(f"timestamp column {ts!r} has type {cols[ts].simpleString()}; cast it to timestamp")
    if emit_when_idle and not idle:
        raise WindowError("emit_when_idle needs an idle_timeout (e.g. '60 seconds'): without one no "
                          "partition ever goes idle")
    if state_location is not None and emit_when_idle:
        raise WindowError("emit_when_idle needs Spark's state store (its timeouts wake idle buckets); drop "
                          "state_location, or emit_when_idle")
    if state_location is not None and df.isStreaming:
        state_location = versioned.check_location(state_location, local=native.has_jvm(df.sparkSession))
    if not aggs:
        raise WindowError("aggs is empty; give at least one, e.g. {'n': aggregate.count()}")
    ops = HIDDEN_COUNT.added_to(aggs)
    for name, op in aggs.items():
        if not isinstance(op, AggregateOperation):
            raise WindowError(f"aggs[{name!r}] is {op!r}; use spark_ext.windows.aggregate.count(), "
                              "sum(c), ...")
        for c in op.inputs:
            if c not in cols:
                raise WindowError(f"aggs[{name!r}] reads column {c!r}, which is not in the DataFrame")
        if name.endswith("_") or "__" in name:
            raise WindowError(f"aggs name {name!r} may not end with '_' or contain '__'; rename it")
        if name in keys or name in ("window_start", "window_end", HIDDEN_COUNT.name):
            raise WindowError(f"aggs name {name!r} clashes with a key or window column; rename it")
    if buckets is None:
        buckets = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or "200")
    needed = sorted({*keys, ts, *[c for op in ops.values() for c in op.inputs]})
    ev_schema = compat.to_arrow_schema(df.select(*needed).schema)
    key_fields = [ev_schema.field(c) for c in keys]
    state_fields = [f for p, op in ops.items() for f in op.state_fields(p, ev_schema)]
    bounds = [pa.field(fr.FRAME, pa.int64())] if kind == "sliding" else [
        pa.field(fr.SESSION_START, pa.int64()), pa.field(fr.SESSION_END, pa.int64())]
    partials = pa.schema([*key_fields, pa.field(BUCKET, pa.int64()), *bounds, *state_fields])
    results = [pa.field(p, op.result_type(op.state_types(ev_schema))) for p, op in aggs.items()]
    # Bounds take the input's kind of timestamp, as Spark's window() does.
    ts_type = pa.timestamp("us") if isinstance(cols[ts], TimestampNTZType) else pa.timestamp("us", tz="UTC")
    bounds_out = [pa.field("window_start", ts_type), pa.field("window_end", ts_type)]
    out = pa.schema([*key_fields, *bounds_out, *results])
    return Spec(kind, tuple(keys), ts, slide_us, k, gap_us, duration_us(lateness, "lateness"),
                duration_us(idle, "idle_timeout") if idle else None, part_cols, buckets, ops, partials, out,
                df.isStreaming, metrics, emit_when_idle, state_location if df.isStreaming else None)


def _spark_schema(schema: pa.Schema) -> Any:
    return compat.from_arrow_schema(schema)


def stage1_input(df: DataFrame, spec: Spec) -> DataFrame:
    """The columns stage 1 reads, with each row's ``BUCKET`` (and ``PART_KEY``)."""
    from pyspark.sql import functions as F

    needed = sorted({*spec.keys, spec.ts, *spec.part_cols,
                     *[c for op in spec.ops.values() for c in op.inputs]})
    bucket = F.pmod(F.xxhash64(*spec.keys), F.lit(spec.buckets)) if spec.keys else F.lit(0).cast("long")
    src = df.select(*needed).withColumn(BUCKET, bucket)
    if spec.part_col == PART_KEY:  # one integer clock key for a partition named by several columns
        src = src.withColumn(PART_KEY, F.xxhash64(*spec.part_cols))
    return src


def stage1_rows(src: DataFrame, spec: Spec) -> DataFrame:
    """Stage 1's wire rows: the JVM's fold when the session has it, else Python's."""
    partial = native.fold(src, spec)
    return partial if partial is not None else src.mapInArrow(stage1(spec), _spark_schema(WIRE))


def _build(df: DataFrame, spec: Spec) -> DataFrame:
    rows = stage1_rows(stage1_input(df, spec), spec)
    if not df.isStreaming:
        return rows.groupBy(BUCKET).applyInArrow(batch_stage2(spec), _spark_schema(spec.out_schema))
    if spec.state_location is not None:
        from pyspark.sql import functions as F

        # Spark puts the batch's timestamp from its offset log in current_timestamp(): a replay sees the same.
        timed = rows.withColumn(NOW, F.unix_micros(F.current_timestamp()))
        out = timed.groupBy(BUCKET).applyInArrow(files_stage2(spec), _spark_schema(spec.output.schema))
        return spec.output.observe(out, spec.metrics)
    from pyspark.sql.streaming.state import GroupStateTimeout

    out = rows.groupBy(BUCKET).applyInPandasWithState(
        stream_stage2(spec), _spark_schema(spec.output.schema), ws.STATE_SCHEMA, "append",
        GroupStateTimeout.ProcessingTimeTimeout if spec.emit_when_idle else GroupStateTimeout.NoTimeout)
    return spec.output.observe(out, spec.metrics)
