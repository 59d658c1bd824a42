"""The driver's STOMP connection: receives into memory, acknowledges by message ID.

Lives in the stream reader's long-lived driver process (Spark plans every batch on one
reader object in one Python process), which is why receiving happens there: only the process
that received a message can acknowledge it, and acknowledging must wait until Spark
committed the batch, long after any executor task ended. stomp.py delivers frames on
its own receiver thread; everything shared with it sits behind one lock.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from typing import NamedTuple

import stomp
from stomp.exception import ConnectFailedException, StompException

from connectors.jms.config import JmsSourceConfig
from spark_ext import failpoints
from spark_ext.errors import ConnectorError
from spark_ext.guarantees import Guarantee
from spark_ext.retry import Deadline

log = logging.getLogger(__name__)


class Message(NamedTuple):
    """One received message, on the driver until its batch is planned. A named tuple: one
    is built per message on the receiving thread, and a frozen dataclass costs more."""

    message_id: str
    body: bytes
    headers: dict[str, str]
    destination: str
    timestamp_ms: int
    redelivered: bool
    ack_id: str = ""


_ACKS_PER_WRITE = 1000


def _ack_frame(ack_id: str) -> bytes:
    """One STOMP 1.2 ACK frame (what ``Connection12.ack`` sends), encoded by stomp.py."""
    frame = stomp.utils.Frame(stomp.constants.CMD_ACK, {stomp.constants.HDR_ID: ack_id})
    return b"".join(stomp.utils.encode(x) for x in stomp.utils.convert_frame(frame))


_ARTEMIS_ID = re.compile(r"^\d+,(\d+)$")


def stable_message_id(header: str) -> str:
    """The part of a broker message-id that survives redelivery.

    Artemis's STOMP ``message-id`` is ``<consumer id>,<message id>``; the consumer part
    changes when the message is redelivered to a new subscription, the second does not.
    """
    m = _ARTEMIS_ID.match(header)
    return m.group(1) if m else header


class _Listener(stomp.ConnectionListener):
    def __init__(self, receiver: StompReceiver) -> None:
        self.r = receiver

    def on_message(self, frame: stomp.utils.Frame) -> None:
        self.r._received(frame)

    def on_error(self, frame: stomp.utils.Frame) -> None:
        body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else str(frame.body)
        self.r._error = frame.headers.get("message") or body[:500]
        self.r._receipt.set()

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        self.r._receipt.set()

    def on_disconnected(self) -> None:
        self.r._connected = False


class StompReceiver:
    """Subscribes with client-individual acknowledgement (auto for ``none``). Driver only."""

    def __init__(self, cfg: JmsSourceConfig) -> None:
        self.cfg = cfg
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._queue: dict[str, Message] = {}  # received, in arrival order, not yet handed out
        self._ack_ids: dict[str, list[str]] = {}  # message id -> ack ids of its unacked deliveries
        self._error: str | None = None
        self._connected = False
        self._conn: stomp.Connection12 | None = None
        self._sub = "spark-ext-source"
        self._receipt = threading.Event()
        self.generation = 0  # connections made so far; ack ids are valid on their own only

    def probe(self) -> None:
        """Log in and out again: proves address and credentials without consuming anything."""
        conn = self._login()
        conn.disconnect()

    def _login(self) -> stomp.Connection12:
        cfg = self.cfg
        # auto_decode=False: stomp.py would decode every body as UTF-8 with replacement,
        # corrupting binary bodies (and costing a decode and our re-encode per message).
        conn = stomp.Connection12([(cfg.host, cfg.port)], heartbeats=(10_000, 10_000),
                                  reconnect_attempts_max=1, timeout=cfg.connect_timeout_s,
                                  auto_decode=False)
        conn.set_listener("spark-ext", _Listener(self))
        try:
            conn.connect(cfg.user, cfg.password, wait=True)
        except (ConnectFailedException, StompException, OSError) as e:
            why = self._error or f"{type(e).__name__}: {e}".rstrip(": ")
            raise ConnectorError(
                f"cannot connect to the STOMP broker at {cfg.host}:{cfg.port} as user {cfg.user!r}: "
                f"{why}. Check options host/port (or brokerUrl), user and password"
            ) from None
        if self._error:
            raise ConnectorError(
                f"the STOMP broker at {cfg.host}:{cfg.port} refused the login: {self._error}"
            )
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
            self.generation += 1
        conn = self._login()
        ack = "auto" if cfg.guarantee is Guarantee.NONE else "client-individual"
        # The receipt proves the broker accepted the subscription (or lets its ERROR land).
        headers = {"consumer-window-size": str(cfg.window_bytes), "receipt": "spark-ext-subscribe"}
        self._receipt.clear()
        conn.subscribe(cfg.destination, id=self._sub, ack=ack, headers=headers)
        self._conn, self._connected = conn, True
        if not self._receipt.wait(cfg.connect_timeout_s) and not self._error:
            raise ConnectorError(f"the STOMP broker did not confirm the subscription to {cfg.where}")
        if self._error:
            raise ConnectorError(f"the broker refused subscribing to {cfg.where}: {self._error}")

    def _received(self, frame: stomp.utils.Frame) -> None:
        h = frame.headers
        mid = h.get(self.cfg.id_header) or ""
        if self.cfg.id_header == "message-id":
            mid = stable_message_id(mid)
        if not mid:
            # Messages without an ID cannot be de-duplicated: stop instead of guessing.
            self._error = (f"message {h.get('message-id')} on {self.cfg.where} has no header "
                           f"{self.cfg.id_header!r} (option messageIdHeader); every message must carry it")
            return
        msg = Message(
            message_id=mid,
            body=frame.body,  # bytes: the connection does not decode
            headers={k: v for k, v in h.items() if k not in ("ack", "subscription")},
            destination=h.get("destination", self.cfg.destination),
            timestamp_ms=int(h.get("timestamp") or 0),
            redelivered=str(h.get("redelivered", "false")).lower() == "true",
            ack_id=h.get("ack", h.get("message-id", "")),
        )
        with self._lock:
            self._ack_ids.setdefault(mid, []).append(msg.ack_id)
            self._queue[mid] = msg
            self._arrived.notify_all()

    def check(self) -> None:
        if self._error:
            raise ConnectorError(f"the STOMP broker at {self.cfg.where} reported: {self._error}")

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
        return unacked + self._send_acks(conn, ids[mid:])

    def _send_acks(self, conn: stomp.Connection12, ids: Sequence[str]) -> list[str]:
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
                    conn.transport.send(b"".join(frames))
            except (StompException, OSError) as e:
                log.warning("acknowledging stopped, the connection to %s failed: %s", self.cfg.where, e)
                self._connected = False
                missing = set(unacked)
                return unacked + [m for m in ids[lo:] if m not in missing]
        return unacked

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.disconnect()
            except (StompException, OSError):
                pass  # already gone: nothing to tell the broker
            self._conn = None
        self._connected = False
