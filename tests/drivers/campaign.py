"""One fault-campaign pipeline (``make faults``) as its own driver process.

Usage: python -m tests.drivers.campaign SPEC_JSON [FAILPOINT|-]

SPEC_JSON names the source (``kafka``: a topic of records keyed by a unique id; ``jms``:
a queue whose message bodies are the ids), the sink (``kafka`` topic, ``jdbc`` table or ``jms`` queue,
its guarantee and options) and the checkpoint. The query runs on ``local[2,3]`` so a
failed task is retried, as on a cluster. A Kafka source is read to its end
(``Trigger.AvailableNow``); a queue has no end, so the query stops once the sink holds
``expected`` rows, or after ``idle_s`` seconds without a batch with rows (exit 3).
Exit 0: the query ended cleanly; 1: it failed.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from tests.drivers.session import driver_session


def _source(spark: Any, spec: dict[str, Any]) -> Any:
    if spec["source"] == "kafka":
        df = (spark.readStream.format("hzsource").option("connector", "kafka")
              .option("kafka.bootstrap.servers", spec["bootstrap"]).option("subscribe", spec["topic"])
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(spec["per_trigger"])).load())
        if spec.get("windows"):
            return _windows(df, spec.get("state_location"))
        if spec.get("avro"):
            return _avro(spark, spec)
        return (df.selectExpr("CAST(key AS STRING) AS id", "CAST(value AS STRING) AS v")
                .repartition(spec.get("tasks", 2), "id"))
    return (spark.readStream.format("hzsource").option("connector", "jms").option("host", spec["stomp_host"])
            .option("port", spec["stomp_port"]).option("user", spec["stomp_user"])
            .option("password", spec["stomp_password"]).option("destination", spec["queue"])
            .option("maxMessagesPerTrigger", str(spec["per_trigger"])).load()
            .selectExpr("body_text AS id", "concat('v', body_text) AS v")
            .repartition(spec.get("tasks", 2), "id"))


def _avro(spark: Any, spec: dict[str, Any]) -> Any:
    """Avro values (id, v) through the registry; unreadable ones kept as _corrupt_record."""
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", spec["bootstrap"]).option("subscribe", spec["topic"])
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(spec["per_trigger"]))
          .option("valueFormat", "avro").option("schemaRegistry.url", spec["registry"])
          .option("mode", "PERMISSIVE").load())
    return (df.selectExpr("CAST(key AS STRING) AS id", "value.v AS v", "_corrupt_record")
            .repartition(spec.get("tasks", 2), "id"))


def _windows(df: Any, state_location: str | None) -> Any:
    """Values ``account,ts_seconds,amount`` -> 30 s windows sliding by 10 s per account,
    the watermark coalesced over the topic's partitions; the state in Spark's state store,
    or in files under ``state_location``."""
    from spark_ext import windows
    from spark_ext.windows import aggregate as agg

    parts = df.selectExpr("partition", "split(CAST(value AS STRING), ',') AS f")
    events = parts.selectExpr("partition", "f[0] AS account", "CAST(CAST(f[1] AS DOUBLE) AS TIMESTAMP) AS ts",
                              "CAST(f[2] AS BIGINT) AS amount")
    return windows.sliding(events, ["account"], "ts", "30 seconds", "10 seconds",
                           {"n": agg.count(), "total": agg.sum("amount"), "top": agg.max("amount")},
                           partition_column="partition", state_location=state_location)


def _routed(df: Any, spec: dict[str, Any]) -> Any:
    """The routing sink: each id to PostgreSQL, Kafka or the queue by ``id % 3``."""
    df = df.selectExpr("CASE CAST(id AS BIGINT) % 3 WHEN 0 THEN 'ledger' WHEN 1 THEN 'alerts' "
                       "ELSE 'notes' END AS sink", "id", "v", "id AS key", "id AS value", "id AS body")
    out = spec["out"]
    w = df.writeStream.format("hzsink").option("checkpointLocation", spec["checkpoint"])
    opts = {"connector": "routing",
            "sinks.ledger.connector": "jdbc", "sinks.ledger.url": spec["url"], "sinks.ledger.dbtable": out,
            "sinks.ledger.createTable": "true", "sinks.ledger.columns": "id,v",
            "sinks.alerts.connector": "kafka", "sinks.alerts.kafka.bootstrap.servers": spec["bootstrap"],
            "sinks.alerts.topic": out, "sinks.alerts.columns": "key,value",
            "sinks.notes.connector": "jms", "sinks.notes.host": spec["stomp_host"],
            "sinks.notes.port": spec["stomp_port"], "sinks.notes.user": spec["stomp_user"],
            "sinks.notes.password": spec["stomp_password"], "sinks.notes.destination": f"/queue/{out}",
            "sinks.notes.columns": "body", **spec.get("options", {})}
    for k, v in opts.items():
        w = w.option(k, v)
    return w


def _sink(df: Any, spec: dict[str, Any]) -> Any:
    if spec["sink"] == "routing":
        return _routed(df, spec)
    if spec["sink"] == "kafka":
        df = df.selectExpr("id AS key", "id AS value")
    elif spec["sink"] == "jms":
        df = df.selectExpr("id AS body")
    w = df.writeStream.format("hzsink").option("checkpointLocation", spec["checkpoint"])
    if spec["sink"] == "kafka":
        w = (w.option("connector", "kafka").option("kafka.bootstrap.servers", spec["bootstrap"])
             .option("topic", spec["out"]))
    elif spec["sink"] == "jms":
        w = (w.option("connector", "jms").option("host", spec["stomp_host"])
             .option("port", spec["stomp_port"]).option("user", spec["stomp_user"])
             .option("password", spec["stomp_password"])
             .option("destination", f"/queue/{spec['out']}"))
    else:
        w = w.option("connector", "jdbc").option("url", spec["url"]).option("dbtable", spec["out"])
        if spec.get("avro"):  # the unreadable records: dead letters under each batch's decision
            w = (w.option("deadLetter.connector", "jdbc").option("deadLetter.url", spec["url"])
                 .option("deadLetter.dbtable", spec["dead"]).option("deadLetter.createTable", "true"))
    for k, v in spec.get("options", {}).items():
        w = w.option(k, v)
    return w


def _count(spec: dict[str, Any]) -> int:
    import sqlalchemy as sa

    eng = sa.create_engine(spec["url"], poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as c:
            return int(c.execute(sa.text(f"SELECT count(*) FROM {spec['out']}")).scalar_one())
    except sa.exc.ProgrammingError:
        return 0  # the sink creates the table with its first batch
    except sa.exc.OperationalError:
        return 0  # the database is restarting (a fault of the campaign)
    finally:
        eng.dispose()


def main(spec_json: str, failpoint: str = "-") -> int:
    spec = json.loads(spec_json)
    spark = driver_session(f"faults-{spec['name']}", failpoint, master="local[2,3]")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    df = _source(spark, spec)
    w = _sink(df, spec)
    if spec["source"] == "kafka":
        q = w.trigger(availableNow=True).start()
        q.awaitTermination()
        return 0 if q.exception() is None else 1
    q = w.trigger(processingTime="300 milliseconds").start()
    last_rows = time.monotonic()
    seen = 0
    while q.isActive:
        q.awaitTermination(1)
        progress = q.recentProgress
        if any(p["numInputRows"] > 0 for p in progress[seen:]):
            last_rows = time.monotonic()
        seen = len(progress)
        if _count(spec) >= int(spec["expected"]):
            # The last batch is acknowledged when the next trigger plans: wait for an idle one.
            while q.isActive and not any(p["numInputRows"] == 0 for p in q.recentProgress[seen:]):
                q.awaitTermination(1)
            break
        if time.monotonic() - last_rows > float(spec.get("idle_s", 60)):
            q.stop()
            return 3
    failed = q.exception() is not None
    if failed:
        print(f"query failed: {q.exception()}", file=sys.stderr)
    q.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
