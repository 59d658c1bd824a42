"""``make demo``: a small end-to-end streaming query over the local services.

A stream of synthetic payments (Spark's ``rate`` source) is written to PostgreSQL, one
database transaction per micro-batch together with a batch marker, so a replayed batch
is skipped: a preview of the exactly-once sinks. It stops after a few batches and checks
that every payment id arrived exactly once. Run ``make services`` first (``make demo``
does). Run from the repository root: ``python -m examples.demo``.
"""

from __future__ import annotations

import io
import sys
import tempfile
import time
from pathlib import Path

from services.env import ServicesEnvError, load_env
from spark_ext.env import ensure_python_env

ROOT = Path(__file__).resolve().parent.parent
TABLE = "demo_payments"
MARKERS = "demo_batches"
BATCHES = 3


def _postgres_url() -> str:
    try:
        return load_env()["POSTGRES_URL"]
    except (ServicesEnvError, KeyError) as e:
        raise SystemExit(f"no PostgreSQL address ({e}): run `make services`") from None


def main() -> int:
    ensure_python_env()
    import sqlalchemy as sa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F

    engine = sa.create_engine(_postgres_url())
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {TABLE}, {MARKERS}"))
        conn.execute(sa.text(
            f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, account int, amount numeric(10,2))"))
        conn.execute(sa.text(f"CREATE TABLE {MARKERS} (batch_id bigint PRIMARY KEY)"))

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        rows = batch.toArrow()
        raw = engine.raw_connection()
        try:
            cur = raw.cursor()
            cur.execute(f"INSERT INTO {MARKERS} VALUES (%s) ON CONFLICT DO NOTHING", (batch_id,))
            if cur.rowcount == 0:  # batch already committed by an earlier attempt: skip
                raw.rollback()
                return
            buf = io.StringIO()
            cols = (rows.column(c).to_pylist() for c in ("id", "account", "amount"))
            for i, a, m in zip(*cols, strict=True):
                buf.write(f"{i}\t{a}\t{m}\n")
            buf.seek(0)
            cur.copy_expert(f"COPY {TABLE} (id, account, amount) FROM STDIN", buf)
            raw.commit()  # rows and marker in one transaction
        finally:
            raw.close()

    spark = (SparkSession.builder.master("local[2]").appName("spark-ext-demo")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    payments = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
                .select(F.col("value").alias("id"), (F.col("value") % 10).cast("int").alias("account"),
                        ((F.col("value") * 37) % 100000 / 100).cast("decimal(10,2)").alias("amount")))
    with tempfile.TemporaryDirectory() as ckpt:
        query = (payments.writeStream.foreachBatch(write_batch).option("checkpointLocation", ckpt)
                 .trigger(processingTime="1 second").start())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sum(
                1 for p in query.recentProgress if p["numInputRows"] > 0) < BATCHES:
            if query.exception():
                raise SystemExit(f"demo query failed: {query.exception()}")
            time.sleep(0.2)
        query.stop()
        rows_in = sum(p["numInputRows"] for p in query.recentProgress)
    spark.stop()

    with engine.connect() as conn:
        n, distinct, lo, hi = conn.execute(sa.text(
            f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {TABLE}")).one()
        batches = conn.execute(sa.text(f"SELECT count(*) FROM {MARKERS}")).scalar()
    engine.dispose()
    ok = n == distinct == rows_in and (n == 0 or hi - lo + 1 == n)
    print(f"demo: {rows_in} payments streamed in {batches} committed batches; "
          f"PostgreSQL holds {n} rows, {distinct} distinct ids -> {'OK' if ok else 'MISMATCH'}")
    return 0 if ok and n > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
