"""``spark-ext doctor jdbc`` and ``spark-ext status jdbc`` for MariaDB / MySQL: what
``doctor`` does for PostgreSQL, with XA. In-doubt transactions come from ``XA RECOVER``
(server-wide: every database's, filtered by the sink's XA format and id); the bookkeeping
tables are in the URL's database unless ``--schema`` names another. ``resolve`` holds
the sink's named lock (as a take-over does) and fences the sink with a new epoch.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import URL

from spark_ext.connectors.jdbc.mariadb.transactions import (
    MyConn,
    connect,
    decisions,
    format_id,
    lock_name,
    prepared_gids,
    resolve_in_doubt,
)
from spark_ext.connectors.jdbc.tables import BATCHES_TABLE, SINKS_TABLE
from spark_ext.connectors.jdbc.transactions import listed_winners, parse_gid
from spark_ext.doctor import decision_rows, decision_state
from spark_ext.errors import SparkExtError
from spark_ext.status import SinkStatus


def _table(schema: str | None, name: str) -> str:
    return f"`{schema}`.`{name}`" if schema else f"`{name}`"


def _sinks_with_xa(conn: MyConn, fmt: int) -> set[str]:
    """The sink ids of every prepared transaction of ours in the database of ``fmt``."""
    return {bytes(d)[:int(g)].decode() for f, g, _, d in conn.execute("XA RECOVER") if int(f) == fmt}


def _format(conn: MyConn, schema: str | None) -> int:
    return format_id(schema or str(conn.execute("SELECT DATABASE()")[0][0] or ""))


def _in_doubt(conn: MyConn, schema: str | None, sink: str | None) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    fmt = _format(conn, schema)
    for s in sorted(_sinks_with_xa(conn, fmt)):
        if sink and s != sink:
            continue
        for gid in prepared_gids(conn, s, fmt):
            _, epoch, batch, part, attempt = parse_gid(gid)
            state = decision_state(gid, batch, _decisions(conn, schema, s, batch))
            out.append({"gid": gid, "sink": s, "epoch": epoch, "batch": batch, "partition": part,
                        "attempt": attempt, "state": state})
    return out


def _decisions(conn: MyConn, schema: str | None, sink: str, batch: int) -> dict[int, set[str]]:
    if not _exists(conn, schema, BATCHES_TABLE):
        return {}
    return decisions(conn, _table(schema, BATCHES_TABLE), sink, {batch})


def _exists(conn: MyConn, schema: str | None, name: str) -> bool:
    return bool(conn.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
                             "COALESCE(%s, DATABASE()) AND TABLE_NAME = %s", (schema, name)))


def list_in_doubt(url: URL, schema: str | None, sink: str | None) -> list[dict[str, object]]:
    conn = connect(url)
    try:
        return _in_doubt(conn, schema, sink)
    finally:
        conn.close()


def sink_status(url: URL, schema: str | None, sink: str | None) -> list[SinkStatus]:
    """As ``doctor.sink_status``: per sink, its table, epoch, last decision and whether
    every winner of it committed, and its in-doubt transactions."""
    conn = connect(url)
    try:
        doubt = [(str(r["sink"]), str(r["gid"])) for r in _in_doubt(conn, schema, sink)]
        one, params = ("AND sink_id = %s", (sink,)) if sink else ("", ())
        sinks: dict[str, tuple[str, int]] = {}
        last: dict[str, tuple[str, int, set[str]]] = {}
        if _exists(conn, schema, SINKS_TABLE):
            sinks = {str(s): (str(t), int(e)) for s, t, e in conn.execute(
                f"SELECT sink_id, target, epoch FROM {_table(schema, SINKS_TABLE)} WHERE true {one}", params)}
        if _exists(conn, schema, BATCHES_TABLE):
            # the newest decision row per sink, by time (batch ids restart with a new checkpoint)
            rows: list[Any] = conn.execute(
                f"SELECT sink_id, query_id, batch_id, winners FROM (SELECT sink_id, query_id, batch_id, "
                "winners, ROW_NUMBER() OVER (PARTITION BY sink_id ORDER BY at DESC, batch_id DESC) AS n FROM "
                f"{_table(schema, BATCHES_TABLE)} WHERE partition_id = -1 {one}) AS d WHERE n = 1", params)
            last = {str(s): (str(q), int(b), listed_winners(w)) for s, q, b, w in rows}
    finally:
        conn.close()
    return decision_rows(sinks, last, doubt)


def resolve(url: URL, schema: str | None, sink: str) -> tuple[list[str], list[str]]:
    conn = connect(url)
    try:
        got = conn.execute("SELECT GET_LOCK(%s, 30)", (lock_name(sink),))
        if not got or got[0][0] != 1:
            raise SparkExtError(f"sink {sink}: its lock is held (its query is deciding or taking over): stop "
                                "the query first; a running query resolves its own transactions")
        try:
            fmt = _format(conn, schema)
            if not prepared_gids(conn, sink, fmt):
                return [], []
            done = resolve_in_doubt(conn, _table(schema, BATCHES_TABLE), sink, fmt)
            if _exists(conn, schema, SINKS_TABLE):  # fence whatever of the old run still writes
                conn.execute(f"UPDATE {_table(schema, SINKS_TABLE)} SET epoch = epoch + 1, "
                             "updated_at = current_timestamp(6) WHERE sink_id = %s", (sink,))
            return done
        finally:
            conn.execute("SELECT RELEASE_LOCK(%s)", (lock_name(sink),))
    finally:
        conn.close()
