"""Aggregate operations against a brute-force oracle (exact Fractions, plain loops)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_ext.errors import SparkExtError
from spark_ext.windows import aggregate as agg
from spark_ext.windows.aggregate import AggregateError, StateColumn, UserAggregate
from tests.support.aggregate_oracle import (
    OPS,
    ORACLE,
    check,
    close,
    rows,
    split,
    sum_of_squares,
    table,
    value_range,
)


@settings(max_examples=150, deadline=None)
@given(rows, st.integers(0, 2**32), st.integers(1, 4))
def test_partials_combined_in_any_split_equal_the_oracle(events, seed, parts):
    partials = [agg.accumulate_all(table(p), ["k"], OPS) for p in split(events, seed, parts)]
    merged = agg.combine_all(pa.concat_tables(partials), ["k"], OPS)
    got = {(r["k"],): r for r in agg.finish_all(merged, OPS).to_pylist()}
    want = {}
    for key in {e[0] for e in events}:
        group = [e for e in events if e[0] == key]
        want[(key,)] = {name: f(group) for name, f in ORACLE.items()}
    check(got, want, list(OPS))


@settings(max_examples=100, deadline=None)
@given(rows, rows)
def test_deduct_undoes_merge(a_rows, b_rows):
    ga = agg.accumulate_all(table([("a", *r[1:]) for r in a_rows] or [("a", 0, None, None, None)]), [], OPS)
    gb = agg.accumulate_all(table([("a", *r[1:]) for r in b_rows] or [("a", 0, None, None, None)]), [], OPS)
    for name, op in OPS.items():
        if not op.can_deduct:
            with pytest.raises(AggregateError):
                op.deduct({}, {})
            continue
        sa, sb = agg.read_states(ga, name, op)[0], agg.read_states(gb, name, op)[0]
        back = op.deduct(op.merge(sa, sb), sb)
        assert close(op.finish(back)[0].as_py(), op.finish(sa)[0].as_py()), name


def test_result_types_follow_spark():
    t = pa.table({"i32": pa.array([3, 1, None], pa.int32()),
                  "ts": pa.array([5, 2, 9], pa.timestamp("us", tz="UTC")),
                  "f": pa.array([1.5, None, 2.5])})
    ops = {"s": agg.sum("i32"), "a": agg.avg("i32"), "mn": agg.min("i32"), "mx": agg.max("ts"),
           "fs": agg.sum("f"), "n": agg.count()}
    out = agg.finish_all(agg.accumulate_all(t, [], ops), ops)
    assert out.schema.field("s").type == pa.int64() and out["s"][0].as_py() == 4
    assert out.schema.field("a").type == pa.float64() and out["a"][0].as_py() == 2.0
    assert out.schema.field("mn").type == pa.int32() and out["mn"][0].as_py() == 1
    assert out.schema.field("mx").type == pa.timestamp("us", tz="UTC")
    assert out["mx"].cast(pa.int64())[0].as_py() == 9
    assert out["fs"][0].as_py() == 4.0 and out["n"][0].as_py() == 3
    assert agg.accumulate_all(t, [], ops).schema == pa.schema(
        [f for p, op in ops.items() for f in op.state_fields(p, t.schema)])


def test_nan_is_the_largest_value_and_nulls_are_skipped():
    t = pa.table({"k": [1, 1, 2, 2, 3], "v": [1.0, math.nan, math.nan, math.nan, None]})
    ops = {"mn": agg.min("v"), "mx": agg.max("v"), "s": agg.sum("v"), "vs": agg.variance("v")}
    out = {r["k"]: r for r in agg.finish_all(agg.accumulate_all(t, ["k"], ops), ops).to_pylist()}
    assert out[1]["mn"] == 1.0 and math.isnan(out[1]["mx"])
    assert math.isnan(out[2]["mn"]) and math.isnan(out[2]["mx"])
    assert out[3] == {"k": 3, "mn": None, "mx": None, "s": None, "vs": None}


def test_constant_values_give_exact_zero_variance_and_null_slope_across_merges():
    t = pa.table({"k": [0] * 7, "x": [0.1] * 7, "y": [0.3, 0.7, 0.1, 0.2, 0.9, 0.5, 0.4]})
    ops = {"v": agg.variance("x"), "sl": agg.linreg_slope("x", "y")}
    parts = [agg.accumulate_all(t.slice(a, b - a), ["k"], ops) for a, b in ((0, 1), (1, 3), (3, 7))]
    out = agg.finish_all(agg.combine_all(pa.concat_tables(parts), ["k"], ops), ops).to_pylist()[0]
    assert out["v"] == 0.0 and out["sl"] is None
    single = agg.finish_all(agg.accumulate_all(t.slice(0, 1), ["k"], ops), ops).to_pylist()[0]
    assert single["v"] is None and single["sl"] is None


def test_variance_is_stable_on_a_large_offset():
    rng = np.random.default_rng(7)
    x = 1e9 + rng.normal(0, 1.0, 50_000)
    keys = rng.integers(0, 5, len(x))
    t = pa.table({"k": keys, "x": x, "ts": np.arange(len(x))})
    ops = {"v": agg.variance("x"), "sdp": agg.stddev_pop("x")}
    parts = [agg.accumulate_all(t.slice(a, 7_000), ["k"], ops) for a in range(0, len(x), 7_000)]
    for merged in (agg.accumulate_all(t, ["k"], ops), agg.combine_all(pa.concat_tables(parts), ["k"], ops)):
        for r in agg.finish_all(merged, ops).to_pylist():
            xs = x[keys == r["k"]]
            mean = math.fsum(xs) / len(xs)
            m2 = math.fsum((xi - mean) ** 2 for xi in xs)
            assert math.isclose(r["v"], m2 / (len(xs) - 1), rel_tol=1e-9)
            assert math.isclose(r["sdp"], math.sqrt(m2 / len(xs)), rel_tol=1e-9)


def test_user_defined_ops_sum_of_squares_and_range():
    sum_sq, span = sum_of_squares("v"), value_range("v")
    assert sum_sq.can_deduct and not span.can_deduct
    t = pa.table({"k": ["a", "a", "a", "b", "c"], "v": [1.0, -2.0, 4.0, None, 0.5]})
    ops = {"ss": sum_sq, "range": span}
    parts = [agg.accumulate_all(t.slice(i, 1), ["k"], ops) for i in range(t.num_rows)]
    merged = agg.combine_all(pa.concat_tables(parts), ["k"], ops)
    out = {r["k"]: r for r in agg.finish_all(merged, ops).to_pylist()}
    assert out == {"a": {"k": "a", "ss": 21.0, "range": 6.0}, "b": {"k": "b", "ss": None, "range": None},
                   "c": {"k": "c", "ss": 0.25, "range": 0.0}}


def test_errors_name_the_problem():
    t = pa.table({"s": ["x"], "v": [1.0]})
    with pytest.raises(AggregateError, match="'nope' not found"):
        agg.accumulate_all(t, [], {"a": agg.sum("nope")})
    with pytest.raises(AggregateError, match="type string"):
        agg.accumulate_all(t, [], {"a": agg.avg("s")})
    with pytest.raises(AggregateError, match="contain no '__'"):
        agg.accumulate_all(t, ["s"], {"a__b": agg.count()})
    with pytest.raises(AggregateError, match="AggregateOperation"):
        agg.accumulate_all(t, [], {"a": "count"})  # type: ignore[dict-item]
    column = StateColumn("x", "sum")  # fine as data; rejected when used
    with pytest.raises(AggregateError, match="only count"):
        UserAggregate((), [column], finish=lambda s: s["x"], result_type=pa.int64())
    assert issubclass(AggregateError, SparkExtError)


def test_multi_column_keys_with_nulls_group_like_sql():
    t = pa.table({"a": [1, 1, None, None, 1], "b": ["x", "y", "x", "x", "x"], "v": [1, 2, 3, 4, 5]})
    out = agg.finish_all(agg.accumulate_all(t, ["a", "b"], {"s": agg.sum("v")}), {"s": agg.sum("v")})
    assert sorted(out.to_pylist(), key=repr) == sorted(
        [{"a": 1, "b": "x", "s": 6}, {"a": 1, "b": "y", "s": 2}, {"a": None, "b": "x", "s": 7}], key=repr)
    f = pa.table({"f": [0.0, -0.0, math.nan, math.nan],
                  "d": pa.array(["a", "b", "a", "a"]).dictionary_encode(), "v": [1, 2, 3, 4]})
    by_f = agg.finish_all(agg.accumulate_all(f, ["f"], {"s": agg.sum("v")}), {"s": agg.sum("v")})
    assert sorted(by_f.column("s").to_pylist()) == [3, 7]  # -0.0 is 0.0; NaN is one key, as in Spark
    by_d = agg.finish_all(agg.accumulate_all(f, ["d"], {"s": agg.sum("v")}), {"s": agg.sum("v")})
    assert sorted(by_d.column("s").to_pylist()) == [2, 8]
