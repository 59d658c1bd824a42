"""The payments job: Kafka in; a ledger, windows, alerts and notices out, in one query,
each batch decided once for all four.

Launch it with ``spark-submit`` like any PySpark job (``make demo`` does, see
``examples/payments/demo.py``)::

    STOMP_PASSWORD=... spark-submit --master local[2] examples/payments/job.py \
        --bootstrap 127.0.0.1:9092 --topic payments --alerts-topic payment-alerts \
        --postgres-url postgresql://user:pw@127.0.0.1:5432/db --checkpoint /tmp/payments-ckpt \
        --stomp-host 127.0.0.1 --stomp-port 61613 --stomp-user artemis --notices-queue /queue/notices

One streaming query reads the topic with ``hzsource``, drops payments the bank re-sent
(same payment id) with Spark's ``dropDuplicatesWithinWatermark``, and writes through one
``routing`` sink whose route column sends each row to one of four sub-sinks:

- ``ledger``: one row per payment, upserted on ``payment_id`` into PostgreSQL (``jdbc``);
- ``notices``: one JSON message per payment to a queue (``jms``), for the account holder;
- ``windows``: per account, 30 s windows sliding by 10 s (count, sum, avg, max) with
  ``spark_ext.windows``, appended to PostgreSQL (``jdbc``);
- ``alerts``: the windows whose sum crosses ``--limit``, as JSON to a Kafka topic (``kafka``;
  read them with ``isolation.level=read_committed``).

The sink is ``exactly_once``: each micro-batch is decided once, in the ledger's database,
for all four; then each system commits its part. The checkpoint (``--checkpoint``) is the
snapshot: kill the job at any moment and start it again with the same arguments; it
resumes without losing or repeating a payment in any of the three systems. SIGTERM or
Ctrl-C stops the query between micro-batches. While it runs, the job writes its progress
to ``--status`` (JSON) once a second. The queue's password comes from the environment
(``STOMP_PASSWORD``), not the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

LEDGER, WINDOWS = "payments_ledger", "payments_windows"
QUERY = "payments"
SIZE_S, SLIDE_S, LATENESS_S = 30, 10, 10  # the account windows (verify.py recomputes them)
SCHEMA = "payment_id string, account string, amount double, currency string, event_time timestamp"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="payments-job", description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    ap.add_argument("--topic", default="payments", help="payment events (JSON values)")
    ap.add_argument("--alerts-topic", default="payment-alerts", help="where alerts go (must exist)")
    ap.add_argument("--postgres-url", required=True, help="SQLAlchemy or jdbc:postgresql:// URL")
    ap.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    ap.add_argument("--stomp-host", default="127.0.0.1", help="the queue broker's STOMP host")
    ap.add_argument("--stomp-port", type=int, default=61613)
    ap.add_argument("--stomp-user", default="artemis", help="password: environment variable STOMP_PASSWORD")
    ap.add_argument("--notices-queue", default="/queue/payment-notices", help="where notices go")
    ap.add_argument("--limit", type=float, default=5000.0, help="alert when a window's sum exceeds this")
    ap.add_argument("--trigger", default="2 seconds", help="micro-batch (= snapshot) interval")
    ap.add_argument("--max-per-trigger", type=int, default=4000, help="Kafka records per micro-batch")
    ap.add_argument("--status", help="file to write progress to (JSON, once a second)")
    ap.add_argument("--metrics-port", type=int,
                    help="serve Prometheus metrics on this port (spark_ext.monitoring)")
    return ap.parse_args(argv)


def payments(spark: Any, args: argparse.Namespace) -> Any:
    """The payment stream, parsed, with re-sent payments dropped (by payment id)."""
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("hzsource").option("connector", "kafka")
           .option("kafka.bootstrap.servers", args.bootstrap).option("subscribe", args.topic)
           .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", args.max_per_trigger).load())
    parsed = raw.select("partition", F.from_json(F.col("value").cast("string"), SCHEMA).alias("p"))
    # A re-sent payment repeats its event time, so a watermark far behind the newest event
    # bounds the state the deduplication keeps.
    return (parsed.select("partition", "p.*").withWatermark("event_time", "2 minutes")
            .dropDuplicatesWithinWatermark(["payment_id"]))


def account_windows(stream: Any) -> Any:
    from spark_ext import windows
    from spark_ext.windows import aggregate as agg

    return windows.sliding(stream, ["account"], "event_time", f"{SIZE_S} seconds", f"{SLIDE_S} seconds",
                           {"n": agg.count(), "total": agg.sum("amount"), "avg_amount": agg.avg("amount"),
                            "max_amount": agg.max("amount")},
                           lateness=f"{LATENESS_S} seconds", partition_column="partition")


def routed(spark: Any, args: argparse.Namespace) -> Any:
    """Every output row with its sub-sink in column ``sink``: the ledger's and the notices'
    (two rows per payment), the windows' and the alerts' (one or two per window)."""
    from pyspark.sql import functions as F

    pay = payments(spark, args)
    # A prepared transaction holds its keys' locks until commit: a payment's ledger row must
    # stay in one task, so repartition by payment id before the rows fan out.
    per_payment = (pay.drop("partition").repartition(2, "payment_id")
                   .withColumn("body", F.to_json(F.struct("payment_id", "account", "amount", "currency")))
                   .withColumn("sink", F.explode(F.array(F.lit("ledger"), F.lit("notices")))))
    wins = account_windows(pay)
    alert = F.to_json(F.struct("account", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
                               .alias("window_start"), "n", "total"))
    per_window = (wins.withColumn("key", F.col("account")).withColumn("value", alert)
                  .withColumn("sink", F.explode(F.when(F.col("total") > F.lit(args.limit),
                                                       F.array(F.lit("windows"), F.lit("alerts")))
                                                .otherwise(F.array(F.lit("windows"))))))
    return per_payment.unionByName(per_window, allowMissingColumns=True)


def sink_options(args: argparse.Namespace) -> dict[str, str]:
    """The routing sink: each sub-sink configured as it would be alone, plus its columns."""
    jdbc = {"connector": "jdbc", "url": args.postgres_url, "createTable": "true"}
    subs = {
        "ledger": {**jdbc, "dbtable": LEDGER, "upsertKeys": "payment_id",
                   "columns": "payment_id,account,amount,currency,event_time"},
        "windows": {**jdbc, "dbtable": WINDOWS,
                    "columns": "account,window_start,window_end,n,total,avg_amount,max_amount"},
        "alerts": {"connector": "kafka", "kafka.bootstrap.servers": args.bootstrap,
                   "topic": args.alerts_topic, "columns": "key,value"},
        "notices": {"connector": "jms", "host": args.stomp_host, "port": str(args.stomp_port),
                    "user": args.stomp_user, "password": os.environ.get("STOMP_PASSWORD", ""),
                    "destination": args.notices_queue, "columns": "body"},
    }
    out = {"connector": "routing", "guarantee": "exactly_once", "decider": "ledger",
           "checkpointLocation": args.checkpoint}
    for name, opts in subs.items():
        out.update({f"sinks.{name}.{k}": v for k, v in opts.items()})
    return out


def start(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Start the query; its checkpoint is ``args.checkpoint``."""
    q = (routed(spark, args).writeStream.format("hzsink").options(**sink_options(args))
         .trigger(processingTime=args.trigger).queryName(QUERY).start())
    return {QUERY: q}


