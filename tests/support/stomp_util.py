"""Helpers for tests against the real local ActiveMQ Artemis (STOMP)."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import stomp

from services import queue_drain


def queue_name(prefix: str) -> str:
    return f"/queue/{prefix}-{uuid.uuid4().hex[:10]}"


def _conn(services) -> stomp.Connection12:
    c = stomp.Connection12([(services.stomp_host, services.stomp_port)], heartbeats=(0, 0))
    c.connect(services.stomp_user, services.stomp_password, wait=True)
    return c


def _disconnect(c: stomp.Connection12) -> None:
    """DISCONNECT and wait for its receipt: every frame the broker sent before it has been
    handed to the listeners. stomp.py waits only when given a receipt id."""
    c.disconnect(receipt=f"bye-{uuid.uuid4().hex}")


def send(services, dest: str, bodies: list[str] | list[bytes], headers: dict[str, str] | None = None,
         each: list[dict[str, str]] | None = None) -> None:
    """``headers`` on every message; ``each``: one more dict of headers per message."""
    c = _conn(services)
    last = f"sent-{uuid.uuid4().hex}"
    stored = threading.Event()

    class L(stomp.ConnectionListener):
        def on_receipt(self, frame: stomp.utils.Frame) -> None:
            if frame.headers.get("receipt-id") == last:
                stored.set()

    c.set_listener("send", L())
    try:
        for i, b in enumerate(bodies):
            c.send(dest, b, headers={"persistent": "true", **(headers or {}), **(each[i] if each else {})},
                   **({"receipt": last} if i == len(bodies) - 1 else {}))
        # The DISCONNECT's receipt can come before the broker has queued the last messages,
        # and a message sent later (a drain's sentinel) can then be queued ahead of them
        # (seen in 8 of 150 drains). The last SEND's receipt comes once all are stored.
        assert not bodies or stored.wait(30), f"no receipt for the messages sent to {dest} in 30 s"
    finally:
        _disconnect(c)


def drain(services, dest: str, timeout: float = 30.0) -> list[str]:
    """Everything left on the queue, up to a sentinel sent now (FIFO proves nothing else is left)."""
    return [body for _, body in drain_messages(services, dest, timeout)]


def drain_messages(services, dest: str, timeout: float = 30.0,
                   on_sentinel: Callable[[], None] | None = None,
                   ) -> list[tuple[dict[str, str], str]]:
    """``drain``, each message as (headers, body); ``services.queue_drain.drain`` says how."""
    return queue_drain.drain(services.stomp_host, services.stomp_port, services.stomp_user,
                             services.stomp_password, dest, timeout, on_sentinel)


@dataclass(frozen=True)
class Taken:
    """What ``take_all`` took (message bodies) and how many of the messages it was told
    of the broker holds as delivered to no consumer (``held``)."""

    bodies: list[str]
    held: int = 0


def take_all(services, dest: str, n: int, timeout: float = 30.0) -> Taken:
    """Drain until none of the ``n`` messages sent to ``dest`` is left for a consumer:
    every one taken, or the rest held by the broker as delivered to no consumer.

    The broker hands a dead connection's messages back in steps, and one can come back
    after a drain's sentinel (seen: the oldest). Artemis 2.40 can also keep one of them
    (seen: the oldest) counted as delivering with no consumer left on the queue, for
    minutes (seen: over four), where no consumer can take it. Such messages are ``held``:
    accepted only when the broker's own counts show exactly that many messages on the
    queue, all of them delivering, and no consumer, on two readings a drain apart.
    """
    from tests.support.waiting import wait_for

    taken: list[str] = []
    still: list[int] = []  # the broker's count of held messages at the last reading

    def none_left() -> bool:
        got = drain(services, dest)
        taken.extend(got)
        left = n - len(taken)
        if left <= 0:
            return True
        if got:
            still.clear()
            return False
        consumers, messages, delivering = _queue_stat(dest)
        if consumers or not messages == delivering == left:
            still.clear()
            return False
        if still == [left]:
            return True
        still[:] = [left]
        return False

    wait_for(none_left, f"another consumer to take all {n} messages", timeout)
    return Taken(taken, max(0, n - len(taken)))


def queue_counts(dest: str) -> tuple[int, int]:
    """(messages on the queue, of which delivered and not yet acknowledged), from the
    broker's own management (Artemis CLI ``queue stat``)."""
    stat = _queue_stat(dest)
    return stat[1], stat[2]


def consumer_count(dest: str) -> int:
    """Consumers subscribed to the queue now, from the broker's own management."""
    return _queue_stat(dest)[0]


class Holder:
    """Another consumer that receives every message on ``dest`` (no window) and acknowledges
    none, until ``release``: its disconnect hands them back to the queue, as a dead
    driver's connection does when the broker notices it is gone."""

    def __init__(self, services, dest: str) -> None:
        self.held = 0
        self._lock = threading.Lock()
        holder = self

        class L(stomp.ConnectionListener):
            def on_message(self, frame: stomp.utils.Frame) -> None:
                with holder._lock:
                    holder.held += 1

        self._c = _conn(services)
        self._c.set_listener("holder", L())
        self._c.subscribe(dest, id="holder", ack="client-individual", headers={"consumer-window-size": "-1"})

    def count(self) -> int:
        with self._lock:
            return self.held

    def release(self) -> None:
        _disconnect(self._c)


def _queue_stat(dest: str) -> tuple[int, int, int]:
    """(consumers, messages, delivering) of a queue, from the Artemis CLI ``queue stat``."""
    from services.common import ARTEMIS_CORE_PORT, HOST, LOCAL, STOMP_PASSWORD, STOMP_USER

    name = dest.removeprefix("/queue/")
    out = subprocess.run(
        [str(LOCAL / "artemis" / "broker" / "bin" / "artemis"), "queue", "stat", "--user", STOMP_USER,
         "--password", STOMP_PASSWORD, "--url", f"tcp://{HOST}:{ARTEMIS_CORE_PORT}", "--queueName", name],
        capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == name:
            return int(cells[2]), int(cells[3]), int(cells[5])
    raise AssertionError(f"queue {name} not in `artemis queue stat`:\n{out}")
