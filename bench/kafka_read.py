"""Bench case ``kafka_read``: our Kafka source vs Spark's built-in one, same topic, same run.

A topic of ``BENCH_KAFKA_READ_ROWS`` records (default 4M, ~100-byte values, 4
partitions) is read into Parquet with ``Trigger.AvailableNow`` by both sources, alternating,
in ``BENCH_ROUNDS`` rounds (default 6, ``bench.common.Rounds``): wall-clock from ``start()``
to termination (query start-up included); the figure is the median of the warm rounds,
round 0 printed apart (``cold_ratio``) with the warm rounds' spread. ``equal``: every
round's outputs hold the same rows (every column, ``exceptAll`` both ways), as many as the
topic holds.

Each round also runs the read floor (``bench.floor_source``): our source's planning with
its tasks handed copies of a kept Arrow batch, so fetching and decoding cost nothing; it
writes as many rows (not the same ones: a batch repeats). ``floor_vs_spark`` (warm
medians) is the highest ratio any Python source reaches here, ``ours_vs_floor`` how much
of it ours keeps.

``kafka_read_sasl_ssl``: the same topic read through the broker's SASL_SSL listener (SCRAM,
TLS) by both sources, configured alike with Spark's Java-style options (JAAS config, PEM
trust store): ours through the ``wire`` fetcher, Spark's through the Java client.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import replace
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
from bench.floor_source import FORMAT as FLOOR
from bench.floor_source import register as register_floor

PARTITIONS = 4


def _topic(bootstrap: str, rows: int) -> str:
    """Create and fill the topic once; later runs reuse it when it is complete."""
    name = f"bench-kafka-read-{rows}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=30)
    if name in md.topics:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
        have = sum(c.get_watermark_offsets(TopicPartition(name, p), timeout=30)[1] for p in range(PARTITIONS))
        c.close()
        if have == rows:
            return name
        admin.delete_topics([name])[name].result(timeout=60)
        time.sleep(2)
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=60)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    pad = b"x" * 88
    t0 = time.monotonic()
    for i in range(rows):
        while True:
            try:
                p.produce(name, value=pad + b"%012d" % i, key=b"k%d" % (i % 1000), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        if i % 20000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    print(f"[bench] produced {rows} records to {name} in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return name


def _reader(spark: Any, variant: str, bootstrap: str, topic: str, security: dict[str, str]) -> Any:
    r = spark.readStream
    if variant == "ours":
        r = r.format("hzsource").option("connector", "kafka")
    else:
        r = r.format(FLOOR if variant == "floor" else "kafka")
    r = r.option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in security.items():
        r = r.option(k, v)
    return r.option("startingOffsets", "earliest").load()


def _sasl_ssl(env: dict[str, str]) -> dict[str, str]:
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{env["KAFKA_SASL_USER"]}" password="{env["KAFKA_SASL_PASSWORD"]}";')
    return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": env["KAFKA_SASL_MECHANISM_SSL"],
            "kafka.sasl.jaas.config": jaas, "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": env["KAFKA_SSL_CA_LOCATION"]}


def run() -> Result:
    env = services_env()
    return _compare("kafka_read", env["KAFKA_BOOTSTRAP_SERVERS"], {})


def run_sasl_ssl() -> Result:
    env = services_env()
    return _compare("kafka_read_sasl_ssl", env["KAFKA_SASL_SSL_BOOTSTRAP_SERVERS"], _sasl_ssl(env))


def _compare(case: str, bootstrap: str, security: dict[str, str]) -> Result:
    rows = int(os.environ.get("BENCH_KAFKA_READ_ROWS", "4000000"))
    topic = _topic(services_env()["KAFKA_BOOTSTRAP_SERVERS"], rows)  # filled over the plain listener
    spark = spark_session()
    import tempfile

    register_floor(spark)
    timed = Rounds(case, round_count())
    equal = True
    with tempfile.TemporaryDirectory() as tmp:
        for i in timed:
            for variant in ("spark", "ours", "floor"):
                n, dt = timed_parquet_write(case, _reader(spark, variant, bootstrap, topic, security),
                                            f"{tmp}/out-{variant}-{i}", f"{tmp}/ck-{variant}-{i}")
                timed.add(variant, i, n, dt)
            equal = equal and same_parquet_rows(spark, f"{tmp}/out-ours-{i}", f"{tmp}/out-spark-{i}", rows)
            equal = equal and timed.rows["floor"] == rows
            for variant in ("spark", "ours", "floor"):
                shutil.rmtree(f"{tmp}/out-{variant}-{i}")
    result = timed.result("ours", ["spark"], equal)
    figures = {"floor_vs_spark": timed.ratio("floor", "spark"), "ours_vs_floor": timed.ratio("ours", "floor")}
    return replace(result, figures=figures)
