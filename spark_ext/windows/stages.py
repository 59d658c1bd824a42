"""The two stages of ``spark_ext.windows``, as the functions Spark runs on executors.

1. Per input partition, stateless (``mapInArrow``): events folded into partials, plus the
   latest event time per source partition (streaming), sent as wire rows (``state.py``).
2. Per bucket of keys: batch (``applyInArrow``) merges and emits every window; streaming
   moves the clock, drops late partials, keeps the rest and emits the windows the
   watermark closed, keeping them in Spark's state store (``applyInPandasWithState``) or,
   with ``state_location``, in versioned files (``applyInArrow``, ``versioned.py``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_ext import compat, failpoints, worker_heap
from spark_ext.windows import state as ws
from spark_ext.windows import versioned
from spark_ext.windows.aggregate import AggregateOperation
from spark_ext.windows.clock import MIN, Clock
from spark_ext.windows.frames import WindowError
from spark_ext.windows.state import BUCKET, NOW, PART_KEY
from spark_ext.windows.windower import LateEvents, SessionWindower, SlidingWindower, Windower, drop_late

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Spec:
    """Everything both stages need (pickled to executors)."""

    kind: str  # "sliding" or "session"
    keys: tuple[str, ...]
    ts: str
    slide_us: int
    frames_per_window: int  # window size / slide
    gap_us: int
    lateness_us: int
    idle_us: int | None
    part_cols: tuple[str, ...]  # the columns naming a row's source partition; () for one stream
    buckets: int
    ops: Mapping[str, AggregateOperation]  # the user's and the hidden count
    stage1_schema: pa.Schema  # partial frames / sessions: keys, bucket, bounds, states
    out_schema: pa.Schema
    streaming: bool
    metrics: str = "windows"  # the observed metrics' name in the query's progress
    emit_when_idle: bool = False  # wake idle buckets (Spark's processing-time timeouts)
    state_location: str | None = None  # streaming: keep the partials in files there (versioned.py)

    @property
    def part_col(self) -> str | None:
        """The stage-1 input column holding each row's integer clock key, if any."""
        if not self.part_cols:
            return None
        return self.part_cols[0] if len(self.part_cols) == 1 else PART_KEY

    @property
    def definition(self) -> ws.WindowDefinition:
        """What the kept state means; a restart must build the same."""
        sliding = self.kind == "sliding"
        shape = ";".join(f"{f.name}:{f.type}" for f in self.stage1_schema)
        size_us, slide_us = (self.slide_us * self.frames_per_window, self.slide_us) if sliding else (0, 0)
        return ws.WindowDefinition(
            self.kind, size_us, slide_us, 0 if sliding else self.gap_us, self.keys,
            tuple(self.out_schema.names[len(self.keys) + 2:]),
            hashlib.sha256(shape.encode()).hexdigest()[:16], self.part_cols)

    @property
    def output(self) -> ws.StreamOutput:
        """What streaming stage 2 returns: the windows and the late counts."""
        return ws.StreamOutput(self.out_schema)

    @property
    def group(self) -> list[str]:
        return [*self.keys, BUCKET]

    @property
    def windower(self) -> Windower:
        if self.kind == "sliding":
            k = self.frames_per_window
            return SlidingWindower(tuple(self.group), self.ts, self.ops, self.slide_us, k)
        return SessionWindower(tuple(self.group), self.ts, self.ops, self.gap_us)


# --- stage 1: executor, per input partition ----------------------------------------------------


