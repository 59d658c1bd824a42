"""The driver's STOMP connection: receives into memory, acknowledges by message ID.

Lives in the stream reader's long-lived driver process (Spark plans every batch on one
reader object in one Python process), which is why receiving happens there: only the process
that received a message can acknowledge it, and acknowledging must wait until Spark
committed the batch, long after any executor task ended. Frames arrive on the socket's
reader thread (``wire.py``); everything shared with it sits behind one lock.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from typing import NamedTuple

from spark_ext import failpoints
from spark_ext.connectors.jms import wire
from spark_ext.connectors.jms.config import JmsSourceConfig
from spark_ext.errors import ConnectorError
from spark_ext.guarantees import Guarantee
from spark_ext.retry import Deadline

log = logging.getLogger(__name__)


class Message(NamedTuple):
    """One received message, on the driver until its batch is planned: the IDs the driver
    needs and the frame as it came off the socket (the executor decodes the rest)."""

    message_id: str
    frame: bytes
    ack_id: str = ""


_ACKS_PER_WRITE = 1000
_BROKER_ID = b"\nmessage-id:"
_HEARTBEAT_MS = 10_000


def _ack_frame(ack_id: str) -> bytes:
    """One STOMP 1.2 ACK frame, byte for byte what stomp.py's encoder makes of it (a unit
    test compares), written out: through the encoder a 20,000-message batch's ACKs took 46 ms
    of the planning thread, this way 2 ms."""
    return f"ACK\nid:{wire.escape(ack_id)}\n\n\x00".encode()


_ARTEMIS_ID = re.compile(r"^\d+,(\d+)$")


def stable_message_id(header: str) -> str:
    """The part of a broker message-id that survives redelivery.

    Artemis's STOMP ``message-id`` is ``<consumer id>,<message id>``; the consumer part
    changes when the message is redelivered to a new subscription, the second does not.
    """
    m = _ARTEMIS_ID.match(header)
    return m.group(1) if m else header


class StompReceiver:
    """Subscribes with client-individual acknowledgement (auto for ``none``). Driver only."""

    def __init__(self, cfg: JmsSourceConfig) -> None:
        self.cfg = cfg
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._queue: dict[str, Message] = {}  # received, in arrival order, not yet handed out
        self._ack_ids: dict[str, list[str]] = {}  # message id -> ack ids of its unacked deliveries
        self._error: str | None = None  # the broker's ERROR frame
        self._fatal: str | None = None  # a message this source cannot take; never cleared
        self._connected = False
        self._conn: wire.StompSocket | None = None
        self._sub = "spark-ext-source"
        self._receipt = threading.Event()
        self._receipts: set[str] = set()  # receipt ids the broker sent on this connection
        self._asked = 0  # receipts asked for acknowledgements
        self._id_key = f"\n{cfg.id_header}:".encode()
        self.generation = 0  # connections made so far; ack ids are valid on their own only
        self._arrivals = 0  # messages received on this connection

    def probe(self) -> None:
        """Log in and out again: proves address and credentials without consuming anything."""
        self._login().close(wire.encode("DISCONNECT", {}))

    def _login(self) -> wire.StompSocket:
        cfg = self.cfg
        who = f"the STOMP broker at {cfg.host}:{cfg.port} as user {cfg.user!r}"
        try:
            conn = wire.StompSocket(cfg.host, cfg.port, cfg.connect_timeout_s)
        except OSError as e:
            raise ConnectorError(f"cannot connect to {who}: {type(e).__name__}: {e}. "
                                 "Check options host/port (or brokerUrl)") from None
        try:
            conn.login(cfg.user, cfg.password, _HEARTBEAT_MS, cfg.connect_timeout_s)
        except wire.WireError as e:
            conn.close()
            raise ConnectorError(f"the STOMP broker at {cfg.host}:{cfg.port} refused the login: {e}. "
                                 "Check options user and password") from None
        except OSError as e:
            conn.close()
            raise ConnectorError(f"cannot connect to {who}: {type(e).__name__}: {e}. "
                                 "Check options host/port (or brokerUrl), user and password") from None
        return conn

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._connected

    def connect(self) -> None:
        """Connect and subscribe; a clear error names the broker and what it said.

        After a lost connection every unacknowledged message comes again with new ack
        ids, so what the old connection received is forgotten here (the reader keeps the
        IDs of its batches: see ``JmsStreamReader._reconnected``).
        """
        cfg = self.cfg
        self.close()
        with self._lock:
            self._error = None
            self._queue.clear()
            self._ack_ids.clear()
            self._receipts.clear()
            self._arrivals = 0
            self.generation += 1
        conn = self._login()
        ack = "auto" if cfg.guarantee is Guarantee.NONE else "client-individual"
        # The receipt proves the broker accepted the subscription (or lets its ERROR land).
        self._receipt.clear()
        self._conn, self._connected = conn, True
        conn.start(self._received, self._control, self._closed)
        conn.send(wire.encode("SUBSCRIBE", {
            "destination": cfg.destination, "id": self._sub, "ack": ack,
            "consumer-window-size": str(cfg.window_bytes), "receipt": "spark-ext-subscribe"}))
        answered = self._receipt.wait(cfg.connect_timeout_s)
        if self._error:
            raise ConnectorError(f"the broker refused subscribing to {cfg.where}: {self._error}")
        if not answered or not self._connected:
            raise ConnectorError(f"the STOMP broker did not confirm the subscription to {cfg.where}")

    def _received(self, frames: list[wire.Frame]) -> None:
        """Receiving thread, per socket read: index the messages by ID."""
        by_id = self.cfg.id_header == "message-id"
        got: list[Message] = []
        for f in frames:
            raw = wire.header(f, self._id_key)
            if not raw:
                # Messages without an ID cannot be de-duplicated: stop instead of guessing.
                broker_id = wire.header(f, _BROKER_ID)
                self._fatal = (f"message {broker_id} on {self.cfg.where} lacks header {self.cfg.id_header!r} "
                               "(option messageIdHeader, case-sensitive); every message must carry it")
                return
            ack_id = wire.header(f, b"\nack:") or wire.header(f, _BROKER_ID) or ""
            got.append(Message(stable_message_id(raw) if by_id else raw, f[0], ack_id))
        with self._lock:
            for m in got:
                self._ack_ids.setdefault(m.message_id, []).append(m.ack_id)
                self._queue[m.message_id] = m
            self._arrivals += len(got)
            self._arrived.notify_all()

    def _control(self, frame: wire.Frame) -> None:
        cmd = wire.command(frame)
        if cmd == "ERROR":
            headers, body = wire.parse_message(frame[0])
            self._error = headers.get("message") or body.decode("utf-8", "replace")[:500]
            self._receipt.set()
        elif cmd == "RECEIPT":
            with self._lock:
                self._receipts.add(wire.header(frame, b"\nreceipt-id:") or "")
                self._arrived.notify_all()
            self._receipt.set()

    def _closed(self) -> None:
        self._connected = False
        with self._lock:
            self._arrived.notify_all()
        self._receipt.set()

    def check(self) -> None:
        if self._fatal:
            raise ConnectorError(self._fatal)
        if self._error:
            raise ConnectorError(f"the STOMP broker at {self.cfg.where} reported: {self._error}")

    def settle(self, want: int, quiet_s: float = 0.05, max_s: float = 0.5) -> None:
        """Wait until ``want`` messages are here, none came for ``quiet_s``, or ``max_s`` passed.

        Right after a subscription the broker pushes its backlog as fast as we read it; a
        batch planned in its first milliseconds would hold a few dozen messages and cost a
        whole trigger (measured: 25 to 519 messages, 0.55 s, in a 60,000-message run).
        """
        deadline = Deadline(max_s)
        with self._lock:
            while len(self._queue) < want and not deadline.expired:
                before = self._arrivals
                self._arrived.wait(min(quiet_s, max(deadline.remaining, 0.0)))
                if self._arrivals == before:
                    return

    def take(self, limit: int, exclude: set[str]) -> list[Message]:
        """Up to ``limit`` received messages in arrival order, skipping ids in ``exclude``."""
        self.check()
        out: list[Message] = []
        with self._lock:
            for mid in list(self._queue):
                if mid in exclude:
                    continue
                out.append(self._queue.pop(mid))
                if len(out) == limit:
                    break
        return out

    def wait_for(self, ids: list[str], timeout_s: float) -> tuple[dict[str, Message], list[str]]:
        """The messages with these ids, as the broker redelivers them; and the ids still missing."""
        want = set(ids)
        deadline = Deadline(timeout_s)
        with self._lock:
            while True:
                have = {i: self._queue[i] for i in want if i in self._queue}
                if len(have) == len(want) or deadline.expired:
                    for i in have:
                        del self._queue[i]
                    return have, sorted(want - set(have))
                self._arrived.wait(min(0.5, max(deadline.remaining, 0.01)))

    def drop(self, ids: set[str]) -> list[str]:
        """Forget received copies of ``ids`` (already committed); their ack ids, to acknowledge."""
        with self._lock:
            found = [i for i in ids if i in self._queue]
            for i in found:
                del self._queue[i]
            return found

    def ack(self, ids: list[str], batch: int | None = None) -> list[str]:
        """Acknowledge every delivery of each id on this connection. Returns the ids it
        could not acknowledge: not received on this connection (yet), or the connection
        failed on the way; their copies will come (again) and must be dropped then."""
        if not ids:
            return []
        conn = self._conn
        if conn is None or not self._connected:
            return list(ids)
        mid = len(ids) // 2
        unacked = self._send_acks(conn, ids[:mid])
        if not self._connected:  # the connection failed in the first half
            return unacked + list(ids[mid:])
        failpoints.hit("jms.mid_ack", batch)
        unacked += self._send_acks(conn, ids[mid:])
        if len(unacked) < len(ids) and not self._confirmed(conn):
            # The broker may never process ACK frames it has not confirmed (a hung link, a
            # crash right after): the caller keeps every ID as committed-but-unacknowledged,
            # and a restart learns them from the next offset.
            log.warning("the STOMP broker at %s did not confirm %d acknowledgement(s) within %.0f s; "
                        "their messages are dropped if they come again", self.cfg.where,
                        len(ids) - len(unacked), self.cfg.connect_timeout_s)
            return list(ids)
        return unacked

    def _confirmed(self, conn: wire.StompSocket) -> bool:
        """Ask for a receipt after the ACK frames and wait for it: the broker handles a
        connection's frames in order, so the receipt means every ACK before it was handled.
        An empty transaction carries it (a receipt needs a frame, and an ACK cannot repeat)."""
        with self._lock:
            self._asked += 1
            tx = rid = f"spark-ext-ack-{self.generation}-{self._asked}"
        try:
            conn.send(wire.encode("BEGIN", {"transaction": tx}) +
                      wire.encode("ABORT", {"transaction": tx, "receipt": rid}))
        except OSError:
            self._connected = False
            return False
        with self._lock:
            self._arrived.wait_for(lambda: rid in self._receipts or not self._connected,
                                   self.cfg.connect_timeout_s)
            got = rid in self._receipts
            self._receipts.discard(rid)
            return got

    def _send_acks(self, conn: wire.StompSocket, ids: Sequence[str]) -> list[str]:
        """ACK frames for ``ids``, ``_ACKS_PER_WRITE`` to a socket write. One stomp.py
        ``ack()`` per message (a frame object, its listeners, a write) held the GIL long
        enough to slow the receiving thread: 14% more messages/s end to end this way."""
        unacked: list[str] = []
        for lo in range(0, len(ids), _ACKS_PER_WRITE):
            chunk = ids[lo:lo + _ACKS_PER_WRITE]
            frames: list[bytes] = []
            with self._lock:
                for mid in chunk:
                    ack_ids = self._ack_ids.pop(mid, [])
                    if not ack_ids:
                        unacked.append(mid)
                    frames.extend(_ack_frame(a) for a in ack_ids)
            try:
                if frames:
                    conn.send(b"".join(frames))
            except OSError as e:
                log.warning("acknowledging stopped, the connection to %s failed: %s", self.cfg.where, e)
                self._connected = False
                missing = set(unacked)
                return unacked + [m for m in ids[lo:] if m not in missing]
        return unacked

    def close(self) -> None:
        if self._conn is not None:
            self._receipt.clear()
            goodbye = wire.encode("DISCONNECT", {"receipt": "spark-ext-bye"}) if self._connected else b""
            self._conn.close(goodbye, 2.0, self._receipt)
            self._conn = None
        self._connected = False
