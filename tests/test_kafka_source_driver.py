"""The Kafka source's driver side against the real broker, without Spark: the planning calls
Spark makes, in the order it makes them, with a race made deterministic by holding a step."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.options import Options
from tests.support.kafka_util import create_topic, produce, unique_topic
from tests.support.processes import driver_report

pytestmark = [pytest.mark.services]


def _config(services: Any, **opts: str) -> KafkaSourceConfig:
    return KafkaSourceConfig.parse(Options({"kafka.bootstrap.servers": services.kafka_bootstrap, **opts},
                                           "hzsource"))


def _gone_from_offsets(admin: AdminClient, topic: str, deadline_s: float = 60.0) -> None:
    """Wait until the broker answers an offset lookup of ``topic`` with "unknown topic"."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        fut = admin.list_offsets({KTopicPartition(topic, 0): OffsetSpec.latest()}, request_timeout=10)
        try:
            next(iter(fut.values())).result()
        except KafkaException:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} still answers offsets {deadline_s} s after its deletion")


def test_a_pattern_topic_deleted_between_the_listing_and_the_offset_lookup_is_left_out(services):
    """``subscribePattern`` names topic a in the listing; a is deleted before the offset
    lookup. Spark drops such a topic (``failOnDataLoss=false``) and the query goes on; the
    lookup's "unknown topic or partition" must not fail the query (nor, after the retries,
    be ridden out as a broker that is away)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_ext.connectors.kafka.source import KafkaStreamReader

    stem = unique_topic("vanish")
    a = create_topic(services.kafka_bootstrap, 1, f"{stem}-a")
    b = create_topic(services.kafka_bootstrap, 1, f"{stem}-b")
    produce(services.kafka_bootstrap, a, [(0, None, b"x")] * 10)
    produce(services.kafka_bootstrap, b, [(0, None, b"y")] * 10)
    reader = KafkaStreamReader(_config(services, subscribePattern=f"{stem}-[ab]-[0-9a-f]+",
                                       startingOffsets="earliest", failOnDataLoss="false"))
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first == {a: {"0": 10}, b: {"0": 10}}
    produce(services.kafka_bootstrap, b, [(0, None, b"z")] * 5)

    admin = AdminClient({"bootstrap.servers": services.kafka_bootstrap})
    meta = reader._plan.meta
    listing = meta._topics
    held: list[str] = []

    def listing_then_delete() -> dict[str, int]:
        topics = listing()
        if a in topics and not held:  # the listing named a: delete it before the lookup
            held.append(a)
            admin.delete_topics([a])[a].result(30)
            _gone_from_offsets(admin, a)
        return topics

    meta._topics = listing_then_delete  # type: ignore[method-assign]
    try:
        end = reader.latestOffset(first, ReadAllAvailable())
    finally:
        reader.stop()
    assert held == [a]
    # b goes on; a keeps the offset it was read to (a topic that comes back is not read twice)
    assert end == {a: {"0": 10}, b: {"0": 15}}
    assert [(r.topic, r.start, r.end) for r in _ranges(reader.partitions(first, end))] == [(b, 10, 15)]


def _ranges(parts: Any) -> list[Any]:
    out: list[Any] = []
    for p in parts:
        out.extend(getattr(p, "ranges", None) or [p])
    return out


# An AvailableNow run's planning calls, as Spark makes them, in the source's own process,
# which ends as Spark ends it: at once (the JVM destroys its planning worker; no stop()).
_AVAILABLE_NOW_RUN = """
import os, sys
from pyspark.sql.streaming.datasource import ReadMaxRows
from spark_ext.connectors.kafka.source import KafkaStreamReader
from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.options import Options

bootstrap, topic, group = sys.argv[1:4]
reader = KafkaStreamReader(KafkaSourceConfig.parse(Options({
    "kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
    "maxOffsetsPerTrigger": "400", "commitOffsetsToGroup": group}, "hzsource")))
reader.prepareForTriggerAvailableNow()
start, done = reader.initialOffset(), None
while True:
    end = reader.latestOffset(start, ReadMaxRows(400))
    if done is not None:
        reader.commit(done)  # Spark commits the last batch once it planned the next
    if end == start:
        break  # the run is over
    done, start = end, end
os._exit(0)
"""


def test_an_available_now_runs_last_batch_reaches_the_group_though_its_process_ends_at_once(services):
    """``commitOffsetsToGroup`` under ``AvailableNow`` (1,200 records, 2 partitions, 400 a
    batch): the last batch's end offsets go to the group only in the run's final, empty
    plan, and Spark ends the source's process right after it. Queued and not waited for,
    that commit was lost now and then; waited for but sent while earlier commits were in
    flight, it was applied before them now and then (asynchronous commits complete in any
    order). Either way Kafka's tools showed the last batch (200 a partition) as lag for good.
    The order is checked deterministically in tests/test_kafka_source_unit.py."""
    topic = create_topic(services.kafka_bootstrap, 2, "lastcommit")
    produce(services.kafka_bootstrap, topic, [(i % 2, None, b"x") for i in range(1200)])
    admin = AdminClient({"bootstrap.servers": services.kafka_bootstrap})
    for run in range(6):  # each run a group of its own: the old code lost about one run in six
        group = f"last-{run}-{topic}"
        done = subprocess.run([sys.executable, "-c", _AVAILABLE_NOW_RUN, services.kafka_bootstrap, topic,
                               group], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, driver_report(done)
        fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        got = {tp.partition: tp.offset for tp in fut.result(30).topic_partitions}
        assert got == {0: 600, 1: 600}, (run, got)
