"""What the jdbc sink's writers, committers and doctors share: the names of its
prepared transactions, the commit message, how a connection waits out a restarting
server (``reconnecting``); and PostgreSQL's connections and the queries that find and
finish its in-doubt transactions (MariaDB's: ``mariadb.transactions``).

A prepared transaction's global id is
``sx:<sink>:<epoch>:<batch>:<partition>:<attempt>.<task attempt id>``: every part is
needed to find it again after a crash, with nothing but the database. Spark numbers
attempts per stage attempt (a stage run again after a fetch failure starts at attempt 0
again); the task attempt id, unique in the application, keeps the names apart. Ids
written before it was added end in ``:<attempt>`` and parse the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg2
import psycopg2.extensions
from psycopg2 import errorcodes
from sqlalchemy.engine import URL

from spark_ext import formats
from spark_ext.commit import Committable, TaskInfo
from spark_ext.connectors.jdbc.config import JdbcSinkConfig
from spark_ext.errors import NewerFormatError, RetriableCommitError
from spark_ext.retry import Backoff, retry


@dataclass(frozen=True)
class JdbcCommittable(Committable):
    """One task attempt's outcome; ``gid`` names its prepared transaction (None: nothing)."""

    gid: str | None = None

    @property
    def prepared(self) -> bool:
        return self.gid is not None

    @staticmethod
    def of(task: TaskInfo, rows: int, gid: str | None = None) -> JdbcCommittable:
        """What task attempt ``task`` reports: ``rows`` written, prepared as ``gid``."""
        return JdbcCommittable(task.batch_id, task.partition_id, task.attempt, rows, gid,
                               query_id=task.query_id)


def gid_for(sink_id: str, epoch: int, batch: int, partition: int, attempt: int, task_attempt_id: int) -> str:
    return f"sx:{sink_id}:{epoch}:{batch}:{partition}:{attempt}.{task_attempt_id}"


def parse_gid(gid: str) -> tuple[str, int, int, int, int]:
    """A global id -> (sink, epoch, batch, partition, attempt); the attempt is the one the
    task's marker row holds."""
    _, rest = gid.split(":", 1)
    sink, epoch, batch, part, attempt = rest.rsplit(":", 4)
    return sink, int(epoch), int(batch), int(part), int(attempt.partition(".")[0])


def winners_text(winners: Iterable[str], run_id: str) -> str:
    """A decision row's ``winners``: ``{"v": format version, "r": the run that decided,
    "w": [the global ids to commit]}`` (a routing sink's row holds its decision's JSON
    instead, whose keys differ: ``spark_ext.decisions``)."""
    return json.dumps({formats.KEY: formats.JDBC_DECISION.current, "r": run_id, "w": sorted(winners)})


def read_winners(text: str | None, where: str = "the sink's decisions table") -> tuple[frozenset[str], str]:
    """``winners_text`` read back: (the global ids, the run that decided them, "" if not
    kept); a plain list is version 1 without a run. A routing sink's decision names no ids
    of this table's sink. Raises ``NewerFormatError`` for a newer release's row, and
    ``UnreadableRecordError`` for a row of no shape a release wrote (read as empty, it would
    roll back the decided batch's transactions)."""
    value = json.loads(text or "[]")
    if isinstance(value, list):
        return frozenset(value), ""
    if isinstance(value, dict) and "p" in value:
        return frozenset(), ""
    if not isinstance(value, dict):
        value = {}  # refused below, naming the field
    formats.JDBC_DECISION.of(value, where)
    return frozenset(formats.JDBC_DECISION.need(value, "w", list, where)), str(value.get("r", ""))


def listed_winners(text: str | None) -> set[str]:
    """A decision row's winners for a listing (``spark-ext status``): a newer release's row
    shows none rather than hiding every other sink's; resolving it is still refused."""
    try:
        return set(read_winners(text)[0])
    except NewerFormatError:
        return set()


def started_before(gid: str, epoch: int, task_attempt_id: int) -> bool:
    """Was ``gid``'s attempt planned or started before the attempt ``(epoch, task_attempt_id)``?
    Task attempt ids grow within an application, and one epoch's attempts run in one."""
    _, gid_epoch, _, _, _ = parse_gid(gid)
    _, dot, tid = gid.rpartition(":")[2].partition(".")
    return (gid_epoch, int(tid) if dot else -1) < (epoch, task_attempt_id)


