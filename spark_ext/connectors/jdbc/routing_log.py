"""A routing sink's decisions, kept in PostgreSQL beside a jdbc sub-sink's own bookkeeping.

The log uses that sub-sink's two bookkeeping tables under its own id (the routing sink's):
its epoch is a row of the sinks table, its decisions rows of the commits table with
``partition_id = -1`` (the decision, its sub-sinks' winners as JSON) and ``-2`` (carried
out in every sub-sink). A decision is inserted in a transaction that holds the epoch row
``FOR SHARE`` and checks it, and a take-over bumps the epoch with an ``UPDATE``, which waits
for such a transaction to end: after a take-over no older run can record a decision, and
one recorded before it is seen by the take-over's read.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg2
import psycopg2.extensions

from spark_ext.connectors.jdbc.tables import JdbcSinkSetup
from spark_ext.connectors.jdbc.transactions import KeptDb
from spark_ext.decisions import DecisionLog, RoutingDecision
from spark_ext.errors import ConnectorError, FencedError

KEEP_BATCHES = 100  # decisions kept per query (older ones are pruned)
_DECISION, _FINISHED = -1, -2


class PgDecisionLog(KeptDb, DecisionLog):
    """The decisions of routing sink ``log_id``, in the database of ``decider``. Driver only."""

    def __init__(self, decider: JdbcSinkSetup, log_id: str) -> None:
        self.cfg = dataclasses.replace(decider.cfg, sink_id=log_id)
        self.sql = decider.sql
        self.log_id = log_id
        self._conn: Any = None

    @property
    def kept_label(self) -> str:
        return f"routing sink {self.log_id!r}"

    def take_over(self) -> tuple[int, RoutingDecision | None, bool]:
        try:
            with self.connected():
                self._last()  # a newer release's decision is refused before anything is fenced
                with self.conn.cursor() as cur:
                    cur.execute("SET lock_timeout = %s", (f"{self.cfg.lock_timeout_ms}ms",))
                    cur.execute(
                        f"INSERT INTO {self.sql.sinks_table} AS s (sink_id, target, epoch) "
                        "VALUES (%s, 'routing', 1) "
                        "ON CONFLICT (sink_id) DO UPDATE SET epoch = s.epoch + 1, updated_at = now() "
                        "RETURNING epoch, target", (self.log_id,))
                    epoch, target = cur.fetchone()
                    cur.execute("RESET lock_timeout")
                if target != "routing":
                    raise ConnectorError(
                        f"id {self.log_id!r} already belongs to a sink writing {target}; the routing sink "
                        "needs its own sinkId or checkpointLocation")
                last = self._last()
                return int(epoch), last, last is not None and self.finished(last)
        except psycopg2.Error as e:
            raise ConnectorError(f"taking over routing sink {self.log_id!r} at {self.cfg.safe_url} failed: "
                                 f"{str(e).strip()}") from None

    def _last(self) -> RoutingDecision | None:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT winners FROM {self.sql.batches_table} WHERE sink_id = %s "
                        "AND partition_id = %s ORDER BY at DESC, batch_id DESC LIMIT 1",
                        (self.log_id, _DECISION))
            row = cur.fetchone()
        return None if row is None else RoutingDecision.from_json(row[0])

    def recorded(self, query_id: str, batch_id: int) -> RoutingDecision | None:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT winners FROM {self.sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                        "AND batch_id = %s AND partition_id = %s",
                        (self.log_id, query_id, batch_id, _DECISION))
            row = cur.fetchone()
        return None if row is None else RoutingDecision.from_json(row[0])

    def epoch(self) -> int | None:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT epoch FROM {self.sql.sinks_table} WHERE sink_id = %s", (self.log_id,))
            row = cur.fetchone()
        return None if row is None else int(row[0])

    def record(self, decision: RoutingDecision, epoch: int) -> RoutingDecision:
        conn = self.conn
        conn.autocommit = False
        try:
            with conn.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = %s", (f"{self.cfg.lock_timeout_ms}ms",))
                cur.execute(f"SELECT epoch FROM {self.sql.sinks_table} WHERE sink_id = %s FOR SHARE",
                            (self.log_id,))
                row = cur.fetchone()
                if row is None or row[0] != epoch:
                    raise FencedError(
                        f"routing sink {self.log_id!r} was taken over by a newer run "
                        f"(epoch {row and row[0]}); "
                        f"this run (epoch {epoch}) decides nothing of batch {decision.batch_id}")
                rows = sum(c.rows for _, cs in decision.parts for c in cs)
                cur.execute(
                    f"INSERT INTO {self.sql.batches_table} (sink_id, query_id, batch_id, partition_id, "
                    "attempt, epoch, rows, winners) VALUES (%s, %s, %s, %s, -1, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING "
                    "RETURNING 1", (self.log_id, decision.query_id, decision.batch_id, _DECISION, epoch, rows,
                                    decision.to_json()))
                won = cur.fetchone() is not None
            conn.commit()
        finally:
            if conn.status != psycopg2.extensions.STATUS_READY:
                conn.rollback()
            conn.autocommit = True
        if won:
            return decision
        earlier = self.recorded(decision.query_id, decision.batch_id)
        assert earlier is not None
        return earlier

    def predecessors(self, query_id: str) -> list[tuple[str, int, bool]]:
        batches, sinks = self.sql.batches_table, self.sql.sinks_table
        with self.conn.cursor() as cur:
            cur.execute(
                f"SELECT d.sink_id, d.batch_id, EXISTS (SELECT 1 FROM {batches} f "
                "WHERE f.sink_id = d.sink_id AND f.query_id = d.query_id AND f.batch_id = d.batch_id "
                "AND f.partition_id = %s) "
                f"FROM {batches} d JOIN {sinks} s ON s.sink_id = d.sink_id AND s.target = 'routing' "
                "WHERE d.query_id = %s AND d.sink_id <> %s AND d.partition_id = %s "
                f"AND d.batch_id = (SELECT max(batch_id) FROM {batches} m WHERE m.sink_id = d.sink_id "
                "AND m.query_id = d.query_id AND m.partition_id = %s) ORDER BY d.sink_id",
                (_FINISHED, query_id, self.log_id, _DECISION, _DECISION))
            return [(str(s), int(b), bool(f)) for s, b, f in cur.fetchall()]

    def finished(self, decision: RoutingDecision) -> bool:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {self.sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                        "AND batch_id = %s AND partition_id = %s",
                        (self.log_id, decision.query_id, decision.batch_id, _FINISHED))
            return cur.fetchone() is not None

    def mark_finished(self, decision: RoutingDecision) -> None:
        with self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.sql.batches_table} (sink_id, query_id, batch_id, partition_id, "
                "attempt, epoch) VALUES (%s, %s, %s, %s, -1, 0) ON CONFLICT DO NOTHING",
                (self.log_id, decision.query_id, decision.batch_id, _FINISHED))
            cur.execute(f"DELETE FROM {self.sql.batches_table} WHERE sink_id = %s AND query_id = %s "
                        "AND batch_id < %s",
                        (self.log_id, decision.query_id, decision.batch_id - KEEP_BATCHES))
