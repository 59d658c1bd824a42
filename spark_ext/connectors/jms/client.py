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
import time
from collections.abc import Sequence
from typing import NamedTuple

from spark_ext import failpoints
from spark_ext.connectors.jms import wire
from spark_ext.connectors.jms.config import JmsSourceConfig
from spark_ext.errors import AuthenticationError, ConnectorError
from spark_ext.guarantees import Guarantee
from spark_ext.retry import Deadline
from spark_ext.secrets import reveal

log = logging.getLogger(__name__)


class Message(NamedTuple):
    """One received message, on the driver until its batch is planned: the IDs the driver
    needs and the frame as it came off the socket (the executor decodes the rest)."""

    message_id: str
    frame: bytes
    ack_id: str = ""


_ACKS_PER_WRITE = 1000
# Option consumerWindowSize=auto: the window before any message was measured, and its floor.
_FIRST_WINDOW = 64 * 1024
# Batches' worth of frame bytes in an auto window. The broker counts a message at more than
# its STOMP frame (measured on Artemis: about 1.4x for 300-byte bodies), and the window must
# hold the batch in flight plus the next one whole, or every batch comes out short.
_BATCHES_AHEAD = 3
_BROKER_ID = b"\nmessage-id:"
_HEARTBEAT_MS = 10_000


def _ack_frame(ack_id: str, receipt: str | None = None) -> bytes:
    """One STOMP 1.2 ACK frame, byte for byte what stomp.py's encoder makes of it (a unit
    test compares), written out: through the encoder a 20,000-message batch's ACKs took 46 ms
    of the planning thread, this way 2 ms."""
    asked = f"receipt:{wire.escape(receipt)}\n" if receipt is not None else ""
    return f"ACK\nid:{wire.escape(ack_id)}\n{asked}\n\x00".encode()


