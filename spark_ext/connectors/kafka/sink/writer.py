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

from spark_ext import failpoints
from spark_ext.commit import Claim, Committable, SinkWriter, TaskInfo
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient, Producer
from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.connectors.kafka.sink.records import Batcher, Partitioner, column_lists
from spark_ext.connectors.kafka.sink.sender import Sender
from spark_ext.errors import SparkExtError
from spark_ext.guarantees import Guarantee

log = logging.getLogger(__name__)



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
        sender = Sender(cfg, tid, 0 if cfg.guarantee is Guarantee.NONE else -1)
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
                 sender: Sender, client: KafkaTxnClient, exactly: bool) -> tuple[int, set[tuple[str, int]]]:
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

