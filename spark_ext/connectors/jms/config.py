"""Options of the acknowledging queue source (STOMP), parsed once on the driver."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from spark_ext.errors import InvalidOptionError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options, OptionSpec

SOURCE_OPTIONS = OptionSpec(
    names=frozenset({"host", "port", "user", "password", "brokerurl", "destination",
                     "maxmessagespertrigger", "messageidheader", "consumerwindowsize",
                     "replaytimeoutms", "skipmissingmessages", "dedupwindowms", "connecttimeoutms",
                     "reconnecttimeoutms"}),
    required=frozenset({"destination"}),
)


@dataclass(frozen=True)
class JmsSourceConfig:
    """Broker address, destination and the bookkeeping policy. Picklable; no connection."""

    host: str
    port: int
    user: str | None
    password: str | None
    destination: str
    guarantee: Guarantee
    max_per_trigger: int
    id_header: str
    window_bytes: int
    replay_timeout_s: float
    skip_missing: bool
    dedup_window_s: float
    connect_timeout_s: float
    reconnect_timeout_s: float = 120.0

    def __repr__(self) -> str:  # never show the password
        return f"JmsSourceConfig({self.host}:{self.port}, {self.destination!r}, {self.guarantee.value})"

    @property
    def where(self) -> str:
        return f"stomp://{self.host}:{self.port}{self.destination}"

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
        SOURCE_OPTIONS.check(opts.raw(), "hzsource connector 'jms'")
        host, port = broker_address(opts)
        dest = destination(opts, "/queue/<name> (acknowledged, replayable) or /topic/<name>")
        return JmsSourceConfig(
            host=host,
            port=port,
            user=opts.get_str("user"),
            password=opts.get_str("password"),
            destination=dest,
            guarantee=Guarantee.parse(opts.get_str("guarantee"), Guarantee.EXACTLY_ONCE),
            max_per_trigger=opts.get_int("maxmessagespertrigger", 10_000, minimum=1) or 10_000,
            # STOMP header names are case-sensitive (an application's "paymentId")
            id_header=opts.get_str("messageidheader", "message-id") or "message-id",
            window_bytes=opts.get_int("consumerwindowsize", 64 * 1024 * 1024, minimum=-1) or -1,
            replay_timeout_s=(opts.get_int("replaytimeoutms", 60_000, minimum=1) or 60_000) / 1000.0,
            skip_missing=opts.get_bool("skipmissingmessages", False),
            dedup_window_s=(opts.get_int("dedupwindowms", 300_000, minimum=0) or 0) / 1000.0,
            connect_timeout_s=(opts.get_int("connecttimeoutms", 10_000, minimum=1) or 10_000) / 1000.0,
            reconnect_timeout_s=(opts.get_int("reconnecttimeoutms", 120_000, minimum=0) or 0) / 1000.0,
        )


def broker_address(opts: Options) -> tuple[str, int]:
    """Options host/port, or brokerUrl (stomp://host:port), which wins."""
    host, port = opts.get_str("host", "127.0.0.1") or "127.0.0.1", opts.get_int("port", 61613, minimum=1)
    url = opts.get_str("brokerurl")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("stomp", "tcp") or not parts.hostname:
            raise InvalidOptionError(
                f"option 'brokerUrl' is {url!r}; expected stomp://host:port (the broker's STOMP acceptor)"
            )
        host, port = parts.hostname, parts.port or 61613
    return host, int(port or 61613)


def destination(opts: Options, expected: str) -> str:
    """Option destination: /queue/<name> or /topic/<name>."""
    dest = opts.require("destination")
    if not dest.startswith(("/queue/", "/topic/")) or len(dest) <= len("/queue/"):
        raise InvalidOptionError(f"option 'destination' is {dest!r}; expected {expected}")
    return dest
