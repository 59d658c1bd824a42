"""Frame-aggregated windows in real Spark queries, against Spark's own window functions."""

from __future__ import annotations

import json
import random

import pytest

from spark_ext import windows
from spark_ext.windows import aggregate as agg
from spark_ext.windows.frames import WindowError
from tests.support.windows_data import events, frame, in_order_batches, same, write_files

pytestmark = [pytest.mark.spark]

ALL_OPS = {
    "n": agg.count(), "total": agg.sum("amount"), "mean": agg.avg("amount"), "low": agg.min("amount"),
    "top": agg.max("amount"), "var": agg.variance("x"), "sd": agg.stddev("x"), "varp": agg.variance_pop("x"),
    "sdp": agg.stddev_pop("x"), "slope": agg.linreg_slope("x", "y"),
}


def spark_aggs():
    from pyspark.sql import functions as F

    return [F.count("*").alias("n"), F.sum("amount").alias("total"), F.avg("amount").alias("mean"),
            F.min("amount").alias("low"), F.max("amount").alias("top"), F.var_samp("x").alias("var"),
            F.stddev_samp("x").alias("sd"), F.var_pop("x").alias("varp"), F.stddev_pop("x").alias("sdp"),
            F.regr_slope("y", "x").alias("slope")]


@pytest.mark.parametrize("seed,size,slide", [(1, 30, 10), (2, 60, 60),
                                             pytest.param(3, 20, 4, marks=pytest.mark.compat), (4, 9, 3)])
def test_sliding_equals_spark_window_on_shuffled_input(spark, seed, size, slide):
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    rows = events(seed, 2000, 7, 240)
    random.Random(seed).shuffle(rows)
    df = frame(spark, rows).repartition(3)
    ours = windows.sliding(df, ["account"], "ts", f"{size} seconds", f"{slide} seconds", ALL_OPS)
    ref = (df.groupBy("account", F.window("ts", f"{size} seconds", f"{slide} seconds")).agg(*spark_aggs())
           .select("account", "window.start", "window.end", *ALL_OPS))
    assert same([tuple(r) for r in ours.collect()], [tuple(r) for r in ref.collect()])


def test_timestamp_ntz_input_gives_timestamp_ntz_windows(spark):
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        df = frame(spark, events(8, 500, 3, 120)).withColumn("ts", F.col("ts").cast("timestamp_ntz"))
        ours = windows.sliding(df, ["account"], "ts", "30 seconds", "10 seconds", {"n": agg.count()})
        ref = (df.groupBy("account", F.window("ts", "30 seconds", "10 seconds")).agg(F.count("*").alias("n"))
               .select("account", "window.start", "window.end", "n"))
        assert ours.schema["window_start"].dataType == ref.schema["start"].dataType
        assert sorted(map(tuple, ours.collect())) == sorted(map(tuple, ref.collect()))
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_session_equals_spark_session_window(spark):
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    rows = events(5, 1500, 5, 600)
    df = frame(spark, rows).repartition(4)
    ours = windows.session(df, ["account"], "ts", "7 seconds", ALL_OPS)
    ref = (df.groupBy("account", F.session_window("ts", "7 seconds")).agg(*spark_aggs())
           .select("account", "session_window.start", "session_window.end", *ALL_OPS))
    assert same([tuple(r) for r in ours.collect()], [tuple(r) for r in ref.collect()])


