"""The queue source's prefetch, against the real local Artemis: what the broker has sent
ahead of a batch stays near what a batch takes, and a message the source had received
that does not come back after a lost connection is reported, never dropped silently.

The reader is driven by hand, as Spark's planner would (``latestOffset`` per trigger).
"""

from __future__ import annotations

import logging
import socket
import time

import pytest

from tests.support.stomp_util import drain, queue_counts, queue_name, send, take_all
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.services]


def _reader(services, dest: str, **opts: str):
    from spark_ext.connectors.jms.config import JmsSourceConfig
    from spark_ext.connectors.jms.source import JmsStreamReader
    from spark_ext.options import Options

    cfg = JmsSourceConfig.parse(Options({
        "host": services.stomp_host, "port": str(services.stomp_port), "user": services.stomp_user,
        "password": services.stomp_password, "destination": dest, **opts}, "test"))
    return JmsStreamReader(cfg)


def _becomes_true(cond, within_s: float) -> bool:
    """Whether ``cond`` holds at some poll within ``within_s`` (for what must not happen)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _first_plan(reader, start: dict, n: int) -> dict:
    """Plan as Spark's triggers do, until a batch holds messages."""
    from spark_ext.connectors.jms.ids import unpack_ids
    from spark_ext.connectors.jms.source import ReadMaxRows

    end: dict = {}

    def planned() -> bool:
        end["offset"] = reader.latestOffset(start, ReadMaxRows(n))
        return bool(unpack_ids(end["offset"]["ids"]))

    wait_for(planned, f"a first batch of up to {n} messages")
    return end["offset"]


def _delivering(dest: str) -> int:
    return queue_counts(dest)[1]


def test_the_broker_sends_ahead_about_two_batches_not_the_whole_queue(services):
    """5,000 messages of about 300 bytes wait; batches take 100. With the default window the
    broker may send ahead what two batches take (one in flight, the next), not the backlog:
    every message sent ahead but not yet read gains a delivery on each lost connection."""
    from spark_ext.connectors.jms.ids import unpack_ids
    from spark_ext.connectors.jms.source import ReadMaxRows

    dest = queue_name("prefetch")
    send(services, dest, [f"p{i:05d}-" + "x" * 280 for i in range(5000)])
    reader = _reader(services, dest, maxMessagesPerTrigger="100")
    try:
        start = reader.initialOffset()
        # The first plan subscribes again with a window sized for the batch; on a busy machine
        # the broker may not have sent anything back yet, and the plan is empty (Spark's next
        # trigger plans again) or holds what came first.
        first = _first_plan(reader, start, 100)
        assert 0 < len(unpack_ids(first["ids"])) <= 100
        rx = reader.rx
        # The broker stops at its window; give it the chance to go beyond (it would within ms).
        assert not _becomes_true(lambda: rx._arrivals > 400, 3.0), \
            f"{rx._arrivals} messages sent ahead of a 100-message batch"
        assert _delivering(dest) <= 400
        second = reader.latestOffset(first, ReadMaxRows(100))  # batch 1 committed: acknowledged
        assert len(unpack_ids(second["ids"])) == 100, "the window starved the next batch"
    finally:
        reader.stop()


@pytest.mark.parametrize("skip", ["false", "true"])
def test_a_message_received_ahead_that_never_comes_back_is_reported(services, caplog, skip):
    """The source has received messages beyond batch 1 when its connection drops; another
    consumer takes them before the source reconnects (as a dead-letter move or an expiry
    would). Those messages were in no batch, so no replay looks for them: the source must say
    so, failing the query, or (``skipMissingMessages=true``) logging each one as an error."""
    from spark_ext.connectors.jms.ids import unpack_ids
    from spark_ext.connectors.jms.source import ReadMaxRows
    from spark_ext.errors import ConnectorError

    dest = queue_name("gone-ahead")
    send(services, dest, [f"g{i}" for i in range(300)])
    reader = _reader(services, dest, maxMessagesPerTrigger="50", replayTimeoutMs="2000",
                     skipMissingMessages=skip)
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, ReadMaxRows(50))
        rx = reader.rx
        wait_for(lambda: len(rx._queue) > 0, "messages received beyond batch 1")
        ahead = set(rx._queue)
        rx._conn._sock.shutdown(socket.SHUT_RDWR)  # the link drops: no DISCONNECT
        wait_for(lambda: not rx.connected, "the reader to see the connection lost")
        taken = take_all(services, dest, 300)  # someone else takes everything meanwhile
        # Every message once, but for any the broker holds for no consumer (none left to read).
        assert len(set(taken.bodies)) == len(taken.bodies) == 300 - taken.held
        assert set(taken.bodies) <= {f"g{i}" for i in range(300)}
        caplog.clear()
        with caplog.at_level(logging.ERROR, "spark_ext.connectors.jms.source"):
            if skip == "false":
                with pytest.raises(ConnectorError) as info:
                    wait_for(lambda: reader.latestOffset(first, ReadMaxRows(50)) is None,
                             "the missing messages to be reported", 30)
                text = str(info.value)
                assert "skipMissingMessages=true" in text
                assert any(m in text for m in ahead)
            else:
                wait_for(lambda: reader.latestOffset(first, ReadMaxRows(50)) == first
                         and "skipped (skipMissingMessages=true)" in caplog.text,
                         "the missing messages to be logged", 30)
                assert all(m in caplog.text for m in ahead), caplog.text[-2000:]
        assert not set(unpack_ids(first["ids"])) & ahead
    finally:
        reader.stop()


def test_stopping_cleanly_counts_no_delivery_against_the_messages_sent_ahead(services):
    """A query stopped while messages were sent ahead of its next batch (a redeploy, an
    idle query stopped) must leave them as it found them. A DISCONNECT alone counts a
    delivery for the oldest of them on Artemis; after ``max-delivery-attempts`` (10 here)
    such stops it would go to the dead-letter address, read by no batch."""
    dest = queue_name("stops")
    send(services, dest, [f"s{i}" for i in range(20)])
    for _ in range(11):
        reader = _reader(services, dest, maxMessagesPerTrigger="5")
        try:
            rx = reader.rx  # subscribes: the broker sends ahead, in order
            wait_for(lambda: any(m.frame.endswith(b"\ns19") for m in list(rx._queue.values())),  # noqa: B023
                     "the last message sent ahead")
        finally:
            reader.stop()
    assert sorted(drain(services, dest)) == sorted(f"s{i}" for i in range(20))
