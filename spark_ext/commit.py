"""The commit protocol every spark-ext sink plugs into (Jet's two-phase commit sink).

Jet's snapshot is one Spark micro-batch. For batch N the order is, step by step:

1. **Driver, before batch N's tasks**, after Spark wrote offset log entry N (the
   sources' end offsets) (``DataSource.streamWriter`` ->
   ``Sink.plan(prepare=True)``; Spark builds the writer anew for every batch): options
   and the input schema are checked against the external system, and
   ``Committer.recover`` resolves every transaction earlier batches or runs left in
   doubt: those the sink recorded as committed are committed, all others rolled back.
   Failure: the batch does not start; nothing of it was written.
2. **Spark** runs N's tasks.
3. **Executor, one call per task attempt** (``SinkWriter.write``): the rows go into one
   transaction named deterministically by (sink id, batch N, partition, attempt) which
   is *prepared*, never committed, and a small frozen ``Committable`` naming it is
   returned. Failure: the task raises; Spark retries it as a new attempt (a new
   transaction) or gives up and calls step 5. A prepared transaction whose message never
   reached the driver is found by name and rolled back by step 4 or by step 1 of the
   next batch or run.
4. **Driver** (``Committer.commit(committables, N)``, in a fresh Python worker whose
   writer came from ``Sink.plan(prepare=False)``, which must touch nothing): commit
   every prepared transaction and record "batch N committed" in the external system.
   It must be idempotent: a crash half-way leaves the rest to step 1 of the next run.
   Retriable errors are retried here (bounded); fatal ones fail the query loudly.
   Then Spark writes commit log N. A crash before commit log N makes Spark replay N;
   the sink finds N recorded as committed and writes nothing again.
5. **Driver** (``Committer.abort(committables, N)``): roll back what the tasks prepared.

Weaker guarantees plug in the same way: at-least-once and none writers flush before
returning and use ``NoOpCommitter``.

Where each object lives: ``SinkPlan`` is built on the driver and pickled to executors
and to the driver's commit worker; it holds only plain configuration, never a live
connection. Writers and committers are built fresh from it where they run, because
Spark calls ``commit``/``abort`` on a freshly unpickled writer object each time.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_ext.errors import (
    CommitError,
    RetriableCommitError,
    SparkExtError,
    UnknownCommitError,
)
from spark_ext.guarantees import Guarantee

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class TaskInfo:
    """Who is writing: read from Spark's ``TaskContext`` inside ``write()`` on an executor."""

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int
    task_attempt_id: int

    @classmethod
    def current(cls) -> TaskInfo:
        """The running task's identity. Executor only; raises outside a Spark task."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is None:
            raise SparkExtError("TaskInfo.current() called outside a Spark task")
        batch = tc.getLocalProperty(BATCH_ID_PROPERTY)
        return cls(
            query_id=tc.getLocalProperty(QUERY_ID_PROPERTY) or "",
            batch_id=int(batch) if batch is not None else -1,
            partition_id=tc.partitionId(),
            attempt=tc.attemptNumber(),
            task_attempt_id=tc.taskAttemptId(),
        )


@dataclass(frozen=True)
class Committable(WriterCommitMessage):
    """What one task attempt prepared; travels executor -> driver. Keep it small."""

    batch_id: int
    partition_id: int
    attempt: int
    rows: int


C = TypeVar("C", bound=Committable)


class SinkWriter(ABC, Generic[C]):
    """Executor side: writes one task's rows and prepares them (phase one)."""

    @abstractmethod
    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> C:
        """Write every batch; prepare (exactly-once) or flush (weaker guarantees).

        Runs on an executor, once per task attempt. Raising fails the attempt; what it
        wrote must then stay invisible (never committed).
        """


class Committer(ABC, Generic[C]):
    """Driver side: commits or aborts what the tasks prepared (phase two)."""

    def recover(self) -> None:
        """Resolve transactions a previous run left in doubt. Driver, at query start."""

    @abstractmethod
    def commit(self, committables: Sequence[C], batch_id: int) -> None:
        """Make batch ``batch_id`` visible. Driver; must be idempotent."""

    @abstractmethod
    def abort(self, committables: Sequence[C], batch_id: int) -> None:
        """Roll back what the batch's tasks prepared. Driver; must be idempotent."""


class NoOpCommitter(Committer[Committable]):
    """For at-least-once and none: writers flushed before returning, nothing to finish."""

    def commit(self, committables: Sequence[Committable], batch_id: int) -> None:
        rows = sum(c.rows for c in committables)
        log.debug("batch %s: %s rows already flushed by %s tasks", batch_id, rows, len(committables))

    def abort(self, committables: Sequence[Committable], batch_id: int) -> None:
        log.warning("batch %s aborted; rows already flushed stay written (no transactions)", batch_id)


@dataclass(frozen=True)
class SinkPlan:
    """Everything both sides need, as plain picklable factories (no live connections)."""

    guarantee: Guarantee
    new_writer: Callable[[], SinkWriter[Any]]
    new_committer: Callable[[], Committer[Any]]
    commit_retries: int = 5
    retry_backoff_s: float = 0.2


def call_with_retries(fn: Callable[[], None], what: str, retries: int, backoff_s: float) -> None:
    """Run ``fn``; retry ``RetriableCommitError`` with backoff, wrap surprises as unknown-fatal."""
    for attempt in range(retries + 1):
        try:
            fn()
            return
        except RetriableCommitError as e:
            if attempt == retries:
                raise RetriableCommitError(f"{what} still failing after {retries} retries: {e}") from e
            log.warning("%s failed (%s); retry %s/%s", what, e, attempt + 1, retries)
            time.sleep(backoff_s * (2**attempt))
        except CommitError:
            raise
        except Exception as e:
            raise UnknownCommitError(f"{what} failed unexpectedly: {type(e).__name__}: {e}") from e


class ProtocolStreamWriter(DataSourceStreamArrowWriter):
    """Spark's streaming writer, delegating to a sink's writer and committer.

    Built on the driver at query start; pickled to executors (``write``) and to the
    fresh driver worker that runs ``commit`` / ``abort``.
    """

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Executor: one task attempt's rows -> a ``Committable``."""
        return self.plan.new_writer().write(iterator, TaskInfo.current())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, after every task of batch ``batchId`` succeeded."""
        committables = _committables(messages)
        committer = self.plan.new_committer()
        call_with_retries(lambda: committer.commit(committables, batchId), f"commit of batch {batchId}",
                          self.plan.commit_retries, self.plan.retry_backoff_s)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, after a task of batch ``batchId`` failed for good."""
        committables = _committables(messages)
        committer = self.plan.new_committer()
        call_with_retries(lambda: committer.abort(committables, batchId), f"abort of batch {batchId}",
                          self.plan.commit_retries, self.plan.retry_backoff_s)


def _committables(messages: list[WriterCommitMessage | None]) -> list[Committable]:
    out = []
    for m in messages:
        if m is None:  # the task failed before returning a message
            continue
        if not isinstance(m, Committable):
            raise UnknownCommitError(f"unexpected commit message {type(m).__name__}; expected a Committable")
        out.append(m)
    return out
