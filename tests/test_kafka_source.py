"""The Kafka source against the real local broker, in real Spark queries."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from spark_ext import compat
from tests.support.kafka_source import run_available_now
from tests.support.kafka_util import (
    add_partitions,
    create_topic,
    delete_records_before,
    numbered,
    produce,
)
from tests.support.releases import assert_refused_for_release, refusal
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.services]


def hz(spark, services, topic: str | None = None, **opts: str):
    r = spark.readStream.format("hzsource").option("connector", "kafka")
    r = r.option("kafka.bootstrap.servers", services.kafka_bootstrap)
    if topic is not None:
        r = r.option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def positions(spark, table: str) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in spark.table(table).select("partition", "offset").collect())


FETCHERS = ["wire", "librdkafka"]


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_schema_and_rows_match_spark_builtin_source(spark, services, fetcher):
    topic = create_topic(services.kafka_bootstrap, 3, "parity")
    recs = numbered(3, 120)
    produce(services.kafka_bootstrap, topic, recs[:60], headers=[("h1", b"x"), ("h2", None)])
    produce(services.kafka_bootstrap, topic, [(0, None, b"no-key"), (1, b"tombstone", None), *recs[60:]])

    def read(fmt_kafka: bool):
        r = (spark.read.format("kafka") if fmt_kafka
             else spark.read.format("hzsource").option("connector", "kafka").option("fetcher", fetcher))
        return (r.option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
                .option("includeHeaders", "true").load())

    ours, builtin = read(False), read(True)
    assert ours.schema == builtin.schema
    # Streaming schema too: the swap format("kafka") -> hzsource must not change columns.
    assert hz(spark, services, topic, includeHeaders="true").schema == builtin.schema
    assert hz(spark, services, topic).schema.names == builtin.schema.names[:-1]

    key = ["partition", "offset"]
    a = [tuple(r) for r in ours.orderBy(*key).collect()]
    b = [tuple(r) for r in builtin.orderBy(*key).collect()]
    assert len(a) == 122
    assert a == b


@pytest.mark.compat
def test_every_record_once_across_micro_batches(spark, services, tmp_path):
    """maxOffsetsPerTrigger caps each batch of an availableNow run (refused before PySpark 4.2)."""
    topic = create_topic(services.kafka_bootstrap, 4, "once")
    produce(services.kafka_bootstrap, topic, numbered(4, 1000))
    df = hz(spark, services, topic, startingOffsets="earliest", maxOffsetsPerTrigger="150")
    if not compat.HAS_ADMISSION_CONTROL:
        w = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
        assert_refused_for_release(refusal(w.trigger(availableNow=True)), "option maxOffsetsPerTrigger")
        return
    q = run_available_now(df, "once_sink", tmp_path / "ckpt")

    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert len(sizes) == 7 and max(sizes) <= 150 and sum(sizes) == 1000
    got = positions(spark, "once_sink")
    assert got == sorted((p, o) for p in range(4) for o in range(250))
    vals = sorted(r.value.decode() for r in spark.table("once_sink").select("value").collect())
    assert vals == sorted(f"v-{i}" for i in range(1000))


def _to_parquet(df, out, ckpt, **trigger):
    return (df.select("partition", "offset", "value").writeStream.format("parquet")
            .option("path", str(out)).option("checkpointLocation", str(ckpt)).trigger(**trigger).start())


@pytest.mark.compat
def test_restart_from_checkpoint_reads_the_rest_exactly_once(spark, services, tmp_path):
    """A stopped query restarts where its checkpoint says, then availableNow reads the rest
    (on PySpark 4.1 through Spark's own availableNow wrapper, without a cap per batch)."""
    topic = create_topic(services.kafka_bootstrap, 2, "restart")
    produce(services.kafka_bootstrap, topic, numbered(2, 400))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    capped = {"maxOffsetsPerTrigger": "50"} if compat.HAS_ADMISSION_CONTROL else {}
    df = hz(spark, services, topic, startingOffsets="earliest", **capped)
    q = _to_parquet(df, out, ckpt, processingTime="0 seconds")
    batches = 2 if capped else 1
    wait_for(lambda: len([p for p in q.recentProgress if p["numInputRows"]]) >= batches, "the first batches")
    q.stop()
    produce(services.kafka_bootstrap, topic, numbered(2, 400, start=400))

    q2 = _to_parquet(hz(spark, services, topic, startingOffsets="earliest"), out, ckpt, availableNow=True)
    assert q2.awaitTermination(180), "still running after 180 s"
    assert q2.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    expected = sorted((p, o) for p in range(2) for o in range(400))
    assert sorted((r.partition, r.offset) for r in rows) == expected
    assert sorted(r.value.decode() for r in rows) == sorted(f"v-{i}" for i in range(800))


def test_new_partitions_are_read_from_offset_zero(spark, services, tmp_path):
    topic = create_topic(services.kafka_bootstrap, 2, "grow")
    df = hz(spark, services, topic)  # latest: only what arrives after the start
    q = (df.writeStream.format("memory").queryName("grow_sink")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="0 seconds").start())
    try:
        wait_for(lambda: q.lastProgress is not None, "the first trigger")
        produce(services.kafka_bootstrap, topic, numbered(2, 20))
        wait_for(lambda: spark.table("grow_sink").count() == 20, "20 rows")
        add_partitions(services.kafka_bootstrap, topic, 4)
        produce(services.kafka_bootstrap, topic, numbered(4, 40, start=100))
        wait_for(lambda: spark.table("grow_sink").count() >= 60, "60 rows")
    finally:
        q.stop()
    got = positions(spark, "grow_sink")
    assert len(got) == 60
    assert [o for p, o in got if p == 2] == list(range(10))
    assert [o for p, o in got if p == 3] == list(range(10))


