"""The sink conformance suite's job (``files_to_sink``) for a virtualenv holding a released
wheel of spark-ext: the standard library and PySpark only, nothing of the repository.

Run by ``tests/test_upgrade.py`` with that virtualenv's Python from a directory outside the
checkout, so PySpark's workers import the released wheel. Args: as ``files_to_sink``
(source dir, checkpoint, select, failpoint, OPTION=VALUE...); the failpoint goes to the
released code through the environment it has always read.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def main(src: str, ckpt: str, select: str, failpoint: str = "-", *options: str) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if failpoint != "-":
        os.environ["SPARK_EXT_FAILPOINTS"] = failpoint
        os.environ["SPARK_EXT_FAILPOINT_PGID"] = str(os.getpgid(0))
    import spark_ext

    builder = (SparkSession.builder.master("local[2,2]").appName("released")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
    spark = spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    tasks = int(os.environ.get("SPARK_EXT_TEST_TASKS", "3"))
    w = (df.repartition(tasks, "id").selectExpr(*select.split("|")).writeStream.format("hzsink")
         .option("checkpointLocation", ckpt).trigger(availableNow=True))
    for kv in options:
        w = w.option(*kv.split("=", 1))
    q = w.start()
    q.awaitTermination()
    return 0 if q.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
