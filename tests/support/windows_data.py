"""Window test data shared by the windows tests: random events, their DataFrame, and a
row comparison that allows float rounding."""

from __future__ import annotations

import math
import random
from typing import Any


def same(a: list, b: list) -> bool:
    """Rows equal: exact for everything but floats, which match within 1e-9 relative."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(sorted(a, key=_key), sorted(b, key=_key), strict=True):
        for x, y in zip(ra, rb, strict=True):
            if isinstance(x, float) or isinstance(y, float):
                if x is None or y is None:
                    if x is not y:
                        return False
                elif not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif x != y:
                return False
    return True


def _key(r: tuple) -> tuple:
    return tuple((v is None, str(v)) for v in r[:3])


def events(seed: int, n: int, keys: int, span_s: int) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        x = rnd.choice([None, float(rnd.randint(-20, 20)), rnd.random() * 1e3])
        out.append((f"k{rnd.randrange(keys)}", rnd.randrange(span_s * 1_000_000) - 5_000_000,
                    rnd.choice([None, rnd.randint(-100, 100)]), x,
                    None if x is None else 2.5 * x + rnd.random()))
    return out


def frame(spark: Any, rows: list[tuple]) -> Any:
    from pyspark.sql import functions as F

    return spark.createDataFrame(rows, "account string, tsu long, amount long, x double, y double") \
        .withColumn("ts", F.timestamp_micros("tsu")).drop("tsu")
