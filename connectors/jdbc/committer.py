"""Driver side of the PostgreSQL sink's two-phase commit, and recovery at query start.

Where "batch N committed" lives, and why it is atomic enough: the driver is the 2PC
coordinator and PostgreSQL holds its log. ``commit(N)`` first inserts the *decision*
row ``(sink, N, partition -1)`` listing the winning global ids, in a transaction that
also checks, under a share lock, that this run still owns the sink (epoch). Only then
does it ``COMMIT PREPARED`` each winner. So:

- crash before the decision: nothing of N is visible; recovery rolls back N's prepared
  transactions and Spark's replay of N writes it afresh;
- crash after the decision: recovery commits the remaining winners (and only them);
  the replay's tasks see the decision and write nothing;
- each winner also wrote its own marker row inside its prepared transaction, so a
  ``COMMIT PREPARED`` that finds its id gone can tell "already committed" (marker
  visible) from "lost" (fail loudly).

Fencing: before each batch (Spark plans the write anew per batch) recovery resolves
what is in doubt and bumps the sink's epoch in ``spark_ext_sinks``. Writers and the
decision read it ``FOR SHARE`` inside their transactions, so a stale task attempt or a
second run that was overtaken can neither prepare nor decide; the share locks also
make the bump wait for open transactions, which recovery resolves first. The decision
row is unique per batch, so even two live runs cannot commit one batch twice.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import psycopg2
import psycopg2.errors
from psycopg2 import errorcodes

from connectors.jdbc.config import JdbcSinkConfig
from connectors.jdbc.writer import JdbcCommittable, WriterConfig, connect, parse_gid
from spark_ext import failpoints
from spark_ext.commit import Committer
from spark_ext.errors import ConnectorError, FatalCommitError, FencedError, RetriableCommitError

log = logging.getLogger(__name__)

KEEP_BATCHES = 100  # decision and marker rows kept per sink (older ones are pruned)
ABORT_WAIT_S = 120.0  # how long abort waits for the batch's running tasks to be fenced


class _Db:
    """An autocommit psycopg2 connection for the coordinator's statements."""

    def __init__(self, cfg: JdbcSinkConfig) -> None:
        try:
            self.conn = connect(cfg.url)
        except psycopg2.OperationalError as e:
            raise RetriableCommitError(
                f"cannot reach PostgreSQL at {cfg.safe_url}: {str(e).strip()}"
            ) from None
        self.conn.autocommit = True

    def __enter__(self) -> Any:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def prepared_gids(conn: Any, sink_id: str) -> list[str]:
    """This sink's in-doubt transactions in the current database."""
    with conn.cursor() as cur:
        cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE %s",
                    ("sx:" + sink_id.replace("_", r"\_").replace("%", r"\%") + ":%",))
        return sorted(r[0] for r in cur.fetchall() if parse_gid(r[0])[0] == sink_id)


def decisions(conn: Any, batches_table: str, sink_id: str, batches: set[int]) -> dict[int, set[str]]:
    """Batch -> the transaction ids decided to commit (over every query id of the sink:
    ids carry the epoch, so one query's decision never names another's transaction)."""
    if not batches:
        return {}
    out: dict[int, set[str]] = {}
    with conn.cursor() as cur:
        cur.execute(f"SELECT batch_id, winners FROM {batches_table} WHERE sink_id = %s AND "
                    "partition_id = -1 AND batch_id = ANY(%s)", (sink_id, sorted(batches)))
        for b, w in cur.fetchall():
            out.setdefault(b, set()).update(json.loads(w or "[]"))
    return out


def finish(conn: Any, gid: str, commit: bool) -> bool:
    """COMMIT / ROLLBACK PREPARED; False when the id no longer exists."""
    try:
        with conn.cursor() as cur:
            cur.execute(("COMMIT PREPARED %s" if commit else "ROLLBACK PREPARED %s"), (gid,))
        return True
    except psycopg2.Error as e:
        if e.pgcode == errorcodes.UNDEFINED_OBJECT:
            return False
        raise


def resolve_in_doubt(conn: Any, batches_table: str, sink_id: str) -> tuple[list[str], list[str]]:
    """Commit prepared winners of decided batches, roll back everything else."""
    gids = prepared_gids(conn, sink_id)
    decided = decisions(conn, batches_table, sink_id, {parse_gid(g)[2] for g in gids})
    committed: list[str] = []
    rolled_back: list[str] = []
    for gid in gids:
        win = gid in decided.get(parse_gid(gid)[2], set())
        if finish(conn, gid, commit=win):
            (committed if win else rolled_back).append(gid)
    return committed, rolled_back