def test_seeds_worked_example_30_s_window_sliding_by_10_s(spark):
    """Seed 001: count events per 30 s window sliding by 10 s (events labelled mm:ss)."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    at = ["1:01", "1:04", "1:07", "1:12", "1:14", "1:15", "1:19", "1:23", "1:28", "1:29", "1:31", "1:37",
          "1:42", "1:45"]
    secs = [int(m) * 60 + int(s) for m, s in (t.split(":") for t in at)]
    df = spark.createDataFrame([("k", s) for s in secs], "key string, s long") \
        .withColumn("ts", F.timestamp_seconds("s"))
    out = windows.sliding(df, ["key"], "ts", "30 seconds", "10 seconds", {"n": agg.count()})
    got = {(r.window_start.minute * 60 + r.window_start.second): r.n for r in out.collect()}
    expected = {start: sum(start <= s < start + 30 for s in secs) for start in range(40, 110, 10)}
    assert got == {s: n for s, n in expected.items() if n}
    assert got[60] == 10 and got[90] == 4  # 1:00-1:30 holds ten events, 1:30-2:00 four


_COMPAT = pytest.mark.compat


@pytest.mark.parametrize("kind,jitter_us,state", [pytest.param("sliding", 0, "store", marks=_COMPAT),
                                                   pytest.param("session", 0, "store", marks=_COMPAT),
                                                   ("sliding", 2_000_000, "store"),
                                                   pytest.param("sliding", 0, "files", marks=_COMPAT),
                                                   ("session", 2_000_000, "files")])
def test_streaming_equals_spark_streaming_with_a_watermark(spark, tmp_path, kind, jitter_us, state):
    """In order, and out of order within the allowed lateness (with null amounts); the
    windows' state in Spark's state store, or in files (``state_location``)."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    write_files(tmp_path / "src", in_order_batches(7, 4, 400, jitter_us))

    def stream():
        return (spark.readStream.schema("account string, ts double, amount long")
                .option("maxFilesPerTrigger", 1).json(str(tmp_path / "src"))
                .withColumn("ts", F.col("ts").cast("timestamp")))

    aggs = {"n": agg.count(), "total": agg.sum("amount"), "top": agg.max("amount"), "low": agg.min("amount")}
    where = str(tmp_path / "state") if state == "files" else None
    if kind == "sliding":
        ours = windows.sliding(stream(), ["account"], "ts", "30 seconds", "10 seconds", aggs,
                               lateness="5 seconds", state_location=where)
        w, col = F.window("ts", "30 seconds", "10 seconds"), "window"
    else:
        ours = windows.session(stream(), ["account"], "ts", "3 seconds", aggs, lateness="5 seconds",
                               state_location=where)
        w, col = F.session_window("ts", "3 seconds"), "session_window"
    ref = (stream().withWatermark("ts", "5 seconds").groupBy("account", w)
           .agg(F.count("*").alias("n"), F.sum("amount").alias("total"), F.max("amount").alias("top"),
                F.min("amount").alias("low"))
           .select("account", F.col(f"{col}.start"), F.col(f"{col}.end"), "n", "total", "top", "low"))
    got = {}
    for name, df in (("ours", ours), ("ref", ref)):
        label = f"w_{kind}_{jitter_us}_{state}_{name}"
        q = (df.writeStream.format("memory").queryName(label).outputMode("append")
             .option("checkpointLocation", str(tmp_path / f"ck-{name}")).trigger(availableNow=True).start())
        assert q.awaitTermination(300), "still running after 300 s"
        assert q.exception() is None
        table = spark.table(label).where("account != '~flush'")
        got[name] = sorted(tuple(r) for r in table.collect())
        if name == "ours" and where:  # a session spark_ext.configure built: one job a batch, not two
            plan = str(q._jsq.streamingQuery().lastExecution().executedPlan().toString())
            assert "AdaptiveSparkPlan" not in plan, plan
    assert got["ours"] and got["ours"] == got["ref"]


