"""Record the compatibility corpus: per case, a state this release persisted at its hardest
moment, kept as files under ``tests/corpus/<case>/v<versions>/`` (see README.md).

Usage (from the repository root, with ``make services`` running)::

    .venv/bin/python -m tests.corpus.record [CASE ...]     # every case when none is named

Each case runs a real pipeline (``drive``, its own driver process) over fixed input files
into fixed-named objects on the local services (option ``sinkId`` fixed, so nothing depends
on the checkpoint's path), kills its driver with a failpoint at the case's hardest moment,
and dumps what the services and the checkpoint hold. Recording changes the services' state
for those fixed names only (it resolves the prepared transactions it dumped); the suite's
``tests/test_corpus.py`` restores each recorded directory and finishes the query with
today's code.

A case's directory is named by the format versions (``spark_ext/formats.py``) its records
carry. The script refuses to write into a directory that exists: a recorded version is
never recorded over; a format changed for a release gets a new version, hence a new
directory, and the old one stays to prove the new release still reads it.

``python -m tests.corpus.record --drive CASE SRC CKPT FAILPOINT`` is the driver itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_ext import formats

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SRC_MARK, CKPT_MARK = "@SRC@", "@CKPT@"  # where the recording's paths stood, in checkpoint files
XA_MARK = "@XAFORMAT@"  # the XA format number, which derives from the database's name
MTIME0 = 1_000_000  # input file i has modification time MTIME0 + i (Spark orders files by it)
EXCLUDED_COLUMNS = frozenset({"at", "updated_at"})  # bookkeeping times: their defaults on restore
BOOKKEEPING = ("spark_ext_sinks", "spark_ext_commits", "spark_ext_landed")


# --- the cases ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One recorded pipeline. ``target``: the fixed table or queue it writes; ``point``:
    where its driver is killed; ``formats``: what its records carry."""

    name: str
    kind: str  # postgres, mariadb, jms, windows
    sink_id: str
    target: str
    point: str
    formats: tuple[formats.Format, ...]

    @property
    def version(self) -> str:
        return "v" + "-".join(str(f.current) for f in self.formats)

    def inputs(self) -> list[list[dict[str, Any]]]:
        """The input files, one a batch."""
        if self.kind == "windows":
            return window_inputs()
        return [[{"id": b * 8 + k, "v": f"v{b * 8 + k}"} for k in range(8)] for b in range(3)]


CASES: dict[str, Case] = {c.name: c for c in (
    Case("postgres", "postgres", "corpus-pg", "corpus_pg", "jdbc.after_decision@1", (formats.JDBC_DECISION,)),
    Case("mariadb", "mariadb", "corpus-maria", "corpus_maria", "jdbc.after_decision@1",
         (formats.JDBC_DECISION,)),
    Case("jms", "jms", "corpus-jms", "corpus.jms", "jms.after_decision@1", (formats.QUEUE_LOG,)),
    # Killed after batch 2's decision: windows of batches 1 and 2 decided (1 committed),
    # open windows in the state store, batch 3 (the event that closes every window) pending.
    Case("windows", "windows", "corpus-windows", "corpus_windows", "jdbc.after_decision@2",
         (formats.WINDOW_STATE, formats.JDBC_DECISION)),
    # The routing sink over a table (even ids, its decider) and a queue (odd ids): its
    # decision in PostgreSQL, the table's transactions prepared, the queue's messages staged.
    Case("routing", "routing", "corpus-rt", "corpus_rt|corpus.rt", "routing.after_decision@1",
         (formats.ROUTING_DECISION, formats.JDBC_DECISION, formats.QUEUE_LOG)),
)}


def part(case: Case, kind: str) -> Case:
    """A routing case's sub-sink as a case of its own (its id, its target)."""
    if case.kind != "routing":
        return case
    table, queue = case.target.split("|")
    if kind == "postgres":  # the decider's database holds the routing sink's rows and the ledger's
        return Case(case.name, kind, case.sink_id, table, case.point, case.formats)
    return Case(case.name, kind, f"{case.sink_id}--notes", queue, case.point, case.formats)

T0 = 1_700_000_000  # on a window boundary