class JdbcCommitter(Committer[JdbcCommittable]):
    """Recovers, commits and aborts one sink's batches. Driver."""

    def __init__(self, wc: WriterConfig) -> None:
        self.wc = wc

    def take_over(self) -> int:
        """Query start: resolve what an earlier run left in doubt, then claim the sink.

        Returns the new epoch; transactions of older epochs can no longer prepare or decide.
        """
        cfg, sql = self.wc.cfg, self.wc.sql
        try:
            with _Db(cfg) as conn:
                committed, rolled_back = resolve_in_doubt(conn, sql.batches_table, cfg.sink_id)
                if committed or rolled_back:
                    log.warning("sink %s: recovered %d decided transaction(s), rolled back %d",
                                cfg.sink_id, len(committed), len(rolled_back))
                with conn.cursor() as cur:
                    cur.execute("SET lock_timeout = %s", (f"{cfg.lock_timeout_ms}ms",))
                    cur.execute(
                        f"INSERT INTO {sql.sinks_table} AS s (sink_id, target, epoch) VALUES (%s, %s, 1) "
                        "ON CONFLICT (sink_id) DO UPDATE SET epoch = s.epoch + 1, updated_at = now() "
                        "RETURNING epoch, target", (cfg.sink_id, cfg.qualified))
                    epoch, target = cur.fetchone()
                if target != cfg.qualified:
                    raise ConnectorError(
                        f"sinkId {cfg.sink_id!r} already belongs to a sink writing {target}; two queries "
                        "must not share a sink id: give this one its own sinkId or checkpointLocation"
                    )
                return int(epoch)
        except psycopg2.Error as e:
            raise ConnectorError(f"recovering sink {cfg.sink_id!r} at {cfg.safe_url} failed: "
                                 f"{str(e).strip()}") from None

    def commit(self, committables: Sequence[JdbcCommittable], batch_id: int) -> None:
        cfg, sql = self.wc.cfg, self.wc.sql
        mine = {c.gid for c in committables if c.gid}
        query_ids = {c.query_id for c in committables}
        if len(query_ids) > 1:
            raise FatalCommitError(f"batch {batch_id} mixes tasks of queries {sorted(query_ids)}")
        if not query_ids:
            return  # no task reported: nothing was prepared
        query_id = query_ids.pop()
        epochs = {parse_gid(g)[1] for g in mine}
        if len(epochs) > 1:
            raise FatalCommitError(f"batch {batch_id} mixes transactions of epochs {sorted(epochs)}")
        epoch = epochs.pop() if epochs else None
        rows = sum(c.rows for c in committables)
        try:
            with _Db(cfg) as conn:
                if rows:  # crash tests aim at batches that carry rows
                    failpoints.hit("jdbc.before_decision")
                winners = self._decide(conn, query_id, batch_id, mine, rows, epoch)
                if rows:
                    failpoints.hit("jdbc.after_decision")
                for i, gid in enumerate(sorted(winners)):
                    if i == 1:
                        failpoints.hit("jdbc.mid_commit")
                    if not finish(conn, gid, commit=True) and not self._landed(conn, gid):
                        raise FatalCommitError(
                            f"prepared transaction {gid} of batch {batch_id} is gone and its rows are not "
                            "in the table: it was rolled back by an operator or another run; batch "
                            f"{batch_id} is incomplete in {cfg.qualified}"
                        )
                # Attempts whose message never reached us (retries, speculation): never visible.
                for gid in prepared_gids(conn, cfg.sink_id):
                    if parse_gid(gid)[2] <= batch_id and gid not in winners:
                        finish(conn, gid, commit=False)
                with conn.cursor() as cur:
                    cur.execute(f"DELETE FROM {sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                                "AND batch_id < %s", (cfg.sink_id, query_id, batch_id - KEEP_BATCHES))
        except psycopg2.OperationalError as e:
            raise RetriableCommitError(f"commit of batch {batch_id}: {str(e).strip()}") from None
        log.info("sink %s: batch %s committed (%d rows, %d transactions)",
                 cfg.sink_id, batch_id, rows, len(mine))

    def _decide(self, conn: Any, query_id: str, batch_id: int, mine: set[str], rows: int,
                epoch: int | None) -> set[str]:
        """Record "batch N commits these ids" unless decided already; fenced runs cannot.

        ``epoch``: the one the batch's writers ran under (None when every task found the
        batch decided already and prepared nothing).
        """
        cfg, sql = self.wc.cfg, self.wc.sql
        conn.autocommit = False
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT epoch FROM {sql.sinks_table} WHERE sink_id = %s FOR SHARE",
                            (cfg.sink_id,))
                row = cur.fetchone()
                if epoch is not None and (row is None or row[0] != epoch):
                    conn.rollback()
                    conn.autocommit = True
                    for gid in mine:  # ours can never commit now
                        finish(conn, gid, commit=False)
                    raise FencedError(
                        f"sink {cfg.sink_id!r} was taken over by a newer run (epoch {row and row[0]}); this "
                        f"run (epoch {epoch}) cannot commit batch {batch_id}; its transactions were "
                        "rolled back"
                    )
                cur.execute(
                    f"INSERT INTO {sql.batches_table} (sink_id, query_id, batch_id, partition_id, attempt, "
                    "epoch, rows, winners) VALUES (%s, %s, %s, -1, -1, %s, %s, %s) ON CONFLICT DO NOTHING "
                    "RETURNING 1",
                    (cfg.sink_id, query_id, batch_id, epoch if epoch is not None else row[0], rows,
                     json.dumps(sorted(mine))))
                if cur.fetchone() is None:  # decided by an earlier run: a replay
                    cur.execute(f"SELECT winners FROM {sql.batches_table} WHERE sink_id = %s AND "
                                "query_id = %s AND batch_id = %s AND partition_id = -1",
                                (cfg.sink_id, query_id, batch_id))
                    mine = set(json.loads(cur.fetchone()[0] or "[]"))
            conn.commit()
        finally:
            conn.autocommit = True
        return mine

    def _landed(self, conn: Any, gid: str) -> bool:
        _, _, batch, part, attempt = parse_gid(gid)
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {self.wc.sql.batches_table} WHERE sink_id = %s AND batch_id = %s AND "
                        "partition_id = %s AND attempt = %s", (self.wc.cfg.sink_id, batch, part, attempt))
            return cur.fetchone() is not None

    def abort(self, committables: Sequence[JdbcCommittable], batch_id: int) -> None:
        """Roll back the batch, including tasks still running when Spark gave up on it.

        Spark calls this as soon as one task failed for good, while others may still be
        writing. Bumping the epoch fences them: the UPDATE waits for every writer holding
        the sink row FOR SHARE; each round rolls back what prepared meanwhile, so once the
        bump lands no writer of this batch can prepare any more.
        """
        cfg = self.wc.cfg
        deadline = time.monotonic() + ABORT_WAIT_S
        try:
            with _Db(cfg) as conn:
                with conn.cursor() as cur:
                    cur.execute("SET lock_timeout = '1s'")
                while True:
                    self._roll_back_batch(conn, batch_id)
                    try:
                        with conn.cursor() as cur:
                            cur.execute(f"UPDATE {self.wc.sql.sinks_table} SET epoch = epoch + 1, "
                                        "updated_at = now() WHERE sink_id = %s", (cfg.sink_id,))
                        break
                    except psycopg2.errors.LockNotAvailable:
                        if time.monotonic() > deadline:
                            raise RetriableCommitError(
                                f"abort of batch {batch_id}: writers still hold the sink after "
                                f"{ABORT_WAIT_S:.0f} s; their transactions are resolved at the next start"
                            ) from None
                self._roll_back_batch(conn, batch_id)
        except psycopg2.OperationalError as e:
            raise RetriableCommitError(f"abort of batch {batch_id}: {str(e).strip()}") from None

    def _roll_back_batch(self, conn: Any, batch_id: int) -> None:
        """Roll back the batch's prepared transactions, except decided winners (recovery's)."""
        won = decisions(conn, self.wc.sql.batches_table, self.wc.cfg.sink_id, {batch_id}).get(batch_id, set())
        for gid in prepared_gids(conn, self.wc.cfg.sink_id):
            if parse_gid(gid)[2] == batch_id and gid not in won:
                finish(conn, gid, commit=False)
