"""A Python data source sink that reads every row and writes nothing: what Spark's Python
Data Source API costs per task and per batch before a sink does any work (the Python
worker, the Arrow transfer of the rows, the task's commit message, the driver's commit
call). No Python sink, ours included, can be faster; the scaling curves print it beside
ours so a cliff of Spark's framework is not read as one of ours."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

from spark_ext.compat import StreamArrowWriter

FORMAT = "spark_ext_bench_floor"


class _Writer(StreamArrowWriter):
    """Executor: counts the rows of each Arrow batch it is handed; driver: commits nothing."""

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class FloorSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return _Writer()


def register(spark: Any) -> None:
    spark.dataSource.register(FloorSink)
