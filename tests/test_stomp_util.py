"""The queue tests' own drain helper, against the real local Artemis: a message the broker
delivers after the drain's sentinel (a dead connection's message handed back late) is in
what the drain returns. The drain acknowledges on delivery, so a message it dropped would
be gone from the broker as well, and a test waiting for it would wait forever."""

from __future__ import annotations

import threading

import pytest

from tests.support.stomp_util import drain_messages, queue_counts, queue_name, send
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.services]


def test_a_message_delivered_after_the_sentinel_is_returned_not_dropped(services):
    dest = queue_name("drain-late")
    send(services, dest, ["early"])
    returned = threading.Event()
    late_delivered = threading.Event()

    def on_sentinel(done: threading.Event) -> None:
        # Runs on the drain's receiving thread while the drain is still subscribed, so the
        # late message's frame is read only after this returns: once the drain has
        # returned, or after 2 s if the drain waits for its connection to close, as it must.
        send(services, dest, ["late"])
        wait_for(lambda: queue_counts(dest) == (0, 0), "the late message delivered and acknowledged", 30)
        late_delivered.set()
        done.set()
        returned.wait(2.0)

    got = [body for _, body in drain_messages(services, dest, on_sentinel=on_sentinel)]
    returned.set()
    assert got == ["early", "late"]
    assert late_delivered.is_set()


def test_an_earlier_drains_sentinel_handed_back_is_not_a_message(services):
    """Artemis can hand a drain's own sentinel back after that drain disconnected (its
    auto-acknowledgement not yet taken): the next drain must not count it."""
    dest = queue_name("drain-stale")
    send(services, dest, ["sentinel-0123456789abcdef0123456789abcdef", "kept"])
    assert [body for _, body in drain_messages(services, dest)] == ["kept"]
