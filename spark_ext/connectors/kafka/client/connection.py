"""Blocking Kafka protocol connections: kafka-python's request classes over a socket.

The fast read path (``source/wire_reader.py``) and the transactional sink both speak the
protocol directly: the sink because a transaction a task prepared must be committed by
the driver, which needs the transactional id, producer id and epoch on the wire, and no
Python client lets another process finish its transaction. Every connection is opened
with the cluster's ``KafkaSecurity``: TLS by Python's ``ssl`` module, then the SASL
handshake (``SaslHandshake`` v1 + ``SaslAuthenticate``) driven by kafka-python's mechanism
classes (PLAIN, SCRAM-SHA-256/512), so no handshake is written here.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any

from kafka.net.sasl import get_sasl_mechanism
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from spark_ext.connectors.kafka.client.errors import error_name
from spark_ext.connectors.kafka.client.produce import CLIENT_ID
from spark_ext.connectors.kafka.client.security import PLAINTEXT, KafkaSecurity, ssl_context
from spark_ext.errors import AuthenticationError
from spark_ext.retry import Backoff, retry

METADATA_VERSION = 8
SASL_HANDSHAKE_VERSION = 1  # v1: the exchange continues in framed SaslAuthenticate requests
SASL_AUTHENTICATE_VERSION = 1
_GATHER_MAX = 512  # buffers per sendmsg, under Linux's IOV_MAX (1024)


class Conn:
    """One blocking connection speaking the Kafka protocol. Not thread-safe.

    Raises ``AuthenticationError`` (not an ``OSError``, so reconnect loops do not retry it)
    when the TLS handshake or the SASL exchange is refused.
    """

    def __init__(self, host: str, port: int, timeout_s: float, security: KafkaSecurity = PLAINTEXT) -> None:
        self.host, self.port = host, port
        sock = socket.create_connection((host, port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._cid = 0
        try:
            if security.tls:
                sock = _tls(sock, host, port, security)
            self.sock = sock
            if security.sasl:
                self._authenticate(host, port, security)
        except BaseException:
            sock.close()
            raise

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
        req.with_header(correlation_id=self._cid, client_id=CLIENT_ID)
        self.sock.sendall(req.encode(version=version, header=True, framed=True))

    def send_parts(self, encode: Callable[[int], list[bytes]]) -> None:
        """Send, without waiting, the request ``encode(correlation_id)`` returns as parts
        (``client.produce``): a plain socket takes them in gather writes, uncopied; TLS
        encrypts one buffer at a time, so there they are joined first. As ``sendall``, the
        socket's timeout bounds the whole request, not each write (``TimeoutError``)."""
        self._cid += 1
        parts = encode(self._cid)
        if isinstance(self.sock, ssl.SSLSocket):
            self.sock.sendall(b"".join(parts))
            return
        views = [memoryview(p) for p in parts]
        timeout = self.sock.gettimeout()
        deadline = None if timeout is None else time.monotonic() + timeout
        at = 0
        try:
            while at < len(views):
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"sending a request to {self.host}:{self.port} timed out")
                    self.sock.settimeout(left)
                sent = self.sock.sendmsg(views[at:at + _GATHER_MAX])  # a short write resumes where it stopped
                while at < len(views) and sent >= len(views[at]):
                    sent -= len(views[at])
                    at += 1
                if sent:
                    views[at] = views[at][sent:]
        finally:
            self.sock.settimeout(timeout)

    def receive(self, response: Any, version: int) -> Any:
        """Read the next response; responses arrive in request order."""
        (size,) = struct.unpack(">i", self._recv(4))
        return response.decode(bytes(self._recv(size)), version=version, header=True)

    def request(self, req: Any, version: int, response: Any) -> Any:
        self.send(req, version)
        return self.receive(response, version)

    def close(self) -> None:
        self.sock.close()

    def _authenticate(self, host: str, port: int, sec: KafkaSecurity) -> None:
        where = f"Kafka at {host}:{port} ({sec.describe()})"
        r = self.request(SaslHandshakeRequest(mechanism=sec.mechanism), SASL_HANDSHAKE_VERSION,
                         SaslHandshakeResponse)
        if r.error_code:
            raise AuthenticationError(
                f"{where} does not offer SASL mechanism {sec.mechanism} (it offers "
                f"{', '.join(r.mechanisms) or 'none'}); set kafka.sasl.mechanism to one of those"
            )
        mechanism = get_sasl_mechanism(sec.mechanism)(host=host, **sec.sasl_config())
        while not mechanism.is_done():
            req = SaslAuthenticateRequest(auth_bytes=mechanism.auth_bytes())
            a = self.request(req, SASL_AUTHENTICATE_VERSION, SaslAuthenticateResponse)
            if a.error_code:
                # The broker's message names the mechanism, never the password.
                raise AuthenticationError(
                    f"{where} refused the credentials: {error_name(a.error_code)}"
                    f"{' (' + a.error_message + ')' if a.error_message else ''}; check the user name "
                    "and password in kafka.sasl.jaas.config (or kafka.sasl.username / kafka.sasl.password)"
                )
            try:
                mechanism.receive(a.auth_bytes)
            except ValueError as e:  # SCRAM: the server's proof did not match
                raise AuthenticationError(f"{where}: the broker failed SCRAM verification ({e})") from None
        if not mechanism.is_authenticated():
            raise AuthenticationError(f"{where} did not accept the SASL {sec.mechanism} exchange")


