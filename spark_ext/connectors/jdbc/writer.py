"""Executor side of the jdbc sink: one task's rows, bulk-loaded, then prepared or committed.

Runs in ``write()`` on an executor, one database connection per task attempt. One
protocol per guarantee, whatever the dialect (``PlainWriter``, ``MarkedWriter``,
``PreparingWriter``); a dialect supplies the connection and the statements (the
primitives of ``JdbcWriter``). ``exactly_once``: the transaction also writes the task's
marker row and is prepared under a global id naming the sink, epoch, batch, partition
and task attempt; before writing it checks, under a share lock on the sink's row, that
its run still owns the sink (epoch) and that batch N was not already decided, in which
case it writes nothing (a replay). ``at_least_once``: committed by the task, with a
marker row so a replayed partition holding the rows that already landed is skipped.
``none``: the rows and a commit.

PostgreSQL's writers are here too (``PlainJdbcWriter``, ``MarkedJdbcWriter``,
``PreparingJdbcWriter``; MariaDB's: ``mariadb.writer``). Rows go in with ``COPY ... FROM
STDIN (FORMAT binary)``, encoded in C (``binary_copy``), or, for a table with a column type
it has no exact encoding for, ``(FORMAT csv)`` written by Arrow's C++ writer: no Python
object is built per row either way. A task's batches stream through one COPY
(``CopyStream``; a new one only where a batch needs the other format), except with dead
letters, where each batch has its own COPY so a refused one can be undone and halved
alone. With ``upsertKeys`` the rows are COPYed into the
sink's staging table (tagged with the task) and merged with one ``INSERT ... SELECT
DISTINCT ON (keys) ... ON CONFLICT (keys) DO UPDATE``. A transaction ends with ``PREPARE
TRANSACTION`` under exactly_once.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.errors
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from psycopg2 import errorcodes

from spark_ext import failpoints
from spark_ext.commit import SinkWriter, TaskInfo
from spark_ext.connectors.jdbc import binary_copy
from spark_ext.connectors.jdbc.tables import JdbcSinkSetup, SqlPlan
from spark_ext.connectors.jdbc.transactions import (
    LOCK_SPACE,
    JdbcCommittable,
    connect,
    finish,
    gid_for,
    parse_gid,
    prepared_gids,
    started_before,
)
from spark_ext.deadletters import Refusal, SetsAside
from spark_ext.errors import ConnectorError, FencedError

# A key two tasks of one batch write waits on the other's prepared (uncommitted) row until
# the batch is decided, which needs this task to finish: it can only time out.
_LOCKED = (". A row's key was locked by another transaction for longer than lockTimeoutMs: another "
           "writer's, or another task's of this batch writing the same key (under exactly_once a task's "
           "rows stay locked until the batch is decided, so a key written twice in one batch always "
           "times out). Drop duplicate keys before the sink (dropDuplicates), or stop the other writer")
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


def to_copy(rb: pa.RecordBatch, sql: SqlPlan, task_tag: str | None) -> tuple[str, bytes]:
    """The COPY statement for ``rb`` into the target (into the staging table with a task tag)
    and its data: binary where the plan has an encoding for every column, else CSV."""
    if sql.binary_kinds and (data := binary_copy.encode(rb, sql.binary_kinds, task_tag)) is not None:
        return (sql.copy_target_binary if task_tag is None else sql.copy_staging_binary), data
    return (sql.copy_target if task_tag is None else sql.copy_staging), to_csv(rb, sql, task_tag)


COPY_CHUNK = 1 << 20  # the size psycopg2 asks for; a batch's bytes come whole whatever it is


class CopyStream:
    """A task's batches as few COPYs as their statements allow (binary, or CSV for a batch
    whose Arrow types the binary plan does not cover): psycopg2 reads the data from here
    (``read``) while it sends it, so the server takes in one batch while the next comes
    from Spark and is encoded, where a COPY a batch waited for each to be taken in first.
    A row the server refuses fails the COPY it is in, as before; that COPY's later batches
    are still read first. Executor."""

    def __init__(self, batches: Iterator[pa.RecordBatch], sql: SqlPlan, tag: str | None,
                 digest: Any = None) -> None:
        self._batches, self._sql, self._tag = batches, sql, tag
        self._digest = digest  # sees every byte sent, if given
        self._next: tuple[str, bytes, int] | None = None  # encoded, not yet sent
        self._stmt = ""
        self._binary = False
        self._open = False  # binary rows sent, their trailer not yet
        self.rows = 0
        self.failure: BaseException | None = None  # what reading the batches raised

    def next_copy(self) -> str | None:
        """The next COPY's statement (None: no batch left); ``read`` gives its data."""
        if self._next is None:
            self._next = self._encode()
        if self._next is None:
            return None
        self._stmt = self._next[0]
        self._binary = self._stmt in (self._sql.copy_target_binary, self._sql.copy_staging_binary)
        self._open = False
        return self._stmt

    def read(self, size: int = -1) -> bytes:
        """psycopg2's call for the next bytes of the current COPY (b"": it ends)."""
        try:
            return self._read()
        except BaseException as e:  # psycopg2 reports any as the COPY's failure; kept to re-raise
            self.failure = e
            raise

    def _read(self) -> bytes:
        if self._next is None:
            self._next = self._encode()
        if self._next is None or self._next[0] != self._stmt:  # this COPY ends here
            if not self._open:
                return b""
            self._open = False
            return self._sent(binary_copy.TRAILER)
        _, data, rows = self._next
        self._next = None
        self.rows += rows
        if self._binary:  # the first batch's header, each batch's rows, one trailer at the end
            data = data[binary_copy.HEADER_BYTES if self._open else 0:-len(binary_copy.TRAILER)]
            self._open = True
        return self._sent(data)

    def send(self, cur: Any) -> int:
        """Run the COPYs on ``cur``; returns the rows sent. An error the batches raised is
        raised as itself (psycopg2 would report it as the COPY's failure)."""
        while (stmt := self.next_copy()) is not None:
            try:
                cur.copy_expert(stmt, self, COPY_CHUNK)
            except psycopg2.Error:
                if self.failure is not None:  # the batches' own error, not the server's
                    raise self.failure from None
                raise
        return self.rows

    def _sent(self, data: bytes) -> bytes:
        if self._digest is not None:
            self._digest.update(data)
        return data

    def _encode(self) -> tuple[str, bytes, int] | None:
        rb = next(self._batches, None)
        while rb is not None and rb.num_rows == 0:  # no bytes to send: b"" would end the COPY
            rb = next(self._batches, None)
        if rb is None:
            return None
        stmt, data = to_copy(rb, self._sql, self._tag)
        return stmt, data, rb.num_rows


