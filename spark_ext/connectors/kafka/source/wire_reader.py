"""The fast read path: raw Fetch requests, record batches decoded in C (``codec``).

Executor side, one blocking connection per range to the partition's leader, kept by the
worker process for later tasks (``_Kept``). Measured
here (one core, 100-byte values): librdkafka via confluent-kafka hands Python about
370k records/s, because it builds one Python ``Message`` per record; kafka-python's
pure-Python decoder about 220k/s; raw Fetch responses (kafka-python's protocol classes
encode and decode the request and response) decoded by aiokafka's compiled
``DefaultRecordBatch`` about 850k/s, Arrow columns included, one Python object per record;
the response's record batches now go to Arrow columns in C without one (``codec``). So
plain-text clusters use this path and every other security setting goes through
librdkafka (option ``fetcher``).

Read-committed filtering follows Kafka's consumer (in ``codec``): a fetch response lists
the aborted transactions (producer id, first offset) overlapping it; a transactional batch
from a producer with an open abort is dropped until that producer's ABORT marker, and
control batches are never returned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse

from spark_ext.connectors.kafka import codec
from spark_ext.connectors.kafka.client import errors
from spark_ext.connectors.kafka.client.connection import Conn as _Conn
from spark_ext.connectors.kafka.client.connection import metadata
from spark_ext.connectors.kafka.client.security import KafkaSecurity
from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.connectors.kafka.source.librdkafka_reader import RangeReaderBase, watermarks
from spark_ext.connectors.kafka.source.offsets import KafkaRange
from spark_ext.errors import ConnectorError
from spark_ext.retry import Deadline

log = logging.getLogger(__name__)

_RECONNECT_S = 0.5  # between reconnects while a broker restarts or leadership moves

FETCH_VERSION = 11  # Kafka 2.3+ (4.x still serves it): isolation level, log start offset
# Errors that mean "ask the cluster again who leads this partition".
_OUT_OF_RANGE = 1  # OffsetOutOfRange: the position fell behind retention


class _Behind(ConnectionError):
    """The leader's high watermark sits at or below our position, short of the planned end:
    a leader just elected whose high watermark has not caught up yet, or a truncated log.
    Only time tells them apart."""

    def __init__(self, high: int) -> None:
        super().__init__(f"the leader's high watermark {high} is short of the planned end")
        self.high = high


@dataclass
class _Kept:
    """What an executor's Python worker keeps between tasks (Spark reuses it): who leads
    each partition, and idle connections per broker. A task takes a connection out while
    it reads, so two readers never share one."""

    leaders: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    idle: dict[tuple[str, int], list[_Conn]] = field(default_factory=dict)


_KEPT: dict[tuple[str, KafkaSecurity], _Kept] = {}


def _kept(cfg: KafkaSourceConfig) -> _Kept:
    return _KEPT.setdefault((cfg.bootstrap, cfg.security), _Kept())


class WireRangeReader(RangeReaderBase):
    """Reads ``[start, end)`` of one partition with raw fetches; yields Arrow batches."""

    def __init__(self, cfg: KafkaSourceConfig, rng: KafkaRange) -> None:
        super().__init__(cfg, rng)
        self._committed = cfg.consumer_conf()["isolation.level"] == "read_committed"
        self._timeout = cfg.metadata_timeout_s
        self._max_bytes = int(str(cfg.consumer_conf()["max.partition.fetch.bytes"]))
        self._reused = False  # the connection in use was kept from an earlier read

    def _where(self) -> str:
        return f"{self._rng.topic}-{self._rng.partition} at offset {self._pos}"

    def _leader(self) -> _Conn:
        """A connection to the partition's leader: one this process kept, else ask a
        bootstrap server who leads it (and every partition of its topic) and connect."""
        r, kept = self._rng, _kept(self._cfg)
        where = kept.leaders.get((r.topic, r.partition))
        if where is not None and kept.idle.get(where):
            self._reused = True
            return kept.idle[where].pop()
        self._reused = False
        md = metadata(self._cfg.bootstrap, [r.topic], self._timeout, self._cfg.security)
        brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        for t in md.topics:
            for p in t.partitions:
                if p.leader_id in brokers:
                    kept.leaders[(t.name, p.partition_index)] = brokers[p.leader_id]
        where = kept.leaders.get((r.topic, r.partition))
        if where is None:
            raise ConnectionError(f"no leader for {r.topic}-{r.partition} yet")
        return _Conn(*where, self._timeout, self._cfg.security)

    def _release(self, conn: _Conn, healthy: bool) -> None:
        """Keep a connection that answered its last request whole (no response is left
        half-read, so the next task can use it); close any other, forgetting the leader."""
        r, kept = self._rng, _kept(self._cfg)
        where = kept.leaders.get((r.topic, r.partition))
        if healthy and where is not None and (conn.host, conn.port) == where:
            kept.idle.setdefault(where, []).append(conn)
            return
        conn.close()
        if not healthy:
            kept.leaders.pop((r.topic, r.partition), None)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._rng.start >= self._rng.end:
            return
        conn: _Conn | None = None
        deadline = Deadline(self._cfg.poll_timeout_ms / 1000.0)  # reset whenever records arrive
        try:
            while self._pos < self._rng.end:
                before = self._pos
                try:
                    conn = conn or self._leader()
                    part = self._fetch(conn)
                    out = self._handle(part)  # raises ConnectionError when leadership moved
                except (OSError, ConnectionError) as e:
                    # Broker restarting or leadership moving: reconnect until the poll timeout.
                    stale = conn is not None and self._reused and not isinstance(e, _Behind)
                    if conn is not None:
                        self._release(conn, healthy=False)
                        conn = None
                    if stale:  # a kept connection the broker closed while idle: connect anew now
                        self._reused = False
                        continue
                    if isinstance(e, _Behind) and deadline.expired:
                        self._truncated(e.high)  # still short after the whole wait: the log was cut
                        continue
                    if deadline.expired:
                        raise ConnectorError(
                            f"cannot read {self._where()} from Kafka at {self._cfg.bootstrap} for "
                            f"{self._cfg.poll_timeout_ms} ms ({e}); check the brokers, or raise option "
                            "kafkaConsumer.pollTimeoutMs"
                        ) from None
                    log.warning("retrying read of %s after: %s", self._where(), e)
                    time.sleep(min(_RECONNECT_S, deadline.remaining))
                    continue
                if out is not None:
                    yield out
                if self._pos > before:
                    deadline.reset()
                elif deadline.expired:
                    raise ConnectorError(
                        f"no progress reading {self._where()} for {self._cfg.poll_timeout_ms} ms "
                        f"(high watermark {part.high_watermark}, last stable {part.last_stable_offset})"
                    )
            if conn is not None:
                self._release(conn, healthy=True)
                conn = None
        finally:
            if conn is not None:  # a failure or the task ended reading early: not kept
                self._release(conn, healthy=False)

    def _fetch(self, conn: _Conn) -> Any:
        r = self._rng
        part = FetchRequest.FetchTopic.FetchPartition(
            partition=r.partition, current_leader_epoch=-1, fetch_offset=self._pos, log_start_offset=-1,
            partition_max_bytes=self._max_bytes, last_fetched_epoch=-1,
        )
        req = FetchRequest(
            replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=self._max_bytes * 2,
            isolation_level=1 if self._committed else 0, session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=r.topic, partitions=[part])],
            forgotten_topics_data=[], rack_id="",
        )
        resp = conn.request(req, FETCH_VERSION, FetchResponse)
        return resp.responses[0].partitions[0]

    def _handle(self, part: Any) -> pa.RecordBatch | None:
        r = self._rng
        code = part.error_code
        if code == _OUT_OF_RANGE:
            # Error responses carry no watermarks: ask the leader through librdkafka (rare path).
            self._out_of_range(*watermarks(self._cfg, r.topic, r.partition))
            return None
        if errors.leader_moved(code):
            raise ConnectionError(f"{errors.error_name(code)} for {r.topic}-{r.partition}")
        if code != 0:
            raise ConnectorError(f"Kafka refused to serve {self._where()}: {errors.error_name(code)}")
        out = self._decode(part)
        if out is None and self._pos < r.end and part.high_watermark <= self._pos:
            raise _Behind(part.high_watermark)  # nothing left to read, yet short of ``end``
        return out

    def _decode(self, part: Any) -> pa.RecordBatch | None:
        r = self._rng
        aborted = [(a.first_offset, a.producer_id) for a in (part.aborted_transactions or ())]
        try:
            got = codec.decode(bytes(part.records or b""), self._pos, r.end, r.topic, r.partition,
                               self._committed, aborted, self._cfg.include_headers)
        except ValueError as e:
            raise ConnectorError(f"cannot read {self._where()}: {e}") from None
        self._pos = got.pos
        return got.batch
