"""How ``spark_ext.windows`` moves partials between its stages and keeps them between batches.

- **The wire** (stage 1 -> shuffle -> stage 2): rows of ``WIRE``, never null so pandas
  keeps every column's type. Kind 0 carries one bucket's partials as an Arrow IPC stream
  (one row per bucket per task, so the shuffle moves a few blobs, not events); kind 1 one
  source partition's latest event time seen by the task, sent to every bucket.
- **A bucket's state** in Spark's state store (schema ``STATE_SCHEMA``): the partials it
  keeps, as Arrow IPC, and ``meta`` as JSON: the clock's state, the late-event total and the
  number of buckets the checkpoint was built with (a different number would move keys).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from spark_ext.clock import MIN, Clock
from spark_ext.frames import WindowError

BUCKET, KIND, PART, MAXTS, PAYLOAD = "__bucket", "__kind", "__part", "__maxts", "__payload"
WIRE = pa.schema([pa.field(BUCKET, pa.int64()), pa.field(KIND, pa.int64()), pa.field(PART, pa.int64()),
                  pa.field(MAXTS, pa.int64()), pa.field(PAYLOAD, pa.binary())])
STATE_SCHEMA = "frames binary, meta string"


def to_ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def from_ipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(blob).read_all()


def partial_rows(partials: pa.Table) -> dict[str, list[Any]]:
    """Kind-0 wire rows: ``partials`` (with a ``BUCKET`` column) cut into one blob per bucket."""
    buckets = partials.column(BUCKET).to_numpy()
    order = np.argsort(buckets, kind="stable")
    sb = buckets[order]
    starts: list[int] = np.flatnonzero(np.r_[True, sb[1:] != sb[:-1]]).tolist() if len(order) else []
    ends = [*starts[1:], len(order)]
    n = len(starts)
    return {BUCKET: [int(sb[i]) for i in starts], KIND: [0] * n, PART: [-1] * n, MAXTS: [MIN] * n,
            PAYLOAD: [to_ipc(partials.take(pa.array(order[i:j]))) for i, j in zip(starts, ends, strict=True)]}


def watermark_rows(ts: pa.Array, parts: pa.Array | None, buckets: int) -> dict[str, list[Any]]:
    """Kind-1 wire rows: per (bucket, source partition), the latest event time of the task
    (``parts`` None: one stream, partition 0)."""
    t = pa.table({"p": parts.cast(pa.int64()) if parts is not None else pa.array(np.zeros(len(ts), np.int64)),
                  "ts": ts.cast(pa.int64())})
    latest = t.drop_null().group_by("p").aggregate([("ts", "max")])
    ps, maxts = latest.column("p").to_pylist(), latest.column("ts_max").to_pylist()
    n = buckets * len(ps)
    return {BUCKET: [b for b in range(buckets) for _ in ps], KIND: [1] * n,
            PART: ps * buckets, MAXTS: maxts * buckets, PAYLOAD: [b""] * n}


def wire_batch(*parts: dict[str, list[Any]]) -> pa.RecordBatch:
    rows = {c: [v for p in parts for v in p[c]] for c in WIRE.names}
    return pa.RecordBatch.from_pydict(rows, schema=WIRE)


def read_partials(kinds: np.ndarray, payloads: Iterator[bytes] | list[bytes], schema: pa.Schema) -> pa.Table:
    """The partials of every kind-0 row, as one table of ``schema``."""
    tables = [from_ipc(p) for k, p in zip(kinds, payloads, strict=True) if k == 0]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def read_seen(kinds: np.ndarray, parts: np.ndarray, maxts: np.ndarray) -> Iterator[tuple[int, int]]:
    """(source partition, latest event time) of every kind-1 row, for the clock."""
    return zip(parts[kinds == 1], maxts[kinds == 1], strict=True)


def load(state: Any, buckets: int) -> tuple[pa.Table | None, dict[str, Any]]:
    """A bucket's kept partials and meta from Spark's ``GroupState``; fresh ones if none."""
    if not state.exists:
        return None, {**Clock.fresh(), "late": 0, "buckets": buckets}
    blob, text = state.get
    meta = json.loads(text)
    if meta.get("buckets", buckets) != buckets:
        raise WindowError(f"this checkpoint's window state was built with buckets={meta['buckets']}, "
                          f"now {buckets}; pass buckets={meta['buckets']} (keys would move)")
    return from_ipc(blob), meta


def save(state: Any, keep: pa.Table, meta: dict[str, Any]) -> None:
    state.update((to_ipc(keep), json.dumps(meta)))
