"""Options of the Kafka source, parsed once on the driver into a frozen config.

The option names are those of Spark's built-in ``kafka`` source, so a query can swap
``format("kafka")`` for ``format("hzsource").option("connector", "kafka")``. ``kafka.*``
options go to the client, librdkafka (confluent-kafka), whose property names match the
Java client's for everything common (``bootstrap.servers``, ``security.protocol``,
``sasl.mechanism``, ``ssl.*.location`` ...); the few Java-only spellings users copy from
Spark jobs are translated here, and anything the client does not know is rejected at
query start, naming the option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from spark_ext.connectors.kafka.client.security import (
    PLAINTEXT,
    KafkaSecurity,
    normalize,
    refuse_second_password,
)
from spark_ext.connectors.kafka.source.offsets import StartingOffsets, TopicPartition, parse_assign
from spark_ext.connectors.kafka.source.positions import duration_ms, position, strategy
from spark_ext.errors import InvalidOptionError, MissingOptionError
from spark_ext.options import Option, Options, OptionSpec, redact
from spark_ext.schemas.columns import FORMAT_OPTIONS, ColumnFormat
from spark_ext.secrets import Secret, secret, secret_options

SOURCE_OPTIONS = OptionSpec.of(
    Option("kafka.bootstrap.servers", "The brokers, `host:port,...`.", required=True),
    Option("subscribe", "A comma list of topics. Exactly one of `subscribe`, `subscribePattern`, `assign`; "
           "unknown topics and partitions fail at query start."),
    Option("subscribePattern", "A regular expression over topic names."),
    Option("assign", "JSON of topics and partitions, `{\"payments\": [0, 1]}`."),
    Option("startingOffsets", "`latest`, `earliest`, or JSON per partition with -2 = earliest, -1 = latest; "
           "JSON must name every subscribed partition.",
           shown="`latest` (streams), `earliest` (batch reads)"),
    Option("startingTimestamp", "Start every partition at its first record with a timestamp at or after "
           "this one (epoch ms). Wins over `startingOffsetsByTimestamp` and `startingOffsets`; a stream "
           "uses it only when it starts without a checkpoint.", shown="none"),
    Option("startingOffsetsByTimestamp", "The same per partition: `{\"payments\": {\"0\": 1700000000000}}`, "
           "naming every subscribed partition. Wins over `startingOffsets`.", shown="none"),
    Option("startingOffsetsByTimestampStrategy", "A partition with no record at or after its start "
           "timestamp: `error` fails the query naming it; `latest` starts it at its latest offset.",
           default="error"),
    Option("endingOffsets", "Batch reads only: `latest` or JSON.", shown="`latest`"),
    Option("endingTimestamp", "Batch reads only: end every partition before its first record with a "
           "timestamp at or after this one (none: at its latest offset). Wins over the other two.",
           shown="none"),
    Option("endingOffsetsByTimestamp", "Batch reads only: the same per partition (JSON as "
           "`startingOffsetsByTimestamp`). Wins over `endingOffsets`.", shown="none"),
    Option("maxOffsetsPerTrigger", "Admission control: at most this many records a batch, spread over "
           "partitions by backlog. PySpark 4.2 or later. (`Trigger.AvailableNow` is supported.)"),
    Option("minOffsetsPerTrigger", "Skip a trigger while fewer new records than this are available, "
           "until `maxTriggerDelay` passed since the last batch (the first trigger of a run never waits). "
           "At most `maxOffsetsPerTrigger`. Ignored by `Trigger.Once` and `Trigger.AvailableNow`. PySpark "
           "4.2 or later.", shown="none"),
    Option("maxTriggerDelay", "With `minOffsetsPerTrigger`: the longest a trigger is skipped (`15m`, "
           "`30s`, `500ms`; a bare number is ms).", default="15m"),
    Option("failOnDataLoss", "`true`: fail naming topic, partition and missing range; `false`: log once and "
           "continue from the earliest available offset.", default=True),
    Option("includeHeaders", "Add the column `headers array<struct<key string, value binary>>`.",
           default=False),
    Option("minPartitions", "Split offset ranges into at least this many Spark tasks (deterministically)."),
    Option("maxRecordsPerPartition", "Split offset ranges so no task reads more records than this."),
    Option("minRecordsPerPartition", "Small batches in fewer tasks: ranges share a Spark task until each "
           "task reads about this many records (never fewer tasks than `minPartitions`). A task costs tens "
           "of milliseconds whatever it reads; `0`: one task per range, as Spark's own source.",
           default=10_000),
    Option("kafkaConsumer.pollTimeoutMs", "How long a task or the planner waits through a broker outage "
           "(ms).",
           default=120_000),
    Option("fetchOffset.numRetries", "Retries of metadata calls on the driver.", default=3),
    Option("fetchOffset.retryIntervalMs", "Wait between those retries (ms).", default=10),
    Option("commitOffsetsToGroup", "Monitoring only: after each batch commits, its end offsets are "
           "committed to this consumer group, so `kafka-consumer-groups.sh --describe`, Burrow or a Kafka "
           "exporter show the query's lag. Never read back: the checkpoint decides what is read.",
           shown="none"),
    Option("groupIdPrefix", "The `group.id` the clients use; no group is joined and nothing is committed.",
           default="spark-ext-kafka-source"),
    Option("fetcher", "`auto`: `wire` wherever it speaks the cluster's security (plain text, `SSL`, "
           "`SASL_PLAINTEXT` / `SASL_SSL` with `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`), `librdkafka` "
           "otherwise (GSSAPI, OAUTHBEARER); or either by name.", default="auto"),
    Option("kafka.isolation.level", "`read_uncommitted` also returns records of aborted transactions.",
           default="read_committed"),
    Option("kafka.default.api.timeout.ms", "Bounds the driver's metadata calls (ms).", default=30_000),
    *secret_options(what="the SASL password (with `kafka.sasl.username`)"),
    *FORMAT_OPTIONS,
    Option("mode", "With a key or value format: `FAILFAST` fails the query at a record that cannot be read, "
           "naming its partition and offset; `PERMISSIVE` reads its key and value as null and adds the "
           "column `_corrupt_record` (topic, partition, offset, key, value as they came, and the error), "
           "null for the other records. A spark-ext sink with dead-letter options sets such records aside "
           "as dead letters under the batch's decision; without them it fails naming the record.",
           default="FAILFAST"),
    Option("kafka.*", "Client settings: security as in Spark's Kafka connector, or librdkafka's names. "
           "`kafka.auto.offset.reset`, `kafka.enable.auto.commit` and the deserializers are refused, as "
           "Spark refuses them."),
    prefixes=("kafka.",),
)

# Spark's own rules: these client settings would break offset tracking.
_REJECTED = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "offsets live in Spark's checkpoint; the source never commits to Kafka",
    "key.deserializer": "keys are always returned as binary; cast or decode them in the query",
    "value.deserializer": "values are always returned as binary; cast or decode them in the query",
    "interceptor.classes": "Java interceptors do not apply to this Python client",
    "enable.partition.eof": "the source manages it",
}

# Java spellings -> librdkafka spellings (security settings: ``normalize``).
_RENAMED = {"fetch.max.wait.ms": "fetch.wait.max.ms"}

# Java-only settings with no librdkafka counterpart that are safe to drop.
_IGNORED = frozenset({"max.poll.records", "default.api.timeout.ms", "request.timeout.ms"})

# Read fast: big fetches, a deep prefetch queue. Users may override each through kafka.*.
_DEFAULTS = {
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "10485760",
    "queued.min.messages": "500000",
}


def _client_options(opts: Options) -> dict[str, str]:
    raw = normalize(opts.with_prefix("kafka."))
    client: dict[str, str] = {}
    for name, value in raw.items():
        if name in _REJECTED:
            raise InvalidOptionError(
                f"Kafka option 'kafka.{name}' is not supported by hzsource connector 'kafka': "
                f"{_REJECTED[name]}"
            )
        if name in _IGNORED:
            continue
        if name == "isolation.level" and value not in ("read_committed", "read_uncommitted"):
            raise InvalidOptionError(
                f"option 'kafka.isolation.level' is {value!r}; expected read_committed or read_uncommitted"
            )
        client[_RENAMED.get(name, name)] = value
    return client


def _fetcher(opts: Options, client: dict[str, str], ref: Secret | None) -> tuple[str, KafkaSecurity]:
    """``wire`` (raw fetches, fastest) wherever it speaks the cluster's security (plain text,
    TLS, SASL PLAIN / SCRAM), ``librdkafka`` otherwise (GSSAPI, OAUTHBEARER, ...)."""
    choice = (opts.get_str("fetcher") or SOURCE_OPTIONS.default_str("fetcher")).lower()
    if choice not in ("auto", "wire", "librdkafka"):
        raise InvalidOptionError(f"option 'fetcher' is {choice!r}; expected auto, wire or librdkafka")
    refuse_second_password(client, ref)  # before the fallback below: refused whichever fetcher reads it
    try:
        security = KafkaSecurity.from_client(client, ref)
    except InvalidOptionError:
        if choice == "wire":
            raise
        return "librdkafka", PLAINTEXT  # librdkafka checks these settings itself
    return ("librdkafka" if choice == "librdkafka" else "wire"), security


@dataclass(frozen=True)
class Subscription:
    """Which partitions the query reads: one of ``subscribe``, ``subscribePattern``, ``assign``."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribepattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(f"{t}-{p}" for t, p in self.assigned)


