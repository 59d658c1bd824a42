"""The commit protocol every spark-ext sink plugs into (Jet's two-phase commit sink).

This docstring is the one description of the protocol; connectors mark the lines that
carry out a step with ``# step N``. Jet's snapshot is one Spark micro-batch. For batch N:

1. **Driver, before batch N's tasks** (``DataSource.streamWriter`` ->
   ``SinkConnector.plan(prepare=True)``; Spark builds the writer anew for every batch,
   after it wrote offset log entry N). The template in ``spark_ext.connector`` runs, in
   this order: ``configure`` (options -> the sink's frozen config), ``validate`` (the
   input schema and the options against the external system), and for exactly-once
   ``Committer.take_over``: fence every older run of this sink, commit the transactions
   a decided batch left prepared, roll back every other in-doubt transaction, and
   return a ``Claim`` (this run's fencing token and the last decided batch). The plan
   carries the claim to the writers. Failure: the batch does not start; nothing of it
   was written.
2. **Spark** runs N's tasks.
3. **Executor, one call per task attempt** (``SinkWriter.write``): the rows go into one
   transaction named deterministically by (sink, batch N, partition, attempt), which is
   *prepared*, never committed, and a small frozen ``Committable`` naming it is
   returned. A replay of a batch the claim shows decided writes nothing. Failure: the
   task raises; Spark retries it as a new attempt (a new transaction) or gives up and
   runs step 5. A prepared transaction whose message never reached the driver is found
   by name and rolled back in step 4, 5 or the next step 1.
4. **Driver** (``Committer.commit(committables, N)``, in a fresh Python worker whose
   writer came from ``plan(prepare=False)``, which touches nothing): (a) check the run
   still owns the sink and every winner is still open, (b) record the decision "batch N
   commits these transactions" durably in the external system, fenced by the claim,
   (c) commit every winner, (d) roll back every other transaction of the batch. It is
   idempotent: a crash after (b) leaves the rest to the next step 1. Retriable errors
   are retried here (bounded); fatal ones fail the query loudly. Then Spark writes commit
   log N. A crash before commit log N makes Spark replay N; the replay finds N decided
   and writes nothing again.
5. **Driver** (``Committer.abort(committables, N)``): roll back what the batch's tasks
   prepared; a batch already decided in step 4(b) is left for step 1 to finish.

Weaker guarantees plug in the same way: at-least-once and none writers flush before
returning, the plan skips ``take_over`` and uses ``NoOpCommitter``.

Where each object lives: ``SinkPlan`` is built on the driver and pickled to executors
and to the driver's commit worker; it holds only plain configuration and the claim,
never a live connection. Writers and committers are built fresh from it where they
run, because Spark calls ``commit``/``abort`` on a freshly unpickled writer each time.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_ext import compat
from spark_ext.errors import CommitError, RetriableCommitError, SparkExtError, UnknownCommitError
from spark_ext.guarantees import Guarantee
from spark_ext.retry import Backoff, retry
from spark_ext.shipping import Shipped

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


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
        ident = compat.task_identity()
        if ident is None:
            raise SparkExtError("TaskInfo.current() called outside a Spark task")
        return cls(query_id=ident.query_id, batch_id=ident.batch_id if ident.batch_id is not None else -1,
                   partition_id=ident.partition_id, attempt=ident.attempt,
                   task_attempt_id=ident.task_attempt_id)


@dataclass(frozen=True)
class Committable(WriterCommitMessage):
    """What one task attempt prepared; travels executor -> driver (step 3 -> 4). Keep it small."""

    batch_id: int
    partition_id: int
    attempt: int
    rows: int


@dataclass(frozen=True)
class DecidedBatch:
    """A batch the sink recorded as committed (step 4b), as ``take_over`` found it."""

    batch_id: int
    query_id: str


F = TypeVar("F")


@dataclass(frozen=True)
class Claim(Generic[F]):
    """What step 1 leaves for steps 3 and 4: this run's hold on the sink.

    ``fence``: the sink's fencing token (an epoch; a transactional producer), newer for
    every run and every batch plan, checked when writers prepare and when the committer
    decides, so an older run can do neither. ``last_decided``: the newest batch of this
    sink recorded as committed, where the sink tracks it, so a replay writes nothing.
    ``committed`` / ``rolled_back``: how many in-doubt transactions step 1 resolved.
    """

    fence: F
    last_decided: DecidedBatch | None = None
    committed: int = 0
    rolled_back: int = 0


C = TypeVar("C", bound=Committable)


class SinkWriter(ABC, Generic[C]):
    """Executor side: writes one task's rows and prepares them (step 3)."""

    @abstractmethod
    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> C:
        """Write every batch; prepare (exactly-once) or flush (weaker guarantees).

        Runs on an executor, once per task attempt. Raising fails the attempt; what it
        wrote must then stay invisible (never committed).
        """


class Committer(ABC, Generic[C]):
    """Driver side: takes the sink over (step 1), commits (step 4) or aborts (step 5)."""

    def take_over(self) -> Claim[Any]:
        """Step 1: fence older runs, resolve what is in doubt, return this run's claim.

        Driver, before every batch of an exactly-once query; raising stops the query
        before the batch starts. Sinks without transactions never call it.
        """
        raise NotImplementedError(f"{type(self).__name__} has no transactions to take over")

    @abstractmethod
    def commit(self, committables: Sequence[C], batch_id: int) -> None:
        """Step 4: make batch ``batch_id`` visible. Driver; must be idempotent."""

    @abstractmethod
    def abort(self, committables: Sequence[C], batch_id: int) -> None:
        """Step 5: roll back what the batch's tasks prepared. Driver; must be idempotent."""


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
    def give_up(e: BaseException) -> BaseException:
        return RetriableCommitError(f"{what} still failing after {retries} retries: {e}")

    try:
        retry(fn, what=what, retry_on=RetriableCommitError, attempts=retries + 1,
              backoff=Backoff(initial_s=backoff_s, max_s=backoff_s * 2 ** retries),
              give_up=give_up)
    except CommitError:
        raise
    except Exception as e:
        raise UnknownCommitError(f"{what} failed unexpectedly: {type(e).__name__}: {e}") from e


class ProtocolStreamWriter(Shipped, DataSourceStreamArrowWriter):
    """Spark's streaming writer, delegating to a sink's writer and committer.

    Built on the driver at query start; pickled to executors (``write``) and to the
    fresh driver worker that runs ``commit`` / ``abort``.
    """

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Executor, step 3: one task attempt's rows -> a ``Committable``."""
        return self.plan.new_writer().write(iterator, TaskInfo.current())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, step 4: after every task of batch ``batchId`` succeeded."""
        committables = _committables(messages)
        committer = self.plan.new_committer()
        call_with_retries(lambda: committer.commit(committables, batchId), f"commit of batch {batchId}",
                          self.plan.commit_retries, self.plan.retry_backoff_s)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, step 5: after a task of batch ``batchId`` failed for good."""
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