def test_late_events_are_counted_in_the_query_progress(spark, tmp_path):
    """Events whose every window was already emitted are dropped; the query's progress says
    how many, per batch (observed metric ``late_events``), not only the log."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    on_time = [{"account": "a", "ts": float(t), "amount": 1} for t in range(0, 100)]
    later = [{"account": "a", "ts": float(t), "amount": 1} for t in range(200, 300)]
    late = [{"account": "b", "ts": 10.0 + t, "amount": 1} for t in range(7)]  # windows 0-40 s emitted
    write_files(tmp_path / "src", [on_time, later, [*late, {"account": "a", "ts": 300.0, "amount": 1}]])
    df = (spark.readStream.schema("account string, ts double, amount long").option("maxFilesPerTrigger", 1)
          .json(str(tmp_path / "src")).withColumn("ts", F.col("ts").cast("timestamp")))
    ours = windows.sliding(df, ["account"], "ts", "30 seconds", "10 seconds", {"n": agg.count()},
                           lateness="5 seconds", metrics="pay_windows")
    q = (ours.writeStream.format("memory").queryName("w_late").outputMode("append")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert q.awaitTermination(300), "still running after 300 s"
    assert q.exception() is None
    per_batch = [p["observedMetrics"]["pay_windows"]["late_events"] for p in q.recentProgress
                 if p["numInputRows"]]
    assert per_batch == [0, 0, 7]
    assert spark.table("w_late").where("account = 'b'").count() == 0  # dropped, not emitted


def test_a_restart_with_another_window_definition_is_refused_and_the_old_one_resumes(spark, tmp_path):
    """The kept frames are numbered under the slide they were built with: a restart with
    another slide must fail naming it, before it writes anything; restarting with the old
    definition then ends as one uninterrupted run would."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    files = in_order_batches(11, 4, 200)
    aggs = {"n": agg.count(), "total": agg.sum("amount")}

    out: dict[str, dict[int, list[tuple]]] = {}

    def run(ckpt: str, src: str, slide: str):
        df = (spark.readStream.schema("account string, ts double, amount long")
              .option("maxFilesPerTrigger", 1).json(str(tmp_path / src))
              .withColumn("ts", F.col("ts").cast("timestamp")))
        ours = windows.sliding(df, ["account"], "ts", "30 seconds", slide, aggs, lateness="5 seconds")
        batches = out.setdefault(ckpt, {})  # by batch id: a replayed batch replaces its first try
        keep = lambda b, i: batches.__setitem__(i, [tuple(r) for r in b.collect()])  # noqa: E731
        q = (ours.writeStream.foreachBatch(keep)
             .option("checkpointLocation", str(tmp_path / ckpt)).trigger(availableNow=True).start())
        try:
            assert q.awaitTermination(300), "still running after 300 s"
        except StreamingQueryException:
            pass  # the caller looks at q.exception()
        return q

    write_files(tmp_path / "whole", files)
    assert run("ck-whole", "whole", "10 seconds").exception() is None
    write_files(tmp_path / "src", files[:2])
    assert run("ck", "src", "10 seconds").exception() is None
    first = dict(out["ck"])
    write_files(tmp_path / "src", files)
    changed = run("ck", "src", "15 seconds")
    assert changed.exception() is not None, "a restart under another slide ran on"
    assert "slide 10 s -> 15 s" in str(changed.exception())
    assert out["ck"] == first  # nothing of the refused run reached the sink
    assert run("ck", "src", "10 seconds").exception() is None
    got = sorted(r for rows in out["ck"].values() for r in rows)
    assert got and got == sorted(r for rows in out["ck-whole"].values() for r in rows)


