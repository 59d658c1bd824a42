"""Driver-side Kafka metadata: which partitions exist and their earliest / latest offsets.

Lives in the stream reader's long-lived driver process (one admin client per query), is
never pickled to executors, and connects on first use, not in ``__init__``. "Latest"
is the last stable offset under ``read_committed`` (the high watermark otherwise), so a
batch never waits on an open transaction.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import TypeVar, cast

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
)
from confluent_kafka import (
    TopicPartition as KTopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.connectors.kafka.source.offsets import PartitionOffsets, TopicPartition, describe
from spark_ext.errors import ConnectorError, InvalidOptionError, UnknownTopicError
from spark_ext.retry import Backoff, retry

log = logging.getLogger(__name__)

T = TypeVar("T")

# Consumer-only librdkafka properties: an admin client would log a warning for each.
_CONSUMER_ONLY = re.compile(
    r"^(group\.|isolation\.level|enable\.partition\.eof|auto\.offset\.reset|enable\.auto\.|fetch\.|"
    r"queued\.|max\.partition\.fetch\.bytes|check\.crcs|session\.timeout\.ms|heartbeat\.|"
    r"partition\.assignment\.strategy|max\.poll\.interval\.ms)"
)


def client_error(cfg: KafkaSourceConfig, e: KafkaException, doing: str) -> Exception:
    """A clear error for a client failure; never includes client settings' secret values."""
    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    text = err.str() if err is not None else str(e)
    if "No such configuration property" in text or "Invalid value" in text:
        return InvalidOptionError(
            f"Kafka client setting rejected while {doing}: {text}. Options prefixed 'kafka.' go to "
            "librdkafka; see its CONFIGURATION.md for the valid names and values"
        )
    return ConnectorError(
        f"Kafka at {cfg.bootstrap} failed while {doing}: {text}. Check 'kafka.bootstrap.servers', "
        "that the brokers are up, and the security settings"
    )


def _vanished(e: KafkaException) -> bool:
    """Is ``e`` a partition's answer that its topic or partition does not exist (now)?"""
    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    return err is not None and err.code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
    )