def window_inputs() -> list[list[dict[str, Any]]]:
    """Three files of events 2.5 s apart over three accounts, then one far-future event of
    another key that closes every window."""
    files = [[{"account": f"a{i % 3}", "ts": T0 + i * 2.5, "amount": i % 10}
              for i in range(b * 12, b * 12 + 12)] for b in range(3)]
    return [*files, [{"account": "~flush", "ts": T0 + 10_000.0, "amount": 0}]]


def expected_windows(inputs: list[list[dict[str, Any]]]) -> dict[tuple[str, int, int], tuple[int, int, int]]:
    """(account, start s, end s) -> (n, total, top) of the 30 s / 10 s sliding windows a batch
    computation gives, the flush key left out."""
    acc: dict[tuple[str, int, int], list[int]] = {}
    for e in (e for rows in inputs for e in rows if e["account"] != "~flush"):
        first = int(e["ts"] // 10) * 10
        for start in (first - 20, first - 10, first):
            a = acc.setdefault((e["account"], start, start + 30), [0, 0, -1])
            a[0], a[1], a[2] = a[0] + 1, a[1] + e["amount"], max(a[2], e["amount"])
    return {k: (n, t, m) for k, (n, t, m) in acc.items()}


def env() -> dict[str, str]:
    """The services' addresses (``make services``)."""
    from services.env import load_env

    return dict(load_env())


def sink_options(case: Case, e: dict[str, str]) -> dict[str, str]:
    common = {"sinkId": case.sink_id, "guarantee": "exactly_once"}
    if case.kind == "routing":
        table, queue = part(case, "postgres"), part(case, "jms")
        jms = {k: v for k, v in sink_options(queue, e).items() if k not in common}
        pg = {k: v for k, v in sink_options(table, e).items() if k not in common}
        return {"connector": "routing", **common, "sinks.ledger.columns": "id,v",
                "sinks.notes.columns": "body", **{f"sinks.ledger.{k}": v for k, v in pg.items()},
                **{f"sinks.notes.{k}": v for k, v in jms.items()}}
    if case.kind in ("postgres", "windows"):
        return {"connector": "jdbc", "url": e["POSTGRES_URL"], "dbtable": case.target,
                "createTable": "true", **common}
    if case.kind == "mariadb":
        return {"connector": "jdbc", "url": e["MARIADB_URL"], "dbtable": case.target, "createTable": "true",
                **common}
    return {"connector": "jms", "host": e["STOMP_HOST"], "port": e["STOMP_PORT"], "user": e["STOMP_USER"],
            "password": e["STOMP_PASSWORD"], "destination": f"/queue/{case.target}", **common}


def start_query(spark: Any, case: Case, src: Path, ckpt: Path, e: dict[str, str]) -> Any:
    """The case's streaming query (Trigger.AvailableNow), started: the recording's driver and
    the suite's restart run this same pipeline."""
    from pyspark.sql import functions as F

    if case.kind == "windows":
        from spark_ext import windows
        from spark_ext.windows import aggregate as agg

        df = (spark.readStream.schema("account string, ts double, amount long")
              .option("maxFilesPerTrigger", 1).json(str(src)).withColumn("ts", F.col("ts").cast("timestamp")))
        out = windows.sliding(df, ["account"], "ts", "30 seconds", "10 seconds",
                              {"n": agg.count(), "total": agg.sum("amount"), "top": agg.max("amount")},
                              lateness="5 seconds")
    else:
        df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(str(src))
        cols = {"jms": ("CAST(id AS STRING) AS body",),
                "routing": ("CASE id % 2 WHEN 0 THEN 'ledger' ELSE 'notes' END AS sink", "id", "v",
                            "CAST(id AS STRING) AS body")}.get(case.kind, ("id", "v"))
        out = df.repartition(3, "id").selectExpr(*cols)
    w = out.writeStream.format("hzsink").option("checkpointLocation", str(ckpt)).trigger(availableNow=True)
    for k, v in sink_options(case, e).items():
        w = w.option(k, v)
    return w.start()


def write_inputs(case: Case, src: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(case.inputs()):
        f = src / f"f{i:03d}.json"
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(f, (MTIME0 + i, MTIME0 + i))


def drive(name: str, src: str, ckpt: str, failpoint: str) -> int:
    """The recording's driver: the case's query, killed at ``failpoint``."""
    from tests.drivers.session import driver_session

    spark = driver_session(f"corpus-{name}", failpoint, master="local[2,2]")
    q = start_query(spark, CASES[name], Path(src), Path(ckpt), env())
    q.awaitTermination()
    return 0 if q.exception() is None else 1


# --- PostgreSQL --------------------------------------------------------------------------------------

def pg_connect(url: str) -> Any:
    import psycopg2
    from sqlalchemy.engine import make_url

    u = make_url(url)
    conn = psycopg2.connect(host=u.host, port=u.port, user=u.username, password=u.password, dbname=u.database,
                            **dict(u.query))
    conn.autocommit = True
    return conn


def pg_rows(conn: Any, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


def pg_ddl(conn: Any, table: str) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of ``table`` as the database holds it (columns, types,
    NOT NULL, defaults, primary key)."""
    cols = pg_rows(conn, "SELECT attname, format_type(atttypid, atttypmod), attnotnull, "
                         "pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a LEFT JOIN pg_attrdef d "
                         "ON d.adrelid = a.attrelid AND d.adnum = a.attnum WHERE attrelid = %s::regclass "
                         "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (table,))
    parts = [f'"{n}" {t}' + (" NOT NULL" if nn else "") + (f" DEFAULT {d}" if d else "")
             for n, t, nn, d in cols]
    parts += [r[0] for r in pg_rows(conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                                          "WHERE conrelid = %s::regclass AND contype = 'p'", (table,))]
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(parts)});"


def _columns(conn: Any, table: str, query: Callable[[Any, str], list[tuple[Any, ...]]]) -> list[str]:
    return [c for (c,) in query(conn, table) if c not in EXCLUDED_COLUMNS]


def pg_columns(conn: Any, table: str) -> list[str]:
    return _columns(conn, table, lambda c, t: pg_rows(c, "SELECT attname FROM pg_attribute WHERE attrelid = "
                                                         "%s::regclass AND attnum > 0 AND NOT attisdropped "
                                                         "ORDER BY attnum", (t,)))


def pg_inserts(conn: Any, table: str, where: str, args: Any = None) -> list[str]:
    cols = pg_columns(conn, table)
    names = ", ".join(f'"{c}"' for c in cols)
    out = []
    with conn.cursor() as cur:
        order = ", ".join(str(i + 1) for i in range(len(cols)))
        for row in pg_rows(conn, f"SELECT {names} FROM {table} WHERE {where} ORDER BY {order}", args):
            values = cur.mogrify(", ".join(["%s"] * len(row)), row).decode()
            out.append(f"INSERT INTO {table} ({names}) VALUES ({values});")
    return out


def record_postgres(case: Case, e: dict[str, str], out: Path) -> dict[str, Any]:
    """The sink's rows in the bookkeeping tables, the target's committed rows, and each
    prepared transaction as it was written: the share lock its writer takes on the sink's
    row, its rows (found by ``xmin`` after ``COMMIT PREPARED``, the recording's state being
    thrown away), ``PREPARE TRANSACTION``."""
    conn = pg_connect(e["POSTGRES_URL"])
    try:
        sid = case.sink_id
        lines = [f"DROP TABLE IF EXISTS {case.target};",
                 pg_ddl(conn, case.target).replace(" IF NOT EXISTS", "")]
        lines += [pg_ddl(conn, t) for t in BOOKKEEPING]
        lines += [f"DELETE FROM {t} WHERE {_family(sid)};" for t in BOOKKEEPING]
        for t in BOOKKEEPING:
            lines += pg_inserts(conn, t, _family(sid))
        lines += pg_inserts(conn, case.target, "true")
        prepared = pg_rows(conn, PG_PREPARED, (sid,))
        held = 0
        for gid, xid in prepared:
            pg_rows(conn, f"COMMIT PREPARED '{gid}'")
            mine = pg_inserts(conn, case.target, "xmin::text = %s", (xid,))
            rows = [*mine,
                    *pg_inserts(conn, "spark_ext_commits", f"xmin::text = %s AND {_family(sid)}", (xid,))]
            held += len(mine)
            owner = gid.split(":")[1]  # the writer's share lock on its sink's row
            lines += ["BEGIN;", f"SELECT epoch FROM spark_ext_sinks WHERE sink_id = '{owner}' FOR SHARE;",
                      *rows, f"PREPARE TRANSACTION '{gid}';"]
    finally:
        conn.close()
    _write_sql(out / "postgres.sql", lines)
    return {"prepared": len(prepared), "prepared_rows": held}


def _family(sink_id: str) -> str:
    """SQL matching the rows of ``sink_id`` and of its sub-sinks (``<id>--<name>``)."""
    return f"split_part(sink_id, '--', 1) = '{sink_id}'"


#: PostgreSQL's prepared transactions of a sink id and of its sub-sinks, one parameter: the id.
PG_PREPARED = ("SELECT gid, transaction::text FROM pg_prepared_xacts WHERE starts_with(gid, 'sx:') AND "
               "split_part(split_part(gid, ':', 2), '--', 1) = %s ORDER BY gid")


def _write_sql(path: Path, lines: list[str]) -> None:
    assert all("\n" not in s for s in lines), "a statement spans lines: the restore reads one a line"
    path.write_text("-- recorded by tests/corpus/record.py; the restore runs one statement a line\n"
                    + "".join(s + "\n" for s in lines))


def sql_lines(path: Path) -> list[str]:
    return [s for s in path.read_text().splitlines() if s.strip() and not s.startswith("--")]


def restore_postgres(case: Case, e: dict[str, str], case_dir: Path) -> None:
    """Drops what the fixed names hold (rolling back a prepared transaction a failed run
    left), then runs the recorded statements."""
    clean_postgres(case, e)
    conn = pg_connect(e["POSTGRES_URL"])
    try:
        for s in sql_lines(case_dir / "postgres.sql"):
            pg_rows(conn, s)
    finally:
        conn.close()


def clean_postgres(case: Case, e: dict[str, str]) -> None:
    conn = pg_connect(e["POSTGRES_URL"])
    try:
        for gid, _ in pg_rows(conn, PG_PREPARED, (case.sink_id,)):
            pg_rows(conn, f"ROLLBACK PREPARED '{gid}'")
        pg_rows(conn, f"DROP TABLE IF EXISTS {case.target}")
        for t in BOOKKEEPING:
            if pg_rows(conn, "SELECT to_regclass(%s)", (t,))[0][0] is not None:
                pg_rows(conn, f"DELETE FROM {t} WHERE {_family(case.sink_id)}")
    finally:
        conn.close()


def pg_prepared(case: Case, e: dict[str, str]) -> list[str]:
    conn = pg_connect(e["POSTGRES_URL"])
    try:
        return [g for g, _ in pg_rows(conn, PG_PREPARED, (case.sink_id,))]
    finally:
        conn.close()


def pg_target(case: Case, e: dict[str, str]) -> list[tuple[Any, ...]]:
    conn = pg_connect(e["POSTGRES_URL"])
    try:
        return pg_rows(conn, f"SELECT * FROM {case.target}")
    finally:
        conn.close()


# --- MariaDB -----------------------------------------------------------------------------------------

def my_connect(url: str) -> Any:
    import pymysql
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password,
                           database=u.database, autocommit=True)


def my_rows(conn: Any, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


def my_inserts(conn: Any, table: str, where: str, args: Any = ()) -> list[str]:
    cols = [c for (c, *_) in my_rows(conn, f"SHOW COLUMNS FROM {table}") if c not in EXCLUDED_COLUMNS]
    names = ", ".join(f"`{c}`" for c in cols)
    return [f"INSERT INTO {table} ({names}) VALUES ({', '.join(conn.escape(v) for v in row)});"
            for row in my_rows(conn, f"SELECT {names} FROM {table} WHERE {where} ORDER BY "
                               f"{', '.join(str(i + 1) for i in range(len(cols)))}", args)]


def my_prepared(conn: Any, sink_id: str) -> list[tuple[str, str, int]]:
    """(gtrid, bqual, format) of the sink's XA transactions (``XA RECOVER``)."""
    out = []
    for fmt, glen, _blen, data in my_rows(conn, "XA RECOVER"):
        raw = data if isinstance(data, str) else data.decode()
        if raw[:glen] == sink_id:
            out.append((raw[:glen], raw[glen:], int(fmt)))
    return sorted(out)


def record_mariadb(case: Case, e: dict[str, str], out: Path) -> dict[str, Any]:
    """As PostgreSQL's, with XA. MariaDB has no ``xmin``: each XA transaction is committed
    alone and its rows are what that commit added to the target and the commits table (the
    recording's state is thrown away)."""
    from spark_ext.connectors.jdbc.mariadb.transactions import format_id

    conn = my_connect(e["MARIADB_URL"])
    try:
        sid = case.sink_id
        create = my_rows(conn, f"SHOW CREATE TABLE {case.target}")[0][1]
        lines = [f"DROP TABLE IF EXISTS {case.target};", " ".join(create.split()) + ";"]
        for t in BOOKKEEPING:
            ddl = " ".join(my_rows(conn, f"SHOW CREATE TABLE {t}")[0][1].split())
            lines.append(ddl.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1) + ";")
        lines += [f"DELETE FROM {t} WHERE sink_id = '{sid}';" for t in BOOKKEEPING]
        for t in BOOKKEEPING:
            lines += my_inserts(conn, t, "sink_id = %s", (sid,))
        lines += my_inserts(conn, case.target, "true")
        db_format = format_id(conn.db.decode() if isinstance(conn.db, bytes) else conn.db)
        deadline = time.monotonic() + 30
        while True:  # a killed writer's session may not have ended yet (its XA stays attached)
            xas = my_prepared(conn, sid)
            before_t = set(my_rows(conn, f"SELECT * FROM {case.target}"))
            try:
                for gtrid, bqual, fmt in xas:
                    assert fmt == db_format, (fmt, db_format)
                    before_t = set(my_rows(conn, f"SELECT * FROM {case.target}"))
                    before_c = set(my_rows(conn, "SELECT sink_id, query_id, batch_id, partition_id, attempt "
                                                 "FROM spark_ext_commits WHERE sink_id = %s", (sid,)))
                    my_rows(conn, "XA COMMIT %s, %s, %s", (gtrid, bqual, fmt))
                    new_t = set(my_rows(conn, f"SELECT * FROM {case.target}")) - before_t
                    new_c = set(my_rows(conn, "SELECT sink_id, query_id, batch_id, partition_id, attempt "
                                              "FROM spark_ext_commits WHERE sink_id = %s", (sid,))) - before_c
                    rows = [*_my_these(conn, case.target, new_t), *_my_commit_rows(conn, new_c)]
                    lines += [f"XA START '{gtrid}', '{bqual}', {XA_MARK};",
                              f"SELECT epoch FROM spark_ext_sinks WHERE sink_id = '{sid}' "
                              "LOCK IN SHARE MODE;",
                              *rows, f"XA END '{gtrid}', '{bqual}', {XA_MARK};",
                              f"XA PREPARE '{gtrid}', '{bqual}', {XA_MARK};"]
                break
            except Exception as exc:
                if getattr(exc, "args", (None,))[0] != 1397 or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        conn.close()
    _write_sql(out / "mariadb.sql", lines)
    return {"prepared": len(xas)}


def _my_these(conn: Any, table: str, rows: set[tuple[Any, ...]]) -> list[str]:
    cols = [c for (c, *_) in my_rows(conn, f"SHOW COLUMNS FROM {table}")]
    names = ", ".join(f"`{c}`" for c in cols)
    return [f"INSERT INTO {table} ({names}) VALUES ({', '.join(conn.escape(v) for v in r)});"
            for r in sorted(rows)]


def _my_commit_rows(conn: Any, keys: set[tuple[Any, ...]]) -> list[str]:
    out = []
    for k in sorted(keys):
        out += my_inserts(conn, "spark_ext_commits", "sink_id = %s AND query_id = %s AND batch_id = %s AND "
                                                     "partition_id = %s AND attempt = %s", k)
    return out


def restore_mariadb(case: Case, e: dict[str, str], case_dir: Path) -> None:
    """The recorded statements, the XA format number that of today's database (it derives
    from the database's name); each XA transaction from its own session, closed once
    prepared as the sink's writer does (MariaDB keeps a prepared XA attached to its session)."""
    from spark_ext.connectors.jdbc.mariadb.transactions import format_id

    clean_mariadb(case, e)
    conn = my_connect(e["MARIADB_URL"])
    fmt = str(format_id(conn.db.decode() if isinstance(conn.db, bytes) else conn.db))
    try:
        for s in sql_lines(case_dir / "mariadb.sql"):
            my_rows(conn, s.replace(XA_MARK, fmt))
            if s.startswith("XA PREPARE"):
                conn.close()
                conn = my_connect(e["MARIADB_URL"])
    finally:
        conn.close()


def clean_mariadb(case: Case, e: dict[str, str]) -> None:
    conn = my_connect(e["MARIADB_URL"])
    try:
        for x in my_prepared(conn, case.sink_id):
            my_rows(conn, "XA ROLLBACK %s, %s, %s", x)
        my_rows(conn, f"DROP TABLE IF EXISTS {case.target}")
        for t in BOOKKEEPING:
            if my_rows(conn, "SHOW TABLES LIKE %s", (t,)):
                my_rows(conn, f"DELETE FROM {t} WHERE sink_id = %s", (case.sink_id,))
    finally:
        conn.close()


def my_in_doubt(case: Case, e: dict[str, str]) -> list[str]:
    conn = my_connect(e["MARIADB_URL"])
    try:
        return [f"{g}:{b}" for g, b, _ in my_prepared(conn, case.sink_id)]
    finally:
        conn.close()


def my_target(case: Case, e: dict[str, str]) -> list[tuple[Any, ...]]:
    conn = my_connect(e["MARIADB_URL"])
    try:
        return my_rows(conn, f"SELECT * FROM {case.target}")
    finally:
        conn.close()


# --- the queue (Artemis over STOMP) ------------------------------------------------------------------

# Headers the broker sets on delivery: not the sink's, not sent back.
_BROKER_HEADERS = frozenset({"message-id", "destination", "subscription", "ack", "timestamp", "expires",
                             "redelivered", "content-length", "_AMQ_DUPL_ID", "persistent",
                             "destination-type", "transaction"})


def _stomp(e: dict[str, str]) -> Any:
    import stomp

    c = stomp.Connection12([(e["STOMP_HOST"], int(e["STOMP_PORT"]))], heartbeats=(0, 0), auto_decode=True)
    c.connect(e["STOMP_USER"], e["STOMP_PASSWORD"], wait=True)
    return c


def drain(e: dict[str, str], queue: str, timeout: float = 30.0) -> list[tuple[dict[str, str], str]]:
    """Every message of ``queue`` (consumed), as (headers, body), up to a sentinel sent now."""
    from services import queue_drain

    return queue_drain.drain(e["STOMP_HOST"], int(e["STOMP_PORT"]), e["STOMP_USER"], e["STOMP_PASSWORD"],
                             f"/queue/{queue}", timeout)


def _queues(case: Case) -> dict[str, str]:
    from spark_ext.connectors.jms.sink.config import QUEUE_PREFIX

    p = f"{QUEUE_PREFIX}{case.sink_id}"
    return {"target": case.target, "staging": f"{p}.staging", "log": f"{p}.log", "lock": f"{p}.lock"}


def _kept(headers: dict[str, str]) -> dict[str, str]:
    """The headers sent back: not the broker's own (``_AMQ_*`` included), and not the STOMP
    transaction a message was sent in, which Artemis hands back on delivery."""
    return {k: v for k, v in sorted(headers.items())
            if k not in _BROKER_HEADERS and not k.startswith("_AMQ_")}


def record_jms(case: Case, e: dict[str, str], out: Path) -> dict[str, Any]:
    """The sink's log entries and staged messages and the destination's committed messages,
    consumed (the recording's state is thrown away), each with the headers the sink set."""
    q = _queues(case)
    doc = {name: [{"headers": _kept(h), "body": b} for h, b in drain(e, q[name])]
           for name in ("target", "staging", "log")}
    (out / "queues.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return {k: len(v) for k, v in doc.items()}


def _broker(e: dict[str, str]) -> Any:
    from spark_ext.connectors.jms.session import BrokerSession

    return BrokerSession(e["STOMP_HOST"], int(e["STOMP_PORT"]), e["STOMP_USER"], e["STOMP_PASSWORD"], 10.0)


def clean_jms(case: Case, e: dict[str, str]) -> None:
    """Deletes the case's addresses (their queues, messages and duplicate-id caches)."""
    with _broker(e) as s:
        for name in _queues(case).values():
            try:
                s.call("broker", "deleteAddress", name, True)
            except Exception as exc:
                if "does not exist" not in str(exc) and "AMQ229203" not in str(exc):
                    raise


def restore_jms(case: Case, e: dict[str, str], case_dir: Path) -> None:
    """The recorded messages sent back to their queues, persistent, with their headers."""
    clean_jms(case, e)
    doc = json.loads((case_dir / "queues.json").read_text())
    q = _queues(case)
    c = _stomp(e)
    try:
        for name, messages in doc.items():
            for m in messages:
                c.send(f"/queue/{q[name]}", m["body"], headers={**_kept(m["headers"]), "persistent": "true"})
    finally:
        c.disconnect(receipt=f"bye-{uuid.uuid4().hex}")
    _wait_queued(e, {q[name]: len(messages) for name, messages in doc.items() if messages})


def _wait_queued(e: dict[str, str], want: dict[str, int], timeout: float = 30.0) -> None:
    """Waits until each queue holds the messages sent to it. Artemis adds a persistent message
    to its queue once its journal holds it, which can be after the DISCONNECT receipt: a
    count right after the sends saw fewer in 13 of 100 tries."""
    from spark_ext.connectors.jms.session import QueueMissingError

    deadline = time.monotonic() + timeout
    with _broker(e) as s:
        while True:
            held: dict[str, int] = {}
            for name in want:
                try:
                    held[name] = int(s.call(f"queue.{name}", "countMessages", ""))
                except QueueMissingError:
                    held[name] = 0
            if held == want:
                return
            assert time.monotonic() < deadline, f"sent {want}, the queues hold {held} after {timeout} s"
            time.sleep(0.05)


def jms_staged(case: Case, e: dict[str, str]) -> list[str]:
    from spark_ext.connectors.jms.session import QueueMissingError
    from spark_ext.connectors.jms.sink.committer import JmsCommitter
    from spark_ext.connectors.jms.sink.config import JmsSinkConfig
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    opts = {"host": e["STOMP_HOST"], "port": e["STOMP_PORT"], "user": e["STOMP_USER"],
            "password": e["STOMP_PASSWORD"], "destination": "/queue/unused", "sinkid": case.sink_id}
    committer = JmsCommitter(JmsSinkConfig.parse(Options(opts, "corpus"), Guarantee.EXACTLY_ONCE))
    try:
        return sorted(committer.staged())
    except QueueMissingError:
        return []
    finally:
        committer.close()


# --- one case, end to end -----------------------------------------------------------------------------

def record_routing(case: Case, e: dict[str, str], out: Path) -> dict[str, Any]:
    return {**record_postgres(part(case, "postgres"), e, out), **record_jms(part(case, "jms"), e, out)}


def restore_routing(case: Case, e: dict[str, str], case_dir: Path) -> None:
    restore_postgres(part(case, "postgres"), e, case_dir)
    restore_jms(part(case, "jms"), e, case_dir)


def clean_routing(case: Case, e: dict[str, str]) -> None:
    clean_postgres(part(case, "postgres"), e)
    clean_jms(part(case, "jms"), e)


RECORDERS: dict[str, Callable[[Case, dict[str, str], Path], dict[str, Any]]] = {
    "postgres": record_postgres, "mariadb": record_mariadb, "jms": record_jms, "windows": record_postgres,
    "routing": record_routing}
RESTORERS: dict[str, Callable[[Case, dict[str, str], Path], None]] = {
    "postgres": restore_postgres, "mariadb": restore_mariadb, "jms": restore_jms, "windows": restore_postgres,
    "routing": restore_routing}
CLEANERS: dict[str, Callable[[Case, dict[str, str]], None]] = {
    "postgres": clean_postgres, "mariadb": clean_mariadb, "jms": clean_jms, "windows": clean_postgres,
    "routing": clean_routing}


def save_checkpoint(ckpt: Path, src: Path, out: Path) -> None:
    """``ckpt`` copied to ``out`` without Hadoop's ``.crc`` files (the restore rewrites
    paths, which would break their checksums), the input and checkpoint paths in text files
    replaced by marks; refuses a file that still names the recording's directory."""
    base = str(ckpt.parent)
    for f in sorted(p for p in ckpt.rglob("*") if p.is_file()):
        if f.name.endswith(".crc"):
            continue
        dest = out / f.relative_to(ckpt)
        dest.parent.mkdir(parents=True, exist_ok=True)
        data = f.read_bytes()
        try:
            text = data.decode()
        except UnicodeDecodeError:
            assert base.encode() not in data, f"{f} (binary) names the recording's directory {base}"
            dest.write_bytes(data)
            continue
        text = text.replace(str(src), SRC_MARK).replace(str(ckpt), CKPT_MARK)
        assert base not in text, f"{f} names the recording's directory {base}: {text[:500]}"
        dest.write_text(text)


def restore_checkpoint(saved: Path, src: Path, ckpt: Path) -> None:
    """``save_checkpoint`` undone at a new place: the marks become ``src`` and ``ckpt``."""
    for f in sorted(p for p in saved.rglob("*") if p.is_file()):
        dest = ckpt / f.relative_to(saved)
        dest.parent.mkdir(parents=True, exist_ok=True)
        data = f.read_bytes()
        try:
            text = data.decode()
        except UnicodeDecodeError:
            dest.write_bytes(data)
            continue
        dest.write_text(text.replace(SRC_MARK, str(src)).replace(CKPT_MARK, str(ckpt)))
    for d in ("commits", "offsets", "sources", "state"):  # Spark's logs may be empty directories
        (ckpt / d).mkdir(exist_ok=True)


def restore_inputs(case_dir: Path, src: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(sorted((case_dir / "input").iterdir())):
        shutil.copyfile(f, src / f.name)
        os.utime(src / f.name, (MTIME0 + i, MTIME0 + i))


def case_dirs(case: Case) -> list[Path]:
    """Every recorded version of ``case``."""
    return sorted(d for d in (HERE / case.name).glob("v*") if d.is_dir())


def record(case: Case) -> Path:
    out = HERE / case.name / case.version
    if out.exists():
        raise SystemExit(f"{out} exists: a recorded version is never recorded over. Record again only after "
                         f"raising a format version in spark_ext/formats.py (this case carries "
                         f"{', '.join(f.what for f in case.formats)})")
    e = env()
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp_name:
        tmp = Path(tmp_name)
        src, ckpt = tmp / "src", tmp / "ckpt"
        write_inputs(case, src)
        CLEANERS[case.kind](case, e)
        argv = [sys.executable, "-m", "tests.corpus.record", "--drive", case.name, str(src), str(ckpt),
                case.point]
        run_env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_EXT_FAILPOINT_LOG": str(tmp / "struck.log")}
        done = subprocess.run(argv, cwd=ROOT, env=run_env, start_new_session=True, capture_output=True,
                              text=True, timeout=600)
        struck = (tmp / "struck.log").read_text() if (tmp / "struck.log").exists() else ""
        if done.returncode != -9 or case.point not in struck:
            CLEANERS[case.kind](case, e)
            raise SystemExit(f"{case.name}: the driver was not killed at {case.point} "
                             f"(exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
        staging = tmp / "out"
        staging.mkdir()
        shutil.copytree(src, staging / "input")
        save_checkpoint(ckpt, src, staging / "checkpoint")
        try:
            summary = RECORDERS[case.kind](case, e, staging)
        finally:
            CLEANERS[case.kind](case, e)
        meta = {"case": case.name, "killed_at": case.point, "sink_id": case.sink_id, "target": case.target,
                "formats": {f.what: f.current for f in case.formats}, "recorded": summary,
                "release": _release()}
        (staging / "recording.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, out)
    print(f"{case.name}: recorded {out.relative_to(ROOT)} {summary}")
    return out


def _release() -> str:
    from spark_ext.release import VERSION

    return str(VERSION)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--drive"]:
        return drive(*argv[1:5])
    names = argv or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; the cases: {', '.join(CASES)}")
    for n in names:
        record(CASES[n])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
