"""A fetch response's record batches as one Arrow record batch, decoded in C (``_records.c``).

The decoder walks every record batch of one partition's fetch response and gathers the
records of the range into column buffers, which become Arrow arrays without a copy; Python
makes a few objects per response and one call per compressed batch (the decompression,
``aiokafka.codec``'s C and Rust codecs), never one per record. Read-committed filtering,
control batches and the CRC-32C check happen there too, as Kafka's consumer does them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from aiokafka import codec as _codecs

from spark_ext.connectors.kafka import _records

TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
NAMES = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]

# Kafka's codec ids (a batch's attributes, bits 0-2).
_DECOMPRESS: dict[int, Callable[[bytes], bytes]] = {
    1: _codecs.gzip_decode, 2: _codecs.snappy_decode, 3: _codecs.lz4_decode, 4: _codecs.zstd_decode,
}


def _decompress(codec: int, data: bytes) -> bytes:
    fn = _DECOMPRESS.get(codec)
    if fn is None:
        raise ValueError(f"compression codec {codec} is none Kafka defines (1-4)")
    return bytes(fn(data))


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


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``: the checksum of a v2 record batch."""
    return int(_records.crc32c(data))
