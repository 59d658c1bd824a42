"""The metrics exporter turned on from configuration alone: the companion jar's
``StreamingQueryListener`` (``dev.sparkext.monitoring.MetricsListener``), named in
``spark.sql.streaming.streamingQueryListeners`` on a ``spark-submit`` line, serves what the
Python exporter serves, for a job that calls nothing of spark-ext's monitoring.

(Through a Spark Connect server, the same listener serves the server's queries:
``test_connect.py``. The payments demo, unchanged, scraped this way: ``test_payments_demo.py``.)
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spark_ext import release
from spark_ext.monitoring import CONF_PORT, LISTENER
from spark_ext.monitoring.metrics import jvm_table
from tests.drivers import kafka_to_jdbc_app
from tests.support import kafka_util, pg_util
from tests.support.processes import driver_report

ROOT = Path(__file__).resolve().parent.parent
RESOURCE = "dev/sparkext/monitoring/metrics.tsv"
# Read off the clock at scrape time: each exporter's own moment, so never equal.
CLOCKED = {"spark_ext_query_seconds_since_progress", "spark_ext_sink_seconds_since_commit"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _submit_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # local master
    return env


def test_the_jars_metric_declarations_are_the_python_packages():
    """One declaration of every metric: the jar serves the names, labels and help the Python
    package declares (``make jvm`` builds the jar from jvm/src, whose copy this checks)."""
    source = (ROOT / "jvm" / "src" / "main" / "resources" / RESOURCE).read_text()
    assert source == jvm_table(), ("jvm/src/main/resources/" + RESOURCE + " is not the package's "
                                   "declarations: write spark_ext.monitoring.metrics.jvm_table() there")
    with zipfile.ZipFile(release.jar_path()) as jar:
        assert jar.read(RESOURCE).decode() == jvm_table(), "the built jar is older than its sources: make jvm"


@pytest.mark.spark
@pytest.mark.services
def test_spark_submit_settings_alone_serve_what_the_python_exporter_serves(services, tmp_path: Path):
    """A job submitted with the listener and a port, calling nothing of ours for metrics:
    the JVM serves every family, label and value the Python exporter in the same driver serves
    (bar the two read off the clock), the sink's committed rows included."""
    topic = kafka_util.create_topic(services.kafka_bootstrap, 2, "jvm-metrics")
    kafka_util.produce(services.kafka_bootstrap, topic, kafka_util.numbered(2, 600))
    table = pg_util.table_name("jvm_metrics")
    app = tmp_path / "app.py"
    shutil.copy(kafka_to_jdbc_app.__file__, app)
    port = _free_port()
    # A spool directory of its own: the host's queue sources' cards, which other tests' queries
    # write beside it, would otherwise reach one scrape and not the other.
    env = {**_submit_env(), "SERVE_METRICS": "1", "JVM_METRICS_URL": f"http://127.0.0.1:{port}/metrics",
           "SPARK_EXT_METRICS_DIR": str(tmp_path / "cards")}
    submit = Path(sys.executable).parent / "spark-submit"
    cmd = [str(submit), "--master", "local[2]", "--jars", str(release.jar_path()),
           "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.sql.streaming.streamingQueryListeners={LISTENER}",
           "--conf", f"{CONF_PORT}={port}", str(app), services.kafka_bootstrap, topic, services.postgres_url,
           table, str(tmp_path / "ck")]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, driver_report(res)
    import json

    scrapes = {line.split()[1]: json.loads(line.split(" ", 2)[2]) for line in res.stdout.splitlines()
               if line.startswith("SCRAPE ")}
    assert set(scrapes) == {"jvm", "python"}, res.stdout[-3000:]

    def samples(which: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(n, tuple(sorted(lb.items()))): v for n, lb, v in scrapes[which] if n not in CLOCKED}

    jvm, py = samples("jvm"), samples("python")
    assert jvm == py
    rows = [v for (n, _), v in jvm.items() if n == "spark_ext_sink_rows_total"]
    assert rows == [600]
    assert {n for n, _, _ in scrapes["jvm"]} >= CLOCKED  # served, only not compared
    assert pg_util.query(services.postgres_url, f"SELECT count(*) FROM {table}") == [(600,)]


@pytest.mark.spark
def test_the_listener_without_a_port_fails_the_first_query_naming_the_setting(tmp_path: Path):
    script = tmp_path / "job.py"
    script.write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').getOrCreate()\n"
        "spark.readStream.format('rate').load().writeStream.format('noop').start()\n")
    submit = Path(sys.executable).parent / "spark-submit"
    cmd = [str(submit), "--master", "local[1]", "--jars", str(release.jar_path()), "--conf",
           "spark.ui.enabled=false", "--conf", f"spark.sql.streaming.streamingQueryListeners={LISTENER}",
           str(script)]
    res = subprocess.run(cmd, cwd=tmp_path, env=_submit_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    said = res.stdout + res.stderr
    assert f"{CONF_PORT} is not set: set it to the port to serve metrics on" in said, driver_report(res)
