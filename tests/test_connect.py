"""``hzsource`` and ``hzsink`` from a Spark Connect client (issue 17).

A Connect server is started from the installed pyspark (``sbin/start-connect-server.sh``)
on loopback, with this interpreter (which has spark-ext installed) as its Python: Python
data sources run on the server's side, so the package must be installed where the server
and its executors run, not where the client runs. The client streams Kafka to PostgreSQL
``exactly_once`` and stops; every record lands once.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_ext import release
from spark_ext.monitoring import CONF_PORT, LISTENER
from spark_ext.options import checkpoint_sink_id
from tests.drivers import connect_windows_app, kafka_to_jdbc_app
from tests.support import kafka_util, pg_util
from tests.support.processes import driver_report, stop_group
from tests.support.windows_data import in_order_batches, write_files

pytestmark = [pytest.mark.spark, pytest.mark.services]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SERVER_METRICS_PORT = _free_port()  # the server's own exporter: the companion jar's listener


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    port = _free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOG_DIR=str(log.parent),
               SPARK_PID_DIR=str(log.parent))
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(home / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2]",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.shuffle.partitions=2", "--jars", str(release.jar_path()),
             "--conf", f"spark.sql.streaming.streamingQueryListeners={LISTENER}",
             "--conf", f"{CONF_PORT}={SERVER_METRICS_PORT}"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"no Spark Connect server on {port}:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop_group(server)


def test_kafka_to_postgres_exactly_once_through_spark_connect(connect_url, services, tmp_path: Path) -> None:
    topic = kafka_util.create_topic(services.kafka_bootstrap, 2, "connect")
    kafka_util.produce(services.kafka_bootstrap, topic, kafka_util.numbered(2, 600))
    table = pg_util.table_name("connect")
    client = tmp_path / "client.py"
    shutil.copy(kafka_to_jdbc_app.__file__, client)
    # Its own process: a Connect client cannot start beside the suite's classic session.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["SERVE_METRICS"] = "1"  # the client serves metrics: the queries' progress, and the sink's
    # cards, which the server's commit worker writes on this same host
    res = subprocess.run([sys.executable, str(client), services.kafka_bootstrap, topic, services.postgres_url,
                          table, str(tmp_path / "ck"), connect_url], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, driver_report(res)
    assert "SESSION pyspark.sql.connect" in res.stdout, res.stdout
    batches = int(res.stdout.split("BATCHES", 1)[1].split()[0])
    assert batches >= 3  # 600 records, 200 a batch: several 2PC commits
    metrics = dict(line.split()[1:] for line in res.stdout.splitlines() if line.startswith("METRIC "))
    assert float(metrics["spark_ext_sink_rows_total"]) == 600, res.stdout
    assert metrics["spark_ext_query_batch_id"] == metrics["spark_ext_sink_last_batch"] != "None", res.stdout
    # The server's host serves them too, from the server's settings alone (the client asks nothing).
    query_id = res.stdout.split("QUERY_ID", 1)[1].split()[0]
    served = _server_metrics(query_id)
    assert served["spark_ext_sink_rows_total"] == 600, served
    last = batches_last(res.stdout)
    assert served["spark_ext_query_batch_id"] == served["spark_ext_sink_last_batch"] == last
    rows = pg_util.query(services.postgres_url,
                         f"SELECT count(*), count(DISTINCT (partition, \"offset\")) FROM {table}")
    assert rows == [(600, 600)]
    # Its own sink only: other tests running beside it hold prepared transactions of theirs.
    assert pg_util.prepared(services.postgres_url, checkpoint_sink_id(str(tmp_path / "ck"))) == []


def batches_last(stdout: str) -> float:
    return float(stdout.split("METRIC spark_ext_query_batch_id", 1)[1].split()[0])


def _server_metrics(query_id: str) -> dict[str, float]:
    """The query's samples from the server's exporter, once it shows the last batch committed
    (the listener hears of the last progress a little after the client does)."""
    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + 30
    while True:
        url = f"http://127.0.0.1:{SERVER_METRICS_PORT}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        got = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.labels.get("query_id") == query_id}
        if got.get("spark_ext_sink_last_batch") == got.get("spark_ext_query_batch_id") is not None \
                or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_exactly_once_writes_inside_foreach_batch_through_spark_connect(connect_url, services,
                                                                       tmp_path: Path) -> None:
    """Connect runs a foreachBatch function in a Python process of the server's, whose
    tasks Spark gives no batch or query id: the write names both (options batchId,
    queryId), and every record lands once."""
    topic = kafka_util.create_topic(services.kafka_bootstrap, 2, "connect-fb")
    kafka_util.produce(services.kafka_bootstrap, topic, kafka_util.numbered(2, 600))
    table = pg_util.table_name("connect_fb")
    client = tmp_path / "client.py"
    shutil.copy(kafka_to_jdbc_app.__file__, client)
    sink_id = f"fb-{table}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    res = subprocess.run([sys.executable, str(client), services.kafka_bootstrap, topic, services.postgres_url,
                          table, str(tmp_path / "ck"), connect_url], cwd=tmp_path,
                         env={**env, "FOREACH_BATCH_SINK_ID": sink_id}, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, driver_report(res)
    assert "SESSION pyspark.sql.connect" in res.stdout, res.stdout
    rows = pg_util.query(services.postgres_url,
                         f"SELECT count(*), count(DISTINCT (partition, \"offset\")) FROM {table}")
    assert rows == [(600, 600)]
    assert pg_util.prepared(services.postgres_url, sink_id) == []


@pytest.mark.campaign  # make faults: windows through Connect (make test keeps Kafka -> PostgreSQL)
def test_windows_with_their_state_in_files_through_spark_connect(connect_url, tmp_path: Path) -> None:
    """A Connect client has no JVM: the windows fold in Python, and stage 2 keeps its state
    in files (``state_location``) on the server's executors. The windows are those of the
    events, each once."""
    from collections import Counter

    import pyarrow.parquet as pq

    batches = in_order_batches(5, 4, 200)
    write_files(tmp_path / "src", batches)
    client = tmp_path / "client.py"
    shutil.copy(connect_windows_app.__file__, client)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    args = [str(tmp_path / d) for d in ("src", "out", "ck", "state")]
    res = subprocess.run([sys.executable, str(client), connect_url, *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, driver_report(res)
    assert "SESSION pyspark.sql.connect" in res.stdout, res.stdout
    assert list((tmp_path / "state").iterdir())  # the state went to files
    expected: dict[tuple[str, int], list[int]] = {}
    for e in (e for rows in batches for e in rows if e["account"] != "~flush"):
        for start in range(int(e["ts"] // 10) * 10 - 20, int(e["ts"] // 10) * 10 + 1, 10):
            n_total = expected.setdefault((e["account"], start), [0, 0])
            n_total[0] += 1
            n_total[1] += e["amount"]
    table = pq.read_table(tmp_path / "out", columns=["account", "window_start", "n", "total"]).to_pylist()
    got = Counter((r["account"], int(r["window_start"].timestamp()), r["n"], r["total"]) for r in table
                  if r["account"] != "~flush")
    assert got == Counter((k, s, n, t) for (k, s), (n, t) in expected.items())
