"""The latency floor's sink for ``peer_latency_eo``: a Python streaming data source that
writes nothing (``format("bench_floor")``).

It goes through the machinery every Python sink pays, ours included: Spark's Python
write planner on the driver, a Python worker per task receiving the batch's rows as
Arrow (``DataSourceStreamArrowWriter``, as ``hzsink``'s writer), and the commit runner
on the driver. The tasks drain their rows and return an empty commit message; the
commit appends ``<batch id> <time.time_ns()>`` to the file named by option ``commits``
(one line a batch), the moment the batch would have become visible.

Workers import no ``bench`` module: ``register`` has the classes pickled by value.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, WriterCommitMessage

from spark_ext.compat import StreamArrowWriter

NAME = "bench_floor"


class FloorSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def streamWriter(self, schema: Any, overwrite: bool) -> FloorWriter:
        return FloorWriter(self.options["commits"])


class FloorWriter(StreamArrowWriter):
    def __init__(self, commits: str) -> None:
        self.commits = commits

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _batch in iterator:  # the rows reach the worker, as they reach any sink's
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        now = time.time_ns()
        with open(self.commits, "a") as f:
            f.write(f"{batchId} {now}\n")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


def register(spark: Any) -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(FloorSink)


def commit_times(path: str) -> dict[int, int]:
    """Batch id -> the commit's time in ns, from the file the sink appended to."""
    out: dict[int, int] = {}
    try:
        with open(path) as f:
            for line in f:
                batch, ns = line.split()
                out[int(batch)] = int(ns)
    except FileNotFoundError:
        pass
    return out
