"""The queue source when its broker fails: an Artemis restart under a running query, a
reconnect while a batch is in flight, a replay whose redelivery order differs, and
acknowledgement of an idle query. Each against the real local Artemis."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from spark_ext.options import checkpoint_sink_id
from tests.support.jms import driver_argv, jms
from tests.support.pg_util import execute, prepared, query, table_name
from tests.support.processes import driver_report
from tests.support.stomp_util import drain, queue_counts, queue_name, send
from tests.support.waiting import wait_for, wait_for_idle_trigger

pytestmark = [pytest.mark.spark, pytest.mark.services]


def restart_artemis() -> None:
    """Stop the local Artemis (by its pid file) and start it again; persistent messages stay."""
    for action in ("down", "up"):
        done = subprocess.run([sys.executable, "-m", "services", action, "artemis"], capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, driver_report(done)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def to_jdbc(df, services, table: str, ckpt, trigger: str = "200 milliseconds"):
    return (df.selectExpr("message_id", "body_text AS body").writeStream.format("hzsink")
            .option("connector", "jdbc").option("url", services.postgres_url).option("dbtable", table)
            .option("checkpointLocation", str(ckpt)).trigger(processingTime=trigger).start())


def count(url: str, table: str) -> int:
    return int(query(url, f"SELECT count(*) FROM {table}")[0][0])


def run_until_written(q, url: str, table: str, rows: int) -> None:
    """Wait until ``table`` holds ``rows`` (the query must not have failed), then for the
    next trigger without input: its planning acknowledged what committed."""
    wait_for(lambda: count(url, table) >= rows or not q.isActive, f"{rows} rows written")
    assert q.exception() is None, q.exception()
    wait_for_idle_trigger(q)


@pytest.mark.restarts_services
def test_a_query_rides_through_an_artemis_restart(spark, services, tmp_path):
    """exactly_once; at_least_once receives through the same connection code (only the
    driver-restart bookkeeping differs), so one guarantee stands for both here."""
    guarantee = "exactly_once"
    dest, table = queue_name("restart"), table_name("jmsrs")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")
    send(services, dest, [f"r{i}" for i in range(2000)])
    q = to_jdbc(jms(spark, services, dest, maxMessagesPerTrigger="200", guarantee=guarantee), services,
                table, tmp_path / "c")
    try:
        wait_for(lambda: count(url, table) >= 400, "two batches written before the restart")
        restart_artemis()
        run_until_written(q, url, table, 2000)
    finally:
        q.stop()
    rows = query(url, f"SELECT body, count(*) FROM {table} GROUP BY body")
    assert sorted(b for b, _ in rows) == sorted(f"r{i}" for i in range(2000))  # nothing lost
    assert all(n == 1 for _, n in rows), [r for r in rows if r[1] > 1][:5]
    assert drain(services, dest) == []


@pytest.mark.restarts_services
@pytest.mark.campaign  # make faults: the suite keeps the Artemis restart ride and the unhandled acks
def test_a_reconnect_while_a_batch_is_in_flight_reads_nothing_twice(spark, services, tmp_path):
    """The broker restarts while batch 3 runs (held by a UDF until the restart is over): its
    messages come again on the new connection, some after the batch was acknowledged, and
    must be dropped, not read into a later batch."""
    from pyspark.sql import functions as F

    dest, table = queue_name("inflight"), table_name("jmsif")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")
    send(services, dest, [f"m{i}" for i in range(500)])
    hold, holding = str(tmp_path / "hold"), str(tmp_path / "holding")
    open(hold, "w").close()

    @F.udf("string")
    def gate(body: str) -> str:
        if body == "m250" and os.path.exists(hold):
            open(holding, "w").close()
            deadline = time.monotonic() + 120
            while os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.05)
        return body

    df = jms(spark, services, dest, maxMessagesPerTrigger="100").withColumn("body_text", gate("body_text"))
    q = to_jdbc(df, services, table, tmp_path / "c")
    try:
        wait_for(lambda: os.path.exists(holding), "the batch holding m250 to start")
        restart_artemis()
        os.remove(hold)
        run_until_written(q, url, table, 500)
    finally:
        q.stop()
    rows = query(url, f"SELECT body, count(*) FROM {table} GROUP BY body")
    assert sorted(b for b, _ in rows) == sorted(f"m{i}" for i in range(500))
    assert all(n == 1 for _, n in rows), [r for r in rows if r[1] > 1][:5]
    assert drain(services, dest) == []


@pytest.mark.campaign  # make faults: make test's budget
def test_at_least_once_replay_reads_the_recorded_messages_when_redelivery_order_differs(services, tmp_path):
    """The driver dies after the sink committed batch 2, before Spark recorded it. While it is
    down, high-priority messages arrive: the broker redelivers them first. The replayed
    batch must be the recorded one (the sink skips it as landed), or the priority messages
    would be acknowledged without ever being written."""
    dest, table = queue_name("alo"), table_name("jmsalo")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")
    send(services, dest, [f"p{i}" for i in range(200)])
    base = driver_argv(services, dest, tmp_path / "ckpt", table)
    crashed = subprocess.run([*base, "200", "jdbc.after_decision@2", "guarantee=at_least_once"],
                             start_new_session=True, capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9, driver_report(crashed)
    assert count(url, table) > 0  # batches landed before the crash, batch 2 among them
    send(services, dest, [f"hi{i}" for i in range(20)], headers={"priority": "9"})
    done = subprocess.run([*base, "220", "-", "guarantee=at_least_once"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, driver_report(done)
    bodies = {b for (b,) in query(url, f"SELECT body FROM {table}")}
    expected = {f"p{i}" for i in range(200)} | {f"hi{i}" for i in range(20)}
    assert expected - bodies == set(), sorted(expected - bodies)[:10]  # nothing lost
    assert prepared(url, checkpoint_sink_id(str(tmp_path / "ckpt"))) == []
    assert drain(services, dest) == []


def test_copies_that_arrive_while_a_batch_is_acknowledged_are_acknowledged_too(services, monkeypatch):
    """After a reconnect the committed batch's copies come again, some while its ACK frames
    are being sent. The reader drops them, and must acknowledge them too, or they stay on the
    broker, delivered and unacknowledged, until the connection closes. Which copies land in
    that window is up to the broker; holding the received copies until the ACK frames went out,
    and waiting for each before ``ack`` returns, puts every one of them there (timing only;
    the reader's steps are unchanged)."""
    from spark_ext.connectors.jms.config import JmsSourceConfig
    from spark_ext.connectors.jms.ids import unpack_ids
    from spark_ext.connectors.jms.source import JmsStreamReader, ReadMaxRows
    from spark_ext.options import Options

    dest = queue_name("ackrace")
    send(services, dest, [f"a{i}" for i in range(50)])
    cfg = JmsSourceConfig.parse(Options({
        "host": services.stomp_host, "port": str(services.stomp_port), "user": services.stomp_user,
        "password": services.stomp_password, "destination": dest}, "test"))
    reader = JmsStreamReader(cfg)
    try:
        start = reader.initialOffset()
        wait_for(lambda: reader.rx._arrivals >= 50, "the 50 messages to arrive")
        first = reader.latestOffset(start, ReadMaxRows(50))
        assert len(unpack_ids(first["ids"])) == 50
        rx = reader.rx
        rx.close()  # the connection is lost while batch 1 is in flight
        real_ack, real_received, late = rx.ack, rx._received, list[str]()
        held: list = []
        gate = threading.Lock()
        opened = False

        def hold_until_acked(frames):
            # Messages read before batch 1's ACK frames went out wait here, so every copy
            # lands while it is acknowledged, whatever the broker's pace.
            with gate:
                if not opened:
                    held.append(frames)
                    return
            real_received(frames)

        def ack_then_let_copies_land(ids, batch=None):
            nonlocal opened
            unacked = real_ack(ids, batch)
            if batch is not None and not late:
                late.extend(unacked)
                with gate:
                    opened = True
                    for frames in held:
                        real_received(frames)
                wait_for(lambda: set(unacked) <= set(rx._queue), "the batch's copies to arrive", 30)
            return unacked

        monkeypatch.setattr(rx, "_received", hold_until_acked)  # taken by the reconnect below
        monkeypatch.setattr(rx, "ack", ack_then_let_copies_land)
        assert reader.latestOffset(first, ReadMaxRows(50)) == first  # acks batch 1; nothing new
        assert sorted(late) == sorted(unpack_ids(first["ids"])), "copies arrived before the acknowledgement"
    finally:
        reader.stop()
    assert drain(services, dest) == []


def test_an_idle_query_acknowledges_what_committed_within_a_trigger(spark, services, tmp_path):
    dest, table = queue_name("idle"), table_name("jmsidle")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")
    send(services, dest, [f"i{i}" for i in range(3000)])
    q = to_jdbc(jms(spark, services, dest, maxMessagesPerTrigger="500"), services, table, tmp_path / "c",
                trigger="1 second")
    try:
        run_until_written(q, url, table, 3000)
        assert queue_counts(dest) == (0, 0)  # nothing left, nothing held unacknowledged
    finally:
        q.stop()
    assert count(url, table) == 3000


@pytest.mark.campaign  # 35 s of the suite: make faults runs it
def test_a_poison_message_fails_every_start_and_is_never_acknowledged(spark, services, tmp_path):
    """What docs/failures.md promises: a message whose batch always fails (here the first message,
    so it is in the first batch however the rest is split) fails the query; nothing of
    the batch is written or acknowledged, and every restart meets the message again,
    redelivered, until the query tolerates it."""
    from pyspark.sql import functions as F

    dest, table = queue_name("poison"), table_name("jmspoison")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")
    send(services, dest, ["poison"] + [f"g{i}" for i in range(20)])

    @F.udf("string")
    def strict(body: str) -> str:
        if body == "poison":
            raise ValueError("cannot parse message body 'poison'")
        return body

    @F.udf("string")
    def tolerant(body: str) -> str:
        return "unparsed" if body == "poison" else body

    def run(parse) -> str | None:
        q = to_jdbc(jms(spark, services, dest).withColumn("body_text", parse("body_text")), services, table,
                    tmp_path / "c")
        try:
            wait_for(lambda: not q.isActive or count(url, table) >= 21, "the query to fail or finish")
            return None if q.exception() is None else str(q.exception())
        finally:
            q.stop()

    for _ in range(3):
        error = run(strict)
        assert error is not None and "cannot parse message body 'poison'" in error
        assert count(url, table) == 0  # the failed batch wrote nothing
        assert queue_counts(dest) == (21, 0)  # and acknowledged nothing: every message is back
    assert run(tolerant) is None  # the fixed query writes the batch once
    bodies = sorted(b for (b,) in query(url, f"SELECT body FROM {table}"))
    assert bodies == sorted(["unparsed"] + [f"g{i}" for i in range(20)])


@pytest.mark.restarts_services
def test_acknowledgements_the_broker_never_handled_do_not_let_a_batch_be_written_twice(services, tmp_path):
    """The broker hangs (frozen) right after batch 1 committed: batch 2's ACK frames go out
    but are never handled, the query goes on with prefetched messages and commits batch 3,
    then the driver dies (while acknowledging batch 3) and the broker crashes. The restart
    learns only its last offset: batch 2's messages come back, and must be dropped, not
    written a second time."""
    import signal

    from services.common import _read_pid

    dest, table = queue_name("unacked"), table_name("jmsua")
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, body text)")
    send(services, dest, [f"m{i}" for i in range(600)])
    argv = driver_argv(services, dest, tmp_path / "c", table)
    opts = ["maxMessagesPerTrigger=200", "connectTimeoutMs=3000"]
    driver = subprocess.Popen([*argv, "600", "jms.mid_ack@3", *opts], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    artemis = _read_pid("artemis")
    assert artemis is not None, "Artemis is not running"
    frozen = False
    try:
        wait_for(lambda: count(url, table) > 0 or driver.poll() is not None, "batch 1 written")
        first = count(url, table)
        os.killpg(artemis, signal.SIGSTOP)
        frozen = True
        assert count(url, table) == first, "batch 2 committed before the broker froze: nothing tested"
        _, err = driver.communicate(timeout=180)  # batches 2 and 3 on prefetched messages, then the kill
        assert driver.returncode == -9, err[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
        if frozen:
            os.killpg(artemis, signal.SIGKILL)  # the hung broker crashes: unhandled frames are lost
            wait_for(lambda: not _group_alive(artemis), "the killed broker to be gone")
    restart_artemis()
    done = subprocess.run([*argv, "600", "-", *opts], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, driver_report(done)
    assert query(url, f"SELECT count(*), count(DISTINCT message_id) FROM {table}") == [(600, 600)]


def test_a_once_run_waits_for_a_broker_slow_to_push_after_subscribing(services, monkeypatch):
    """Trigger.Once plans one batch (read limit: all available) and ends: a plan made
    before the new subscription's first messages arrive would end the run having read
    nothing (seen in CI under load). The receiving thread is held 300 ms at its first
    messages, a slow broker's first push (timing only; the reader's steps are unchanged)."""
    from spark_ext.compat import ReadAllAvailable
    from spark_ext.connectors.jms.client import StompReceiver
    from spark_ext.connectors.jms.config import JmsSourceConfig
    from spark_ext.connectors.jms.ids import unpack_ids
    from spark_ext.connectors.jms.source import JmsStreamReader
    from spark_ext.options import Options

    dest = queue_name("onceslow")
    send(services, dest, [f"o{i}" for i in range(30)])
    real = StompReceiver._received
    held: set[int] = set()

    def slow_first_push(self, frames):
        if id(self) not in held:
            held.add(id(self))
            time.sleep(0.3)
        real(self, frames)

    monkeypatch.setattr(StompReceiver, "_received", slow_first_push)
    cfg = JmsSourceConfig.parse(Options({
        "host": services.stomp_host, "port": str(services.stomp_port), "user": services.stomp_user,
        "password": services.stomp_password, "destination": dest}, "test"))
    reader = JmsStreamReader(cfg)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end != start, "the only plan of the run was empty"
        assert len(unpack_ids(end["ids"])) == 30
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # acknowledges the batch: nothing new
    finally:
        reader.stop()
    assert drain(services, dest) == []
