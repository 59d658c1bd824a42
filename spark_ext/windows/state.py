"""How ``spark_ext.windows`` moves partials between its stages and keeps them between batches.

Every column name and encoding the stages share lives here; the rest of the package sees
typed values only.

- **The wire** (stage 1 -> shuffle -> stage 2): rows of ``WIRE``, never null so pandas
  keeps every column's type. A ``RowKind.PARTIALS`` row carries one bucket's partials as an
  Arrow IPC stream (one row per bucket per task, so the shuffle moves a few blobs, not
  events); a ``RowKind.SEEN`` row one source partition's latest event time seen by the
  task, sent to every bucket. ``read_wire_*`` turn them back into a ``WireInput``.
- **A bucket's state** in Spark's state store (schema ``STATE_SCHEMA``): the partials it
  keeps, as Arrow IPC, and a ``BucketState`` as JSON (the clock's state, the late-event
  total and the number of buckets the checkpoint was built with: a different number would
  move keys). The JSON layout is the one checkpoints have always had
  (``{"wm", "parts": {"<partition>": [max_ts, last_seen]}, "now", "late", "buckets"}``), so
  old checkpoints load and older code can still read new ones.
- **The late count's way out** (``StreamOutput``): Spark's ``applyInPandasWithState`` has a
  single output, so a call's ``LateEvents`` travel as one marker row in a ``__late`` column
  beside the windows, and ``StreamOutput.observe`` turns them into the observed metric.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from spark_ext import formats
from spark_ext.windows.clock import MIN, ClockState, PartitionMark, Seen
from spark_ext.windows.frames import WindowError
from spark_ext.windows.windower import LateEvents

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

BUCKET, KIND, PART, MAXTS, PAYLOAD = "__bucket", "__kind", "__part", "__maxts", "__payload"
PART_KEY = "__part_key"  # stage-1 input: the hash of the columns that name a row's source partition
WIRE = pa.schema([pa.field(BUCKET, pa.int64()), pa.field(KIND, pa.int64()), pa.field(PART, pa.int64()),
                  pa.field(MAXTS, pa.int64()), pa.field(PAYLOAD, pa.binary())])
STATE_SCHEMA = "frames binary, meta string"
NOW = "__now"  # stage 2 with state_location: the batch's timestamp (µs), beside the wire rows
LATE = "__late"


class RowKind(IntEnum):
    """What a wire row carries; the value is what the ``__kind`` column holds."""

    PARTIALS = 0
    SEEN = 1


def to_ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def from_ipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(blob).read_all()


# --- the wire ----------------------------------------------------------------------------------


def partial_rows(partials: pa.Table) -> dict[str, list[Any]]:
    """``PARTIALS`` wire rows: ``partials`` (with a ``BUCKET`` column) cut into one blob per bucket."""
    buckets = partials.column(BUCKET).to_numpy()
    order = np.argsort(buckets, kind="stable")
    sb = buckets[order]
    starts: list[int] = np.flatnonzero(np.r_[True, sb[1:] != sb[:-1]]).tolist() if len(order) else []
    ends = [*starts[1:], len(order)] if starts else []  # no partials: every timestamp was null
    n = len(starts)
    return {BUCKET: [int(sb[i]) for i in starts], KIND: [int(RowKind.PARTIALS)] * n, PART: [-1] * n,
            MAXTS: [MIN] * n,
            PAYLOAD: [to_ipc(partials.take(pa.array(order[i:j]))) for i, j in zip(starts, ends, strict=True)]}


def watermark_rows(ts: pa.Array, parts: pa.Array | None, buckets: int) -> dict[str, list[Any]]:
    """``SEEN`` wire rows: per (bucket, source partition), the latest event time of the task
    (``parts`` None: one stream, partition 0)."""
    t = pa.table({"p": parts.cast(pa.int64()) if parts is not None else pa.array(np.zeros(len(ts), np.int64)),
                  "ts": ts.cast(pa.int64())})
    latest = t.drop_null().group_by("p").aggregate([("ts", "max")])
    ps, maxts = latest.column("p").to_pylist(), latest.column("ts_max").to_pylist()
    n = buckets * len(ps)
    return {BUCKET: [b for b in range(buckets) for _ in ps], KIND: [int(RowKind.SEEN)] * n,
            PART: ps * buckets, MAXTS: maxts * buckets, PAYLOAD: [b""] * n}


def wire_batch(*parts: dict[str, list[Any]]) -> pa.RecordBatch:
    rows = {c: [v for p in parts for v in p[c]] for c in WIRE.names}
    return pa.RecordBatch.from_pydict(rows, schema=WIRE)


@dataclass(frozen=True)
class WireInput:
    """What one stage-2 call received: the partials, and the seen marks for the clock."""

    partials: pa.Table
    seen: Sequence[Seen]


def _read_wire(kinds: np.ndarray, parts: np.ndarray, maxts: np.ndarray, payloads: Iterable[bytes],
               schema: pa.Schema) -> WireInput:
    tables = [from_ipc(p) for k, p in zip(kinds, payloads, strict=True) if k == RowKind.PARTIALS]
    seen = kinds == RowKind.SEEN
    marks = [(int(p), int(t)) for p, t in zip(parts[seen], maxts[seen], strict=True)]
    return WireInput(pa.concat_tables(tables) if tables else schema.empty_table(), marks)


def read_wire_table(table: pa.Table, schema: pa.Schema) -> WireInput:
    """Wire rows as Arrow (batch stage 2); ``schema``: the partials'."""
    return _read_wire(table.column(KIND).to_numpy(), table.column(PART).to_numpy(),
                      table.column(MAXTS).to_numpy(), table.column(PAYLOAD).to_pylist(), schema)


