"""A streaming job run as its own driver process, so a test can ``kill -9`` it.

Usage: python -m tests.drivers.kafka_to_parquet BOOTSTRAP TOPIC CHECKPOINT OUT MODE [FAILPOINT]
MODE ``run`` keeps going (300 records a batch) until killed; ``finish`` uses
Trigger.AvailableNow and exits when everything available is written.
"""

from __future__ import annotations

import sys

from tests.drivers.session import driver_session


def main(bootstrap: str, topic: str, ckpt: str, out: str, mode: str, failpoint: str = "") -> int:
    spark = driver_session("kill9-driver", failpoint)
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300").load())
    w = (df.select("partition", "offset", "value").writeStream.format("parquet")
         .option("path", out).option("checkpointLocation", ckpt))
    w = w.trigger(availableNow=True) if mode == "finish" else w.trigger(processingTime="0 seconds")
    q = w.start()
    q.awaitTermination()
    return 0 if q.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:7]))