def status(queries: dict[str, Any]) -> dict[str, Any]:
    """Per query: last batch, rows so far, rows/s, the Kafka offsets it has read to, and
    the recent batches' ``[batch id, rows, trigger ms]`` (``make soak`` samples them)."""
    out: dict[str, Any] = {"pid": os.getpid(), "time": time.time(), "queries": {}}
    for name, q in queries.items():
        progress = q.recentProgress
        done = [p for p in progress if p.get("numInputRows") is not None]
        last = done[-1] if done else {}
        src = (last.get("sources") or [{}])[0]
        end = src.get("endOffset")
        out["queries"][name] = {
            "active": q.isActive, "batch": last.get("batchId", -1),
            "rows_per_s": last.get("processedRowsPerSecond") or 0.0,
            "end_offset": json.loads(end) if isinstance(end, str) else end,
            "batches": [[p["batchId"], p["numInputRows"], (p.get("durationMs") or {}).get("triggerExecution")]
                        for p in done[-20:]],
            "error": str(q.exception()) if not q.isActive and q.exception() else None}
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName("payments")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    if args.metrics_port is not None:
        from spark_ext import monitoring

        monitoring.serve(spark, port=args.metrics_port)
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: stopping.append(s))
    queries = start(spark, args)
    failed = None
    while not stopping and failed is None:
        snap = status(queries)
        if args.status:
            tmp = Path(args.status + ".tmp")
            tmp.write_text(json.dumps(snap))
            tmp.replace(args.status)
        failed = next((f"{n}: {q['error']}" for n, q in snap["queries"].items() if not q["active"]), None)
        time.sleep(1)
    for q in queries.values():
        q.stop()  # between micro-batches: what committed stays committed
    spark.stop()
    if failed:
        print(f"payments job: query {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
