"""Operator tool: list and resolve the in-doubt transactions spark-ext sinks left behind
(PostgreSQL here; a MariaDB / MySQL URL is served by ``mariadb.doctor``).

A crashed query resolves its own in-doubt transactions when it restarts. When it will
not restart (the query was retired, its checkpoint lost), use this::

    spark-ext doctor jdbc list    --url postgresql+psycopg2://user@host/db [--schema public]
    spark-ext doctor jdbc resolve --url ... --sink SINK_ID [--schema public]
    spark-ext status jdbc         --url ... [--sink SINK_ID] [--schema public] [--json]

``list`` shows every prepared transaction named ``sx:...`` with its sink, epoch, batch,
partition, attempt, age, and whether its batch was decided (the coordinator recorded
"commit"): ``resolve`` then does what recovery would, committing the decided batch's
winners and rolling back everything else of that sink, then fences the sink (a new
epoch), as a take-over does. ``resolve`` refuses while the sink's query is connected (its
sessions are named ``spark-ext <sink>``): a running query resolves its own transactions.
It holds the sink's lock while it works, so no decision can be recorded meanwhile.
``status`` shows, per sink of the schema, its table, epoch, last decided batch and
whether it finished, and how many transactions are in doubt. The password may also
come from ``PGPASSWORD``; it is never printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import psycopg2
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.engine import URL

from spark_ext.connectors.jdbc.config import parse_url
from spark_ext.connectors.jdbc.tables import BATCHES_TABLE, SINKS_TABLE, server_error
from spark_ext.connectors.jdbc.transactions import (
    LOCK_SPACE,
    connect,
    decisions,
    listed_winners,
    parse_gid,
    prepared_gids,
    resolve_in_doubt,
    sink_sessions,
)
from spark_ext.decisions import RoutingDecision
from spark_ext.doctor import Command, Doctor, decision_rows, decision_state
from spark_ext.errors import SparkExtError
from spark_ext.status import SinkStatus

DEFAULT_SCHEMA = "public"
_SUMMARY = (__doc__ or "").split("\n")[0]


def _table(schema: str, name: str) -> str:
    """A bookkeeping table's quoted, schema-qualified name."""
    prep = pg.dialect().identifier_preparer
    return f"{prep.quote_schema(schema)}.{prep.quote(name)}"


def _mysql(url: str, schema: str) -> tuple[URL, str | None] | None:
    """A MariaDB / MySQL URL's parsed form and schema (default: the URL's database), else None."""
    parsed = parse_url(url, None, os.environ.get("MYSQL_PWD"))
    if parsed.get_backend_name() != "mysql":
        return None
    return parsed, None if schema == DEFAULT_SCHEMA else schema


def _connect(url: str) -> Any:
    """The tools' PostgreSQL connection; a refusal says what the sink would say (the fix)."""
    parsed = parse_url(url, None, os.environ.get("PGPASSWORD"))
    try:
        return connect(parsed)
    except psycopg2.OperationalError as e:
        raise server_error(parsed.render_as_string(hide_password=True), e) from None


def list_in_doubt(url: str, schema: str, sink: str | None) -> list[dict[str, object]]:
    """Every in-doubt transaction of spark-ext sinks (of ``sink`` only, if given), oldest first."""
    if (my := _mysql(url, schema)) is not None:
        from spark_ext.connectors.jdbc.mariadb import doctor as mariadb_doctor  # PyMySQL: the mysql extra

        return mariadb_doctor.list_in_doubt(*my, sink)
    conn = _connect(url)
    conn.autocommit = True
    try:
        return _in_doubt(conn, schema, sink)
    finally:
        conn.close()


def _in_doubt(conn: Any, schema: str, sink: str | None) -> list[dict[str, object]]:
    with conn.cursor() as cur:
        cur.execute("SELECT gid, prepared, owner FROM pg_prepared_xacts "
                    "WHERE database = current_database() AND gid LIKE 'sx:%' ORDER BY prepared")
        rows = cur.fetchall()
    out: list[dict[str, object]] = []
    for gid, when, owner in rows:
        s, epoch, batch, part, attempt = parse_gid(gid)
        if sink and s != sink:
            continue
        state = decision_state(gid, batch, decisions(conn, _table(schema, BATCHES_TABLE), s, {batch}))
        out.append({"gid": gid, "sink": s, "epoch": epoch, "batch": batch, "partition": part,
                    "attempt": attempt, "prepared": str(when), "owner": owner, "state": state})
    return out




