"""Bench case ``routing_write``: one stream to PostgreSQL and Kafka through the routing sink
(one query, one decision a batch) vs the same through two of our queries, same run.

A topic of ``BENCH_ROUTING_ROWS`` records (default 400k, ~100-byte values, 4 partitions)
is split by record number: even ones to a PostgreSQL table (id, value), odd ones to a
Kafka topic (key, value), both ``exactly_once``, in one micro-batch
(``Trigger.AvailableNow``). Ours: one query reading the topic once, through the routing
sink. Baseline: two queries started together, each reading the whole topic and keeping
its half, one into our PostgreSQL sink, one into our Kafka sink; timed from the first
``start()`` until both ended. ``BENCH_ROUNDS`` rounds (default 6, at least 5), the
baseline then ours in each; records/s are the records over the median seconds of the
warm rounds 1..n-1, round 0 printed apart as ``cold_ratio``, the warm rounds' paired
ratios as ``spread`` (``bench.common.Rounds``). The baseline's queries are the session's
first, so its round 0 pays the Python workers' start-up and ours' does not: this case's
``cold_ratio`` flatters ours. ``equal``: the tables hold the same rows and the topics the
same records (read ``read_committed``), half the input each.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from typing import Any

from bench.common import (
    BenchError,
    Result,
    Rounds,
    read_to_end,
    round_count,
    run_sql,
    services_env,
    spark_session,
)
from bench.kafka_read import _topic


def _source(spark: Any, bootstrap: str, topic: str) -> Any:
    raw = (spark.readStream.format("hzsource").option("connector", "kafka")
           .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").load())
    return raw.selectExpr("CAST(substring(CAST(value AS STRING), 89) AS BIGINT) AS id",
                          "CAST(value AS STRING) AS value")


def _new_topic(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bench-routing-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 4, 1)])[name].result(timeout=60)
    return name


def _records(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    try:
        return sorted((r.key, r.value) for r in read_to_end(c, topic, timeout_s=300))
    finally:
        c.close()


def run() -> Result:
    rows = int(os.environ.get("BENCH_ROUTING_ROWS", "400000"))
    timed = Rounds("routing_write", round_count())
    env = services_env()
    bootstrap, url = env["KAFKA_BOOTSTRAP_SERVERS"], env["POSTGRES_URL"]
    source = _topic(bootstrap, rows)
    spark = spark_session()
    last: dict[str, tuple[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in timed:
            for name in ("two", "routing"):
                table, topic = f"bench_routing_{name}", _new_topic(bootstrap)
                run_sql(url, f"DROP TABLE IF EXISTS {table}")
                run_sql(url, f"CREATE TABLE {table} (id bigint, value text)")
                df = _source(spark, bootstrap, source)
                ck = f"{tmp}/{name}-{i}"
                t0 = time.monotonic()
                if name == "routing":
                    routed = df.selectExpr("CASE WHEN id % 2 = 0 THEN 'ledger' ELSE 'alerts' END AS sink",
                                           "id", "value", "CAST(id AS STRING) AS key")
                    qs = [routed.writeStream.format("hzsink").option("connector", "routing")
                          .option("sinks.ledger.connector", "jdbc").option("sinks.ledger.url", url)
                          .option("sinks.ledger.dbtable", table).option("sinks.ledger.columns", "id,value")
                          .option("sinks.alerts.connector", "kafka")
                          .option("sinks.alerts.kafka.bootstrap.servers", bootstrap)
                          .option("sinks.alerts.topic", topic).option("sinks.alerts.columns", "key,value")
                          .option("checkpointLocation", ck).trigger(availableNow=True).start()]
                else:
                    qs = [df.where("id % 2 = 0").writeStream.format("hzsink").option("connector", "jdbc")
                          .option("url", url).option("dbtable", table)
                          .option("checkpointLocation", f"{ck}-ledger").trigger(availableNow=True).start(),
                          df.where("id % 2 = 1").selectExpr("CAST(id AS STRING) AS key", "value")
                          .writeStream.format("hzsink").option("connector", "kafka")
                          .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
                          .option("checkpointLocation", f"{ck}-alerts").trigger(availableNow=True).start()]
                for q in qs:
                    q.awaitTermination()
                    if q.exception() is not None:
                        raise BenchError(f"routing_write {name} query failed: {q.exception()}")
                dt = time.monotonic() - t0
                got = run_sql(url, f"SELECT count(*) FROM {table}")[0][0]
                if got != rows // 2 + rows % 2:
                    raise BenchError(f"routing_write {name}: {got} rows in PostgreSQL, expected "
                                     f"{rows // 2 + rows % 2}")
                timed.add(name, i, rows, dt, "records")
                last[name] = (table, topic)
    (t_ours, k_ours), (t_two, k_two) = last["routing"], last["two"]
    diff = run_sql(url, f"SELECT (SELECT count(*) FROM (SELECT * FROM {t_ours} EXCEPT ALL SELECT * FROM "
                        f"{t_two}) a), (SELECT count(*) FROM (SELECT * FROM {t_two} EXCEPT ALL SELECT * "
                        f"FROM {t_ours}) b)")[0]
    ours_records, two_records = _records(bootstrap, k_ours), _records(bootstrap, k_two)
    equal = diff == (0, 0) and ours_records == two_records and len(ours_records) == rows // 2
    return timed.result("routing", ["two"], equal)
