"""The queue sink's STOMP connection: sends, transactions and broker management calls.

One ``BrokerSession`` per task attempt (the writers) or per commit (the committer). Frames
go out as bytes (``wire.encode`` or the writers' own SEND encoding); the socket's reader
thread (``wire.StompSocket``) hands back receipts, ERROR frames and management replies.
Artemis answers a management request sent to ``activemq.management`` with a message on
the request's ``reply-to``; ours is a ``/temp-queue/`` the broker deletes when the
connection ends, so a killed process leaves nothing behind.

An ERROR frame ends a STOMP connection: after one, every call raises ``SessionError``
and the caller opens a new session.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from spark_ext.connectors.jms import wire
from spark_ext.connectors.jms.tls import StompTls
from spark_ext.errors import AuthenticationError, ConnectorError
from spark_ext.retry import Backoff, Deadline, retry

MANAGEMENT = "activemq.management"
_HEARTBEAT_MS = 10_000


class SessionError(ConnectorError):
    """The broker answered with ERROR, closed the connection, or did not answer in time."""


class BrokerUnavailableError(SessionError):
    """The broker did not take the connection or did not answer the login (down, restarting,
    frozen): worth waiting for, unlike a refused login."""


class ManagementError(ConnectorError):
    """A management operation failed on the broker (the broker's reason in the message)."""


class ManagementRefusedError(ManagementError):
    """The broker refused the management call: the user lacks the ``manage`` permission."""


class QueueMissingError(ManagementError):
    """The broker has no queue (resource) of that name (AMQ229067)."""


class BrokerSession:
    """A logged-in STOMP 1.2 connection for writing and managing. Not thread-safe."""

    def __init__(self, host: str, port: int, user: str | None, password: str | None,
                 timeout_s: float, tls: StompTls | None = None) -> None:
        self.where = f"the STOMP broker at {host}:{port}"
        self.timeout_s = timeout_s
        try:
            self._sock = wire.StompSocket(host, port, timeout_s, tls)
        except OSError as e:
            raise BrokerUnavailableError(f"cannot connect to {self.where}: {type(e).__name__}: {e}. Check "
                                         "options host/port (or brokerUrl)") from None
        try:
            self._sock.login(user, password, _HEARTBEAT_MS, timeout_s)
        except AuthenticationError:  # TLS refused after the handshake (a client certificate)
            self._sock.close()
            raise
        except wire.WireError as e:
            self._sock.close()
            if str(e).startswith(("no answer", "the broker closed")):
                raise BrokerUnavailableError(f"{self.where} did not answer the login: {e}") from None
            raise ConnectorError(f"{self.where} refused the login as user {user!r}: {e}. Check options user "
                                 "and password") from None
        except OSError as e:
            self._sock.close()
            raise BrokerUnavailableError(f"cannot connect to {self.where}: {type(e).__name__}: {e}") from None
        self._cond = threading.Condition()
        self._receipts: set[str] = set()
        self._replies: dict[str, tuple[dict[str, str], bytes]] = {}
        self._error: str | None = None
        self._open = True
        self._reply_to: str | None = None
        self._sock.start(self._on_messages, self._on_frame, self._on_closed)

    # --- the reader thread -------------------------------------------------------------------

    def _on_messages(self, frames: list[wire.Frame]) -> None:
        with self._cond:
            for f in frames:
                headers, body = wire.parse_message(f[0])
                self._replies[headers.get("correlation-id", "")] = (headers, body)
            self._cond.notify_all()

    def _on_frame(self, frame: wire.Frame) -> None:
        cmd = wire.command(frame)
        with self._cond:
            if cmd == "RECEIPT":
                self._receipts.add(wire.header(frame, b"\nreceipt-id:") or "")
            elif cmd == "ERROR":
                headers, body = wire.parse_message(frame[0])
                self._error = headers.get("message") or body.decode("utf-8", "replace")[:500]
            self._cond.notify_all()

    def _on_closed(self) -> None:
        with self._cond:
            self._open = False
            self._cond.notify_all()

    # --- calls ---------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Frames as bytes, no wait. A broken connection shows at the next ``receipt``."""
        self._raise_if_failed()
        try:
            self._sock.send(data)
        except OSError as e:
            raise SessionError(f"the connection to {self.where} failed: {e}") from None

    def receipt(self, cmd: str, headers: dict[str, str], what: str) -> None:
        """Send one frame asking for a receipt and wait for it: the broker has handled every
        frame before it (STOMP processes a connection's frames in order)."""
        rid = uuid.uuid4().hex
        self.send(wire.encode(cmd, {**headers, "receipt": rid}))
        self._wait(lambda: rid in self._receipts, what)
        self._receipts.discard(rid)

    def begin(self, tx: str) -> None:
        self.send(wire.encode("BEGIN", {"transaction": tx}))

    def commit(self, tx: str) -> None:
        """COMMIT and wait for its receipt: the transaction's messages are stored."""
        self.receipt("COMMIT", {"transaction": tx}, f"committing transaction {tx}")

    def call(self, resource: str, operation: str, *args: Any, timeout_s: float | None = None) -> Any:
        """One management operation (``QueueControl`` / ``ActiveMQServerControl``): its result.
        ``timeout_s``: for a long one (a move of many messages); default the session's."""
        cid = self._ask(resource, operation, list(args))
        return self._reply(cid, f"{operation} on {resource}", timeout_s)

    def attribute(self, resource: str, name: str) -> Any:
        """One management attribute, e.g. ``attribute("broker", "IDCacheSize")``."""
        return self._reply(self._ask(resource, name, None), f"{name} of {resource}")

    def gather(self, asks: Sequence[tuple[str, str, Sequence[Any] | None]]) -> list[Any]:
        """Several attributes and operations in one round trip: each ``(resource, name,
        args)`` (``args`` None: an attribute) is sent at once, then every reply awaited."""
        cids = [self._ask(res, name, None if args is None else list(args)) for res, name, args in asks]
        return [self._reply(cid, f"{name} of {res}") for cid, (res, name, _) in zip(cids, asks, strict=True)]

    def _ask(self, resource: str, name: str, args: list[Any] | None) -> str:
        """Send one management request (an attribute when ``args`` is None); its correlation id."""
        if self._reply_to is None:
            self._reply_to = f"/temp-queue/spark-ext-{uuid.uuid4().hex}"
            self.receipt("SUBSCRIBE", {"destination": self._reply_to, "id": "replies", "ack": "auto"},
                         "subscribing to management replies")
        cid = uuid.uuid4().hex
        what = {"_AMQ_Attribute": name} if args is None else {"_AMQ_OperationName": name}
        # No content-length: the broker reads a management request's parameters from a text body.
        self.send(wire.encode("SEND", {"destination": MANAGEMENT, "reply-to": self._reply_to,
                                       "correlation-id": cid, "_AMQ_ResourceName": resource, **what},
                              json.dumps(args or []).encode()))
        return cid

    def _reply(self, cid: str, what: str, timeout_s: float | None = None) -> Any:
        self._wait(lambda: cid in self._replies, what, timeout_s)
        with self._cond:
            reply_headers, body = self._replies.pop(cid)
        result = json.loads(body.decode("utf-8")) if body.strip() else [None]
        value = result[0] if isinstance(result, list) and result else result
        if reply_headers.get("_AMQ_OperationSucceeded") != "true":
            if "AMQ229213" in str(value) or "not authorized" in str(value).lower():
                raise ManagementRefusedError(
                    f"{self.where} refused {what}: {value}. The connector's user needs the 'manage' "
                    "permission on address activemq.management (security-settings in broker.xml)")
            error = QueueMissingError if "AMQ229067" in str(value) else ManagementError
            raise error(f"{self.where}: {what} failed: {value}")
        return value

    def _wait(self, done: Any, what: str, timeout_s: float | None = None) -> None:
        limit = timeout_s or self.timeout_s
        deadline = Deadline(limit)
        with self._cond:
            while not done():
                self._raise_if_failed()
                if deadline.expired:
                    raise SessionError(f"{self.where} did not answer {what} within {limit:.0f} s")
                self._cond.wait(min(0.5, max(deadline.remaining, 0.01)))

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise SessionError(f"{self.where} reported: {self._error}")
        if not self._open:
            raise SessionError(f"the connection to {self.where} was closed")

    @property
    def failed(self) -> str | None:
        """The broker's ERROR message, if it sent one."""
        return self._error

    @property
    def usable(self) -> bool:
        """Neither refused by the broker nor closed."""
        return self._open and self._error is None

    def close(self) -> None:
        """DISCONNECT (waiting briefly for its receipt) and close the socket."""
        if self._open and self._error is None:
            rid = "bye-" + uuid.uuid4().hex
            try:
                self._sock.send(wire.encode("DISCONNECT", {"receipt": rid}))
                with self._cond:
                    self._cond.wait_for(lambda: rid in self._receipts or not self._open, 2.0)
            except OSError:
                pass
        self._sock.close()

    def __enter__(self) -> BrokerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(host: str, port: int, user: str | None, password: str | None, timeout_s: float,
            wait_s: float, tls: StompTls | None = None) -> BrokerSession:
    """A session, waiting up to ``wait_s`` for a broker that is down, restarting or frozen
    (a refused login fails at once)."""
    return retry(lambda: BrokerSession(host, port, user, password, timeout_s, tls),
                 what=f"connecting to {host}:{port}", retry_on=BrokerUnavailableError,
                 timeout_s=max(wait_s, 0.001), backoff=Backoff(initial_s=0.2, max_s=2.0))
