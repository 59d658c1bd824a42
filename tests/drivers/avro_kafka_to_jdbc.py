"""A streaming job run as its own driver process, so a test can crash it (failpoints).

Usage: python -m tests.drivers.avro_kafka_to_jdbc BOOTSTRAP TOPIC REGISTRY CHECKPOINT POSTGRES_URL TABLE DLQ
       [FAILPOINT|-]
Reads Avro values (the registry's wire format, mode PERMISSIVE) from the earliest offset,
30 records a batch, into PostgreSQL table TABLE (id, amount) through ``hzsink`` connector
``jdbc`` exactly once, with the records that cannot be read as dead letters in table DLQ,
until everything available is written (Trigger.AvailableNow). With FAILPOINT, the driver
kills itself there.
"""

from __future__ import annotations

import sys

from tests.drivers.session import driver_session, run_to_end


def main(bootstrap: str, topic: str, registry: str, ckpt: str, url: str, table: str, dlq: str,
         failpoint: str = "") -> int:
    spark = driver_session("avro-kafka-jdbc-driver", failpoint)
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "30")
          .option("valueFormat", "avro").option("schemaRegistry.url", registry).option("mode", "PERMISSIVE")
          .load())
    w = (df.select("value.*", "_corrupt_record").repartition(2).writeStream.format("hzsink")
         .option("connector", "jdbc").option("url", url).option("dbtable", table)
         .option("deadLetter.connector", "jdbc").option("deadLetter.url", url)
         .option("deadLetter.dbtable", dlq)
         .option("deadLetter.createTable", "true")
         .option("checkpointLocation", ckpt).trigger(availableNow=True))
    return run_to_end(w, ())


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
