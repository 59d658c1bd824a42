"""Options of the queue sink (STOMP), parsed on the driver into a frozen, picklable config.

A password given inline travels inside the config to executors (they log in) but never
into a message or a log line (``__repr__``); one given by ``passwordFile`` / ``passwordEnv``
travels as the file's or variable's name and is read where each connection logs in.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_ext.connectors.jms.config import BROKER_OPTIONS, BrokerConfig
from spark_ext.errors import InvalidOptionError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Option, Options, OptionSpec, stable_sink_id

SINK_OPTIONS = OptionSpec.of(
    *BROKER_OPTIONS,
    Option("destination", "`/queue/<name>`; `/topic/<name>` with `at_least_once` or `none` only.",
           required=True),
    Option("guarantee", "`exactly_once`: tasks stage their messages, the driver moves a decided batch's "
           "into the destination; `at_least_once`: one STOMP transaction per task, committed by the task (a "
           "retried task or a replayed batch sends again); `none`: plain sends, flushed before the task "
           "ends.",
           default="exactly_once"),
    Option("sinkId", "Stable sink name (1-64 letters, digits, `_`, `-`, `.`); `exactly_once` needs it or a "
           "`checkpointLocation`.", shown="derived from `checkpointLocation`"),
    Option("persistent", "`persistent:true` on every message; `exactly_once` refuses false.", default=True),
    Option("connectTimeoutMs", "How long a login or a management call waits (ms).", default=10_000),
    Option("commitTimeoutMs", "How long moving the batch's messages into the destination may go without "
           "progress (ms); each management call moves at most 20,000.",
           default=120_000),
    Option("reconnectTimeoutMs", "How long every connection of the sink waits for a broker that is down, "
           "restarting or frozen before the query fails (ms; 0: fail at once); a refused login fails at "
           "once. The default outlasts a broker's failover to its backup.", default=180_000),
)

#: Every queue the sink keeps for itself starts with this (one security-setting covers them).
QUEUE_PREFIX = "spark_ext."


@dataclass(frozen=True, repr=False)
class JmsSinkConfig(BrokerConfig):
    """The queue sink's settings: the broker's, and the sink's own queues."""

    sink_id: str
    persistent: bool
    timeout_s: float
    commit_timeout_s: float

    @property
    def queue(self) -> str:
        """The destination's queue (and address) name on the broker."""
        return self.destination.split("/", 2)[2]

    @property
    def staging(self) -> str:
        """Where exactly-once tasks put their messages until the batch is decided."""
        return f"{QUEUE_PREFIX}{self.sink_id}.staging"

    @property
    def log(self) -> str:
        """The sink's record: its fencing epoch and the last decided batch."""
        return f"{QUEUE_PREFIX}{self.sink_id}.log"

    @property
    def lock(self) -> str:
        """A queue taking one consumer: whoever subscribes to it may append to the log."""
        return f"{QUEUE_PREFIX}{self.sink_id}.lock"

    @staticmethod
    def parse(opts: Options, guarantee: Guarantee) -> JmsSinkConfig:
        broker = BrokerConfig.broker_fields(opts, "/queue/<name> (or /topic/<name> without exactly_once)")
        dest = broker["destination"]
        if guarantee is Guarantee.EXACTLY_ONCE and dest.startswith("/topic/"):
            raise InvalidOptionError(
                f"option 'destination' is {dest!r}: exactly_once writes to a queue (/queue/<name>), "
                "because a decided batch is moved into the destination's queue by the broker. Write "
                "to a queue, or use guarantee at_least_once for a topic")
        spec = SINK_OPTIONS
        persistent = opts.get_bool("persistent", spec.default_bool("persistent"))
        if guarantee is Guarantee.EXACTLY_ONCE and not persistent:
            raise InvalidOptionError(
                "option 'persistent' is false, but exactly_once must store every message of a decided "
                "batch durably (a broker restart would lose non-persistent ones); drop the option or "
                "use guarantee at_least_once or none")
        return JmsSinkConfig(
            **broker,
            guarantee=guarantee,
            sink_id=_sink_id(opts, guarantee),
            persistent=persistent,
            timeout_s=spec.seconds_of(opts, "connectTimeoutMs", minimum=1),
            commit_timeout_s=spec.seconds_of(opts, "commitTimeoutMs", minimum=1),
            reconnect_timeout_s=spec.seconds_of(opts, "reconnectTimeoutMs", minimum=0),
        )


def _sink_id(opts: Options, guarantee: Guarantee) -> str:
    """``sinkId``, else derived from the checkpoint location (one checkpoint, one sink)."""
    return stable_sink_id(opts, "jms", guarantee is Guarantee.EXACTLY_ONCE,
                          "to find what a crashed run left") or "none"