def _stamp(frame: bytes) -> int:
    """The broker's ``timestamp`` header of a MESSAGE frame (epoch ms; 0 when absent)."""
    value = wire.header((frame, frame.find(b"\n\n")), b"\ntimestamp:")
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


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
        self._bytes = 0  # their frames' bytes (what the broker's window counts)
        self._subs = 0  # subscriptions made so far; each has its own id
        self.window = cfg.window_bytes if cfg.window_bytes is not None else _FIRST_WINDOW
        self.lost: list[str] = []  # received, not handed out, when the last connection ended
        self._awaited: dict[str, float] = {}  # lost ids expected again -> since (monotonic)

    def probe(self) -> None:
        """Log in and out again: proves address and credentials without consuming anything."""
        self._login().close(wire.encode("DISCONNECT", {}))

    def _login(self) -> wire.StompSocket:
        cfg = self.cfg
        who = f"the STOMP broker at {cfg.host}:{cfg.port} as user {cfg.user!r}"
        password = reveal(cfg.password)  # before the socket: a missing file must not leave one open
        try:
            conn = wire.StompSocket(cfg.host, cfg.port, cfg.connect_timeout_s, cfg.tls)
        except OSError as e:
            raise ConnectorError(f"cannot connect to {who}: {type(e).__name__}: {e}. "
                                 "Check options host/port (or brokerUrl)") from None
        try:
            conn.login(cfg.user, password, _HEARTBEAT_MS, cfg.connect_timeout_s)
        except AuthenticationError:  # TLS refused after the handshake (a client certificate)
            conn.close()
            raise
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

    def closes(self, within_s: float) -> bool:
        """Whether the connection is closed, or closes within ``within_s``. A broker closes
        its connection right after an ERROR frame (its goodbye: shutting down, or a
        connection TTL that expired), and the ERROR can be read before the close is seen."""
        with self._lock:
            return self._arrived.wait_for(lambda: not self.connected, timeout=within_s)

    def connect(self) -> None:
        """Connect and subscribe; a clear error names the broker and what it said.

        After a lost connection every unacknowledged message comes again with new ack
        ids, so what the old connection received is forgotten here (the reader keeps the
        IDs of its batches: see ``JmsStreamReader._reconnected``).
        """
        self.close()
        with self._lock:
            self._error = None
            self.lost = list(self._queue)
            self._queue.clear()
            self._ack_ids.clear()
            self._receipts.clear()
            self._arrivals = 0
            self.generation += 1
        conn = self._login()
        self._conn, self._connected = conn, True
        conn.start(self._received, self._control, self._closed)
        self._subscribe(conn)

    def _subscribe(self, conn: wire.StompSocket) -> None:
        """SUBSCRIBE with the current window under a new id, and wait for the broker's receipt
        (it proves the broker accepted the subscription, or lets its ERROR land)."""
        cfg = self.cfg
        ack = "auto" if cfg.guarantee is Guarantee.NONE else "client-individual"
        self._subs += 1
        self._sub = f"spark-ext-source-{self._subs}"
        rid = f"spark-ext-subscribe-{self.generation}-{self._subs}"
        self._send(conn, wire.encode("SUBSCRIBE", {
            "destination": cfg.destination, "id": self._sub, "ack": ack,
            "consumer-window-size": str(self.window), "receipt": rid}))
        answered = self._await_receipt(rid)
        if self._error:
            raise ConnectorError(f"the broker refused subscribing to {cfg.where}: {self._error}")
        if not answered or not self._connected:
            raise ConnectorError(f"the STOMP broker did not confirm the subscription to {cfg.where}")

    def _send(self, conn: wire.StompSocket, data: bytes) -> None:
        try:
            conn.send(data)
        except OSError as e:
            self._connected = False
            raise ConnectorError(f"the connection to {self.cfg.where} failed: {e}") from None

    def _await_receipt(self, rid: str) -> bool:
        """Wait up to ``connectTimeoutMs`` for the receipt ``rid``; whether it came."""
        with self._lock:
            self._arrived.wait_for(lambda: rid in self._receipts or not self._connected or bool(self._error),
                                   self.cfg.connect_timeout_s)
            got = rid in self._receipts
            self._receipts.discard(rid)
            return got

    def fit_window(self, batch: int) -> bool:
        """Option consumerWindowSize=auto, between batches (nothing received is in a batch
        not yet acknowledged): subscribe again with a window that holds two batches of
        ``batch`` messages (``_BATCHES_AHEAD`` times their frames, at the mean size measured
        so far) when the window in use is off by more than half or twice. Unsubscribing
        returns what was sent ahead to the queue without counting a delivery (only a lost
        connection counts one); it comes again on the new subscription. Whether it
        subscribed again."""
        if self.cfg.window_bytes is not None or not self.cfg.tracks_ids or not self._arrivals:
            return False  # none: what was received is already acknowledged, and would be lost
        mean = self._bytes // self._arrivals
        want = -1 if batch >= 1 << 30 else max(_FIRST_WINDOW, _BATCHES_AHEAD * batch * mean)
        if want == self.window or (want > 0 and self.window > 0 and want / 2 <= self.window <= want * 2):
            return False
        conn = self._conn
        if conn is None or not self._connected:
            return False
        self._asked += 1
        rid = f"spark-ext-unsubscribe-{self.generation}-{self._asked}"
        self._send(conn, wire.encode("UNSUBSCRIBE", {"id": self._sub, "receipt": rid}))
        if not self._await_receipt(rid):
            self.check()
            raise ConnectorError(f"the STOMP broker at {self.cfg.where} did not confirm an UNSUBSCRIBE")
        with self._lock:  # the broker handled the UNSUBSCRIBE: nothing more comes on the old id
            self._queue.clear()
            self._ack_ids.clear()
            self._arrivals = self._bytes = 0
        log.info("subscribing to %s again with a consumer window of %d bytes (was %d)", self.cfg.where,
                 want, self.window)
        self.window = want
        self._subscribe(conn)
        return True

    def await_ids(self, ids: Sequence[str]) -> None:
        """Expect these ids again (messages a lost connection had received and not handed out)."""
        now = time.monotonic()
        with self._lock:
            for i in ids:
                if i not in self._queue:
                    self._awaited.setdefault(i, now)

    def overdue(self, timeout_s: float) -> list[str]:
        """Awaited ids not received again within ``timeout_s``; no longer awaited."""
        horizon = time.monotonic() - timeout_s
        with self._lock:
            late = [i for i, since in self._awaited.items() if since <= horizon]
            for i in late:
                del self._awaited[i]
            return late

    def _received(self, frames: list[wire.Frame]) -> None:
        """Receiving thread, per socket read: index the messages by ID."""
        by_id = self.cfg.id_header == "message-id"
        sub = self._sub
        got: list[Message] = []
        size = 0
        for f in frames:
            if wire.header(f, b"\nsubscription:") != sub:
                # Sent on a subscription ended by ``fit_window`` while it ended: the broker
                # takes it back with that subscription, and it comes again on the new one.
                continue
            size += len(f[0])
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
            if self._awaited:
                for m in got:
                    self._awaited.pop(m.message_id, None)
            self._arrivals += len(got)
            self._bytes += size
            self._arrived.notify_all()

    def _control(self, frame: wire.Frame) -> None:
        cmd = wire.command(frame)
        if cmd == "ERROR":
            headers, body = wire.parse_message(frame[0])
            self._error = headers.get("message") or body.decode("utf-8", "replace")[:500]
            with self._lock:
                self._arrived.notify_all()
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

    def await_arrival(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a first message on this subscription; whether one came."""
        deadline = Deadline(timeout_s)
        with self._lock:
            while not self._arrivals and self._connected and not deadline.expired:
                self._arrived.wait(max(deadline.remaining, 0.0))
            self.check()
            return self._arrivals > 0

    @property
    def held(self) -> int:
        """Messages received and not yet handed out."""
        with self._lock:
            return len(self._queue)

    def take(self, limit: int, exclude: set[str], stamped_by: int | None = None) -> list[Message]:
        """Up to ``limit`` received messages in arrival order, skipping ids in ``exclude``
        and, with ``stamped_by``, messages the broker stamped later (epoch ms)."""
        self.check()
        out: list[Message] = []
        with self._lock:
            for mid in list(self._queue):
                if mid in exclude:
                    continue
                if stamped_by is not None and _stamp(self._queue[mid].frame) > stamped_by:
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
        """Acknowledge every delivery of each id on this connection, and wait until the
        broker has stored the acknowledgements. Returns the ids it could not confirm so:
        those not received on this connection (yet), or every id when the connection failed
        or the broker did not confirm in time. Their copies will come (again) and must be
        dropped then."""
        if not ids:
            return []
        conn = self._conn
        if conn is None or not self._connected:
            return list(ids)
        with self._lock:
            unacked = [i for i in ids if i not in self._ack_ids]
            acks = [a for i in ids for a in self._ack_ids.pop(i, ())]
            self._asked += 1
            rid = f"spark-ext-ack-{self.generation}-{self._asked}"
        if not acks:
            return unacked
        half = len(acks) // 2
        sent = self._send_acks(conn, acks[:half])
        if sent:
            failpoints.hit("jms.mid_ack", batch)
            sent = self._send_acks(conn, acks[half:], receipt=rid)
        if not sent or not self._await_receipt(rid):
            # The broker may never store ACK frames it has not confirmed (a hung link, a
            # crash right after): the caller keeps every ID as committed-but-unacknowledged,
            # and a restart learns them from the next offset.
            log.warning("the acknowledgement of %d message(s) is not confirmed (no receipt from the STOMP "
                        "broker at %s within %.0f s, or the connection failed); they are dropped if they "
                        "come again", len(ids), self.cfg.where, self.cfg.connect_timeout_s)
            return list(ids)
        return unacked

    def _send_acks(self, conn: wire.StompSocket, ack_ids: Sequence[str], receipt: str | None = None) -> bool:
        """ACK frames for ``ack_ids``, ``_ACKS_PER_WRITE`` to a socket write, the last one
        asking for ``receipt``; whether the connection took them all.

        The receipt is what proves the acknowledgements stored: Artemis answers a frame's
        receipt once the broker session that handled it has written its operations to the
        journal, and every ACK of a connection outside a transaction goes to one session,
        in order. A receipt on any other frame does not do: a transaction's frames (BEGIN,
        ABORT) have a session of their own, whose receipt came back while the ACKs were
        still in the journal's buffer, and a broker killed then had lost them all.

        One stomp.py ``ack()`` per message (a frame object, its listeners, a write) held the
        GIL long enough to slow the receiving thread: 14% more messages/s end to end this way."""
        for lo in range(0, len(ack_ids), _ACKS_PER_WRITE):
            frames = [_ack_frame(a) for a in ack_ids[lo:lo + _ACKS_PER_WRITE]]
            if receipt is not None and lo + _ACKS_PER_WRITE >= len(ack_ids):
                frames[-1] = _ack_frame(ack_ids[-1], receipt)
            try:
                conn.send(b"".join(frames))
            except OSError as e:
                log.warning("acknowledging stopped, the connection to %s failed: %s", self.cfg.where, e)
                self._connected = False
                return False
        return True

    def close(self) -> None:
        if self._conn is not None:
            self._receipt.clear()
            # UNSUBSCRIBE first: a DISCONNECT alone counts a delivery (towards the dead-letter
            # address) for the oldest message sent ahead on Artemis; ending the subscription
            # hands everything back uncounted.
            goodbye = (wire.encode("UNSUBSCRIBE", {"id": self._sub}) +
                       wire.encode("DISCONNECT", {"receipt": "spark-ext-bye"})) if self._connected else b""
            self._conn.close(goodbye, 2.0, self._receipt)
            self._conn = None
        self._connected = False
