"""Frame-aggregated windows on Spark DataFrames, batch or streaming (Jet's windowing).

``tumbling`` / ``sliding`` / ``session`` return keys..., ``window_start``, ``window_end``
(timestamps), then one column per ``aggs`` entry: the same rows as Spark's
``groupBy(window(ts, size, slide))`` / ``session_window`` aggregation, without copying each
event size/slide times.

Two stages, both vectorised over Arrow (``frames.py``, ``aggregate.py``):

1. Executor, stateless (``mapInArrow``): each input partition folds its events into one
   partial state per (key, frame) (or per partial session), so the shuffle moves frames,
   not events. Each task also reports, to every bucket, the latest event time it saw per
   source partition (``partition_column``, e.g. Kafka's ``partition``).
2. Per bucket of keys (``pmod(xxhash64(keys), buckets)``, stable across runs): merge the
   partial frames. Batch: emit every window. Streaming (``applyInPandasWithState``): the
   frames live in Spark's state store, so the checkpoint is the snapshot and a restart
   resumes them; windows are emitted once the coalesced watermark passes their end, and
   frames no open window needs are purged.

Watermark coalescing (against stream skew): the watermark is the minimum, over source
partitions that are not idle, of each partition's latest event time, minus ``lateness``.
A lagging Kafka partition therefore holds the watermark back instead of having its
events dropped as late, as Spark's global ``max - delay`` would. A partition with no
events for ``idle_timeout`` (processing time) stops holding it back. Late events (every
window they belong to already emitted) are dropped, logged, and counted per batch in the
query's progress (observed metrics ``windows.late_events``, see ``sliding``). Windows are
emitted when a batch with data arrives, and with ``emit_when_idle`` also when partitions
go idle without new input (Spark's processing-time timeouts wake the buckets); the
number of buckets must stay the same across restarts (checked).

Stage 2 is three parts, as bytewax splits clock, windower and logic: the clock (coalesced
watermark, idleness) is ``spark_ext.clock``; the windower (which windows a partial belongs
to, which are closed, what is late) is ``spark_ext.windower``; how partials travel and the
state persists is ``spark_ext.window_state``. This module wires them into Spark.

Sessions are merged per input partition before the shuffle, so the late rule applies to
a partial session as a whole (dropped only when it ends at or before the watermark), as
Spark does with ``spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition``;
with the default Spark drops late events one by one. In-order input (or disorder within
``lateness``) gives identical sessions either way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_ext import aggregate as agg
from spark_ext import compat, failpoints
from spark_ext import frames as fr
from spark_ext import window_state as ws
from spark_ext.aggregate import AggregateOperation
from spark_ext.clock import MIN, Clock
from spark_ext.frames import WindowError
from spark_ext.window_state import BUCKET, KIND, MAXTS, PART, PAYLOAD, WIRE
from spark_ext.windower import SessionWindower, SlidingWindower, Windower, drop_late

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

LATE = "__late"
_COUNT = "hzn"  # hidden event count: emptiness and late-event accounting
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


@dataclass(frozen=True)
class _Spec:
    """Everything both stages need (pickled to executors)."""

    kind: str  # "sliding" or "session"
    keys: tuple[str, ...]
    ts: str
    slide_us: int
    frames_per_window: int  # window size / slide
    gap_us: int
    lateness_us: int
    idle_us: int | None
    part_col: str | None
    buckets: int
    ops: Mapping[str, AggregateOperation]
    stage1_schema: pa.Schema  # partial frames / sessions: keys, bucket, bounds, states
    out_schema: pa.Schema
    streaming: bool
    metrics: str = "windows"  # the observed metrics' name in the query's progress
    emit_when_idle: bool = False  # wake idle buckets (Spark's processing-time timeouts)

    @property
    def stream_schema(self) -> pa.Schema:
        """What streaming stage 2 returns: the windows, nullable, plus the late count (null
        on a window; set on the one row per call that carries late events)."""
        return pa.schema([*(f.with_nullable(True) for f in self.out_schema), pa.field(LATE, pa.int64())])

    @property
    def group(self) -> list[str]:
        return [*self.keys, BUCKET]

    @property
    def windower(self) -> Windower:
        if self.kind == "sliding":
            k = self.frames_per_window
            return SlidingWindower(tuple(self.group), self.ts, self.ops, self.slide_us, k)
        return SessionWindower(tuple(self.group), self.ts, self.ops, self.gap_us)


def tumbling(df: DataFrame, keys: Sequence[str], timestamp: str, size: str,
             aggs: Mapping[str, AggregateOperation], **kw: Any) -> DataFrame:
    """Windows ``[n * size, (n + 1) * size)``; see ``sliding`` for the options."""
    return sliding(df, keys, timestamp, size, size, aggs, **kw)


def sliding(df: DataFrame, keys: Sequence[str], timestamp: str, size: str, slide: str,
            aggs: Mapping[str, AggregateOperation], *, lateness: str = "0 seconds",
            partition_column: str | None = None, idle_timeout: str | None = "60 seconds",
            buckets: int | None = None, metrics: str = "windows", emit_when_idle: bool = False) -> DataFrame:
    """Windows of ``size`` every ``slide`` (size a multiple of slide), per key. Driver.

    ``lateness``: how far behind the coalesced watermark an event may be. ``partition_column``:
    the source partition of each row (Kafka: ``partition``), coalesced over as in Jet;
    ``None`` treats the input as one stream. ``metrics``: in streaming, the name of the
    observed metrics in the query's progress, ``late_events`` being the events dropped as
    late in that batch (``lastProgress["observedMetrics"]["windows"]["late_events"]``); give
    each windowed aggregation of one query its own. ``emit_when_idle``: in streaming, emit
    the windows the watermark passes while no input arrives (a partition going idle, or the
    input stopping), within about one trigger interval; it needs a ``processingTime``
    trigger (Spark then runs a batch every trigger, and would never end an ``availableNow``
    query) and an ``idle_timeout`` of at least twice the trigger interval. Bad arguments
    raise ``WindowError`` here.
    """
    size_us, slide_us = duration_us(size, "size"), duration_us(slide, "slide")
    spec = _spec(df, "sliding", keys, timestamp, aggs, slide_us, fr.frames_per_window(size_us, slide_us), 0,
                 lateness, partition_column, idle_timeout, buckets, metrics, emit_when_idle)
    return _build(df, spec)


def session(df: DataFrame, keys: Sequence[str], timestamp: str, timeout: str,
            aggs: Mapping[str, AggregateOperation], **kw: Any) -> DataFrame:
    """Session windows: events of a key closer than ``timeout`` share one window
    ``[first, last + timeout)``, merged across batches in any arrival order."""
    gap_us = duration_us(timeout, "timeout")
    if gap_us <= 0:
        raise WindowError("timeout must be positive, e.g. '30 seconds'")
    spec = _spec(df, "session", keys, timestamp, aggs, 0, 0, gap_us, kw.pop("lateness", "0 seconds"),
                 kw.pop("partition_column", None), kw.pop("idle_timeout", "60 seconds"),
                 kw.pop("buckets", None), kw.pop("metrics", "windows"), kw.pop("emit_when_idle", False))
    if kw:
        raise WindowError(f"unknown argument(s) {sorted(kw)}")
    return _build(df, spec)


def _spec(df: DataFrame, kind: str, keys: Sequence[str], ts: str, aggs: Mapping[str, AggregateOperation],
          slide_us: int, k: int, gap_us: int, lateness: str, part_col: str | None, idle: str | None,
          buckets: int | None, metrics: str, emit_when_idle: bool) -> _Spec:
    from pyspark.sql.types import TimestampNTZType, TimestampType

    cols = {f.name: f.dataType for f in df.schema.fields}
    if isinstance(keys, str):
        keys = [keys]
    for c in [*keys, ts, *([part_col] if part_col else [])]:
        if c not in cols:
            raise WindowError(f"column {c!r} is not in the DataFrame (columns: {sorted(cols)})")
    if part_col and cols[part_col].simpleString() not in ("tinyint", "smallint", "int", "bigint"):
        raise WindowError(f"partition_column {part_col!r} has type {cols[part_col].simpleString()}; give the "
                          "integer source partition (the Kafka source's 'partition' column)")
    if not isinstance(cols[ts], TimestampType | TimestampNTZType):
        raise WindowError(f"timestamp column {ts!r} has type {cols[ts].simpleString()}; cast it to timestamp")
    if emit_when_idle and not idle:
        raise WindowError("emit_when_idle needs an idle_timeout (e.g. '60 seconds'): without one no "
                          "partition ever goes idle")
    if not aggs:
        raise WindowError("aggs is empty; give at least one, e.g. {'n': aggregate.count()}")
    ops: dict[str, AggregateOperation] = {**aggs, _COUNT: agg.count()}
    for name, op in aggs.items():
        if not isinstance(op, AggregateOperation):
            raise WindowError(f"aggs[{name!r}] is {op!r}; use spark_ext.aggregate.count(), sum(c), ...")
        for c in op.inputs:
            if c not in cols:
                raise WindowError(f"aggs[{name!r}] reads column {c!r}, which is not in the DataFrame")
        if name.endswith("_") or "__" in name:
            raise WindowError(f"aggs name {name!r} may not end with '_' or contain '__'; rename it")
        if name in keys or name in ("window_start", "window_end", _COUNT):
            raise WindowError(f"aggs name {name!r} clashes with a key or window column; rename it")
    if buckets is None:
        buckets = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or "200")
    needed = sorted({*keys, ts, *[c for op in ops.values() for c in op.inputs]})
    ev_schema = compat.to_arrow_schema(df.select(*needed).schema, timezone="UTC")
    key_fields = [ev_schema.field(c) for c in keys]
    state_fields = [f for p, op in ops.items() for f in op.state_fields(p, ev_schema)]
    bounds = [pa.field(fr.FRAME, pa.int64())] if kind == "sliding" else [
        pa.field(fr.SESSION_START, pa.int64()), pa.field(fr.SESSION_END, pa.int64())]
    stage1 = pa.schema([*key_fields, pa.field(BUCKET, pa.int64()), *bounds, *state_fields])
    results = [pa.field(p, op.result_type(op.state_types(ev_schema))) for p, op in aggs.items()]
    # Bounds take the input's kind of timestamp, as Spark's window() does.
    ts_type = pa.timestamp("us") if isinstance(cols[ts], TimestampNTZType) else pa.timestamp("us", tz="UTC")
    bounds_out = [pa.field("window_start", ts_type), pa.field("window_end", ts_type)]
    out = pa.schema([*key_fields, *bounds_out, *results])
    return _Spec(kind, tuple(keys), ts, slide_us, k, gap_us, duration_us(lateness, "lateness"),
                 duration_us(idle, "idle_timeout") if idle else None, part_col, buckets, ops, stage1, out,
                 df.isStreaming, metrics, emit_when_idle)


def _spark_schema(schema: pa.Schema) -> Any:

    return compat.from_arrow_schema(schema)


def _build(df: DataFrame, spec: _Spec) -> DataFrame:
    from pyspark.sql import functions as F

    needed = sorted({*spec.keys, spec.ts, *([spec.part_col] if spec.part_col else []),
                     *[c for op in spec.ops.values() for c in op.inputs]})
    bucket = F.pmod(F.xxhash64(*spec.keys), F.lit(spec.buckets)) if spec.keys else F.lit(0).cast("long")
    src = df.select(*needed).withColumn(BUCKET, bucket)
    partial = src.mapInArrow(_stage1(spec), _spark_schema(WIRE))
    grouped = partial.groupBy(BUCKET)
    if not df.isStreaming:
        return grouped.applyInArrow(_batch_stage2(spec), _spark_schema(spec.out_schema))
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    out = grouped.applyInPandasWithState(
        _stream_stage2(spec), _spark_schema(spec.stream_schema), ws.STATE_SCHEMA, "append",
        GroupStateTimeout.ProcessingTimeTimeout if spec.emit_when_idle else GroupStateTimeout.NoTimeout)
    # Late events reach the query's progress as an observed metric, per batch.
    late = F.coalesce(F.sum(LATE), F.lit(0)).alias("late_events")
    return out.observe(spec.metrics, late).where(F.col(LATE).isNull()).drop(LATE)


# --- stage 1: executor, per input partition ----------------------------------------------------


def _stage1(spec: _Spec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    windower = spec.windower

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        chunks = [b for b in batches if b.num_rows]
        if not chunks:  # Spark calls us for empty partitions too
            return
        events = pa.Table.from_batches(chunks)
        part = windower.fold(events).select(spec.stage1_schema.names).cast(spec.stage1_schema)
        rows = [ws.partial_rows(part)]
        if spec.streaming:
            parts = events.column(spec.part_col) if spec.part_col else None
            rows.append(ws.watermark_rows(events.column(spec.ts), parts, spec.buckets))
        yield ws.wire_batch(*rows)
    return run


# --- stage 2: per bucket -------------------------------------------------------------------------


def _emit(spec: _Spec, state: pa.Table, wm_before: int, wm: int) -> tuple[pa.Table, pa.Table]:
    """(windows to emit, in the output schema; partials to keep) once the watermark moved."""
    out, keep = spec.windower.emit(state, wm_before, wm)
    if out is None:
        return spec.out_schema.empty_table(), keep
    return out.select(spec.out_schema.names).cast(spec.out_schema), keep


def _batch_stage2(spec: _Spec) -> Callable[[pa.Table], pa.Table]:
    def run(table: pa.Table) -> pa.Table:
        partial = ws.read_partials(table.column(KIND).to_numpy(), table.column(PAYLOAD).to_pylist(),
                                   spec.stage1_schema)
        out, _ = _emit(spec, partial, MIN, -MIN)
        return out
    return run


def _stream_stage2(spec: _Spec) -> Callable[[Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """Per bucket and batch: the clock moves the watermark, late partials are dropped, the
    new ones join the kept state, the windows the watermark closed are emitted."""
    clock = Clock(spec.lateness_us, spec.idle_us)
    windower = spec.windower

    def run(key: Any, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        _failpoint()
        import pandas as pd

        chunks = list(pdfs)  # none when Spark wakes an idle bucket (emit_when_idle)
        wire = pd.concat(chunks, ignore_index=True) if chunks else pd.DataFrame({c: [] for c in WIRE.names})
        kept, meta = ws.load(state, spec.buckets)
        # The batch's processing time from the offset log: the same when a batch is replayed.
        now = float(state.getCurrentProcessingTimeMs()) * 1000
        kind = wire[KIND].to_numpy()
        seen = ws.read_seen(kind, wire[PART].to_numpy(), wire[MAXTS].to_numpy())
        wm_before, wm = clock.advance(meta, now, seen)
        new = ws.read_partials(kind, wire[PAYLOAD].tolist(), spec.stage1_schema)
        new, late = drop_late(windower, new, wm_before, f"{_COUNT}__n")  # the hidden count op's state
        if late:
            meta["late"] += late
            log.warning("dropped %s late events (every window they belong to was already emitted; "
                        "%s in total); raise 'lateness' to keep them", late, meta["late"])
        out, keep = _emit(spec, pa.concat_tables([t for t in (kept, new) if t is not None]), wm_before, wm)
        ws.save(state, keep, meta)
        wake = clock.wake_in(meta, now) if spec.emit_when_idle else None
        if wake is not None:
            state.setTimeoutDuration(int(wake // 1000))
        if out.num_rows or late:
            yield _with_late(spec, out, late).to_pandas(integer_object_nulls=True)
    return run


def _with_late(spec: _Spec, out: pa.Table, late: int) -> pa.Table:
    """The windows (late count null) and, when events were dropped, one row carrying the count."""
    schema = spec.stream_schema
    fields = list(schema)[:-1]
    windows = out.cast(pa.schema(fields)).append_column(LATE, pa.nulls(out.num_rows, pa.int64()))
    if not late:
        return windows
    marker = pa.table({f.name: pa.nulls(1, f.type) for f in fields} | {LATE: pa.array([late], pa.int64())},
                      schema=schema)
    return pa.concat_tables([windows, marker])


def _failpoint() -> None:
    ident = compat.task_identity()
    failpoints.hit("windows.stage2", ident.batch_id if ident is not None else None)
