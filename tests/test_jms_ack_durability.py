"""The queue source's acknowledgements are on the broker's disk when ``ack`` says they are
confirmed. A private Artemis whose journal flushes only every 2 s (``journalBufferTimeout``)
makes the window between "handled" and "written" wide; the broker is killed the moment the
acknowledgement is confirmed, and what comes back after its restart was acknowledged in
vain. A confirmation that is only "handled" (the receipt of a frame on another broker
session, which waits on nothing of the acknowledgements) lets every message come back."""

from __future__ import annotations

import pytest

from spark_ext.connectors.jms.client import StompReceiver
from spark_ext.connectors.jms.config import JmsSourceConfig
from spark_ext.connectors.jms.session import BrokerSession
from spark_ext.options import Options
from tests.support.artemis_instance import PrivateArtemis
from tests.support.stomp_util import drain, queue_name, send
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.services]

_SLOW_JOURNAL = {"journalBufferTimeout_NIO": "2000000000", "journalBufferTimeout_AIO": "2000000000"}


def test_a_confirmed_acknowledgement_survives_a_broker_killed_right_after(tmp_path):
    broker = PrivateArtemis(tmp_path, _SLOW_JOURNAL)
    dest = queue_name("durable-ack")
    try:
        broker.start()
        session = BrokerSession("127.0.0.1", broker.port, broker.services.stomp_user,
                                broker.services.stomp_password, 30)
        try:  # the slow journal is what opens the window: without it this test proves nothing
            assert session.attribute("broker", "JournalBufferTimeout") == 2_000_000_000
        finally:
            session.close()
        send(broker.services, dest, [f"d{i}" for i in range(300)])
        cfg = JmsSourceConfig.parse(Options({
            "host": "127.0.0.1", "port": str(broker.port), "user": broker.services.stomp_user,
            "password": broker.services.stomp_password, "destination": dest, "connectTimeoutMs": "10000",
            "consumerWindowSize": "-1"},
            "test"))
        rx = StompReceiver(cfg)
        rx.connect()
        try:
            wait_for(lambda: rx.held >= 300, "the 300 messages to arrive", 60)
            ids = [m.message_id for m in rx.take(300, set())]
            assert rx.ack(ids) == [], "the broker did not confirm the acknowledgements"
        finally:
            broker.kill()  # at once: the journal's buffer still holds what it was not asked to write
            rx.close()
        broker.start()
        back = drain(broker.services, dest)
        assert back == [], f"{len(back)} of 300 confirmed acknowledgements were lost with the broker"
    finally:
        broker.kill()