def sink_status(url: str, schema: str, sink: str | None) -> list[SinkStatus]:
    """Per sink of ``schema`` (or ``sink`` only): its table, epoch, last decision and
    whether every winner of it committed, and its in-doubt transactions (``list``'s)."""
    if (my := _mysql(url, schema)) is not None:
        from spark_ext.connectors.jdbc.mariadb import doctor as mariadb_doctor  # PyMySQL: the mysql extra

        return mariadb_doctor.sink_status(*my, sink)
    conn = _connect(url)
    conn.autocommit = True
    try:
        doubt = [(str(r["sink"]), str(r["gid"])) for r in _in_doubt(conn, schema, sink)]
        sinks: dict[str, tuple[str, int]] = {}
        last: dict[str, tuple[str, int, set[str]]] = {}
        dead: dict[str, int | None] = {}
        carried: set[tuple[str, str, int]] = set()
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
                        (_table(schema, SINKS_TABLE), _table(schema, BATCHES_TABLE)))
            has_sinks, has_batches = cur.fetchone()
            one, params = ("AND sink_id = %s", (sink,)) if sink else ("", ())
            if has_sinks:
                cur.execute(f"SELECT sink_id, target, epoch FROM {_table(schema, SINKS_TABLE)} "
                            f"WHERE true {one}", params)
                sinks = {s: (t, int(e)) for s, t, e in cur.fetchall()}
            if has_batches:
                # The newest decision row per sink: by time, as batch ids restart at 0 for a
                # query started afresh from a new checkpoint under the same sink id.
                cur.execute(f"SELECT DISTINCT ON (sink_id) sink_id, query_id, batch_id, winners FROM "
                            f"{_table(schema, BATCHES_TABLE)} WHERE partition_id = -1 {one} "
                            "ORDER BY sink_id, at DESC, batch_id DESC", params)
                rows = cur.fetchall()
                last = {s: (q, int(b), listed_winners(w)) for s, q, b, w in rows}
                dead = {s: RoutingDecision.dead_letters(w) for s, _, _, w in rows if w and w.startswith("{")}
                # A routing sink's log (target 'routing') marks a decision carried out in
                # every sub-sink with a row of its own; it has no transactions of its own.
                cur.execute(f"SELECT sink_id, query_id, batch_id FROM {_table(schema, BATCHES_TABLE)} "
                            f"WHERE partition_id = -2 {one}", params)
                carried = {(s, q, int(b)) for s, q, b in cur.fetchall()}
    finally:
        conn.close()
    routed = {s: (s, q, b) in carried for s, (q, b, _) in last.items()
              if s in sinks and sinks[s][0] == "routing"}
    return decision_rows(sinks, last, doubt, finished=routed, dead_letters=dead)


def resolve(url: str, schema: str, sink: str) -> tuple[list[str], list[str]]:
    if (my := _mysql(url, schema)) is not None:
        from spark_ext.connectors.jdbc.mariadb import doctor as mariadb_doctor  # PyMySQL: the mysql extra

        return mariadb_doctor.resolve(*my, sink)
    conn = _connect(url)
    conn.autocommit = True
    try:
        live = [(pid, host) for pid, host, _ in sink_sessions(conn, sink)]
        with conn.cursor() as cur:
            if live:
                raise SparkExtError(
                    f"sink {sink} has {len(live)} connected session(s) ("
                    + ", ".join(f"pid {p} from {h}" for p, h in live) + "): its query is running; stop it "
                    "first (a running query resolves its own transactions). A session left by a frozen "
                    "or lost executor can be ended with SELECT pg_terminate_backend(pid)")
            # The sink's lock, exclusively as a take-over holds it: no decision is recorded
            # while transactions are resolved, so none can name one rolled back here.
            cur.execute("SET lock_timeout = '30s'")
            cur.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (LOCK_SPACE, sink))
        try:
            if not prepared_gids(conn, sink):
                return [], []
            done = resolve_in_doubt(conn, _table(schema, BATCHES_TABLE), sink)
            with conn.cursor() as cur:  # fence whatever of the old run still writes
                cur.execute("SELECT to_regclass(%s) IS NOT NULL", (_table(schema, SINKS_TABLE),))
                if cur.fetchone()[0]:
                    cur.execute(f"UPDATE {_table(schema, SINKS_TABLE)} SET epoch = epoch + 1, "
                                "updated_at = now() WHERE sink_id = %s", (sink,))
            return done
        finally:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (LOCK_SPACE, sink))
    finally:
        conn.close()


def _connection_arguments(p: argparse.ArgumentParser, sink_required: bool = False) -> None:
    p.add_argument("--url", required=True,
                   help="SQLAlchemy or jdbc:postgresql:// / jdbc:mariadb:// URL (the password: $PGPASSWORD, "
                   "$MYSQL_PWD for MariaDB / MySQL)")
    p.add_argument("--schema", default=DEFAULT_SCHEMA,
                   help="schema of the sink's target table (MariaDB / MySQL: the URL's database)")
    p.add_argument("--sink", required=sink_required, help="sink id (sinkId, or ck-... )")


class JdbcDoctor(Doctor):
    """``list``: every in-doubt transaction (of ``--sink``); ``resolve``: one sink's;
    ``status``: every sink of the schema (or ``--sink``), one row each."""

    connector = "jdbc"
    summary = _SUMMARY
    status_summary = "The PostgreSQL, MariaDB and MySQL sinks' last decisions and in-doubt transactions."

    def arguments(self, p: argparse.ArgumentParser, command: Command) -> None:
        _connection_arguments(p, sink_required=command == "resolve")

    def show(self, args: argparse.Namespace) -> None:
        rows = list_in_doubt(args.url, args.schema, args.sink)
        for r in rows:
            print("  ".join(f"{k}={v}" for k, v in r.items()))
        print(f"{len(rows)} in-doubt transaction(s)")

    def resolve(self, args: argparse.Namespace) -> None:
        committed, rolled_back = resolve(args.url, args.schema, args.sink)  # the module's function
        for g in committed:
            print(f"committed   {g}")
        for g in rolled_back:
            print(f"rolled back {g}")
        print(f"sink {args.sink}: {len(committed)} committed, {len(rolled_back)} rolled back")

    def rows(self, args: argparse.Namespace) -> list[SinkStatus]:
        return sink_status(args.url, args.schema, args.sink)


DOCTOR = JdbcDoctor()
main, status = DOCTOR.main, DOCTOR.status

if __name__ == "__main__":
    sys.exit(main())