def read_wire_frames(frames: list[pd.DataFrame], schema: pa.Schema) -> WireInput:
    """Wire rows as pandas (streaming stage 2; none when Spark wakes an idle bucket)."""
    if not frames:
        return WireInput(schema.empty_table(), [])
    import pandas as pd

    wire = pd.concat(frames, ignore_index=True)
    return _read_wire(wire[KIND].to_numpy(), wire[PART].to_numpy(), wire[MAXTS].to_numpy(),
                      wire[PAYLOAD].tolist(), schema)


# --- a bucket's state --------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowDefinition:
    """What a checkpoint's partials mean. A restart must build the same windows (frame
    indices and partial states are read under it); only the clock's key may change."""

    kind: str  # "sliding" or "session"
    size_us: int  # sliding: the window's size; 0 for sessions
    slide_us: int  # sliding: the frame's length; 0 for sessions
    gap_us: int  # session: the gap; 0 for sliding
    keys: tuple[str, ...]
    results: tuple[str, ...]  # the aggregations' output columns
    partials: str  # a digest of the partial states' columns and types
    clock: tuple[str, ...] = ()  # the columns naming a source partition

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "size_us": self.size_us, "slide_us": self.slide_us, "gap_us": self.gap_us,
                "keys": list(self.keys), "results": list(self.results), "partials": self.partials,
                "clock": list(self.clock)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> WindowDefinition:
        return WindowDefinition(str(d["kind"]), int(d["size_us"]), int(d["slide_us"]), int(d["gap_us"]),
                                tuple(d["keys"]), tuple(d["results"]), str(d["partials"]),
                                tuple(d.get("clock", ())))

    def changes(self, now: WindowDefinition) -> list[str]:
        """What differs in ``now`` that would misread this definition's state, readably."""
        out = []
        for name, a, b in (("kind", self.kind, now.kind), ("size", self.size_us, now.size_us),
                           ("slide", self.slide_us, now.slide_us), ("gap", self.gap_us, now.gap_us),
                           ("keys", self.keys, now.keys), ("aggregations", self.results, now.results)):
            if a != b:
                out.append(f"{name} {_show(name, a)} -> {_show(name, b)}")
        if not out and self.partials != now.partials:
            out.append("an aggregation's state or an input column's type")
        return out


def _show(name: str, v: Any) -> str:
    if name in ("size", "slide", "gap"):
        return f"{v / 1e6:g} s"
    return ", ".join(v) if isinstance(v, tuple) else str(v)


@dataclass(frozen=True)
class BucketState:
    """What a bucket keeps between batches besides its partials."""

    buckets: int  # the number of buckets the checkpoint was built with
    clock: ClockState = field(default_factory=ClockState)
    late_total: int = 0  # events dropped as late, over the query's life
    definition: WindowDefinition | None = None  # None in checkpoints written before it was kept

    def after(self, clock: ClockState, late: LateEvents) -> BucketState:
        """This state once a call moved the clock to ``clock`` and dropped ``late``."""
        return BucketState(self.buckets, clock, self.late_total + late.events, self.definition)


def encode_meta(state: BucketState) -> str:
    """The JSON checkpoints have always held (see the module doc), and the definition."""
    c = state.clock
    meta: dict[str, Any] = {formats.KEY: formats.WINDOW_STATE.current, "wm": c.watermark,
                            "parts": {str(p): [m.max_ts, m.last_seen] for p, m in c.parts.items()},
                            "late": state.late_total, "buckets": state.buckets}
    if c.now is not None:  # absent before the first call, as it always was
        meta["now"] = c.now
    if state.definition is not None:
        meta["def"] = state.definition.to_json()
    return json.dumps(meta)


