"""A streaming job run as its own driver process, for the sink conformance suite.

Usage: python -m tests.drivers.files_to_sink SRC_DIR CHECKPOINT SELECT FAILPOINT|- [OPTION=VALUE ...]
Reads JSON files ``{"id": n, "v": "..."}`` one file per batch (a replayable source),
selects ``SELECT`` (expressions separated by ``|``; 3 tasks a batch, or
``SPARK_EXT_TEST_TASKS``) and writes them
through ``hzsink`` with the options given (the connector, its target, the guarantee),
until every file is written (Trigger.AvailableNow). With FAILPOINT the driver kills
itself there (a ``task:`` point kills the task; ``local[2,2]`` lets Spark retry it).
"""

from __future__ import annotations

import os
import sys

from tests.drivers.session import driver_session, run_to_end

TASKS_ENV = "SPARK_EXT_TEST_TASKS"


def main(src: str, ckpt: str, select: str, failpoint: str = "-", *options: str) -> int:
    spark = driver_session("sink-conformance", failpoint, master="local[2,2]")
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    tasks = int(os.environ.get(TASKS_ENV, "3"))
    out = df.repartition(tasks, "id").selectExpr(*select.split("|"))
    w = (out.writeStream.format("hzsink").option("checkpointLocation", ckpt).trigger(availableNow=True))
    return run_to_end(w, options)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
