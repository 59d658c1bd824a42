"""The jobs the upgrade test runs with a released wheel of spark-ext: the standard library,
PySpark and SQLAlchemy only, nothing of the repository.

Run by ``tests/test_upgrade.py`` with that virtualenv's Python from a directory outside the
checkout, so PySpark's workers import the released wheel. The failpoint goes to the released
code through the environment it has always read.

- ``files SRC CKPT SELECT FAILPOINT [OPTION=VALUE ...]``: the sink conformance suite's job
  (``files_to_sink``);
- ``queue HOST PORT USER PASSWORD DEST CKPT URL TABLE FAILPOINT``: the queue source into
  PostgreSQL, as ``tests.drivers.jms_to_jdbc`` runs it (50 messages a batch, ``exactly_once``),
  until the failpoint kills it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any


def _session(failpoint: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if failpoint != "-":
        os.environ["SPARK_EXT_FAILPOINTS"] = failpoint
        os.environ["SPARK_EXT_FAILPOINT_PGID"] = str(os.getpgid(0))
    from pyspark.sql import SparkSession

    import spark_ext

    builder = (SparkSession.builder.master("local[2,2]").appName("released")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
    spark = spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def files(src: str, ckpt: str, select: str, failpoint: str = "-", *options: str) -> int:
    spark = _session(failpoint)
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    tasks = int(os.environ.get("SPARK_EXT_TEST_TASKS", "3"))
    w = (df.repartition(tasks, "id").selectExpr(*select.split("|")).writeStream.format("hzsink")
         .option("checkpointLocation", ckpt).trigger(availableNow=True))
    for kv in options:
        w = w.option(*kv.split("=", 1))
    q = w.start()
    q.awaitTermination()
    return 0 if q.exception() is None else 1


def queue(host: str, port: str, user: str, password: str, dest: str, ckpt: str, url: str, table: str,
          failpoint: str) -> int:
    spark = _session(failpoint)
    r = (spark.readStream.format("hzsource").option("connector", "jms").option("host", host)
         .option("port", port).option("user", user).option("password", password)
         .option("destination", dest).option("maxMessagesPerTrigger", "50"))
    q = (r.load().selectExpr("message_id", "body_text AS body").writeStream.format("hzsink")
         .option("connector", "jdbc").option("url", url).option("dbtable", table)
         .option("checkpointLocation", ckpt).trigger(processingTime="200 milliseconds").start())
    q.awaitTermination(240)  # the failpoint ends it sooner
    return 1


if __name__ == "__main__":
    jobs: dict[str, Callable[..., int]] = {"files": files, "queue": queue}
    sys.exit(jobs[sys.argv[1]](*sys.argv[2:]))
