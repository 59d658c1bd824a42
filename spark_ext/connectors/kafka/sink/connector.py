"""Kafka sink: ``hzsink`` connector ``kafka`` (2PC exactly-once, idempotent at-least-once)."""

from __future__ import annotations

import dataclasses
import logging
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from pyspark.sql.types import StructType

from spark_ext.commit import Claim
from spark_ext.connector import SinkConnector
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient, Producer, kept_client
from spark_ext.connectors.kafka.sink.committer import OPEN_STATES, KafkaCommitter
from spark_ext.connectors.kafka.sink.config import SINK_OPTIONS, KafkaSinkConfig
from spark_ext.connectors.kafka.sink.input_schema import check_schema
from spark_ext.connectors.kafka.sink.topic import BATCH_FRAMING, TOPIC_KEYS, TopicRules
from spark_ext.errors import ConfigurationError, ConnectorError, RetriableCommitError, UnknownTopicError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from spark_ext.schemas.sink_options import column_format

if TYPE_CHECKING:
    from spark_ext.connectors.kafka.sink.writer import KafkaWriter
    from spark_ext.schemas.encoding import SinkFormat

log = logging.getLogger(__name__)



class TransactionTimeoutTooLongError(ConfigurationError):
    """``kafka.transaction.timeout.ms`` exceeds what the broker allows."""


class KafkaSink(SinkConnector[KafkaSinkConfig]):
    """``df.writeStream.format("hzsink").option("connector", "kafka")``."""

    name = "kafka"
    option_spec = SINK_OPTIONS
    id_option = "transactionalIdPrefix"

    def configure(self, options: Options, schema: StructType, guarantee: Guarantee) -> KafkaSinkConfig:
        cfg = KafkaSinkConfig.parse(options, guarantee)
        types = {f.name: f.dataType for f in schema.fields}
        formats: tuple[SinkFormat, ...] = ()
        if any(column_format(options, c) != "raw" for c in ("key", "value")):
            # The registry formats' writers load only for a query that uses one: the planning
            # and commit workers start at a query's first batch and pay every import.
            from spark_ext.schemas.encoding import SinkFormat

            found = (SinkFormat.parse(options, c, types.get(c), cfg.topic) for c in ("key", "value"))
            formats = tuple(f for f in found if f is not None)
        # A column written in a registry format is sent as the bytes its encoder makes.
        check_schema({n: "binary" if n in {f.column for f in formats} else t.simpleString()
                      for n, t in types.items()}, cfg.topic)
        return dataclasses.replace(cfg, formats=formats) if formats else cfg

    def validate(self, config: KafkaSinkConfig, schema: StructType) -> KafkaSinkConfig:
        """Step 1: the writer schemas registered, the topics exist and, for exactly-once, the
        broker accepts the timeout."""
        exactly = config.guarantee.transactional
        if config.formats:  # the writer schemas registered (or found) now, before any task encodes
            config = dataclasses.replace(config, formats=tuple(f.registered() for f in config.formats))
        _check_topics(config, exactly)
        config = _check_settings(config, exactly)
        if not exactly and config.txn_prefix:
            _refuse_if_left_open(config)
        return config

    def new_writer(self, config: KafkaSinkConfig, claim: Claim[Producer] | None) -> KafkaWriter:
        """A writer per guarantee: transactions, an idempotent producer, or acks=0. Executor:
        the writer's modules (NumPy, Arrow compute, the codecs) load there, never in the
        driver's planning and commit workers, which start at a query's first batch."""
        from spark_ext.connectors.kafka.sink.writer import (
            FireAndForgetKafkaWriter,
            IdempotentKafkaWriter,
            TransactionalKafkaWriter,
        )

        if config.guarantee is Guarantee.EXACTLY_ONCE:
            assert claim is not None, "exactly_once plans take the sink over first"
            return TransactionalKafkaWriter(config, claim)
        if config.guarantee is Guarantee.AT_LEAST_ONCE:
            return IdempotentKafkaWriter(config)
        return FireAndForgetKafkaWriter(config)

    def new_committer(self, config: KafkaSinkConfig) -> KafkaCommitter:
        return KafkaCommitter(config)

    def sets_aside(self, config: KafkaSinkConfig) -> str | None:
        return None  # records the topic would refuse are found before they are sent (rules.py)

    def target(self, config: KafkaSinkConfig) -> str | None:
        return f"kafka://{config.bootstrap}/{config.topic}" if config.topic else None


def _checking_client(cfg: KafkaSinkConfig) -> AbstractContextManager[KafkaTxnClient]:
    """The client of the start checks: its retries end after one request's timeout, so a
    broker that is down fails the query at start promptly."""
    return kept_client(cfg.bootstrap, cfg.timeout_s, cfg.security, cfg.timeout_s)