def _subscription(opts: Options) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get_str(k) is not None]
    if len(given) != 1:
        what = "none of them" if not given else " and ".join(repr(g) for g in given)
        raise InvalidOptionError(
            f"hzsource connector 'kafka' needs exactly one of 'subscribe', 'subscribePattern' "
            f"or 'assign'; got {what}"
        )
    kind = given[0]
    value = opts.require(kind)
    if kind == "subscribe":
        topics = tuple(sorted({t.strip() for t in value.split(",") if t.strip()}))
        if not topics:
            raise InvalidOptionError(f"option 'subscribe' is {value!r}; expected a comma list of topics")
        return Subscription(kind, topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as e:
            raise InvalidOptionError(
                f"option 'subscribePattern' is {value!r}, not a valid regular expression ({e})"
            ) from None
        return Subscription(kind, pattern=value)
    return Subscription(kind, assigned=parse_assign(value))


@dataclass(frozen=True)
class KafkaSourceConfig:
    """Everything a reader needs, driver and executors alike. Picklable, no connections."""

    client: dict[str, str]
    subscription: Subscription
    starting: StartingOffsets
    ending: StartingOffsets
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    min_records_per_partition: int
    poll_timeout_ms: int
    metadata_timeout_s: float
    metadata_retries: int
    retry_interval_ms: int
    group_id: str = field(default="spark-ext-kafka-source")
    timestamp_strategy: str = "error"  # startingOffsetsByTimestampStrategy
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 900_000
    fetcher: str = "wire"
    security: KafkaSecurity = PLAINTEXT  # for the wire fetcher; librdkafka reads ``client``
    password_ref: Secret | None = None  # the SASL password by passwordFile / passwordEnv
    commit_group: str | None = None  # commitOffsetsToGroup
    formats: tuple[ColumnFormat, ...] = ()  # keyFormat / valueFormat other than raw
    permissive: bool = False  # mode PERMISSIVE: unreadable records as _corrupt_record

    @property
    def bootstrap(self) -> str:
        return self.client["bootstrap.servers"]

    def consumer_conf(self) -> dict[str, object]:
        """librdkafka settings for a consumer that is only ever assigned, never subscribed."""
        isolation = SOURCE_OPTIONS.default_str("kafka.isolation.level")
        conf: dict[str, object] = {**_DEFAULTS, "isolation.level": isolation, **self.librdkafka_client()}
        conf.update({
            "group.id": self.client.get("group.id", self.group_id),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        })
        return conf

    def librdkafka_client(self) -> dict[str, str]:
        """``client`` with a SASL password given by reference read now (librdkafka wants it)."""
        if self.password_ref is None:
            return self.client
        return {**self.client, "sasl.password": self.password_ref.reveal()}

    def safe_client(self) -> dict[str, str]:
        """The client settings with secrets masked, for logs and messages."""
        return redact(self.client)

    @staticmethod
    def parse(opts: Options, batch: bool = False) -> KafkaSourceConfig:
        """Check and parse the options. Driver, at ``load()`` and at query start.

        ``batch``: parsing for ``spark.read``, where ``startingOffsets`` defaults to earliest
        as in Spark.
        """
        SOURCE_OPTIONS.check(opts.raw(), "hzsource connector 'kafka'")
        client = _client_options(opts)
        if not client.get("bootstrap.servers", "").strip():
            raise MissingOptionError(
                "hzsource connector 'kafka' needs option 'kafka.bootstrap.servers' (host:port,...)"
            )
        ending = position(opts, "ending", None)
        if not ending.by_time and (ending.kind == "earliest" or -2 in ending.specific.values()):
            raise InvalidOptionError(
                "option 'endingOffsets' cannot be earliest (-2); use 'latest' or JSON offsets"
            )
        spec = SOURCE_OPTIONS
        api_timeout = spec.int_of(opts, "kafka.default.api.timeout.ms", minimum=1)
        ref = secret(opts)
        fetcher, security = _fetcher(opts, client, ref)
        prefix = opts.get_str("groupidprefix") or spec.default_str("groupIdPrefix")
        subscription = _subscription(opts)
        return KafkaSourceConfig(
            client=client,
            subscription=subscription,
            starting=position(opts, "starting", "earliest" if batch else "latest"),
            ending=ending,
            max_offsets_per_trigger=opts.get_int("maxOffsetsPerTrigger", minimum=1),
            fail_on_data_loss=opts.get_bool("failOnDataLoss", spec.default_bool("failOnDataLoss")),
            include_headers=opts.get_bool("includeHeaders", spec.default_bool("includeHeaders")),
            min_partitions=opts.get_int("minPartitions", minimum=1),
            max_records_per_partition=opts.get_int("maxRecordsPerPartition", minimum=1),
            min_records_per_partition=spec.int_of(opts, "minRecordsPerPartition", minimum=0),
            poll_timeout_ms=spec.int_of(opts, "kafkaConsumer.pollTimeoutMs", minimum=1),
            metadata_timeout_s=api_timeout / 1000.0,
            metadata_retries=spec.int_of(opts, "fetchOffset.numRetries", minimum=0),
            retry_interval_ms=spec.int_of(opts, "fetchOffset.retryIntervalMs", minimum=0),
            group_id=prefix,
            fetcher=fetcher,
            security=security,
            password_ref=ref,
            commit_group=_commit_group(opts),
            formats=column_formats(opts, subscription),
            permissive=_permissive(opts),
            timestamp_strategy=strategy(opts),
            **({} if batch else _pacing(opts)),
        )


def column_formats(opts: Options, subscription: Subscription) -> tuple[ColumnFormat, ...]:
    """Driver: ``keyFormat`` / ``valueFormat`` with their reader schemas, read from the
    registry now (the subject's default is the one subscribed topic's)."""
    topics = subscription.topics or tuple(sorted({t for t, _ in subscription.assigned}))
    found = (ColumnFormat.parse(opts, column, topics) for column in ("key", "value"))
    return tuple(f for f in found if f is not None)


def _permissive(opts: Options) -> bool:
    mode = (opts.get_str("mode") or SOURCE_OPTIONS.default_str("mode")).strip().upper()
    if mode not in ("FAILFAST", "PERMISSIVE"):
        raise InvalidOptionError(f"option 'mode' is {mode!r}; expected FAILFAST or PERMISSIVE")
    if mode == "PERMISSIVE" and not any(opts.get_str(f) not in (None, "raw")
                                        for f in ("keyformat", "valueformat")):
        raise InvalidOptionError("option mode PERMISSIVE applies to records read in a format (keyFormat or "
                                 "valueFormat avro); raw keys and values are always readable: drop it")
    return mode == "PERMISSIVE"


def _pacing(opts: Options) -> dict[str, Any]:
    """``minOffsetsPerTrigger`` / ``maxTriggerDelay``, refused as Spark refuses them."""
    low = opts.get_int("minOffsetsPerTrigger", minimum=0)
    high = opts.get_int("maxOffsetsPerTrigger", minimum=1)
    if low is not None and high is not None and low > high:
        raise InvalidOptionError(f"The value of minOffsetPerTrigger({low}) is higher than the "
                                 f"maxOffsetsPerTrigger({high}): lower minOffsetsPerTrigger or raise "
                                 "maxOffsetsPerTrigger")
    delay = opts.get_str("maxTriggerDelay") or SOURCE_OPTIONS.default_str("maxTriggerDelay")
    return {"min_offsets_per_trigger": low or None,
            "max_trigger_delay_ms": duration_ms("maxTriggerDelay", delay)}


def _commit_group(opts: Options) -> str | None:
    group = opts.get_str("commitoffsetstogroup")
    if group is not None and not group.strip():
        raise InvalidOptionError("option 'commitOffsetsToGroup' is empty; name the consumer group whose lag "
                                 "Kafka's tools should show, or drop the option")
    return group.strip() if group else None
