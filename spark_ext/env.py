"""Which Python Spark's workers run, and how a job ships its environment to a cluster."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spark_ext.errors import ConfigurationError

log = logging.getLogger(__name__)

ENVIRONMENT_PYTHON = "./environment/bin/python"
# Spark 4.1 on runs stateless streaming queries adaptively, which a windows query with its
# state in files is to Spark: each micro-batch becomes two jobs, stage 2 one task (measured
# 80-100 ms more per micro-batch). Stateful queries run without it anyway; batch keeps it.
STATELESS_STREAMING_AQE = "spark.sql.adaptive.streaming.stateless.enabled"


def _visible_master() -> str | None:
    """The master this process will use, where the environment already says it."""
    m = re.search(r"--master[ =](\S+)", os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    return m.group(1) if m else os.environ.get("MASTER") or os.environ.get("SPARK_MASTER")


def ensure_python_env() -> None:
    """Local masters: make Python workers run this interpreter unless the user chose one.

    Without it, local workers may start another ``python3`` and fail with "Timed out while
    waiting for the Python worker to connect back". Nothing is set when spark-submit started
    this process (it has chosen the Pythons) or when the master in sight is not local: on a
    cluster the executors' Python is the one shipped with the job (see ``configure``), and
    the driver's path would be wrong there. Driver; call before the SparkSession starts.
    """
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit / an existing JVM
        return
    master = _visible_master()
    if master and not master.startswith("local"):
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def configure(builder: Any, *, archive: str | None = None, packages: Sequence[str] = (),
              native: bool = True) -> Any:
    """Set up a ``SparkSession.Builder`` to run spark-ext on a cluster. Driver, before
    ``getOrCreate()``; returns the builder (as delta-spark's ``configure_spark_with_delta_pip``).

    ``archive``: a virtualenv packed with venv-pack that holds spark-ext and the job's
    dependencies. It goes to every executor as ``./environment`` (``spark.archives``), and
    executors run ``./environment/bin/python``. Spark runs Python data sources with one
    interpreter path on the driver and on executors, so the same archive must be unpacked
    in the driver's working directory as ``./environment`` (checked here)::

        mkdir environment && tar -xzf env.tar.gz -C environment

    ``packages``: Maven coordinates of JVM connectors to add to ``spark.jars.packages``
    (e.g. Spark's own ``org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0``), merged with
    coordinates already set on the builder.

    ``native``: add spark-ext's JVM companion jar (shipped in the wheel) to ``spark.jars``,
    so the windows fold events in the JVM (``spark_ext/windows/native.py``); without it
    they fold in Python. ``spark-submit --packages dev.sparkext:spark-ext-native_2.13:<version>``
    does the same for a job launched that way.

    Also sets ``spark.sql.adaptive.streaming.stateless.enabled=false`` unless the builder
    has it: adaptive execution costs a windows query with ``state_location`` 80-100 ms a
    micro-batch and changes nothing for queries without a shuffle. Batch queries keep it.
    """
    from spark_ext import compat

    opts = compat.builder_options(builder)
    if archive is not None:
        if not Path(archive).is_file() and "://" not in archive:
            raise ConfigurationError(f"archive {archive!r} is not a file; pack the job's virtualenv with "
                                     "venv-pack -o env.tar.gz")
        if not Path(ENVIRONMENT_PYTHON).exists():
            raise ConfigurationError(
                f"{ENVIRONMENT_PYTHON} does not exist in the driver's working directory ({os.getcwd()}): "
                "Spark runs Python data sources with the same interpreter path on the driver and on "
                f"executors; unpack the archive here too: mkdir environment && "
                f"tar -xzf {archive} -C environment")
        archives = [a for a in (opts.get("spark.archives") or "").split(",") if a]
        builder = builder.config("spark.archives", ",".join([*archives, f"{archive}#environment"]))
        os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = ENVIRONMENT_PYTHON
    if STATELESS_STREAMING_AQE not in opts:
        builder = builder.config(STATELESS_STREAMING_AQE, "false")
    if packages:
        have = [p for p in (opts.get("spark.jars.packages") or "").split(",") if p]
        builder = builder.config("spark.jars.packages", ",".join(dict.fromkeys([*have, *packages])))
    if native:
        from spark_ext.release import jar_path

        jar = jar_path()
        if jar.is_file():
            have = [j for j in (opts.get("spark.jars") or "").split(",") if j]
            builder = builder.config("spark.jars", ",".join(dict.fromkeys([*have, str(jar)])))
        else:  # a source checkout before make jvm: the windows still work, folding in Python
            log.warning("spark-ext's JVM companion jar %s is missing (build it with make jvm); the windows "
                        "fold events in Python", jar)
    return builder
