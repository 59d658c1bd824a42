"""Small fakes for unit tests of pure protocol logic (never proof that a connector works)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from spark_ext.commit import Committable, SinkWriter, TaskInfo


class NullWriter(SinkWriter[Committable]):
    """Counts rows and prepares nothing."""

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> Committable:
        rows = sum(b.num_rows for b in batches)
        return Committable(task.batch_id, task.partition_id, task.attempt, rows)
