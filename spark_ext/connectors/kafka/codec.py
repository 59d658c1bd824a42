"""Kafka record batches (message format v2) to Arrow columns and back, in C (``_records.c``).

``decode`` walks every record batch of one partition's fetch response and gathers the
records of the range into column buffers, copied once into ``bytes`` that Arrow arrays then
wrap without another copy; Python makes a few objects per response and one call per
compressed batch (the decompression,
``aiokafka.codec``'s C and Rust codecs), never one per record. Read-committed filtering,
control batches and the CRC-32C check happen there too, as Kafka's consumer does them.

``encode`` is the reverse for the sink: Arrow key, value and headers columns to the records
of batches no larger than a limit, in one call per partition of a task's Arrow batch;
``batch`` puts a batch's header on (compressed when that is smaller, as Kafka's producer
does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_ext.connectors.kafka import _records

TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
NAMES = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]

# Kafka's codec ids (a batch's attributes, bits 0-2).
_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _codec(codec: int, way: str) -> Callable[[bytes], bytes]:
    """aiokafka's ``<name>_<way>`` ("encode" or "decode") for Kafka's codec id ``codec``.
    Imported at the first compressed batch: importing aiokafka costs each Python process of a
    query (the plan's, every task's, the commit's) about 40 ms of CPU at its first batch,
    and records written and read uncompressed never need it."""
    from aiokafka import codec as codecs

    return getattr(codecs, f"{_NAMES[codec]}_{way}")


HEADER = 61  # a v2 batch's header: the records start here
_TRANSACTIONAL = 0x10
# attributes .. records count: the part of the header the CRC-32C covers


def _decompress(codec: int, data: bytes) -> bytes:
    """One batch's records, decompressed; a ``ValueError`` for data that does not decompress
    (each codec has errors of its own: gzip an ``OSError``, cramjam its own type), so the
    reader reports a corrupt batch rather than retrying it as a broker away."""
    if codec not in _NAMES:
        raise ValueError(f"compression codec {codec} is none Kafka defines (1-4)")
    fn = _codec(codec, "decode")
    try:
        return bytes(fn(data))
    except Exception as e:  # noqa: BLE001 - any codec's failure is a corrupt batch
        raise ValueError(f"its {_NAMES[codec]} records do not decompress: {type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class Decoded:
    """What one response held of the range: ``batch`` (None: no record of it), ``pos``
    where the next fetch starts, and ``done`` once a record at the range's end was seen."""

    batch: pa.RecordBatch | None
    pos: int
    done: bool


def _binary(kind: pa.DataType, n: int, parts: tuple[bytes, int, bytes, bytes]) -> pa.Array:
    valid, nulls, offsets, data = parts
    return pa.Array.from_buffers(kind, n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offsets),
                                           pa.py_buffer(data)], null_count=nulls)


def decode(records: bytes, pos: int, end: int, topic: str, partition: int, committed: bool,
           aborted: Sequence[tuple[int, int]], headers: bool) -> Decoded:
    """The records at offsets ``[pos, end)`` of a fetch response's ``records``. ``aborted``:
    the response's aborted transactions, (first offset, producer id). Raises ``ValueError``
    for a malformed batch, a CRC-32C mismatch, or a message format before v2."""
    (pos, done, n, offsets, stamps, kinds, key, value, (hvalid, hnulls, hoffsets), hkey, hval,
     hcount) = _records.decode(records, pos, end, committed, sorted(aborted), headers, _decompress)
    if n == 0:
        return Decoded(None, pos, bool(done))
    cols: list[pa.Array] = [
        _binary(pa.binary(), n, key), _binary(pa.binary(), n, value),
        pa.repeat(pa.scalar(topic, pa.string()), n), pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(np.frombuffer(offsets, np.int64)),
        pa.array(np.frombuffer(stamps, np.int64) * 1000, TIMESTAMP),
        pa.array(np.frombuffer(kinds, np.int32)),
    ]
    names = list(NAMES)
    if headers:
        entries = pa.StructArray.from_arrays(
            [_binary(pa.string(), hcount, hkey), _binary(pa.binary(), hcount, hval)],
            fields=list(HEADERS.value_type))
        cols.append(pa.Array.from_buffers(HEADERS, n, [pa.py_buffer(hvalid) if hnulls else None,
                                                       pa.py_buffer(hoffsets)], null_count=hnulls,
                                          children=[entries]))
        names.append("headers")
    return Decoded(pa.RecordBatch.from_arrays(cols, names=names), pos, bool(done))


