"""A streaming job run as its own driver process, so a test can crash it (failpoints).

Usage: python -m tests.drivers.files_to_kafka SRC_DIR CHECKPOINT BOOTSTRAP TOPIC [FAILPOINT|-]
       [OPTION=VALUE ...]
Reads JSON files ``{"id": n, "v": "..."}`` one file per batch (a replayable source)
into Kafka through ``hzsink`` connector ``kafka`` with ``exactly_once`` (3 tasks a
batch), until every file is written (Trigger.AvailableNow). With FAILPOINT, the driver
kills itself there.
"""

from __future__ import annotations

import sys

from tests.drivers.session import driver_session, run_to_end


def main(src: str, ckpt: str, bootstrap: str, topic: str, failpoint: str = "", *extra: str) -> int:

    spark = driver_session("kafka-sink-driver", failpoint)
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    out = df.repartition(3, "id").selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    w = (out.writeStream.format("hzsink").option("connector", "kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .option("checkpointLocation", ckpt).trigger(availableNow=True))
    return run_to_end(w, extra)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
