"""Executor side of the Kafka sink: one task's rows -> one prepared Kafka transaction.

``exactly_once``: the task initialises its transactional id (``<prefix>-p<partition>-
a<attempt>``; this fences any older holder of the id and aborts what it left open),
adds the partitions it writes to the transaction, produces every record, waits for
every acknowledgement, and returns a ``KafkaCommittable`` naming (transactional id,
producer id, epoch). It never commits: the driver does (``committer.py``).
``at_least_once``: an idempotent producer (producer id and sequence numbers, so broker
retries never duplicate), every record acknowledged before the task ends.
``none``: ``acks=0``, no waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from connectors.kafka.client.connection import Conn, metadata
from connectors.kafka.client.transactions import KafkaTxnClient, Producer, error_name
from connectors.kafka.sink.config import KafkaSinkConfig
from connectors.kafka.sink.records import Batcher, Partitioner, column_lists
from spark_ext import failpoints
from spark_ext.commit import Claim, Committable, SinkWriter, TaskInfo
from spark_ext.errors import ConnectorError, SparkExtError
from spark_ext.guarantees import Guarantee

log = logging.getLogger(__name__)

PRODUCE_VERSION = 9  # below 12, where transaction protocol 2 begins
MAX_IN_FLIGHT = 5  # Kafka keeps idempotent ordering for up to 5 unacknowledged requests


@dataclass(frozen=True)
class KafkaCommittable(Committable):
    """One task attempt's prepared transaction (executor -> driver)."""

    query_id: str
    transactional_id: str
    producer_id: int
    epoch: int
    partitions: tuple[tuple[str, int], ...]
    started_ms: int
    skipped: bool  # a replay of a batch already committed: nothing was written
    commit_producer: Producer | None  # the claim's fence, which step 4b writes the decision with

    @property
    def producer(self) -> Producer:
        return Producer(self.transactional_id, self.producer_id, self.epoch)


class _Sender:
    """Pipelined Produce requests to partition leaders; raises on any refused batch."""

    def __init__(self, cfg: KafkaSinkConfig, tid: str | None, acks: int) -> None:
        self.cfg, self.tid, self.acks = cfg, tid, acks
        self._leaders: dict[tuple[str, int], int] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, Conn] = {}
        self._pending: dict[int, list[tuple[tuple[str, int], int]]] = {}
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
        leader = self._leaders[tp]
        conn = self._conns.get(leader)
        if conn is None:
            conn = self._conns[leader] = Conn(*self._brokers[leader], self.cfg.timeout_s, self.cfg.security)
        pending = self._pending.setdefault(leader, [])
        while len(pending) >= MAX_IN_FLIGHT:
            self._receive(leader)
        Part = ProduceRequest.TopicProduceData.PartitionProduceData
        part = Part(index=tp[1], records=records)
        data = ProduceRequest.TopicProduceData(name=tp[0], partition_data=[part])
        req = ProduceRequest(transactional_id=self.tid, acks=self.acks,
                             timeout_ms=int(self.cfg.timeout_s * 1000), topic_data=[data])
        conn.send(req, PRODUCE_VERSION)
        if self.acks != 0:
            pending.append((tp, count))

    def _receive(self, leader: int) -> None:
        _tp, count = self._pending[leader].pop(0)
        r = self._conns[leader].receive(ProduceResponse, PRODUCE_VERSION)
        for t in r.responses:
            for p in t.partition_responses:
                if p.error_code:
                    raise ConnectorError(
                        f"Kafka refused {count} records for {t.name}-{p.index}: {error_name(p.error_code)}"
                        f"{' (' + p.error_message + ')' if p.error_message else ''}; the task fails and "
                        "Spark retries it in a new transaction"
                    )

    def flush(self) -> None:
        for leader, pending in self._pending.items():
            while pending:
                self._receive(leader)

    def close(self) -> None:
        for c in self._conns.values():
            c.close()


