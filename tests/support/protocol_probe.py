"""A probe sink on the real commit protocol: records what each side saw, in files.

Lives in an importable module (not a test file) because Spark pickles it to Python
workers; conftest puts the repository on PYTHONPATH for them.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter
from pyspark.sql.types import StructType

from spark_ext import compat
from spark_ext.commit import (
    Claim,
    Committable,
    Committer,
    SinkWriter,
    TaskInfo,
)
from spark_ext.guarantees import Guarantee
from spark_ext.stream import ProtocolStreamWriter, SinkPlan


@dataclass(frozen=True)
class ProbeCommittable(Committable):
    """The base fields (batch, partition, attempt, rows, query id) are all the probe needs."""


class ProbeWriter(SinkWriter[ProbeCommittable]):
    def __init__(self, out: str, fail_batch: int = -1) -> None:
        self.out = Path(out)
        self.fail_batch = fail_batch

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> ProbeCommittable:
        rows = sum(b.num_rows for b in batches)
        if task.batch_id == self.fail_batch and task.partition_id == 0:
            # Fail only once the other task has succeeded, so the abort's messages are certain.
            other = self.out / f"done-{task.batch_id}-1"
            deadline = time.monotonic() + 60
            while not other.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)  # its result still has to reach the driver, which nothing here shows
            raise ValueError(f"probe: failing batch {task.batch_id} on purpose")
        msg = ProbeCommittable(task.batch_id, task.partition_id, task.attempt, rows, query_id=task.query_id)
        (self.out / f"done-{task.batch_id}-{task.partition_id}").touch()
        return msg


class ProbeCommitter(Committer[ProbeCommittable]):
    def __init__(self, out: str) -> None:
        self.out = Path(out)

    def _log(self, kind: str, committables: Sequence[ProbeCommittable], batch_id: int) -> None:
        with open(self.out / "log.jsonl", "a") as f:
            f.write(json.dumps({"kind": kind, "batch_id": batch_id,
                                "committables": [asdict(c) for c in committables]}) + "\n")

    def commit(self, committables: Sequence[ProbeCommittable], batch_id: int,
               claim: Claim[Any] | None, run_id: str = "") -> None:
        self._log("commit", committables, batch_id)

    def abort(self, committables: Sequence[ProbeCommittable], batch_id: int,
              claim: Claim[Any] | None) -> None:
        self._log("abort", committables, batch_id)


class ProbeSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "protocolprobe"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        out = self.options["out"]
        with open(Path(out) / "writers.jsonl", "a") as f:  # why Spark built this writer, and with what
            f.write(json.dumps({"in_commit_runner": compat.in_commit_runner(),
                                "options": sorted(self.options)}) + "\n")
        fail_batch = int(self.options.get("fail_batch", "-1"))
        return ProtocolStreamWriter(SinkPlan(
            Guarantee.EXACTLY_ONCE,
            new_writer=functools.partial(ProbeWriter, out, fail_batch),
            new_committer=functools.partial(ProbeCommitter, out),
        ))
