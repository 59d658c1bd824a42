"""A streaming job whose ``foreachBatch`` function writes each batch with ``hzsink`` several
times, as a user's function with one write per system does; run as its own driver process.

Usage: python -m tests.drivers.files_to_foreach_batch SRC_DIR CHECKPOINT FAILPOINT|- NAME.OPTION=VALUE ...
Reads JSON files ``{"id": n, "v": "..."}``, one file per batch (a replayable source), with
columns ``id``, ``v``, ``key``, ``value``, ``body`` (the last three: the id as a string),
3 tasks a batch (``SPARK_EXT_TEST_TASKS``). Each NAME is one write, in the order the names
first appear: ``NAME.select`` lists its columns, every other ``NAME.OPTION`` is an
``hzsink`` option. Runs until every file is written (Trigger.AvailableNow). With FAILPOINT
the driver kills itself there.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tests.drivers.session import driver_session

TASKS_ENV = "SPARK_EXT_TEST_TASKS"


def writes(options: tuple[str, ...]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for kv in options:
        key, value = kv.split("=", 1)
        name, option = key.split(".", 1)
        out.setdefault(name, {})[option] = value
    return out


def main(src: str, ckpt: str, failpoint: str = "-", *options: str) -> int:
    spark = driver_session("foreach-batch", failpoint, master="local[2,2]")
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    tasks = int(os.environ.get(TASKS_ENV, "3"))
    out = df.repartition(tasks, "id").selectExpr(
        "id", "v", "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value", "CAST(id AS STRING) AS body")
    plan = writes(options)

    def each_batch(batch_df: Any, batch_id: int) -> None:
        for opts in plan.values():
            own = dict(opts)
            cols = own.pop("select").split(",")
            batch_df.select(*cols).write.format("hzsink").options(**own).mode("append").save()

    q = (out.writeStream.foreachBatch(each_batch).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return 0 if q.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
