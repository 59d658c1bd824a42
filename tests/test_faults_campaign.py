"""The fault campaign (``make faults``) on the real services: single faults found by it,
kept as regression tests, and a short campaign over every pipeline."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from bench.common import kafka_sink_prefix
from bench.faults import Outcome, run_faults
from bench.faults.campaign import Fault, short_plan
from bench.faults.pipelines import PIPELINES, SHORT_PIPELINES
from spark_ext.commit import TaskInfo
from spark_ext.connectors.kafka import KafkaSink
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from tests.support.kafka_sink import consume, open_transactions
from tests.support.kafka_util import create_topic
from tests.support.sinks import crashed_points, new_query_id

pytestmark = [pytest.mark.spark, pytest.mark.services]


@pytest.mark.restarts_services
# at_least_once rides the restart with the same sender as exactly_once: make faults runs it,
# keeping make test within its 20 minutes.
@pytest.mark.parametrize("guarantee", [Guarantee.EXACTLY_ONCE,
                                       pytest.param(Guarantee.AT_LEAST_ONCE, marks=pytest.mark.campaign)])
def test_a_kafka_restart_while_a_task_writes_is_ridden_out(services, guarantee):
    """The broker restarts between two parts of one task's rows, with produce requests in
    flight: the task resends what was not acknowledged (same producer id and sequence
    numbers, so nothing twice) instead of failing. It used to fail with "Kafka refused
    ... NotLeaderOrFollower" or a reset connection, and Spark's few task retries all fell
    inside the restart, failing the query."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    import subprocess
    import sys

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 2, "krestart")
    o = Options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                 "transactionalidprefix": f"rs-{topic}", "kafka.batch.size": "1024"}, "hzsink")
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    plan = KafkaSink().plan(o, schema, guarantee)
    rows = [str(i) for i in range(4000)]

    def parts():
        yield pa.record_batch([pa.array(rows[:2000])] * 2, names=["key", "value"])
        for verb in ("down", "up"):
            subprocess.run([sys.executable, "-m", "services", verb, "kafka"], check=True, capture_output=True)
        yield pa.record_batch([pa.array(rows[2000:])] * 2, names=["key", "value"])

    task = TaskInfo(query_id=qid, batch_id=0, partition_id=0, attempt=0, task_attempt_id=0)
    msg = plan.new_writer().write(parts(), task)
    plan.new_committer().commit([msg], 0, plan.claim)
    assert sorted(v.decode() for _, _, v in consume(bootstrap, topic)) == sorted(rows)


