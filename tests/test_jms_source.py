"""The acknowledging queue source against the real local ActiveMQ Artemis."""

from __future__ import annotations

import subprocess
import time

import pytest

from spark_ext import compat
from spark_ext.options import checkpoint_sink_id
from tests.support.jms import driver_argv, jms
from tests.support.pg_util import execute, prepared, query, table_name
from tests.support.processes import driver_report
from tests.support.releases import assert_refused_for_release, refusal
from tests.support.stomp_util import Holder, consumer_count, drain, queue_name, send, take_all
from tests.support.waiting import wait_for, wait_for_idle_trigger

pytestmark = [pytest.mark.spark, pytest.mark.services]


@pytest.mark.compat
def test_every_message_read_once_and_all_acknowledged(spark, services, tmp_path):
    """Refused at start before PySpark 4.2, with nothing received or acknowledged."""
    dest = queue_name("once")
    send(services, dest, [f"m{i}" for i in range(300)], headers={"kind": "test"})
    df = jms(spark, services, dest, maxMessagesPerTrigger="70")
    if not compat.HAS_ADMISSION_CONTROL:
        w = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c"))
        assert_refused_for_release(refusal(w), "the queue source (connector jms)")
        assert sorted(drain(services, dest)) == sorted(f"m{i}" for i in range(300))
        return
    assert [f.name for f in df.schema.fields] == ["message_id", "body", "body_text", "headers",
                                                   "destination", "timestamp", "redelivered"]
    q = (df.writeStream.format("memory").queryName("jms_once")
         .option("checkpointLocation", str(tmp_path / "c"))
         .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: spark.table("jms_once").count() >= 300, "300 rows")
        wait_for_idle_trigger(q)
    finally:
        q.stop()
    rows = spark.table("jms_once").collect()
    assert sorted(r.body_text for r in rows) == sorted(f"m{i}" for i in range(300))
    assert len({r.message_id for r in rows}) == 300
    assert all(r.headers["kind"] == "test" and r.destination == dest for r in rows)
    assert max(p["numInputRows"] for p in q.recentProgress) <= 70
    assert drain(services, dest) == []  # everything was acknowledged


def test_binary_bodies_arrive_byte_for_byte(spark, services, tmp_path):
    """A body that is not UTF-8 (here with NUL bytes too) is a message like any other: its
    ``body`` column is exactly the bytes sent; ``body_text`` is the lossy reading."""
    dest = queue_name("bin")
    bodies = [b"\xff\xfe\x00\x01binary", "héllo €".encode(), bytes(range(256))]
    send(services, dest, bodies)
    q = (jms(spark, services, dest).writeStream.format("memory").queryName("jms_bin")
         .option("checkpointLocation", str(tmp_path / "c"))
         .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: spark.table("jms_bin").count() >= 3, "3 rows")
    finally:
        q.stop()
    rows = spark.table("jms_bin").collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    assert "héllo €" in {r.body_text for r in rows}


def test_message_id_header_names_an_application_header_in_its_own_case(spark, services, tmp_path):
    """STOMP header names are case-sensitive: ``messageIdHeader=paymentId`` reads the header
    the application sent as ``paymentId``, and its values are the message IDs."""
    dest = queue_name("appid")
    send(services, dest, [f"b{i}" for i in range(40)], each=[{"paymentId": f"pay-{i}"} for i in range(40)])
    q = (jms(spark, services, dest, messageIdHeader="paymentId").writeStream.format("memory")
         .queryName("jms_appid").option("checkpointLocation", str(tmp_path / "c"))
         .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: q.exception() is not None or spark.table("jms_appid").count() >= 40, "40 rows")
        assert q.exception() is None, str(q.exception())
        wait_for_idle_trigger(q)
    finally:
        q.stop()
    rows = spark.table("jms_appid").collect()
    expected = sorted((f"pay-{i}", f"b{i}") for i in range(40))
    assert sorted((r.message_id, r.body_text) for r in rows) == expected
    assert drain(services, dest) == []


def test_message_without_the_id_header_stops_the_query_and_nothing_is_acked(spark, services, tmp_path):
    dest = queue_name("noid")
    send(services, dest, ["x0", "x1", "x2"])
    q = (jms(spark, services, dest, messageIdHeader="paymentId").writeStream.format("noop")
         .option("checkpointLocation", str(tmp_path / "c"))
         .trigger(processingTime="100 milliseconds").start())
    with pytest.raises(Exception) as info:
        assert q.awaitTermination(120), "still running after 120 s"
    assert "lacks header 'paymentId' (option messageIdHeader" in str(info.value)
    assert sorted(drain(services, dest)) == ["x0", "x1", "x2"]  # none was acknowledged