@pytest.mark.services
# make test keeps the partitions of one topic; partitions of several topics run in make faults.
@pytest.mark.parametrize("layout", ["partitions", pytest.param("topics", marks=pytest.mark.campaign)])
def test_a_lagging_kafka_partition_is_not_dropped_as_late(spark, services, tmp_path, layout):
    """One source partition lags 900 s behind the other: partitions 0 and 1 of one topic,
    or partition 0 of two topics (which the clock must tell apart: keyed by partition
    number alone, the leading topic's events moved the lagging one's watermark). Spark's
    global watermark (max - delay) drops the lagging partition's later events as late;
    ours (min over partitions) keeps every one. Spark runs beside ours for one layout."""
    from pyspark.sql import functions as F

    from tests.support.kafka_util import create_topic, produce

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    bootstrap = services.kafka_bootstrap
    if layout == "partitions":
        topic = create_topic(bootstrap, 2, "lag")
        lead, lag, topics = (topic, 0), (topic, 1), topic
    else:
        lead, lag = (create_topic(bootstrap, 1, "lead"), 0), (create_topic(bootstrap, 1, "lagt"), 0)
        topics = f"{lead[0]},{lag[0]}"

    def send(leading: bool, secs: list[int]) -> None:
        topic, part = lead if leading else lag
        produce(bootstrap, topic, [(part, b"k", json.dumps({"account": "a", "s": s}).encode()) for s in secs])

    def stream():
        return (spark.readStream.format("hzsource").option("connector", "kafka")
                .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topics)
                .option("startingOffsets", "earliest").load()
                .select("topic", "partition",
                        F.from_json(F.col("value").cast("string"), "account string, s long").alias("j"))
                .select("topic", "partition", "j.account", F.timestamp_seconds("j.s").alias("ts")))

    ours = windows.tumbling(stream(), ["account"], "ts", "10 seconds", {"n": agg.count()},
                            lateness="5 seconds", partition_column="partition")
    spark_w = (stream().withWatermark("ts", "5 seconds").groupBy("account", F.window("ts", "10 seconds"))
               .agg(F.count("*").alias("n")).select("account", "window.start", "n"))
    runs = (("ours", ours), ("spark", spark_w)) if layout == "partitions" else (("ours", ours),)

    def run_all() -> None:
        for name, df in runs:
            q = (df.writeStream.format("parquet").option("path", str(tmp_path / f"out-{name}"))
                 .outputMode("append").option("checkpointLocation", str(tmp_path / f"ck-{name}"))
                 .trigger(availableNow=True).start())
            assert q.awaitTermination(300), "still running after 300 s"
            assert q.exception() is None

    send(True, list(range(1000, 1030)))
    send(False, list(range(100, 130)))
    run_all()
    send(True, list(range(1030, 1060)))
    send(False, list(range(130, 160)))  # behind the leading partition's watermark, ahead of its own
    run_all()
    send(True, [5000])
    send(False, [5000])  # both partitions move on: every window closes
    run_all()
    run_all()  # Spark applies a new watermark one batch later
    ours_rows = spark.read.parquet(str(tmp_path / "out-ours")).collect()
    assert len(ours_rows) == len({r.window_start for r in ours_rows})  # no window twice
    ours_n = {r.window_start.timestamp(): r.n for r in ours_rows}
    expected = {float(w): 10 for w in [*range(100, 160, 10), *range(1000, 1060, 10)]}
    assert ours_n == expected  # every event of the lagging partition counted
    if layout == "partitions":
        # Spark's watermark (1029 - 5 s after the first run) drops all of the lagging
        # partition's second run: its windows 130, 140 and 150 never appear.
        spark_rows = spark.read.parquet(str(tmp_path / "out-spark")).collect()
        spark_n = {r.start.timestamp(): r.n for r in spark_rows}
        assert spark_n == {w: n for w, n in expected.items() if w not in (130.0, 140.0, 150.0)}


