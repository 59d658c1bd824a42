"""Every reliance of spark-ext on PySpark internals and on what differs between releases,
in one place.

Supported: PySpark ``PYSPARK_FLOOR`` to ``PYSPARK_CHECKED`` (``SUPPORTED``).
``tests/test_compat.py`` checks each assumption against the installed PySpark and names it
when a release breaks it; fix it here, nowhere else. ``make test-compat PYSPARK=<version>``
runs those tests and a subset of the suite on another release.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

from spark_ext.errors import UnsupportedReleaseError

PYSPARK_CHECKED = "4.3"
"""The newest PySpark major.minor every assumption below was checked on."""

PYSPARK_FLOOR = "4.0"
"""The oldest: 3.5 has no Python streaming data sources."""

SUPPORTED = ("4.0", "4.1", "4.2", "4.3")
"""Each release ``make test-compat`` was run on."""

ADMISSION_CONTROL_RELEASE = "4.2"
"""From this release on, Spark passes a Python stream reader the batch's start offset and a
read limit (``latestOffset(start, limit)``, ``getDefaultReadLimit``) and runs
``prepareForTriggerAvailableNow``. Before it, ``latestOffset()`` takes no arguments and
``Trigger.AvailableNow`` is Spark's own wrapper: one batch up to the latest offset at start.
"""

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    HAS_ADMISSION_CONTROL = True
except ImportError:  # before 4.2: stand-ins, so readers define the same methods on every release
    HAS_ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in: PySpark before 4.2 passes no read limit."""

    @dataclass(frozen=True)
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: PySpark before 4.2 passes no read limit."""

    @dataclass(frozen=True)
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: PySpark before 4.2 passes no read limit."""

        max_rows: int

    @dataclass(frozen=True)
    class ReadMinRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in: PySpark before 4.2 passes no read limit."""

        min_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: PySpark before 4.2 never calls ``prepareForTriggerAvailableNow``."""

        def prepareForTriggerAvailableNow(self) -> None:
            raise NotImplementedError


try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamArrowWriter
except ImportError:  # PySpark 4.0
    from pyspark.sql.datasource import DataSourceArrowWriter

    class StreamArrowWriter(DataSourceArrowWriter):  # type: ignore[no-redef]
        """Stand-in for 4.1's ``DataSourceStreamArrowWriter``.

        Assumed: PySpark 4.0 hands any writer that is a ``DataSourceArrowWriter`` Arrow
        batches, streaming or not, and its streaming commit runner calls
        ``commit(messages, batchId)`` / ``abort(messages, batchId)`` without a type check.
        """

        def commit(self, messages: Any, batchId: int) -> None:  # type: ignore[override]
            raise NotImplementedError

        def abort(self, messages: Any, batchId: int) -> None:  # type: ignore[override]
            raise NotImplementedError


def pyspark_release() -> str:
    """The running PySpark's version, e.g. ``4.1.4``."""
    import pyspark

    return str(pyspark.__version__)


def require_admission_control(feature: str, otherwise: str | None = None) -> None:
    """Driver, at query start: refuse ``feature`` on a release without admission control.

    ``otherwise`` says what the user can do on this release instead of upgrading, if anything.
    """
    if HAS_ADMISSION_CONTROL:
        return
    instead = f", or {otherwise}" if otherwise else ""
    raise UnsupportedReleaseError(
        f"{feature} needs PySpark {ADMISSION_CONTROL_RELEASE} or later, where Spark passes a Python "
        f"source the batch's start offset and read limit; this is PySpark {pyspark_release()}. "
        f"Upgrade PySpark to {ADMISSION_CONTROL_RELEASE} or later{instead}"
    )


BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Task local property holding the micro-batch id, set on every task of a streaming batch.

