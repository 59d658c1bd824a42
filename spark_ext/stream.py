"""Spark's streaming writer over the commit protocol (``spark_ext.commit``).

Spark calls a data source's writer in three processes, and this module is what it calls:
``write`` in each task on an executor (step 3), ``commit`` / ``abort`` in the driver's
commit worker (steps 4 and 5). The protocol's steps themselves are
``spark_ext.commit.TwoPhaseCommitter``'s; here they are reached from Spark's calls, with
the bounded retries of step 4 and the batch's timeline line (``spark_ext.timeline``).

How the claim reaches step 4: Spark gives the commit worker nothing of the plan but the
tasks' commit messages, so each committable travels in a ``TaskReport`` with the claim
the task wrote under, and ``commit`` / ``abort`` hand the committer that claim; committables
carry only what their task alone knows. Every task of a batch comes from one plan, so
reports naming two claims are refused.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import WriterCommitMessage

from spark_ext import deadletters, timeline, worker_heap
from spark_ext.commit import Claim, Committable, Committer, SinkWriter, TaskInfo, TwoPhaseCommitter
from spark_ext.compat import StreamArrowWriter
from spark_ext.errors import (
    CommitError,
    FatalCommitError,
    ReleaseMismatchError,
    RetriableCommitError,
    RetriesExhaustedError,
    UnknownCommitError,
)
from spark_ext.guarantees import Guarantee
from spark_ext.release import VERSION
from spark_ext.retry import Backoff, retry
from spark_ext.shipping import Shipped
from spark_ext.timeline import CommitTimes, DoneBefore, PlanTimes, WriteTimes, log_to_stderr

if TYPE_CHECKING:
    import pyarrow as pa

# The batch's line keeps the protocol's logger name: operators' log filters name it.
log = logging.getLogger("spark_ext.commit")


@dataclass(frozen=True)
class TaskReport(WriterCommitMessage):
    """One task attempt's message to the driver: its committable and the claim it wrote
    under; for the batch's timeline, its plan's times and its own."""

    committable: Committable
    claim: Claim[Any] | None
    plan_times: PlanTimes | None = None
    write_times: WriteTimes | None = None
    run_id: str = ""  # the run of the query the task wrote in ("": not known)

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
    release: str = VERSION  # the driver's spark-ext, which planned the batch


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

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Executor, step 3: one task attempt's rows -> a ``Committable``, with the claim."""
        return self.write_as(iterator, TaskInfo.current())

    def write_as(self, iterator: Iterator[pa.RecordBatch], task: TaskInfo) -> TaskReport:
        """``write`` for ``task``, where the running task's ids as Spark names them are not
        the batch's (a ``foreachBatch`` write: ``spark_ext.batch``)."""
        if self.plan.release != VERSION:
            raise ReleaseMismatchError(
                f"the driver planned this batch with spark-ext {self.plan.release}, and this executor runs "
                f"spark-ext {VERSION}: one release must run on the driver and every executor (ship the "
                "driver's environment with --archives, or install the same release everywhere); nothing "
                "of the batch was written")
        worker_heap.settle()
        started = time.monotonic()
        writer = self.plan.new_writer()
        if not getattr(writer, "sets_corrupt_aside", False):
            iterator = (deadletters.refuse_corrupt(rb) for rb in iterator)
        committable = writer.write(iterator, task)
        took = WriteTimes((time.monotonic() - started) * 1000)
        return TaskReport(committable, self.plan.claim, self.plan.times, took, task.run_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, step 4: after every task of batch ``batchId`` succeeded. Logs the
        batch's one INFO line (``spark_ext.timeline``), which operators read."""
        log_to_stderr()
        committables, claim, run_id = _unwrap(messages, batchId)
        committer = self.plan.new_committer()
        took: list[CommitTimes | DoneBefore | None] = []
        tries: list[int] = []

        def attempt() -> None:
            tries.append(1)  # a retried attempt counts in the sink's metrics
            took.append(committer.commit(committables, batchId, claim, run_id))

        call_with_retries(attempt, f"commit of batch {batchId}", self.plan.commit_retries,
                          self.plan.retry_backoff_s)
        label = committer.label if isinstance(committer, TwoPhaseCommitter) else self.plan.label
        query_id = committables[0].query_id if committables else None
        result = took[-1] if took else None
        if isinstance(result, CommitTimes):
            reports = [m for m in messages if isinstance(m, TaskReport)]
            plans = [r.plan_times for r in reports if r.plan_times is not None]
            rows = sum(c.rows for c in committables) if result.decided_rows is None else result.decided_rows
            log.info("%s", timeline.report(
                label, batchId, query_id, rows, plans[0] if plans else None,
                [r.write_times for r in reports if r.write_times is not None], result, timeline.now_ms(),
                epoch=claim.epoch if claim is not None else None,
                recovered=claim.resolved if claim is not None else 0,
                rolled_back=claim.rolled_back if claim is not None else 0, retries=len(tries) - 1))
        elif isinstance(result, DoneBefore) or (claim is not None and claim.resolved):
            # The replay of a batch carried out before (after a crash): no line, as nothing
            # was committed now, but the metrics count its rows (a driver killed between the
            # commit and the card never counted them) and what the take-over resolved.
            timeline.recovered(label, batchId, query_id, claim.epoch if claim is not None else None,
                               claim.resolved if claim is not None else 0,
                               claim.rolled_back if claim is not None else 0, len(tries) - 1,
                               result.rows if isinstance(result, DoneBefore) else 0)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, step 5: after a task of batch ``batchId`` failed for good."""
        log_to_stderr()
        committables, claim, _ = _unwrap(messages, batchId)
        committer = self.plan.new_committer()
        call_with_retries(lambda: committer.abort(committables, batchId, claim),
                          f"abort of batch {batchId}", self.plan.commit_retries, self.plan.retry_backoff_s)


def _unwrap(messages: list[WriterCommitMessage | None], batch_id: int) -> tuple[list[Committable],
                                                                                 Claim[Any] | None, str]:
    """The committables of the tasks that reported, the one claim they wrote under, and the
    run they wrote in ("" unless every report names the same one)."""
    out, claims, runs = [], set(), set()
    for m in messages:
        if m is None:  # the task failed before returning a message
            continue
        if not isinstance(m, TaskReport) or not isinstance(m.committable, Committable):
            raise UnknownCommitError(f"unexpected commit message {type(m).__name__}; expected a TaskReport")
        out.append(m.committable)
        claims.add(m.claim)
        runs.add(m.run_id)
    if len(claims) > 1:
        raise FatalCommitError(f"batch {batch_id}'s tasks wrote under {len(claims)} different claims; one "
                               "batch is planned once, so this is a bug: nothing of it is committed")
    return out, claims.pop() if claims else None, runs.pop() if len(runs) == 1 else ""