@pytest.mark.restarts_services
@pytest.mark.campaign  # make faults: 36 s of make test's serial part, over its budget
def test_kafka_kept_connections_serve_the_batches_after_a_broker_restart(services, monkeypatch):
    """Spark reuses the driver's planning and commit workers and the executors' Python
    workers, so the sink and the source's readers keep their Kafka connections from batch
    to batch (a second batch, a second read, opens none). The broker restarts between two
    batches: the next take-over, commit and read find those connections dead and reconnect
    instead of failing, and every record lands once and is read once."""
    import subprocess
    import sys

    from kafka import KafkaConsumer, TopicPartition

    from spark_ext.connectors.kafka.client import connection
    from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
    from spark_ext.connectors.kafka.source.offsets import KafkaRange, KafkaRanges
    from spark_ext.connectors.kafka.source.reader import read_partition

    opened = []
    real_init = connection.Conn.__init__

    def counting_init(self, *args, **kwargs):
        opened.append(args[:2])
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(connection.Conn, "__init__", counting_init)
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 2, "kept")
    o = Options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                 "transactionalidprefix": f"kept-{topic}"}, "hzsink")
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    qid = new_query_id()

    def batch(n: int) -> int:
        """Write batch ``n``; the connections its driver side (plan, commit) opened."""
        before = len(opened)
        plan = KafkaSink().plan(o, schema, Guarantee.EXACTLY_ONCE)
        driver = len(opened) - before
        rows = pa.record_batch([pa.array([f"{n}-{i}" for i in range(100)])] * 2, names=["key", "value"])
        task = TaskInfo(query_id=qid, batch_id=n, partition_id=0, attempt=0, task_attempt_id=n)
        msg = plan.new_writer().write(iter([rows]), task)
        before = len(opened)
        plan.new_committer().commit([msg], n, plan.claim)
        return driver + len(opened) - before

    source = KafkaSourceConfig.parse(Options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic},
                                             "hzsource"))

    def read() -> tuple[list[str], int]:
        """The topic as one task reads it (both partitions' ranges in one input partition,
        the wire fetcher); and the connections that opened."""
        c = KafkaConsumer(bootstrap_servers=bootstrap)
        ends = c.end_offsets([TopicPartition(topic, p) for p in (0, 1)])
        c.close()
        before = len(opened)
        part = KafkaRanges(tuple(KafkaRange(topic, tp.partition, 0, end) for tp, end in sorted(ends.items())))
        got = [v.decode() for b in read_partition(source, part) for v in b.column("value").to_pylist()]
        return sorted(got), len(opened) - before

    def written(batches: int) -> list[str]:
        return sorted(f"{n}-{i}" for n in range(batches) for i in range(100))

    assert source.fetcher == "wire"
    assert batch(0) > 0
    assert batch(1) == 0, opened  # the first batch's connections, kept
    assert read()[0] == written(2)
    assert read() == (written(2), 0)  # the reader's connections, kept
    for verb in ("down", "up"):
        subprocess.run([sys.executable, "-m", "services", verb, "kafka"], check=True, capture_output=True)
    assert batch(2) > 0  # the kept ones were dead: new ones
    got, opened_now = read()
    assert got == written(3) and opened_now > 0
    batch(3)
    values = sorted(v.decode() for _, _, v in consume(bootstrap, topic))
    assert values == written(4)


@pytest.mark.restarts_services
def test_the_postgresql_sinks_kept_connections_serve_the_batches_after_a_restart(services, monkeypatch):
    """The PostgreSQL sink's take-over and commit keep their connection in the reused
    driver workers (a second batch opens none). PostgreSQL restarts between two batches:
    the next take-over and commit find the kept connection dead, connect anew, and every
    row lands once. Once the query is gone, the server ends the idle kept connection."""
    import subprocess
    import sys
    import time
    import uuid

    import sqlalchemy as sa

    from spark_ext.connectors.jdbc import JdbcSink, transactions

    opened = []
    real_init = transactions.Db.__init__

    def counting_init(self, cfg):
        opened.append(cfg.sink_id)
        real_init(self, cfg)

    monkeypatch.setattr(transactions.Db, "__init__", counting_init)
    monkeypatch.setattr(transactions, "KEPT_IDLE_S", 2)
    table = f"kept_{uuid.uuid4().hex[:10]}"
    o = Options({"url": services.postgres_url, "dbtable": table, "createtable": "true",
                 "sinkid": f"kept-{table}"}, "hzsink")
    schema = StructType([StructField("k", StringType()), StructField("v", StringType())])
    qid = new_query_id()

    def batch(n: int) -> int:
        """Write and commit batch ``n``; the coordinator connections it opened."""
        before = len(opened)
        plan = JdbcSink().plan(o, schema, Guarantee.EXACTLY_ONCE)
        rows = pa.record_batch([pa.array([f"{n}-{i}" for i in range(100)])] * 2, names=["k", "v"])
        task = TaskInfo(query_id=qid, batch_id=n, partition_id=0, attempt=0, task_attempt_id=n)
        msg = plan.new_writer().write(iter([rows]), task)
        plan.new_committer().commit([msg], n, plan.claim)
        return len(opened) - before

    assert batch(0) > 0
    assert batch(1) == 0, opened  # the first batch's connections, kept
    for verb in ("down", "up"):
        subprocess.run([sys.executable, "-m", "services", verb, "postgres"], check=True, capture_output=True)
    assert batch(2) > 0  # the kept one was dead: a new one
    batch(3)
    with sa.create_engine(services.postgres_url).connect() as c:
        got = sorted(r[0] for r in c.execute(sa.text(f"SELECT k FROM {table}")))
        assert got == sorted(f"{n}-{i}" for n in range(4) for i in range(100))

        def parked() -> int:
            c.rollback()  # pg_stat_activity is a snapshot per transaction
            return int(c.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :n"),
                                 {"n": transactions._parked_name(f"kept-{table}")}).scalar_one())

        assert parked() == 1  # kept, and not counted as a running query's session
        deadline = time.monotonic() + 30
        while parked() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert parked() == 0  # ended by the server after KEPT_IDLE_S


