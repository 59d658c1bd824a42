"""The queue tests' own drain helper (``services/queue_drain.py``), against the real local
Artemis. It acknowledges each message with an ACK frame, which the broker takes before the
drain's DISCONNECT, and never a message delivered after its sentinel (a dead connection's
message handed back late): that one stays on the queue for the next reader."""

from __future__ import annotations

import pytest

from tests.support.stomp_util import drain, drain_messages, queue_counts, queue_name, send
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.services]


def test_a_message_delivered_after_the_sentinel_is_left_for_the_next_reader(services):
    dest = queue_name("drain-late")
    send(services, dest, ["early"])

    def on_sentinel() -> None:
        # Runs on the drain's receiving thread while the drain is still subscribed.
        send(services, dest, ["late"])
        wait_for(lambda: queue_counts(dest) == (1, 1), "the late message delivered to the drain", 30)

    assert [body for _, body in drain_messages(services, dest, on_sentinel=on_sentinel)] == ["early"]
    assert drain(services, dest) == ["late"]
    assert drain(services, dest) == []


def test_an_earlier_drains_sentinel_handed_back_is_not_a_message(services):
    """A sentinel left on the queue (as an ``auto`` acknowledgement overtaken by its
    connection's DISCONNECT leaves one) is consumed and not counted."""
    dest = queue_name("drain-stale")
    send(services, dest, ["sentinel-0123456789abcdef0123456789abcdef", "kept"])
    assert [body for _, body in drain_messages(services, dest)] == ["kept"]
    assert drain(services, dest) == []