class JdbcWriter(SinkWriter[JdbcCommittable]):
    """Writes one task attempt's rows over one connection (``write``: the dialect's); the
    guarantee's protocol is ``_write``, over the dialect's primitives below. Executor."""

    def __init__(self, setup: JdbcSinkSetup) -> None:
        self.cfg, self.sql = setup.cfg, setup.sql

    def _write(self, conn: Any, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JdbcCommittable:
        raise NotImplementedError

    def _transaction(self, conn: Any) -> Any:
        """Begin the task's transaction on ``conn``; returns what its statements run on
        (``execute(sql, args)``): a cursor, or the connection."""
        raise NotImplementedError

    def _send(self, tx: Any, batches: Iterator[pa.RecordBatch], task: TaskInfo, digest: Any = None) -> int:
        """Bulk-load the task's rows (merged into the target with ``upsertKeys``); returns
        how many. ``digest`` (a hashlib object), if given, sees every byte sent."""
        raise NotImplementedError

    def _mark(self, tx: Any, task: TaskInfo, rows: int, epoch: int) -> None:
        """The task's marker row, in its own transaction: this partition of the batch landed."""
        raise NotImplementedError


class PlainWriter(JdbcWriter):
    """``none``: the rows, committed."""

    def _write(self, conn: Any, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JdbcCommittable:
        rows = self._send(self._transaction(conn), batches, task)
        conn.commit()
        failpoints.hit("jdbc.after_write", task.batch_id, rows)  # landed, not yet reported
        return JdbcCommittable.of(task, rows)


KEEP_LANDED = 100  # batches whose at_least_once digests are kept (only the last can replay)


class MarkedWriter(JdbcWriter):
    """``at_least_once``: the rows and a marker row, committed by the task.

    A replayed partition is skipped (its rows rolled back) only when it holds what landed:
    the marker (``landed_table``) keys the batch and partition number with a digest of the
    rows sent, since the same number names other rows once the partitioning changed
    between a crash and the replay (``minPartitions``, a repartition). Upserts are merged
    again instead (idempotent), with no marker.
    """

    def _write(self, conn: Any, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JdbcCommittable:
        cfg, sql = self.cfg, self.sql
        tx = self._transaction(conn)
        digest = None if cfg.upsert_keys else hashlib.blake2b(digest_size=16)
        rows = self._send(tx, batches, task, digest)
        if digest is not None:
            key = (cfg.sink_id, task.query_id, task.batch_id, task.partition_id)
            seen = digest.hexdigest()
            if self._landed(tx, key, seen):
                conn.rollback()
                return JdbcCommittable.of(task, 0)
            self._keep_landed(tx, key, seen, rows)
            if task.partition_id == 0:  # one task prunes, so that tasks never wait on each other
                tx.execute(f"DELETE FROM {sql.landed_table} WHERE sink_id = %s AND query_id = %s AND "
                           "batch_id < %s", (cfg.sink_id, task.query_id, task.batch_id - KEEP_LANDED))
        conn.commit()
        failpoints.hit("jdbc.after_write", task.batch_id, rows)  # landed, not yet reported
        return JdbcCommittable.of(task, rows)

    def _landed(self, tx: Any, key: tuple[Any, ...], seen: str) -> bool:
        """Did this partition of the batch (``key``: sink, query, batch, partition) land
        with the rows of digest ``seen``?"""
        raise NotImplementedError

    def _keep_landed(self, tx: Any, key: tuple[Any, ...], seen: str, rows: int) -> None:
        """The partition's marker: it landed with the rows of digest ``seen``."""
        raise NotImplementedError


class PreparingWriter(JdbcWriter):
    """``exactly_once``: one prepared transaction per attempt (step 3), never committed here."""

    def __init__(self, setup: JdbcSinkSetup, epoch: int) -> None:
        super().__init__(setup)
        self.fence = epoch  # the claim's

    def _write(self, conn: Any, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JdbcCommittable:
        gid = gid_for(self.cfg.sink_id, self.fence, task.batch_id, task.partition_id, task.attempt,
                      task.task_attempt_id)
        tx = self._begin(conn, gid)
        # step 3: a stale run is fenced here; a replay of a decided batch writes nothing
        if self._decided(tx, task) or self._roll_back_earlier_attempts(conn, task):
            self._abandon(conn, gid)
            return JdbcCommittable.of(task, 0)
        rows = self._send(tx, batches, task)
        self._mark(tx, task, rows, self.fence)
        failpoints.hit("jdbc.before_prepare", task.batch_id, rows)
        self._prepare(conn, gid, task)  # step 3: durable, invisible, owned by no session
        failpoints.hit("jdbc.after_prepare", task.batch_id, rows)
        return JdbcCommittable.of(task, rows, gid)

    def _begin(self, conn: Any, gid: str) -> Any:
        """Begin the transaction to prepare as ``gid``; as ``_transaction``."""
        raise NotImplementedError

    def _decided(self, tx: Any, task: TaskInfo) -> bool:
        """Raise if a newer run owns the sink (the share lock on the sink's row holds the
        epoch while the transaction writes); True when this batch is decided already (a
        replay)."""
        raise NotImplementedError

    def _roll_back_earlier_attempts(self, conn: Any, task: TaskInfo) -> bool:
        """Roll back what earlier attempts of this task prepared (a retry, or a stage run
        again after a fetch failure, whose attempt numbers start at 0 again): they would
        hold this attempt's row and unique-index locks. A later attempt's is left alone, so
        a thawed older attempt cannot undo a newer one's work. True: this attempt writes
        nothing (its batch was decided meanwhile)."""
        raise NotImplementedError

    def _abandon(self, conn: Any, gid: str) -> None:
        """Roll back the transaction begun as ``gid``."""
        raise NotImplementedError

    def _prepare(self, conn: Any, gid: str, task: TaskInfo) -> None:
        """Prepare the transaction ``gid``: durable, invisible, for the driver to decide."""
        raise NotImplementedError


class PgWriter(SetsAside, JdbcWriter):
    """PostgreSQL's connection and statements, for the writers of every guarantee. Executor."""

    epoch: int | None = None  # the run's claim, in the session's name (exactly-once)

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> JdbcCommittable:
        cfg = self.cfg
        try:
            conn = connect(cfg.open_url(), cfg.reconnect_timeout_s, cfg.sink_id, self.epoch)
        except psycopg2.Error as e:
            raise ConnectorError(f"cannot connect to PostgreSQL at {cfg.safe_url}: {e}".strip()) from None
        try:
            return self._write(conn, batches, task)
        except psycopg2.Error as e:
            hint = _LOCKED if isinstance(e, psycopg2.errors.LockNotAvailable) else ""
            raise ConnectorError(
                f"writing batch {task.batch_id} partition {task.partition_id} to {cfg.qualified} "
                f"failed: {str(e).strip()}{hint}"
            ) from None
        finally:
            conn.close()  # an unprepared transaction is rolled back with the session

    def _transaction(self, conn: Any) -> Any:
        cur = conn.cursor()
        cur.execute("SET LOCAL lock_timeout = %s", (f"{self.cfg.lock_timeout_ms}ms",))
        if self.refused is not None:
            # A deferred constraint (a foreign key DEFERRABLE INITIALLY DEFERRED) would be
            # checked only at PREPARE / COMMIT, where no row can be set aside and every
            # retry fails alike: with dead letters, check each as its statement ends.
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        return cur

    def _mark(self, cur: Any, task: TaskInfo, rows: int, epoch: int) -> None:
        cur.execute(
            f"INSERT INTO {self.sql.batches_table} (sink_id, query_id, batch_id, partition_id, attempt, "
            "epoch, rows) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (self.cfg.sink_id, task.query_id, task.batch_id, task.partition_id, task.attempt, epoch, rows))

    def _send(self, cur: Any, batches: Iterator[pa.RecordBatch], task: TaskInfo, digest: Any = None) -> int:
        """COPY the task's rows; ``digest`` (a hashlib object), if given, sees every byte sent."""
        cfg, sql = self.cfg, self.sql
        keys = cfg.upsert_keys
        tag = f"{task.batch_id}:{task.partition_id}:{task.attempt}" if keys else None
        batches = _with_keys(batches, keys, task)
        if self.refused is not None and not keys:  # a COPY a batch, each undone alone if refused
            rows = sum(self._copy_setting_aside(cur, rb, digest) for rb in batches)
        else:
            rows = CopyStream(batches, sql, tag, digest).send(cur)
        if keys and rows:
            cur.execute(sql.upsert_from_staging, (tag,))
            cur.execute(sql.clear_staging, (tag,))
        return rows

    def _copy_setting_aside(self, cur: Any, rb: pa.RecordBatch, digest: Any) -> int:
        """COPY ``rb`` under a savepoint; when PostgreSQL refuses it for a row's sake, COPY
        each half the same way, down to the single rows refused (set aside). A batch with no
        bad row costs one savepoint; k bad rows among n cost about 2k log2(n) more COPYs."""
        stmt, data = to_copy(rb, self.sql, None)
        cur.execute("SAVEPOINT sx_rows")
        try:
            cur.copy_expert(stmt, io.BytesIO(data), len(data))
        except psycopg2.Error as e:
            if not row_error(e):
                raise
            cur.execute("ROLLBACK TO SAVEPOINT sx_rows")
            cur.execute("RELEASE SAVEPOINT sx_rows")
            if rb.num_rows == 1:
                assert self.refused is not None
                self.refused.append(Refusal(rb, type(e).__name__, e.pgcode or "",
                                            (e.pgerror or str(e)).strip().splitlines()[0]))
                return 0
            half = rb.num_rows // 2
            return (self._copy_setting_aside(cur, rb.slice(0, half), digest)
                    + self._copy_setting_aside(cur, rb.slice(half), digest))
        cur.execute("RELEASE SAVEPOINT sx_rows")
        if digest is not None:
            digest.update(data)
        return rb.num_rows


def _with_keys(batches: Iterator[pa.RecordBatch], keys: tuple[str, ...],
               task: TaskInfo) -> Iterator[pa.RecordBatch]:
    """The non-empty batches, each checked by ``require_keys`` as it comes."""
    for rb in batches:
        if rb.num_rows:
            require_keys(rb, keys, task)
            yield rb


def require_keys(rb: pa.RecordBatch, keys: tuple[str, ...], task: TaskInfo) -> None:
    """An upsert row must carry every key column: a NULL key cannot match or conflict."""
    for k in keys:
        if pc.any(pc.is_null(rb.column(k))).as_py():
            raise ConnectorError(
                f"upsert key column {k!r} is NULL in a row of batch {task.batch_id}: keys must be "
                "present (filter or fill them); nothing of this task was written")


def row_error(e: psycopg2.Error) -> bool:
    """Does PostgreSQL refuse the row for its own content (SQLSTATE class 22, data
    exception: too long, bad encoding or NUL byte, out of range; 23, integrity constraint
    violation: unique, check, not null, foreign key)? Anything else is the system's."""
    return (e.pgcode or "")[:2] in ("22", "23")


class PlainJdbcWriter(PgWriter, PlainWriter):
    """``none`` on PostgreSQL: COPY and commit."""


class MarkedJdbcWriter(PgWriter, MarkedWriter):
    """``at_least_once`` on PostgreSQL: COPY and a marker row, committed by the task."""

    def _landed(self, cur: Any, key: tuple[Any, ...], seen: str) -> bool:
        sql = self.sql
        cur.execute(f"SELECT 1 FROM {sql.landed_table} WHERE sink_id = %s AND query_id = %s AND "
                    "batch_id = %s AND partition_id = %s AND digest = %s", (*key, seen))
        landed = cur.fetchone() is not None
        if not landed:  # a marker of a version that kept no digests: trust its number
            cur.execute(f"SELECT 1 FROM {sql.batches_table} WHERE sink_id = %s AND query_id = %s AND "
                        "batch_id = %s AND partition_id = %s", key)
            landed = cur.fetchone() is not None
        return landed

    def _keep_landed(self, cur: Any, key: tuple[Any, ...], seen: str, rows: int) -> None:
        cur.execute(f"INSERT INTO {self.sql.landed_table} (sink_id, query_id, batch_id, partition_id, "
                    "digest, rows) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (*key, seen, rows))


# How long a retried attempt waits for the sink's lock before giving up (Spark retries it).
_ROLLBACK_LOCK_WAIT_MS = 5000


class PreparingJdbcWriter(PgWriter, PreparingWriter):
    """``exactly_once`` on PostgreSQL: ``PREPARE TRANSACTION``."""

    def __init__(self, setup: JdbcSinkSetup, epoch: int) -> None:
        super().__init__(setup, epoch)
        self.epoch = epoch  # the claim's, in the session's name

    def _begin(self, conn: Any, gid: str) -> Any:
        conn.tpc_begin(gid)
        return self._transaction(conn)

    def _abandon(self, conn: Any, gid: str) -> None:
        conn.tpc_rollback()

    def _prepare(self, conn: Any, gid: str, task: TaskInfo) -> None:
        try:
            conn.tpc_prepare()  # owned by no session from now on
        except psycopg2.Error as e:
            if e.pgcode == errorcodes.OUT_OF_MEMORY and "prepared transactions" in str(e):
                raise self._too_many_prepared(task) from None
            raise

    def _too_many_prepared(self, task: TaskInfo) -> ConnectorError:
        """The server's max_prepared_transactions is full: every task of an exactly_once
        batch holds one until the driver commits the batch, so waiting cannot free one."""
        cfg = self.cfg
        limit, ours = "?", "?"
        try:
            other = connect(cfg.open_url(), 0.0, cfg.sink_id)
            try:
                with other.cursor() as cur:
                    cur.execute("SHOW max_prepared_transactions")
                    limit = cur.fetchone()[0]
                ours = str(sum(parse_gid(g)[2] == task.batch_id for g in prepared_gids(other, cfg.sink_id)))
            finally:
                other.close()
        except psycopg2.Error:
            pass  # the message still names the setting and the fixes
        return ConnectorError(
            f"batch {task.batch_id} partition {task.partition_id} cannot prepare its transaction: "
            f"PostgreSQL at {cfg.safe_url} has max_prepared_transactions = {limit}, all in use ({ours} by "
            "this batch's other tasks). With exactly_once every task of a batch holds one prepared "
            "transaction until the batch commits, so a batch needs at most that many tasks (after a "
            "shuffle Spark makes spark.sql.shuffle.partitions tasks, 200 by default). Raise "
            "max_prepared_transactions in postgresql.conf above the tasks per batch (plus other writers' "
            "share) and restart PostgreSQL, or write fewer tasks a batch with df.coalesce(n) before the "
            "sink; nothing of the batch was committed")

    def _decided(self, cur: Any, task: TaskInfo) -> bool:
        """The share lock holds the epoch until the commit (a prepared transaction keeps its locks)."""
        cfg, sql = self.cfg, self.sql
        cur.execute(f"SELECT epoch FROM {sql.sinks_table} WHERE sink_id = %s FOR SHARE", (cfg.sink_id,))
        row = cur.fetchone()
        if row is None or row[0] != self.fence:
            raise FencedError(
                f"sink {cfg.sink_id!r} was taken over by a newer run (epoch {row and row[0]}, "
                f"this run {self.fence}); this stale task writes nothing"
            )
        cur.execute(f"SELECT 1 FROM {sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                    "AND batch_id = %s AND partition_id = -1", (cfg.sink_id, task.query_id, task.batch_id))
        return cur.fetchone() is not None

    def _roll_back_earlier_attempts(self, conn: Any, task: TaskInfo) -> bool:
        """Under the sink's advisory lock, which a decision holds (shared) from the moment it
        checks its winners until its record commits: an earlier attempt can be a winner
        the driver is recording right now, and rolled back then, the batch would commit
        without its rows. With the lock, the batch is found undecided (nothing of it can
        be a winner) or decided; True then: this attempt writes nothing, as a replay.
        A take-over holds the lock for as long as its epoch bump waits on this task's
        share lock: give up soon then (Spark retries the task)."""
        earlier = [g for g in prepared_gids(conn, self.cfg.sink_id)
                   if parse_gid(g)[2:4] == (task.batch_id, task.partition_id)
                   and started_before(g, self.fence, task.task_attempt_id)]
        if not earlier:
            return False
        cfg = self.cfg
        other = connect(cfg.open_url(), cfg.reconnect_timeout_s, cfg.sink_id)
        other.autocommit = True  # ROLLBACK PREPARED runs outside a transaction
        try:
            with other.cursor() as cur:
                cur.execute("SET lock_timeout = %s", (f"{_ROLLBACK_LOCK_WAIT_MS}ms",))
                try:
                    cur.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (LOCK_SPACE, cfg.sink_id))
                except psycopg2.errors.LockNotAvailable:
                    raise ConnectorError(
                        f"sink {cfg.sink_id!r}: its lock stayed held {_ROLLBACK_LOCK_WAIT_MS} ms (a "
                        f"take-over?) while attempt {task.attempt} of partition {task.partition_id} "
                        "waited to roll back an earlier attempt's transaction") from None
                cur.execute(f"SELECT 1 FROM {self.sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                            "AND batch_id = %s AND partition_id = -1",
                            (cfg.sink_id, task.query_id, task.batch_id))
                if cur.fetchone() is not None:
                    return True
            for gid in earlier:
                finish(other, gid, commit=False)
            return False
        finally:
            other.close()  # ends the session: releases the lock