def crc32c(data: bytes | bytearray | memoryview, portable: bool = False) -> int:
    """CRC-32C (Castagnoli) of ``data``: the checksum of a v2 record batch. By the CPU's
    crc32 instruction where it has one; ``portable``: by table, as on a CPU without it."""
    return int(_records.crc32c(data, portable))


Parts = tuple[pa.Buffer | None, pa.Buffer, pa.Buffer]  # validity (None: no null), int32 offsets, data
Headers = tuple[pa.Buffer | None, pa.Buffer, Parts, Parts]  # list validity and offsets, keys, values


def parts(col: pa.Array | None) -> Parts | None:
    """A binary or string column's buffers as ``encode`` takes them (32-bit offsets: Spark's
    large types, with ``spark.sql.execution.arrow.useLargeVarTypes``, are cast). A slice
    is read in place: its offsets index the whole data buffer, and only a validity bitmap
    that does not start on a byte is copied."""
    if col is None:
        return None
    if pa.types.is_large_binary(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())
    valid, offsets = _in_place(col)
    data = col.buffers()[2]
    return (valid, offsets, data if data is not None else pa.py_buffer(b""))


def _in_place(col: pa.Array) -> tuple[pa.Buffer | None, pa.Buffer]:
    """A binary or list column's validity bitmap (None without nulls) and its n + 1 offsets,
    for a slice too: the offsets are cut from the whole buffer (they stay absolute), and
    only a bitmap that does not start on a byte is copied."""
    valid, offsets = col.buffers()[:2]
    n, at = len(col), col.offset
    offsets = offsets.slice(at * 4, (n + 1) * 4)
    if not col.null_count:
        return None, offsets
    if at % 8:
        return pa.concat_arrays([col.is_valid()]).buffers()[1], offsets
    return valid.slice(at // 8, (n + 7) // 8), offsets


def partitions(keys: pa.Array, count: int) -> np.ndarray:
    """The partition Kafka's default partitioner picks among ``count`` for each key (Java's
    ``Utils.murmur2``, made positive, modulo ``count``), computed in C; -1 for a null key."""
    got = parts(keys)
    assert got is not None
    return np.frombuffer(_records.partitions(len(keys), got, count), dtype="<i4")


def header_parts(col: pa.Array | None) -> Headers | None:
    """A ``list<struct<key: string, value: binary>>`` column's buffers as ``encode`` takes
    them (a slice in place, as ``parts``: its list offsets index the whole entries)."""
    if col is None:
        return None
    if col.type != HEADERS:
        col = col.cast(HEADERS)  # large lists and strings: 32-bit offsets, as encode reads them
    entries = col.values  # all of them, whatever the slice: the list offsets are absolute
    if entries.offset:
        entries = pa.concat_arrays([entries])
    if entries.null_count:
        raise ValueError("a header that is null itself (not its value): give each header a key")
    valid, offsets = _in_place(col)
    key, value = parts(entries.field(0)), parts(entries.field(1))
    assert key is not None and value is not None
    return (valid, offsets, key, value)


def encode(n: int, key: Parts | None, value: Parts | None, headers: Headers | None, ts_delta: int,
           count: int, size: int, limit: int) -> list[tuple[bytes, int]]:
    """The records of ``n`` rows, as ``_records.encode`` says: the first chunk continues an open
    batch of ``count`` records and ``size`` bytes; every chunk but the last is a full batch's."""
    return _records.encode(n, key, value, headers, ts_delta, count, size, limit)


def batch(records: bytes | bytearray, count: int, base_ts: int, max_ts: int, codec: int, transactional: bool,
          producer_id: int, epoch: int, base_sequence: int) -> bytes:
    """A v2 record batch of ``count`` records (``encode``'s), its base offset 0 (the broker
    assigns offsets): compressed with ``codec`` when that makes it smaller. Framed in C, one
    copy of the records (``_records.frame``)."""
    attrs = _TRANSACTIONAL if transactional else 0
    if codec:
        packed = _codec(codec, "encode")(bytes(records))
        if len(packed) < len(records):
            records, attrs = packed, attrs | codec
    return _records.frame(records, attrs, count, base_ts, max_ts, producer_id, epoch, base_sequence)
