"""Options of the Kafka sink, parsed on the driver into a frozen, picklable config.

Names follow Spark's built-in Kafka sink (``kafka.bootstrap.servers``, ``topic``,
``kafka.*`` producer settings). The producer here speaks Kafka's protocol directly (the
driver must be able to finish a transaction a task began), so only the producer
settings it honours are accepted; any other ``kafka.*`` setting is refused at query
start, naming it, rather than silently ignored.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_ext.connectors.kafka.client.security import PLAINTEXT, SECURITY_KEYS, KafkaSecurity, normalize
from spark_ext.connectors.kafka.sink.topic import TopicRules
from spark_ext.errors import InvalidOptionError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Option, Options, OptionSpec
from spark_ext.schemas.sink_options import SINK_FORMAT_OPTIONS
from spark_ext.secrets import secret, secret_options

if TYPE_CHECKING:
    from spark_ext.schemas.encoding import SinkFormat

# Kafka's names -> the codec bits of a record batch's attributes.
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

SINK_OPTIONS = OptionSpec.of(
    Option("kafka.bootstrap.servers", "The brokers, any listener: plain text, `SSL`, `SASL_PLAINTEXT`, "
           "`SASL_SSL`.", required=True),
    Option("topic", "The topic when there is no `topic` column (and the one for rows whose `topic` is "
           "null)."),
    Option("guarantee", "`exactly_once`: Kafka transactions committed with the batch; `at_least_once`: "
           "idempotent producer, acknowledged before the task ends; `none`: `acks=0`.",
           default="exactly_once"),
    Option("transactionalIdPrefix", "Stable name of the sink's transactions; `exactly_once` needs it or a "
           "`checkpointLocation`.", shown="derived from `checkpointLocation`"),
    Option("commitTopic", "An existing topic whose consumer-group offsets record committed batches; "
           "required when rows name their topic in a column and there is no `topic` option.",
           shown="`topic`"),
    # The broker's default maximum (15 min): a driver killed after deciding a batch must be
    # back before its transactions time out, or their records are lost (Flink uses 1 h).
    Option("kafka.transaction.timeout.ms", "How long a batch's transactions may stay open (ms); must not "
           "exceed the broker's `transaction.max.timeout.ms` (checked at start).", default="900000"),
    Option("transactionTimeoutWarnFraction", "Warn when a batch took more than this share of the "
           "transaction timeout.", default=0.5),
    # Under the broker's default message.max.bytes (1 MiB + 12).
    Option("kafka.batch.size", "Bytes of one record batch.", default="1048000"),
    Option("kafka.compression.type", "`none`, `gzip`, `snappy`, `lz4` or `zstd`.", default="none"),
    Option("kafka.request.timeout.ms", "How long the client waits for a broker's answer (ms).",
           default="30000"),
    Option("kafka.delivery.timeout.ms", "How long one step (a send, a commit, a read of the sink's "
           "decisions) keeps retrying while brokers are away, frozen or moving leaders and coordinators "
           "(ms); then the task or the commit fails. At least `kafka.request.timeout.ms`.",
           default="120000"),
    *secret_options(what="the SASL password (with `kafka.sasl.username`)"),
    *SINK_FORMAT_OPTIONS,
    Option("kafka.*", "Security settings as in Spark's Kafka connector. Other producer settings are refused "
           "at start, naming the setting, except common Java ones that do not apply here (`acks`, "
           "`linger.ms`, serializers ...), which are ignored."),
    prefixes=("kafka.",),
)

# kafka.* settings this producer honours, with their defaults (the documented ones above).
_PRODUCER_DEFAULTS = {o.key[len("kafka."):]: str(o.default) for o in SINK_OPTIONS.documented
                      if o.key.startswith("kafka.") and o.default is not None}
# Settings users copy from Java jobs that change nothing here: accepted, ignored.
_HARMLESS = frozenset({"linger.ms", "acks", "enable.idempotence", "max.in.flight.requests.per.connection",
                       "retries", "key.serializer", "value.serializer",
                       "client.id", "buffer.memory", "max.request.size"})
_TXN_PREFIX = re.compile(r"^[A-Za-z0-9._\-]{1,200}$")


@dataclass(frozen=True)
class KafkaSinkConfig:
    """Everything writers and committers need. The SASL password rides inside ``security``
    (executors authenticate too) and is kept out of every ``repr``."""

    bootstrap: str
    topic: str | None
    commit_topic: str | None
    txn_prefix: str
    checkpoint: str | None
    guarantee: Guarantee
    txn_timeout_ms: int
    batch_bytes: int
    codec: int
    timeout_s: float  # one request
    warn_fraction: float
    security: KafkaSecurity = PLAINTEXT
    budget_s: float = 120.0  # one step, retries included
    topic_max_bytes: int | None = None  # the topic's max.message.bytes, read at start
    topic_rules: TopicRules | None = None  # what of it refuses single records, read at start
    formats: tuple[SinkFormat, ...] = ()  # keyFormat / valueFormat other than raw, with their schema ids

    @property
    def group(self) -> str:
        """The consumer group whose offsets on ``commit_topic`` record committed batches."""
        return f"{self.txn_prefix}.batches"

    def txn_id(self, partition: int, attempt: int, batch: int) -> str:
        """A task's transactional id: bounded by 2 x partitions x attempts.

        Batches alternate between two sets of ids: a zombie attempt of the previous batch
        (its executor froze and woke after Spark moved on) that initialises its id would
        otherwise fence, and so abort, the same id's winner of the batch being committed,
        after its decision. A retried *stage* restarts attempt numbers at 0, so its tasks
        fence the old stage's zombies by id (PySpark exposes no stage attempt number);
        that fails the commit loudly rather than duplicating anything.
        """
        return f"{self.txn_prefix}-p{partition}-a{attempt}-b{batch % 2}"

    @property
    def commit_txn_id(self) -> str:
        return f"{self.txn_prefix}-commit"

    @property
    def txn_pattern(self) -> str:
        """A regex matching exactly this sink's task transactional ids."""
        return re.escape(self.txn_prefix) + r"-p[0-9]+-a[0-9]+(-b[01])?"  # no -b: before the two sets

    @staticmethod
    def parse(opts: Options, guarantee: Guarantee) -> KafkaSinkConfig:
        SINK_OPTIONS.check(opts.raw(), "hzsink connector 'kafka'")
        client = normalize(opts.with_prefix("kafka."))
        security = KafkaSecurity.from_client(client, secret(opts))
        client = {k: v for k, v in client.items() if k not in SECURITY_KEYS}
        bootstrap = client.pop("bootstrap.servers")
        unknown = sorted(k for k in client if k not in _PRODUCER_DEFAULTS and k not in _HARMLESS)
        if unknown:
            raise InvalidOptionError(
                f"kafka.{unknown[0]} is not a producer setting this sink honours; supported: "
                f"{', '.join('kafka.' + k for k in sorted(_PRODUCER_DEFAULTS))} "
                "(and common Java settings that do not apply here, which are ignored)"
            )
        conf = {**_PRODUCER_DEFAULTS, **{k: v for k, v in client.items() if k in _PRODUCER_DEFAULTS}}
        codec = conf["compression.type"].lower()
        if codec not in CODECS:
            raise InvalidOptionError(f"option 'kafka.compression.type' is {codec!r}; use one of "
                                     f"{', '.join(CODECS)}")
        topic = opts.get_str("topic")
        prefix = _prefix(opts, guarantee)
        fraction = float(opts.get_str("transactiontimeoutwarnfraction")
                         or SINK_OPTIONS.default("transactionTimeoutWarnFraction"))
        if not 0 < fraction <= 1:
            raise InvalidOptionError("option 'transactionTimeoutWarnFraction' must be in (0, 1], e.g. 0.5")
        timeout_ms = _int(conf, "request.timeout.ms", 1000)
        budget_ms = _int(conf, "delivery.timeout.ms", 1000)
        if budget_ms < timeout_ms:
            raise InvalidOptionError(f"option 'kafka.delivery.timeout.ms' is {budget_ms}, below "
                                     f"'kafka.request.timeout.ms' ({timeout_ms}): one request could not "
                                     "finish within it; raise it to at least the request timeout")
        return KafkaSinkConfig(
            bootstrap=bootstrap, topic=topic, commit_topic=opts.get_str("committopic") or topic,
            txn_prefix=prefix, checkpoint=opts.checkpoint(), guarantee=guarantee,
            txn_timeout_ms=_int(conf, "transaction.timeout.ms", 1000),
            batch_bytes=_int(conf, "batch.size", 1024), codec=CODECS[codec],
            timeout_s=timeout_ms / 1000.0, warn_fraction=fraction, security=security,
            budget_s=budget_ms / 1000.0,
        )


