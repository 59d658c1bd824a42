"""Helpers for tests against the real local Kafka broker: topics and producers."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

Record = tuple[int, bytes | None, bytes | None]  # partition, key, value


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, partitions: int, prefix: str = "t", replication: int = 1,
                 config: dict[str, str] | None = None) -> str:
    name = unique_topic(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(name, partitions, replication, config=config or {})
    admin.create_topics([new])[name].result(timeout=30)
    wait_writable(bootstrap, name, partitions)
    return name


def wait_writable(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30) -> None:
    """Wait until every partition of a new ``topic`` answers at its leader, so a first write
    cannot race its creation. The broker lists a partition's leader (metadata) a moment
    before it has made the partition itself, and refuses a batch sent in between: retried
    with acknowledgements, lost without (``acks=0``; seen: 7 of 100 new topics lost a
    record written right after their leaders were listed). Asking each partition for its
    offsets goes to the partition itself."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from tests.support.waiting import wait_for

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests-wait-writable"})
    waiting = set(range(partitions))

    def answered() -> bool:
        for p in sorted(waiting):
            try:
                c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                waiting.discard(p)
            except KafkaException:
                pass
        return not waiting

    try:
        wait_for(answered, f"every partition of topic {topic} to answer at its leader", timeout_s)
    finally:
        c.close()


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=30)


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    """Move the partition's log start offset, as retention would."""
    from confluent_kafka import TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.delete_records([TopicPartition(topic, partition, offset)])
    for f in futs.values():
        f.result(timeout=30)


def produce(bootstrap: str, topic: str, records: Iterable[Record],
            headers: list[tuple[str, str | bytes | None]] | None = None) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    n = 0
    for part, key, value in records:
        while True:
            try:
                p.produce(topic, value=value, key=key, partition=part, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
        n += 1
    assert p.flush(60) == 0, "records left unsent"
    return n


def values(topic_records: Iterable[Record]) -> list[bytes]:
    return [v for _, _, v in topic_records if v is not None]


def numbered(partitions: int, count: int, start: int = 0, tag: str = "v") -> list[Record]:
    """``count`` records spread round-robin, value ``<tag>-<i>`` and key ``k<i % 7>``."""
    return [(i % partitions, f"k{i % 7}".encode(), f"{tag}-{i}".encode())
            for i in range(start, start + count)]
