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
   is not decided yet, (a) check that the query decided no batch under another identity
   of this sink that may hold N (a copied checkpoint), that the run still owns the sink
   and that every winner is still open, (b) record the decision "batch N commits these
   transactions" durably in the external system, fenced by the claim; then (c) commit
   every winner, mark the decision finished, (d) roll back every other transaction of the
   batch. It is idempotent: a
   crash after (b) leaves the rest to the next step 1, a retry finds N decided and goes
   on at (c). Retriable errors are retried here (bounded); fatal ones fail the query
   loudly. Then Spark writes commit log N. A crash before commit log N makes Spark
   replay N; the replay finds N decided and writes nothing again. A batch found decided
   by the very run writing it, its tasks having written nothing and its take-over having
   found nothing of it to finish, is a second write of N under this identity, not a
   replay: refused (``check_second_write``).
5. **Driver** (``TwoPhaseCommitter.abort(committables, N, claim)``): roll back what the
   batch's tasks prepared; a batch already decided in step 4(b) is left for step 1.

Spark reaches these steps through ``spark_ext.stream`` (its writer: each task's report
carries the claim it wrote under to step 4) and ``spark_ext.batch`` (the same writer for
``foreachBatch``).

The crash points (``spark_ext.failpoints``) at the step boundaries are hit here, named
``<committer name>.<point>``, so every sink has the same ones: ``before_decision``,
``after_decision``, ``mid_commit`` (after the first winner), ``after_done``. Weaker
guarantees plug in the same way: their writers flush before returning, the plan skips
``take_over`` and uses ``NoOpCommitter``. The routing sink (``spark_ext.routing``)
composes its sub-sinks' primitives in this same order: its 4b is the one decision; each
sub-sink records its part as its own (``adopt``) before any winner commits, and its
take-over hands each sub-sink an unfinished one.

Writers and committers are built fresh where they run, from a plan of plain, picklable
configuration and the claim (never a live connection).
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

from spark_ext import compat, failpoints
from spark_ext.errors import (
    CommitError,
    FatalCommitError,
    NewerFormatError,
    PredecessorSinkError,
    SecondWriteError,
    SparkExtError,
)
from spark_ext.options import is_sibling
from spark_ext.timeline import CommitTimes, DoneBefore

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
    run_id: str = ""  # Spark's run of the query ("": not known, e.g. under Spark Connect)

    @classmethod
    def current(cls) -> TaskInfo:
        """The running task's identity. Executor only; raises outside a Spark task."""
        ident = compat.task_identity()
        if ident is None:
            raise SparkExtError("TaskInfo.current() called outside a Spark task")
        return cls(query_id=ident.query_id, batch_id=ident.batch_id if ident.batch_id is not None else -1,
                   partition_id=ident.partition_id, attempt=ident.attempt,
                   task_attempt_id=ident.task_attempt_id, run_id=ident.run_id)


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


@dataclass(frozen=True)
class Predecessor:
    """Another identity under which this batch's query decided batches in the sink's
    system: the sink it ran as before its checkpoint was copied, spelled differently, or
    given another id. ``name``: that identity as its option spells it; ``finished``: its
    last decision carried out; ``in_doubt``: transactions it left prepared or open;
    ``checkpoint``: where it ran from, where the system keeps it."""

    name: str
    last_batch: int
    finished: bool
    in_doubt: int = 0
    checkpoint: str | None = None


R = TypeVar("R")


def read_other(read: Callable[[], R], query_id: str,
               not_a_sink: tuple[type[Exception], ...] = (ValueError, KeyError, TypeError)) -> R | None:
    """Step 4a's search reading another identity's record with ``read``: None when it is no
    sink's record (``not_a_sink`` raised; a caller whose listing can go stale adds the error
    of a record gone since it was listed), or a newer release's record of another query.
    A newer release's record of this query, or one whose query is not known, is refused:
    whether that sink left this batch decided or in doubt cannot be read here."""
    try:
        return read()
    except not_a_sink:
        return None
    except NewerFormatError as e:
        if e.query_id is not None and e.query_id != query_id:
            return None
        raise


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

    def replays(self, task: TaskInfo) -> bool:
        """Step 3's replay rule: this claim shows ``task``'s batch decided by the same
        query (before a crash), so its rows are in the sink and the task writes nothing."""
        d = self.last_decided
        if d is None or d.query_id != task.query_id or task.batch_id > d.batch_id:
            return False
        log.info("batch %s was committed before; writing nothing", task.batch_id)
        return True

    @property
    def resolved(self) -> int:
        """In-doubt transactions step 1 committed or rolled back."""
        return self.committed + self.rolled_back

    @property
    def epoch(self) -> int | None:
        """The fence's epoch: the fence itself (PostgreSQL, MariaDB) or its ``epoch`` (a
        Kafka producer, a queue sink's or a routing sink's fence)."""
        fence: Any = self.fence
        epoch = fence if isinstance(fence, int) else getattr(fence, "epoch", None)
        return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