def stage1(spec: Spec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    windower = spec.windower

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        worker_heap.settle()
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


def _emit(spec: Spec, state: pa.Table, wm_before: int, wm: int) -> tuple[pa.Table, pa.Table]:
    """(windows to emit, in the output schema; partials to keep) once the watermark moved."""
    out, keep = spec.windower.emit(state, wm_before, wm)
    if out is None:
        return spec.out_schema.empty_table(), keep
    return out.select(spec.out_schema.names).cast(spec.out_schema), keep


def batch_stage2(spec: Spec) -> Callable[[pa.Table], pa.Table]:
    def run(table: pa.Table) -> pa.Table:
        worker_heap.settle()
        out, _ = _emit(spec, ws.read_wire_table(table, spec.stage1_schema).partials, MIN, -MIN)
        return out
    return run


@dataclass(frozen=True)
class Step:
    """What one streaming stage-2 call decided for a bucket."""

    out: pa.Table  # the windows the watermark closed, in the output schema
    keep: pa.Table  # the partials to keep
    bucket: ws.BucketState
    late: LateEvents
    wake: float | None  # emit_when_idle: when to be woken again (µs from now)


def _step(spec: Spec, clock: Clock, wire: ws.WireInput, kept: pa.Table | None, bucket: ws.BucketState,
          now: float) -> Step:
    """The clock moves the watermark, late partials are dropped, the new ones join the kept
    state, the windows the watermark closed are emitted. ``now``: the batch's processing
    time from Spark's offset log (µs), the same when a batch is replayed."""
    moved = clock.advance(bucket.clock, now, wire.seen)
    wm_before, wm = bucket.clock.watermark, moved.watermark
    new, late = drop_late(spec.windower, wire.partials, wm_before)
    bucket = bucket.after(moved, late)
    if late.events:
        log.warning("dropped %s late events (every window they belong to was already emitted; "
                    "%s in total); raise 'lateness' to keep them", late.events, bucket.late_total)
    out, keep = _emit(spec, pa.concat_tables([t for t in (kept, new) if t is not None]), wm_before, wm)
    wake = clock.wake_in(moved, now) if spec.emit_when_idle else None
    return Step(out, keep, bucket, late, wake)


def stream_stage2(spec: Spec) -> Callable[[Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """Per bucket and batch (``applyInPandasWithState``): the partials kept in Spark's state store."""
    clock = Clock(spec.lateness_us, spec.idle_us)
    output = spec.output
    definition = spec.definition

    def run(key: Any, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        worker_heap.settle()
        _failpoint()
        wire = ws.read_wire_frames(list(pdfs), spec.stage1_schema)
        kept, bucket = ws.load(state, spec.buckets, definition)
        step = _step(spec, clock, wire, kept, bucket, float(state.getCurrentProcessingTimeMs()) * 1000)
        ws.save(state, step.keep, step.bucket)
        if step.wake is not None:
            state.setTimeoutDuration(int(step.wake // 1000))
        if step.out.num_rows or step.late.events:
            yield output.rows(step.out, step.late).to_pandas(integer_object_nulls=True)
    return run


def files_stage2(spec: Spec) -> Callable[[pa.Table], pa.Table]:
    """Per bucket and batch (``applyInArrow``): the partials kept in versioned files under
    ``spec.state_location`` (``versioned.py``). Each call's rows carry the batch's timestamp
    (``NOW``)."""
    location = spec.state_location
    if location is None:
        raise WindowError("files_stage2 needs a state_location")
    clock = Clock(spec.lateness_us, spec.idle_us)
    output = spec.output
    definition = spec.definition

    def run(table: pa.Table) -> pa.Table:
        worker_heap.settle()
        _failpoint()
        ident = compat.task_identity()
        if ident is None or ident.batch_id is None or not ident.query_id:
            raise WindowError("state_location is for streaming queries: this task runs outside one")
        files = versioned.BucketFiles.at(location, ident.query_id, spec.metrics,
                                         int(table.column(BUCKET)[0].as_py()))
        before = files.read_before(ident.batch_id)
        kept, bucket = ws.restore(before.partials if before else None, before.meta if before else None,
                                  spec.buckets, definition)
        now = float(table.column(NOW)[0].as_py())
        step = _step(spec, clock, ws.read_wire_table(table, spec.stage1_schema), kept, bucket, now)
        files.write(ident.batch_id, before, step.keep, ws.encode_meta(step.bucket))
        failpoints.hit("windows.state_written", ident.batch_id)
        if before is not None:
            files.purge(below=before.batch_id)
        return output.rows(step.out, step.late)
    return run


def _failpoint() -> None:
    ident = compat.task_identity()
    failpoints.hit("windows.stage2", ident.batch_id if ident is not None else None)
