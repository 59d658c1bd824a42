"""The driver's Prometheus endpoint (``spark_ext.monitoring``) scraped during a real Kafka ->
PostgreSQL exactly-once query: the samples parsed with prometheus_client's own parser show
the batch id rising, the Kafka source's lag per partition falling to 0, and the sink's
committed batches and rows, which its commit worker reports through a card."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spark_ext.errors import ConfigurationError
from spark_ext.monitoring import serve
from spark_ext.monitoring.exporter import Families, QueryWatcher, _lags
from spark_ext.monitoring.metrics import BY_NAME
from spark_ext.monitoring.sidecar import StatusFamilies
from tests.support import kafka_util, pg_util

RECORDS = 3000


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> (labels, value) of every sample the endpoint serves."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_lag_is_latest_minus_end_per_kafka_partition_and_nothing_for_other_offsets():
    end = '{"t": {"0": 90, "1": 10}}'
    assert _lags(end, '{"t": {"0": 100, "1": 10}}') == {("t", "0"): 10, ("t", "1"): 0}
    assert _lags('["id-1", "id-2"]', '["id-3"]') == {}  # a queue source's offsets
    assert _lags(None, '{"t": {"0": 5}}') == {}
    assert _lags({"t": {"0": 3}}, {"t": {"0": 5}}) == {("t", "0"): 2}  # offsets already parsed


def test_every_declared_metric_is_served_and_nothing_else():
    names = {f.name for f in Families(QueryWatcher()).collect()}
    assert names == {n.removesuffix("_total") for n in BY_NAME if not n.startswith("spark_ext_status_")}
    status = {f.name for f in StatusFamilies("jdbc", list).collect()}
    assert status == {n for n in BY_NAME if n.startswith("spark_ext_status_")}


def test_a_taken_port_is_refused_naming_it(spark):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        said = f"cannot serve metrics on 127.0.0.1:{port}.*pass another port"
        with pytest.raises(ConfigurationError, match=said):
            serve(spark, port=port)
    finally:
        taken.close()


@pytest.mark.spark
@pytest.mark.services
def test_a_scrape_shows_the_batches_the_lag_falling_to_0_and_the_sinks_rows(spark, services, tmp_path):
    from confluent_kafka import Producer

    topic = kafka_util.create_topic(services.kafka_bootstrap, 2, "mon")
    producer = Producer({"bootstrap.servers": services.kafka_bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, str(i).encode(), partition=i % 2)
    producer.flush()
    table = pg_util.table_name("mon")
    pg_util.execute(services.postgres_url, f"CREATE TABLE {table} (id bigint, v text)")
    exporter = serve(spark, port=0)
    q = None
    try:
        df = (spark.readStream.format("hzsource").option("connector", "kafka")
              .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "250").load())
        q = (df.selectExpr("offset * 2 + partition AS id", "CAST(value AS STRING) AS v").writeStream
             .format("hzsink").option("connector", "jdbc").option("url", services.postgres_url)
             .option("dbtable", table).option("checkpointLocation", str(tmp_path / "ck"))
             .queryName("payments_mon").trigger(processingTime="200 milliseconds").start())
        qid = str(q.id)
        lags, batches, rows = [], [], 0.0
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            got = scrape(exporter.url)
            mine = {k: [(lb, v) for lb, v in vs if lb.get("query_id") == qid] for k, vs in got.items()}
            if mine.get("spark_ext_source_lag_records_max"):
                lags.append(mine["spark_ext_source_lag_records_max"][0][1])
            if mine.get("spark_ext_query_batch_id"):
                batches.append(mine["spark_ext_query_batch_id"][0][1])
            sink_rows = mine.get("spark_ext_sink_rows_total") or []
            rows = sink_rows[0][1] if sink_rows else 0.0
            if rows == RECORDS and lags and lags[-1] == 0:
                break
            time.sleep(0.3)
        assert rows == RECORDS, (rows, lags, batches)
        assert max(lags) > 0 and lags[-1] == 0, lags  # 12 batches of 250: behind at first, then caught up
        assert batches == sorted(batches) and batches[-1] >= 5, batches
        assert [lb["query"] for lb, _ in mine["spark_ext_query_active"]] == ["payments_mon"]
        [(labels, last)] = mine["spark_ext_sink_last_batch"]
        assert labels["sink"].startswith("jdbc sink ") and last == batches[-1]
        assert {lb["partition"] for lb, _ in mine["spark_ext_source_lag_records"]} == {"0", "1"}
        assert pg_util.query(services.postgres_url, f"SELECT count(*) FROM {table}") == [(RECORDS,)]
        text = urllib.request.urlopen(exporter.url, timeout=10).read().decode()
        assert services.postgres_url.split("@")[0] not in text and "password" not in text
    finally:
        if q is not None:
            q.stop()
        exporter.stop()


def _group_lags(bootstrap: str, group: str) -> dict[int, tuple[int, int, int]]:
    """Kafka's own ``kafka-consumer-groups.sh --describe``: partition -> (current, log end, lag)."""
    import subprocess

    from services.kafka import kafka_libs

    tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    done = subprocess.run(["java", "-cp", f"{kafka_libs()}/*", tool, "--bootstrap-server", bootstrap,
                           "--describe", "--group", group], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = {}
    for line in done.stdout.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[0] == group and cols[2].isdigit():
            out[int(cols[2])] = (int(cols[3]), int(cols[4]), int(cols[5]))
    return out


@pytest.mark.spark
@pytest.mark.services
def test_kafkas_own_tool_shows_the_query_lag_through_the_opted_in_group(spark, services, tmp_path):
    """With ``commitOffsetsToGroup`` each committed batch's end offsets go to the group:
    Kafka's ``ConsumerGroupCommand`` (kafka-consumer-groups.sh) shows the lag reaching 0."""
    from confluent_kafka import Producer

    topic = kafka_util.create_topic(services.kafka_bootstrap, 2, "lag")
    group = f"lag-{topic}"
    producer = Producer({"bootstrap.servers": services.kafka_bootstrap})
    for i in range(1200):
        producer.produce(topic, str(i).encode(), partition=i % 2)
    producer.flush()
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400")
          .option("commitOffsetsToGroup", group).load())
    q = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert _group_lags(services.kafka_bootstrap, group) == {0: (600, 600, 0), 1: (600, 600, 0)}


