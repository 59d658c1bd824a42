"""A streaming job run as its own driver process, so a test can crash it (failpoints).

Usage: python -m tests.drivers.kafka_to_jdbc BOOTSTRAP TOPIC CHECKPOINT POSTGRES_URL TABLE [FAILPOINT|-]
       [OPTION=VALUE ...]
Reads the topic from the earliest offset with ``hzsource`` connector ``kafka`` (300
records a batch) into PostgreSQL through ``hzsink`` connector ``jdbc`` (``exactly_once``
unless an option says otherwise), until everything available is written
(Trigger.AvailableNow). With FAILPOINT, the driver kills itself there.
"""

from __future__ import annotations

import sys

from tests.drivers.session import driver_session, run_to_end


def main(bootstrap: str, topic: str, ckpt: str, url: str, table: str, failpoint: str = "",
         *extra: str) -> int:
    spark = driver_session("kafka-jdbc-driver", failpoint)
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300").load())
    w = (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS v").repartition(2, "partition")
         .writeStream.format("hzsink").option("connector", "jdbc").option("url", url)
         .option("dbtable", table).option("checkpointLocation", ckpt).trigger(availableNow=True))
    return run_to_end(w, extra)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