def _refuse_if_left_open(cfg: KafkaSinkConfig) -> None:
    """A weaker run never takes the sink over, so it would leave open what an exactly_once
    run of this sink left (read_committed consumers stall behind it until the broker's
    timeout; a decided batch would be written again): refuse, naming the ways out."""
    try:
        with kept_client(cfg.bootstrap, cfg.timeout_s, cfg.security, cfg.budget_s) as client:
            left = client.list_transactions(cfg.txn_pattern, OPEN_STATES)
    except Exception as e:  # noqa: BLE001 - a check the broker or its ACLs may not allow
        log.warning("could not list the open transactions of prefix %r (%s); a weaker guarantee cannot "
                    "tell whether an exactly_once run of this sink left some", cfg.txn_prefix, e)
        return
    if left:
        raise ConnectorError(
            f"{len(left)} transaction(s) of transactionalIdPrefix {cfg.txn_prefix!r} are still open "
            f"({left[0][0]}{', ...' if len(left) > 1 else ''}), left by an exactly_once run of this sink, "
            f"and this query runs with guarantee {cfg.guarantee.value}: restart it once with guarantee "
            "exactly_once to finish them, or resolve them with 'spark-ext doctor kafka resolve', then "
            "change the guarantee")


def _check_topics(cfg: KafkaSinkConfig, exactly: bool) -> None:
    wanted = sorted({t for t in (cfg.topic, cfg.commit_topic if exactly else None) if t})
    if exactly and not cfg.commit_topic:
        raise ConfigurationError(
            "with a 'topic' column and no 'topic' option, exactly_once needs option 'commitTopic': "
            "an existing topic (e.g. one the query writes to) whose consumer-group offsets record "
            "which batches are committed"
        )
    try:
        with _checking_client(cfg) as client:
            md = client.metadata(wanted)
    except (ConnectionError, OSError, RetriableCommitError) as e:
        raise ConnectorError(f"cannot reach Kafka at {cfg.bootstrap} ({e}); check "
                             "kafka.bootstrap.servers and that the brokers are up") from None
    for t in md.topics:
        if t.error_code != 0:
            raise UnknownTopicError(
                f"topic {t.name!r} does not exist on {cfg.bootstrap}; create it first (the sink does "
                "not auto-create topics, so a typo cannot create a stray topic)"
            )


def _check_settings(cfg: KafkaSinkConfig, exactly: bool) -> KafkaSinkConfig:
    """The broker's settings that would refuse our requests, in one request: the topic's
    max.message.bytes (a broker someone else configured may take batches smaller than the
    sink's kafka.batch.size: they are cut to fit) and, for exactly-once, the broker's
    transaction.max.timeout.ms (a longer transaction timeout would be refused)."""
    broker = ["transaction.max.timeout.ms"] if exactly else []
    # else: each refusal names its limit, and dead letters read each topic's rules in the task
    topic_keys = list(TOPIC_KEYS) if cfg.topic is not None else []
    try:
        with _checking_client(cfg) as client:
            ours, topic = client.configs(broker=broker, topic=cfg.topic, topic_keys=topic_keys)
    except Exception as e:
        if exactly:
            raise
        log.warning("could not read max.message.bytes of topic %r (%s); record batches stay at "
                    "kafka.batch.size=%d", cfg.topic, e, cfg.batch_bytes)
        return cfg
    limit = ours.get("transaction.max.timeout.ms")
    if limit is not None and cfg.txn_timeout_ms > int(limit):
        raise TransactionTimeoutTooLongError(
            f"kafka.transaction.timeout.ms is {cfg.txn_timeout_ms} but the broker's "
            f"transaction.max.timeout.ms is {limit}: the broker would refuse every transaction. Set "
            f"kafka.transaction.timeout.ms to at most {limit}, or raise the broker's limit"
        )
    if cfg.topic is not None:
        cfg = dataclasses.replace(cfg, topic_rules=TopicRules.of(topic))
    value = topic.get("max.message.bytes")
    if value is None:
        return cfg
    most = int(value)
    fit = max(1024, most - BATCH_FRAMING)
    if fit < cfg.batch_bytes:
        log.info("topic %r takes record batches of at most %d bytes (max.message.bytes): the sink's batches "
                 "are cut at %d bytes instead of kafka.batch.size=%d", cfg.topic, most, fit, cfg.batch_bytes)
        return dataclasses.replace(cfg, batch_bytes=fit, topic_max_bytes=most)
    return dataclasses.replace(cfg, topic_max_bytes=most)
