"""Shared fixtures: one local SparkSession per test session, and the local services.

Unit tests need neither. Tests marked ``services`` read the addresses ``make services``
wrote to ``.local/services.env`` (``services.env.load_env``; environment variables of the
same names win), and
fail, not skip, when the services are missing: a skipped connector test proves nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import services as local_services
from services.env import ServicesEnvError, load_env
from tests.support import cds, schedule
from tests.support.listeners import SECURED_KEYS, SERVICE_KEYS, Listener

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# Test drivers are short-lived JVMs on 2 cores, run with cds.JVM_OPTS and a class-data-sharing
# archive of Spark's classes, which halves their start (tests/support/cds.py).
# spark-submit passes SPARK_SUBMIT_OPTS to the driver JVM; the session below and every
# driver subprocess inherit it. Benchmarks do not (they measure steady-state speed).
if "SPARK_SUBMIT_OPTS" not in os.environ:
    _JSA = cds.archive(cds.JVM_OPTS)
    os.environ["SPARK_SUBMIT_OPTS"] = f"{cds.JVM_OPTS} -XX:SharedArchiveFile={_JSA}" if _JSA else cds.JVM_OPTS
    # The JVMs' temporary directories (Spark's spark-<uuid> dirs, unpacked archives) go
    # under one directory per pytest process, removed when it ends: a driver killed -9
    # never runs Spark's shutdown hook, and the hundreds of crash tests left gigabytes in
    # /tmp (measured: 16 GB after a few runs, enough for Artemis to stop taking messages).
    _JVM_TMP = tempfile.mkdtemp(prefix="spark-ext-jvm-")
    atexit.register(shutil.rmtree, _JVM_TMP, ignore_errors=True)
    os.environ["SPARK_SUBMIT_OPTS"] += f" -Djava.io.tmpdir={_JVM_TMP}"

ROOT = Path(__file__).resolve().parent.parent
# Python workers inherit this environment: let them import test helpers (tests.*), and
# PySpark from its installed package rather than its zip (tests/support/workerpath).
_WORKER_PATH = ROOT / "tests" / "support" / "workerpath"
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(_WORKER_PATH), str(ROOT), os.environ.get("PYTHONPATH")) if p
)

@dataclass(frozen=True)
class Services:
    kafka_bootstrap: str
    postgres_url: str
    stomp_host: str
    stomp_port: int
    stomp_user: str
    stomp_password: str
    postgres_tls_url: str  # the TLS-only server's certificate login, verify-full
    postgres_tls_admin_url: str  # the same server's password user, verify-full
    pki: Path  # the local CA (ca.pem, other-ca.pem) and certificates
    stomp_tls_url: str  # stomp+ssl:// of the broker's TLS acceptor (its CA: pki / ca.pem)
    stomp_mtls_url: str  # the same, asking for a client certificate
    mariadb_url: str  # mysql+pymysql:// of the local MariaDB, the tests' user (password inline)
    registry_url: str  # the schema registry's Confluent API (Apicurio)

    def stomp_tls(self, mutual: bool = False) -> dict[str, str]:
        """The queue connectors' options for the TLS acceptor (login included)."""
        tls = {"brokerUrl": self.stomp_mtls_url if mutual else self.stomp_tls_url,
               "tlsCaFile": str(self.pki / "ca.pem"), "user": self.stomp_user,
               "password": self.stomp_password}
        if mutual:
            tls.update(tlsCertFile=str(self.pki / "sparkext_cert.pem"),
                       tlsKeyFile=str(self.pki / "sparkext_cert.key"))
        return tls


def _service_env(keys: tuple[str, ...], what: str) -> dict[str, str]:
    """The services env, failing (never skipping) when it or one of ``keys`` is missing."""
    try:
        v = load_env()
    except ServicesEnvError as e:
        pytest.fail(str(e))
    missing = [k for k in keys if k not in v]
    if missing:
        pytest.fail(f"{what} {missing} missing from the services env: run `make services` first")
    return v


@pytest.fixture(scope="session")
def services() -> Services:
    v = _service_env(SERVICE_KEYS, "service addresses")
    return Services(v["KAFKA_BOOTSTRAP_SERVERS"], v["POSTGRES_URL"], v["STOMP_HOST"],
                    int(v["STOMP_PORT"]), v["STOMP_USER"], v["STOMP_PASSWORD"], v["POSTGRES_TLS_URL"],
                    v["POSTGRES_TLS_ADMIN_URL"], Path(v["PKI_DIR"]), v["STOMP_TLS_URL"],
                    v["STOMP_MTLS_URL"], v["MARIADB_URL"], v["SCHEMA_REGISTRY_URL"])



def _listeners() -> dict[str, Listener]:
    v = _service_env(SECURED_KEYS, "secured Kafka listener settings")
    cred = {"user": v["KAFKA_SASL_USER"], "password": v["KAFKA_SASL_PASSWORD"]}
    return {
        "plaintext": Listener("plaintext", v["KAFKA_BOOTSTRAP_SERVERS"]),
        "sasl_ssl": Listener("sasl_ssl", v["KAFKA_SASL_SSL_BOOTSTRAP_SERVERS"], "SASL_SSL",
                             v["KAFKA_SASL_MECHANISM_SSL"], ca_file=v["KAFKA_SSL_CA_LOCATION"], **cred),
        "sasl_plaintext": Listener("sasl_plaintext", v["KAFKA_SASL_PLAINTEXT_BOOTSTRAP_SERVERS"],
                                   "SASL_PLAINTEXT", v["KAFKA_SASL_MECHANISM_PLAINTEXT"], **cred),
    }


@pytest.fixture
def listener(request: pytest.FixtureRequest) -> Listener:
    """Parametrize indirectly with a listener name: plaintext, sasl_ssl or sasl_plaintext."""
    return _listeners()[getattr(request, "param", "plaintext")]


@pytest.fixture
def sasl_ssl() -> Listener:
    return _listeners()["sasl_ssl"]


@pytest.fixture
def sasl_plaintext() -> Listener:
    return _listeners()["sasl_plaintext"]


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    import spark_ext
    from spark_ext import release as native

    # Spark's own kafka source, the baseline some tests compare with (Maven Central, cached).
    baseline_jars = ",".join(local_services.baseline_jars())
    # The windows fold in the JVM, as a session spark_ext.configure builds does (make jvm).
    if not native.jar_path().is_file():
        pytest.fail(f"the JVM companion jar {native.jar_path()} is missing: run make jvm")

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("spark-ext-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.jars", baseline_jars)
    )
    session = spark_ext.configure(builder).getOrCreate()
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, deal the slow tests evenly over the workers (tests/support/schedule.py)."""
    workers = schedule.xdist_workers()
    if workers > 1:
        items[:] = schedule.balanced(items, [it.name for it in items], workers)
