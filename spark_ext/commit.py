"""The commit protocol every spark-ext sink plugs into (Jet's two-phase commit sink).

This docstring is the one description of the protocol, and ``TwoPhaseCommitter`` below
the one place that carries out steps 4 and 5 in order: connectors supply primitives
(is the batch decided, check, record, commit one winner, ...), never the order. Jet's
snapshot is one Spark micro-batch. For batch N:

1. **Driver, before batch N's tasks** (``DataSource.streamWriter`` ->
   ``SinkConnector.plan(prepare=True)``; Spark builds the writer anew for every batch,
   after it wrote offset log entry N). The template in ``spark_ext.connector`` runs, in
   this order: ``configure`` (options -> the sink's frozen config), ``validate`` (the
   input schema and the options against the external system), and for exactly-once
   ``TwoPhaseCommitter.take_over``: fence every older run of this sink, commit the
   transactions a decided batch left prepared, roll back every other in-doubt
   transaction, and return a ``Claim`` (this run's fencing token and the last decided
   batch). Failure: the batch does not start; nothing of it was written.
2. **Spark** runs N's tasks.
3. **Executor, one call per task attempt** (``SinkWriter.write``, one writer class per
   guarantee): the rows go into one transaction named deterministically by (sink, batch
   N, partition, attempt), which is *prepared*, never committed, and a small frozen
   ``Committable`` naming it is returned. A replay of a batch the claim shows decided
   writes nothing. Failure: the task raises; Spark retries it as a new attempt (a new
   transaction) or gives up and runs step 5. A prepared transaction whose message never
   reached the driver is found by name and rolled back in step 4, 5 or the next step 1.
4. **Driver** (``TwoPhaseCommitter.commit(committables, N, claim)``, in the driver's
   commit worker, whose writer came from ``plan(prepare=False)``, which touches nothing): if N
   is not decided yet, (a) check the run still owns the sink and every winner is still
   open, (b) record the decision "batch N commits these transactions" durably in the
   external system, fenced by the claim; then (c) commit every winner, mark the decision
   finished, (d) roll back every other transaction of the batch. It is idempotent: a
   crash after (b) leaves the rest to the next step 1, a retry finds N decided and goes
   on at (c). Retriable errors are retried here (bounded); fatal ones fail the query
   loudly. Then Spark writes commit log N. A crash before commit log N makes Spark
   replay N; the replay finds N decided and writes nothing again.
5. **Driver** (``TwoPhaseCommitter.abort(committables, N, claim)``): roll back what the
   batch's tasks prepared; a batch already decided in step 4(b) is left for step 1.

How the claim reaches step 4: Spark gives the commit worker nothing of the plan but the
tasks' commit messages, so the core wraps each committable in a ``TaskReport`` with the
claim the task wrote under and hands ``commit`` / ``abort`` the claim itself; committables
carry only what their task alone knows. Every task of a batch comes from one plan, so
reports naming two claims are refused.

The crash points (``spark_ext.failpoints``) at the step boundaries are hit here, named
``<committer name>.<point>``, so every sink has the same ones: ``before_decision``,
``after_decision``, ``mid_commit`` (after the first winner), ``after_done``. Weaker
guarantees plug in the same way: their writers flush before returning, the plan skips
``take_over`` and uses ``NoOpCommitter``. The routing sink (``spark_ext.routing``)
composes its sub-sinks' primitives in this same order: its 4b is the one decision; each
sub-sink records its part as its own (``adopt``) before any winner commits, and its
take-over hands each sub-sink an unfinished one.

Where each object lives: ``SinkPlan`` is built on the driver and pickled to executors
and to the driver's commit worker; it holds only plain configuration and the claim,
never a live connection. Writers and committers are built fresh from it where they
run, because Spark calls ``commit``/``abort`` on a freshly unpickled writer each time.
The processes themselves live on: Spark's Python daemon reuses the driver's planning
worker and its commit worker from batch to batch (``spark.python.worker.reuse``; seen:
one process id each over a query's batches), so what a process keeps between calls
survives to the next batch, and must be right after any change outside it.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, final

from pyspark.sql.datasource import WriterCommitMessage

from spark_ext import compat, failpoints, timeline
from spark_ext.compat import StreamArrowWriter
from spark_ext.errors import (
    CommitError,
    FatalCommitError,
    RetriableCommitError,
    RetriesExhaustedError,
    SparkExtError,
    UnknownCommitError,
)
from spark_ext.guarantees import Guarantee
from spark_ext.retry import Backoff, retry
from spark_ext.shipping import Shipped
from spark_ext.timeline import CommitTimes, PlanTimes, WriteTimes, log_to_stderr

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
    """What one task attempt prepared; travels executor -> driver (step 3 -> 4). Keep it
    small. ``query_id``: Spark's query id, from the task (keyword-only, so subclasses add
    their own fields positionally after ``rows``)."""

    batch_id: int
    partition_id: int
    attempt: int
    rows: int
    query_id: str = field(default="", kw_only=True)

    @property
    def prepared(self) -> bool:
        """Did this attempt leave a transaction for the committer (a winner to be)? False
        for a replay that wrote nothing, or a task that opened no transaction."""
        return True


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
    ``planned_ms``: the driver's wall clock when step 1 ended. Every transaction of the
    batch began later, so the committer (on the driver too) can bound their age on one
    clock where the external system keeps no start times; an executor's clock may be
    minutes off.
    """

    fence: F
    last_decided: DecidedBatch | None = None
    committed: int = 0
    rolled_back: int = 0
    planned_ms: float = 0.0


