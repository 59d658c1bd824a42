"""Shared fixtures: one local SparkSession per test session, and the local services.

Unit tests need neither. Tests marked ``services`` read the addresses ``make services``
wrote to ``.local/services.env`` (``services.env.load_env``; environment variables of the
same names win), and
fail, not skip, when the services are missing: a skipped connector test proves nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import services as local_services
from services.env import ServicesEnvError, load_env

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

ROOT = Path(__file__).resolve().parent.parent
# Python workers inherit this environment: let them import test helpers (tests.*).
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
SERVICE_KEYS = ("KAFKA_BOOTSTRAP_SERVERS", "POSTGRES_URL", "STOMP_HOST", "STOMP_PORT",
                "STOMP_USER", "STOMP_PASSWORD")


@dataclass(frozen=True)
class Services:
    kafka_bootstrap: str
    postgres_url: str
    stomp_host: str
    stomp_port: int
    stomp_user: str
    stomp_password: str


@pytest.fixture(scope="session")
def services() -> Services:
    try:
        v = load_env()
    except ServicesEnvError as e:
        pytest.fail(str(e))
    missing = [k for k in SERVICE_KEYS if k not in v]
    if missing:
        pytest.fail(f"service addresses {missing} missing from the services env: run `make services` first")
    return Services(v["KAFKA_BOOTSTRAP_SERVERS"], v["POSTGRES_URL"], v["STOMP_HOST"],
                    int(v["STOMP_PORT"]), v["STOMP_USER"], v["STOMP_PASSWORD"])


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    # Spark's own kafka source, the baseline some tests compare with (Maven Central, cached).
    baseline_jars = ",".join(local_services.baseline_jars())

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-ext-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.jars", baseline_jars)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


_RESTORED_CONFS = ("spark.sql.session.timeZone", "spark.sql.execution.arrow.maxRecordsPerBatch",
                   "spark.sql.shuffle.partitions")


@pytest.fixture(autouse=True)
def _restore_spark_confs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests share one session: confs a test changes go back to what they were."""
    if "spark" not in request.fixturenames:
        yield
        return
    spark = request.getfixturevalue("spark")
    before = {k: spark.conf.get(k, None) for k in _RESTORED_CONFS}
    yield
    for k, v in before.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)
