"""The queue source's STOMP 1.2 socket: frames in, cut by one reader thread; frames out,
encoded by stomp.py.

Why not stomp.py's connection for receiving: for every message its receiving thread
builds a ``Frame``, decodes each header with regular expressions and looks up and calls
each listener by name, about 23 µs a message here (43k messages/s into a listener that
does nothing), while the broker delivers about 90k/s to a loop that only cuts frames. The
receiving thread shares its process, and so the GIL, with the planning of every batch
(``client.py`` says why it must), so each of those microseconds is taken from planning.
Here a MESSAGE frame stays one ``bytes`` object from the socket to the executor: the
receiving thread reads only the two headers the driver needs (the message ID and the
ack id, ``header``); the executor decodes the rest (``parse_message``). Frames we send
(CONNECT, SUBSCRIBE, ACK, DISCONNECT) are encoded by ``stomp.utils``, as stomp.py does.
"""

from __future__ import annotations

import logging
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable

import stomp

from spark_ext.connectors.jms.tls import StompTls
from spark_ext.connectors.jms.tls import refused as tls_refused
from spark_ext.connectors.jms.tls import wrap as tls_wrap

log = logging.getLogger(__name__)

_HEAD_END = re.compile(rb"\r?\n\r?\n")  # the blank line between headers and body
_RECV_BYTES = 1 << 20
_SEND_TIMEOUT_S = 30.0  # a broker that takes none of our bytes this long has failed
_ESCAPES = {"\\n": "\n", "\\r": "\r", "\\c": ":", "\\\\": "\\"}
_ESCAPED = re.compile(r"\\.")

# A MESSAGE frame without its trailing NUL, and where its headers end (an index into it).
Frame = tuple[bytes, int]


class WireError(Exception):
    """The broker closed the connection, answered with ERROR, or did not answer in time."""