class KafkaMetadata:
    """Partitions and offsets of one query's subscription. Driver only."""

    def __init__(self, cfg: KafkaSourceConfig) -> None:
        self._cfg = cfg
        conf: dict[str, str | int | float | bool] = {
            k: v for k, v in cfg.librdkafka_client().items() if not _CONSUMER_ONLY.match(k)
        }
        try:
            self._admin = AdminClient(conf)
        except KafkaException as e:
            raise client_error(cfg, e, "creating the admin client") from None
        self._level = (
            IsolationLevel.READ_UNCOMMITTED
            if cfg.client.get("isolation.level") == "read_uncommitted"
            else IsolationLevel.READ_COMMITTED
        )

    def _retry(self, doing: str, fn: Callable[[], T]) -> T:
        """Retry errors librdkafka marks retriable, ``metadataRetries`` times; others fail at once."""
        def once() -> T:
            try:
                return fn()
            except KafkaException as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if err is not None and err.retriable():
                    raise
                raise client_error(self._cfg, e, doing) from None

        interval = self._cfg.retry_interval_ms / 1000.0
        return retry(once, what=doing, retry_on=KafkaException, attempts=self._cfg.metadata_retries + 1,
                     backoff=Backoff(initial_s=interval, max_s=interval),
                     give_up=lambda e: client_error(self._cfg, cast(KafkaException, e), doing))

    def _topics(self) -> dict[str, int]:
        """Every non-internal topic with its partition count."""

        def fetch() -> dict[str, int]:
            md = self._admin.list_topics(timeout=self._cfg.metadata_timeout_s)
            return {
                name: len(t.partitions)
                for name, t in md.topics.items()
                if t.error is None and not name.startswith("__")
            }

        return self._retry("listing topics", fetch)

    def partitions(self, strict: bool = False) -> list[TopicPartition]:
        """The subscription's current partitions, sorted.

        ``strict`` (query start): a subscribed topic or assigned partition that does not
        exist is an error naming it, since no data could ever be read from it.
        """
        topics = self._topics()
        sub = self._cfg.subscription
        if sub.kind == "subscribepattern":
            rx = re.compile(sub.pattern or "")
            return sorted((t, p) for t, n in topics.items() if rx.fullmatch(t) for p in range(n))
        if sub.kind == "subscribe":
            missing = [t for t in sub.topics if t not in topics]
            if strict and missing:
                raise UnknownTopicError(
                    f"topic(s) {', '.join(missing)} do not exist on {self._cfg.bootstrap} (Kafka's "
                    "UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition); "
                    "create them first (readers never auto-create topics) or fix option 'subscribe'"
                )
            return sorted((t, p) for t in sub.topics if t in topics for p in range(topics[t]))
        missing_tp = [(t, p) for t, p in sub.assigned if p >= topics.get(t, 0)]
        if strict and missing_tp:
            raise UnknownTopicError(
                f"assigned partition(s) {describe(missing_tp)} do not exist on {self._cfg.bootstrap}; "
                "fix option 'assign'"
            )
        return [tp for tp in sub.assigned if tp not in missing_tp]

    def _offsets(self, tps: Iterable[TopicPartition], spec: OffsetSpec, doing: str) -> PartitionOffsets:
        tps = list(tps)
        if not tps:
            return {}

        def fetch() -> PartitionOffsets:
            req = {KTopicPartition(t, p): spec for t, p in tps}
            futures = self._admin.list_offsets(
                req, isolation_level=self._level, request_timeout=self._cfg.metadata_timeout_s
            )
            got: PartitionOffsets = {}
            gone: list[TopicPartition] = []
            for k, f in futures.items():
                try:
                    got[(k.topic, k.partition)] = f.result().offset
                except KafkaException as e:
                    if not _vanished(e):
                        raise
                    gone.append((k.topic, k.partition))
            if gone:
                # Deleted between the listing and this lookup (the broker's listing can name a
                # topic for a moment after its deletion): answered as the listing would have
                # been a moment later, without it. Callers treat a partition missing from the
                # answer as missing from the cluster (failOnDataLoss decides), as Spark does.
                log.info("partition(s) %s vanished while %s; left out", describe(sorted(gone)), doing)
            unknown = sorted(tp for tp, o in got.items() if o < 0)
            if unknown:
                # A partition without a leader just now (one frozen or moving) answers no
                # offset (-1001); that is not an end offset, and read as one it would look
                # like truncation. Ask again.
                raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE,
                                                f"no offset known for {describe(unknown)}", retriable=True))
            return got

        return self._retry(doing, fetch)

    def for_timestamps(self, stamps: dict[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """Per partition, the earliest offset whose record timestamp is at or after the
        given one (epoch ms); None where no record is that late."""
        if not stamps:
            return {}

        def fetch() -> dict[TopicPartition, int | None]:
            req = {KTopicPartition(t, p): OffsetSpec.for_timestamp(ts) for (t, p), ts in stamps.items()}
            futures = self._admin.list_offsets(
                req, isolation_level=self._level, request_timeout=self._cfg.metadata_timeout_s
            )
            got = {(k.topic, k.partition): f.result().offset for k, f in futures.items()}
            unknown = sorted(tp for tp, o in got.items() if o < -1)
            if unknown:  # as in _offsets: no leader just now (-1 is "no record that late")
                raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE,
                                                f"no offset known for {describe(unknown)}", retriable=True))
            return {tp: None if o == -1 else o for tp, o in got.items()}

        return self._retry("reading offsets by timestamp", fetch)

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._offsets(tps, OffsetSpec.earliest(), "reading earliest offsets")

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._offsets(tps, OffsetSpec.latest(), "reading latest offsets")

    def close(self) -> None:
        # AdminClient has no close(); dropping the reference ends its threads.
        self._admin = None  # type: ignore[assignment]
