"""Executor side of the PostgreSQL sink: one task's rows, COPYed, then prepared or committed.

Runs in ``write()`` on an executor, one database connection per task attempt. Rows go
in with ``COPY ... FROM STDIN (FORMAT csv)``, the CSV written by Arrow's C++ writer, so
no Python object is built per row. With ``upsertKeys`` the rows are COPYed into the
sink's staging table (tagged with the task) and merged with one
``INSERT ... SELECT DISTINCT ON (keys) ... ON CONFLICT (keys) DO UPDATE``.

``exactly_once``: the transaction also writes the task's marker row and ends with
``PREPARE TRANSACTION`` under the global id ``sx:<sink>:<epoch>:<batch>:<partition>:<attempt>``;
before writing it checks, under a share lock held until the commit, that its run still
owns the sink (epoch) and that batch N was not already decided, in which case it
writes nothing (a replay). ``at_least_once``: committed by the task, with a marker row
so a replay of a batch whose partition already landed is skipped. ``none``: COPY and
commit.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import psycopg2
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from spark_ext import failpoints
from spark_ext.commit import SinkWriter, TaskInfo
from spark_ext.connectors.jdbc.tables import JdbcSinkSetup, SqlPlan
from spark_ext.connectors.jdbc.transactions import (
    JdbcCommittable,
    connect,
    finish,
    gid_for,
    parse_gid,
    prepared_gids,
)
from spark_ext.errors import ConnectorError, FencedError
from spark_ext.guarantees import Guarantee

_CSV = pacsv.WriteOptions(include_header=False, quoting_style="needed")


def to_csv(rb: pa.RecordBatch, sql: SqlPlan, task_tag: str | None) -> bytes:
    """Arrow -> PostgreSQL CSV: NULL unquoted-empty, '' quoted, bytea as ``\\x`` hex."""
    cols = list(rb.columns)
    for name in sql.binary_columns:
        i = rb.schema.get_field_index(name)
        cols[i] = pa.array(["\\x" + b.hex() if b is not None else None for b in rb.column(i).to_pylist()],
                           pa.string())
    names = list(rb.schema.names)
    if task_tag is not None:
        cols.append(pa.repeat(pa.scalar(task_tag), rb.num_rows))
        names.append("_sx_task")
    buf = io.BytesIO()
    pacsv.write_csv(pa.Table.from_arrays(cols, names=names), buf, _CSV)
    return buf.getvalue()


class JdbcWriter(SinkWriter[JdbcCommittable]):
    """Writes one task attempt's rows. Executor."""

    def __init__(self, setup: JdbcSinkSetup, epoch: int) -> None:
        self.cfg, self.sql = setup.cfg, setup.sql
        self.epoch = epoch  # the claim's fence (exactly once); 0 otherwise

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JdbcCommittable:
        cfg, sql = self.cfg, self.sql
        exactly = cfg.guarantee is Guarantee.EXACTLY_ONCE
        gid = gid_for(cfg.sink_id, self.epoch, task.batch_id, task.partition_id, task.attempt)
        try:
            conn = connect(cfg.url, cfg.reconnect_timeout_s)
        except psycopg2.Error as e:
            raise ConnectorError(f"cannot connect to PostgreSQL at {cfg.safe_url}: {e}".strip()) from None
        try:
            if exactly:
                conn.tpc_begin(gid)
            cur = conn.cursor()
            cur.execute("SET LOCAL lock_timeout = %s", (f"{cfg.lock_timeout_ms}ms",))
            # step 3: a stale run is fenced here; a replay of a decided batch writes nothing
            skip = self._skip(cur, task) if cfg.guarantee is not Guarantee.NONE else False
            if exactly and not skip and task.attempt > 0:
                self._roll_back_earlier_attempts(task)
            rows = 0
            if not skip:
                rows = self._copy(cur, batches, task)
                if cfg.guarantee is not Guarantee.NONE:
                    cur.execute(
                        f"INSERT INTO {sql.batches_table} (sink_id, query_id, batch_id, partition_id, "
                        "attempt, epoch, rows) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        (cfg.sink_id, task.query_id, task.batch_id, task.partition_id, task.attempt,
                         self.epoch, rows))
            if exactly and not skip:
                failpoints.hit("jdbc.before_prepare", task.batch_id, rows)
                conn.tpc_prepare()  # step 3: durable, invisible, owned by no session
                failpoints.hit("jdbc.after_prepare", task.batch_id, rows)
                return JdbcCommittable(task.batch_id, task.partition_id, task.attempt, rows, gid,
                                       task.query_id)
            if exactly:
                conn.tpc_rollback()
            else:
                conn.commit()
                failpoints.hit("jdbc.after_write", task.batch_id, rows)  # landed, not yet reported
            return JdbcCommittable(task.batch_id, task.partition_id, task.attempt, rows, None,
                                   task.query_id)
        except psycopg2.Error as e:
            raise ConnectorError(
                f"writing batch {task.batch_id} partition {task.partition_id} to {cfg.qualified} "
                f"failed: {str(e).strip()}"
            ) from None
        finally:
            conn.close()  # an unprepared transaction is rolled back with the session

    def _skip(self, cur: Any, task: TaskInfo) -> bool:
        """True when this batch (exactly once) or partition (at least once) already landed."""
        cfg, sql = self.cfg, self.sql
        if cfg.guarantee is Guarantee.EXACTLY_ONCE:
            cur.execute(f"SELECT epoch FROM {sql.sinks_table} WHERE sink_id = %s FOR SHARE",
                        (cfg.sink_id,))
            row = cur.fetchone()
            if row is None or row[0] != self.epoch:
                raise FencedError(
                    f"sink {cfg.sink_id!r} was taken over by a newer run (epoch {row and row[0]}, "
                    f"this run {self.epoch}); this stale task writes nothing"
                )
            cur.execute(f"SELECT 1 FROM {sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                        "AND batch_id = %s AND partition_id = -1",
                        (cfg.sink_id, task.query_id, task.batch_id))
        else:
            cur.execute(f"SELECT 1 FROM {sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                        "AND batch_id = %s AND partition_id = %s",
                        (cfg.sink_id, task.query_id, task.batch_id, task.partition_id))
        return cur.fetchone() is not None

    def _roll_back_earlier_attempts(self, task: TaskInfo) -> None:
        """A retried task: roll back what its earlier attempts prepared, which would hold
        this attempt's row and unique-index locks. None of them can be a winner: the batch
        is not decided (checked under the share lock this transaction holds)."""
        conn = connect(self.cfg.url, self.cfg.reconnect_timeout_s)
        conn.autocommit = True  # ROLLBACK PREPARED runs outside a transaction
        try:
            for gid in prepared_gids(conn, self.cfg.sink_id):
                _, _, batch, part, attempt = parse_gid(gid)
                if (batch, part) == (task.batch_id, task.partition_id) and attempt < task.attempt:
                    finish(conn, gid, commit=False)
        finally:
            conn.close()

    def _copy(self, cur: Any, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> int:
        cfg, sql = self.cfg, self.sql
        keys = cfg.upsert_keys
        tag = f"{task.batch_id}:{task.partition_id}:{task.attempt}" if keys else None
        rows = 0
        for rb in batches:
            if rb.num_rows == 0:
                continue
            for k in keys:
                if pc.any(pc.is_null(rb.column(k))).as_py():
                    raise ConnectorError(
                        f"upsert key column {k!r} is NULL in a row of batch {task.batch_id}: keys must be "
                        "present (filter or fill them); nothing of this task was written"
                    )
            data = to_csv(rb, sql, tag)
            cur.copy_expert(sql.copy_staging if keys else sql.copy_target, io.BytesIO(data))
            rows += rb.num_rows
        if keys and rows:
            cur.execute(sql.upsert_from_staging, (tag,))
            cur.execute(sql.clear_staging, (tag,))
        return rows