def stand_in(gid: str, prepared: Iterable[str]) -> str | None:
    """The prepared transaction of the latest attempt of ``gid``'s task (same run, batch and
    partition) that started after it, if any. Such an attempt rolls ``gid`` back when it
    starts (it would hold its locks) and prepares the same partition's rows."""
    _, epoch, batch, part, _ = parse_gid(gid)
    later = [g for g in prepared if parse_gid(g)[1:4] == (epoch, batch, part)
             and started_before(gid, epoch, _task_attempt_id(g))]
    return max(later, key=_task_attempt_id, default=None)


def _task_attempt_id(gid: str) -> int:
    _, dot, tid = gid.rpartition(":")[2].partition(".")
    return int(tid) if dot else -1


# libpq's words for a server that is not there *yet*: restarting, failing over, starting.
# Anything else (credentials, a missing database, pg_hba) fails at once.
_TRANSIENT = ("connection refused", "the database system is starting up", "the database system is shutting "
              "down", "server closed the connection", "could not connect", "connection reset",
              "timeout expired", "terminating connection", "no such file or directory")


class _Unreachable(Exception):
    """A connection attempt that may succeed later; wraps the client's error."""


T = TypeVar("T")


def reconnecting(open_once: Callable[[], T], transient: Callable[[Exception], bool], what: str,
                 timeout_s: float) -> T:
    """``open_once()``; an error that ``transient`` says may pass (a server refusing or
    dropping the connection: restarting, failing over) is tried again with backoff for up
    to ``timeout_s`` (``reconnectTimeoutMs``). Then, or at once for any other error, the
    client's error is raised."""

    def once() -> T:
        try:
            return open_once()
        except Exception as e:
            if transient(e):
                raise _Unreachable(e) from None
            raise

    def give_up(e: BaseException) -> BaseException:
        return e.args[0] if isinstance(e, _Unreachable) else e

    return retry(once, what=what, retry_on=_Unreachable, timeout_s=timeout_s, backoff=Backoff(0.1, 2.0),
                 give_up=give_up)


LOCK_SPACE = 0x53585431  # first key of the sinks' advisory locks ("SXT1"); the second is the sink id


def session_name(sink_id: str, epoch: int | None = None) -> str:
    """The ``application_name`` of a sink's sessions (tasks of an exactly-once run carry the
    run's epoch), so that the doctor can tell whether its query is connected and a take-over
    can end the sessions of older epochs. PostgreSQL keeps 63 bytes of it."""
    return (f"spark-ext {sink_id}" + (f" e{epoch}" if epoch is not None else ""))[:63]


def sink_sessions(conn: Any, sink_id: str) -> list[tuple[int, str, int | None]]:
    """(pid, client host, epoch or None) of the sink's other sessions."""
    base = session_name(sink_id)
    with conn.cursor() as cur:
        cur.execute("SELECT pid, coalesce(host(client_addr), 'local'), application_name "
                    "FROM pg_stat_activity WHERE (application_name = %s OR application_name LIKE %s) "
                    "AND pid <> pg_backend_pid() ORDER BY pid", (base, _like_prefix(base) + " e%"))
        out = []
        for pid, host, name in cur.fetchall():
            tail = name[len(base):]
            epoch = int(tail[2:]) if tail.startswith(" e") and tail[2:].isdigit() and len(name) < 63 else None
            out.append((int(pid), str(host), epoch))
        return out


# A server that vanished (host down, link cut) would hold a connection for the kernel's
# retransmissions, about 15 minutes: libpq's connect timeout, TCP keepalives and a TCP user
# timeout bound a dead link to about half a minute. A URL parameter of the same name wins.
_BOUNDED = {"connect_timeout": "10", "keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5",
            "keepalives_count": "3", "tcp_user_timeout": "30000"}


def _like_prefix(text: str) -> str:
    """``text`` with LIKE's wildcards escaped (backslash is LIKE's default escape)."""
    return text.replace("\\", "\\\\").replace("_", r"\_").replace("%", r"\%")


def connect(url: URL, reconnect_timeout_s: float = 0.0, sink_id: str | None = None,
            epoch: int | None = None) -> Any:
    """A psycopg2 connection from a SQLAlchemy URL (libpq does not read ``+psycopg2``);
    with ``sink_id``, named as that sink's session (of ``epoch``, for a task).

    A server that refuses or drops the connection (restarting, failing over) is tried
    again with backoff for up to ``reconnect_timeout_s`` (``reconnectTimeoutMs``); then,
    or at once for any other error, libpq's error is raised.
    """
    kw: dict[str, Any] = {**_BOUNDED, **{k: v for k, v in url.query.items()}}
    if sink_id is not None:
        kw.setdefault("application_name", session_name(sink_id, epoch))

    def once() -> Any:
        return psycopg2.connect(host=url.host, port=url.port or 5432, user=url.username,
                                password=url.password, dbname=url.database, **kw)

    def transient(e: Exception) -> bool:
        return isinstance(e, psycopg2.OperationalError) and any(t in str(e).lower() for t in _TRANSIENT)

    return reconnecting(once, transient, f"connecting to PostgreSQL at {url.host}:{url.port or 5432}",
                        reconnect_timeout_s)


