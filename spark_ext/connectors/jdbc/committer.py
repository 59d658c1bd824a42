"""Driver side of the jdbc sink's two-phase commit, and recovery at query start:
``JdbcCommitter`` with PostgreSQL's primitives. MariaDB's committer
(``mariadb.committer``) subclasses it and replaces the primitives that differ (the
connection, the sink's lock, the epoch bump, the in-doubt queries, the decision row's
statements); the protocol (take-over, checks, commit, abort) is written once, here.

Where "batch N committed" lives, and why it is atomic enough: the driver is the 2PC
coordinator and the database holds its log. The commit (``spark_ext.commit.TwoPhaseCommitter``
calling the primitives below) first inserts the *decision* row ``(sink, N, partition
-1)`` listing the winning global ids, in a transaction that
also checks, under a share lock, that this run still owns the sink (epoch). Only then
does it commit each winner (``COMMIT PREPARED``; MariaDB: ``XA COMMIT``). So:

- crash before the decision: nothing of N is visible; recovery rolls back N's prepared
  transactions and Spark's replay of N writes it afresh;
- crash after the decision: recovery commits the remaining winners (and only them);
  the replay's tasks see the decision and write nothing;
- each winner also wrote its own marker row inside its prepared transaction, so a
  commit that finds its id gone can tell "already committed" (marker visible) from
  "lost" (fail loudly).

Fencing: before each batch (Spark plans the write anew per batch) recovery resolves
what is in doubt and bumps the sink's epoch in ``spark_ext_sinks``. Writers and the
decision read it ``FOR SHARE`` inside their transactions, so a stale task attempt or a
second run that was overtaken can neither prepare nor decide; the share locks also
make the bump wait for open transactions, which recovery resolves first. The decision
row is unique per batch, so even two live runs cannot commit one batch twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.errors

from spark_ext.commit import Batch, Claim, Predecessor, TwoPhaseCommitter
from spark_ext.connectors.jdbc.tables import JdbcSinkSetup
from spark_ext.connectors.jdbc.transactions import (
    LOCK_SPACE,
    JdbcCommittable,
    KeptDb,
    decisions,
    finish,
    kept_db,
    parse_gid,
    prepared_gids,
    read_winners,
    resolve_in_doubt,
    sink_sessions,
    stand_in,
    winners_text,
)
from spark_ext.errors import (
    CommitError,
    ConnectorError,
    FatalCommitError,
    FencedError,
    RetriableCommitError,
)
from spark_ext.retry import Backoff, retry

log = logging.getLogger(__name__)

# A decision row's winners and rows. ``rows`` is qualified: MariaDB reserves the word, and
# a name after a period is never read as one.
_DECISION = ("SELECT d.winners, d.rows FROM {} d WHERE d.sink_id = %s AND d.query_id = %s "
             "AND d.batch_id = %s AND d.partition_id = -1")
KEEP_BATCHES = 100  # decision and marker rows kept per sink (older ones are pruned)


@dataclass(frozen=True)
class JdbcDecision:
    """A decision row: batch ``batch_id`` of query ``query_id`` commits ``winners`` (global ids)."""

    query_id: str
    batch_id: int
    winners: frozenset[str]
    run_id: str = ""  # Spark's run that decided it ("": not kept)
    rows: int | None = None  # the rows the batch commits


class JdbcCommitter(KeptDb, TwoPhaseCommitter[JdbcCommittable, JdbcDecision]):
    """Recovers, commits and aborts one sink's batches (PostgreSQL's primitives). Driver."""

    name = "jdbc"
    # The dialect's queries over in-doubt transactions (the MariaDB committer has its own).
    _prepared_gids = staticmethod(prepared_gids)
    _finish_xact = staticmethod(finish)
    _decisions = staticmethod(decisions)
    # What a round of the epoch bump raises when it waited its second on a writer's share lock.
    _lock_wait: type[Exception] = psycopg2.errors.LockNotAvailable
    # Does a writer's transaction keep its share lock on the sink's row once prepared? If
    # not (MariaDB), an older epoch's writer may prepare while the bump waits and let it
    # pass: a take-over resolves again after its bump.
    _prepared_keep_share_locks = True

    def __init__(self, setup: JdbcSinkSetup) -> None:
        self.cfg, self.sql = setup.cfg, setup.sql
        self._conn: Any = None

    @property
    def identity(self) -> str:
        return self.cfg.sink_id

    def take_over(self, adopt: Batch[JdbcCommittable] | None = None) -> Claim[int]:
        """Step 1: claim the sink (new epoch) and resolve what earlier runs left in doubt.

        Serialised with every decision by the sink's advisory lock (exclusive here,
        shared in ``record``): no older run can record a decision between the rollback
        of its transactions and the epoch bump that fences it. The claim's fence is the
        new epoch: transactions of older epochs can no longer prepare or decide. A batch
        to ``adopt`` is recorded under that lock at the current epoch, before the
        resolution, which then commits its winners.
        """
        with self._claiming() as conn:
            self._check_target(conn)
            with self._exclusive(conn):
                if adopt is not None:
                    self._adopt_at_take_over(conn, adopt)
                committed, rolled_back, epoch = self._resolve_and_bump(conn, None)
            if committed or rolled_back:
                log.warning("sink %s: recovered %d decided transaction(s), rolled back %d",
                            self.cfg.sink_id, len(committed), len(rolled_back))
        return Claim(epoch, committed=len(committed), rolled_back=len(rolled_back))

    @contextmanager
    def _claiming(self) -> Iterator[Any]:
        """The take-over's connection; a database error inside is the take-over's failure."""
        try:
            with kept_db(self.cfg) as conn:
                yield conn
        except psycopg2.Error as e:
            raise self._claim_failed(str(e).strip()) from None

    def _claim_failed(self, why: str) -> ConnectorError:
        return ConnectorError(f"recovering sink {self.cfg.sink_id!r} at {self.cfg.safe_url} failed: {why}")

    def _adopt_at_take_over(self, conn: Any, batch: Batch[JdbcCommittable]) -> None:
        self._conn = conn
        try:
            if self.recorded(batch) is None:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT epoch FROM {self.sql.sinks_table} WHERE sink_id = %s",
                                (self.cfg.sink_id,))
                    row = cur.fetchone()
                self.adopt(Batch(batch.batch_id, batch.committables, Claim(row[0] if row else 0)))
        finally:
            self._conn = None

    def _check_target(self, conn: Any) -> None:
        """Refuse a sink id that belongs to another table, or whose newest decision a newer
        release wrote (``spark_ext.formats``), before touching its transactions."""
        with conn.cursor() as cur:
            cur.execute(f"SELECT d.winners FROM {self.sql.batches_table} d WHERE d.sink_id = %s AND "
                        "d.partition_id = -1 ORDER BY d.at DESC LIMIT 1", (self.cfg.sink_id,))
            newest = cur.fetchone()
            if newest is not None:
                where = f"{self.sql.batches_table} (sink {self.cfg.sink_id!r}'s newest decision)"
                read_winners(newest[0], where)
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

        The bump waits for the share locks of open (and, on PostgreSQL, prepared) writers;
        a stale writer that prepared after the rollback holds it forever, so each round
        rolls back again and tries the bump for at most a second, until ``lockTimeoutMs``.
        """
        cfg = self.cfg
        committed: list[str] = []
        rolled_back: list[str] = []

        def resolve() -> None:
            if batch_id is None:
                c, r = self._resolve_in_doubt(conn)
                committed.extend(c)
                rolled_back.extend(r)
            else:
                rolled_back.extend(self._roll_back_batch(conn, batch_id))

        def round_() -> int:
            self._end_stale_sessions(conn)
            resolve()
            return self._bump(conn)

        epoch = retry(round_, what=f"claiming sink {cfg.sink_id!r}",
                      retry_on=self._lock_wait, timeout_s=cfg.lock_timeout_ms / 1000,
                      backoff=Backoff(initial_s=0.0, max_s=0.0),
                      give_up=lambda e: RetriableCommitError(
                          f"sink {cfg.sink_id!r}: writers of another run still hold it after "
                          f"{cfg.lock_timeout_ms} ms (lockTimeoutMs); their transactions are resolved "
                          "at the next start"))
        if batch_id is not None or not self._prepared_keep_share_locks:
            resolve()  # what prepared while the bump waited
        return committed, rolled_back, epoch

    def _resolve_in_doubt(self, conn: Any) -> tuple[list[str], list[str]]:
        """Commit the sink's prepared winners of decided batches, roll back everything else."""
        return resolve_in_doubt(conn, self.sql.batches_table, self.cfg.sink_id)

    def _bump(self, conn: Any) -> int:
        """The sink's next epoch, waiting at most a second for the writers' share locks
        (``_lock_wait`` when it waited that second)."""
        with conn.cursor() as cur:
            cur.execute("SET lock_timeout = '1s'")
            cur.execute(
                f"INSERT INTO {self.sql.sinks_table} AS s (sink_id, target, epoch) VALUES (%s, %s, 1) "
                "ON CONFLICT (sink_id) DO UPDATE SET epoch = s.epoch + 1, updated_at = now() "
                "RETURNING epoch", (self.cfg.sink_id, self.cfg.qualified))
            return int(cur.fetchone()[0])

    def _end_stale_sessions(self, conn: Any) -> None:
        """End the task sessions of this sink's epochs up to the current one, which the
        claim being made fences. A task whose executor froze or lost its host keeps its
        session (and its share lock on the sink's row) open for hours or for ever; Spark
        has retried it elsewhere meanwhile, so nothing of it can still be wanted."""
        with conn.cursor() as cur:
            cur.execute(f"SELECT epoch FROM {self.sql.sinks_table} WHERE sink_id = %s", (self.cfg.sink_id,))
            row = cur.fetchone()
            if row is None:
                return
            stale = [(pid, host) for pid, host, epoch in sink_sessions(conn, self.cfg.sink_id)
                     if epoch is not None and epoch <= row[0]]
            for pid, host in stale:
                try:
                    cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
                except psycopg2.errors.InsufficientPrivilege:
                    log.warning("sink %s: cannot end the stale task session %s from %s (not allowed to "
                                "signal it); the claim waits for it up to lockTimeoutMs", self.cfg.sink_id,
                                pid, host)
                    return
        if stale:
            log.warning("sink %s: ended %d task session(s) of older runs or attempts (pids %s): their "
                        "executors froze or were lost", self.cfg.sink_id, len(stale),
                        ", ".join(str(p) for p, _ in stale))

    # --- the primitives of steps 4 and 5 (spark_ext.commit.TwoPhaseCommitter orders them) ---

    def recorded(self, batch: Batch[JdbcCommittable]) -> JdbcDecision | None:
        with self.conn.cursor() as cur:
            cur.execute(_DECISION.format(self.sql.batches_table),
                        (self.cfg.sink_id, batch.query_id, batch.batch_id))
            row = cur.fetchone()
        return None if row is None else self._decision(batch, *row)

    @staticmethod
    def _decision(batch: Batch[JdbcCommittable], winners: str | None, rows: int | None) -> JdbcDecision:
        return JdbcDecision(str(batch.query_id), batch.batch_id, *read_winners(winners),
                            None if rows is None else int(rows))

    def rows_of(self, decision: JdbcDecision) -> int | None:
        return decision.rows

    def run_of(self, decision: JdbcDecision) -> str:
        return decision.run_id

    def check(self, batch: Batch[JdbcCommittable]) -> None:
        """Step 4a. ``record`` checks the epoch again, atomically with the decision."""
        self._check_epoch(batch)
        self._check_prepared(batch)

    def predecessors(self, batch: Batch[JdbcCommittable]) -> list[Predecessor]:
        """Every other sink id with a decision of this query in the bookkeeping table, with
        the transactions it left prepared (a decision not carried out leaves its winners so)."""
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT sink_id, max(batch_id) FROM {self.sql.batches_table} WHERE query_id = %s "
                        "AND sink_id <> %s AND partition_id = -1 GROUP BY sink_id ORDER BY sink_id",
                        (batch.query_id, self.cfg.sink_id))
            others = cur.fetchall()
        return [Predecessor(str(other), int(last), True, len(self._prepared_gids(self.conn, other)))
                for other, last in others if not self.siblings(str(other))]

    def _check_prepared(self, batch: Batch[JdbcCommittable]) -> dict[str, str]:
        """Every winner still prepared, or stood in for: {gone winner: its stand-in}.

        After a fetch failure Spark runs the stage again while the old attempt's task (a
        zombie) may still run the same partition, and a speculative copy runs beside the
        original. The later attempt rolls back what the earlier one prepared (it would hold
        its locks) and prepares the same partition's rows, yet Spark may take the earlier
        one's result: then the later attempt's transaction takes its place."""
        present = set(self._prepared_gids(self.conn, self.cfg.sink_id))
        instead: dict[str, str] = {}
        gone: list[str] = []
        for c in batch.prepared:
            gid = str(c.gid)
            if gid not in present:
                other = stand_in(gid, present)
                if other is None:
                    gone.append(gid)
                else:
                    instead[gid] = other
        if gone:  # else only a newer run's take-over (or an operator) rolls back what a batch prepared
            self.conn.rollback()  # record's transaction, if open: nothing is decided
            self.conn.autocommit = True
            self.roll_back_own(batch)
            raise FencedError(
                f"batch {batch.batch_id}: prepared transaction(s) {', '.join(sorted(gone))} were rolled "
                f"back before the decision, by a newer run taking sink {self.cfg.sink_id!r} over, by "
                "'spark-ext doctor jdbc resolve', or by a later attempt of the same task that did not "
                "prepare (a stage run again after a fetch failure, or a speculative copy: set "
                "spark.speculation=false); this run stops without committing anything of the batch"
            )
        return instead

    def _check_epoch(self, batch: Batch[JdbcCommittable]) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT epoch FROM {self.sql.sinks_table} WHERE sink_id = %s", (self.cfg.sink_id,))
            row = cur.fetchone()
        if row is None or batch.claim is None or row[0] != batch.claim.fence:
            self.roll_back_own(batch)
            raise self._fenced(batch, row and row[0])

    def _fenced(self, batch: Batch[JdbcCommittable], now: int | None) -> FencedError:
        ours = batch.claim.fence if batch.claim is not None else None
        return FencedError(
            f"sink {self.cfg.sink_id!r} was taken over by a newer run (epoch {now}); this run (epoch "
            f"{ours}) cannot commit batch {batch.batch_id}; its transactions were rolled back"
        )

    def roll_back_own(self, batch: Batch[JdbcCommittable]) -> None:
        for c in batch.prepared:  # ours can never commit now
            self._finish_xact(self.conn, str(c.gid), commit=False)

    def record(self, batch: Batch[JdbcCommittable]) -> JdbcDecision:
        """Step 4b: the decision row, under the sink's lock (``_deciding``; a take-over
        holds it exclusively) and the epoch row's share lock; unique per batch, so two
        live runs cannot decide one batch twice."""
        cfg, sql, conn = self.cfg, self.sql, self.conn
        epoch = batch.claim.fence if batch.claim is not None else None
        with self._deciding(conn) as cur:
            row = self._epoch_for_share(cur)
            if row is None or row[0] != epoch:
                conn.rollback()
                conn.autocommit = True
                self.roll_back_own(batch)
                raise self._fenced(batch, row and row[0])
            # Again under the lock that the doctor and take-overs hold exclusively while
            # they roll back: a decision never names a transaction that is gone.
            instead = self._check_prepared(batch)
            mine = frozenset(instead.get(str(c.gid), str(c.gid)) for c in batch.prepared)
            for gid, other in instead.items():
                log.warning("sink %s batch %s: %s, of the task attempt Spark took, was rolled back by a "
                            "later attempt of the same task; its %s commits in its place",
                            cfg.sink_id, batch.batch_id, gid, other)
            if self._insert_decision(cur, batch, epoch, mine):
                decided = JdbcDecision(str(batch.query_id), batch.batch_id, mine, batch.run_id, batch.rows)
            else:  # decided by an earlier run meanwhile
                cur.execute(_DECISION.format(sql.batches_table),
                            (cfg.sink_id, batch.query_id, batch.batch_id))
                decided = self._decision(batch, *cur.fetchone())
        return decided

    @contextmanager
    def _deciding(self, conn: Any) -> Iterator[Any]:
        """The decision's transaction, committed when the block ends; a cursor in it. The
        sink's advisory lock is held shared until the commit."""
        conn.autocommit = False
        try:
            with conn.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = %s", (f"{self.cfg.lock_timeout_ms}ms",))
                cur.execute("SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s))",
                            (LOCK_SPACE, self.cfg.sink_id))
                yield cur
            conn.commit()
        finally:
            conn.autocommit = True

    def _epoch_for_share(self, cur: Any) -> Any:
        """The sink's epoch row, share-locked until the decision commits (None: no row)."""
        cur.execute(f"SELECT epoch FROM {self.sql.sinks_table} WHERE sink_id = %s FOR SHARE",
                    (self.cfg.sink_id,))
        return cur.fetchone()

    def _insert_decision(self, cur: Any, batch: Batch[JdbcCommittable], epoch: int | None,
                         winners: frozenset[str]) -> bool:
        """The decision row; False when the batch has one already."""
        cur.execute(
            f"INSERT INTO {self.sql.batches_table} (sink_id, query_id, batch_id, partition_id, attempt, "
            "epoch, rows, winners) VALUES (%s, %s, %s, -1, -1, %s, %s, %s) ON CONFLICT DO NOTHING "
            "RETURNING 1",
            (self.cfg.sink_id, batch.query_id, batch.batch_id, epoch, batch.rows,
             winners_text(winners, batch.run_id)))
        return cur.fetchone() is not None

    def winners(self, decision: JdbcDecision) -> Sequence[str]:
        return sorted(decision.winners)

    def commit_winner(self, decision: JdbcDecision, winner: str) -> bool:
        """``COMMIT PREPARED``; an id already gone committed if its marker row is visible."""
        return (self._finish_xact(self.conn, winner, commit=True)
                or self._landed(self.conn, winner, decision.query_id))

    def lost(self, decision: JdbcDecision, lost: Sequence[str]) -> CommitError:
        return FatalCommitError(
            f"prepared transaction(s) {', '.join(lost)} of batch {decision.batch_id} were decided but are "
            "gone and their rows are not in the table: rolled back by an operator or another run; the "
            f"batch is incomplete in {self.cfg.qualified}"
        )

    def finish(self, batch: Batch[JdbcCommittable], decision: JdbcDecision) -> None:
        """Prune the query's decision and marker rows older than ``KEEP_BATCHES`` batches."""
        with self.conn.cursor() as cur:
            cur.execute(f"DELETE FROM {self.sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                        "AND batch_id < %s", (self.cfg.sink_id, decision.query_id,
                                              decision.batch_id - KEEP_BATCHES))

    def roll_back_others(self, batch: Batch[JdbcCommittable], decision: JdbcDecision) -> None:
        for gid in self._prepared_gids(self.conn, self.cfg.sink_id):
            if parse_gid(gid)[2] <= batch.batch_id and gid not in decision.winners:
                self._finish_xact(self.conn, gid, commit=False)

    def _landed(self, conn: Any, gid: str, query_id: str) -> bool:
        """Did ``gid`` commit? Its marker row is scoped by query and epoch: after a checkpoint
        reset at the same path an older query's marker has the same batch, partition and attempt."""
        _, epoch, batch, part, attempt = parse_gid(gid)
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {self.sql.batches_table} WHERE sink_id = %s AND query_id = %s AND "
                        "epoch = %s AND batch_id = %s AND partition_id = %s AND attempt = %s",
                        (self.cfg.sink_id, query_id, epoch, batch, part, attempt))
            return cur.fetchone() is not None

    def roll_back(self, batch: Batch[JdbcCommittable]) -> None:
        """Step 5: roll back the batch, including tasks still running when Spark gave up.

        Spark calls this as soon as one task failed for good, while others may still be
        writing. Bumping the epoch fences them (``_resolve_and_bump``), so once the bump
        lands no writer of this batch can prepare any more.
        """
        with self._exclusive(self.conn):
            self._resolve_and_bump(self.conn, batch.batch_id)

    def _roll_back_batch(self, conn: Any, batch_id: int) -> list[str]:
        """Roll back the batch's prepared transactions, except decided winners (recovery's)."""
        won = self._decisions(conn, self.sql.batches_table, self.cfg.sink_id, {batch_id}).get(batch_id, set())
        return [gid for gid in self._prepared_gids(conn, self.cfg.sink_id) if parse_gid(gid)[2] == batch_id
                and gid not in won and self._finish_xact(conn, gid, commit=False)]