# The sink conformance suite (every sink at every step) and the queue source tests crash
# their points; the campaign adds the rest.
SHORT = short_plan([PIPELINES[n] for n in SHORT_PIPELINES], covered=crashed_points())


def _assert_held(outcome: Outcome) -> None:
    print(outcome.line())
    assert not outcome.error and not outcome.missed, outcome
    assert outcome.lost == 0, outcome
    if PIPELINES[outcome.name].exactly_once:
        assert (outcome.duplicated, outcome.in_doubt) == (0, 0), outcome


@pytest.mark.campaign
@pytest.mark.parametrize("name", SHORT_PIPELINES)
def test_a_short_campaign_crashes_every_failpoint_once_and_keeps_every_guarantee(tmp_path, services, name):
    """What ``make faults`` does, short: across the six pipelines every failpoint the sink
    conformance suite does not crash, once (a task killed at each task point), a kill -9,
    a zombie run and a checkpoint reset
    (``short_plan``), then a clean last run and the count. Every fault must strike."""
    _assert_held(run_faults(PIPELINES[name], tmp_path, SHORT[name]))


@pytest.mark.campaign
@pytest.mark.restarts_services
def test_kafka_and_postgres_restarts_under_a_running_pipeline_keep_every_guarantee(tmp_path, services):
    """PostgreSQL, then Kafka, restarted under a running exactly_once windowed pipeline
    (Kafka source, window state, PostgreSQL sink), each after it committed a batch: the
    query rides both out, then the count. One pipeline run for both restarts keeps the
    serial part of make test short; the Kafka sink's writer rides a restart in
    test_a_kafka_restart_while_a_task_writes_is_ridden_out, its committer in make faults
    (kafka_to_kafka), an Artemis restart under an exactly_once queue query in
    tests/test_jms_faults.py."""
    _assert_held(run_faults(PIPELINES["kafka_windows_to_jdbc"], tmp_path,
                            [Fault("restart", "postgres", 1), Fault("restart", "kafka", 1)]))


@pytest.mark.campaign  # make faults: a campaign run of its own (40 s), beside the campaigns it checks
def test_a_campaign_broken_off_counts_only_what_was_due(tmp_path, services):
    """A fault that cannot be carried out (a restart of a service that does not exist)
    breaks the campaign off after its run committed two batches. The FAULTS line says
    interrupted, with the reason; only what the committed batches read is due, so the
    input no run got to read is not counted lost (it used to be: lost = input - committed).
    Then the query is run to its end, so the run the break-off killed inside a batch leaves
    no transaction open on the shared broker (a fresh-clone make test found two, left
    Ongoing for the suite's leftover check)."""
    o = run_faults(PIPELINES["kafka_to_kafka"], tmp_path, [Fault("restart", "no-such-service", 2)])
    prefix = kafka_sink_prefix(f"file:{tmp_path / 'ckpt'}")
    assert open_transactions(services.kafka_bootstrap, prefix) == [], prefix
    print(o.line())
    assert o.status == "interrupted" and "no-such-service" in o.error, o.line()
    assert 'reason="`services down no-such-service` failed:' in o.line()
    assert 0 < o.due < o.expected, o.line()  # what the committed batches read, not the whole input
    assert o.committed >= o.due and o.lost == 0 and o.duplicated == 0, o.line()