def _tls(sock: socket.socket, host: str, port: int, sec: KafkaSecurity) -> ssl.SSLSocket:
    try:
        return ssl_context(sec).wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as e:
        raise AuthenticationError(
            f"the TLS certificate of Kafka at {host}:{port} is not trusted ({e.verify_message}); set "
            "kafka.ssl.truststore.location (PEM) or kafka.ssl.ca.location to the CA that signed it"
            + ("; the host name differs from the certificate's: connect by a name it lists, or set "
               "kafka.ssl.endpoint.identification.algorithm to an empty value" if "ostname" in str(e) else "")
        ) from None
    except ssl.SSLError as e:
        raise AuthenticationError(
            f"TLS handshake with Kafka at {host}:{port} failed ({e.reason or e}); is the listener "
            f"{sec.protocol}? check kafka.security.protocol and the port"
        ) from None


def addresses(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` -> [(host, port)]; IPv6 brackets stripped."""
    out = []
    for hp in bootstrap.split(","):
        host, _, port = hp.strip().rpartition(":")
        out.append((host.strip("[]") or "localhost", int(port or 9092)))
    return out


class _NoBroker(Exception):
    """Every answer listed no broker."""


def metadata(bootstrap: str, topics: list[str] | None, timeout_s: float,
             security: KafkaSecurity = PLAINTEXT) -> Any:
    """A Metadata response from the first reachable bootstrap server (``None``: all topics)
    that lists at least one broker.

    A one-node cluster just resumed from a pause longer than ``broker.session.timeout.ms``
    can answer listing no broker (it sees itself fenced until it registers again, for some
    milliseconds); read as it is, that answer says "no broker" to every caller. Such
    answers are asked again until ``timeout_s``, then raised as a ``ConnectionError``.
    ``AuthenticationError`` is raised at once: another bootstrap server will refuse the
    same credentials.
    """
    gone = ConnectionError(f"Kafka at {bootstrap} listed no broker for {timeout_s:.0f} s (a broker resuming "
                           "from a pause or still registering)")
    return retry(lambda: _metadata_once(bootstrap, topics, timeout_s, security),
                 what=f"reading Kafka's metadata at {bootstrap}", retry_on=_NoBroker, timeout_s=timeout_s,
                 backoff=Backoff(initial_s=0.01, max_s=0.2), give_up=lambda e: gone)


def _metadata_once(bootstrap: str, topics: list[str] | None, timeout_s: float,
                   security: KafkaSecurity) -> Any:
    """The first answer listing a broker; ``_NoBroker`` when the answers listed none
    (another bootstrap server may know better), ``ConnectionError`` when none answered."""
    last: Exception | None = None
    answered = False
    for host, port in addresses(bootstrap):
        try:
            c = Conn(host, port, timeout_s, security)
        except OSError as e:
            last = e
            continue
        try:
            ts = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
            req = MetadataRequest(topics=ts, allow_auto_topic_creation=False)
            r = c.request(req, METADATA_VERSION, MetadataResponse)
            if r.brokers:
                return r
            answered = True
        except OSError as e:
            last = e
        finally:
            c.close()
    if answered:
        raise _NoBroker(f"Kafka at {bootstrap} listed no broker")
    raise ConnectionError(f"no Kafka broker reachable at {bootstrap}: {last}")