class Db:
    """An autocommit psycopg2 connection for the coordinator's statements."""

    def __init__(self, cfg: JdbcSinkConfig) -> None:
        try:
            self.conn = connect(cfg.open_url(), cfg.reconnect_timeout_s, cfg.sink_id)
        except psycopg2.OperationalError as e:
            raise RetriableCommitError(
                f"cannot reach PostgreSQL at {cfg.safe_url}: {str(e).strip()}"
            ) from None
        self.conn.autocommit = True

    def __enter__(self) -> Any:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


# Idle coordinator connections this process keeps, per URL and sink. An inline password is
# part of the URL (a changed one connects anew); one read from passwordFile / passwordEnv
# is not, and a kept connection stays logged in after the file changes (new ones read it).
_IDLE: dict[tuple[str, str], list[Any]] = {}
# The server ends a kept connection idle this long (PostgreSQL 14 or later; on older ones
# nothing is kept), so a stopped query's worker holds none for long and a smart shutdown
# is not kept waiting.
KEPT_IDLE_S = 10


def _parked_name(sink_id: str) -> str:
    """A kept idle connection's ``application_name``: never one ``sink_sessions`` counts
    (an idle connection holds no lock and no transaction, so it is not a running query)."""
    return f"spark-ext-idle {sink_id}"[:63]


@contextmanager
def kept_db(cfg: JdbcSinkConfig) -> Iterator[Any]:
    """``Db``'s autocommit connection, kept by this process for its next call: Spark reuses
    the driver's planning and commit workers from batch to batch, and a new connection
    (with its authentication) costs more than the statements of a take-over or a commit.

    A kept connection is named as the sink's session again with one round trip, which
    also checks it (the server may have restarted or ended it meanwhile); it is replaced
    if that fails. One whose block raised, or that is left inside a transaction, is
    closed: nothing of a failed step (a session lock, an open transaction) reaches the
    next call.
    """
    idle = _IDLE.setdefault((cfg.url.render_as_string(hide_password=False), cfg.sink_id), [])
    conn: Any = None
    while idle and conn is None:
        candidate = idle.pop()
        try:
            with candidate.cursor() as cur:
                cur.execute("SET application_name = %s", (session_name(cfg.sink_id),))
            conn = candidate
        except psycopg2.Error:
            candidate.close()
    keep = conn is not None
    if conn is None:
        conn = Db(cfg).conn
        try:
            with conn.cursor() as cur:
                cur.execute(f"SET idle_session_timeout = '{KEPT_IDLE_S}s'")
            keep = True
        except psycopg2.Error:  # before PostgreSQL 14: used once, as before
            keep = False
    reusable = False
    try:
        yield conn
        if (keep and not conn.closed and conn.autocommit
                and conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE):
            try:
                with conn.cursor() as cur:
                    cur.execute("SET application_name = %s", (_parked_name(cfg.sink_id),))
                reusable = True
            except psycopg2.Error:  # the block's work is done; this connection is just not kept
                pass
    finally:
        if reusable:
            idle.append(conn)
        else:
            conn.close()


class KeptDb:
    """A driver-side user of ``kept_db`` (a committer, a decision log): ``connected`` holds
    the connection its calls share, ``conn`` is that connection inside it. A dropped
    connection is retriable: the commit is retried whole, idempotently."""

    cfg: JdbcSinkConfig
    _conn: Any = None

    @property
    def kept_label(self) -> str:
        return f"sink {self.cfg.sink_id!r}"

    @contextmanager
    def connected(self) -> Iterator[None]:
        try:
            with kept_db(self.cfg) as conn:
                self._conn = conn
                yield
        except psycopg2.OperationalError as e:
            raise RetriableCommitError(f"{self.kept_label}: {str(e).strip()}") from None
        finally:
            self._conn = None

    @property
    def conn(self) -> Any:
        assert self._conn is not None, "a call that needs the connection ran outside connected()"
        return self._conn


def prepared_gids(conn: Any, sink_id: str) -> list[str]:
    """This sink's in-doubt transactions in the current database."""
    with conn.cursor() as cur:
        cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE %s",
                    (_like_prefix("sx:" + sink_id) + ":%",))
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
            out.setdefault(b, set()).update(read_winners(w)[0])
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
