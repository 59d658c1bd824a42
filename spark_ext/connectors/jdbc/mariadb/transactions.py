"""The MariaDB / MySQL dialect's connections, XA transaction ids, and the queries that
find and finish in-doubt transactions (the rest of the dialect: see the package).

XA differs from PostgreSQL's prepared transactions in ways the dialect has to handle:

- an XA id is three parts (``gtrid`` up to 64 bytes, ``bqual`` up to 64, a format
  number), and ``XA RECOVER`` lists every prepared transaction of the server, whatever
  its database. The sink's id is the ``gtrid``, the rest of the global id the ``bqual``,
  and the format number (``format_id``) says "spark-ext, in this database": two
  databases of one server whose sinks share an id never touch each other's;
- on MariaDB a prepared transaction stays attached to its session until that session
  ends: another session's ``XA COMMIT`` answers "unknown XID" meanwhile although ``XA
  RECOVER`` lists it. A writer closes its connection right after ``XA PREPARE``; the
  committer waits for that close (``finish``);
- ``XA RECOVER`` needs ``XA_RECOVER_ADMIN`` on MySQL 8 (MariaDB: any user).
"""

from __future__ import annotations

import hashlib
import logging
import ssl as ssl_lib
import time
import zlib
from collections.abc import Iterable
from typing import Any

import pymysql
from sqlalchemy.engine import URL

from spark_ext.connectors.jdbc.config import JdbcSinkConfig
from spark_ext.connectors.jdbc.transactions import parse_gid, read_winners, reconnecting

log = logging.getLogger(__name__)

FORMAT_FAMILY = 0x53  # "S": the top byte of every spark-ext XA format number


def format_id(database: str) -> int:
    """The XA format number of the sinks whose bookkeeping lives in ``database``: ours
    (top byte ``FORMAT_FAMILY``) and that database's (24 bits of its name's CRC)."""
    return (FORMAT_FAMILY << 24) | (zlib.crc32(database.encode()) & 0xFFFFFF)


def ours(fmt: int) -> bool:
    return fmt >> 24 == FORMAT_FAMILY


def lock_name(sink_id: str) -> str:
    """The sink's ``GET_LOCK`` name (64 characters at most): held by a take-over, a
    decision, the doctor and a task rolling back an earlier attempt of itself."""
    return "spark-ext:" + hashlib.sha256(sink_id.encode()).hexdigest()[:40]


def sink_format(cfg: JdbcSinkConfig) -> int:
    """The format number of a sink's XA transactions: that of its bookkeeping's database."""
    return format_id(cfg.schema or cfg.url.database or "")

# The server's error numbers the dialect acts on.
XAER_NOTA = 1397  # unknown XID (gone, or still attached to its session)
XAER_RMFAIL = 1399  # the command cannot run in the transaction's state
ACCESS_DENIED = 1227  # a missing privilege (XA_RECOVER_ADMIN, CONNECTION_ADMIN)
LOCK_WAIT_TIMEOUT = 1205
DEADLOCK = 1213
ER_NO_SUCH_TABLE = 1146
# The client's and server's numbers for a server that is not there *yet* (restarting,
# failing over) or dropped the connection: tried again until reconnectTimeoutMs.
_TRANSIENT = frozenset({2002, 2003, 2006, 2013, 2055, 1053, 1040, 1927})


def xid(gid: str, fmt: int) -> tuple[str, str, int]:
    """A global id ``sx:<sink>:<epoch>:<batch>:<partition>:<attempt>.<tid>`` -> its XA id."""
    _, sink, rest = gid.split(":", 2)
    return sink, rest, fmt


