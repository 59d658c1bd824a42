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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg2
import psycopg2.errors

from spark_ext import failpoints
from spark_ext.commit import Claim, Committer
from spark_ext.connectors.jdbc.tables import JdbcSinkSetup
from spark_ext.connectors.jdbc.transactions import (
    Db,
    JdbcCommittable,
    decisions,
    finish,
    parse_gid,
    prepared_gids,
    resolve_in_doubt,
)
from spark_ext.errors import ConnectorError, FatalCommitError, FencedError, RetriableCommitError
from spark_ext.retry import Backoff, retry

log = logging.getLogger(__name__)

KEEP_BATCHES = 100  # decision and marker rows kept per sink (older ones are pruned)
LOCK_SPACE = 0x53585431  # first key of the sinks' advisory locks ("SXT1"); the second is the sink id


class JdbcCommitter(Committer[JdbcCommittable]):
    """Recovers, commits and aborts one sink's batches. Driver."""

    def __init__(self, setup: JdbcSinkSetup) -> None:
        self.cfg, self.sql = setup.cfg, setup.sql

    def take_over(self) -> Claim[int]:
        """Step 1: claim the sink (new epoch) and resolve what earlier runs left in doubt.

        Serialised with every decision by the sink's advisory lock (exclusive here,
        shared in ``_decide``): no older run can record a decision between the rollback
        of its transactions and the epoch bump that fences it. The claim's fence is the
        new epoch: transactions of older epochs can no longer prepare or decide.
        """
        cfg = self.cfg
        try:
            with Db(cfg) as conn:
                self._check_target(conn)
                with self._exclusive(conn):
                    committed, rolled_back, epoch = self._resolve_and_bump(conn, None)
                if committed or rolled_back:
                    log.warning("sink %s: recovered %d decided transaction(s), rolled back %d",
                                cfg.sink_id, len(committed), len(rolled_back))
                return Claim(epoch, committed=len(committed), rolled_back=len(rolled_back))
        except psycopg2.Error as e:
            raise ConnectorError(f"recovering sink {cfg.sink_id!r} at {cfg.safe_url} failed: "
                                 f"{str(e).strip()}") from None

    def _check_target(self, conn: Any) -> None:
        """Refuse a sink id that belongs to another table before touching its transactions."""
        with conn.cursor() as cur:
            cur.execute(f"SELECT target FROM {self.sql.sinks_table} WHERE sink_id = %s", (self.cfg.sink_id,))
            row = cur.fetchone()
        if row is not None and row[0] != self.cfg.qualified:
            raise ConnectorError(
                f"sinkId {self.cfg.sink_id!r} already belongs to a sink writing {row[0]}; two queries must "
                "not share a sink id: give this one its own sinkId or checkpointLocation"
            )

    @contextmanager
    def _exclusive(self, conn: Any) -> Iterator[None]:
        """Hold the sink's advisory lock (session level: COMMIT PREPARED runs outside a transaction)."""
        with conn.cursor() as cur:
            cur.execute("SET lock_timeout = %s", (f"{self.cfg.lock_timeout_ms}ms",))
            cur.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (LOCK_SPACE, self.cfg.sink_id))
        try:
            yield
        finally:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (LOCK_SPACE, self.cfg.sink_id))

    def _resolve_and_bump(self, conn: Any, batch_id: int | None) -> tuple[list[str], list[str], int]:
        """Resolve in-doubt transactions (all, or one batch's), then bump the epoch.

        The bump waits for the share locks of open and prepared writers; a stale writer
        that prepared after the rollback holds it forever, so each round rolls back again
        and tries the bump for at most a second, until ``lockTimeoutMs``.
        """
        cfg, sql = self.cfg, self.sql
        committed: list[str] = []
        rolled_back: list[str] = []

        def round_() -> int:
            if batch_id is None:
                c, r = resolve_in_doubt(conn, sql.batches_table, cfg.sink_id)
                committed.extend(c)
                rolled_back.extend(r)
            else:
                rolled_back.extend(self._roll_back_batch(conn, batch_id))
            with conn.cursor() as cur:
                cur.execute("SET lock_timeout = '1s'")
                cur.execute(
                    f"INSERT INTO {sql.sinks_table} AS s (sink_id, target, epoch) VALUES (%s, %s, 1) "
                    "ON CONFLICT (sink_id) DO UPDATE SET epoch = s.epoch + 1, updated_at = now() "
                    "RETURNING epoch", (cfg.sink_id, cfg.qualified))
                return int(cur.fetchone()[0])

        epoch = retry(round_, what=f"claiming sink {cfg.sink_id!r}",
                      retry_on=psycopg2.errors.LockNotAvailable, timeout_s=cfg.lock_timeout_ms / 1000,
                      backoff=Backoff(initial_s=0.0, max_s=0.0),
                      give_up=lambda e: RetriableCommitError(
                          f"sink {cfg.sink_id!r}: writers of another run still hold it after "
                          f"{cfg.lock_timeout_ms} ms (lockTimeoutMs); their transactions are resolved "
                          "at the next start"))
        if batch_id is not None:  # what prepared while the bump waited
            rolled_back.extend(self._roll_back_batch(conn, batch_id))
        return committed, rolled_back, epoch

    def commit(self, committables: Sequence[JdbcCommittable], batch_id: int) -> None:
        cfg, sql = self.cfg, self.sql
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
            with Db(cfg) as conn:
                failpoints.hit("jdbc.before_decision", batch_id, rows)
                winners = self._decide(conn, query_id, batch_id, mine, rows, epoch)  # step 4a, 4b
                failpoints.hit("jdbc.after_decision", batch_id, rows)
                for i, gid in enumerate(sorted(winners)):  # step 4c
                    if i == 1:
                        failpoints.hit("jdbc.mid_commit", batch_id, rows)
                    if not finish(conn, gid, commit=True) and not self._landed(conn, gid, query_id):
                        raise FatalCommitError(
                            f"prepared transaction {gid} of batch {batch_id} is gone and its rows are not "
                            "in the table: it was rolled back by an operator or another run; batch "
                            f"{batch_id} is incomplete in {cfg.qualified}"
                        )
                # step 4d: attempts whose message never reached us (retries, speculation)
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
        cfg, sql = self.cfg, self.sql
        conn.autocommit = False
        try:
            with conn.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = %s", (f"{cfg.lock_timeout_ms}ms",))
                # waits while a newer run takes the sink over (take_over holds it exclusively)
                cur.execute("SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s))",
                            (LOCK_SPACE, cfg.sink_id))
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

    def _landed(self, conn: Any, gid: str, query_id: str) -> bool:
        """Did ``gid`` commit? Its marker row is scoped by query and epoch: after a checkpoint
        reset at the same path an older query's marker has the same batch, partition and attempt."""
        _, epoch, batch, part, attempt = parse_gid(gid)
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {self.sql.batches_table} WHERE sink_id = %s AND query_id = %s AND "
                        "epoch = %s AND batch_id = %s AND partition_id = %s AND attempt = %s",
                        (self.cfg.sink_id, query_id, epoch, batch, part, attempt))
            return cur.fetchone() is not None

    def abort(self, committables: Sequence[JdbcCommittable], batch_id: int) -> None:
        """Step 5: roll back the batch, including tasks still running when Spark gave up.

        Spark calls this as soon as one task failed for good, while others may still be
        writing. Bumping the epoch fences them (``_resolve_and_bump``), so once the bump
        lands no writer of this batch can prepare any more.
        """
        try:
            with Db(self.cfg) as conn, self._exclusive(conn):
                self._resolve_and_bump(conn, batch_id)
        except psycopg2.OperationalError as e:
            raise RetriableCommitError(f"abort of batch {batch_id}: {str(e).strip()}") from None

    def _roll_back_batch(self, conn: Any, batch_id: int) -> list[str]:
        """Roll back the batch's prepared transactions, except decided winners (recovery's)."""
        won = decisions(conn, self.sql.batches_table, self.cfg.sink_id, {batch_id}).get(batch_id, set())
        return [gid for gid in prepared_gids(conn, self.cfg.sink_id)
                if parse_gid(gid)[2] == batch_id and gid not in won and finish(conn, gid, commit=False)]