def encode(cmd: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """One frame as bytes, encoded by stomp.py."""
    frame = stomp.utils.Frame(cmd, headers, body)
    return b"".join(stomp.utils.encode(x) for x in stomp.utils.convert_frame(frame))


def escape(value: str) -> str:
    """A header value as STOMP 1.2 writes it."""
    if "\\" in value or "\n" in value or "\r" in value or ":" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace(":", "\\c")
    return value


def _unescape(value: str) -> str:
    return _ESCAPED.sub(lambda m: _ESCAPES.get(m.group(0), m.group(0)), value) if "\\" in value else value


def cut(buf: bytes) -> tuple[list[Frame], int]:
    """The complete frames at the start of ``buf`` and how many bytes they used.

    End-of-line bytes between frames (heart-beats) are skipped. A frame with a
    ``content-length`` header ends that many bytes after its headers (its body may hold
    NUL bytes), any other at the first NUL.
    """
    out: list[Frame] = []
    pos, n = 0, len(buf)
    while pos < n:
        if buf[pos] in (10, 13):
            pos += 1
            continue
        m = _HEAD_END.search(buf, pos)
        if m is None:
            break
        head_end, body = m.start(), m.end()
        i = buf.find(b"\ncontent-length:", pos, head_end)
        if i >= 0:
            j = buf.find(b"\n", i + 16, body)
            end = body + int(buf[i + 16:j])
            if end >= n:
                break
            if buf[end] != 0:
                raise WireError(f"a frame's body is not followed by NUL at its content-length ({end - body})")
        else:
            end = buf.find(b"\x00", body)
            if end < 0:
                break
        out.append((buf[pos:end], head_end - pos))
        pos = end + 1
    return out, pos


def command(frame: Frame) -> str:
    data, _ = frame
    return data[:data.find(b"\n")].rstrip(b"\r").decode("utf-8")


def header(frame: Frame, key: bytes) -> str | None:
    """The first value of header ``key`` (given as ``b"\\nname:"``), or None."""
    data, head = frame
    i = data.find(key, 0, head)
    if i < 0:
        return None
    start = i + len(key)
    j = data.find(b"\n", start, head + 1)
    return _unescape(data[start:j if j >= 0 else head].rstrip(b"\r").decode("utf-8"))


def parse_message(data: bytes) -> tuple[dict[str, str], bytes]:
    """A frame's headers (the first of repeated names wins, as STOMP 1.2 says) and body.

    Runs once per message on the executors: the common frame (LF line ends, nothing
    escaped) takes one decode and one split; the rest goes line by line.
    """
    head, sep, body = data.partition(b"\n\n")
    if not sep or b"\r" in head or b"\\" in head:
        m = _HEAD_END.search(data)
        head, body = (data[:m.start()], data[m.end():]) if m else (data, b"")
        headers: dict[str, str] = {}
        for line in head.decode("utf-8").split("\n")[1:]:
            name, _, value = line.rstrip("\r").partition(":")
            headers.setdefault(_unescape(name), _unescape(value))
        return headers, body
    # reversed: in a dict built from pairs the last one wins
    return dict(line.partition(":")[::2] for line in reversed(head.decode("utf-8").split("\n")[1:])), body


class StompSocket:
    """One logged-in connection. ``start`` runs the reader thread, which hands MESSAGE
    frames to ``on_messages`` a socket read at a time, every other frame to ``on_frame``,
    and calls ``on_closed`` once when the connection ends (either side). ``send`` may be
    called from any thread."""

    def __init__(self, host: str, port: int, timeout_s: float, tls: StompTls | None = None) -> None:
        sock = socket.create_connection((host, port), timeout=timeout_s)
        # Frames go out as soon as written: a BEGIN, SEND, COMMIT written back to back
        # otherwise waits on the broker's delayed ACK (about 40 ms) under Nagle's algorithm.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock if tls is None else tls_wrap(sock, host, port, tls)
        self._where = (host, port)
        self._send_lock = threading.Lock()
        self._buf = b""
        self._send_every = 0.0  # heart-beat intervals agreed with the broker (s, 0: none)
        self._expect_every = 0.0
        self._last_sent = self._last_received = time.monotonic()
        self._thread: threading.Thread | None = None
        self._closing = False

    def login(self, user: str | None, password: str | None, heartbeat_ms: int, timeout_s: float) -> None:
        """CONNECT and wait for CONNECTED; ``WireError`` with the broker's reason if refused."""
        headers = {"accept-version": "1.2", "host": "/", "heart-beat": f"{heartbeat_ms},{heartbeat_ms}"}
        if user is not None:
            headers["login"] = user
        if password is not None:
            headers["passcode"] = password
        self.send(encode("CONNECT", headers))
        deadline = time.monotonic() + timeout_s
        while True:
            frames, used = cut(self._buf)
            if frames:
                self._buf = self._buf[used:]
                reply = frames[0]
                if command(reply) != "CONNECTED":
                    headers, body = parse_message(reply[0])
                    raise WireError(headers.get("message") or body.decode("utf-8", "replace")[:500])
                sx, _, sy = (header(reply, b"\nheart-beat:") or "0,0").partition(",")
                if heartbeat_ms and int(sy or 0):
                    self._send_every = max(heartbeat_ms, int(sy)) / 1000.0
                if heartbeat_ms and int(sx or 0):
                    self._expect_every = max(heartbeat_ms, int(sx)) / 1000.0
                self._sock.settimeout(_SEND_TIMEOUT_S)
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireError(f"no answer to CONNECT within {timeout_s:.0f} s")
            self._sock.settimeout(left)
            try:
                data = self._sock.recv(_RECV_BYTES)
            except TimeoutError:
                continue
            except ssl.SSLError as e:  # TLS 1.3: a refused client certificate shows here
                err = tls_refused(e, *self._where)
                if err is not None:
                    raise err from None
                raise
            if not data:
                raise WireError("the broker closed the connection" + (
                    "" if isinstance(self._sock, ssl.SSLSocket) else
                    " (a TLS acceptor closes a clear-text login: for one, use brokerUrl=stomp+ssl://host:port)"))
            self._buf += data

    def start(self, on_messages: Callable[[list[Frame]], None], on_frame: Callable[[Frame], None],
              on_closed: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=self._run, args=(on_messages, on_frame, on_closed),
                                        name="spark-ext-stomp", daemon=True)
        self._thread.start()

    def send(self, data: bytes) -> None:
        with self._send_lock:
            self._sock.sendall(data)
            self._last_sent = time.monotonic()

    def _run(self, on_messages: Callable[[list[Frame]], None], on_frame: Callable[[Frame], None],
             on_closed: Callable[[], None]) -> None:
        sock, buf = self._sock, self._buf
        # Ours go out at twice the agreed rate: Artemis drops a connection silent for twice
        # the agreed interval (its TTL), and sent at that interval, checked every half of
        # it, a gap reached 1.5 intervals, so a stall of half an interval (a loaded host)
        # cost the connection. Now a stall must last 1.25 intervals.
        beat = self._send_every / 2
        tick = min([t / 2 for t in (beat, self._expect_every) if t] or [1.0])
        try:
            while not self._closing:
                # TLS may hold decrypted bytes the socket no longer signals
                pending = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
                ready = [sock] if pending else select.select([sock], [], [], tick)[0]
                now = time.monotonic()
                if beat and now - self._last_sent >= beat:
                    self.send(b"\n")
                if not ready:
                    if self._expect_every and now - self._last_received > 2 * self._expect_every:
                        log.warning("no heart-beat from the STOMP broker for %.0f s: connection lost",
                                    now - self._last_received)
                        return
                    continue
                if isinstance(sock, ssl.SSLSocket):
                    # OpenSSL forbids one connection's read and write at once from two threads.
                    with self._send_lock:
                        data = sock.recv(_RECV_BYTES)
                else:
                    data = sock.recv(_RECV_BYTES)
                if not data:
                    return
                self._last_received = now
                buf = buf + data if buf else data
                frames, used = cut(buf)
                buf = buf[used:]
                messages = [f for f in frames if f[0].startswith(b"MESSAGE")]
                if messages:
                    on_messages(messages)
                if len(messages) < len(frames):
                    for f in frames:
                        if not f[0].startswith(b"MESSAGE"):
                            on_frame(f)
        except (OSError, ValueError, WireError) as e:
            if not self._closing:
                log.warning("the STOMP connection failed: %s", e)
        finally:
            on_closed()

    def close(self, goodbye: bytes = b"", wait_s: float = 0.0, said: threading.Event | None = None) -> None:
        """Send ``goodbye`` (a DISCONNECT), wait up to ``wait_s`` for ``said`` (its receipt),
        then close the socket and end the reader thread."""
        if goodbye:
            try:
                self.send(goodbye)
                if said is not None:
                    said.wait(wait_s)
            except OSError:
                pass  # already gone: nothing to tell the broker
        self._closing = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)
