"""A Kafka -> Kafka exactly-once job for a virtualenv that has only ``spark-ext[kafka]``.

Run by ``tests/test_installed_wheel.py`` with that virtualenv's Python, from a directory
outside the checkout, so it sees the installed wheel and nothing of the repository. It
uses the standard library and PySpark only. Args: bootstrap, input topic, output topic,
checkpoint. It runs the Kafka job to the end, then starts a query on the PostgreSQL sink,
whose extra is missing, and prints the error that query fails with.
"""

from __future__ import annotations

import sys

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession


def main(bootstrap: str, src: str, dst: str, checkpoint: str) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("installed-wheel")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", src)
          .option("startingOffsets", "earliest").load().select("key", "value"))
    q = (df.writeStream.format("hzsink").option("checkpointLocation", checkpoint + "-kafka")
         .option("connector", "kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", dst).option("guarantee", "exactly_once").trigger(availableNow=True).start())
    q.awaitTermination(300)
    if q.exception() is not None:
        raise SystemExit(f"query failed: {q.exception()}")
    print("ROWS", sum(p["numInputRows"] for p in q.recentProgress), flush=True)
    q = (df.writeStream.format("hzsink").option("checkpointLocation", checkpoint + "-jdbc")
         .option("connector", "jdbc").option("url", "postgresql://127.0.0.1:1/x").option("table", "t")
         .start())
    try:
        q.awaitTermination(120)
    except StreamingQueryException as e:  # the query's failure is what this part prints
        print("QUERY FAILED:", e)


if __name__ == "__main__":
    main(*sys.argv[1:5])