# The driver is killed at each point in turn, each run after batches of its own committed
# (so a restart that rewrote one would show duplicates). jms points: @N is the source's
# batch seq N (Spark batch N-1, acknowledged while batch N plans); jdbc: Spark's batch N.
KILLS = ("jms.before_ack@2", "jms.mid_ack@4", "jdbc.before_decision@6")


def test_kill_9_at_each_point_in_turn_then_restart_every_message_exactly_once_in_postgres(services, tmp_path):
    dest, table = queue_name("k9"), table_name("jmsk9")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")
    sent = [f"p{i}" for i in range(400)]
    send(services, dest, sent)
    base = [*driver_argv(services, dest, tmp_path / "ckpt", table), "400"]
    tls = [f"{k}={v}" for k, v in services.stomp_tls().items()]  # over TLS, the broker's CA checked
    landed = 0
    for point in KILLS:
        crashed = subprocess.run([*base, point, *tls], start_new_session=True, capture_output=True, text=True,
                                 timeout=300)
        assert crashed.returncode == -9, f"{point}: {driver_report(crashed)}"
        committed = [b for (b,) in query(url, f"SELECT body FROM {table}")]
        # this run committed batches of its own before the crash, nothing twice
        assert landed < len(committed) < 400, (point, len(committed))
        assert len(set(committed)) == len(committed), point
        assert set(committed) <= set(sent)
        landed = len(committed)
    done = subprocess.run([*base, "-", *tls], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, driver_report(done)
    rows = query(url, f"SELECT body, count(*) FROM {table} GROUP BY body")
    assert sorted(b for b, _ in rows) == sorted(sent)
    assert all(n == 1 for _, n in rows)  # redelivered duplicates were dropped
    assert prepared(url, checkpoint_sink_id(str(tmp_path / "ckpt"))) == []
    assert drain(services, dest) == []  # and everything is acknowledged


@pytest.mark.campaign  # make faults: about a minute of redelivery rounds
def test_recorded_message_that_never_returns_fails_clearly_or_is_skipped(services, tmp_path):
    dest, table = queue_name("gone"), table_name("jmsgone")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")
    send(services, dest, [f"g{i}" for i in range(100)])
    base = driver_argv(services, dest, tmp_path / "ckpt", table)
    crashed = subprocess.run([*base, "100", "jdbc.before_decision"], start_new_session=True,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9
    lost = take_all(services, dest, 100)  # another consumer takes everything, the batch's messages too
    assert len(set(lost.bodies)) == len(lost.bodies) == 100 - lost.held
    assert set(lost.bodies) <= {f"g{i}" for i in range(100)}
    failed = subprocess.run([*base, "1", "-", "replayTimeoutMs=3000"], capture_output=True, text=True,
                            timeout=300)
    assert failed.returncode == 1, driver_report(failed)
    assert "did not redeliver" in failed.stderr and "skipMissingMessages=true" in failed.stderr
    send(services, dest, [f"new{i}" for i in range(10)])
    skipped = subprocess.run([*base, "10", "-", "replayTimeoutMs=3000", "skipMissingMessages=true"],
                             capture_output=True, text=True, timeout=300)
    assert skipped.returncode == 0, driver_report(skipped)
    assert "skipped (skipMissingMessages=true)" in skipped.stderr
    # The query went on past the lost batch: the new messages landed, once each.
    bodies = sorted(r[0] for r in query(url, f"SELECT body FROM {table}"))
    assert bodies == sorted(f"new{i}" for i in range(10))


def _start_error(spark, services, tmp_path, **opts: str) -> str:
    q = (jms(spark, services, queue_name("bad"), **opts).writeStream.format("noop")
         .option("checkpointLocation", str(tmp_path / "c")).start())
    with pytest.raises(Exception) as info:
        assert q.awaitTermination(120), "still running after 120 s"
    return str(info.value)


def test_wrong_credentials_fail_at_start_without_the_password(spark, services, tmp_path):
    msg = _start_error(spark, services, tmp_path, password="Wrong-Pass-77")
    assert "cannot connect to the STOMP broker" in msg or "refused the login" in msg
    assert "Wrong-Pass-77" not in msg


def test_broker_down_fails_at_start(spark, services, tmp_path):
    msg = _start_error(spark, services, tmp_path, port="1", connectTimeoutMs="2000")
    assert "cannot connect to the STOMP broker at 127.0.0.1:1" in msg


@pytest.mark.parametrize(("opts", "needle"), [
    ({"destination": "orders"}, "expected /queue/"),
    ({"maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger"),
    ({"brokerUrl": "http://x"}, "brokerUrl"),
])
def test_bad_options_fail_at_load(spark, services, opts, needle):
    with pytest.raises(Exception, match=needle):
        jms(spark, services, opts.pop("destination", "/queue/x"), **opts)


def test_available_now_runs_acknowledge_what_they_committed_and_drain_the_queue(spark, services, tmp_path):
    """A catch-up job: 100 messages, a Trigger.AvailableNow run into PostgreSQL with
    exactly_once, 100 more, a second run, and a third. Each run reads what was there,
    writes it once and acknowledges it before it ends: the broker's own count of the queue
    is 0 after each run, not the whole growing queue. At 30 a trigger each run takes
    several batches (the last one acknowledged by the plan after it). The dedup window is
    shorter than the gap between the runs, so no run can lean on it (unacknowledged, the
    first run's messages came to the third run as new)."""
    from tests.support.stomp_util import queue_counts

    dest, table = queue_name("avnow"), table_name("jmsavnow")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")

    def run() -> None:
        q = (jms(spark, services, dest, maxMessagesPerTrigger="30", dedupWindowMs="1")
             .selectExpr("message_id", "body_text AS body").writeStream.format("hzsink")
             .option("connector", "jdbc").option("url", url).option("dbtable", table)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
        assert q.awaitTermination(180), "the AvailableNow run did not end"
        assert q.exception() is None, q.exception()

    sent: list[str] = []
    for run_no in "abc":  # three runs: the third would see the first's messages again
        sent += [f"{run_no}{i}" for i in range(100)]
        send(services, dest, sent[-100:])
        run()
        rows = query(url, f"SELECT body, count(*) FROM {table} GROUP BY body")
        assert sorted(b for b, _ in rows) == sorted(sent), run_no
        assert [(b, n) for b, n in rows if n != 1] == [], run_no  # nothing written twice
        assert queue_counts(dest) == (0, 0), run_no  # every message it committed is acknowledged


@pytest.mark.campaign  # two driver runs, about 50 s: make faults runs it, to keep make test in budget
def test_replay_whose_messages_come_back_late_still_reads_the_whole_batch(services, tmp_path):
    """A replay must not depend on the first redelivery arriving within milliseconds: here
    the crashed batch's messages are held by another consumer (as a dead driver's
    connection holds them until the broker notices) until after the restarted query
    subscribed and began waiting. The batch is far larger than the first 64 KiB window."""
    dest, table = queue_name("late"), table_name("jmslate")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")
    sent = [f"{i:05d}" + "x" * 2000 for i in range(300)]
    send(services, dest, sent)
    base = [*driver_argv(services, dest, tmp_path / "ckpt", table), "300"]
    crashed = subprocess.run([*base, "jdbc.before_decision", "maxMessagesPerTrigger=300"],
                             start_new_session=True, capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9, driver_report(crashed)
    assert query(url, f"SELECT count(*) FROM {table}") == [(0,)]
    holder = Holder(services, dest)
    wait_for(lambda: holder.count() == 300, "the holder to receive every message", 60)
    restarted = subprocess.Popen([*base, "-", "maxMessagesPerTrigger=300", "replayTimeoutMs=30000"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: consumer_count(dest) == 2, "the restarted query to subscribe", 120)
        # The replay subscribed and began waiting (its first settle lasts at most 0.5 s).
        time.sleep(2)
        holder.release()
        _, err = restarted.communicate(timeout=300)
    finally:
        if restarted.poll() is None:
            restarted.kill()
    assert restarted.returncode == 0, err[-3000:]
    rows = query(url, f"SELECT body, count(*) FROM {table} GROUP BY body")
    assert sorted(b for b, _ in rows) == sorted(sent)
    assert all(n == 1 for _, n in rows)
    assert drain(services, dest) == []
