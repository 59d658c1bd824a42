"""The driver's Prometheus endpoint (``spark_ext.monitoring``) scraped during a real Kafka ->
PostgreSQL exactly-once query: the samples parsed with prometheus_client's own parser show
the batch id rising, the Kafka source's lag per partition falling to 0, and the sink's
committed batches and rows, which its commit worker reports through a card."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spark_ext import failpoints
from spark_ext.errors import ConfigurationError
from spark_ext.monitoring import cards, serve
from spark_ext.monitoring.exporter import Families, QueryState, QueryWatcher, _lags
from spark_ext.monitoring.metrics import BY_NAME
from spark_ext.monitoring.sidecar import StatusFamilies
from tests.support import kafka_util, pg_util
from tests.support.processes import driver_report

RECORDS = 3000
SCRAPE_ERRORS = (OSError, http.client.HTTPException, ValueError)  # refused, cut off, half a text


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




def test_a_sinks_card_keeps_running_totals_counting_a_batch_written_twice_once(tmp_path, monkeypatch):
    """A batch's card written again (its replay after a crash) counts the batch's rows once;
    the replay's own retries and recovered transactions add (counters never go down)."""
    from spark_ext.timeline import CommitTimes, report

    monkeypatch.setenv(cards.ENV, str(tmp_path))
    report("s", 3, "q1", 10, None, [], CommitTimes(1), 1000.0, epoch=7, recovered=3, rolled_back=1, retries=1)
    report("s", 3, "q1", 10, None, [], CommitTimes(1), 1000.0, epoch=7, recovered=3, rolled_back=1,
           retries=1)  # again
    report("s", 4, "q1", 5, None, [], CommitTimes(1), 2000.0, epoch=8)
    [card] = cards.read("q1")
    totals = (card["rows_total"], card["retries_total"], card["recovered_total"], card["epoch"])
    assert totals == (15, 2, 6, 8)
    watcher = QueryWatcher()
    watcher.queries["q1"] = QueryState("jobs")
    got = {(f.name, s.name): s.value for f in Families(watcher).collect() for s in f.samples}
    assert got[("spark_ext_sink_recovered", "spark_ext_sink_recovered_total")] == 6
    took = {s.labels["action"]: s.value for f in Families(watcher).collect() for s in f.samples
            if s.name == "spark_ext_sink_takeover_transactions_total"}
    assert took == {"committed": 4, "rolled_back": 2}
    assert got[("spark_ext_sink_epoch", "spark_ext_sink_epoch")] == 8


def test_queue_source_cards_are_served_until_they_are_stale(tmp_path, monkeypatch):
    monkeypatch.setenv(cards.ENV, str(tmp_path))
    cards.write_source("h:1/queue/a", {"broker": "h:1", "queue": "/queue/a", "in_flight": 4, "depth": 9})
    old = tmp_path / cards.SOURCES / "old.json"
    old.write_text('{"broker": "h:1", "queue": "/queue/b", "in_flight": 1, "at": 0}')
    fams = Families(QueryWatcher()).collect()
    got = {(s.name, s.labels["queue"]): s.value for f in fams for s in f.samples}
    assert got == {("spark_ext_queue_in_flight", "/queue/a"): 4, ("spark_ext_queue_depth", "/queue/a"): 9}


def test_the_status_sidecar_serves_a_sources_lag_per_partition():
    from spark_ext.status import SourceLag

    fams = StatusFamilies("kafka", list, lambda: [SourceLag(0, "t", 1, 5, 12)]).collect()
    [lag] = [s for f in fams for s in f.samples if s.name == "spark_ext_status_lag_records"]
    assert lag.labels == {"connector": "kafka", "source": "0", "topic": "t", "partition": "1"}
    assert lag.value == 7


def test_a_bad_metrics_port_setting_is_refused_naming_it_and_a_good_one_serves_once(spark):
    from spark_ext.monitoring import CONF_PORT, serve_configured

    try:
        spark.conf.set(CONF_PORT, "nine")
        with pytest.raises(ConfigurationError, match=r"spark\.sparkext\.metrics\.port='nine' is not a port"):
            serve_configured(spark)
        spark.conf.set(CONF_PORT, "0")
        exporter = serve_configured(spark)
        try:
            assert exporter is not None and serve_configured(spark) is exporter
            other = spark.newSession()  # with the setting too (as from --conf): joins, binds nothing
            other.conf.set(CONF_PORT, "0")
            assert serve_configured(other) is exporter
            text = urllib.request.urlopen(exporter.url, timeout=10).read().decode()
            assert "spark_ext_query_active" in text
        finally:
            if exporter is not None:
                exporter.stop()
    finally:
        spark.conf.unset(CONF_PORT)
    assert serve_configured(spark) is None