C = TypeVar("C", bound=Committable)
D = TypeVar("D")


@dataclass(frozen=True)
class TaskReport(WriterCommitMessage):
    """One task attempt's message to the driver: its committable and the claim it wrote
    under; for the batch's timeline, its plan's times and its own."""

    committable: Committable
    claim: Claim[Any] | None
    plan_times: PlanTimes | None = None
    write_times: WriteTimes | None = None


@dataclass(frozen=True)
class Batch(Generic[C]):
    """What steps 4 and 5 know of batch ``batch_id``: every committable that reached the
    driver, the ones holding a transaction, and the claim of the plan that ran it."""

    batch_id: int
    committables: tuple[C, ...]
    claim: Claim[Any] | None

    @property
    def query_id(self) -> str | None:
        """Spark's query id; None when no task reported."""
        ids = {c.query_id for c in self.committables}
        if len(ids) > 1:
            raise FatalCommitError(f"batch {self.batch_id} mixes tasks of queries {sorted(ids)}")
        return ids.pop() if ids else None

    @property
    def prepared(self) -> tuple[C, ...]:
        return tuple(c for c in self.committables if c.prepared)

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.committables)


class SinkWriter(ABC, Generic[C]):
    """Executor side: writes one task's rows and prepares them (step 3)."""

    @abstractmethod
    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> C:
        """Write every batch; prepare (exactly-once) or flush (weaker guarantees). Executor,
        once per task attempt; raising fails it, and what it wrote must stay invisible."""


class Committer(ABC, Generic[C]):
    """Driver side of a batch: commit (step 4) or abort (step 5). Transactional sinks
    subclass ``TwoPhaseCommitter``, which orders the steps; this is what Spark's writer calls."""

    @abstractmethod
    def commit(self, committables: Sequence[C], batch_id: int,
               claim: Claim[Any] | None) -> CommitTimes | None:
        """Step 4: make batch ``batch_id`` visible. Driver; must be idempotent. Returns what
        it took, or None when there was nothing to commit now (no task reported, or a
        replay of a batch finished before)."""

    @abstractmethod
    def abort(self, committables: Sequence[C], batch_id: int, claim: Claim[Any] | None) -> None:
        """Step 5: roll back what the batch's tasks prepared. Driver; must be idempotent."""


