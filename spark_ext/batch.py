"""``batch_df.write.format("hzsink")`` inside ``foreachBatch``: each micro-batch under the
same protocol as a streaming sink's.

    def write(batch_df, batch_id):
        (batch_df.write.format("hzsink").option("connector", "jdbc")
         .option("sinkId", "ledger")                   # one stable id per write of the function
         .option("batchId", batch_id)                  # optional in classic Spark: the tasks know it
         .options(...).mode("append").save())

    stream.writeStream.foreachBatch(write).option("checkpointLocation", ...).start()

The write is planned (step 1: fence, resolve what is in doubt) in the planning worker on
the driver, its tasks prepare (step 3), and the commit worker decides once and commits
the winners (step 4), all in ``spark_ext.commit``. A replay of a batch decided before a
crash (Spark runs the last batch again after a restart) writes nothing, so two writes of
one function land once each even when the job dies between them.

The batch and query ids come from the tasks: Spark gives every task a streaming batch
runs, those of ``foreachBatch`` included, the query's id and the batch's id as local
properties. Spark Connect runs the function in a process of its own, and its tasks get
neither: there option ``batchId`` names the batch (given beside Spark's, they must agree)
and option ``queryId`` the query (it wins over Spark's, as Delta's ``txnAppId`` does).
The query id is what tells a replay from a new query that starts its batch ids again at 0
(a deleted checkpoint): Spark's changes then, a ``queryId`` must be changed by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from spark_ext import compat
from spark_ext.commit import TaskInfo
from spark_ext.errors import ConfigurationError, InvalidOptionError, MissingOptionError
from spark_ext.options import Options
from spark_ext.shipping import Shipped
from spark_ext.stream import ProtocolStreamWriter, SinkPlan, TaskReport

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_OPTIONS = ("batchid", "queryid")


class BatchIdentityError(ConfigurationError):
    """A batch write's task cannot tell (or is told two different) batch or query ids."""


@dataclass(frozen=True)
class BatchIdentity:
    """What the user said of the micro-batch this write belongs to (None: not said)."""

    batch_id: int | None = None
    query_id: str | None = None

    @classmethod
    def parse(cls, opts: Options) -> BatchIdentity:
        """Driver, at ``save()``: options ``batchId`` and ``queryId``."""
        raw = opts.get_str("batchid")
        batch: int | None = None
        if raw is not None:
            try:
                batch = int(raw)
            except ValueError:
                batch = -1
            if batch < 0:
                raise InvalidOptionError(f"option batchId is {raw!r}: give the batch id foreachBatch passes "
                                         "(an integer from 0)")
        return cls(batch, opts.get_str("queryid"))

    def task(self, running: compat.TaskIdentity | None, sink_id: str) -> TaskInfo:
        """Executor: the running task, as a task of the micro-batch it writes.

        Its query id is the query's and the write's together: a function's writes are
        sinks of one query, and each sink's bookkeeping refuses a query it saw deciding
        as another sink (a copied checkpoint's sign) where several writes are the rule."""
        if running is None:
            raise BatchIdentityError("TaskInfo asked outside a Spark task")
        batch, query = running.batch_id, running.query_id or None
        if self.batch_id is not None and batch is not None and self.batch_id != batch:
            raise BatchIdentityError(
                f"option batchId is {self.batch_id!r}, but Spark runs this write for batchId {batch!r} (a "
                "foreachBatch function's DataFrame): pass the batch id foreachBatch gives, or drop "
                "the option")
        batch = batch if batch is not None else self.batch_id
        query = self.query_id or query
        if batch is None or query is None:
            missing = " and ".join(n for n, v in (("batchId", batch), ("queryId", query)) if v is None)
            raise BatchIdentityError(
                f"an exactly-once hzsink batch write needs the micro-batch it belongs to, and Spark gave "
                f"this task no {missing}: write inside foreachBatch, or set .option('batchId', batch_id) "
                "and .option('queryId', <the query's id, new when its checkpoint is new>)")
        return TaskInfo(query_id=f"{query}/{sink_id}", batch_id=batch, partition_id=running.partition_id,
                        attempt=running.attempt, task_attempt_id=running.task_attempt_id,
                        run_id=running.run_id)


def without_batch_options(opts: Options) -> Options:
    """The options the connector checks: its own, without ``batchId`` / ``queryId``."""
    return Options({k: v for k, v in opts.raw().items() if k not in BATCH_OPTIONS}, opts.what)


def require_sink_id(opts: Options, id_option: str, connector: str) -> str:
    """Driver: an exactly-once batch write is one sink, named by the user. A checkpoint
    location would name every write of the function alike, and the second write of a
    batch would then pass for a replay of the first and write nothing."""
    given = opts.get_str(id_option)
    if given is None:
        raise MissingOptionError(
            f"hzsink connector {connector!r}: an exactly_once batch write (inside foreachBatch) needs "
            f".option({id_option!r}, ...), a stable name of its own for each write in the function; "
            "or guarantee 'at_least_once'")
    return given


class ProtocolBatchWriter(Shipped, DataSourceArrowWriter):
    """Spark's batch writer for one micro-batch of a ``foreachBatch`` function: the
    streaming writer's steps, with the batch id taken from the tasks' reports.

    Built once, on the driver; pickled to executors (``write``) and to the commit worker.
    """

    def __init__(self, plan: SinkPlan, identity: BatchIdentity, sink_id: str | None) -> None:
        """``sink_id``: the write's own id, for exactly-once (None: a weaker guarantee)."""
        self.plan, self.identity, self.sink_id = plan, identity, sink_id
        self.stream = ProtocolStreamWriter(plan)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Executor, step 3."""
        if self.sink_id is not None:
            task = self.identity.task(compat.task_identity(), self.sink_id)
        else:  # nothing is decided: the ids only label the rows' log lines
            task = TaskInfo.current()
            if task.batch_id < 0:  # no streaming batch runs this write
                task = replace(task, batch_id=self.identity.batch_id or 0)
        return self.stream.write_as(iterator, task)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver (commit worker), step 4."""
        self.stream.commit(messages, self._batch_id(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Driver (commit worker), step 5."""
        self.stream.abort(messages, self._batch_id(messages))

    def _batch_id(self, messages: list[WriterCommitMessage | None]) -> int:
        ids = {m.committable.batch_id for m in messages if isinstance(m, TaskReport)}
        if len(ids) > 1:
            raise BatchIdentityError(f"one write's tasks name batches {sorted(ids)}; this is a bug")
        return ids.pop() if ids else (self.identity.batch_id if self.identity.batch_id is not None else -1)