@pytest.mark.spark
@pytest.mark.services
def test_a_queue_sources_depth_and_in_flight_fall_to_0_as_it_reads(spark, services, tmp_path):
    """600 messages on an Artemis queue read by the queue source, 100 a batch: the exporter
    shows the queue's depth (the broker's own count) and the messages the source holds
    unacknowledged, both above 0 while it reads and 0 once every batch is committed."""
    from tests.support import stomp_util
    from tests.support.jms import jms

    dest = stomp_util.queue_name("depth")
    stomp_util.send(services, dest, [f"m{i}" for i in range(600)])
    exporter = serve(spark, port=0)
    q = None
    try:
        q = (jms(spark, services, dest, maxMessagesPerTrigger="100").writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds")
             .start())
        depths, flights = [], []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = scrape(exporter.url)
            mine = {k: [v for lb, v in vs if lb.get("queue") == dest] for k, vs in got.items()}
            depths += mine.get("spark_ext_queue_depth", [])
            flights += mine.get("spark_ext_queue_in_flight", [])
            if depths and flights and depths[-1] == 0 and flights[-1] == 0:
                break
            time.sleep(0.3)
        assert depths and max(depths) > 0 and depths[-1] == 0, depths
        assert max(flights) > 0 and flights[-1] == 0, flights
        assert stomp_util.queue_counts(dest) == (0, 0)
    finally:
        if q is not None:
            q.stop()
        exporter.stop()