class NoOpCommitter(Committer[Committable]):
    """For at-least-once and none: writers flushed before returning, nothing to finish."""

    def commit(self, committables: Sequence[Committable], batch_id: int,
               claim: Claim[Any] | None) -> CommitTimes | None:
        return CommitTimes()  # the writers flushed before their tasks ended

    def abort(self, committables: Sequence[Committable], batch_id: int, claim: Claim[Any] | None) -> None:
        log.warning("batch %s aborted; rows already flushed stay written (no transactions)", batch_id)


class TwoPhaseCommitter(Committer[C], Generic[C, D]):
    """Steps 1, 4 and 5 of a transactional sink: the order here, the primitives in the connector.

    ``D`` is the connector's record of a decided batch (what step 4b wrote). ``name``
    prefixes the crash points. ``connected`` holds what the primitives share (a
    connection) for one ``commit`` / ``abort``; primitives run only inside it.
    """

    name: ClassVar[str]

    @property
    def label(self) -> str:
        """Who commits, in log lines: the connector and, where the committer knows it, the sink."""
        return self.name

    @abstractmethod
    def take_over(self, adopt: Batch[C] | None = None) -> Claim[Any]:
        """Step 1: fence older runs, resolve what is in doubt, return this run's claim.

        Driver, before every batch of an exactly-once query; raising stops the query
        before the batch starts. ``adopt``: a batch decided elsewhere (a routing sink's),
        recorded here once older runs are fenced and before anything is resolved, unless
        it is already, so its transactions are finished, never rolled back.
        """

    def connected(self) -> AbstractContextManager[Any]:
        """The connections ``commit`` / ``abort`` use, closed at the end of either."""
        return nullcontext()

    @abstractmethod
    def recorded(self, batch: Batch[C]) -> D | None:
        """The decision recorded for this batch of this query, if any (a retry after 4b,
        or a replay of a batch decided before a crash)."""

    @abstractmethod
    def check(self, batch: Batch[C]) -> None:
        """Step 4a: raise ``FencedError`` unless ``batch.claim`` still owns the sink, and a
        ``FatalCommitError`` unless every prepared transaction is still open (rolling
        them back first, so nothing of the batch can ever commit)."""

    @abstractmethod
    def record(self, batch: Batch[C]) -> D:
        """Step 4b: durably record "this batch commits its prepared transactions", fenced
        by the claim. Returns the decision (an earlier one, if a race recorded it first)."""

    def vet(self, batch: Batch[C]) -> None:
        """4a for a decision another committer makes (a routing sink's): raise, rolling back,
        what ``record`` would refuse on this sink's own account. Default: nothing."""

    def adopt(self, batch: Batch[C]) -> D:
        """``record`` a decision made elsewhere (a routing sink's, durable already): fenced
        by ``batch.claim``, never refusing the batch on its own account. Default: ``record``."""
        return self.record(batch)

    def finished(self, decision: D) -> bool:
        """Was ``decision`` carried out to its end (every winner committed, marked done)?
        Default: not known, so the winners are committed again (idempotently)."""
        return False

    def before_winners(self, decision: D) -> None:
        """Runs after the decision is known and before any winner commits, on every try."""

    def set_aside(self, batch: Batch[C]) -> int | None:
        """Rows of ``batch`` set aside as dead letters, for its log line (None: no destination)."""
        return None

    @abstractmethod
    def winners(self, decision: D) -> Sequence[Any]:
        """The transactions ``decision`` commits."""

    @abstractmethod
    def commit_winner(self, decision: D, winner: Any) -> bool:
        """Step 4c, one winner: commit it; True also when it committed before (a retry),
        False when it is gone without having committed (lost)."""

    def commit_winners(self, decision: D, winners: Sequence[Any]) -> list[Any]:
        """Step 4c for some of the decision's winners: commit them; the ones lost (see
        ``commit_winner``). Default: one at a time. A connector that commits many in one
        request overrides it, so the driver's commit does not grow by a round trip a task."""
        return [w for w in winners if not self.commit_winner(decision, w)]

    @abstractmethod
    def lost(self, decision: D, lost: Sequence[Any]) -> CommitError:
        """The error for decided winners that can no longer commit (naming the way out)."""

    def finish(self, batch: Batch[C], decision: D) -> None:
        """After 4c: mark the decision done (fenced by ``batch.claim``), prune old bookkeeping."""

    @abstractmethod
    def roll_back_others(self, batch: Batch[C], decision: D) -> None:
        """Step 4d: roll back every other transaction of the batch (failed or speculative
        attempts whose message never came), so readers are not held back."""

    @abstractmethod
    def roll_back(self, batch: Batch[C]) -> None:
        """Step 5 of a batch not decided: roll back what its tasks prepared and fence the
        attempts that may still be writing."""

    @final
    def commit(self, committables: Sequence[C], batch_id: int,
               claim: Claim[Any] | None) -> CommitTimes | None:
        """Step 4, in order. Driver; idempotent."""
        batch = Batch(batch_id, tuple(committables), claim)
        if batch.query_id is None:
            return None  # no task reported: nothing was prepared
        started = time.monotonic()
        with self.connected():
            decision = self.recorded(batch)
            if decision is None:
                if not batch.prepared:
                    return CommitTimes()  # nothing written, nothing decided
                self.check(batch)                                                   # step 4a
                failpoints.hit(f"{self.name}.before_decision", batch_id, batch.rows)
                decision = self.record(batch)                                       # step 4b
                failpoints.hit(f"{self.name}.after_decision", batch_id, batch.rows)
            elif self.finished(decision):
                self.roll_back_others(batch, decision)                              # step 4d
                return None
            decided = time.monotonic()
            self.before_winners(decision)
            winners = self.winners(decision)
            lost = self.commit_winners(decision, winners[:1])                       # step 4c
            if len(winners) > 1:  # a crash here leaves the first winner committed, the rest not
                failpoints.hit(f"{self.name}.mid_commit", batch_id, batch.rows)
                lost += self.commit_winners(decision, winners[1:])
            if lost:
                raise self.lost(decision, lost)
            self.finish(batch, decision)
            failpoints.hit(f"{self.name}.after_done", batch_id, batch.rows)
            self.roll_back_others(batch, decision)                                  # step 4d
            ended = time.monotonic()
        return CommitTimes(len(winners), (decided - started) * 1000, (ended - decided) * 1000,
                           self.set_aside(batch))

    @final
    def abort(self, committables: Sequence[C], batch_id: int, claim: Claim[Any] | None) -> None:
        """Step 5. A batch already decided is left for the next take-over to finish."""
        batch = Batch(batch_id, tuple(committables), claim)
        with self.connected():
            if batch.query_id is not None and self.recorded(batch) is not None:
                log.warning("%s: batch %s was decided; the next batch's take-over finishes its commit",
                            self.name, batch_id)
                return
            self.roll_back(batch)


