"""Executor side of the MariaDB / MySQL dialect: one task's rows, loaded, then XA-prepared
or committed. The protocols of ``jdbc.writer`` (one per guarantee, the same checks in the
same order) over this dialect's primitives: the bulk path (``LOAD DATA LOCAL INFILE`` of a
file Arrow builds, no Python object per row) and XA's statements.

Writers run at ``READ COMMITTED``: at InnoDB's default ``REPEATABLE READ`` the merge's
read of the staging table takes gap locks, which a prepared transaction keeps until the
batch is decided, so two tasks of one batch would wait on each other until they time out.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from spark_ext.commit import TaskInfo
from spark_ext.connectors.jdbc.mariadb.transactions import (
    DEADLOCK,
    LOCK_WAIT_TIMEOUT,
    MyConn,
    connect,
    error_code,
    finish,
    lock_name,
    sink_format,
    xid,
)
from spark_ext.connectors.jdbc.mariadb.transactions import prepared_gids as xa_prepared
from spark_ext.connectors.jdbc.tables import JdbcSinkSetup
from spark_ext.connectors.jdbc.transactions import JdbcCommittable, parse_gid, started_before
from spark_ext.connectors.jdbc.writer import (
    JdbcWriter,
    MarkedWriter,
    PlainWriter,
    PreparingWriter,
    require_keys,
)
from spark_ext.errors import ConnectorError, FencedError

_LOCKED = (". A row's key was locked by another transaction for longer than lockTimeoutMs: another "
           "writer's, or another task's of this batch writing the same key (under exactly_once a task's "
           "rows stay locked until the batch is decided). Drop duplicate keys before the sink "
           "(dropDuplicates), or stop the other writer")
_DEADLOCK = (". InnoDB chose this task's transaction as a deadlock victim: two tasks wrote the same keys "
             "in different orders. Partition by the upsert keys (df.repartition(keys)) so that a key is "
             "written by one task")

# Characters LOAD DATA reads specially, and how a field spells them (ESCAPED BY '\\').
_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"), ("\x00", "\\0"))


def _text(col: pa.Array) -> pa.Array:
    """A column as LOAD DATA's text, NULLs left null (written as ``\\N``)."""
    t = col.type
    if pa.types.is_boolean(t):
        col = pc.cast(col, pa.int8())
    elif pa.types.is_timestamp(t):
        col = pc.cast(col, pa.timestamp(t.unit))  # the wall clock in UTC (the session's time zone)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.array([b.hex() if b is not None else None for b in col.to_pylist()], pa.string())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        for raw, spelled in _ESCAPES:
            col = pc.replace_substring(col, raw, spelled)
        return col
    return pc.cast(col, pa.string())


def to_tsv(rb: pa.RecordBatch) -> bytes:
    """Arrow -> the bytes of a LOAD DATA file: one line a row, fields tab-separated."""
    if rb.num_columns == 0 or rb.num_rows == 0:
        return b""
    cols = [_text(c) for c in rb.columns]
    lines = pc.binary_join_element_wise(*cols, pa.scalar("", pa.string()), "\t", null_handling="replace",
                                        null_replacement="\\N")
    # the trailing "" column gave every line a final tab: drop it for the newline
    lines = pc.binary_join_element_wise(pc.utf8_slice_codeunits(lines, 0, -1),
                                        pa.scalar("\n", pa.string()), "")
    return _concat(lines)


def _concat(lines: pa.Array) -> bytes:
    """The values of a string array back to back: its data buffer, between the offsets."""
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    if lines.offset or lines.null_count:
        lines = pa.concat_arrays([lines])
    wide = pa.types.is_large_string(lines.type)  # a large_string column made every line one
    offsets = pa.Array.from_buffers(pa.int64() if wide else pa.int32(), len(lines) + 1,
                                    [None, lines.buffers()[1]], offset=lines.offset)
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return lines.buffers()[2].to_pybytes()[start:end]


