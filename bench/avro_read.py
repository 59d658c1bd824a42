"""Bench case ``avro_read``: our source with ``valueFormat=avro`` against Spark's ``kafka``
source followed by the users' workaround (strip the 5-byte wire header, ``from_avro`` with
the schema pinned), same topic, same run.

A topic of ``BENCH_AVRO_READ_ROWS`` Avro records (default 1M, a payment record of ten
fields: long, decimal, nullable string, enum, timestamp, array, map, int; written in
the registry's wire format under one registered schema, 4 partitions) is read into
Parquet with ``Trigger.AvailableNow`` by both, alternating, in ``BENCH_ROUNDS`` rounds
(``bench.common.Rounds``): the median of the warm rounds, round 0 printed apart. ``equal``:
every round's outputs hold the same rows (every field of the value, ``exceptAll`` both
ways, maps as their sorted entries), as many as the topic holds.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import (
    Result,
    Rounds,
    round_count,
    same_parquet_rows,
    services_env,
    spark_session,
    timed_parquet_write,
)

PARTITIONS = 4
SCHEMA = {"type": "record", "name": "Payment", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"},
    {"name": "account", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CARD", "BANK", "CASH"]}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "int"}},
    {"name": "score", "type": "double"},
    {"name": "count", "type": "int"},
]}


def _topic(bootstrap: str, registry: str, rows: int) -> tuple[str, int]:
    """Create and fill the topic once (and register its schema); reused when complete."""
    import decimal

    import fastavro
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    name = f"bench-avro-read-{rows}"
    sid = SchemaRegistryClient({"url": registry}).register_schema(f"{name}-value",
                                                                   Schema(json.dumps(SCHEMA), "AVRO"))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if name in admin.list_topics(timeout=30).topics:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
        have = sum(c.get_watermark_offsets(TopicPartition(name, p), timeout=30)[1] for p in range(PARTITIONS))
        c.close()
        if have == rows:
            return name, sid
        admin.delete_topics([name])[name].result(timeout=60)
        time.sleep(2)
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=60)
    parsed = fastavro.parse_schema(SCHEMA)
    header = b"\0" + sid.to_bytes(4, "big")
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    t0 = time.monotonic()
    for i in range(rows):
        buf = io.BytesIO()
        buf.write(header)
        fastavro.schemaless_writer(buf, parsed, {
            "id": i, "account": f"acct-{i % 5000:05d}", "amount": decimal.Decimal(i % 100000).scaleb(-2),
            "note": None if i % 3 else f"note {i}", "kind": ("CARD", "BANK", "CASH")[i % 3],
            "at": 1_760_000_000_000 + i, "tags": ["a", "bb"][: i % 3], "attrs": {"n": i % 7} if i % 2 else {},
            "score": i / 7, "count": i % 1000})
        while True:
            try:
                p.produce(name, value=buf.getvalue(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        if i % 20000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    print(f"[bench] produced {rows} Avro records to {name} in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return name, sid


def _frame(spark: Any, ours: bool, bootstrap: str, registry: str, topic: str) -> Any:
    r = spark.readStream
    r = r.format("hzsource").option("connector", "kafka") if ours else r.format("kafka")
    r = r.option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).option("startingOffsets",
                                                                                          "earliest")
    if ours:
        df = r.option("valueFormat", "avro").option("schemaRegistry.url", registry).load()
    else:
        from pyspark.sql.avro.functions import from_avro
        from pyspark.sql.functions import expr

        df = r.load().withColumn("value", from_avro(expr("substring(value, 6)"), json.dumps(SCHEMA)))
    return df.select("partition", "offset", "value.*")


def run() -> Result:
    env = services_env()
    rows = int(os.environ.get("BENCH_AVRO_READ_ROWS", "1000000"))
    topic, _ = _topic(env["KAFKA_BOOTSTRAP_SERVERS"], env["SCHEMA_REGISTRY_URL"], rows)
    spark = spark_session()
    timed = Rounds("avro_read", round_count())
    equal = True
    with tempfile.TemporaryDirectory() as tmp:
        for i in timed:
            for ours in (False, True):
                df = _frame(spark, ours, env["KAFKA_BOOTSTRAP_SERVERS"], env["SCHEMA_REGISTRY_URL"], topic)
                n, dt = timed_parquet_write("avro_read", df, f"{tmp}/out-{ours}-{i}", f"{tmp}/ck-{ours}-{i}")
                timed.add("ours" if ours else "spark", i, n, dt)
            equal = equal and same_parquet_rows(spark, f"{tmp}/out-True-{i}", f"{tmp}/out-False-{i}", rows,
                                                maps=("attrs",))
            shutil.rmtree(f"{tmp}/out-True-{i}")
            shutil.rmtree(f"{tmp}/out-False-{i}")
    return timed.result("ours", ["spark"], equal)
