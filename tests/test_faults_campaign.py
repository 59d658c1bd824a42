"""The fault campaign (``make faults``) on the real services: single faults found by it,
kept as regression tests, and a short seeded campaign over every pipeline."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from bench.faults.campaign import Episodes, Fault
from bench.faults.pipelines import PIPELINES, PipelineRun, count
from connectors.kafka import KafkaSink
from spark_ext.commit import TaskInfo
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from tests.kafka_util import create_topic
from tests.test_kafka_sink import consume

pytestmark = [pytest.mark.spark, pytest.mark.services]


def _episodes(name: str, tmp_path, ids: int = 2400) -> Episodes:
    return Episodes(PipelineRun(PIPELINES[name], tmp_path, ids, 40), lambda msg: None)


def _assert_exactly_once(ep: Episodes) -> None:
    ep.final()
    got = ep.run.committed()
    assert count(got, ep.run.expected) == (0, 0)
    assert len(got) == len(ep.run.expected) and ep.run.in_doubt() == 0
    ep.run.cleanup()


def test_a_postgres_restart_under_a_running_query_is_ridden_out(services, tmp_path):
    """PostgreSQL restarts while Kafka -> PostgreSQL (2PC) runs, after the run committed
    two batches: the query reconnects and goes on (it used to fail at the next batch's
    plan with "Connection refused"), and every row lands once."""
    ep = _episodes("kafka_to_jdbc", tmp_path)
    ep(Fault("restart", "postgres", 2))
    assert ep.injected == 2  # the restart, then the kill that ends the episode: it was still running
    assert ep.failures == []
    _assert_exactly_once(ep)


@pytest.mark.parametrize("guarantee", [Guarantee.EXACTLY_ONCE, Guarantee.AT_LEAST_ONCE])
def test_a_kafka_restart_while_a_task_writes_is_ridden_out(services, guarantee):
    """The broker restarts between two parts of one task's rows, with produce requests in
    flight: the task resends what was not acknowledged (same producer id and sequence
    numbers, so nothing twice) instead of failing. It used to fail with "Kafka refused
    ... NotLeaderOrFollower" or a reset connection, and Spark's few task retries all fell
    inside the restart, failing the query."""
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

    task = TaskInfo(query_id="q", batch_id=0, partition_id=0, attempt=0, task_attempt_id=0)
    msg = plan.new_writer().write(parts(), task)
    plan.new_committer().commit([msg], 0)
    assert sorted(v.decode() for _, _, v in consume(bootstrap, topic)) == sorted(rows)


@pytest.mark.parametrize("name", list(PIPELINES))
def test_a_short_seeded_campaign_keeps_every_guarantee(tmp_path, services, name, capsys):
    """What ``make faults`` does, short: one seeded fault per pipeline, a clean last run,
    then the count. The seed is fixed so CI runs the same faults; 334 gives a different
    kind to each pipeline (a Kafka restart, a zombie run, a kill, a PostgreSQL restart,
    an Artemis restart, a task killed after it wrote)."""
    from bench.faults import campaign

    outcome = campaign(PIPELINES[name], tmp_path, seed=334, crashes=1, every_point=False)
    print(outcome.line())
    assert outcome.crashes >= 1 and not outcome.error, outcome
    assert outcome.lost == 0, outcome
    if PIPELINES[name].exactly_once:
        assert (outcome.duplicated, outcome.in_doubt) == (0, 0), outcome
