"""What every crash-test driver does first: arm its failpoint and start local Spark."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any


def driver_session(name: str, failpoint: str = "", master: str = "local[2]") -> Any:
    """A ``master`` (local[2]) session on loopback, set up by ``spark_ext.configure`` (the
    companion jar on the classpath); with ``failpoint`` the driver kills itself there.

    The driver runs in its own process group (the test starts it with
    ``start_new_session``); the failpoint kills that group, workers included.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if failpoint and failpoint != "-":
        os.environ["SPARK_EXT_FAILPOINTS"] = failpoint
        os.environ["SPARK_EXT_FAILPOINT_PGID"] = str(os.getpgid(0))
    from pyspark.sql import SparkSession

    import spark_ext

    # As a user's job is set up: with the companion jar, so windows fold events in the JVM.
    builder = (SparkSession.builder.master(master).appName(name)
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
    spark = spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_to_end(writer: Any, extra: Sequence[str]) -> int:
    """Apply ``OPTION=VALUE`` pairs to a ``DataStreamWriter``, start it and wait for the
    query to end; 0 when it ended without an exception."""
    for kv in extra:
        writer = writer.option(*kv.split("=", 1))
    q = writer.start()
    q.awaitTermination()
    return 0 if q.exception() is None else 1
