"""Kafka record batches for codec tests: built with aiokafka's builder, and read back row by
row with aiokafka's decoder the way the source read them before the C decoder (the
reference the C decoder must agree with, record for record)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c

Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...] | None]
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass
class Spec:
    """One record batch: its records (key, value, headers, timestamp delta), codec, producer."""

    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]
    codec: int = 0
    producer_id: int = -1
    transactional: bool = False
    control: int | None = None  # a transaction marker batch: 0 ABORT, 1 COMMIT
    log_append: bool = False
    offset_gap: int = 0  # offsets the batch skips before it (a compacted or aborted range)
    extra: dict[str, Any] = field(default_factory=dict)


def build(spec: Spec, base_offset: int, base_ts: int = 1_700_000_000_000) -> bytes:
    b = DefaultRecordBatchBuilder(2, spec.codec, int(spec.transactional or spec.control is not None),
                                  spec.producer_id, 0, -1 if spec.producer_id < 0 else 0, 2**31 - 1)
    if spec.control is not None:
        b.append(0, base_ts, struct.pack(">hh", 0, spec.control), struct.pack(">hi", 0, 0), [])
    else:
        for i, (k, v, h, dt) in enumerate(spec.records):
            b.append(i, base_ts + dt, k, v, h)
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base_offset)
    attrs = struct.unpack_from(">h", raw, 21)[0]
    if spec.control is not None:
        attrs |= 0x20
    if spec.log_append:
        attrs |= 0x08
    struct.pack_into(">h", raw, 21, attrs)
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


def response(specs: list[Spec], first_offset: int = 0) -> tuple[bytes, int]:
    """The batches back to back, as a fetch response holds them; and the next offset."""
    out, off = [], first_offset
    for s in specs:
        off += s.offset_gap
        out.append(build(s, off))
        off += 1 if s.control is not None else max(len(s.records), 1)
    return b"".join(out), off


def reference(records: bytes, pos: int, end: int, committed: bool,
              aborted: list[tuple[int, int]]) -> tuple[int, bool, list[Row]]:
    """The row-by-row read of a response (aiokafka's decoder), as the source did it."""
    pending = sorted(((first, pid) for first, pid in aborted), reverse=True)
    open_aborts: set[int] = set()
    rows: list[Row] = []
    mem = MemoryRecords(records) if records else None
    batch = mem.next_batch() if mem is not None else None
    done = False
    while batch is not None and not done:
        nxt = batch.next_offset
        if nxt <= pos:
            batch = mem.next_batch()  # type: ignore[union-attr]
            continue
        take = not batch.is_control_batch
        if committed and batch.is_transactional:
            while pending and pending[-1][0] <= nxt - 1:
                open_aborts.add(pending.pop()[1])
            if batch.is_control_batch:
                rec = next(iter(batch), None)
                if rec is not None and rec.key and struct.unpack(">hh", rec.key[:4])[1] == 0:
                    open_aborts.discard(batch.producer_id)
            take = take and batch.producer_id not in open_aborts
        if take:
            for rec in batch:
                if rec.offset < pos:
                    continue
                if rec.offset >= end:
                    done = True
                    break
                rows.append((rec.offset, rec.timestamp, batch.timestamp_type, rec.key, rec.value,
                             tuple(rec.headers) if rec.headers else None))
        pos = end if done else nxt
        batch = mem.next_batch()  # type: ignore[union-attr]
    return pos, done, rows


def rows_of(batch: Any) -> list[Row]:
    """An Arrow batch the C decoder made, as reference rows."""
    if batch is None:
        return []
    import pyarrow as pa

    d = batch.to_pydict()
    stamps = [us // 1000 for us in batch.column("timestamp").cast(pa.int64()).to_pylist()]
    heads = d.get("headers") or [None] * batch.num_rows
    return [(o, t, k, key, val, tuple((h["key"], h["value"]) for h in hs) if hs else None)
            for o, t, k, key, val, hs in zip(d["offset"], stamps, d["timestampType"], d["key"],
                                             d["value"], heads, strict=True)]
