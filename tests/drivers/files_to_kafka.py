"""A streaming job run as its own driver process, so a test can crash it (failpoints).

Usage: python -m tests.drivers.files_to_kafka SRC_DIR CHECKPOINT BOOTSTRAP TOPIC [FAILPOINT]
Reads JSON files ``{"id": n, "v": "..."}`` one file per batch (a replayable source)
into Kafka through ``hzsink`` connector ``kafka`` with ``exactly_once`` (3 tasks a
batch), until every file is written (Trigger.AvailableNow). With FAILPOINT, the driver
kills itself there.
"""

from __future__ import annotations

import os
import sys


def main(src: str, ckpt: str, bootstrap: str, topic: str, failpoint: str = "") -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if failpoint:
        os.environ["SPARK_EXT_FAILPOINTS"] = failpoint
        os.environ["SPARK_EXT_FAILPOINT_PGID"] = str(os.getpgid(0))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("kafka-sink-driver")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    out = df.repartition(3, "id").selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    q = (out.writeStream.format("hzsink").option("connector", "kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination()
    return 0 if q.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
