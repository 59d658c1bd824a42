"""Executor side of the Kafka sink: one task's rows -> one prepared Kafka transaction.

One writer class per guarantee. ``exactly_once`` (``TransactionalKafkaWriter``): the
task initialises its transactional id (``<prefix>-p<partition>-a<attempt>``; this
fences any older holder of the id and aborts what it left open), adds the partitions it
writes to the transaction, produces every record, waits for every acknowledgement, and
returns a ``KafkaCommittable`` naming (transactional id, producer id, epoch). It never
commits: the driver does (``committer.py``). ``at_least_once``
(``IdempotentKafkaWriter``): an idempotent producer (producer id and sequence numbers,
so broker retries never duplicate), every record acknowledged before the task ends.
``none`` (``FireAndForgetKafkaWriter``): ``acks=0``, no waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from spark_ext import failpoints
from spark_ext.commit import Claim, SinkWriter, TaskInfo
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient, Producer, kept_client
from spark_ext.connectors.kafka.sink.committable import KafkaCommittable
from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.connectors.kafka.sink.records import Batcher, Partitioner, columns
from spark_ext.connectors.kafka.sink.rules import Refused, bad_targets, refused_records
from spark_ext.connectors.kafka.sink.sender import Sender
from spark_ext.connectors.kafka.sink.topic import TOPIC_KEYS, TopicRules
from spark_ext.deadletters import Refusal, SetsAside
from spark_ext.errors import SparkExtError, UnwritableRowError

log = logging.getLogger(__name__)



class KafkaWriter(SinkWriter[KafkaCommittable], SetsAside):
    """Writes one task's rows; a subclass per guarantee says how the producer is set up.
    With ``refused`` set (dead letters), rows the topic would refuse go there (``rules``)."""

    acks = -1

    def __init__(self, cfg: KafkaSinkConfig) -> None:
        self.cfg = cfg
        self._began = False  # a partition was added: the broker holds an open transaction
        self._rules: dict[str, TopicRules] = {}

    def _txn_id(self, task: TaskInfo) -> str | None:
        """The attempt's transactional id; None without transactions."""
        return None

    def _producer(self, client: KafkaTxnClient, tid: str | None) -> Producer:
        """The producer id (and epoch) records are written under."""
        return Producer("", -1, -1)

    @property
    def _transactional(self) -> bool:
        return False

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> KafkaCommittable:
        """Executor, once per task attempt. Raising leaves the transaction to be aborted."""
        cfg = self.cfg
        tid = self._txn_id(task)
        sender = Sender(cfg, tid, self.acks)
        producer = Producer("", -1, -1)
        # Executors' Python workers live on from task to task: their client is kept.
        with kept_client(cfg.bootstrap, cfg.timeout_s, cfg.security, cfg.budget_s) as client:
            try:
                producer = self._producer(client, tid)
                rows, touched = self._produce(batches, task, producer, sender, client)
            except BaseException:
                sender.close()
                if self._began:
                    self._abort_quietly(client, producer)
                raise
        sender.release()
        failpoints.hit("kafka.after_write", task.batch_id, rows)  # acknowledged, not yet reported
        opened = producer if self._transactional and touched else None
        return KafkaCommittable(task.batch_id, task.partition_id, task.attempt, rows, opened,
                                query_id=task.query_id)

    def _produce(self, batches: Iterator[pa.RecordBatch], task: TaskInfo, producer: Producer,
                 sender: Sender, client: KafkaTxnClient) -> tuple[int, set[tuple[str, int]]]:
        cfg = self.cfg
        if cfg.topic:
            sender.load([cfg.topic], client)
        part = Partitioner(cfg.topic, sender.counts, task.partition_id)
        exactly = self._transactional
        batcher = Batcher(producer.producer_id, producer.epoch, exactly, cfg.codec, cfg.batch_bytes)
        touched: set[tuple[str, int]] = set()
        rows = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if cfg.formats:
                batch = self._encoded(batch)
                if batch.num_rows == 0:
                    continue
            if "topic" in batch.schema.names and not cfg.topic:
                seen = set(batch.column("topic").drop_null().to_pylist())
                missing = [t for t in seen if t not in sender.counts]
                if missing:
                    sender.load(missing, client)
            if self.refused is not None:
                batch = self._set_aside(batch, bad_targets(batch, cfg.topic, sender.counts))
                if batch.num_rows == 0:
                    continue
            targets = part.assign(batch)
            new = [tp for tp in targets.spans if tp not in touched]
            if new and exactly:
                by_topic: dict[str, list[int]] = {}
                for t, p in new:
                    by_topic.setdefault(t, []).append(p)
                self._began = True
                client.add_partitions(producer, by_topic)
            touched.update(new)
            ts = int(time.time() * 1000)
            if self.refused is None:  # every row goes: one take in target order, a slice each
                grouped = columns(batch, None if targets.in_order else targets.order)
                for tp, (a, b) in targets.spans.items():
                    for full_tp, data, count in batcher.add(tp, grouped.slice(a, b), ts):
                        sender.send(full_tp, data, count)
                    rows += b - a
                continue
            for tp, idx in targets.rows.items():
                rules = self._rules_of(tp[0], client)
                if tp[0] not in batcher.limits and rules.batch_bytes is not None:
                    batcher.limits[tp[0]] = rules.batch_bytes  # a topic column's topic may take less
                idx = self._keep(batch, idx, refused_records(batch, idx, tp[0], rules, cfg.codec, ts))
                if not len(idx):
                    continue
                for full_tp, data, count in batcher.add(tp, columns(batch, idx), ts):
                    sender.send(full_tp, data, count)
                rows += len(idx)
        for tp, data, count in batcher.drain():
            sender.send(tp, data, count)
        sender.flush()
        return rows, touched

    def _encoded(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its key and/or value in their registry formats. A row the writer
        schema refuses goes to ``self.refused`` (dead letters), else fails the task."""
        cols = dict(zip(batch.schema.names, batch.columns, strict=True))
        refused: dict[int, str] = {}
        for fmt in self.cfg.formats:
            enc = fmt.encode(cols[fmt.column])
            cols[fmt.column] = enc.values
            for row, why in enc.refused:
                refused.setdefault(row, f"{why} (schema id {fmt.schema_id}, subject {fmt.subject!r})")
        out = pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))
        if not refused:
            return out
        if self.refused is None:
            row, why = min(refused.items())
            raise UnwritableRowError(f"a row cannot be written in its registry format: {why} "
                                     f"({len(refused)} such rows of {batch.num_rows} in this task's batch). "
                                     "Fix "
                                     "the rows, or set dead-letter options to set such rows aside")
        self._record(batch, [Refused(r, "SerializationError", "", why) for r, why in sorted(refused.items())])
        keep = np.ones(batch.num_rows, bool)
        keep[list(refused)] = False
        return out.filter(pa.array(keep))

    def _rules_of(self, topic: str, client: KafkaTxnClient) -> TopicRules:
        """The topic's rules: read on the driver for option 'topic', else asked once here."""
        rules = self._rules.get(topic)
        if rules is None:
            if topic == self.cfg.topic and self.cfg.topic_rules is not None:
                rules = self.cfg.topic_rules
            else:
                rules = TopicRules.of(client.configs(topic=topic, topic_keys=TOPIC_KEYS)[1])
            self._rules[topic] = rules
        return rules

    def _set_aside(self, batch: pa.RecordBatch, refused: list[Refused]) -> pa.RecordBatch:
        """``batch`` without the ``refused`` rows, which go to ``self.refused``."""
        if not refused:
            return batch
        self._record(batch, refused)
        drop = np.zeros(batch.num_rows, bool)
        drop[[r.row for r in refused]] = True
        return batch.filter(pa.array(~drop))

    def _keep(self, batch: pa.RecordBatch, rows: np.ndarray, refused: list[Refused]) -> np.ndarray:
        """``rows`` without the ``refused`` ones, which go to ``self.refused``."""
        if not refused:
            return rows
        self._record(batch, refused)
        return rows[~np.isin(rows, [r.row for r in refused])]

    def _record(self, batch: pa.RecordBatch, refused: list[Refused]) -> None:
        assert self.refused is not None
        for r in sorted(refused, key=lambda r: r.row):
            self.refused.append(Refusal(batch.slice(r.row, 1), r.error_class, r.error_code, r.message))

    @staticmethod
    def _abort_quietly(client: KafkaTxnClient, producer: Producer) -> None:
        try:
            client.end_txn(producer, commit=False)
        except (SparkExtError, OSError) as e:  # the committer or the next batch's recovery aborts it anyway
            log.warning("could not abort %s after a failed task: %s", producer.transactional_id, e)


class FireAndForgetKafkaWriter(KafkaWriter):
    """``none``: ``acks=0``, no producer id, no waiting."""

    acks = 0


class IdempotentKafkaWriter(KafkaWriter):
    """``at_least_once``: an idempotent producer (producer id and sequence numbers, so the
    broker drops its own retries), every record acknowledged before the task ends."""

    def _producer(self, client: KafkaTxnClient, tid: str | None) -> Producer:
        return client.init_producer(None, self.cfg.txn_timeout_ms)


class TransactionalKafkaWriter(KafkaWriter):
    """``exactly_once``: one transaction per attempt, prepared (every record acknowledged,
    nothing committed); the driver commits it (step 4)."""

    def __init__(self, cfg: KafkaSinkConfig, claim: Claim[Producer]) -> None:
        super().__init__(cfg)
        self.claim = claim

    @property
    def _transactional(self) -> bool:
        return True

    def _txn_id(self, task: TaskInfo) -> str | None:
        return self.cfg.txn_id(task.partition_id, task.attempt, task.batch_id)

    def _producer(self, client: KafkaTxnClient, tid: str | None) -> Producer:
        # fences any older holder of the id and aborts what it left open
        return client.init_producer(tid, self.cfg.txn_timeout_ms)

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> KafkaCommittable:
        if self.claim.replays(task):
            return KafkaCommittable(task.batch_id, task.partition_id, task.attempt, 0, query_id=task.query_id)
        return super().write(batches, task)
