"""Options of the acknowledging queue source (STOMP), parsed once on the driver; and the
broker's options and settings the queue source and sink share (``BROKER_OPTIONS``,
``BrokerConfig``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from spark_ext.connectors.jms.tls import TLS_OPTIONS, TLS_SCHEMES, StompTls, parse_tls
from spark_ext.errors import InvalidOptionError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Option, Options, OptionSpec
from spark_ext.secrets import Secret, secret, secret_options

#: The broker's address and login, shared by the queue source and sink.
BROKER_OPTIONS = (
    Option("host", "The broker's STOMP acceptor host.", default="127.0.0.1"),
    Option("port", "The broker's STOMP acceptor port.", default=61613),
    Option("brokerUrl", "`stomp://host:port`, or `stomp+ssl://host:port` for TLS; wins over `host` and "
           "`port`."),
    Option("user", "The broker login."),
    Option("password", "The broker password; never logged (prefer `passwordFile`)."),
    *secret_options(what="the broker password"),
    *TLS_OPTIONS,
)

SOURCE_OPTIONS = OptionSpec.of(
    *BROKER_OPTIONS,
    Option("destination", "`/queue/<name>` (acknowledged, replayable) or `/topic/<name>`; `/queue/` must "
           "mean an anycast queue on the broker.", required=True),
    Option("guarantee", "`exactly_once`: a batch's message IDs live in its offset and redeliveries of "
           "committed messages are dropped, also across a driver restart; `at_least_once`: the IDs are "
           "recorded, but a batch committed and not yet acknowledged when the driver died is read again; "
           "`none`: auto-acknowledge.", default="exactly_once"),
    Option("maxMessagesPerTrigger", "At most this many messages a batch.", default=10_000),
    Option("messageIdHeader", "The header that identifies a message for de-duplication (case-sensitive, "
           "e.g. an application's payment id).", default="message-id"),
    Option("consumerWindowSize", "The subscription's `consumer-window-size`: bytes the broker sends ahead "
           "of acknowledgements (-1: no limit). `auto`: room for two batches (the one in flight and the "
           "next), from the messages' measured size; a message sent ahead and not yet in a batch gains a "
           "delivery each time the connection is lost.", default="auto"),
    Option("replayTimeoutMs", "How long a replay waits for the broker to redeliver a recorded message (ms).",
           default=60_000),
    Option("skipMissingMessages", "`false`: a recorded message the broker never redelivers (expired, "
           "dead-lettered, taken by another consumer) fails the query naming it; `true`: skip and log it.",
           default=False),
    Option("dedupWindowMs", "After a restart, how long the IDs of committed, maybe unacknowledged batches "
           "are kept to drop their redeliveries (ms).", default=300_000),
    Option("connectTimeoutMs", "How long a login, a subscription or an acknowledgement's receipt is waited "
           "for (ms).", default=10_000),
    Option("reconnectTimeoutMs", "How long the source waits for a broker that went away, planning no new "
           "data, before the query fails naming the broker (ms; 0: fail at once). The default outlasts a "
           "broker's failover to its backup.", default=180_000),
)


@dataclass(frozen=True)
class BrokerConfig:
    """What the queue source's and sink's configs share: the broker's address and login
    (``BROKER_OPTIONS``), the destination, the guarantee and how long a connection waits
    for a broker that is away. Picklable; no connection. A subclass is a
    ``@dataclass(frozen=True, repr=False)``, so it keeps this ``__repr__``, which never
    shows the password."""

    host: str
    port: int
    user: str | None
    password: Secret | None  # read where each connection logs in
    tls: StompTls | None  # None: clear text
    destination: str
    guarantee: Guarantee
    reconnect_timeout_s: float

    def __repr__(self) -> str:  # never shows the password
        return f"{type(self).__name__}({self.host}:{self.port}, {self.destination!r}, {self.guarantee.value})"

    @property
    def where(self) -> str:
        """The broker and destination as messages, logs and the doctor name them."""
        return f"stomp{'+ssl' if self.tls else ''}://{self.host}:{self.port}{self.destination}"

    @staticmethod
    def broker_fields(opts: Options, expected: str) -> dict[str, Any]:
        """The broker's fields from the options: address (``brokerUrl`` wins over ``host`` /
        ``port``), destination (``expected``: the destinations the caller takes, for the
        error), login and TLS."""
        host, port = broker_address(opts)
        return {"host": host, "port": port, "destination": destination(opts, expected),
                "user": opts.get_str("user"), "password": secret(opts), "tls": broker_tls(opts)}


@dataclass(frozen=True, repr=False)
class JmsSourceConfig(BrokerConfig):
    """The queue source's settings: the broker's, and the bookkeeping policy."""

    max_per_trigger: int
    id_header: str
    window_bytes: int | None  # None: sized to two batches as messages arrive
    replay_timeout_s: float
    skip_missing: bool
    dedup_window_s: float
    connect_timeout_s: float

    @property
    def tracks_ids(self) -> bool:
        """Every acknowledging guarantee records a batch's message IDs with its offset, so a
        replay reads the same messages (a sink that skips a landed batch then loses nothing)."""
        return self.guarantee is not Guarantee.NONE

    @property
    def carries_committed(self) -> bool:
        """Exactly once also carries IDs of committed, maybe unacknowledged batches across a
        driver restart, so their redeliveries are dropped rather than read again."""
        return self.guarantee is Guarantee.EXACTLY_ONCE

    @staticmethod
    def parse(opts: Options) -> JmsSourceConfig:
        spec = SOURCE_OPTIONS
        spec.check(opts.raw(), "hzsource connector 'jms'")
        return JmsSourceConfig(
            **BrokerConfig.broker_fields(opts, "/queue/<name> (acknowledged, replayable) or /topic/<name>"),
            guarantee=Guarantee.parse(opts.get_str("guarantee"), Guarantee(spec.default_str("guarantee"))),
            max_per_trigger=spec.int_of(opts, "maxMessagesPerTrigger", minimum=1),
            # STOMP header names are case-sensitive (an application's "paymentId")
            id_header=opts.get_str("messageidheader") or spec.default_str("messageIdHeader"),
            window_bytes=_window(opts),
            replay_timeout_s=spec.seconds_of(opts, "replayTimeoutMs", minimum=1),
            skip_missing=opts.get_bool("skipmissingmessages", spec.default_bool("skipMissingMessages")),
            dedup_window_s=spec.seconds_of(opts, "dedupWindowMs", minimum=0),
            connect_timeout_s=spec.seconds_of(opts, "connectTimeoutMs", minimum=1),
            reconnect_timeout_s=spec.seconds_of(opts, "reconnectTimeoutMs", minimum=0),
        )


def _window(opts: Options) -> int | None:
    """Option consumerWindowSize: ``None`` for ``auto``, else bytes (0 and -1: no limit)."""
    raw = opts.get_str("consumerwindowsize")
    if raw is None or raw.strip().lower() == "auto":
        return None
    try:
        window: int | None = int(raw.strip())
    except ValueError:
        window = None
    if window is None or window < -1:
        raise InvalidOptionError(f"option 'consumerWindowSize' is {raw!r}; expected auto, or the bytes the "
                                 "broker may send ahead of acknowledgements (-1: no limit)")
    return window or -1


def broker_address(opts: Options) -> tuple[str, int]:
    """Options host/port, or brokerUrl (stomp://host:port), which wins."""
    host = opts.get_str("host") or SOURCE_OPTIONS.default_str("host")
    port = SOURCE_OPTIONS.int_of(opts, "port", minimum=1)
    url = opts.get_str("brokerurl")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("stomp", "tcp", *TLS_SCHEMES) or not parts.hostname:
            raise InvalidOptionError(
                f"option 'brokerUrl' is {url!r}; expected stomp://host:port (the broker's STOMP acceptor) or "
                "stomp+ssl://host:port (over TLS)"
            )
        if parts.scheme in TLS_SCHEMES and parts.port is None:
            raise InvalidOptionError(f"option 'brokerUrl' is {url!r}; give the port of the broker's TLS "
                                     "acceptor (stomp+ssl://host:port; 61613 is STOMP's clear-text port)")
        host, port = parts.hostname, parts.port or SOURCE_OPTIONS.default_int("port")
    return host, port


def broker_tls(opts: Options) -> StompTls | None:
    """TLS settings: on with a ``stomp+ssl://`` brokerUrl or option ``tls``."""
    url = opts.get_str("brokerurl")
    return parse_tls(opts, url is not None and urlsplit(url).scheme in TLS_SCHEMES)


def destination(opts: Options, expected: str) -> str:
    """Option destination: /queue/<name> or /topic/<name>."""
    dest = opts.require("destination")
    if not dest.startswith(("/queue/", "/topic/")) or len(dest) <= len("/queue/"):
        raise InvalidOptionError(f"option 'destination' is {dest!r}; expected {expected}")
    return dest
