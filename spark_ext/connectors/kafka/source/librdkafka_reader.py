"""Executor side: read one ``KafkaRange`` into Arrow record batches.

Runs inside ``read()`` in a Python worker on an executor, one consumer per range,
assigned (never subscribed, never committing). librdkafka fetches and decompresses in
its own threads and, under ``read_committed``, drops aborted records and control
records; we turn its messages into Arrow columns a batch at a time.

The range ends at the first record whose offset is ``>= end``, or at end-of-partition:
the driver planned ``end`` at or below the last stable offset, so reaching the end of
the partition means every wanted record was seen even when the last offsets of the
range are transaction markers or aborted records, which are never delivered.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.connectors.kafka.source.offsets import KafkaRange
from spark_ext.errors import ConnectorError, DataLossError
from spark_ext.retry import Deadline

log = logging.getLogger(__name__)

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_TS = pa.timestamp("us", tz="UTC")
_BATCH = 50_000
_OUT_OF_RANGE = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
_GONE = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC)


def _offset(m: Message) -> int:
    off = m.offset()
    assert off is not None, "records always carry an offset"
    return off


def _offsets(msgs: list[Message]) -> pa.Array:
    first, last = _offset(msgs[0]), _offset(msgs[-1])
    if last - first == len(msgs) - 1:
        # Offsets strictly increase, so a full span means no gaps: skip n method calls.
        return pa.array(np.arange(first, last + 1, dtype=np.int64))
    return pa.array(np.fromiter((m.offset() for m in msgs), np.int64, len(msgs)))


def to_arrow(msgs: list[Message], topic: str, partition: int, headers: bool) -> pa.RecordBatch:
    """Kafka messages -> one record batch in the source's column order."""
    n = len(msgs)
    stamps = np.array([m.timestamp() for m in msgs], dtype=np.int64).reshape(n, 2)
    cols: list[Any] = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        _offsets(msgs),
        pa.array(stamps[:, 1] * 1000, _TS),
        # librdkafka: 0 none, 1 create time, 2 log-append time; Java/Spark: -1, 0, 1.
        pa.array((stamps[:, 0] - 1).astype(np.int32)),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if headers:
        hs = [m.headers() for m in msgs]
        cols.append(pa.array(
            [[{"key": k, "value": v} for k, v in h] if h else None for h in hs],  # type: ignore[str-unpack]
            HEADERS_TYPE,
        ))
        names.append("headers")
    return pa.RecordBatch.from_arrays(cols, names=names)


def watermarks(cfg: KafkaSourceConfig, topic: str, partition: int,
               consumer: Consumer | None = None) -> tuple[int, int]:
    """The leader's earliest and latest (last stable under read_committed) offsets, uncached."""
    own = consumer is None
    c = Consumer(cfg.consumer_conf()) if consumer is None else consumer
    try:
        low, high = c.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=cfg.metadata_timeout_s, cached=False
        )
    except KafkaException as e:
        raise ConnectorError(f"cannot read the offsets of {topic}-{partition}: {e}") from None
    finally:
        if own:
            c.close()
    return int(low), int(high)


class RangeReaderBase:
    """What both fetchers share: the range, the position, and the data-loss policy."""

    def __init__(self, cfg: KafkaSourceConfig, rng: KafkaRange) -> None:
        self._cfg = cfg
        self._rng = rng
        self._pos = rng.start

    def _lost(self, msg: str, resume: int) -> None:
        """Records the batch planned to read are gone: fail, or skip to ``resume``."""
        if self._cfg.fail_on_data_loss:
            raise DataLossError(f"{msg}. Set option failOnDataLoss=false to skip them and continue")
        log.warning("%s; failOnDataLoss=false, continuing from offset %d", msg, resume)
        self._pos = max(self._pos, resume)

    def _out_of_range(self, low: int, high: int) -> None:
        """The broker refused our position: records deleted below it, or the log cut above."""
        r = self._rng
        if self._pos < low:
            self._lost(f"records {self._pos}..{min(low, r.end) - 1} of {r.topic}-{r.partition} no "
                       f"longer exist (earliest available offset is {low}): deleted by retention or "
                       "the topic was recreated", min(low, r.end))
        elif self._pos >= high:
            self._truncated(high)

    def _truncated(self, high: int) -> None:
        r = self._rng
        self._lost(f"{r.topic}-{r.partition} ends at offset {high} but the batch planned to read up to "
                   f"{r.end}: the partition was truncated (unclean leader election, or the topic was "
                   "deleted and recreated)", r.end)


