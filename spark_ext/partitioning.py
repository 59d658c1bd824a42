"""Stable partitioning: the same key gives the same partition in every process.

Jet routes a partitioned edge by MurmurHash3 of the key modulo 271 partitions. Python's
built-in ``hash()`` is salted per process (``PYTHONHASHSEED``), so it must never pick a
partition that another process, a restart or a sink has to agree on. Here a key is
first turned into canonical bytes (type-tagged, so ``1``, ``"1"`` and ``b"1"`` differ,
and equal values of one type always encode alike), then hashed with MurmurHash3 x86
32-bit (seed 0, unsigned) and reduced modulo the partition count. Runs anywhere:
driver or executor, no Spark needed.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from collections.abc import Iterable

import mmh3

from spark_ext.errors import SparkExtError

DEFAULT_PARTITIONS = 271

_NONE, _BOOL, _INT, _FLOAT, _STR, _BYTES, _SEQ, _DECIMAL, _DATE, _DATETIME = range(10)


class PartitioningError(SparkExtError, TypeError):
    """A key has a type without a canonical encoding, or the partition count is bad."""


def canonical_bytes(key: object) -> bytes:
    """Type-tagged bytes of ``key``; equal keys give equal bytes in every process."""
    out = bytearray()
    _encode(key, out)
    return bytes(out)


def _encode(key: object, out: bytearray) -> None:
    if key is None:
        out.append(_NONE)
    elif isinstance(key, bool):  # before int: bool is an int subclass
        out += bytes((_BOOL, int(key)))
    elif isinstance(key, int):
        length = max(1, (key.bit_length() + 8) // 8)
        out.append(_INT)
        out += key.to_bytes(length, "big", signed=True)
    elif isinstance(key, float):
        # One encoding for -0.0/0.0 and for every NaN, since they compare as the same key.
        value = 0.0 if key == 0.0 else (math.nan if math.isnan(key) else key)
        out.append(_FLOAT)
        out += struct.pack(">d", value)
    elif isinstance(key, str):
        out.append(_STR)
        out += key.encode("utf-8")
    elif isinstance(key, bytes | bytearray | memoryview):
        out.append(_BYTES)
        out += bytes(key)
    elif isinstance(key, decimal.Decimal):
        out.append(_DECIMAL)
        out += str(key.normalize()).encode()
    elif isinstance(key, dt.datetime):
        # Aware datetimes are compared in UTC; naive ones are taken as written.
        when = key.astimezone(dt.UTC) if key.tzinfo else key
        out.append(_DATETIME)
        out += when.replace(tzinfo=None).isoformat().encode()
    elif isinstance(key, dt.date):
        out.append(_DATE)
        out += key.isoformat().encode()
    elif isinstance(key, tuple | list):
        out.append(_SEQ)
        out += struct.pack(">I", len(key))
        for item in key:
            part = canonical_bytes(item)  # length-prefixed so ("ab", "c") != ("a", "bc")
            out += struct.pack(">I", len(part))
            out += part
    else:
        raise PartitioningError(
            f"no stable encoding for key of type {type(key).__name__}; use None, bool, int, float, "
            "str, bytes, Decimal, date, datetime, or a tuple/list of those"
        )


def stable_hash(key: object) -> int:
    """Unsigned 32-bit MurmurHash3 of the key's canonical bytes."""
    return int(mmh3.hash(canonical_bytes(key), 0, signed=False))


class StablePartitioner:
    """``key -> partition`` in ``[0, partitions)``, equal in every process and version."""

    def __init__(self, partitions: int = DEFAULT_PARTITIONS) -> None:
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise PartitioningError(f"partitions must be a positive integer, got {partitions!r}")
        self.partitions = partitions

    def __call__(self, key: object) -> int:
        return stable_hash(key) % self.partitions

    def partition_all(self, keys: Iterable[object]) -> list[int]:
        return [self(k) for k in keys]

    def __repr__(self) -> str:
        return f"StablePartitioner(partitions={self.partitions})"


def partition_of(key: object, partitions: int = DEFAULT_PARTITIONS) -> int:
    """The partition of ``key`` among ``partitions`` (default 271, as Hazelcast)."""
    return StablePartitioner(partitions)(key)