@pytest.mark.services
def test_windows_close_when_the_input_goes_idle(spark, services, tmp_path):
    """Partition 1's events end at 120 s, partition 0's at 160 s, then the input stops.
    The first batch emits only what partition 1 allows (windows ending by 120 s). With
    ``emit_when_idle``, once ``idle_timeout`` passes without input no partition holds the
    watermark back: every window ending by 160 s is emitted, once, without another event
    arriving, while the query keeps running."""
    import time
    from collections import Counter

    from pyspark.sql import functions as F

    from tests.support.kafka_util import create_topic, produce
    from tests.support.waiting import wait_for

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 2, "idle")
    sent = {0: list(range(100, 161)), 1: list(range(100, 121))}
    for part, secs in sent.items():
        produce(bootstrap, topic, [(part, b"k", json.dumps({"account": "a", "s": s}).encode()) for s in secs])
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").load()
          .select("partition",
                  F.from_json(F.col("value").cast("string"), "account string, s long").alias("j"))
          .select("partition", "j.account", F.timestamp_seconds("j.s").alias("ts")))
    ours = windows.tumbling(df, ["account"], "ts", "10 seconds", {"n": agg.count()},
                            partition_column="partition", idle_timeout="3 seconds", emit_when_idle=True)
    q = (ours.writeStream.format("memory").queryName("w_idle").outputMode("append")
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="500 milliseconds").start())
    latest = max(max(v) for v in sent.values())
    expected = {float(w): n for w, n in Counter(s // 10 * 10 for v in sent.values() for s in v).items()
                if w + 10 <= latest}

    def emitted() -> dict[float, int]:
        return {r.window_start.timestamp(): r.n for r in spark.table("w_idle").collect()}

    try:
        wait_for(lambda: any(p["numInputRows"] for p in q.recentProgress) or not q.isActive, "the data batch")
        first = emitted()
        assert first == {w: n for w, n in expected.items() if w + 10 <= max(sent[1])}, first
        t0 = time.monotonic()
        wait_for(lambda: len(emitted()) >= len(expected) or not q.isActive, "the idle windows", timeout=60)
        waited = time.monotonic() - t0
        seen = len(q.recentProgress)
        wait_for(lambda: len(q.recentProgress) >= seen + 4, "four more triggers")
        assert q.isActive, q.exception()
        rows = spark.table("w_idle").collect()
        assert len(rows) == len(expected) and emitted() == expected, rows  # each window once
        assert waited < 3 + 15, f"idle windows came {waited:.1f} s after the data batch"
    finally:
        q.stop()


def test_no_keys_and_empty_partitions(spark):
    """One window series over everything (no keys), with input partitions left empty."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    df = frame(spark, events(3, 300, 3, 100)).repartition(6).where("account = 'k1'")
    ours = windows.tumbling(df, [], "ts", "20 seconds", {"n": agg.count(), "low": agg.min("amount")})
    ref = (df.groupBy(F.window("ts", "20 seconds"))
           .agg(F.count("*").alias("n"), F.min("amount").alias("low"))
           .select("window.start", "window.end", "n", "low"))
    assert sorted(map(tuple, ours.collect())) == sorted(map(tuple, ref.collect()))
    assert windows.tumbling(df.limit(0), [], "ts", "20 seconds", {"n": agg.count()}).count() == 0


@pytest.mark.parametrize("call,expected", [
    (lambda df: windows.sliding(df, ["account"], "ts", "60 seconds", "7 seconds", {"n": agg.count()}),
     "not a multiple of slide"),
    (lambda df: windows.sliding(df, ["nope"], "ts", "60 seconds", "10 seconds", {"n": agg.count()}),
     "column 'nope' is not in the DataFrame"),
    (lambda df: windows.tumbling(df, ["account"], "amount", "60 seconds", {"n": agg.count()}),
     "cast it to timestamp"),
    (lambda df: windows.tumbling(df, ["account"], "ts", "sixty", {"n": agg.count()}), "write a duration"),
    (lambda df: windows.tumbling(df, ["account"], "ts", "1 minute", {"s": agg.sum("missing")}),
     "reads column 'missing'"),
    (lambda df: windows.tumbling(df, ["account"], "ts", "1 minute", {"n": agg.count()},
                                 partition_column="account"),
     r"partition_column 'account' has type string.*\('topic', 'partition'\)"),
])
def test_bad_arguments_fail_on_the_driver(spark, call, expected):
    df = frame(spark, events(1, 5, 1, 10))
    with pytest.raises(WindowError, match=expected):
        call(df)


def test_state_location_is_checked_on_the_driver(spark, tmp_path):
    """Not with emit_when_idle (only Spark's timeouts wake an idle bucket), and it must be
    writable: both refused when the query is built, before it runs."""
    stream = spark.readStream.schema("account string, ts timestamp, amount long").json(str(tmp_path))
    aggs = {"n": agg.count()}
    with pytest.raises(WindowError, match="emit_when_idle needs Spark's state store"):
        windows.tumbling(stream, ["account"], "ts", "1 minute", aggs, emit_when_idle=True,
                         state_location=str(tmp_path / "state"))
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(WindowError, match="is not writable"):
        windows.tumbling(stream, ["account"], "ts", "1 minute", aggs,
                         state_location=str(tmp_path / "taken" / "s"))
