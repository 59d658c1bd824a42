"""A streaming job run as its own driver process, so a test can crash it (failpoints).

Usage: python -m tests.drivers.files_to_jdbc SRC_DIR CHECKPOINT POSTGRES_URL TABLE [FAILPOINT|-]
       [OPTION=VALUE ...]
Reads JSON files ``{"id": n, "v": "..."}`` one file per batch (a replayable source)
into PostgreSQL through ``hzsink`` connector ``jdbc`` (``exactly_once`` unless an option
says otherwise), until every
file is written (Trigger.AvailableNow). With FAILPOINT, the driver kills itself there.
Rows are spread over three partitions by ``id``, or by the column named in the
environment variable ``PARTITION_BY`` (an operator's change between runs).
"""

from __future__ import annotations

import os
import sys

from tests.drivers.session import driver_session, run_to_end


def main(src: str, ckpt: str, url: str, table: str, failpoint: str = "", *extra: str) -> int:
    spark = driver_session("jdbc-driver", failpoint)
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    df = df.repartition(3, os.environ.get("PARTITION_BY", "id"))
    w = (df.writeStream.format("hzsink").option("connector", "jdbc")
         .option("url", url).option("dbtable", table).option("checkpointLocation", ckpt)
         .trigger(availableNow=True))
    return run_to_end(w, extra)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