@pytest.mark.spark
@pytest.mark.services
# 53 s: make test's JVM-exporter test scrapes a live query, make faults' payments demo a killed one.
@pytest.mark.campaign
def test_a_killed_and_restarted_kafka_to_postgresql_query_seen_through_its_exporter_and_sidecars(services,
                                                                                                  tmp_path):
    """The Kafka -> PostgreSQL ``exactly_once`` job of ``tests/drivers/kafka_to_jdbc_monitored``
    (exporter on through ``spark.sparkext.metrics.port``), 12 batches of 250 records,
    killed with kill -9 right after batch 4's decision and restarted, scraped all along,
    with two ``spark-ext status --serve`` sidecars: ``jdbc`` (the sink) and ``kafka
    --checkpoint`` (the source's lag from the checkpoint). The driver shows the batch id
    rising and the lag falling to 0; after the kill the sidecars show the decided batch's
    transactions in doubt and 2000 records of lag (what PostgreSQL lacks); the restart's
    take-over resolves them (``recovered``), and in doubt and lag go back to 0."""
    from spark_ext.options import checkpoint_sink_id
    topic = kafka_util.create_topic(services.kafka_bootstrap, 2, "mon")
    kafka_util.produce(services.kafka_bootstrap, topic, kafka_util.numbered(2, RECORDS))
    table = pg_util.table_name("mon")
    pg_util.execute(services.postgres_url, f"CREATE TABLE {table} (partition int, \"offset\" bigint, v text)")
    ckpt, stop = tmp_path / "ck", tmp_path / "stop"
    sink = checkpoint_sink_id(str(ckpt))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", cards.ENV: str(tmp_path / "cards"),
           failpoints.LOG_ENV: str(tmp_path / "struck.log")}
    with socket.socket() as probe:  # a free port, used by both runs in turn
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/metrics"

    def driver(failpoint: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "tests.drivers.kafka_to_jdbc_monitored", services.kafka_bootstrap,
                topic, str(ckpt), services.postgres_url, table, str(port), str(stop), failpoint]
        with (tmp_path / f"driver{failpoint}.log").open("w") as log:  # a file: a full pipe cannot block it
            return subprocess.Popen(argv, env=env, start_new_session=True, stdout=log, stderr=log)

    def tail(failpoint: str) -> str:
        return (tmp_path / f"driver{failpoint}.log").read_text()[-3000:]

    def query(got: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float]:
        """The job's query's first sample of each name (the sink's too: one sink, one source)."""
        out = {}
        for name, samples in got.items():
            mine = [v for lb, v in samples if lb.get("query") == "payments_monitored"]
            if mine:
                out[name] = mine[0]
        return out

    def sidecar(*args: str) -> tuple[subprocess.Popen[str], str]:
        argv = [sys.executable, "-m", "spark_ext", "status", *args, "--serve", "0"]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        assert p.stdout is not None
        return p, p.stdout.readline().split(" on ")[-1].strip()

    def status() -> tuple[float | None, float | None, float | None, float]:
        """(in doubt, finished, last batch) of the sink, and the source's lag summed."""
        rows = {k: [v for lb, v in vs if lb.get("sink") == sink] for k, vs in scrape(jdbc_url).items()}
        one = {k: (v[0] if v else None) for k, v in rows.items()}
        lag = sum(v for _, v in scrape(kafka_url).get("spark_ext_status_lag_records", []))
        return (one.get("spark_ext_status_in_doubt"), one.get("spark_ext_status_finished"),
                one.get("spark_ext_status_last_batch"), lag)

    jdbc_side, jdbc_url = sidecar("jdbc", "--url", services.postgres_url, "--sink", sink)
    kafka_side, kafka_url = sidecar("kafka", "--bootstrap", services.kafka_bootstrap,
                                    "--checkpoint", str(ckpt))
    try:
        first = driver("jdbc.after_decision@4")
        seen: list[dict[str, float]] = []
        while first.poll() is None:
            try:
                seen.append(query(scrape(url)))
            except SCRAPE_ERRORS:
                pass  # not serving yet, or killed mid-answer
            time.sleep(0.2)
        assert first.returncode == -9, tail("jdbc.after_decision@4")
        batches = [s["spark_ext_query_batch_id"] for s in seen if "spark_ext_query_batch_id" in s]
        assert batches == sorted(batches) and batches and batches[-1] >= 2, batches
        assert max(s.get("spark_ext_source_lag_records_max", 0) for s in seen) > 0
        before = max(s.get("spark_ext_sink_epoch", 0) for s in seen)

        doubt, finished, last, lag = status()
        assert (finished, last) == (0, 4) and doubt is not None and doubt >= 1, (doubt, finished, last)
        written = pg_util.query(services.postgres_url, f"SELECT count(*) FROM {table}")[0][0]
        assert (written, lag) == (1000, RECORDS - 1000)  # batches 0-3 of 250 in, batch 4 prepared only

        second = driver("-")
        after: dict[str, float] = {}
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and second.poll() is None:
            try:
                after = query(scrape(url))
            except SCRAPE_ERRORS:
                after = {}
            batch = after.get("spark_ext_query_batch_id", 0)
            if after.get("spark_ext_source_lag_records_max") == 0 and batch >= 11 \
                    and after.get("spark_ext_sink_last_batch") == batch:
                break
            time.sleep(0.3)
        assert after.get("spark_ext_source_lag_records_max") == 0, (after, second.poll())
        assert after["spark_ext_query_batch_id"] > batches[-1]
        assert after["spark_ext_sink_recovered_total"] >= 1  # the take-over finished batch 4
        assert after["spark_ext_sink_takeover_transactions_total"] >= 1  # committed: the first sample
        assert after["spark_ext_sink_epoch"] > before and after["spark_ext_query_active"] == 1
        assert status() == (0, 1, after["spark_ext_query_batch_id"], 0)
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert services.postgres_url.split("@")[0] not in text and "password" not in text
        stop.touch()
        assert second.wait(60) == 0, tail("-")
        distinct = 'count(DISTINCT (partition, "offset"))'
        rows = pg_util.query(services.postgres_url, f"SELECT count(*), {distinct} FROM {table}")
        assert rows == [(RECORDS, RECORDS)]
    finally:
        stop.touch()
        for p in (jdbc_side, kafka_side):
            p.send_signal(signal.SIGTERM)
            assert p.wait(30) == 0


def _group_lags(bootstrap: str, group: str) -> dict[int, tuple[int, int, int]]:
    """Kafka's own ``kafka-consumer-groups.sh --describe``: partition -> (current, log end, lag)."""
    import subprocess

    from services.kafka import kafka_libs

    tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    done = subprocess.run(["java", "-cp", f"{kafka_libs()}/*", tool, "--bootstrap-server", bootstrap,
                           "--describe", "--group", group], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, driver_report(done)
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


def test_with_the_jars_listener_configured_register_leaves_the_port_to_it():
    """The listener serves ``spark.sparkext.metrics.port`` from the JVM: the Python exporter
    must not bind it too (it would fail the job: the port is taken)."""
    from spark_ext.monitoring import CONF_LISTENERS, CONF_PORT, LISTENER, serve_configured

    class Conf:
        def __init__(self, values: dict[str, str]) -> None:
            self.values = values

        def get(self, key: str, default: str | None = None) -> str | None:
            return self.values.get(key, default)

    class Session:
        def __init__(self, values: dict[str, str]) -> None:
            self.conf = Conf(values)

    listeners = f"com.example.Other, {LISTENER}"
    assert serve_configured(Session({CONF_PORT: "nine", CONF_LISTENERS: listeners})) is None