def _int(conf: dict[str, str], name: str, minimum: int) -> int:
    try:
        value = int(conf[name])
    except ValueError:
        raise InvalidOptionError(f"option 'kafka.{name}' is {conf[name]!r}; expected an integer") from None
    if value < minimum:
        raise InvalidOptionError(f"option 'kafka.{name}' is {value}; it must be at least {minimum}")
    return value


def _prefix(opts: Options, guarantee: Guarantee) -> str:
    """``transactionalIdPrefix``, else derived from the checkpoint location."""
    given = opts.get_str("transactionalidprefix")
    if given is not None:
        if not _TXN_PREFIX.match(given):
            raise InvalidOptionError(f"option 'transactionalIdPrefix' is {given!r}; use 1-200 letters, "
                                     "digits, '.', '_' or '-'")
        return given
    ckpt = opts.checkpoint()
    if ckpt is not None:
        return "spark-ext-" + hashlib.sha256(ckpt.encode()).hexdigest()[:16]
    if guarantee is Guarantee.EXACTLY_ONCE:
        raise InvalidOptionError(
            "hzsink connector 'kafka' with guarantee exactly_once needs stable transactional ids to "
            "find its open transactions after a restart: set .option('checkpointLocation', ...) on "
            "writeStream, or .option('transactionalIdPrefix', ...)"
        )
    return "spark-ext-nontxn"
