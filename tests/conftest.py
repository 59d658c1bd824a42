"""Shared fixtures: one local SparkSession per test session, and the local services.

Unit tests need neither. Tests marked ``services`` read the addresses ``make services``
wrote to ``.local/services.env`` (environment variables of the same names win), and
fail, not skip, when the services are missing: a skipped connector test proves nothing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

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


def read_services_env(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.split("=", 1)
                values[k.strip()] = v.strip()
    values.update({k: os.environ[k] for k in SERVICE_KEYS if k in os.environ})
    return values


@pytest.fixture(scope="session")
def services() -> Services:
    env_file = Path(os.environ.get("SPARK_EXT_SERVICES_ENV", ROOT / ".local" / "services.env"))
    v = read_services_env(env_file)
    missing = [k for k in SERVICE_KEYS if k not in v]
    if missing:
        pytest.fail(f"service addresses {missing} not found in {env_file}: run `make services` first")
    return Services(v["KAFKA_BOOTSTRAP_SERVERS"], v["POSTGRES_URL"], v["STOMP_HOST"],
                    int(v["STOMP_PORT"]), v["STOMP_USER"], v["STOMP_PASSWORD"])


def services_module() -> ModuleType:
    """``services/services.py`` as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("spark_ext_services", ROOT / "services" / "services.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    # Spark's own kafka source, the baseline some tests compare with (Maven Central, cached).
    baseline_jars = ",".join(services_module().baseline_jars())

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
