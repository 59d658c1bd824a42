"""Helpers for tests of the Kafka sink against the real broker: reading what it committed,
its open transactions, a query from JSON files, and its plan and writer driven by hand."""

from __future__ import annotations

import pyarrow as pa
from kafka import KafkaConsumer

from bench.common import kafka_sink_prefix, read_to_end
from spark_ext.commit import TaskInfo
from spark_ext.connectors.kafka import KafkaSink
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient
from spark_ext.connectors.kafka.sink.writer import KafkaWriter
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from tests.support.listeners import Listener

OPEN = ["Ongoing", "PrepareCommit", "PrepareAbort"]


def as_listener(where: str | Listener) -> Listener:
    return Listener("plaintext", where) if isinstance(where, str) else where


def read_all(where: str | Listener, topic: str, committed: bool = True) -> list:
    """Every record of ``topic`` up to its end (for read_committed: the last stable offset),
    read until the position reaches it: never "stop after some silence". ``where``: a
    plain-text bootstrap, or a listener whose credentials the reader uses."""
    c = KafkaConsumer(**as_listener(where).kafka_python(), enable_auto_commit=False,
                      isolation_level="read_committed" if committed else "read_uncommitted")
    try:
        return read_to_end(c, topic, timeout_s=60)
    finally:
        c.close()


def consume(where: str | Listener, topic: str,
            committed: bool = True) -> list[tuple[int, bytes | None, bytes]]:
    """Every record of ``topic`` as (partition, key, value), read to the end."""
    return [(r.partition, r.key, r.value) for r in read_all(where, topic, committed)]


def end_offsets(bootstrap: str, topic: str) -> int:
    """Records (and markers) ever appended to ``topic``: 0 means nothing was written."""
    from kafka import TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        parts = c.partitions_for_topic(topic)
        assert parts, f"no metadata for topic {topic}"
        return sum(c.end_offsets([TopicPartition(topic, p) for p in parts]).values())
    finally:
        c.close()


def open_transactions(where: str | Listener, prefix: str) -> list[tuple[str, int, str]]:
    """Kafka's ListTransactions admin API: this sink's transactions still open."""
    lis = as_listener(where)
    client = KafkaTxnClient(lis.bootstrap, security=lis.security())
    try:
        return client.list_transactions(prefix.replace(".", r"\.") + ".*", OPEN)
    finally:
        client.close()


def prefix_of(ckpt: object) -> str:
    return kafka_sink_prefix(ckpt)


def run(spark, src, ckpt, bootstrap: str, topic: str, select: tuple[str, ...] | None = None,
        extra: dict[str, str] | None = None, **opts: str):
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(str(src))
    out = df.repartition(3, "id").selectExpr(*(select or ("CAST(id AS STRING) AS key", "v AS value")))
    w = (out.writeStream.format("hzsink").option("connector", "kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True))
    if topic:
        w = w.option("topic", topic)
    for k, v in {**opts, **(extra or {})}.items():
        w = w.option(k, v)
    return w.start()


def sink_plan(bootstrap: str, topic: str, prefix: str, listener: Listener | None = None,
              opts: dict[str, str] | None = None, guarantee: Guarantee = Guarantee.EXACTLY_ONCE):
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    o = Options({"kafka.bootstrap.servers": bootstrap, "topic": topic, "transactionalidprefix": prefix,
                 **(listener.spark_options() if listener else {}), **(opts or {})}, "hzsink")
    return KafkaSink().plan(o, schema, guarantee)


def prepare_batch(plan, batch: int, rows: list[str], partition: int = 0, attempt: int = 0):
    data = pa.record_batch([pa.array(rows), pa.array(rows)], names=["key", "value"])
    task = TaskInfo(query_id="q1", batch_id=batch, partition_id=partition, attempt=attempt, task_attempt_id=0)
    writer = plan.new_writer()
    assert isinstance(writer, KafkaWriter)
    return writer.write(iter([data]), task)

