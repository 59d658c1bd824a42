"""One exactly-once PostgreSQL task that stalls mid-COPY, for a test to freeze (SIGSTOP).

Usage: python -m tests.drivers.frozen_jdbc_task URL TABLE SINK_ID

Plans the sink as a run's driver would (taking it over), then writes batch 0 partition 0
as an executor's task would, from an input that yields one Arrow batch and then never
goes on until a line arrives on stdin: the task's session holds its share lock on the
sink's row and its first rows, as a task on an executor frozen mid-write does. Prints
``copying`` once the first rows are sent; the line releases the rest of the input.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_ext.commit import TaskInfo
from spark_ext.connectors.jdbc import JdbcSink
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options


def main(url: str, table: str, sink_id: str) -> int:
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    plan = JdbcSink().plan(Options({"url": url, "dbtable": table, "sinkid": sink_id}, "hzsink"), schema,
                           Guarantee.EXACTLY_ONCE)

    def rows() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"id": pa.array(range(1000), pa.int64()), "v": pa.array(["x"] * 1000)})
        print("copying", flush=True)
        sys.stdin.readline()
        yield pa.record_batch({"id": pa.array(range(1000, 2000), pa.int64()), "v": pa.array(["x"] * 1000)})

    plan.new_writer().write(rows(), TaskInfo("q", 0, 0, 0, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
