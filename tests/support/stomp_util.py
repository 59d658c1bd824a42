"""Helpers for tests against the real local ActiveMQ Artemis (STOMP)."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Callable

import stomp


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
    try:
        for i, b in enumerate(bodies):
            c.send(dest, b, headers={"persistent": "true", **(headers or {}), **(each[i] if each else {})})
    finally:
        _disconnect(c)  # the broker has every frame before it


SENTINEL = "sentinel-"  # no test message starts so


def drain(services, dest: str, timeout: float = 30.0) -> list[str]:
    """Everything left on the queue, up to a sentinel sent now (FIFO proves nothing else is left)."""
    return [body for _, body in drain_messages(services, dest, timeout)]


def drain_messages(services, dest: str, timeout: float = 30.0,
                   on_sentinel: Callable[[threading.Event], None] | None = None,
                   ) -> list[tuple[dict[str, str], str]]:
    """``drain``, each message as (headers, body). ``on_sentinel``, if given, runs on the
    receiving thread when the sentinel arrives, in place of setting the event that ends the
    wait: it must set it (a test of this helper delivers a message around it)."""
    sentinel = f"{SENTINEL}{uuid.uuid4().hex}"
    send(services, dest, [sentinel])
    got: list[tuple[dict[str, str], str]] = []
    done = threading.Event()

    class L(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            if frame.body == sentinel:
                (on_sentinel or threading.Event.set)(done)
            elif not frame.body.startswith(SENTINEL):
                got.append((dict(frame.headers), frame.body))
            # else an earlier drain's sentinel, handed back: the broker had not yet taken
            # its auto-acknowledgement when that drain disconnected (seen once in 20 runs of a
            # test that drains one queue five times).

    c = _conn(services)
    c.set_listener("drain", L())
    c.subscribe(dest, id="drain", ack="auto")
    try:
        assert done.wait(timeout), f"sentinel not received from {dest} in {timeout} s"
    finally:
        # Messages handed back late (a dead connection's) can follow the sentinel: the
        # broker acknowledges them on delivery, so they must be read before returning.
        _disconnect(c)
    return got


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