def error_code(e: BaseException) -> int | None:
    args = getattr(e, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class TlsRefusedError(pymysql.OperationalError):
    """The TLS handshake failed: the client refused the server's certificate (or the
    server the client's). Never transient; its message names the URL setting to fix."""


def tls_refusal(url: URL, e: BaseException) -> str:
    """The handshake's error in words naming the setting that fixes it."""
    text = str(e)
    host = f"{url.host}:{url.port or 3306}"
    if "Hostname mismatch" in text or "doesn't match" in text or "IP address mismatch" in text:
        fix = (f"the server's certificate does not name the host {url.host!r}: connect by a name the "
               "certificate carries (or, knowingly, set ssl_verify_identity=false)")
    elif "certificate verify failed" in text:
        fix = ("the server's certificate is not signed by the CA in the URL's ssl_ca: point ssl_ca at the "
               "CA that signed it")
    else:
        fix = "check the URL's ssl_ca, ssl_cert and ssl_key"
    return f"TLS handshake with MariaDB at {host} failed ({text}); {fix}"


# Bounds a dead link: a server that vanished (host down) is given up on after this many
# seconds of silence on a read or write, instead of the kernel's 15 minutes. Long enough
# for the longest statement the sink runs (a LOAD DATA of one Arrow batch, a lock wait
# bounded by lockTimeoutMs) unless the URL sets its own.
_READ_TIMEOUT_S = 300
_SSL_KEYS = ("ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert", "ssl_verify_identity")


class MyConn:
    """A PyMySQL connection spoken to as the PostgreSQL code speaks to psycopg2's:
    ``autocommit`` an attribute, ``closed``; cursors are context managers in both."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    @property
    def autocommit(self) -> bool:
        return bool(self.raw.get_autocommit())

    @autocommit.setter
    def autocommit(self, on: bool) -> None:
        self.raw.autocommit(on)

    @property
    def closed(self) -> bool:
        return not self.raw.open

    def cursor(self) -> Any:
        return self.raw.cursor()

    def commit(self) -> None:
        self.raw.commit()

    def rollback(self) -> None:
        self.raw.rollback()

    def close(self) -> None:
        if self.raw.open:
            try:
                self.raw.close()
            except pymysql.Error:
                pass  # the server is gone: so is the session

    def execute(self, sql: str, args: Any = None) -> Any:
        with self.raw.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()


def connect(url: URL, reconnect_timeout_s: float = 0.0, lock_timeout_ms: int | None = None) -> MyConn:
    """An autocommit connection from a ``mysql+pymysql`` URL, in UTC, ``utf8mb4``, with
    ``LOAD DATA LOCAL`` allowed (the writers' bulk load) and the URL's TLS settings.

    A server that refuses or drops the connection (restarting, failing over) is tried
    again with backoff for up to ``reconnect_timeout_s``; any other error at once.
    """
    q = {k: str(v) for k, v in url.query.items()}
    ssl = {k: q.pop(k) for k in _SSL_KEYS if k in q}
    read_timeout = int(q.pop("read_timeout", _READ_TIMEOUT_S))
    kw: dict[str, Any] = {
        "host": url.host, "port": url.port or 3306, "user": url.username, "password": url.password or "",
        "database": url.database, "connect_timeout": int(q.pop("connect_timeout", 10)),
        "read_timeout": read_timeout, "write_timeout": read_timeout, "charset": "utf8mb4",
        "autocommit": True, "local_infile": True,
        "init_command": "SET time_zone = '+00:00'" + (
            f", innodb_lock_wait_timeout = {max(1, -(-lock_timeout_ms // 1000))}" if lock_timeout_ms else ""),
    }
    for k, v in ssl.items():
        kw[k] = v.lower() in ("1", "true", "yes") if k.startswith("ssl_verify") else v
    if "ssl_ca" in ssl:
        # A CA is given to check the server with: PyMySQL alone would encrypt and check
        # nothing unless told to. Verify the certificate and its name unless the URL says
        # otherwise (libpq's verify-full, as the PostgreSQL sink defaults to).
        kw.setdefault("ssl_verify_cert", True)
        kw.setdefault("ssl_verify_identity", kw["ssl_verify_cert"])

    def once() -> MyConn:
        try:
            return MyConn(pymysql.connect(**kw))
        except pymysql.OperationalError as e:
            if isinstance(getattr(e, "original_exception", None), ssl_lib.SSLError):
                # PyMySQL reports a refused certificate as "can't connect" (2003), as it does
                # a server still starting: a certificate does not get better with waiting.
                raise TlsRefusedError(e.args[0], tls_refusal(url, e.original_exception)) from None
            raise

    def transient(e: Exception) -> bool:
        return (isinstance(e, pymysql.OperationalError) and not isinstance(e, TlsRefusedError)
                and error_code(e) in _TRANSIENT)

    return reconnecting(once, transient, f"connecting to MariaDB at {url.host}:{url.port or 3306}",
                        reconnect_timeout_s)


def prepared_gids(conn: MyConn, sink_id: str, fmt: int) -> list[str]:
    """This sink's prepared XA transactions in the database of format number ``fmt``."""
    out = []
    for f, glen, blen, data in conn.execute("XA RECOVER"):
        raw = data if isinstance(data, bytes) else str(data).encode()
        if int(f) != fmt or raw[:int(glen)].decode() != sink_id:
            continue
        gid = f"sx:{sink_id}:{raw[int(glen):int(glen) + int(blen)].decode()}"
        try:
            parse_gid(gid)
        except ValueError:
            continue  # not one of ours after all
        out.append(gid)
    return sorted(out)


def finish(conn: MyConn, gid: str, commit: bool, fmt: int, attached_wait_s: float = 10.0) -> bool:
    """``XA COMMIT`` / ``XA ROLLBACK``; False when the id no longer exists.

    While the session that prepared it has not ended yet (a writer's close still in
    flight, or its executor frozen right after ``XA PREPARE``), the server answers
    "unknown XID" though ``XA RECOVER`` lists it: waited for up to ``attached_wait_s``.
    Then a commit (a winner) fails with the server's error; a rollback is left for a
    later take-over, with a warning, and reported as not done (False): what it would roll
    back is no winner, and waiting longer would hold up every later batch.
    """
    g, b, f = xid(gid, fmt)
    verb = "XA COMMIT" if commit else "XA ROLLBACK"
    deadline = time.monotonic() + attached_wait_s
    while True:
        try:
            conn.execute(f"{verb} %s, %s, %s", (g, b, f))
            return True
        except pymysql.Error as e:
            if error_code(e) != XAER_NOTA:
                raise
            if gid not in prepared_gids(conn, g, fmt):
                return False
            if time.monotonic() >= deadline:
                if commit:
                    raise
                log.warning("%s is still attached to the session that prepared it after %.0f s (its "
                            "executor froze?); it is rolled back by a later take-over", gid, attached_wait_s)
                return False
            time.sleep(0.02)


def decisions(conn: MyConn, batches_table: str, sink_id: str, batches: Iterable[int]) -> dict[int, set[str]]:
    """Batch -> the transaction ids decided to commit (see ``transactions.decisions``)."""
    wanted = sorted(set(batches))
    if not wanted:
        return {}
    out: dict[int, set[str]] = {}
    marks = ", ".join(["%s"] * len(wanted))
    for b, w in conn.execute(f"SELECT batch_id, winners FROM {batches_table} WHERE sink_id = %s AND "
                             f"partition_id = -1 AND batch_id IN ({marks})", (sink_id, *wanted)):
        out.setdefault(int(b), set()).update(read_winners(w)[0])
    return out


def resolve_in_doubt(conn: MyConn, batches_table: str, sink_id: str, fmt: int
                     ) -> tuple[list[str], list[str]]:
    """Commit prepared winners of decided batches, roll back everything else."""
    gids = prepared_gids(conn, sink_id, fmt)
    decided = decisions(conn, batches_table, sink_id, {parse_gid(g)[2] for g in gids})
    committed: list[str] = []
    rolled_back: list[str] = []
    for gid in gids:
        win = gid in decided.get(parse_gid(gid)[2], set())
        if finish(conn, gid, win, fmt):
            (committed if win else rolled_back).append(gid)
    return committed, rolled_back
