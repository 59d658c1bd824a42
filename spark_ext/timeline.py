"""Where a batch's time went on the sink's side: one INFO line per batch, every guarantee.

Three processes see parts of a batch, so no one of them can time it alone: the driver's
planning worker (configure, validate, take-over: ``PlanTimes``), the executors (each
task's write and prepare: ``WriteTimes``) and the driver's commit worker (decide,
commit). The plan's times travel to the tasks inside the plan and come back with each
task's own in its report; the commit worker, which receives every report, writes the
line. Spark's own phases (``durationMs`` of the query's progress: planning, the tasks,
the offset and commit logs) are beside it in the query's progress, not in here.

Wall clocks: ``PlanTimes.started_ms`` and the commit's end are both read on the driver,
so ``batch_ms`` (plan start to commit end) is one clock's difference. Executors' clocks
may be off; their durations are measured on their own monotonic clocks.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass


def now_ms() -> float:
    """This process's wall clock, epoch milliseconds."""
    return time.time() * 1000


@dataclass(frozen=True)
class PlanTimes:
    """Step 1 on the driver: when it began (wall clock) and each part's milliseconds."""

    started_ms: float
    configure_ms: float = 0.0
    validate_ms: float = 0.0
    take_over_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.configure_ms + self.validate_ms + self.take_over_ms


@dataclass(frozen=True)
class WriteTimes:
    """Step 3, one task attempt: its writer's milliseconds (rows in, prepared or flushed)."""

    write_ms: float


@dataclass(frozen=True)
class CommitTimes:
    """Step 4 on the driver: transactions committed, and the milliseconds to the decision
    (checks included) and from it to the end (winners, done, others rolled back)."""

    transactions: int = 0
    decide_ms: float = 0.0
    commit_ms: float = 0.0
    dead_letters: int | None = None  # refused rows set aside (None: no dead-letter destination)
    #: The rows of a decision found recorded, not made now (a replay after a crash, whose
    #: tasks wrote nothing): what the batch commits. None: decided now, or not kept.
    decided_rows: int | None = None


@dataclass(frozen=True)
class DoneBefore:
    """Step 4 found the batch carried out to its end before (a replay after a crash): no
    line, but its card counts ``rows``, the rows its decision committed (None: not kept),
    as the card of a batch killed before its card was written would have."""

    rows: int | None = None


def line(label: str, batch_id: int, query_id: str | None, rows: int, plan: PlanTimes | None,
         writes: Sequence[WriteTimes], commit: CommitTimes, ended_ms: float) -> str:
    """The batch's line: ``key=value`` for grep and log shippers, ids and counts only
    (never a URL or a credential). Fields a guarantee does not have are left out."""
    parts = [f"{label}: committed batch={batch_id}", f"query={query_id or '-'}",
             f"transactions={commit.transactions}", f"rows={rows}",
             f"decide_ms={commit.decide_ms:.0f}", f"commit_ms={commit.commit_ms:.0f}", f"tasks={len(writes)}"]
    if commit.dead_letters is not None:
        parts.append(f"dead_letters={commit.dead_letters}")
    if writes:
        ms = [w.write_ms for w in writes]
        parts += [f"write_ms_median={statistics.median(ms):.0f}", f"write_ms_max={max(ms):.0f}"]
    if plan is not None:
        parts += [f"plan_ms={plan.total_ms:.0f}", f"configure_ms={plan.configure_ms:.0f}",
                  f"validate_ms={plan.validate_ms:.0f}", f"take_over_ms={plan.take_over_ms:.0f}",
                  f"batch_ms={max(ended_ms - plan.started_ms, 0.0):.0f}"]
    return " ".join(parts)


def report(label: str, batch_id: int, query_id: str | None, rows: int, plan: PlanTimes | None,
           writes: Sequence[WriteTimes], commit: CommitTimes, ended_ms: float, *,
           epoch: int | None = None, recovered: int = 0, rolled_back: int = 0, retries: int = 0) -> str:
    """``line``, and the same figures as the sink's metrics card for a running exporter
    (``spark_ext.monitoring.cards``: a local file, written only when an exporter serves).
    ``epoch``: the batch's fencing epoch; ``recovered``: the in-doubt transactions its
    take-over resolved, ``rolled_back`` of them rolled back (the rest committed);
    ``retries``: commit attempts retried."""
    from spark_ext.monitoring import cards

    fields = {"rows": rows, "transactions": commit.transactions, "decide_ms": round(commit.decide_ms, 1),
              "commit_ms": round(commit.commit_ms, 1), "dead_letters": commit.dead_letters,
              "batch_ms": round(max(ended_ms - plan.started_ms, 0.0), 1) if plan is not None else None,
              "at": ended_ms / 1000, "retries": retries, "epoch": epoch, "recovered": recovered,
              "rolled_back": rolled_back}
    cards.write(query_id, label, batch_id, fields)
    return line(label, batch_id, query_id, rows, plan, writes, commit, ended_ms)


def recovered(label: str, batch_id: int, query_id: str | None, epoch: int | None, resolved: int,
              rolled_back: int, retries: int, rows: int | None) -> None:
    """The metrics card of a batch carried out before this commit (a replay after a crash):
    the rows its decision committed (the card of a batch counts once, so a card written
    before the crash is replaced, not added to), its epoch, and the transactions the
    take-over resolved (``rolled_back`` of them rolled back). ``rows`` None: not kept by the
    decision (the card keeps its count)."""
    from spark_ext.monitoring import cards

    cards.write(query_id, label, batch_id, {"rows": rows, "at": time.time(), "retries": retries,
                                            "epoch": epoch, "recovered": resolved,
                                            "rolled_back": rolled_back})


LOG_LEVEL_ENV = "SPARK_EXT_LOG_LEVEL"


def log_to_stderr() -> None:
    """Send spark-ext's log records to stderr at ``$SPARK_EXT_LOG_LEVEL`` (default INFO),
    unless this process configured logging itself: ``commit`` and ``abort`` run in a worker
    no logging set-up of the job reaches (Spark forwards its stderr to the driver's)."""
    pkg = logging.getLogger("spark_ext")
    if logging.getLogger().handlers or pkg.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    pkg.addHandler(handler)
    level = os.environ.get(LOG_LEVEL_ENV, "INFO").strip().upper()
    pkg.setLevel(level if isinstance(logging.getLevelName(level), int) else logging.INFO)
