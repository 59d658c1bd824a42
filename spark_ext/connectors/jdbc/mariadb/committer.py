"""Driver side of the MariaDB / MySQL dialect: the jdbc committer's protocol
(``jdbc.committer.JdbcCommitter``: take-over, decision, commit, abort, the same rules and
messages) over XA, with the primitives that differ replaced:

- the sink's lock, which serialises a take-over's rollback and epoch bump with every
  decision, is ``GET_LOCK`` (a named lock of the session; exclusive, where PostgreSQL's
  decisions share theirs: one query per sink decides one batch at a time anyway);
- the epoch bump is ``INSERT ... ON DUPLICATE KEY UPDATE``, waiting at most a second a
  round on the writers' share locks (``innodb_lock_wait_timeout``). MariaDB releases a
  transaction's share locks when it prepares (below ``SERIALIZABLE``), so the bump does
  not wait for prepared writers: what they prepared is resolved again after it;
- a take-over ends the task sessions of older runs by what they do, not by a name
  (MariaDB shows no client's name without the performance schema): while the epoch
  bump waits, the sessions whose transactions hold the lock it waits for on the sink's
  row are the sink's writers of the run being fenced (decisions and the doctor hold the
  sink's lock, which the take-over has), a frozen executor's among them: they are
  killed, as PostgreSQL's take-over ends its stale task sessions. Without the PROCESS
  privilege it cannot see them, waits up to ``lockTimeoutMs`` and says so.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pymysql

from spark_ext.commit import Batch
from spark_ext.connectors.jdbc.committer import JdbcCommitter
from spark_ext.connectors.jdbc.mariadb.transactions import (
    LOCK_WAIT_TIMEOUT,
    MyConn,
    connect,
    decisions,
    error_code,
    finish,
    lock_name,
    prepared_gids,
    resolve_in_doubt,
    sink_format,
)
from spark_ext.connectors.jdbc.transactions import JdbcCommittable, winners_text
from spark_ext.errors import RetriableCommitError

log = logging.getLogger(__name__)


# The sessions whose transactions hold a lock on the sink's table that session %s waits
# for (InnoDB's lock waits; needs the PROCESS privilege).
_BLOCKERS = (
    "SELECT DISTINCT b.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w "
    "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
    "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
    "JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.blocking_lock_id "
    "WHERE r.trx_mysql_thread_id = %s AND l.lock_table LIKE %s"
)


class _LockWait(Exception):
    """The epoch bump waited its second for a writer's share lock."""