@pytest.mark.spark
@pytest.mark.services
def test_the_status_sidecar_shows_a_killed_querys_batch_in_doubt_and_its_restart_finishing_it(services,
                                                                                                tmp_path):
    """``spark-ext status jdbc ... --serve 0`` in a process of its own, scraped while an
    exactly-once query into PostgreSQL is killed with kill -9 right after batch 1's
    decision (batch 0 committed) and then restarted: in doubt goes from 0 to the batch's
    prepared transactions and back to 0, finished from 1 to 0 to 1, the batch id rises."""
    import os
    import signal
    import subprocess
    import sys

    from spark_ext.options import checkpoint_sink_id
    from tests.support.pg_util import write_json_files
    from tests.support.sinks import PostgresCase, run_driver

    case = PostgresCase(services)
    target = case.new_target()
    write_json_files(tmp_path / "src", [40, 40, 40])
    sink = checkpoint_sink_id(str(tmp_path / "ckpt"))
    argv = [sys.executable, "-m", "spark_ext", "status", "jdbc", "--url", services.postgres_url,
            "--sink", sink, "--serve", "0"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sidecar = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert sidecar.stdout is not None
        url = sidecar.stdout.readline().split(" on ")[-1].strip()
        assert url.startswith("http://127.0.0.1:"), url

        def state() -> tuple[float, float | None, float | None, float | None]:
            got = scrape(url)
            mine = {k: [v for lb, v in vs if lb.get("sink") == sink] for k, vs in got.items()}
            one = {k: (v[0] if v else None) for k, v in mine.items()}
            return (got["spark_ext_status_up"][0][1], one.get("spark_ext_status_in_doubt"),
                    one.get("spark_ext_status_finished"), one.get("spark_ext_status_last_batch"))

        assert state() == (1, None, None, None)  # nothing of the sink yet
        crashed = run_driver(case, tmp_path, target, "jdbc.after_decision@1")
        assert crashed.returncode == -9, crashed.stderr[-2000:]
        up, doubt, finished, batch = state()
        assert (up, finished, batch) == (1, 0, 1), (up, doubt, finished, batch)
        assert doubt is not None and doubt >= 1, doubt  # the decided batch's prepared winners
        done = run_driver(case, tmp_path, target)
        assert done.returncode == 0, done.stderr[-2000:]
        assert state() == (1, 0, 1, 2)
        assert case.committed(target) == list(range(120))
    finally:
        sidecar.send_signal(signal.SIGTERM)
        assert sidecar.wait(30) == 0
