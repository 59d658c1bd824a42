"""Executor side of the queue sink: one task's rows as STOMP messages, one connection each.

One writer class per guarantee:

- ``exactly_once`` (``StagingJmsWriter``): the rows go, in one STOMP transaction, into the
  sink's staging queue, each message tagged with the attempt's token and its batch; the
  COMMIT's receipt means they are stored. Nothing reaches the destination: the driver
  moves a winner's messages there once the batch is decided (``committer.py``). A
  replay of a batch the claim shows decided writes nothing.
- ``at_least_once`` (``TransactionalJmsWriter``): the rows go straight to the destination in
  one transaction, committed before the task ends; a retried task or a replayed batch
  sends them again.
- ``none`` (``PlainJmsWriter``): sends without a transaction, flushed (the DISCONNECT's
  receipt) before the task ends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from spark_ext import failpoints
from spark_ext.commit import Claim, Committable, SinkWriter, TaskInfo
from spark_ext.connectors.jms.session import BrokerSession, connect
from spark_ext.connectors.jms.sink.config import JmsSinkConfig
from spark_ext.connectors.jms.sink.records import (
    BATCH_HEADER,
    TXN_HEADER,
    BadMessageError,
    common_headers,
    send_frames,
)
from spark_ext.deadletters import Refusal, SetsAside
from spark_ext.secrets import reveal

log = logging.getLogger(__name__)

_WRITE_BYTES = 1 << 20  # frames gathered into one socket write


@dataclass(frozen=True)
class JmsCommittable(Committable):
    """One attempt's staged messages: ``token`` tags them (None: nothing staged)."""

    token: str | None = None

    @property
    def prepared(self) -> bool:
        return self.token is not None


def token_for(sink_id: str, epoch: int, task: TaskInfo) -> str:
    """The attempt's transaction token: unique per run (epoch), batch, partition and attempt."""
    return f"{sink_id}.{epoch}.{task.batch_id}.{task.partition_id}.{task.task_attempt_id}"


def open_session(cfg: JmsSinkConfig) -> BrokerSession:
    """A session; a broker that is away (restarting, frozen) is waited for up to reconnectTimeoutMs."""
    return connect(cfg.host, cfg.port, cfg.user, reveal(cfg.password), cfg.timeout_s, cfg.reconnect_timeout_s,
                   cfg.tls)


def _send_all(session: BrokerSession, batches: Iterator[pa.RecordBatch], common: bytes,
              refused: list[Refusal] | None = None) -> int:
    """Sends every row; with ``refused`` (dead letters) a row that cannot be a message goes
    there instead of failing the task. Returns the messages sent."""
    rows, buf, size = 0, [], 0
    for rb in batches:
        if rb.num_rows == 0:
            continue
        bad: list[int] = []

        def refuse(i: int, e: BadMessageError, rb: pa.RecordBatch = rb, bad: list[int] = bad) -> None:
            assert refused is not None
            refused.append(Refusal(rb.slice(i, 1), type(e).__name__, e.code, str(e)))
            bad.append(i)

        for frame in send_frames(rb, common, refuse if refused is not None else None):
            buf.append(frame)
            size += len(frame)
            if size >= _WRITE_BYTES:
                session.send(b"".join(buf))
                buf, size = [], 0
        rows += rb.num_rows - len(bad)
    if buf:
        session.send(b"".join(buf))
    return rows


class JmsWriter(SinkWriter[JmsCommittable], SetsAside):
    """One task attempt's messages over one connection; a subclass per guarantee. Executor.
    With ``refused`` set (dead letters), rows that cannot be messages go there."""

    def __init__(self, cfg: JmsSinkConfig) -> None:
        self.cfg = cfg

    def _done(self, task: TaskInfo, rows: int, token: str | None = None) -> JmsCommittable:
        return JmsCommittable(task.batch_id, task.partition_id, task.attempt, rows, token,
                              query_id=task.query_id)


class PlainJmsWriter(JmsWriter):
    """``none``: plain sends, flushed before the task ends."""

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JmsCommittable:
        cfg = self.cfg
        session = open_session(cfg)
        try:
            common = common_headers(cfg.destination, cfg.persistent)
            rows = _send_all(session, batches, common, self.refused)
            session.receipt("DISCONNECT", {}, "flushing the sends")
        finally:
            session.close()
        return self._done(task, rows)


class TransactionalJmsWriter(JmsWriter):
    """``at_least_once``: one transaction to the destination, committed by the task."""

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JmsCommittable:
        cfg = self.cfg
        tx = f"alo-{task.batch_id}-{task.partition_id}-{task.task_attempt_id}"
        session = open_session(cfg)
        try:
            session.begin(tx)
            rows = _send_all(session, batches, common_headers(cfg.destination, cfg.persistent, tx),
                             self.refused)
            session.commit(tx)
        finally:
            session.close()  # an uncommitted transaction is rolled back with its connection
        failpoints.hit("jms.after_write", task.batch_id, rows)  # stored, the driver not yet told
        return self._done(task, rows)


class StagingJmsWriter(JmsWriter):
    """``exactly_once``: the attempt's messages stored in the staging queue, tagged."""

    def __init__(self, cfg: JmsSinkConfig, claim: Claim[int]) -> None:
        super().__init__(cfg)
        self.claim = claim

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JmsCommittable:
        if self.claim.replays(task):
            return self._done(task, 0)
        cfg = self.cfg
        token = token_for(cfg.sink_id, self.claim.fence, task)
        own = {TXN_HEADER: token, BATCH_HEADER: str(task.batch_id)}
        session = open_session(cfg)
        try:
            session.begin(token)
            rows = _send_all(session, batches, common_headers(f"/queue/{cfg.staging}", True, token, own),
                             self.refused)
            if rows == 0:
                return self._done(task, 0)  # nothing to stage: the transaction goes with the connection
            session.commit(token)
        finally:
            session.close()
        failpoints.hit("jms.after_stage", task.batch_id, rows)  # staged, the driver not yet told
        return self._done(task, rows, token)