@dataclass(frozen=True)
class SinkPlan:
    """Everything both sides need, as plain picklable factories (no live connections).

    ``claim``: step 1's, in the plan that runs the batch's tasks; None in the commit
    worker's plan (the claim comes back with the tasks' reports) and without exactly-once.
    """

    guarantee: Guarantee
    new_writer: Callable[[], SinkWriter[Any]]
    new_committer: Callable[[], Committer[Any]]
    claim: Claim[Any] | None = None
    times: PlanTimes | None = None
    label: str = "hzsink"  # names the sink in log lines where its committer does not
    commit_retries: int = 5
    retry_backoff_s: float = 0.2


def call_with_retries(fn: Callable[[], None], what: str, retries: int, backoff_s: float) -> None:
    """Run ``fn``; retry ``RetriableCommitError`` with backoff, wrap surprises as unknown-fatal.

    After the last retry the failure is no longer retriable: ``RetriesExhaustedError``.
    """
    def give_up(e: BaseException) -> BaseException:
        return RetriesExhaustedError(f"{what} still failing after {retries} retries: {e}")

    try:
        retry(fn, what=what, retry_on=RetriableCommitError, attempts=retries + 1,
              backoff=Backoff(initial_s=backoff_s, max_s=backoff_s * 2 ** retries),
              give_up=give_up)
    except CommitError:
        raise
    except Exception as e:
        raise UnknownCommitError(f"{what} failed unexpectedly: {type(e).__name__}: {e}") from e


