"""A Python worker's heap is frozen once, at our first task there (``spark_ext.worker_heap``):
PySpark's daemon runs a full ``gc.collect()`` after every task, which then skips the
modules. In real Spark tasks (the session's local Python workers), and where our tasks
start."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from spark_ext import compat, worker_heap
from spark_ext.commit import NoOpCommitter, TaskInfo
from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.connectors.kafka.source.reader import read_partition
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from spark_ext.stream import ProtocolStreamWriter, SinkPlan
from tests.support.fakes import NullWriter


def _probe(_: Iterator[Any]) -> Iterator[tuple[int, int, int, int]]:
    """In a task: (pid, frozen before, frozen after ``settle``, objects a full collection
    still walks after it)."""
    import gc
    import os

    from spark_ext import worker_heap

    before = gc.get_freeze_count()
    worker_heap.settle()
    yield os.getpid(), before, gc.get_freeze_count(), len(gc.get_objects())


def test_our_first_task_in_a_python_worker_freezes_its_heap_once_and_the_driver_never(spark):
    """Before: every task paid a full collection of the worker's modules (25-40 ms a task
    at 64 tasks of the Kafka sink). Now the first task of ours in a worker freezes them,
    the worker's later tasks freeze nothing more, and the driver's process is never frozen."""
    driver_frozen = gc.get_freeze_count()
    worker_heap.settle()  # not a task: nothing happens
    assert gc.get_freeze_count() == driver_frozen
    got = spark.sparkContext.parallelize(range(12), 12).mapPartitions(_probe).collect()
    by_pid: dict[int, list[tuple[int, int, int]]] = {}
    for pid, before, after, walked in got:
        by_pid.setdefault(pid, []).append((before, after, walked))
    later = [t for tasks in by_pid.values() for t in tasks if t[0]]
    assert later, by_pid  # a worker ran a task after the one that froze it
    for pid, tasks in by_pid.items():
        for before, after, walked in tasks:
            assert after > 20_000, (pid, tasks)  # PySpark's, pyarrow's and our modules, frozen
            # A freeze leaves nothing for a collection to walk; a later task of the process
            # freezes nothing more, so the objects it made since are walked as before. (The
            # frozen count can shrink: a frozen object freed by its reference count leaves.)
            assert (walked == 0) if not before else (0 < walked < after / 5), (pid, tasks)


def _reuse(_: Iterator[Any]) -> Iterator[tuple[bool, bool, int]]:
    """In a task: (is the worker reused; would it be without ``SPARK_REUSE_WORKER``; the
    objects ``settle`` would freeze then, as if this were the process's first task)."""
    import gc
    import os

    from spark_ext import compat, worker_heap

    reused = compat.in_reused_worker()
    kept, settled = os.environ.pop("SPARK_REUSE_WORKER", None), worker_heap._settled
    try:
        worker_heap._settled = False
        before = gc.get_freeze_count()
        worker_heap.settle()
        yield reused, compat.in_reused_worker(), gc.get_freeze_count() - before
    finally:
        worker_heap._settled = settled
        if kept is not None:
            os.environ["SPARK_REUSE_WORKER"] = kept


def test_a_worker_the_daemon_does_not_reuse_is_not_frozen(spark):
    """A worker that runs one task and exits is never collected by PySpark: freezing it
    would add a collection. The session's workers are reused (Spark's default); without
    ``SPARK_REUSE_WORKER`` (``spark.python.worker.reuse`` false) they are not, and ``settle``
    freezes nothing. The driver's process is not a reused worker."""
    got = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_reuse).collect()
    assert got == [(True, False, 0)] * 2  # reused; not without the variable, and then not frozen
    assert not compat.in_reused_worker()


def test_our_sink_writers_and_source_readers_settle_the_heap_at_their_tasks_start(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(worker_heap, "settle", lambda: calls.append("settle"))
    writer = ProtocolStreamWriter(SinkPlan(Guarantee.AT_LEAST_ONCE, NullWriter, NoOpCommitter))
    task = TaskInfo(query_id="q", batch_id=0, partition_id=0, attempt=0, task_attempt_id=0)
    writer.write_as(iter([pa.record_batch([pa.array(["a"])], names=["value"])]), task)
    assert calls == ["settle"]
    cfg = KafkaSourceConfig.parse(Options({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"},
                                          "hzsource"), batch=True)
    assert list(read_partition(cfg, InputPartition(None))) == []
    assert calls == ["settle", "settle"]