class RangeReader(RangeReaderBase):
    """Reads ``[start, end)`` of one partition; yields record batches of up to 50k rows."""

    def _where(self) -> str:
        r = self._rng
        return f"{r.topic}-{r.partition} [{r.start}, {r.end})"

    def _watermarks(self, consumer: Consumer) -> tuple[int, int]:
        return watermarks(self._cfg, self._rng.topic, self._rng.partition, consumer)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        r, cfg = self._rng, self._cfg
        if r.start >= r.end:
            return
        try:
            consumer = Consumer(cfg.consumer_conf())
        except KafkaException as e:
            raise ConnectorError(f"cannot create a Kafka consumer for {self._where()}: {e}") from None
        try:
            yield from self._read(consumer)
        finally:
            consumer.close()

    def _read(self, consumer: Consumer) -> Iterator[pa.RecordBatch]:
        r, cfg = self._rng, self._cfg
        consumer.assign([TopicPartition(r.topic, r.partition, self._pos)])
        # Records reset the deadline below; errors and silence do not. The extra 0.5 s is
        # one consume() wait, so a record arriving at the very end of it still counts.
        deadline = Deadline(cfg.poll_timeout_ms / 1000.0 + 0.5)
        while self._pos < r.end:
            msgs = consumer.consume(num_messages=_BATCH, timeout=0.5)
            if deadline.expired:
                raise ConnectorError(
                    f"no records from Kafka at {cfg.bootstrap} for {cfg.poll_timeout_ms} ms while "
                    f"reading {self._where()}; check the brokers, or raise option "
                    "kafkaConsumer.pollTimeoutMs"
                )
            # Error events (end of partition, offset out of range...) arrive in line with records.
            errors = [i for i, m in enumerate(msgs) if m.error() is not None] + [len(msgs)]
            i = 0
            for e in errors:
                seg = msgs[i:e]
                if seg and _offset(seg[-1]) >= r.end:
                    seg = seg[:next(k for k, m in enumerate(seg) if _offset(m) >= r.end)]
                    if seg:
                        yield to_arrow(seg, r.topic, r.partition, cfg.include_headers)
                    self._pos = r.end
                    return
                if seg:
                    yield to_arrow(seg, r.topic, r.partition, cfg.include_headers)
                    self._pos = _offset(seg[-1]) + 1
                    deadline.reset()
                if e == len(msgs) or self._handle(consumer, msgs[e]):
                    break
                i = e + 1

    def _handle(self, consumer: Consumer, m: Message) -> bool:
        """Act on an error event; True when the rest of this poll's messages are stale."""
        err = m.error()
        assert err is not None
        r, code = self._rng, err.code()
        if code == KafkaError._PARTITION_EOF:
            if _offset(m) >= r.end:
                self._pos = r.end  # the partition ends at or after ``end``: all read
                return True
            # A follower or a fresh leader may lag; only the leader's watermark proves loss.
            _, high = self._watermarks(consumer)
            if high < r.end:
                self._truncated(high)
                return True
            return False
        if code in _OUT_OF_RANGE:
            self._out_of_range(*self._watermarks(consumer))
            if self._pos < r.end:
                consumer.assign([TopicPartition(r.topic, r.partition, self._pos)])
            return True
        if code in _GONE:
            self._lost(f"{r.topic}-{r.partition} no longer exists ({err.str()}); records "
                       f"{self._pos}..{r.end - 1} cannot be read", r.end)
            return True
        if err.fatal():
            raise ConnectorError(f"Kafka error while reading {self._where()}: {err.str()}")
        # librdkafka marks consumer errors non-retriable even when it retries them itself
        # (broker down, leader moving); keep polling until kafkaConsumer.pollTimeoutMs.
        log.warning("Kafka error while reading %s, still trying: %s", self._where(), err.str())
        return False