class MyJdbcWriter(JdbcWriter):
    """MariaDB's connection and statements, for the writers of every guarantee. Executor."""

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JdbcCommittable:
        cfg = self.cfg
        try:
            conn = connect(cfg.open_url(), cfg.reconnect_timeout_s, cfg.lock_timeout_ms)
        except pymysql.Error as e:
            raise ConnectorError(f"cannot connect to MariaDB at {cfg.safe_url}: {e}".strip()) from None
        try:
            conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            for stmt in self.sql.stage_setup:  # DDL: before the task's transaction begins
                conn.execute(stmt)
            return self._write(conn, batches, task)
        except pymysql.Error as e:
            code = error_code(e)
            hint = _LOCKED if code == LOCK_WAIT_TIMEOUT else _DEADLOCK if code == DEADLOCK else ""
            raise ConnectorError(
                f"writing batch {task.batch_id} partition {task.partition_id} to {cfg.qualified} "
                f"failed: {e}{hint}") from None
        finally:
            conn.close()  # an XA transaction not yet prepared is rolled back with the session

    def _transaction(self, conn: MyConn) -> MyConn:
        conn.autocommit = False
        return conn

    def _send(self, conn: MyConn, batches: Iterator[pa.RecordBatch], task: TaskInfo,
              digest: Any = None) -> int:
        """LOAD DATA the task's rows; ``digest`` (a hashlib object), if given, sees every byte."""
        cfg, sql = self.cfg, self.sql
        keys = cfg.upsert_keys
        rows = 0
        fd, path = tempfile.mkstemp(prefix="spark-ext-load-", suffix=".tsv")
        os.close(fd)
        try:
            for rb in batches:
                if rb.num_rows == 0:
                    continue
                require_keys(rb, keys, task)
                data = to_tsv(rb)
                if digest is not None:
                    digest.update(data)
                with open(path, "wb") as f:
                    f.write(data)
                self._load_file(conn, sql.copy_staging if keys else sql.copy_target, path, rb.num_rows, task)
                rows += rb.num_rows
        finally:
            os.unlink(path)
        if keys and rows:
            conn.execute(sql.upsert_from_staging)
        return rows

    def _load_file(self, conn: MyConn, stmt: str, path: str, rows: int, task: TaskInfo) -> None:
        """One LOAD DATA; every row must land as sent. LOCAL loads act as if IGNORE were
        given: a duplicate key is skipped, a value too long, out of range or not a number
        (NaN, infinity) is cut or zeroed, a NULL into NOT NULL becomes the default, each with
        a warning only, where an INSERT fails. So a warning, or a row count short of the
        batch's, fails the task (its transaction is rolled back with the session)."""
        with conn.cursor() as cur:
            loaded = cur.execute(stmt, (path,))
            warned = cur.warning_count
        if warned or loaded != rows:
            shown = "; ".join(f"{w[2]}" for w in conn.execute("SHOW WARNINGS LIMIT 3"))
            raise ConnectorError(
                f"batch {task.batch_id} partition {task.partition_id}: {self.cfg.qualified} took {loaded} of "
                f"{rows} rows with {warned} warning(s) ({shown}). The bulk load skips or alters a row the "
                "table refuses (a duplicate key, a value too long or out of range, NaN or infinity, NULL "
                "into NOT NULL) where an INSERT fails: fix the rows or the table (upsertKeys for repeated "
                "keys); nothing of this task was committed")

    def _mark(self, conn: MyConn, task: TaskInfo, rows: int, epoch: int) -> None:
        conn.execute(
            f"INSERT INTO {self.sql.batches_table} (sink_id, query_id, batch_id, partition_id, attempt, "
            "epoch, `rows`) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (self.cfg.sink_id, task.query_id, task.batch_id, task.partition_id, task.attempt, epoch, rows))


class MyPlainWriter(MyJdbcWriter, PlainWriter):
    """``none``: load and commit."""


class MyMarkedWriter(MyJdbcWriter, MarkedWriter):
    """``at_least_once``: load and a marker row keyed by a digest of the rows sent, committed
    by the task; a replay holding exactly what landed is skipped."""

    def _landed(self, conn: MyConn, key: tuple[Any, ...], seen: str) -> bool:
        return bool(conn.execute(f"SELECT 1 FROM {self.sql.landed_table} WHERE sink_id = %s AND "
                                 "query_id = %s AND batch_id = %s AND partition_id = %s AND digest = %s",
                                 (*key, seen)))

    def _keep_landed(self, conn: MyConn, key: tuple[Any, ...], seen: str, rows: int) -> None:
        conn.execute(f"INSERT IGNORE INTO {self.sql.landed_table} (sink_id, query_id, batch_id, "
                     "partition_id, digest, `rows`) VALUES (%s, %s, %s, %s, %s, %s)", (*key, seen, rows))


_ROLLBACK_LOCK_WAIT_S = 5


class MyPreparingWriter(MyJdbcWriter, PreparingWriter):
    """``exactly_once``: one XA transaction per attempt, prepared, never committed here."""

    def __init__(self, setup: JdbcSinkSetup, epoch: int) -> None:
        super().__init__(setup, epoch)
        self.xa_format = sink_format(self.cfg)

    def _begin(self, conn: MyConn, gid: str) -> MyConn:
        conn.execute("XA START %s, %s, %s", xid(gid, self.xa_format))
        return conn

    def _abandon(self, conn: MyConn, gid: str) -> None:
        conn.execute("XA END %s, %s, %s", xid(gid, self.xa_format))
        conn.execute("XA ROLLBACK %s, %s, %s", xid(gid, self.xa_format))

    def _prepare(self, conn: MyConn, gid: str, task: TaskInfo) -> None:
        conn.execute("XA END %s, %s, %s", xid(gid, self.xa_format))
        conn.execute("XA PREPARE %s, %s, %s", xid(gid, self.xa_format))
        conn.close()  # detached: only now may the driver commit it

    def _decided(self, conn: MyConn, task: TaskInfo) -> bool:
        """The share lock holds the epoch until this transaction prepares: a take-over's
        bump waits for it while it writes."""
        cfg, sql = self.cfg, self.sql
        row = conn.execute(f"SELECT epoch FROM {sql.sinks_table} WHERE sink_id = %s LOCK IN SHARE MODE",
                           (cfg.sink_id,))
        if not row or row[0][0] != self.fence:
            raise FencedError(
                f"sink {cfg.sink_id!r} was taken over by a newer run (epoch {row[0][0] if row else None}, "
                f"this run {self.fence}); this stale task writes nothing")
        return bool(conn.execute(f"SELECT 1 FROM {sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                                 "AND batch_id = %s AND partition_id = -1",
                                 (cfg.sink_id, task.query_id, task.batch_id)))

    def _roll_back_earlier_attempts(self, conn: MyConn, task: TaskInfo) -> bool:
        """From a second connection (a session inside an XA transaction cannot finish
        another), under the sink's lock, which a decision holds while it checks and records
        its winners: none of them can be a winner once the batch is found undecided there.
        Decided meanwhile: left alone, and this attempt writes on (False, always): its own
        transaction is rolled back after the commit."""
        cfg = self.cfg
        earlier = [g for g in xa_prepared(conn, cfg.sink_id, self.xa_format)
                   if parse_gid(g)[2:4] == (task.batch_id, task.partition_id)
                   and started_before(g, self.fence, task.task_attempt_id)]
        if not earlier:
            return False
        other = connect(cfg.open_url(), cfg.reconnect_timeout_s)
        try:
            # A decision holds the lock for a moment; a take-over for as long as its epoch bump
            # waits on this task's share lock: give up soon then (Spark retries the task).
            got = other.execute("SELECT GET_LOCK(%s, %s)", (lock_name(cfg.sink_id), _ROLLBACK_LOCK_WAIT_S))
            if not got or got[0][0] != 1:
                raise ConnectorError(
                    f"sink {cfg.sink_id!r}: its lock stayed held {_ROLLBACK_LOCK_WAIT_S} s (a take-over?) "
                    f"while attempt {task.attempt} of partition {task.partition_id} waited to roll back an "
                    "earlier attempt's transaction")
            if other.execute(f"SELECT 1 FROM {self.sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                             "AND batch_id = %s AND partition_id = -1",
                             (cfg.sink_id, task.query_id, task.batch_id)):
                return False
            for gid in earlier:
                finish(other, gid, False, self.xa_format)
            return False
        finally:
            other.close()  # releases the lock
