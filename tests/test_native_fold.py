"""The JVM fold (the companion jar) and Python's fold agree: stage 1's wire rows on the same
events, and the windows end to end (batch and a streaming file-source query).

Agreement: keys, bounds, buckets, counts, integer states, min/max and float sums exactly (both
fold each group's rows in row order); the co-moments' means, M2 and co-moment to 1e-9
relative, or 1e-9 of the data's scale (of its square for M2 and the co-moment) absolute,
since the JVM keeps them with Welford's update and Python with a two-pass.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_ext import windows
from spark_ext.windows import aggregate as agg
from spark_ext.windows import api, native
from spark_ext.windows import state as ws
from spark_ext.windows.aggregate import StateColumn, UserAggregate
from spark_ext.windows.state import BUCKET, KIND, MAXTS, PART, PAYLOAD, RowKind

pytestmark = [pytest.mark.spark]

SCHEMA = ("k string, j int, ts timestamp, p int, v bigint, s smallint, x double, w double, f float, "
          "d date")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
AGGS = {"n": agg.count(), "tot": agg.sum("v"), "fs": agg.sum("f"), "xs": agg.sum("x"), "mean": agg.avg("x"),
        "lo": agg.min("v"), "hi": agg.max("x"), "flo": agg.min("f"), "first": agg.min("ts"),
        "day": agg.max("d"), "var": agg.variance("x"), "sd": agg.stddev_pop("w"),
        "slope": agg.linreg_slope("x", "w"),
        "rng": UserAggregate(("s",), [StateColumn("c", "count", "s"), StateColumn("a", "min", "s"),
                                      StateColumn("b", "max", "s")],
                             lambda st_: pa.array(st_["b"] - st_["a"], mask=st_["c"] == 0), pa.int64())}
# Co-moment states that agree to the tolerance above, and their scale: "x" (the value), "x2" (its square).
MOMENTS = {"mean": "x", "mean_x": "x", "mean_y": "x", "m2": "x2", "m2x": "x2", "cxy": "x2"}


@st.composite
def events(draw: st.DrawFn) -> list[tuple]:
    n = draw(st.integers(0, 60))
    floats = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
    rows = []
    for _ in range(n):
        # Often on a half-second grid, so events sit exactly on frame bounds and a gap apart.
        us = draw(st.one_of(st.none(), st.integers(-60, 180).map(lambda i: i * 500_000),
                            st.integers(-30_000_000, 90_000_000)))
        rows.append((
            draw(st.one_of(st.none(), st.sampled_from(["a", "b", "ü"]))),
            draw(st.one_of(st.none(), st.integers(-2, 2))),
            None if us is None else EPOCH + dt.timedelta(microseconds=us),
            draw(st.one_of(st.none(), st.integers(0, 2))),
            draw(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.integers(-5, 5))),
            draw(st.one_of(st.none(), st.integers(-2**15, 2**15 - 1))),
            draw(st.one_of(st.none(), floats, st.sampled_from([0.0, -0.0, 1e6 + 0.5]))),
            draw(st.one_of(st.none(), floats)),
            draw(st.one_of(st.none(), st.floats(width=32), st.just(float("nan")))),
            draw(st.one_of(st.none(), st.dates(dt.date(1500, 1, 1), dt.date(2500, 1, 1)))),
        ))
    return rows


def _frame(spark, rows, partitions):
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, partitions), SCHEMA)


def _spec(df, kind, keys, streaming, part_cols=("p",), aggs=AGGS):
    sliding = kind == "sliding"
    spec = api._spec(df, kind, keys, "ts", aggs, 7_000_000 if sliding else 0, 3 if sliding else 0,
                     0 if sliding else 4_000_000, "0 seconds", list(part_cols) or None, "60 seconds",
                     5, "windows", False, None)
    return dataclasses.replace(spec, streaming=streaming)


def _wire(src, spec, mode, monkeypatch):
    monkeypatch.setenv(native.ENV, mode)
    return api.stage1_rows(src, spec).toArrow()


def _decode(wire: pa.Table, spec) -> tuple[pa.Table, list[tuple[int, int, int]]]:
    """(every partial, sorted by its exact columns; the SEEN rows, sorted)."""
    kinds = wire.column(KIND).to_pylist()
    blobs = [ws.from_ipc(p) for k, p in zip(kinds, wire.column(PAYLOAD).to_pylist(), strict=True)
             if k == RowKind.PARTIALS]
    for b in blobs:  # stage 2 concatenates them: the schema must be exactly the declared one
        assert b.schema == spec.stage1_schema
    buckets = wire.column(BUCKET).to_pylist()
    heads = [b for b, k in zip(buckets, kinds, strict=True) if k == RowKind.PARTIALS]
    for bucket, blob in zip(heads, blobs, strict=True):
        assert set(blob.column(BUCKET).to_pylist()) == {bucket}
    parts = pa.concat_tables(blobs) if blobs else spec.stage1_schema.empty_table()
    # Temporal columns as integers: an empty min/max holds its type's extreme, not a valid date.
    ints = {pa.types.is_date32: pa.int32(), pa.types.is_timestamp: pa.int64()}
    parts = parts.cast(pa.schema([next((pa.field(f.name, t) for is_, t in ints.items() if is_(f.type)), f)
                                  for f in parts.schema]))
    marks = zip(buckets, kinds, wire.column(PART).to_pylist(), wire.column(MAXTS).to_pylist(), strict=True)
    seen = sorted((b, p, t) for b, k, p, t in marks if k == RowKind.SEEN)
    return parts, seen


def _sorted(t: pa.Table) -> pa.Table:
    """Rows ordered by every column compared exactly (null and NaN last)."""
    approx = {f"{p}__{s}" for p in AGGS for s in MOMENTS}
    cols = [t.column(c).to_pylist() for c in t.column_names if c not in approx]

    def key(v):
        return (1, 0) if v is None or (isinstance(v, float) and math.isnan(v)) else (0, v)

    order = sorted(range(t.num_rows), key=lambda i: tuple(key(c[i]) for c in cols))
    return t.take(pa.array(order, pa.int64()))


def _scale(rows) -> float:
    return max([1.0, *[abs(r[i]) for r in rows for i in (6, 7) if r[i] is not None]])


def assert_agree(jvm: pa.Table, py: pa.Table, scale: float) -> None:
    assert jvm.num_rows == py.num_rows
    a, b = _sorted(jvm), _sorted(py)
    for name in a.column_names:
        state = name.rsplit("__", 1)[-1] if "__" in name else ""
        x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
        if state in MOMENTS:
            s = scale if MOMENTS[state] == "x" else scale * scale * max(1, len(x))
            for u, v in zip(x, y, strict=True):
                assert math.isclose(u, v, rel_tol=1e-9, abs_tol=1e-9 * s), (name, u, v)
        else:
            same = [u == v or (isinstance(u, float) and math.isnan(u) and math.isnan(v)) for u, v in zip(x, y,
                                                                                                        strict=True)]
            assert all(same), (name, [(u, v) for u, v, ok in zip(x, y, same, strict=True) if not ok][:5])


FOLD_SETTINGS = settings(max_examples=15, deadline=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("kind", ["sliding", "session"])
@FOLD_SETTINGS
@given(rows=events(), partitions=st.integers(1, 3), keys=st.sampled_from([["k"], ["k", "j"], []]),
       streaming=st.booleans())
def test_jvm_and_python_folds_agree(spark, monkeypatch, kind, rows, partitions, keys, streaming):
    df = _frame(spark, rows, partitions)
    spec = _spec(df, kind, keys, streaming)
    src = api.stage1_input(df, spec)
    jvm, seen_jvm = _decode(_wire(src, spec, "jvm", monkeypatch), spec)
    py, seen_py = _decode(_wire(src, spec, "python", monkeypatch), spec)
    assert seen_jvm == seen_py
    assert_agree(jvm, py, _scale(rows))


# No float sum and no co-moments: states any order of adding gives bit for bit.
ORDER_FREE = {k: AGGS[k] for k in ("n", "tot", "lo", "hi", "flo", "first", "day", "rng")}


@FOLD_SETTINGS
@given(rows=events(), partitions=st.integers(1, 3), keys=st.sampled_from([["k"], ["k", "j"], []]))
def test_sessions_built_as_rows_come_agree_with_python(spark, monkeypatch, rows, partitions, keys):
    """With ORDER_FREE aggregates the JVM builds sessions as rows come (an event out of time
    order joins, extends or bridges sessions, which then merge) instead of keeping every row."""
    df = _frame(spark, rows, partitions)
    spec = _spec(df, "session", keys, True, aggs=ORDER_FREE)
    src = api.stage1_input(df, spec)
    jvm, seen_jvm = _decode(_wire(src, spec, "jvm", monkeypatch), spec)
    py, seen_py = _decode(_wire(src, spec, "python", monkeypatch), spec)
    assert seen_jvm == seen_py
    assert_agree(jvm, py, _scale(rows))


def test_several_clock_columns_and_float_keys_agree(spark, monkeypatch):
    """A source partition named by two columns (PART_KEY), a float and a date key."""
    rows = [("a", i % 3, EPOCH + dt.timedelta(seconds=i * 0.7), i % 2, i, i % 7, (i % 5) * 0.5 - 1.0,
             float(i), 1.5, dt.date(2020, 1, 1 + i % 3)) for i in range(200)]
    rows += [("a", 1, EPOCH, 0, 1, 1, -0.0, 1.0, 1.0, dt.date(2020, 1, 1))]
    df = _frame(spark, rows, 3)
    for kind in ("sliding", "session"):
        spec = _spec(df, kind, ["x", "d"], True, ("k", "p"))
        src = api.stage1_input(df, spec)
        jvm, seen_jvm = _decode(_wire(src, spec, "jvm", monkeypatch), spec)
        py, seen_py = _decode(_wire(src, spec, "python", monkeypatch), spec)
        assert seen_jvm == seen_py and len(seen_py) == 3 * 2 * 5  # tasks x clock keys x buckets
        assert jvm.num_rows > 10
        assert_agree(jvm, py, 200.0)


def test_an_aggregate_only_python_computes_folds_in_python(spark, monkeypatch):
    rows = [("a", 1, EPOCH, 0, 1, 1, 1.0, 1.0, 1.0, dt.date(2020, 1, 1))]
    df = _frame(spark, rows, 1)
    doubled = UserAggregate(("v",), [StateColumn("t", "sum", lambda t: t.column("v"))],
                            lambda s: pa.array(s["t"]), pa.int64())
    spec = api._spec(df, "sliding", ["k"], "ts", {"t": doubled}, 1_000_000, 1, 0, "0 seconds", None,
                     None, 2, "windows", False, None)
    src = api.stage1_input(df, spec)
    monkeypatch.setenv(native.ENV, "auto")
    assert native.fold(src, spec) is None
    monkeypatch.setenv(native.ENV, "jvm")
    with pytest.raises(native.NativeFoldError, match="computed by Python only"):
        native.fold(src, spec)
    monkeypatch.setenv(native.ENV, "auto")
    native_spec = _spec(df, "sliding", ["k"], False)
    assert native.fold(api.stage1_input(df, native_spec), native_spec) is not None  # the session has the jar


def test_a_jar_of_another_release_is_not_used(spark, monkeypatch):
    rows = [("a", 1, EPOCH, 0, 1, 1, 1.0, 1.0, 1.0, dt.date(2020, 1, 1))]
    df = _frame(spark, rows, 1)
    spec = _spec(df, "sliding", ["k"], False)
    src = api.stage1_input(df, spec)
    monkeypatch.setenv(native.ENV, "auto")
    assert native.fold(src, spec) is not None
    monkeypatch.setattr(native, "version", lambda: "0.0.1")  # as if this spark-ext were another release
    assert native.fold(src, spec) is None
    monkeypatch.setenv(native.ENV, "jvm")
    with pytest.raises(native.NativeFoldError, match=r"jar is version \S+, this spark-ext is 0\.0\.1"):
        native.fold(src, spec)


def test_a_spark_connect_session_folds_in_python():
    """A Connect client has no JVM: ``_jvm`` raises PySpark's AttributeError, as Connect's does."""
    from pyspark.errors import PySparkAttributeError

    class ConnectLike:
        def __getattr__(self, name):
            raise PySparkAttributeError(errorClass="JVM_ATTRIBUTE_NOT_SUPPORTED",
                                        messageParameters={"attr_name": name})

    class Frame:
        sparkSession = ConnectLike()

    frame: Any = Frame()
    assert native._fold_class(frame) is None
    assert "Spark Connect" in native._no_class(frame)


# --- end to end: the windows with the jar equal the windows with Python's fold ---------------

E2E_AGGS = {"n": agg.count(), "total": agg.sum("amount"), "top": agg.max("amount"), "low": agg.min("amount"),
            "mean": agg.avg("x"), "var": agg.variance("x"), "slope": agg.linreg_slope("x", "y")}


def _both(monkeypatch, build):
    """``build()``'s windows planned with the JVM fold and with Python's."""
    out = {}
    for mode in ("jvm", "python"):
        monkeypatch.setenv(native.ENV, mode)
        out[mode] = build()
    return out


@pytest.mark.parametrize("kind", ["sliding", "session"])
def test_batch_windows_are_the_same_with_the_jar(spark, monkeypatch, kind):
    from tests.support.windows_data import events, frame, same

    df = frame(spark, events(11, 3000, 7, 200)).repartition(3)

    def build():
        if kind == "sliding":
            return windows.sliding(df, ["account"], "ts", "30 seconds", "10 seconds", E2E_AGGS).collect()
        return windows.session(df, ["account"], "ts", "500 milliseconds", E2E_AGGS).collect()

    got = _both(monkeypatch, build)
    assert len(got["python"]) > 50
    assert same(got["jvm"], got["python"])


@pytest.mark.parametrize("kind", ["sliding", "session"])
def test_streaming_windows_are_the_same_with_the_jar(spark, monkeypatch, tmp_path, kind):
    """A file-source query in several batches, out of order within and beyond the lateness
    (late events dropped and counted), with a partition column for the clock."""
    import json
    import random

    from tests.support.windows_data import same

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    rnd, src = random.Random(5), tmp_path / "src"
    src.mkdir()
    for i in range(4):
        rows = []
        for _ in range(300):
            t = i * 40 + rnd.random() * 40 - (45 if rnd.random() < 0.05 else 0)
            x = rnd.choice([None, rnd.random() * 100])
            rows.append({"account": f"k{rnd.randrange(6)}", "ts": t, "part": rnd.randrange(3),
                         "amount": rnd.choice([None, rnd.randint(-50, 50)]), "x": x,
                         "y": None if x is None else 2 * x + rnd.random()})
        if i == 3:  # far-future events of every partition close every window
            rows += [{"account": "~flush", "ts": 10_000.0, "part": p, "amount": 0, "x": 0.0, "y": 0.0}
                     for p in range(3)]
        path = src / f"{i}.json"
        path.write_text("\n".join(json.dumps(r) for r in rows))
        os.utime(path, (1_000_000 + i, 1_000_000 + i))

    def build():
        from pyspark.sql import functions as F

        schema = "account string, ts double, part int, amount long, x double, y double"
        stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(src))
                  .withColumn("ts", F.col("ts").cast("timestamp")))
        kw: dict = {"lateness": "5 seconds", "partition_column": "part", "metrics": f"w_{kind}"}
        if kind == "sliding":
            return windows.sliding(stream, ["account"], "ts", "20 seconds", "5 seconds", E2E_AGGS, **kw)
        return windows.session(stream, ["account"], "ts", "3 seconds", E2E_AGGS, **kw)

    plans = _both(monkeypatch, build)
    got, late = {}, {}
    for mode, df in plans.items():
        name = f"native_{kind}_{mode}"
        q = (df.writeStream.format("memory").queryName(name).outputMode("append")
             .option("checkpointLocation", str(tmp_path / f"ck-{mode}")).trigger(availableNow=True).start())
        assert q.awaitTermination(300), "still running after 300 s"
        assert q.exception() is None
        got[mode] = [tuple(r) for r in spark.table(name).where("account != '~flush'").collect()]
        late[mode] = [p["observedMetrics"][f"w_{kind}"]["late_events"] for p in q.recentProgress
                      if f"w_{kind}" in p["observedMetrics"]]
    assert len(got["python"]) > 20 and sum(late["python"]) > 0
    assert late["jvm"] == late["python"]
    assert same(got["jvm"], got["python"])
