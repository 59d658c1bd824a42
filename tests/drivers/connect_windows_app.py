"""A Spark Connect client computing windows with their state in files, as a user's would.

Usage: ``python connect_windows_app.py CONNECT_URL SRC_DIR OUT_DIR CHECKPOINT STATE_LOCATION``.
Reads JSON files ``{"account", "ts", "amount"}`` one per batch, 30 s windows sliding by
10 s (count, sum) with ``state_location``, appended to Parquet until every file is read.
Prints ``SESSION <module>``; exit status 0 when the query ended cleanly. It imports
nothing of this repository, so tests can run a copy from any directory.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_ext import windows
    from spark_ext.windows import aggregate as agg

    url, src, out, ckpt, state = argv[:5]
    spark = SparkSession.builder.remote(url).getOrCreate()
    df = (spark.readStream.schema("account string, ts double, amount long").option("maxFilesPerTrigger", 1)
          .json(src).withColumn("ts", F.col("ts").cast("timestamp")))
    w = windows.sliding(df, ["account"], "ts", "30 seconds", "10 seconds",
                        {"n": agg.count(), "total": agg.sum("amount")}, lateness="5 seconds",
                        state_location=state)
    q = (w.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .outputMode("append").trigger(availableNow=True).start())
    q.awaitTermination(240)
    if q.isActive or q.exception() is not None:
        print(f"the query did not end cleanly: {q.exception()}", file=sys.stderr)
        return 1
    print("SESSION", type(spark).__module__)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
