"""STOMP over TLS for the queue source and sink: the options, the client's TLS context,
and what a refused handshake means.

TLS is on with ``brokerUrl=stomp+ssl://host:port`` (or option ``tls``). The broker's
certificate is checked against ``tlsCaFile`` (else the system's CAs), and its name
against the host connected to unless ``tlsVerifyHostname`` is false. A broker that asks
for a client certificate gets ``tlsCertFile`` / ``tlsKeyFile``. Every connection of the
connector (tasks, the driver's commits, management calls, the doctor) goes through
``wrap``. A handshake the settings doom (an unknown CA, a wrong name, an expired or
missing certificate, a port that speaks clear text) fails at once, naming the fix; a
connection the broker dropped mid-handshake is an ``OSError`` like any other, retried.
"""

from __future__ import annotations

import functools
import os
import socket
import ssl
from dataclasses import dataclass

from spark_ext.errors import AuthenticationError, InvalidOptionError
from spark_ext.options import Option, Options

TLS_SCHEMES = ("stomp+ssl", "stomp+tls", "ssl")

TLS_OPTIONS = (
    Option("tls", "Speak TLS to the broker; `brokerUrl=stomp+ssl://host:port` turns it on too.",
           default=False),
    Option("tlsCaFile", "PEM file of the CA that signed the broker's certificate (default: the system's "
           "CAs)."),
    Option("tlsCertFile", "PEM client certificate, for a broker that asks for one."),
    Option("tlsKeyFile", "PEM key of `tlsCertFile` (default: the key inside `tlsCertFile`)."),
    Option("tlsVerifyHostname", "Check that the broker's certificate names the host connected to.",
           default=True),
)


@dataclass(frozen=True)
class StompTls:
    """One broker's TLS settings. Picklable: file names, no key material."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True


def parse_tls(opts: Options, scheme_says_tls: bool) -> StompTls | None:
    """Driver, at query start: the TLS settings, or None for clear text. Files that are not
    there fail here, naming the option."""
    on = opts.get_bool("tls", scheme_says_tls) or scheme_says_tls
    files = {name: opts.get_str(name) for name in ("tlsCaFile", "tlsCertFile", "tlsKeyFile")}
    if not on:
        given = [n for n, v in files.items() if v]
        if given:
            raise InvalidOptionError(f"option(s) {', '.join(given)} are set but TLS is off; use "
                                     "brokerUrl=stomp+ssl://host:port or set option tls=true")
        return None
    for name, path in files.items():
        if path and not os.path.isfile(path):
            raise InvalidOptionError(f"option '{name}' names {path!r}, which is not a file")
    if files["tlsKeyFile"] and not files["tlsCertFile"]:
        raise InvalidOptionError("option 'tlsKeyFile' is set without 'tlsCertFile'; set both")
    return StompTls(files["tlsCaFile"], files["tlsCertFile"], files["tlsKeyFile"],
                    opts.get_bool("tlsVerifyHostname", True))


@functools.lru_cache(maxsize=8)
def context(tls: StompTls) -> ssl.SSLContext:
    """One TLS context per settings and process (loading a CA file costs milliseconds)."""
    ctx = ssl.create_default_context(cafile=tls.ca_file)
    ctx.check_hostname = tls.check_hostname
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return ctx


def _fix(e: ssl.SSLError) -> str | None:
    """What to change for a handshake the settings doom; None when it may pass next time."""
    if isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)):
        return None  # the broker went away mid-handshake: a restart, not the settings
    text = f"{e.reason or ''} {e}".lower()
    if "hostname mismatch" in text or "ip address mismatch" in text:
        return ("the broker's certificate does not name this host: connect by a name it carries, or set "
                "tlsVerifyHostname=false")
    if "expired" in text:
        return "a certificate has expired (the broker's, or the client's tlsCertFile): renew it"
    if "certificate verify failed" in text:
        return ("the broker's certificate is not signed by a CA we trust: point tlsCaFile at the CA that "
                "signed it")
    if "wrong version number" in text or "record layer failure" in text or "packet length" in text:
        return "this port speaks clear text, not TLS: use the broker's TLS acceptor, or drop stomp+ssl / tls"
    if "certificate required" in text or "handshake failure" in text or "bad certificate" in text:
        return ("the broker wants a client certificate it trusts: set tlsCertFile and tlsKeyFile to one its "
                "CA signed")
    if "certificate unknown" in text:
        return ("the broker does not accept tlsCertFile (expired, or not signed by a CA it trusts): renew it "
                "or use one its CA signed")
    if "unknown ca" in text:
        return "the broker does not trust the CA of tlsCertFile: use a certificate its CA signed"
    return "check the TLS options (tlsCaFile, tlsCertFile, tlsKeyFile)"


def refused(e: ssl.SSLError, host: str, port: int) -> AuthenticationError | None:
    """A clear error for a handshake the settings doom, else None (retry it)."""
    fix = _fix(e)
    if fix is None:
        return None
    return AuthenticationError(f"TLS with the STOMP broker at {host}:{port} failed ({e.reason or e}): {fix}")


def wrap(sock: socket.socket, host: str, port: int, tls: StompTls) -> ssl.SSLSocket:
    """``sock`` after the TLS handshake. Raises ``AuthenticationError`` when the settings
    doom it, an ``OSError`` when the broker went away or did not answer."""
    try:
        ctx = context(tls)
    except (OSError, ssl.SSLError) as e:  # files missing or unreadable on this host: no retry helps
        sock.close()
        raise InvalidOptionError(
            f"cannot load the TLS files (tlsCaFile, tlsCertFile, tlsKeyFile) on host {socket.gethostname()}: "
            f"{e}; ship or mount them on every host that connects") from None
    try:
        return ctx.wrap_socket(sock, server_hostname=host)
    except TimeoutError:
        sock.close()
        # Frozen, or a clear-text STOMP port, which waits for a frame and never answers a handshake.
        raise TimeoutError("no answer to the TLS handshake (is it the broker's TLS acceptor port?)") from None
    except ssl.SSLError as e:
        sock.close()
        err = refused(e, host, port)
        if err is not None:
            raise err from None
        raise
    except OSError:
        sock.close()
        raise
