"""Kafka sink: ``hzsink`` connector ``kafka`` (2PC exactly-once, idempotent at-least-once)."""

from __future__ import annotations

from functools import partial

from pyspark.sql.types import StructType

from connectors.kafka.committer import KafkaCommitter
from connectors.kafka.protocol import metadata
from connectors.kafka.records import check_schema
from connectors.kafka.sink_config import SINK_OPTIONS, KafkaSinkConfig
from connectors.kafka.sink_writer import KafkaWriter, WriterConfig
from connectors.kafka.txn import KafkaTxnClient
from spark_ext.commit import NoOpCommitter, SinkPlan
from spark_ext.connector import SinkConnector
from spark_ext.errors import ConfigurationError, ConnectorError, UnknownTopicError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options


class TransactionTimeoutError(ConfigurationError):
    """``kafka.transaction.timeout.ms`` exceeds what the broker allows."""


class KafkaSink(SinkConnector):
    """``df.writeStream.format("hzsink").option("connector", "kafka")``."""

    name = "kafka"
    option_spec = SINK_OPTIONS

    def plan(self, options: Options, schema: StructType, guarantee: Guarantee, *,
             prepare: bool = True) -> SinkPlan:
        """Driver. ``prepare`` (before each batch): check the schema, the topics and the
        broker's timeout limit, then recover (fence older drivers, finish a decided batch,
        abort open transactions). Otherwise (commit/abort): options only, touching nothing."""
        cfg = KafkaSinkConfig.parse(options, guarantee)
        check_schema({f.name: f.dataType.simpleString() for f in schema.fields}, cfg.topic)
        exactly = guarantee is Guarantee.EXACTLY_ONCE
        if not prepare:
            wc = WriterConfig(cfg, None, None)  # the committer reads what it needs from the messages
            return SinkPlan(guarantee, partial(KafkaWriter, wc),
                            partial(KafkaCommitter, wc) if exactly else NoOpCommitter)
        _check_topics(cfg, exactly)
        decided = commit_producer = None
        if exactly:
            _check_timeout(cfg)
            commit_producer, decided = KafkaCommitter(WriterConfig(cfg, None, None)).take_over()
        wc = WriterConfig(cfg, decided, commit_producer)
        return SinkPlan(guarantee, partial(KafkaWriter, wc),
                        partial(KafkaCommitter, wc) if exactly else NoOpCommitter)


def _check_topics(cfg: KafkaSinkConfig, exactly: bool) -> None:
    wanted = sorted({t for t in (cfg.topic, cfg.commit_topic if exactly else None) if t})
    if exactly and not cfg.commit_topic:
        raise ConfigurationError(
            "with a 'topic' column and no 'topic' option, exactly_once needs option 'commitTopic': "
            "an existing topic (e.g. one the query writes to) whose consumer-group offsets record "
            "which batches are committed"
        )
    try:
        md = metadata(cfg.bootstrap, wanted, cfg.timeout_s)
    except (ConnectionError, OSError) as e:
        raise ConnectorError(f"cannot reach Kafka at {cfg.bootstrap} ({e}); check "
                             "kafka.bootstrap.servers and that the brokers are up") from None
    for t in md.topics:
        if t.error_code != 0:
            raise UnknownTopicError(
                f"topic {t.name!r} does not exist on {cfg.bootstrap}; create it first (the sink does "
                "not auto-create topics, so a typo cannot create a stray topic)"
            )


def _check_timeout(cfg: KafkaSinkConfig) -> None:
    client = KafkaTxnClient(cfg.bootstrap, cfg.timeout_s)
    try:
        limit = client.broker_config("transaction.max.timeout.ms")
    finally:
        client.close()
    if limit is not None and cfg.txn_timeout_ms > int(limit):
        raise TransactionTimeoutError(
            f"kafka.transaction.timeout.ms is {cfg.txn_timeout_ms} but the broker's "
            f"transaction.max.timeout.ms is {limit}: the broker would refuse every transaction. Set "
            f"kafka.transaction.timeout.ms to at most {limit}, or raise the broker's limit"
        )
