"""Bench case ``avro_write``: our Kafka sink with ``valueFormat=avro`` against Spark's
built-in Kafka sink fed by the users' workaround (``to_avro`` of the row with the schema
pinned, behind a hand-made 5-byte header: the magic byte and the registered id), same
rows, same run.

``BENCH_AVRO_WRITE_ROWS`` rows (default 1M; a payment of eight fields: long, string,
decimal, nullable string, timestamp, array, map, double) are staged once as Parquet
(2 files, so 2 tasks on local[2]) and streamed in one micro-batch (``Trigger.AvailableNow``)
into a fresh 4-partition topic by our sink, ``exactly_once`` (it registers the schema it
derives from the columns at query start), and by Spark's sink (at least once, its
defaults) with that same registered schema and id. ``BENCH_ROUNDS`` rounds
(``bench.common.Rounds``): the median of the warm rounds, round 0 printed apart.
``equal``: read back with ``read_committed``, both topics hold the same (key, value)
bytes, every row once.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import (
    BenchError,
    Result,
    Rounds,
    committed_records,
    round_count,
    services_env,
    spark_session,
    timed_parquet_stream,
)

PARTITIONS = 4


def _stage(spark: Any, rows: int, path: str) -> None:
    from pyspark.sql import functions as F

    id_ = F.col("id")
    (spark.range(rows).select(
        F.concat(F.lit("acct-"), (id_ % 1000).cast("string")).alias("key"),
        F.struct(
            id_.alias("id"), F.concat(F.lit("acct-"), (id_ % 5000).cast("string")).alias("account"),
            (id_ % 100000 / 100).cast("decimal(12,2)").alias("amount"),
            F.when(id_ % 3 == 0, F.concat(F.lit("note "), id_.cast("string"))).alias("note"),
            F.timestamp_micros(id_ + 1_760_000_000_000_000).alias("at"),
            F.slice(F.array(F.lit("a"), F.lit("bb")), 1, (id_ % 3).cast("int")).alias("tags"),
            F.map_from_arrays(F.array(F.lit("n")), F.array((id_ % 7).cast("int"))).alias("attrs"),
            (id_ / 7).alias("score"),
        ).alias("value"),
    ).repartition(2).write.mode("overwrite").parquet(path))


def run() -> Result:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    from spark_ext.schemas.avro_write import schema_of

    rows = int(os.environ.get("BENCH_AVRO_WRITE_ROWS", "1000000"))
    env = services_env()
    bootstrap, registry = env["KAFKA_BOOTSTRAP_SERVERS"], env["SCHEMA_REGISTRY_URL"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    spark = spark_session()
    run_id = uuid.uuid4().hex[:8]
    timed = Rounds("avro_write", round_count())
    made: list[str] = []
    last: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/src"
        _stage(spark, rows, src)
        value_type = spark.read.parquet(src).schema["value"].dataType
        schema = json.dumps(schema_of(value_type))
        subject = f"bench-avro-write-{run_id}-value"
        sid = SchemaRegistryClient({"url": registry}).register_schema(subject, Schema(schema, "AVRO"))
        head = F.lit(b"\x00" + sid.to_bytes(4, "big"))

        def ours(w: Any, topic: str) -> Any:
            return (w.format("hzsink").option("connector", "kafka")
                    .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
                    .option("valueFormat", "avro").option("valueSubject", subject)
                    .option("schemaRegistry.url", registry))

        def spark_sink(w: Any, topic: str) -> Any:
            return w.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)

        def workaround(df: Any) -> Any:
            return df.select("key", F.concat(head, to_avro(F.col("value"), schema)).alias("value"))

        for i in timed:
            for name, sink, shape in (("spark", spark_sink, workaround), ("ours", ours, None)):
                topic = f"bench-avro-write-{name}-{run_id}-{i}"
                admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=60)
                made.append(topic)
                n, dt = timed_parquet_stream(spark, "avro_write", src, f"{tmp}/ck-{name}-{i}",
                                             lambda w, s=sink, t=topic: s(w, t), shape=shape)
                if n != rows:
                    raise BenchError(f"avro_write {name}: read {n} rows, expected {rows}")
                timed.add(name, i, n, dt)
                last[name] = topic
    a, b = (committed_records(spark, bootstrap, last[name]) for name in ("ours", "spark"))
    equal = (a.count() == rows and a.select("value").distinct().count() == rows
             and a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0)
    for f in admin.delete_topics(made).values():
        f.result(timeout=60)
    return timed.result("ours", ["spark"], equal)
