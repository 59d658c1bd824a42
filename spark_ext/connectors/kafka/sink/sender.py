"""Produce requests to partition leaders, pipelined, riding out a broker restart. Executor.

Up to ``MAX_IN_FLIGHT`` requests per leader are unacknowledged at a time. When a leader
is lost (the connection drops, or it answers "not the leader" / "no leader yet", as
during a restart or a leader move), the new leader is asked which sequence number of
this producer it holds last per partition (``DescribeProducers``): unacknowledged
batches it already appended are dropped, the others are sent again, in order, one at
a time, until the client timeout. Asking first matters: a restarted broker remembers
only the last batch of each producer, so a batch it appended earlier, sent again, would
be refused as out of order rather than recognised as a duplicate. Any other refusal
fails the task; Spark retries it in a new transaction.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any

from kafka.errors import DuplicateSequenceNumberError, MessageSizeTooLargeError
from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from spark_ext.connectors.kafka.client import errors
from spark_ext.connectors.kafka.client.connection import Conn, metadata
from spark_ext.connectors.kafka.client.errors import error_name
from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.errors import ConnectorError
from spark_ext.retry import Backoff, Deadline

log = logging.getLogger(__name__)

PRODUCE_VERSION = 9  # below 12, where transaction protocol 2 begins
MAX_IN_FLIGHT = 5  # Kafka keeps idempotent ordering for up to 5 unacknowledged requests

Item = tuple[tuple[str, int], bytes, int]  # (topic, partition), encoded record batch, records


class _LeaderLost(Exception):
    def __init__(self, cause: str) -> None:
        super().__init__(cause)


class Sender:
    """Pipelined Produce requests to partition leaders; raises on a refused batch."""

    def __init__(self, cfg: KafkaSinkConfig, tid: str | None, acks: int) -> None:
        self.cfg, self.tid, self.acks = cfg, tid, acks
        self._leaders: dict[tuple[str, int], int] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, Conn] = {}
        self._pending: dict[int, list[Item]] = {}
        self.counts: dict[str, int] = {}

    def load(self, topics: list[str]) -> None:
        md = metadata(self.cfg.bootstrap, topics, self.cfg.timeout_s, self.cfg.security)
        self._brokers.update({b.node_id: (b.host, b.port) for b in md.brokers})
        for t in md.topics:
            if t.error_code == 0:
                self.counts[t.name] = len(t.partitions)
                for p in t.partitions:
                    self._leaders[(t.name, p.partition_index)] = p.leader_id

    def send(self, tp: tuple[str, int], records: bytes, count: int) -> None:
        while len(self._pending.get(self._leaders[tp], ())) >= MAX_IN_FLIGHT:
            self._receive(self._leaders[tp])
        # Looked up after the wait: a recovery in it replaces the leader's pending list and
        # may move the leader; appending to the old list would leave this batch's
        # acknowledgement unread.
        leader = self._leaders[tp]
        pending = self._pending.setdefault(leader, [])
        try:
            self._conn(leader).send(self._request(tp, records), PRODUCE_VERSION)
        except OSError as e:
            self._recover(leader, [*self._pending.pop(leader, []), (tp, records, count)], str(e))
            return
        if self.acks != 0:
            pending.append((tp, records, count))

    def flush(self) -> None:
        for leader in list(self._pending):
            while self._pending.get(leader):
                self._receive(leader)

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # --- internals ---------------------------------------------------------------------

    def _conn(self, leader: int) -> Conn:
        conn = self._conns.get(leader)
        if conn is None:
            conn = self._conns[leader] = Conn(*self._brokers[leader], self.cfg.timeout_s, self.cfg.security)
        return conn

    def _request(self, tp: tuple[str, int], records: bytes) -> Any:
        part = ProduceRequest.TopicProduceData.PartitionProduceData(index=tp[1], records=records)
        data = ProduceRequest.TopicProduceData(name=tp[0], partition_data=[part])
        return ProduceRequest(transactional_id=self.tid, acks=self.acks,
                              timeout_ms=int(self.cfg.timeout_s * 1000), topic_data=[data])

    def _receive(self, leader: int) -> None:
        pending = self._pending[leader]
        try:
            code, message = _code(self._conns[leader].receive(ProduceResponse, PRODUCE_VERSION))
        except OSError as e:
            self._recover(leader, self._pending.pop(leader), str(e))
            return
        if errors.is_retriable(code):  # the leader moved or is not there yet: send again
            self._recover(leader, self._pending.pop(leader), error_name(code))
            return
        tp, records, count = pending.pop(0)
        _check(code, message, tp, count, len(records), self.cfg.topic_max_bytes)

    def _recover(self, leader: int, items: list[Item], cause: str) -> None:
        """Send ``items`` again, in order and one at a time, to whichever broker leads
        their partitions now, until each is acknowledged or the client timeout passes."""
        conn = self._conns.pop(leader, None)
        if conn is not None:
            conn.close()
        if self.acks == 0:
            raise ConnectorError(f"lost the connection to Kafka while sending without acknowledgements "
                                 f"({cause}); the task fails and Spark retries it")
        log.warning("the leader of %s went away (%s); sending %s unacknowledged record batches again",
                    sorted({tp for tp, _, _ in items}), cause, len(items))
        deadline, delays = Deadline(self.cfg.budget_s), Backoff(0.1, 1.0).delays()
        while items:
            if deadline.expired:
                raise ConnectorError(f"Kafka did not take {len(items)} record batches again within "
                                     f"{self.cfg.budget_s:.0f} s (kafka.delivery.timeout.ms) after {cause}; "
                                     "the task fails and Spark retries it in a new transaction")
            time.sleep(min(next(delays), deadline.remaining))
            try:
                self.load(sorted({tp[0] for tp, _, _ in items}))
                held = self._last_sequences(items)
                items = [it for it in items if _last_sequence(it) > held.get(it[0], -1)]
                while items:
                    tp, records, count = items[0]
                    c = self._conn(self._leaders[tp])
                    code, message = _code(c.request(self._request(tp, records), PRODUCE_VERSION,
                                                    ProduceResponse))
                    if errors.is_retriable(code):  # the leader moved or is not there yet: send again
                        raise _LeaderLost(error_name(code))
                    _check(code, message, tp, count, len(records), self.cfg.topic_max_bytes)
                    items.pop(0)
            except (OSError, _LeaderLost) as e:
                cause = str(e)
                self.close()


    def _last_sequences(self, items: list[Item]) -> dict[tuple[str, int], int]:
        """Per partition of ``items``: the last sequence number of their producer the
        leader holds (absent: none)."""
        pid = _producer_id(items[0])
        by_leader: dict[int, dict[str, list[int]]] = {}
        for tp, _, _ in items:
            by_leader.setdefault(self._leaders[tp], {}).setdefault(tp[0], []).append(tp[1])
        out: dict[tuple[str, int], int] = {}
        T_ = DescribeProducersRequest.TopicRequest
        for leader, topics in by_leader.items():
            req = DescribeProducersRequest(topics=[T_(name=t, partition_indexes=sorted(set(ps)))
                                                   for t, ps in topics.items()])
            r = self._conn(leader).request(req, 0, DescribeProducersResponse)
            for t in r.topics:
                for p in t.partitions:
                    if errors.is_retriable(p.error_code):
                        raise _LeaderLost(error_name(p.error_code))
                    if p.error_code:
                        raise ConnectorError(f"describing the producers of {t.name}-{p.partition_index}: "
                                             f"{error_name(p.error_code)}")
                    for s in p.active_producers:
                        if s.producer_id == pid:
                            out[(t.name, p.partition_index)] = s.last_sequence
        return out


# A v2 record batch's header: the producer id at byte 43, the base sequence at 53.
def _producer_id(item: Item) -> int:
    return int(struct.unpack_from(">q", item[1], 43)[0])


def _last_sequence(item: Item) -> int:
    return int(struct.unpack_from(">i", item[1], 53)[0]) + item[2] - 1


def _code(r: Any) -> tuple[int, str]:
    for t in r.responses:
        for p in t.partition_responses:
            if p.error_code:
                return p.error_code, p.error_message or ""
    return 0, ""


def _check(code: int, message: str, tp: tuple[str, int], count: int, size: int = 0,
           limit: int | None = None) -> None:
    if code == errors.OK or errors.matches(code, DuplicateSequenceNumberError):
        return  # a duplicate the broker dropped: it holds the first copy
    if errors.matches(code, MessageSizeTooLargeError):
        allowed = f"max.message.bytes = {limit}" if limit else "max.message.bytes (1 MiB + 12 by default)"
        raise ConnectorError(
            f"Kafka refused a record batch of {size:,} bytes ({count} record(s)) for {tp[0]}-{tp[1]}: the "
            f"topic's {allowed}. The sink cuts batches to fit, so a single record is larger than the "
            "topic takes: make it smaller (or compress, kafka.compression.type), or raise the topic's "
            "max.message.bytes; a retry of the task fails the same way. Nothing of the task was committed")
    raise ConnectorError(
        f"Kafka refused {count} records for {tp[0]}-{tp[1]}: {error_name(code)}"
        f"{' (' + message + ')' if message else ''}; the task fails and Spark retries it in a new "
        "transaction"
    )
