"""Produce requests to partition leaders, pipelined, riding out a broker restart. Executor.

Batches are queued per partition and one request carries one batch of each partition a
leader leads, up to ``REQUEST_BYTES`` (as Kafka's own producer drains its accumulator):
a task that writes to 64 partitions sends a few requests, not 64 or more, and the broker
handles a few. Up to ``MAX_IN_FLIGHT`` requests per leader are unacknowledged at a time
(Kafka keeps a producer's order per partition over that many). When a connection drops
or a broker answers with a retriable error ("not the leader", "no leader yet", as during
a restart or a leader move), every unacknowledged batch, of every leader, is sent again
(without acknowledgements, ``acks=0``, the task fails instead): the leaders of every
topic are read anew, each is asked which sequence number of this producer it holds
last per partition (``DescribeProducers``), batches it appended before its last one are
dropped, and that last one and the rest are sent in order, one at a time, until
``kafka.delivery.timeout.ms``. Asking first matters: a restarted broker remembers only the
last batch of each producer, so a batch it appended earlier, sent again, would be refused
as out of order rather than recognised as a duplicate. The last one goes again because a
leader names what it appended before its followers copied it: acknowledged as a duplicate
once they have (``acks=all``), it is not lost with a leader that dies first. Only the same
producer epoch's sequence numbers count: a transactional id comes back every other batch
with the same producer id, a new epoch and sequence numbers from 0 again, so the last batch
the previous epoch left on a partition says nothing about this one's. Any other refusal
fails the task; Spark retries it in a new transaction.

Connections to leaders outlive the task (``_Idle``): Spark runs an executor's tasks one
after another in the same Python worker, and a new connection a task costs a TLS and SASL
handshake (16 ms of wall-clock and 5 ms of the task's CPU each on SASL_SSL here).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

from kafka.errors import DuplicateSequenceNumberError, MessageSizeTooLargeError
from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse
from kafka.protocol.producer.produce import ProduceResponse

from spark_ext.connectors.kafka.client import errors
from spark_ext.connectors.kafka.client.connection import Conn, metadata
from spark_ext.connectors.kafka.client.errors import error_name
from spark_ext.connectors.kafka.client.produce import PRODUCE_VERSION, encode_produce
from spark_ext.connectors.kafka.client.security import KafkaSecurity
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient
from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.errors import ConnectorError
from spark_ext.retry import Backoff, Deadline

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 5  # Kafka keeps idempotent ordering for up to 5 unacknowledged requests
REQUEST_BYTES = 1 << 20  # Kafka's producer's max.request.size; a larger single batch goes alone

Item = tuple[tuple[str, int], bytes, int]  # (topic, partition), encoded record batch, records
NO_ANSWER = (-1, "the broker's answer did not name this partition")  # -1: Kafka's UNKNOWN_SERVER_ERROR


_Key = tuple[str, int, float, KafkaSecurity]  # a broker's host and port, the connection's settings


class _Idle:
    """Connections to brokers this process keeps between tasks, by address and settings.
    Only a connection whose every request was answered comes back here, so the next task
    never reads a reply that is not its own. One idle longer than Kafka's own producer
    keeps one (``connections.max.idle.ms``, 9 minutes, under the broker's 10) is closed
    instead; one the broker closed meanwhile fails its first request and is recovered from
    like any dropped connection."""

    MAX_IDLE_S = 540.0
    MAX_KEPT = 8

    def __init__(self) -> None:
        self._conns: OrderedDict[_Key, list[tuple[float, Conn]]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: _Key) -> Conn | None:
        with self._lock:
            kept = self._conns.get(key, [])
            while kept:
                since, conn = kept.pop()
                if time.monotonic() - since < self.MAX_IDLE_S:
                    return conn
                conn.close()
        return None

    def keep(self, key: _Key, conn: Conn) -> None:
        with self._lock:
            self._conns.setdefault(key, []).append((time.monotonic(), conn))
            self._conns.move_to_end(key)
            while sum(len(v) for v in self._conns.values()) > self.MAX_KEPT:
                oldest = next(iter(self._conns))
                self._conns[oldest].pop(0)[1].close()
                if not self._conns[oldest]:
                    del self._conns[oldest]


_idle = _Idle()


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
        # Batches not sent yet, per partition in sequence order; the oldest partition first.
        self._ready: dict[tuple[str, int], list[Item]] = {}
        self._ready_bytes = 0
        self._pending: dict[int, list[list[Item]]] = {}  # per leader: requests sent, not acknowledged
        self.counts: dict[str, int] = {}

    def load(self, topics: list[str], client: KafkaTxnClient | None = None) -> None:
        """Who leads each partition of ``topics``: asked over ``client``'s open connection
        when given (a kept client's, no handshake), else over a new one."""
        md = client.metadata(topics) if client is not None else None
        if md is None or not md.brokers:  # a broker resuming from a pause lists none: wait
            md = metadata(self.cfg.bootstrap, topics, self.cfg.timeout_s, self.cfg.security)
        self._brokers.update({b.node_id: (b.host, b.port) for b in md.brokers})
        for t in md.topics:
            if t.error_code == 0:
                self.counts[t.name] = len(t.partitions)
                for p in t.partitions:
                    self._leaders[(t.name, p.partition_index)] = p.leader_id

    def send(self, tp: tuple[str, int], records: bytes, count: int) -> None:
        """Queue a batch for ``tp``; requests go out once ``REQUEST_BYTES`` are queued, and
        at ``flush``."""
        self._ready.setdefault(tp, []).append((tp, records, count))
        self._ready_bytes += len(records)
        while self._ready_bytes >= REQUEST_BYTES:
            self._ship(self._leaders[next(iter(self._ready))])

    def flush(self) -> None:
        while self._ready:
            self._ship(self._leaders[next(iter(self._ready))])
        for leader in list(self._pending):
            while self._pending.get(leader):
                self._receive(leader)

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def release(self) -> None:
        """After a ``flush`` that returned: every request was answered, so the connections
        go to the next task of this process. Not without acknowledgements (``acks=0``): a
        broker reports a refused request then by closing the connection, which the next
        task would find, and fail on, instead of this one."""
        if self.acks == 0 or self._ready or any(self._pending.values()):
            self.close()
            return
        for c in self._conns.values():
            _idle.keep(self._key(c.host, c.port), c)
        self._conns.clear()

    def _key(self, host: str, port: int) -> _Key:
        return (host, port, self.cfg.timeout_s, self.cfg.security)

    # --- internals ---------------------------------------------------------------------

    def _ship(self, leader: int) -> None:
        """Send one request to ``leader``: the oldest queued batch of each partition it
        leads, up to ``REQUEST_BYTES``, once fewer than ``MAX_IN_FLIGHT`` of its requests
        are unacknowledged."""
        while len(self._pending.get(leader, ())) >= MAX_IN_FLIGHT:
            self._receive(leader)
        # Chosen after the wait: a recovery in it reloads the leaders and leaves nothing in
        # flight, so a partition that moved goes to its new leader after its earlier batches.
        items: list[Item] = []
        size = 0
        for tp in list(self._ready):
            if self._leaders[tp] != leader:
                continue
            queue = self._ready[tp]
            if items and size + len(queue[0][1]) > REQUEST_BYTES:
                continue
            items.append(queue.pop(0))
            size += len(items[-1][1])
            if not queue:
                del self._ready[tp]
        self._ready_bytes -= size
        if not items:
            return
        # Looked up after the wait: a recovery in it clears every pending list;
        # appending to the old list would leave this request's acknowledgement unread.
        pending = self._pending.setdefault(leader, [])
        try:
            self._conn(leader).send_parts(self._request(items))
        except OSError as e:
            self._recover(str(e), items)
            return
        if self.acks != 0:
            pending.append(items)

    def _conn(self, leader: int) -> Conn:
        conn = self._conns.get(leader)
        if conn is None:
            if leader not in self._brokers:  # -1: no leader elected yet
                raise ConnectionRefusedError(f"no broker leads the partition now (leader {leader})")
            host, port = self._brokers[leader]
            conn = _idle.take(self._key(host, port)) or Conn(host, port, self.cfg.timeout_s,
                                                             self.cfg.security)
            self._conns[leader] = conn
        return conn

    def _request(self, items: list[Item]) -> Callable[[int], list[bytes]]:
        """The produce request of ``items``, for ``Conn.send_parts``."""
        batches = [(topic, partition, records) for (topic, partition), records, _ in items]
        return partial(encode_produce, transactional_id=self.tid, acks=self.acks,
                       timeout_ms=int(self.cfg.timeout_s * 1000), batches=batches)

    def _receive(self, leader: int) -> None:
        pending = self._pending[leader]
        try:
            codes = _codes(self._conns[leader].receive(ProduceResponse, PRODUCE_VERSION))
        except OSError as e:
            self._recover(str(e))
            return
        retry = next((c for c, _ in codes.values() if errors.is_retriable(c)), None)
        if retry is not None:  # e.g. the leader moved or is not there yet: send again
            self._recover(error_name(retry))
            return
        for tp, records, count in pending.pop(0):
            code, message = codes.get(tp, NO_ANSWER)
            _check(code, message, tp, count, len(records), self.cfg.topic_max_bytes)

    def _recover(self, cause: str, unsent: list[Item] | None = None) -> None:
        """Send every unacknowledged batch again (of every leader: a connection to another
        may be closed here or hold replies the new requests would be matched to), then
        ``unsent``, in order and one at a time, to whichever broker leads their partitions
        now, until each is acknowledged or ``kafka.delivery.timeout.ms`` passes. Leaders
        change only here, with nothing left in flight (the writer loads only topics it has
        not seen), so a partition's batches never ride on two brokers at once."""
        items = [*(it for reqs in self._pending.values() for it in _flat(reqs)), *(unsent or [])]
        self._pending.clear()
        self.close()
        if self.acks == 0:
            raise ConnectorError(f"lost the connection to Kafka while sending without acknowledgements "
                                 f"({cause}); the task fails and Spark retries it")
        log.warning("a partition leader went away (%s); sending %s unacknowledged record batches of %s again",
                    cause, len(items), sorted({tp for tp, _, _ in items}))
        deadline, delays = Deadline(self.cfg.budget_s), Backoff(0.1, 1.0).delays()
        while items:
            if deadline.expired:
                raise ConnectorError(f"Kafka did not take {len(items)} record batches again within "
                                     f"{self.cfg.budget_s:.0f} s (kafka.delivery.timeout.ms) after {cause}; "
                                     "the task fails and Spark retries it in a new transaction")
            time.sleep(min(next(delays), deadline.remaining))
            try:
                # Every known topic: a queued batch of another topic may have lost its leader too.
                self.load(sorted(set(self.counts) | {tp[0] for tp, _, _ in items}))
                items = _unconfirmed(items, self._last_sequences(items))
                while items:
                    tp, records, count = items[0]
                    c = self._conn(self._leaders[tp])
                    c.send_parts(self._request([items[0]]))
                    code, message = _codes(c.receive(ProduceResponse, PRODUCE_VERSION)).get(tp, NO_ANSWER)
                    if errors.is_retriable(code):  # e.g. the leader moved: send again
                        raise _LeaderLost(error_name(code))
                    _check(code, message, tp, count, len(records), self.cfg.topic_max_bytes)
                    items.pop(0)
            except (OSError, _LeaderLost) as e:
                cause = str(e)
                self.close()


    def _last_sequences(self, items: list[Item]) -> dict[tuple[str, int], int]:
        """Per partition of ``items``: the last sequence number of their producer, in their
        epoch, the leader holds (absent: none)."""
        pid, epoch = _producer_id(items[0]), _producer_epoch(items[0])
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
                        if s.producer_id == pid and s.producer_epoch == epoch:
                            out[(t.name, p.partition_index)] = s.last_sequence
        return out


def _unconfirmed(items: list[Item], held: dict[tuple[str, int], int]) -> list[Item]:
    """``items`` to send again, given each partition's last sequence number its leader holds:
    those it does not hold, after the last one it does. A leader answers DescribeProducers
    from its own log, before its followers copy what it appended; sent again, that batch is
    a duplicate the leader acknowledges as the first copy would have been (with ``acks=all``,
    once the in-sync replicas hold it), so a leader lost before they copy it is noticed.
    Each partition's items are in sequence order."""
    last_held: dict[tuple[str, int], Item] = {}
    for it in items:
        if _last_sequence(it) <= held.get(it[0], -1):
            last_held[it[0]] = it
    return [it for it in items if _last_sequence(it) > held.get(it[0], -1) or last_held.get(it[0]) is it]


# A v2 record batch's header: the producer id at byte 43, its epoch at 51, the base sequence at 53.
def _producer_id(item: Item) -> int:
    return int(struct.unpack_from(">q", item[1], 43)[0])


def _producer_epoch(item: Item) -> int:
    return int(struct.unpack_from(">h", item[1], 51)[0])


def _last_sequence(item: Item) -> int:
    return int(struct.unpack_from(">i", item[1], 53)[0]) + item[2] - 1


def _flat(requests: list[list[Item]]) -> list[Item]:
    """Requests' batches in the order sent: each partition's batches stay in sequence order."""
    return [it for req in requests for it in req]


def _codes(r: Any) -> dict[tuple[str, int], tuple[int, str]]:
    """Each partition's error code and message in a produce response."""
    return {(t.name, p.index): (p.error_code, p.error_message or "")
            for t in r.responses for p in t.partition_responses}


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