class ProtocolStreamWriter(Shipped, StreamArrowWriter):
    """Spark's streaming writer, delegating to a sink's writer and committer.

    Built on the driver before each batch; pickled to executors (``write``) and to the
    driver's commit worker that runs ``commit`` / ``abort``.
    """

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch], task: TaskInfo | None = None) -> WriterCommitMessage:
        """Executor, step 3: one task attempt's rows -> a ``Committable``, with the claim.
        ``task``: who writes, if not the running task as Spark names it (``spark_ext.batch``)."""
        started = time.monotonic()
        committable = self.plan.new_writer().write(iterator, task or TaskInfo.current())
        took = WriteTimes((time.monotonic() - started) * 1000)
        return TaskReport(committable, self.plan.claim, self.plan.times, took)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, step 4: after every task of batch ``batchId`` succeeded. Logs the
        batch's one INFO line (``spark_ext.timeline``), which operators read."""
        log_to_stderr()
        committables, claim = _unwrap(messages, batchId)
        committer = self.plan.new_committer()
        took: list[CommitTimes | None] = []
        tries: list[int] = []

        def attempt() -> None:
            tries.append(1)  # a retried attempt counts in the sink's metrics
            took.append(committer.commit(committables, batchId, claim))

        call_with_retries(attempt, f"commit of batch {batchId}", self.plan.commit_retries,
                          self.plan.retry_backoff_s)
        label = committer.label if isinstance(committer, TwoPhaseCommitter) else self.plan.label
        query_id = committables[0].query_id if committables else None
        if took and took[-1] is not None:
            reports = [m for m in messages if isinstance(m, TaskReport)]
            plans = [r.plan_times for r in reports if r.plan_times is not None]
            log.info("%s", timeline.report(
                label, batchId, query_id, sum(c.rows for c in committables), plans[0] if plans else None,
                [r.write_times for r in reports if r.write_times is not None], took[-1], timeline.now_ms(),
                claim=claim, retries=len(tries) - 1))
        elif claim is not None and claim.committed + claim.rolled_back:
            # The replay of a batch its take-over finished (after a crash): no line, as nothing
            # was committed now, but the metrics count what the take-over resolved.
            timeline.recovered(label, batchId, query_id, claim, len(tries) - 1)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, step 5: after a task of batch ``batchId`` failed for good."""
        log_to_stderr()
        committables, claim = _unwrap(messages, batchId)
        committer = self.plan.new_committer()
        call_with_retries(lambda: committer.abort(committables, batchId, claim),
                          f"abort of batch {batchId}", self.plan.commit_retries, self.plan.retry_backoff_s)


def _unwrap(messages: list[WriterCommitMessage | None], batch_id: int) -> tuple[list[Committable],
                                                                                 Claim[Any] | None]:
    """The committables of the tasks that reported, and the one claim they wrote under."""
    out, claims = [], set()
    for m in messages:
        if m is None:  # the task failed before returning a message
            continue
        if not isinstance(m, TaskReport) or not isinstance(m.committable, Committable):
            raise UnknownCommitError(f"unexpected commit message {type(m).__name__}; expected a TaskReport")
        out.append(m.committable)
        claims.add(m.claim)
    if len(claims) > 1:
        raise FatalCommitError(f"batch {batch_id}'s tasks wrote under {len(claims)} different claims; one "
                               "batch is planned once, so this is a bug: nothing of it is committed")
    return out, claims.pop() if claims else None