class KafkaWriter(SinkWriter[KafkaCommittable]):
    """Writes one task's rows; prepares (exactly-once) or flushes (weaker guarantees)."""

    def __init__(self, cfg: KafkaSinkConfig, claim: Claim[Producer] | None) -> None:
        self.cfg, self.claim = cfg, claim
        self._began = False  # a partition was added: the broker holds an open transaction

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> KafkaCommittable:
        """Executor, once per task attempt. Raising leaves the transaction to be aborted."""
        cfg, exactly = self.cfg, self.cfg.guarantee is Guarantee.EXACTLY_ONCE
        d = self.claim.last_decided if self.claim is not None else None
        if exactly and d is not None and d.query_id == task.query_id and task.batch_id <= d.batch_id:
            # step 3: a replay of a batch decided before a crash is already in Kafka.
            log.info("batch %s was committed before; writing nothing", task.batch_id)
            return self._message(task, Producer("", -1, -1), (), 0, skipped=True)
        client = KafkaTxnClient(cfg.bootstrap, cfg.timeout_s, cfg.security)
        started = int(time.time() * 1000)
        tid = cfg.txn_id(task.partition_id, task.attempt) if exactly else None
        sender = _Sender(cfg, tid, 0 if cfg.guarantee is Guarantee.NONE else -1)
        producer = Producer("", -1, -1)
        try:
            if cfg.guarantee is not Guarantee.NONE:
                producer = client.init_producer(tid, cfg.txn_timeout_ms)
            rows, touched = self._produce(batches, task, producer, sender, client, exactly)
        except BaseException:
            sender.close()
            if exactly and self._began:
                self._abort_quietly(client, producer)
            client.close()
            raise
        sender.close()
        client.close()
        failpoints.hit("kafka.after_write", task.batch_id, rows)  # acknowledged, not yet reported
        return self._message(task, producer, tuple(sorted(touched)), rows, started_ms=started)

    def _produce(self, batches: Iterator[pa.RecordBatch], task: TaskInfo, producer: Producer,
                 sender: _Sender, client: KafkaTxnClient, exactly: bool) -> tuple[int, set[tuple[str, int]]]:
        cfg = self.cfg
        if cfg.topic:
            sender.load([cfg.topic])
        part = Partitioner(cfg.topic, sender.counts, task.partition_id)
        batcher = Batcher(producer.producer_id, producer.epoch, exactly, cfg.codec, cfg.batch_bytes)
        touched: set[tuple[str, int]] = set()
        rows = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if "topic" in batch.schema.names and not cfg.topic:
                seen = set(batch.column("topic").drop_null().to_pylist())
                missing = [t for t in seen if t not in sender.counts]
                if missing:
                    sender.load(missing)
            targets = part.assign(batch)
            new = [tp for tp in targets.rows if tp not in touched]
            if new and exactly:
                by_topic: dict[str, list[int]] = {}
                for t, p in new:
                    by_topic.setdefault(t, []).append(p)
                self._began = True
                client.add_partitions(producer, by_topic)
            touched.update(new)
            ts = int(time.time() * 1000)
            for tp, idx in targets.rows.items():
                keys, values, headers = column_lists(batch, idx)
                for full_tp, data, count in batcher.add(tp, keys, values, headers, ts):
                    sender.send(full_tp, data, count)
            rows += batch.num_rows
        for tp, data, count in batcher.drain():
            sender.send(tp, data, count)
        sender.flush()
        return rows, touched

    @staticmethod
    def _abort_quietly(client: KafkaTxnClient, producer: Producer) -> None:
        try:
            client.end_txn(producer, commit=False)
        except (SparkExtError, OSError) as e:  # the committer or the next batch's recovery aborts it anyway
            log.warning("could not abort %s after a failed task: %s", producer.transactional_id, e)

    def _message(self, task: TaskInfo, p: Producer, parts: tuple[tuple[str, int], ...], rows: int, *,
                 skipped: bool = False, started_ms: int = 0) -> KafkaCommittable:
        return KafkaCommittable(
            batch_id=task.batch_id, partition_id=task.partition_id, attempt=task.attempt, rows=rows,
            query_id=task.query_id, transactional_id=p.transactional_id, producer_id=p.producer_id,
            epoch=p.epoch, partitions=parts, started_ms=started_ms, skipped=skipped,
            commit_producer=self.claim.fence if self.claim is not None else None,
        )

