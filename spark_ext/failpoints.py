"""Crash points for fault tests: simulate ``kill -9`` of the driver at a named step.

Set ``SPARK_EXT_FAILPOINTS`` to a comma list of names, each optionally naming a batch:
``jdbc.after_decision`` fires at the first hit that carries data (a crash in an empty
batch proves nothing), ``jdbc.after_decision@2`` when batch 2 reaches that step (so a
test can crash after batches were committed). Set
``SPARK_EXT_FAILPOINT_PGID`` to the process group of a driver started in its own group;
Python workers inherit both through the JVM. When a worker reaches an armed step it
sends SIGKILL to that group, as ``kill -9`` of the driver would (PySpark's worker daemon
runs in a group of its own, hence the variable).

A name prefixed ``task:`` (``task:jdbc.after_prepare@3``) kills only the Python worker
running the task, and only in the task's first attempt: Spark sees a failed task and
retries it, as when an executor dies after the task prepared its transaction.

A name prefixed ``worker:`` (``worker:jdbc.after_decision@2``) kills only the Python
process that reaches the step, every time: for a commit step the worker PySpark starts to
run the batch's commit, as an out-of-memory kill of that worker would, while the driver
lives on.

With ``SPARK_EXT_FAILPOINT_LOG`` set to a file, each kill first appends its point
(``task:name@batch`` or ``name@batch``) there, so a test can tell a fault struck.

Failpoints only observe: ``hit`` returns or kills, it never changes what the caller does.
Unset, ``hit`` is one dictionary lookup. Test-only: never set it in production.
"""

from __future__ import annotations

import os
import signal

ENV = "SPARK_EXT_FAILPOINTS"
PGID_ENV = "SPARK_EXT_FAILPOINT_PGID"
LOG_ENV = "SPARK_EXT_FAILPOINT_LOG"


def armed(name: str, batch: int | None, rows: int | None, spec: str | None) -> bool:
    """Does the comma list ``spec`` arm ``name`` for this hit (``batch``, ``rows`` if known)?"""
    for entry in (spec or "").split(","):
        point, _, at = entry.strip().partition("@")
        if point != name:
            continue
        if at and batch is not None and at == str(batch):
            return True
        if not at and (rows is None or rows > 0):
            return True
    return False


def hit(name: str, batch: int | None = None, rows: int | None = None) -> None:
    """Kill the driver's process group here if ``name`` is armed for this hit. Callers pass
    what they know (the batch, the rows at stake); ``hit`` never changes what they do."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    if armed(name, batch, rows, spec):
        _record(name, batch)
        os.killpg(int(os.environ.get(PGID_ENV) or os.getpgid(0)), signal.SIGKILL)
        # This worker may sit in the worker daemon's group and would run on, orphaned.
        os.kill(os.getpid(), signal.SIGKILL)
    if armed(f"worker:{name}", batch, rows, spec):
        _record(f"worker:{name}", batch)
        os.kill(os.getpid(), signal.SIGKILL)
    if armed(f"task:{name}", batch, rows, spec):
        from spark_ext import compat

        ident = compat.task_identity()
        if ident is not None and ident.attempt == 0:
            _record(f"task:{name}", batch)
            os.kill(os.getpid(), signal.SIGKILL)


def _record(point: str, batch: int | None) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{point}@{batch}\n")
