"""Every reliance of spark-ext on PySpark internals, in one place.

Checked on PySpark 4.3 (``PYSPARK_CHECKED``). ``tests/test_compat.py`` checks each
assumption against the installed PySpark and names it when an upgrade breaks it; fix
it here, nowhere else.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

PYSPARK_CHECKED = "4.3"

#: Task local property with the micro-batch id, set on every task of a streaming batch.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Task local property with Spark's query id: the same across restarts from one
#: checkpoint, new for a new checkpoint. Sinks scope their bookkeeping by it.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: A streaming sink's options include the checkpoint location, lower-cased, when the
#: user set one; sinks derive their stable identity from it.
CHECKPOINT_OPTION = "checkpointlocation"

#: The module PySpark runs a streaming Python sink's ``commit`` / ``abort`` in.
COMMIT_RUNNER = "pyspark.sql.worker.python_streaming_sink_runner"


def check_version() -> str | None:
    """A warning when the running PySpark is not the version these assumptions were checked on."""
    import pyspark

    running = ".".join(pyspark.__version__.split(".")[:2])
    if running == PYSPARK_CHECKED:
        return None
    return (f"spark-ext was checked on PySpark {PYSPARK_CHECKED}, this is {pyspark.__version__}: "
            "run tests/test_compat.py to check the internals it relies on")


@dataclass(frozen=True)
class TaskIdentity:
    """Who a running task is, from its ``TaskContext``."""

    query_id: str
    batch_id: int | None
    partition_id: int
    attempt: int
    task_attempt_id: int


def task_identity() -> TaskIdentity | None:
    """The running task's identity (executor side); None outside a Spark task."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        return None
    batch = tc.getLocalProperty(BATCH_ID_PROPERTY)
    return TaskIdentity(query_id=tc.getLocalProperty(QUERY_ID_PROPERTY) or "",
                        batch_id=int(batch) if batch is not None else None,
                        partition_id=tc.partitionId(), attempt=tc.attemptNumber(),
                        task_attempt_id=tc.taskAttemptId())


def in_commit_runner() -> bool:
    """True inside the worker PySpark starts to run a batch's ``commit`` / ``abort``.

    PySpark gives ``DataSource.streamWriter`` no other sign of why it is called (to plan
    a batch, or to build the writer whose ``commit`` / ``abort`` runs next), and a sink
    must not touch anything in the second case. The caller's module is the one reliable
    sign: by module name, or by file name, because run without the worker daemon the
    runner is ``__main__``.
    """
    frame = sys._getframe(1)
    while frame is not None:
        spec = frame.f_globals.get("__spec__")
        if COMMIT_RUNNER in (frame.f_globals.get("__name__"), getattr(spec, "name", None)) or \
                frame.f_code.co_filename.endswith(COMMIT_RUNNER.rsplit(".", 1)[1] + ".py"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def to_arrow_schema(schema: Any, timezone: str = "UTC") -> Any:
    """Spark ``StructType`` -> Arrow schema (PySpark's internal ``pyspark.sql.pandas.types``)."""
    from pyspark.sql.pandas.types import to_arrow_schema as convert

    return convert(schema, timezone=timezone)


def from_arrow_schema(schema: Any) -> Any:
    """Arrow schema -> Spark ``StructType`` (PySpark's internal ``pyspark.sql.pandas.types``)."""
    from pyspark.sql.pandas.types import from_arrow_schema as convert

    return convert(schema)
