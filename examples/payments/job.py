"""The payments job: Kafka in; a ledger, windows and alerts out, each exactly once.

Launch it with ``spark-submit`` like any PySpark job (``make demo`` does, see
``examples/payments/demo.py``)::

    spark-submit --master local[2] examples/payments/job.py \
        --bootstrap 127.0.0.1:9092 --topic payments --alerts-topic payment-alerts \
        --postgres-url postgresql://user:pw@127.0.0.1:5432/db --checkpoint /tmp/payments-ckpt

Three streaming queries read the same topic with ``hzsource`` and drop payments the bank
re-sent (same payment id) with Spark's ``dropDuplicatesWithinWatermark``:

- ``ledger``: one row per payment, upserted on ``payment_id`` into PostgreSQL (``jdbc``,
  ``exactly_once``: the rows of a micro-batch commit together or not at all);
- ``windows``: per account, 30 s windows sliding by 10 s (count, sum, avg, max) with
  ``spark_ext.windows``, appended to PostgreSQL ``exactly_once``;
- ``alerts``: the windows whose sum crosses ``--limit``, as JSON to a Kafka topic with the
  ``exactly_once`` Kafka sink (read them with ``isolation.level=read_committed``).

Each query's checkpoint (under ``--checkpoint``) is its snapshot: kill the job at any
moment and start it again with the same arguments; it resumes without losing or
repeating a payment. SIGTERM or Ctrl-C stops the queries between micro-batches.
While it runs, the job writes its progress to ``--status`` (JSON) once a second.
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
SIZE_S, SLIDE_S, LATENESS_S = 30, 10, 10  # the account windows (verify.py recomputes them)
SCHEMA = "payment_id string, account string, amount double, currency string, event_time timestamp"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="payments-job", description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    ap.add_argument("--topic", default="payments", help="payment events (JSON values)")
    ap.add_argument("--alerts-topic", default="payment-alerts", help="where alerts go (must exist)")
    ap.add_argument("--postgres-url", required=True, help="SQLAlchemy or jdbc:postgresql:// URL")
    ap.add_argument("--checkpoint", required=True, help="directory of the queries' checkpoints")
    ap.add_argument("--limit", type=float, default=5000.0, help="alert when a window's sum exceeds this")
    ap.add_argument("--trigger", default="2 seconds", help="micro-batch (= snapshot) interval")
    ap.add_argument("--max-per-trigger", type=int, default=4000, help="Kafka records per micro-batch")
    ap.add_argument("--status", help="file to write progress to (JSON, once a second)")
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


def start(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Start the three queries; their checkpoints live under ``args.checkpoint``."""
    from pyspark.sql import functions as F

    ckpt = args.checkpoint.rstrip("/")
    jdbc = {"connector": "jdbc", "url": args.postgres_url, "createTable": "true", "guarantee": "exactly_once"}
    ledger = (payments(spark, args).drop("partition")
              .repartition(2, "payment_id")  # a prepared transaction holds its keys' locks until commit
              .writeStream.format("hzsink").options(**jdbc).option("dbtable", LEDGER)
              .option("upsertKeys", "payment_id").option("checkpointLocation", f"{ckpt}/ledger")
              .trigger(processingTime=args.trigger).queryName("ledger").start())
    _initialized(ledger)
    wins = (account_windows(payments(spark, args))
            .writeStream.format("hzsink").options(**jdbc).option("dbtable", WINDOWS)
            .option("checkpointLocation", f"{ckpt}/windows")
            .trigger(processingTime=args.trigger).queryName("windows").start())
    _initialized(wins)
    over = account_windows(payments(spark, args)).where(F.col("total") > F.lit(args.limit))
    alerts = (over.select(F.col("account").alias("key"), F.to_json(F.struct(
                  "account", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
                  "n", "total")).alias("value"))
              .writeStream.format("hzsink").option("connector", "kafka")
              .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.alerts_topic)
              .option("guarantee", "exactly_once").option("checkpointLocation", f"{ckpt}/alerts")
              .trigger(processingTime=args.trigger).queryName("alerts").start())
    return {"ledger": ledger, "windows": wins, "alerts": alerts}


def _initialized(q: Any, timeout_s: float = 120.0) -> None:
    """Until ``q`` has started its sources (or ended). Each source starts a fresh Python
    process that must connect back to the JVM within Spark's fixed 10 s; three at once on
    a loaded 2-core machine missed that (measured: "Python worker failed to connect back")."""
    deadline = time.monotonic() + timeout_s
    while q.isActive and q.status.get("message") == "Initializing sources" and time.monotonic() < deadline:
        time.sleep(0.2)


def status(queries: dict[str, Any]) -> dict[str, Any]:
    """Per query: last batch, rows so far, rows/s, the Kafka offsets it has read to."""
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