C = TypeVar("C", bound=Committable)
D = TypeVar("D")


@dataclass(frozen=True)
class Batch(Generic[C]):
    """What steps 4 and 5 know of batch ``batch_id``: every committable that reached the
    driver, the ones holding a transaction, and the claim of the plan that ran it."""

    batch_id: int
    committables: tuple[C, ...]
    claim: Claim[Any] | None
    run_id: str = ""  # the run of the query whose tasks reported ("": not known)

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
               claim: Claim[Any] | None, run_id: str = "") -> CommitTimes | DoneBefore | None:
        """Step 4: make batch ``batch_id`` visible. Driver; must be idempotent. Returns what
        it took; ``DoneBefore`` for a replay of a batch finished before; None when no task
        reported. ``run_id``: Spark's run the tasks wrote in."""

    @abstractmethod
    def abort(self, committables: Sequence[C], batch_id: int, claim: Claim[Any] | None) -> None:
        """Step 5: roll back what the batch's tasks prepared. Driver; must be idempotent."""


class NoOpCommitter(Committer[Committable]):
    """For at-least-once and none: writers flushed before returning, nothing to finish."""

    def commit(self, committables: Sequence[Committable], batch_id: int,
               claim: Claim[Any] | None, run_id: str = "") -> CommitTimes | None:
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
    #: How a refusal names an identity of this kind of sink, and the option that sets it.
    kind: ClassVar[str] = "sink"
    id_option: ClassVar[str] = "sinkId"

    @property
    def identity(self) -> str:
        """This sink's identity as ``id_option`` spells it ("": not known to the committer)."""
        return ""

    @property
    def label(self) -> str:
        """Who commits, in log lines: the connector and, where the committer knows it, the sink."""
        return f"{self.name} sink {self.identity}" if self.identity else self.name

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
        by the claim, and ``batch.run_id`` with it (``run_of``). Returns the decision (an
        earlier one, if a race recorded it first)."""

    def run_of(self, decision: D) -> str:
        """The run ``decision`` was recorded in, as ``record`` kept it ("": not kept)."""
        return ""

    def rows_of(self, decision: D) -> int | None:
        """The rows ``decision`` commits, as ``record`` kept them (None: not kept)."""
        return None

    @final
    def check_second_write(self, batch: Batch[C], decision: D) -> None:
        """Step 4, a batch found decided: its tasks found it decided before they wrote
        (none prepared), in the run that decided it, and this write's take-over found
        nothing of it left to finish. Spark runs a decided batch again only in a new run
        (after a restart), so this is a second write of the batch under this sink's
        identity: two writes of one ``foreachBatch`` function sharing an id, the second of
        which would otherwise write nothing and say nothing. A write the function retries
        after its commit failed is not one: its take-over finished what the failed commit
        left in doubt (its claim counts it)."""
        if not batch.run_id or batch.prepared or self.run_of(decision) != batch.run_id:
            return
        if batch.claim is not None and batch.claim.resolved:
            return
        raise SecondWriteError(
            f"batch {batch.batch_id} of {self.kind} {self.identity!r} was already written in this run of "
            f"query {batch.query_id}, and this write of it would write nothing: two writes of one "
            f"foreachBatch function share {self.id_option} {self.identity!r}. Give each write its own "
            f".option('{self.id_option}', ...) and restart from the same checkpoint (Spark runs the batch "
            "again; the write that landed writes nothing, the renamed one writes its rows)")

    def predecessors(self, batch: Batch[C]) -> Sequence[Predecessor]:
        """Step 4a's search: other identities under which ``batch``'s query decided batches
        in this sink's system. ``siblings`` among them are passed over by the check; a
        search may leave them out first where weighing them costs. Default: none kept."""
        return ()

    def siblings(self, name: str) -> bool:
        """Whether identity ``name`` decides the same batches as this sink: another sub-sink
        of the routing sink this one belongs to, or that routing sink itself."""
        return is_sibling(self.identity, name)

    def roll_back_own(self, batch: Batch[C]) -> None:
        """Roll back what ``batch``'s reported attempts prepared, and nothing of another
        run's: safe before the fence is checked. Default: ``roll_back``."""
        self.roll_back(batch)

    def carry_on(self, predecessor: Predecessor) -> str:
        """The way out a predecessor's refusal names. Default: carry the old identity on."""
        return (f"Restart with .option('{self.id_option}', '{predecessor.name}') to carry that sink on (its "
                "decided batches are finished, none written twice) and keep that option")

    @final
    def check_predecessors(self, batch: Batch[C]) -> None:
        """Step 4a, first: refuse to decide a batch whose query decided batches as another
        sink that may hold this one or left some unfinished, rolling back what the batch's
        attempts prepared (the refused identity may never be taken over again). The sink's
        identity comes from the checkpoint's spelling (or its id option), Spark's query id
        from the checkpoint's content: a checkpoint copied to a new path keeps the query
        under a new identity. If the old one decided this batch (its driver died before
        Spark's commit log) or left transactions in doubt, the new one would write the
        batch again and leave the old transactions waiting for ever; the old one, carried
        on, finishes both."""
        if not batch.query_id:
            return
        try:
            found = self.predecessors(batch)
        except NewerFormatError:
            self.roll_back_own(batch)  # refused as below: the identity may never be taken over
            raise
        for p in found:
            if self.siblings(p.name):
                continue  # another sub-sink of the same routing sink: the same batches, decided once
            if p.last_batch < batch.batch_id and p.finished and not p.in_doubt:
                continue  # an earlier identity whose every batch is done: nothing at stake
            self.roll_back_own(batch)
            at = f" (checkpoint {p.checkpoint})" if p.checkpoint else ""
            left = f" and left {p.in_doubt} transaction(s) in doubt" if p.in_doubt else ""
            raise PredecessorSinkError(
                f"query {batch.query_id} ran before as {self.kind} {p.name!r}{at}, which decided batch "
                f"{p.last_batch}{'' if p.finished else ' without finishing it'}{left}; this run is "
                f"{self.kind} {self.identity!r} (the checkpoint was copied or spelled differently, or "
                f"{self.id_option} changed) and would write batch {batch.batch_id} again. "
                f"{self.carry_on(p)}; nothing of this batch was committed")

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

    def before_winners(self, batch: Batch[C], decision: D) -> D:
        """Runs after the decision is known and before any winner commits, on every try;
        returns the decision the rest of step 4 carries out. Default: ``decision``."""
        return decision

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
               claim: Claim[Any] | None, run_id: str = "") -> CommitTimes | DoneBefore | None:
        """Step 4, in order. Driver; idempotent."""
        batch = Batch(batch_id, tuple(committables), claim, run_id)
        if batch.query_id is None:
            return None  # no task reported: nothing was prepared
        started = time.monotonic()
        with self.connected():
            decision = self.recorded(batch)
            found = decision is not None
            if decision is None:
                if not batch.prepared:
                    return CommitTimes()  # nothing written, nothing decided
                self.check_predecessors(batch)                                      # step 4a
                self.check(batch)
                failpoints.hit(f"{self.name}.before_decision", batch_id, batch.rows)
                decision = self.record(batch)                                       # step 4b
                failpoints.hit(f"{self.name}.after_decision", batch_id, batch.rows)
            else:
                self.check_second_write(batch, decision)
                if self.finished(decision):
                    self.roll_back_others(batch, decision)                          # step 4d
                    return DoneBefore(self.rows_of(decision))
            decided = time.monotonic()
            decision = self.before_winners(batch, decision)
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
                           self.set_aside(batch), self.rows_of(decision) if found else None)

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
