"""Operator tool: list and resolve the in-doubt transactions spark-ext sinks left behind.

A crashed query resolves its own in-doubt transactions when it restarts. When it will
not restart (the query was retired, its checkpoint lost), use this::

    spark-ext doctor jdbc list    --url postgresql+psycopg2://user@host/db [--schema public]
    spark-ext doctor jdbc resolve --url ... --sink SINK_ID [--schema public]

``list`` shows every prepared transaction named ``sx:...`` with its sink, epoch, batch,
partition, attempt, age, and whether its batch was decided (the coordinator recorded
"commit"): ``resolve`` then does what recovery would, committing the decided batch's
winners and rolling back everything else of that sink. The password may also come
from ``PGPASSWORD``; it is never printed.
"""

from __future__ import annotations

import argparse
import os
import sys

from sqlalchemy.dialects import postgresql as pg

from spark_ext.connectors.jdbc.config import parse_url
from spark_ext.connectors.jdbc.tables import BATCHES_TABLE
from spark_ext.connectors.jdbc.transactions import (
    connect,
    decisions,
    parse_gid,
    prepared_gids,
    resolve_in_doubt,
)
from spark_ext.errors import SparkExtError


def _batches_table(schema: str) -> str:
    prep = pg.dialect().identifier_preparer
    return f"{prep.quote_schema(schema)}.{prep.quote(BATCHES_TABLE)}"


def list_in_doubt(url: str, schema: str, sink: str | None) -> list[dict[str, object]]:
    conn = connect(parse_url(url, None, os.environ.get("PGPASSWORD")))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT gid, prepared, owner FROM pg_prepared_xacts "
                        "WHERE database = current_database() AND gid LIKE 'sx:%' ORDER BY prepared")
            rows = cur.fetchall()
        out: list[dict[str, object]] = []
        for gid, when, owner in rows:
            s, epoch, batch, part, attempt = parse_gid(gid)
            if sink and s != sink:
                continue
            decided = decisions(conn, _batches_table(schema), s, {batch})
            state = ("undecided" if batch not in decided
                     else "decided: commit" if gid in decided[batch] else "decided: not a winner")
            out.append({"gid": gid, "sink": s, "epoch": epoch, "batch": batch, "partition": part,
                        "attempt": attempt, "prepared": str(when), "owner": owner, "state": state})
        return out
    finally:
        conn.close()


def resolve(url: str, schema: str, sink: str) -> tuple[list[str], list[str]]:
    conn = connect(parse_url(url, None, os.environ.get("PGPASSWORD")))
    conn.autocommit = True
    try:
        if not prepared_gids(conn, sink):
            return [], []
        return resolve_in_doubt(conn, _batches_table(schema), sink)
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    """``spark-ext doctor jdbc <list|resolve> ...`` (``argv`` starts after ``jdbc``)."""
    ap = argparse.ArgumentParser(prog="spark-ext doctor jdbc", description=__doc__.split("\n")[0])
    jsub = ap.add_subparsers(dest="action", required=True)
    for name in ("list", "resolve"):
        p = jsub.add_parser(name)
        p.add_argument("--url", required=True, help="SQLAlchemy or jdbc:postgresql:// URL")
        p.add_argument("--schema", default="public", help="schema of the sink's target table")
        p.add_argument("--sink", required=name == "resolve", help="sink id (sinkId, or ck-... )")
    args = ap.parse_args(argv)
    try:
        if args.action == "list":
            rows = list_in_doubt(args.url, args.schema, args.sink)
            for r in rows:
                print("  ".join(f"{k}={v}" for k, v in r.items()))
            print(f"{len(rows)} in-doubt transaction(s)")
        else:
            committed, rolled_back = resolve(args.url, args.schema, args.sink)
            for g in committed:
                print(f"committed   {g}")
            for g in rolled_back:
                print(f"rolled back {g}")
            print(f"sink {args.sink}: {len(committed)} committed, {len(rolled_back)} rolled back")
    except (SparkExtError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a CLI: report, never print a traceback with the URL
        print(f"error: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