@pytest.mark.parametrize("fetcher", FETCHERS)
@pytest.mark.parametrize("fail", [True, False])
def test_fail_on_data_loss(spark, services, tmp_path, fail, fetcher):
    topic = create_topic(services.kafka_bootstrap, 1, "loss")
    produce(services.kafka_bootstrap, topic, [(0, None, f"a{i}".encode()) for i in range(100)])
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    opts = {"startingOffsets": "earliest", "failOnDataLoss": str(fail).lower(), "fetcher": fetcher}
    q = _to_parquet(hz(spark, services, topic, **opts), out, ckpt, availableNow=True)
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None
    # While the query is down: 100 more records, then retention removes offsets below 150.
    produce(services.kafka_bootstrap, topic, [(0, None, f"b{i}".encode()) for i in range(100)])
    delete_records_before(services.kafka_bootstrap, topic, 0, 150)

    q2 = _to_parquet(hz(spark, services, topic, **opts), out, ckpt, availableNow=True)
    if fail:
        with pytest.raises(Exception) as info:
            assert q2.awaitTermination(180), "still running after 180 s"
        msg = str(info.value)
        assert f"records 100..149 of {topic}-0 were deleted" in msg
        assert "failOnDataLoss=false" in msg
        assert len(spark.read.parquet(str(out)).collect()) == 100  # nothing more committed
    else:
        assert q2.awaitTermination(180), "still running after 180 s"
        assert q2.exception() is None
        offsets = sorted(r.offset for r in spark.read.parquet(str(out)).collect())
        assert offsets == list(range(100)) + list(range(150, 200))


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_read_committed_skips_aborted_transactions(spark, services, tmp_path, fetcher):
    topic = create_topic(services.kafka_bootstrap, 1, "txn")
    p = Producer({"bootstrap.servers": services.kafka_bootstrap, "transactional.id": f"{topic}-tx"})
    p.init_transactions(30)
    for batch, commit in (("c1", True), ("ab", False), ("c2", True), ("ab2", False)):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, value=f"{batch}-{i}".encode(), partition=0)
        p.flush()
        (p.commit_transaction if commit else p.abort_transaction)(30)
    produce(services.kafka_bootstrap, topic, [(0, None, b"plain")])

    df = hz(spark, services, topic, startingOffsets="earliest", fetcher=fetcher)
    run_available_now(df, f"rc_{fetcher}", tmp_path / "c1")
    got = sorted(r.value.decode() for r in spark.table(f"rc_{fetcher}").collect())
    assert got == sorted([f"c1-{i}" for i in range(10)] + [f"c2-{i}" for i in range(10)] + ["plain"])

    # The option is honoured: read_uncommitted sees the aborted records as well.
    df = hz(spark, services, topic, startingOffsets="earliest", fetcher=fetcher,
            **{"kafka.isolation.level": "read_uncommitted"})
    run_available_now(df, f"ru_{fetcher}", tmp_path / "c2")
    assert spark.table(f"ru_{fetcher}").count() == 41


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_topics_read_through_both_fetchers(spark, services, codec):
    topic = create_topic(services.kafka_bootstrap, 2, f"codec-{codec}")
    p = Producer({"bootstrap.servers": services.kafka_bootstrap, "compression.type": codec, "linger.ms": 50})
    for i in range(500):
        p.produce(topic, value=f"{codec}-{i}".encode() * 3, partition=i % 2)
    assert p.flush(30) == 0
    for fetcher in FETCHERS:
        df = (spark.read.format("hzsource").option("connector", "kafka").option("fetcher", fetcher)
              .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic).load())
        got = sorted(r.value for r in df.select("value").collect())
        assert got == sorted(f"{codec}-{i}".encode() * 3 for i in range(500)), fetcher