def decode_meta(text: str, buckets: int) -> BucketState:
    """``encode_meta``'s JSON back; ``buckets``: today's, assumed when the JSON names none."""
    meta = json.loads(text)
    formats.WINDOW_STATE.of(meta, "the query's checkpoint (the windows' state store)")
    parts = {int(p): PartitionMark(int(v[0]), float(v[1])) for p, v in meta.get("parts", {}).items()}
    now = meta.get("now")
    clock = ClockState(int(meta.get("wm", MIN)), parts, None if now is None else float(now))
    definition = WindowDefinition.from_json(meta["def"]) if "def" in meta else None
    return BucketState(int(meta.get("buckets", buckets)), clock, int(meta.get("late", 0)), definition)


def load(state: Any, buckets: int, definition: WindowDefinition) -> tuple[pa.Table | None, BucketState]:
    """A bucket's kept partials and state from Spark's ``GroupState``; fresh ones if none."""
    if not state.exists:
        return None, BucketState(buckets, definition=definition)
    blob, text = state.get
    return restore(from_ipc(blob), text, buckets, definition)


def restore(partials: pa.Table | None, text: str | None, buckets: int,
            definition: WindowDefinition) -> tuple[pa.Table | None, BucketState]:
    """A bucket's kept partials and its ``encode_meta`` JSON, checked; fresh state if ``text``
    is None (nothing kept yet).

    Refuses state built with other buckets or another window definition: keys would move
    and frames be read under another slide, silently wrong. A changed clock key only
    forgets the partitions' marks (the watermark stays), as marks under the old key would
    never be seen again and would hold the watermark back for good.
    """
    if text is None:
        return None, BucketState(buckets, definition=definition)
    kept = decode_meta(text, buckets)
    if kept.buckets != buckets:
        raise WindowError(f"this checkpoint's window state was built with buckets={kept.buckets}, "
                          f"now {buckets}; pass buckets={kept.buckets} (keys would move)")
    old = kept.definition
    if old is not None and (changed := old.changes(definition)):
        raise WindowError(f"this checkpoint's windows were built with another definition "
                          f"({'; '.join(changed)}); restart with the definition it was built with, or "
                          "give the query a new checkpointLocation to start over")
    # Checkpoints from before the definition was kept knew single-column clock keys only.
    old_clock = old.clock if old is not None else definition.clock[:1]
    clock = kept.clock
    if old_clock != definition.clock and clock.parts:
        log.warning("the windows' partition columns changed (%s -> %s): the clock forgets its partitions "
                    "and relearns them; the watermark stays at %s", ", ".join(old_clock) or "none",
                    ", ".join(definition.clock) or "none", clock.watermark)
        clock = ClockState(clock.watermark, {}, clock.now)
    return partials, BucketState(kept.buckets, clock, kept.late_total, definition)


def save(state: Any, keep: pa.Table, bucket: BucketState) -> None:
    state.update((to_ipc(keep), encode_meta(bucket)))


# --- the late count's way out ------------------------------------------------------------------


@dataclass(frozen=True)
class StreamOutput:
    """What streaming stage 2 returns to Spark: the windows (``windows``: their schema) and,
    when a call dropped late events, one marker row carrying the count (null on windows)."""

    windows: pa.Schema

    @property
    def schema(self) -> pa.Schema:
        # Nullable throughout: the marker row is null everywhere but in the count.
        return pa.schema([*(f.with_nullable(True) for f in self.windows), pa.field(LATE, pa.int64())])

    def rows(self, out: pa.Table, late: LateEvents) -> pa.Table:
        """``out`` (in ``windows``' schema) and, if ``late`` holds any, the marker row."""
        schema = self.schema
        fields = list(schema)[:-1]
        windows = out.cast(pa.schema(fields)).append_column(LATE, pa.nulls(out.num_rows, pa.int64()))
        if not late.events:
            return windows
        marker = pa.table({f.name: pa.nulls(1, f.type) for f in fields}
                          | {LATE: pa.array([late.events], pa.int64())}, schema=schema)
        return pa.concat_tables([windows, marker])

    @staticmethod
    def observe(df: DataFrame, metrics: str) -> DataFrame:
        """The windows of stage 2's output ``df``; the late counts go to the query's progress
        as the observed metric ``late_events`` of ``metrics``, per batch."""
        from pyspark.sql import functions as F

        late = F.coalesce(F.sum(LATE), F.lit(0)).alias("late_events")
        return df.observe(metrics, late).where(F.col(LATE).isNull()).drop(LATE)
