"""The stable partitioner agrees across processes, hash seeds and types."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import subprocess
import sys
from collections import Counter

import mmh3
import pytest

from spark_ext.partitioning import (
    DEFAULT_PARTITIONS,
    PartitioningError,
    StablePartitioner,
    canonical_bytes,
    partition_of,
)

KEYS: list[object] = ["acct-1", "acct-2", "", 0, 1, -1, 2**70, 1.5, b"\x00k", None, True,
                      ("acct-1", 7), ["eu", 3, None], decimal.Decimal("1.10"),
                      dt.date(2026, 11, 22), dt.datetime(2026, 11, 22, 8, 0, tzinfo=dt.UTC)]

SCRIPT = ("import json, sys; sys.path.insert(0, sys.argv[1]); from tests.test_partitioning import KEYS; "
          "from spark_ext.partitioning import partition_of; "
          "print(json.dumps([partition_of(k) for k in KEYS]))")


def _in_subprocess(hash_seed: str) -> list[int]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-c", SCRIPT, root], env=env, capture_output=True,
                         text=True, check=True)
    return list(json.loads(res.stdout))


def test_same_partitions_in_processes_with_different_hash_seeds():
    here = [partition_of(k) for k in KEYS]
    assert _in_subprocess("1") == here
    assert _in_subprocess("4242") == here


def test_partition_is_murmur3_of_the_canonical_bytes_mod_271():
    # The definition users co-partition against: unsigned MurmurHash3 x86-32, seed 0.
    assert DEFAULT_PARTITIONS == 271
    assert canonical_bytes("acct-1") == b"\x04acct-1"
    assert partition_of("acct-1") == mmh3.hash(b"\x04acct-1", 0, signed=False) % 271


def test_types_are_distinguished_but_equal_values_agree():
    assert len({canonical_bytes(k) for k in (1, "1", b"1", 1.0, True, (1,))}) == 6
    assert canonical_bytes(0.0) == canonical_bytes(-0.0)
    assert canonical_bytes(float("nan")) == canonical_bytes(-float("nan"))
    assert canonical_bytes(decimal.Decimal("1.10")) == canonical_bytes(decimal.Decimal("1.1"))
    assert canonical_bytes(("ab", "c")) != canonical_bytes(("a", "bc"))
    assert canonical_bytes(["x", 1]) == canonical_bytes(("x", 1))
    cet = dt.timezone(dt.timedelta(hours=1))
    assert canonical_bytes(dt.datetime(2026, 1, 1, 1, 0, tzinfo=cet)) == \
        canonical_bytes(dt.datetime(2026, 1, 1, 0, 0, tzinfo=dt.UTC))


def test_keys_spread_over_every_partition():
    counts = Counter(StablePartitioner().partition_all(f"acct-{i}" for i in range(100_000)))
    assert set(counts) == set(range(271))
    expected = 100_000 / 271
    assert max(counts.values()) < 1.3 * expected
    assert min(counts.values()) > 0.7 * expected


def test_bad_keys_and_counts_are_clear_errors():
    with pytest.raises(PartitioningError, match="no stable encoding for key of type set"):
        partition_of({1, 2})
    for bad in (0, -3, 2.5, True):
        with pytest.raises(PartitioningError, match="positive integer"):
            StablePartitioner(bad)  # type: ignore[arg-type]