Assumed: set by Spark's ``MicroBatchExecution`` and readable through
``TaskContext.getLocalProperty`` in a Python task. Needed because ``DataSourceStreamWriter.write``
is not given the batch id, yet a task's prepared work must name the batch it belongs to.
"""

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Task local property holding Spark's query id (``StreamingQuery.id``).

Assumed: the same across restarts from one checkpoint, new for a new checkpoint. Needed
because sinks scope their bookkeeping (prepared transactions, decisions) by it.
"""

JOB_GROUP_PROPERTY = "spark.jobGroup.id"
JOB_DESCRIPTION_PROPERTY = "spark.job.description"
"""Task local properties of the job group and description; a streaming run sets them to its
run id and to text holding ``runId = <run id>`` (``run_id_of``).

Assumed: ``StreamExecution`` calls ``setJobGroup(runId, description)`` when a run starts,
and every job of the run (a ``foreachBatch`` function's included) inherits them unless
the user's code sets a job group of its own. Needed because a run id tells a batch that
Spark runs again after a restart (a new run) from a second write of it in the same run.
"""

_RUN_IN_DESCRIPTION = re.compile(r"\brunId = ([0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})\b")


def run_id_of(group: str | None, description: str | None) -> str:
    """The streaming run's id from a task's job group and description; "" when they are
    not a streaming run's (no stream, Spark Connect's function process, or a job group the
    user set), so nothing is concluded from a group that is not Spark's."""
    m = _RUN_IN_DESCRIPTION.search(description or "")
    return m.group(1) if m and m.group(1) == group else ""


CHECKPOINT_OPTION = "checkpointlocation"
"""A streaming sink's option holding the checkpoint location, when the user set one.

Assumed: Spark adds it to the sink's options, and option names reach ``DataSource.options``
lower-cased. Needed because sinks derive their stable identity from the checkpoint.
"""

COMMIT_RUNNER = "pyspark.sql.worker.python_streaming_sink_runner"
"""The module PySpark runs a streaming Python sink's ``commit`` / ``abort`` in.

Assumed: it calls ``DataSource.streamWriter`` and then ``commit`` / ``abort`` on the result,
within its own frames. See ``in_commit_runner``.
"""


def check_version() -> str | None:
    """A warning text when the running PySpark's major.minor is not in ``SUPPORTED``; never raises."""
    running = ".".join(pyspark_release().split(".")[:2])
    if running in SUPPORTED:
        return None
    return (f"spark-ext was checked on PySpark {', '.join(SUPPORTED)}, this is {pyspark_release()}: "
            "run tests/test_compat.py to check the PySpark internals it relies on (spark_ext/compat.py)")


@dataclass(frozen=True)
class TaskIdentity:
    """Who a running task is, from its ``TaskContext`` and task local properties.

    ``query_id`` and ``run_id`` are "" and ``batch_id`` None in a task that is not part of
    a streaming batch.
    """

    query_id: str
    batch_id: int | None
    partition_id: int
    attempt: int
    task_attempt_id: int
    run_id: str = ""


def task_identity() -> TaskIdentity | None:
    """The running task's identity (executor side); None outside a Spark task.

    Assumed: ``TaskContext.get()`` is None outside a task, and ``BATCH_ID_PROPERTY`` /
    ``QUERY_ID_PROPERTY`` are task local properties of every task of a streaming batch.
    """
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        return None
    batch = tc.getLocalProperty(BATCH_ID_PROPERTY)
    return TaskIdentity(query_id=tc.getLocalProperty(QUERY_ID_PROPERTY) or "",
                        batch_id=int(batch) if batch is not None else None,
                        partition_id=tc.partitionId(), attempt=tc.attemptNumber(),
                        task_attempt_id=tc.taskAttemptId(),
                        run_id=run_id_of(tc.getLocalProperty(JOB_GROUP_PROPERTY),
                                         tc.getLocalProperty(JOB_DESCRIPTION_PROPERTY)))