class MyJdbcCommitter(JdbcCommitter):
    """Recovers, commits and aborts one MariaDB sink's batches. Driver."""

    _decisions = staticmethod(decisions)
    _lock_wait = _LockWait
    # MariaDB releases a transaction's share locks when it prepares, so a writer of an
    # older epoch may prepare and let the bump pass: what it prepared is resolved after.
    _prepared_keep_share_locks = False

    def _prepared_gids(self, conn: MyConn, sink_id: str) -> list[str]:
        return prepared_gids(conn, sink_id, sink_format(self.cfg))

    def _finish_xact(self, conn: MyConn, gid: str, commit: bool) -> bool:
        return finish(conn, gid, commit, sink_format(self.cfg))

    @property
    def _lock_name(self) -> str:
        return lock_name(self.cfg.sink_id)

    def _open(self) -> MyConn:
        cfg = self.cfg
        try:
            return connect(cfg.open_url(), cfg.reconnect_timeout_s, cfg.lock_timeout_ms)
        except pymysql.OperationalError as e:
            raise RetriableCommitError(f"cannot reach MariaDB at {cfg.safe_url}: {e}") from None

    @contextmanager
    def connected(self) -> Iterator[None]:
        conn = self._open()
        self._conn = conn
        try:
            yield
        except (pymysql.OperationalError, pymysql.InterfaceError) as e:  # the connection dropped
            raise RetriableCommitError(f"{self.kept_label}: {e}") from None
        finally:
            self._conn = None
            conn.close()

    @contextmanager
    def _claiming(self) -> Iterator[MyConn]:
        """A connection of its own for the take-over, closed after it."""
        conn = self._open()
        try:
            yield conn
        except pymysql.Error as e:
            raise self._claim_failed(str(e)) from None
        finally:
            conn.close()

    @contextmanager
    def _exclusive(self, conn: MyConn) -> Iterator[None]:
        wait_s = max(1, self.cfg.lock_timeout_ms // 1000)
        got = conn.execute("SELECT GET_LOCK(%s, %s)", (self._lock_name, wait_s))
        if not got or got[0][0] != 1:
            raise RetriableCommitError(
                f"sink {self.cfg.sink_id!r}: another session held its lock for {wait_s} s (lockTimeoutMs): "
                "another run of this sink deciding or taking over")
        try:
            yield
        finally:
            if not conn.closed:  # else the server released it with the session
                conn.execute("SELECT RELEASE_LOCK(%s)", (self._lock_name,))

    def _resolve_in_doubt(self, conn: MyConn) -> tuple[list[str], list[str]]:
        return resolve_in_doubt(conn, self.sql.batches_table, self.cfg.sink_id, sink_format(self.cfg))

    def _end_stale_sessions(self, conn: MyConn) -> None:
        """Nothing before the bump: the stale writers are ended while it waits for them
        (``_ending_blockers``)."""

    def _bump(self, conn: MyConn) -> int:
        """The next epoch; the stale writers whose share locks it waits for are killed meanwhile."""
        cfg, sql = self.cfg, self.sql
        conn.execute("SET SESSION innodb_lock_wait_timeout = 1")
        me = int(conn.execute("SELECT CONNECTION_ID()")[0][0])
        conn.autocommit = False
        try:
            with self._ending_blockers(me):
                conn.execute(
                    f"INSERT INTO {sql.sinks_table} (sink_id, target, epoch) VALUES (%s, %s, 1) ON "
                    "DUPLICATE KEY UPDATE epoch = epoch + 1, updated_at = current_timestamp(6)",
                    (cfg.sink_id, cfg.qualified))
            epoch = int(conn.execute(f"SELECT epoch FROM {sql.sinks_table} WHERE sink_id = %s",
                                     (cfg.sink_id,))[0][0])
            conn.commit()
            return epoch
        except pymysql.Error as e:
            if conn.closed:
                raise
            conn.rollback()
            if error_code(e) == LOCK_WAIT_TIMEOUT:
                raise _LockWait(str(e)) from None
            raise
        finally:
            if not conn.closed:
                conn.autocommit = True
                conn.execute(f"SET SESSION innodb_lock_wait_timeout = {-(-cfg.lock_timeout_ms // 1000)}")

    @contextmanager
    def _ending_blockers(self, waiting: int) -> Iterator[None]:
        """While session ``waiting`` bumps the epoch: kill the sessions whose
        transactions hold the lock it waits for on the sink's row (stale writers, see the
        module's docstring), from a connection of its own, polled every 0.2 s."""
        stop = threading.Event()
        ended: list[int] = []
        table = self.sql.sinks_table.replace("`", "").split(".")[-1]

        def watch() -> None:
            try:
                other = connect(self.cfg.open_url(), 0.0)
            except pymysql.Error:
                return  # the bump waits as without
            try:
                while not stop.wait(0.2):
                    for (tid,) in other.execute(_BLOCKERS, (waiting, f"%`{table}`")):
                        if tid not in ended:
                            other.execute(f"KILL CONNECTION {int(tid)}")
                            ended.append(int(tid))
            except pymysql.Error as e:
                log.warning("sink %s: cannot see or end the sessions that hold its row (%s); the claim "
                            "waits for them up to lockTimeoutMs (grant PROCESS to the sink's user)",
                            self.cfg.sink_id, e)
            finally:
                other.close()

        t = threading.Thread(target=watch, name="sink-claim-watch", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(10)
            if ended:
                log.warning("sink %s: ended %d task session(s) of older runs or attempts (connection ids "
                            "%s): their executors froze or were lost", self.cfg.sink_id, len(ended),
                            ", ".join(map(str, ended)))

    @contextmanager
    def _deciding(self, conn: MyConn) -> Iterator[Any]:
        """The decision's transaction, committed when the block ends, under the sink's lock
        held exclusively (one query per sink decides one batch at a time anyway)."""
        with self._exclusive(conn):
            conn.autocommit = False
            try:
                with conn.cursor() as cur:
                    yield cur
                conn.commit()
            finally:
                if not conn.closed:
                    conn.autocommit = True

    def _epoch_for_share(self, cur: Any) -> Any:
        cur.execute(f"SELECT epoch FROM {self.sql.sinks_table} WHERE sink_id = %s "
                    "LOCK IN SHARE MODE", (self.cfg.sink_id,))
        return cur.fetchone()

    def _insert_decision(self, cur: Any, batch: Batch[JdbcCommittable], epoch: int | None,
                         winners: frozenset[str]) -> bool:
        return bool(cur.execute(
            f"INSERT IGNORE INTO {self.sql.batches_table} (sink_id, query_id, batch_id, partition_id, "
            "attempt, epoch, `rows`, winners) VALUES (%s, %s, %s, -1, -1, %s, %s, %s)",
            (self.cfg.sink_id, batch.query_id, batch.batch_id, epoch, batch.rows,
             winners_text(winners, batch.run_id))))
