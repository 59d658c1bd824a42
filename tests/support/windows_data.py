"""Window test data shared by the windows tests: random events, their DataFrame, and a
row comparison that allows float rounding."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
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


def write_files(src: Path, batches: list[list[dict]]) -> None:
    src.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(batches):
        f = src / f"f{i:03d}.json"
        f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.utime(f, (1_000_000 + i, 1_000_000 + i))


def in_order_batches(seed: int, files: int, per_file: int, jitter_us: int = 0) -> list[list[dict]]:
    """Events in time order (each moved by up to ``jitter_us`` and shuffled within its
    file when jitter is given), amounts sometimes null; the last file closes every window."""
    rnd, t, out = random.Random(seed), 0, []
    for i in range(files):
        rows = []
        for _ in range(per_file):
            t += rnd.randint(0, 300_000)
            ts = max(0, t + rnd.randint(-jitter_us, jitter_us))
            amount = None if jitter_us and rnd.random() < 0.1 else rnd.randint(0, 100)
            rows.append({"account": f"k{rnd.randint(0, 5)}", "ts": ts / 1e6, "amount": amount})
        if jitter_us:
            rnd.shuffle(rows)
        if i == files - 1:  # a far-future event of another key closes every window
            rows.append({"account": "~flush", "ts": t / 1e6 + 10_000, "amount": 0})
        out.append(rows)
    return out