def _start_error(spark, services, tmp_path, topic: str | None, **opts: str) -> str:
    df = hz(spark, services, topic, **opts)
    q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "bad")).start()
    with pytest.raises(Exception) as info:
        assert q.awaitTermination(120), "still running after 120 s"
    return str(info.value)


def test_unreachable_bootstrap_fails_at_start(spark, services, tmp_path):
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:1").option("subscribe", "t")
          .option("kafka.default.api.timeout.ms", "3000").option("fetchOffset.numRetries", "0").load())
    q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
    with pytest.raises(Exception) as info:
        assert q.awaitTermination(120), "still running after 120 s"
    assert "Kafka at 127.0.0.1:1" in str(info.value) and "kafka.bootstrap.servers" in str(info.value)


def test_unknown_topic_fails_at_start(spark, services, tmp_path):
    msg = _start_error(spark, services, tmp_path, "no-such-topic-xyz")
    assert "no-such-topic-xyz" in msg and "do not exist" in msg


def test_unknown_assigned_partition_fails_at_start(spark, services, tmp_path):
    topic = create_topic(services.kafka_bootstrap, 1, "assign")
    msg = _start_error(spark, services, tmp_path, None, assign=f'{{"{topic}": [0, 5]}}')
    assert f"{topic}-5" in msg


def test_unknown_client_setting_fails_at_start(spark, services, tmp_path):
    topic = create_topic(services.kafka_bootstrap, 1, "cfg")
    msg = _start_error(spark, services, tmp_path, topic, **{"kafka.no.such.setting": "1"})
    assert "no.such.setting" in msg and "librdkafka" in msg


@pytest.mark.parametrize(("opts", "needle"), [
    ({"assign": '{"t": [0]}'}, "exactly one of"),
    ({"startingOffsets": "{oops"}, "startingOffsets"),
    ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
])
def test_bad_options_fail_at_load(spark, services, opts, needle):
    with pytest.raises(Exception, match=needle):
        hz(spark, services, "t", **opts)


def _batch_files(d) -> set[str]:
    return {p.name for p in d.iterdir() if p.name.isdigit()} if d.exists() else set()