def in_reused_worker() -> bool:
    """True in a Python worker that PySpark's daemon forked and keeps for further tasks,
    running a full ``gc.collect()`` in it after each one.

    Assumed (``pyspark/daemon.py``, 4.0 to 4.3): the daemon runs as ``python -m
    pyspark.daemon``, so a worker it forked keeps that ``__main__``; it reuses a worker,
    collecting after each task, when ``SPARK_REUSE_WORKER`` is set (the JVM sets it unless
    ``spark.python.worker.reuse`` is false). A worker started without the daemon
    (``spark.python.use.daemon`` false) or not reused runs one task and exits.
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return bool(os.environ.get("SPARK_REUSE_WORKER")) and getattr(spec, "name", None) == "pyspark.daemon"


def in_commit_runner() -> bool:
    """True inside the worker PySpark starts to run a batch's ``commit`` / ``abort``.

    PySpark gives ``DataSource.streamWriter`` no other sign of why it is called (to plan
    a batch, or to build the writer whose ``commit`` / ``abort`` runs next), and a sink
    must not touch anything in the second case. Assumed: ``COMMIT_RUNNER`` is on the call
    stack then, and only then. It is found by module name, by ``__spec__.name`` (run with
    ``python -m``), or by file name, because run without the worker daemon it is ``__main__``.
    """
    file_name = COMMIT_RUNNER.rsplit(".", 1)[1] + ".py"
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        spec = frame.f_globals.get("__spec__")
        if COMMIT_RUNNER in (frame.f_globals.get("__name__"), getattr(spec, "name", None)) or \
                frame.f_code.co_filename.endswith(file_name):
            return True
        frame = frame.f_back
    return False


def to_arrow_schema(schema: Any) -> Any:
    """Spark ``StructType`` -> Arrow schema, with PySpark's internal converter.

    Assumed: ``pyspark.sql.pandas.types.to_arrow_schema`` exists and maps ``TimestampType``
    to ``timestamp[us, tz=UTC]``: asked with ``timezone="UTC"`` from 4.2 on, with
    ``timestamp_utc=True`` (its default) before. Needed because windows.py builds its Arrow
    state schemas from the DataFrame's schema exactly as Spark's own Arrow path would.
    """
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema as convert

    if "timezone" in inspect.signature(convert).parameters:  # 4.2 and later
        return convert(schema, timezone="UTC")
    return convert(schema, timestamp_utc=True)  # type: ignore[call-arg]


def from_arrow_schema(schema: Any) -> Any:
    """Arrow schema -> Spark ``StructType``, with PySpark's internal converter.

    Assumed: ``pyspark.sql.pandas.types.from_arrow_schema`` exists, maps a zoned Arrow
    timestamp to ``TimestampType`` and, with ``prefer_timestamp_ntz=True`` (the default
    from 4.2 on, not before), a naive one to ``TimestampNTZType``. Needed because
    windows.py declares the Spark schemas of its Arrow UDF outputs from Arrow schemas.
    """
    from pyspark.sql.pandas.types import from_arrow_schema as convert

    return convert(schema, prefer_timestamp_ntz=True)


def pickle_by_value(module: Any) -> None:
    """Make PySpark's cloudpickle send ``module``'s functions by value, not by name.

    Assumed: ``pyspark.cloudpickle`` is the cloudpickle PySpark pickles tasks with and has
    ``register_pickle_by_value`` (cloudpickle >= 2.0). Needed so ``shipping.revive`` runs in
    an executor that cannot import spark-ext, to say how to ship it.
    """
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def builder_options(builder: Any) -> dict[str, str]:
    """The options set so far on a ``SparkSession.Builder``.

    Assumed: the builder keeps them in ``_options`` (a dict). Needed so ``env.configure``
    adds to ``spark.archives`` / ``spark.jars.packages`` instead of replacing them.
    """
    return {str(k): str(v) for k, v in dict(getattr(builder, "_options", {}) or {}).items()}
