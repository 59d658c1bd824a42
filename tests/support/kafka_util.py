"""Helpers for tests against the real local Kafka broker: topics and producers."""

from __future__ import annotations

import time
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
    # Wait until every partition has a leader, so the first produce cannot race creation.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and len(md.partitions) == partitions and all(
            p.leader >= 0 for p in md.partitions.values()
        ):
            return name
        time.sleep(0.1)
    raise AssertionError(f"topic {name} did not get leaders in 30 s")


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
