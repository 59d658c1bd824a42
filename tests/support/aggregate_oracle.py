"""The aggregate operations' brute-force oracle (exact Fractions, plain loops) and the
inputs the aggregate and frame tests draw, shared by both."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction

import pyarrow as pa
from hypothesis import strategies as st

from spark_ext.windows import aggregate as agg
from spark_ext.windows.aggregate import StateColumn, UserAggregate

SCHEMA = pa.schema([("k", pa.string()), ("ts", pa.int64()), ("v", pa.float64()), ("i", pa.int64()),
                    ("x", pa.float64())])


Row = tuple[str | None, int, float | None, int | None, float | None]


OPS: dict[str, agg.AggregateOperation] = {
    "n": agg.count(), "si": agg.sum("i"), "sv": agg.sum("v"), "av": agg.avg("v"),
    "mnv": agg.min("v"), "mxv": agg.max("v"), "mni": agg.min("i"), "mxi": agg.max("i"),
    "var": agg.variance("v"), "sd": agg.stddev("v"), "vp": agg.variance_pop("v"),
    "sdp": agg.stddev_pop("v"), "sl": agg.linreg_slope("x", "v"),
}


def table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], schema=SCHEMA)


def _m2(xs: list[Fraction]) -> Fraction:
    mean = sum(xs, Fraction(0)) / len(xs)
    return sum(((x - mean) ** 2 for x in xs), Fraction(0))


def _var(rows: list[Row], ddof: int, root: bool) -> float | None:
    xs = [Fraction(r[2]) for r in rows if r[2] is not None]
    if len(xs) <= ddof:
        return None
    value = float(_m2(xs) / (len(xs) - ddof))
    return math.sqrt(value) if root else value


def _slope(rows: list[Row]) -> float | None:
    pairs = [(Fraction(r[4]), Fraction(r[2])) for r in rows if r[4] is not None and r[2] is not None]
    if not pairs:
        return None
    mx = sum((p[0] for p in pairs), Fraction(0)) / len(pairs)
    my = sum((p[1] for p in pairs), Fraction(0)) / len(pairs)
    m2x = sum(((x - mx) ** 2 for x, _ in pairs), Fraction(0))
    return None if m2x == 0 else float(sum(((x - mx) * (y - my) for x, y in pairs), Fraction(0)) / m2x)


def _nonnull(rows: list[Row], col: int) -> list:
    return [r[col] for r in rows if r[col] is not None]


ORACLE: dict[str, Callable[[list[Row]], object]] = {
    "n": len,
    "si": lambda rs: sum(_nonnull(rs, 3)) if _nonnull(rs, 3) else None,
    "sv": lambda rs: float(sum(map(Fraction, _nonnull(rs, 2)))) if _nonnull(rs, 2) else None,
    "av": lambda rs: (float(sum(map(Fraction, _nonnull(rs, 2))) / len(_nonnull(rs, 2)))
                      if _nonnull(rs, 2) else None),
    "mnv": lambda rs: min(_nonnull(rs, 2), default=None),
    "mxv": lambda rs: max(_nonnull(rs, 2), default=None),
    "mni": lambda rs: min(_nonnull(rs, 3), default=None),
    "mxi": lambda rs: max(_nonnull(rs, 3), default=None),
    "var": lambda rs: _var(rs, 1, False), "sd": lambda rs: _var(rs, 1, True),
    "vp": lambda rs: _var(rs, 0, False), "sdp": lambda rs: _var(rs, 0, True),
    "sl": _slope,
}


def close(got: object, want: object, rel: float = 1e-9, abs_: float = 1e-9) -> bool:
    if want is None or got is None:
        return got is want
    if isinstance(want, float):
        return isinstance(got, float) and math.isclose(got, want, rel_tol=rel, abs_tol=abs_)
    return got == want


def check(got: dict[tuple, dict], want: dict[tuple, dict], names: list[str]) -> None:
    assert got.keys() == want.keys()
    for key, row in want.items():
        for name in names:
            assert close(got[key][name], row[name]), (key, name, got[key][name], row[name])


# Small dyadic values make the Fraction oracle exact; ints beyond 2**53 test exact int64 sums.
values = st.one_of(st.none(), st.integers(-400, 400).map(lambda z: z / 4))


row = st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(-50, 50), values,
                st.one_of(st.none(), st.integers(-2**56, 2**56)),
                st.one_of(st.none(), st.integers(-6, 6).map(lambda z: z / 2)))


# Sizes drawn uniformly: hypothesis' own list sizes stay tiny (mean ~5), too few for windows.
rows = st.integers(0, 60).flatmap(lambda n: st.lists(row, min_size=n, max_size=n))


def split(items: list, seed: int, parts: int) -> list[list]:
    rnd = random.Random(seed)
    shuffled = rnd.sample(items, len(items))
    cuts = sorted(rnd.randint(0, len(items)) for _ in range(parts - 1))
    return [shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(items)], strict=True)]


def sum_of_squares(c: str) -> UserAggregate:
    """A user op: sum of c*c over non-null c (sums only, so it can deduct)."""
    return UserAggregate((c,), [StateColumn("n", "count", c),
                                StateColumn("ss", "sum", lambda t: pa.compute.multiply(t[c], t[c]))],
                         finish=lambda s: pa.array(s["ss"], mask=s["n"] == 0), result_type=pa.float64())


def value_range(c: str) -> UserAggregate:
    """A user op: max - min of c (min/max states, so it cannot deduct)."""
    return UserAggregate((c,), [StateColumn("n", "count", c), StateColumn("lo", "min", c),
                                StateColumn("hi", "max", c)],
                         finish=lambda s: pa.array(s["hi"] - s["lo"], mask=s["n"] == 0),
                         result_type=pa.float64())
