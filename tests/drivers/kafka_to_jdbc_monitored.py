"""A monitored streaming job as its own driver process, so a test can crash it and scrape it.

Usage: python -m tests.drivers.kafka_to_jdbc_monitored BOOTSTRAP TOPIC CHECKPOINT POSTGRES_URL TABLE
       METRICS_PORT STOP_FILE [FAILPOINT|-]
Kafka (earliest, 250 records a trigger, every 200 ms) into PostgreSQL ``exactly_once``,
with the metrics exporter turned on the way a ``spark-submit`` job turns it on: the
setting ``spark.sparkext.metrics.port`` and ``spark_ext.register(spark)``. Runs until
STOP_FILE exists (then stops the query and exits 0) or 300 s pass (exit 1). With
FAILPOINT, the driver kills itself there.
"""

from __future__ import annotations

import os
import sys
import time

from tests.drivers.session import driver_session


def main(bootstrap: str, topic: str, ckpt: str, url: str, table: str, port: str, stop_file: str,
         failpoint: str = "") -> int:
    import spark_ext

    spark = driver_session("kafka-jdbc-monitored", failpoint)
    spark.conf.set("spark.sparkext.metrics.port", port)
    spark_ext.register(spark)
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "250").load())
    q = (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS v").writeStream.format("hzsink")
         .option("connector", "jdbc").option("url", url).option("dbtable", table)
         .option("checkpointLocation", ckpt).queryName("payments_monitored")
         .trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + 300
    while not os.path.exists(stop_file) and q.isActive and time.monotonic() < deadline:
        time.sleep(0.1)
    failed = q.exception() is not None or not os.path.exists(stop_file)
    q.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
