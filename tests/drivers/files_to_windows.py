"""A streaming window query run as its own driver process, so a test can crash it.

Usage: python -m tests.drivers.files_to_windows SRC_DIR CHECKPOINT OUT_DIR [FAILPOINT|-] [STATE_LOCATION]
Reads JSON files ``{"account", "ts", "amount"}`` one file per batch, computes 30 s
windows sliding by 10 s with ``spark_ext.windows`` (its state in Spark's state store, or
in files under STATE_LOCATION) and appends them to Parquet (Spark's file sink, exactly
once through its log), until every file is read.
"""

from __future__ import annotations

import sys

from tests.drivers.session import driver_session


def main(src: str, ckpt: str, out: str, failpoint: str = "", state: str = "") -> int:
    from pyspark.sql import functions as F

    from spark_ext import windows
    from spark_ext.windows import aggregate as agg

    spark = driver_session("windows-driver", failpoint, master="local[2,3]")  # a failed task is retried
    df = (spark.readStream.schema("account string, ts double, amount long").option("maxFilesPerTrigger", 1)
          .json(src).withColumn("ts", F.col("ts").cast("timestamp")))
    w = windows.sliding(df, ["account"], "ts", "30 seconds", "10 seconds",
                        {"n": agg.count(), "total": agg.sum("amount"), "top": agg.max("amount")},
                        lateness="5 seconds", state_location=state or None)
    q = (w.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .outputMode("append").trigger(availableNow=True).start())
    q.awaitTermination()
    return 0 if q.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
