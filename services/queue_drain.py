"""Reading everything a STOMP queue holds, for tests and benches: consume it up to a
sentinel sent now. A queue is FIFO for what it holds: a message sent before the sentinel is
ahead of it once its SEND's receipt came (before that, Artemis can queue a later message
first, as after a DISCONNECT's receipt alone).

Every message is acknowledged with its own ACK (``client-individual``), never ``auto``:
Artemis acknowledges an ``auto`` message on its delivery thread after writing it out, apart
from the connection's frames, so a DISCONNECT can overtake it and the message goes back to
the queue, where the next reader finds it (a drain's own sentinel, in CI). The broker takes
a connection's frames in order: an ACK sent before the DISCONNECT is taken before it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

SENTINEL = "sentinel-"  # no test or bench message starts so


def drain(host: str, port: int, user: str, password: str, dest: str, timeout_s: float = 30.0,
          on_sentinel: Callable[[], None] | None = None) -> list[tuple[dict[str, str], str]]:
    """Every message on ``dest`` before a sentinel sent now, as (headers, body), consumed.

    A sentinel of an earlier drain is consumed and not returned. A message delivered after
    the sentinel (a dead connection's, handed back late) is not acknowledged: the drain
    unsubscribes, which puts it back on the queue before the DISCONNECT's receipt, for the
    next reader. ``on_sentinel``, if given, runs on the receiving thread when the sentinel
    has come, before the drain unsubscribes. Raises ``TimeoutError`` when the sentinel does
    not come back within ``timeout_s``.
    """
    import stomp

    sentinel = f"{SENTINEL}{uuid.uuid4().hex}"
    got: list[tuple[dict[str, str], str]] = []
    done = threading.Event()
    conn = stomp.Connection12([(host, port)], heartbeats=(0, 0))

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            if done.is_set():
                return
            # ACK and UNSUBSCRIBE are sent on this (the receiving) thread before ``done``
            # is set: they precede the DISCONNECT, which waits for it.
            conn.ack(frame.headers["ack"])
            if frame.body == sentinel:
                if on_sentinel is not None:
                    on_sentinel()
                conn.unsubscribe("drain")
                done.set()
            elif not frame.body.startswith(SENTINEL):
                got.append((dict(frame.headers), frame.body))

    conn.set_listener("drain", Listener())
    conn.connect(user, password, wait=True)
    try:
        conn.send(dest, sentinel, headers={"persistent": "true"})
        # No window, as with ``auto``: a large queue comes without a wait for each ACK.
        conn.subscribe(dest, id="drain", ack="client-individual", headers={"consumer-window-size": "-1"})
        if not done.wait(timeout_s):
            raise TimeoutError(f"sentinel not received from {dest} in {timeout_s:.0f} s")
    finally:
        # With a receipt id stomp.py waits for it: the broker took every frame before it.
        conn.disconnect(receipt=f"bye-{uuid.uuid4().hex}")
    return got
