"""A Python worker's heap, kept out of the full collection PySpark runs after every task.

PySpark's worker daemon reuses a Python worker for task after task and runs a full
``gc.collect()`` in it after each one. A full collection walks every container object the
process holds, and most of them are the modules it imported: PySpark, pyarrow and numpy
alone are about 40,000 objects; our connectors' (kafka-python's protocol classes above
all) take a Kafka sink's worker to about 95,000. Measured in ``bench.kafka_tasks`` at 64
tasks of 15,625 rows: each of those collections took 25-40 ms of CPU, about 2.5 CPU-s a
batch, more than the tasks' own writing (0.56 CPU-s).

So a task of ours, the first time it runs in a worker process, collects once and then
freezes what is alive (``gc.freeze``): those objects move to a permanent generation that
later collections skip. Objects created afterwards are collected as before. An object
alive at that moment and freed later is still freed by its reference count; only one
that then becomes garbage inside a reference cycle stays until the worker exits. Such
objects are the modules and what the worker's earlier tasks kept, once per process.

It runs only inside a Spark task (``TaskContext``) in a worker the daemon reuses
(``compat.in_reused_worker``): the driver's process and PySpark's planning and commit
workers are never frozen, and a worker that runs one task and exits, which PySpark never
collects, is spared a collection it would not have paid.
"""

from __future__ import annotations

import gc

from spark_ext import compat

_settled = False


def settle() -> None:
    """Executor, at the start of each task of ours: the first time in this process, collect
    and freeze the heap (module docstring); after that, nothing."""
    global _settled
    if _settled:
        return
    from pyspark import TaskContext

    if TaskContext.get() is None or not compat.in_reused_worker():
        return
    _settled = True
    gc.collect()
    gc.freeze()
