"""Blocking Kafka protocol connections: kafka-python's request classes over a plain socket.

The fast read path (``wire.py``) and the transactional sink (``txn.py``) both speak the
protocol directly: the sink because a transaction a task prepared must be committed by
the driver, which needs the transactional id, producer id and epoch on the wire, and no
Python client lets another process finish its transaction. Plain-text listeners only;
other security protocols are refused at query start by the connectors.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

METADATA_VERSION = 8


class Conn:
    """One blocking connection speaking the Kafka protocol. Not thread-safe."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._cid = 0

    def _recv(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if not k:
                raise ConnectionError("connection closed by the broker")
            got += k
        return buf

    def send(self, req: Any, version: int) -> None:
        """Send without waiting (pipelining, or ``acks=0`` produce requests)."""
        self._cid += 1
        req.with_header(correlation_id=self._cid, client_id="spark-ext")
        self.sock.sendall(req.encode(version=version, header=True, framed=True))

    def receive(self, response: Any, version: int) -> Any:
        """Read the next response; responses arrive in request order."""
        (size,) = struct.unpack(">i", self._recv(4))
        return response.decode(bytes(self._recv(size)), version=version, header=True)

    def request(self, req: Any, version: int, response: Any) -> Any:
        self.send(req, version)
        return self.receive(response, version)

    def close(self) -> None:
        self.sock.close()


def addresses(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` -> [(host, port)]; IPv6 brackets stripped."""
    out = []
    for hp in bootstrap.split(","):
        host, _, port = hp.strip().rpartition(":")
        out.append((host.strip("[]") or "localhost", int(port or 9092)))
    return out


def metadata(bootstrap: str, topics: list[str] | None, timeout_s: float) -> Any:
    """A Metadata response from the first reachable bootstrap server (``None``: all topics)."""
    last: Exception | None = None
    for host, port in addresses(bootstrap):
        try:
            c = Conn(host, port, timeout_s)
        except OSError as e:
            last = e
            continue
        try:
            ts = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
            req = MetadataRequest(topics=ts, allow_auto_topic_creation=False)
            return c.request(req, METADATA_VERSION, MetadataResponse)
        except OSError as e:
            last = e
        finally:
            c.close()
    raise ConnectionError(f"no Kafka broker reachable at {bootstrap}: {last}")
