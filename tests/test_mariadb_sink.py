"""The jdbc sink on MariaDB (XA) against the real local server: what differs from
PostgreSQL. The conformance suite (``tests/test_sink_conformance.py``, case ``mariadb``)
runs the protocol's crashes; these drive batches by hand where a query would only be
slower, and kill the server itself."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_ext import cli
from spark_ext.commit import Batch, TaskInfo
from spark_ext.connectors.jdbc import JdbcSink
from spark_ext.connectors.jdbc.config import parse_url
from spark_ext.errors import ConnectorError, InvalidOptionError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from tests.support.mysql_util import execute, prepared, query
from tests.support.pg_util import table_name
from tests.support.processes import driver_report
from tests.support.sinks import new_query_id

pytestmark = [pytest.mark.spark, pytest.mark.services]

KV = StructType([StructField("id", LongType()), StructField("v", StringType())])


def _plan(url: str, table: str, sink_id: str, schema: StructType = KV,
          guarantee: Guarantee = Guarantee.EXACTLY_ONCE, **opts: str):
    o = Options({"url": url, "dbtable": table, "sinkid": sink_id, **opts}, "hzsink")
    return JdbcSink().plan(o, schema, guarantee)


def _kv(ids: list[int], v: str = "v") -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "v": pa.array([f"{v}{i}" for i in ids])})


def _table(url: str, prefix: str, columns: str = "id bigint, v longtext", engine: str = "InnoDB") -> str:
    name = table_name(prefix)
    execute(url, f"CREATE TABLE {name} ({columns}) ENGINE={engine}")
    return name


def test_every_type_and_awkward_text_round_trips_through_the_bulk_load(services):
    """Rows go in as LOAD DATA text built by Arrow: tabs, newlines, backslashes, a literal
    backslash-N, quotes, NUL, non-ASCII text, empty strings apart from NULLs, bytes,
    decimals, booleans, dates and microsecond timestamps all land as they were."""
    url = services.mariadb_url
    table = _table(url, "types", "id bigint, s longtext, b longblob, d decimal(12,4), f double, "
                   "ok boolean, day date, at datetime(6)")
    schema = StructType([StructField("id", LongType()), StructField("s", StringType()),
                         StructField("b", BinaryType()), StructField("d", DecimalType(12, 4)),
                         StructField("f", DoubleType()), StructField("ok", BooleanType()),
                         StructField("day", DateType()), StructField("at", TimestampType())])
    texts = ["tab\there", "new\nline\r\n", "back\\slash", "\\N", '"quoted", comma', "nul\x00byte", "żółw 🐢",
             "", None]
    n = len(texts)
    at = datetime.datetime(2026, 11, 29, 3, 4, 5, 123456, tzinfo=datetime.UTC)
    rows = pa.record_batch({
        "id": pa.array(range(n), pa.int64()),
        "s": pa.array(texts, pa.string()),
        "b": pa.array([b"\x00\t\n\\N\xff", b"", None] + [b"x"] * (n - 3), pa.binary()),
        "d": pa.array([Decimal("-12345678.1234"), None] + [Decimal("0.0001")] * (n - 2),
                      pa.decimal128(12, 4)),
        "f": pa.array([1e-300, -0.5, None] + [2.0] * (n - 3), pa.float64()),
        "ok": pa.array([True, False, None] + [True] * (n - 3), pa.bool_()),
        "day": pa.array([datetime.date(1, 1, 1), None] + [datetime.date(2026, 2, 28)] * (n - 2), pa.date32()),
        "at": pa.array([at, None] + [at] * (n - 2), pa.timestamp("us", tz="UTC")),
    })
    plan = _plan(url, table, table_name("types"), schema)
    qid = new_query_id()
    msg = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 1))
    plan.new_committer().commit([msg], 0, plan.claim)
    got = query(url, f"SELECT id, s, b, d, f, ok, day, at FROM {table} ORDER BY id")
    assert [r[1] for r in got] == texts
    assert [r[2] for r in got[:3]] == [b"\x00\t\n\\N\xff", b"", None]
    assert [r[3] for r in got[:2]] == [Decimal("-12345678.1234"), None]
    assert [r[4] for r in got[:3]] == [1e-300, -0.5, None]
    assert [r[5] for r in got[:3]] == [1, 0, None]
    assert [r[6] for r in got[:2]] == [datetime.date(1, 1, 1), None]
    assert [r[7] for r in got[:2]] == [at.replace(tzinfo=None), None]  # UTC, the sessions' time zone


@pytest.mark.parametrize("guarantee", [Guarantee.EXACTLY_ONCE, Guarantee.AT_LEAST_ONCE])
def test_upsert_order_by_keeps_the_greatest_version_whatever_the_arrival_order(services, guarantee):
    """INSERT ... ON DUPLICATE KEY UPDATE with upsertOrderBy's rule: the greatest version
    wins within a batch and against the row in the table; without it the last row wins."""
    url = services.mariadb_url
    table = _table(url, "ord", "id bigint PRIMARY KEY, seq bigint, v varchar(20)")
    schema = StructType([StructField("id", LongType()), StructField("seq", LongType()),
                         StructField("v", StringType())])
    sink_id, qid = table_name("ord"), new_query_id()

    def write(batch_id: int, rows: list[tuple[int, int | None, str]], **opts: str) -> None:
        plan = _plan(url, table, sink_id, schema, guarantee, upsertKeys="id", **opts)
        data = pa.record_batch({"id": pa.array([r[0] for r in rows], pa.int64()),
                                "seq": pa.array([r[1] for r in rows], pa.int64()),
                                "v": pa.array([r[2] for r in rows])})
        msg = plan.new_writer().write(iter([data]), TaskInfo(qid, batch_id, 0, 0, 1))
        plan.new_committer().commit([msg], batch_id, plan.claim)

    write(0, [(1, 5, "new"), (1, 3, "old"), (2, 1, "a"), (3, None, "n")], upsertOrderBy="seq")
    assert query(url, f"SELECT id, seq, v FROM {table} ORDER BY id") == [(1, 5, "new"), (2, 1, "a"),
                                                                      (3, None, "n")]
    write(1, [(1, 4, "stale"), (2, 2, "b"), (3, 1, "versioned")], upsertOrderBy="seq")
    assert query(url, f"SELECT id, seq, v FROM {table} ORDER BY id") == [(1, 5, "new"), (2, 2, "b"),
                                                                      (3, 1, "versioned")]
    write(2, [(2, 9, "x"), (2, 0, "last")])  # no order column: the last row of the batch wins
    assert query(url, f"SELECT id, seq, v FROM {table} WHERE id = 2") == [(2, 0, "last")]


def test_a_retried_task_rolls_back_its_earlier_prepared_attempt_and_a_zombie_commits_through_it(services):
    """Attempt 0 prepared (holding its rows' key locks) and Spark retried the task; the
    retry rolls attempt 0 back instead of waiting on its locks. Spark then takes attempt
    0's result: the retry's transaction commits in its place, once."""
    url = services.mariadb_url
    table = _table(url, "retry", "id bigint PRIMARY KEY, v longtext")
    sink_id, qid = table_name("retry"), new_query_id()
    plan = _plan(url, table, sink_id, lockTimeoutMs="3000")
    first = plan.new_writer().write(iter([_kv([1, 2])]), TaskInfo(qid, 0, 0, 0, 11))
    other = plan.new_writer().write(iter([_kv([3])]), TaskInfo(qid, 0, 1, 0, 12))
    retried = plan.new_writer().write(iter([_kv([1, 2])]), TaskInfo(qid, 0, 0, 1, 23))
    assert sorted(prepared(url, sink_id)) == sorted([str(other.gid), str(retried.gid)])
    plan.new_committer().commit([first, other], 0, plan.claim)
    assert [r[0] for r in query(url, f"SELECT id FROM {table} ORDER BY id")] == [1, 2, 3]
    assert prepared(url, sink_id) == []


def test_a_take_over_ends_a_frozen_writers_open_transaction_instead_of_waiting_for_it(services):
    """An executor froze inside its write: its session holds an open (not prepared) XA
    transaction and the share lock on the sink's row, and says nothing more. The next
    run's take-over ends that session, as PostgreSQL's ends a stale task session, and
    claims the sink in seconds: not after lockTimeoutMs (then the server's 8 h
    wait_timeout, every restart failing meanwhile)."""
    import threading

    url = services.mariadb_url
    table = _table(url, "frozen", "id bigint PRIMARY KEY, v longtext")
    sink_id, qid = table_name("frozen"), new_query_id()
    plan = _plan(url, table, sink_id, lockTimeoutMs="20000")
    thaw, wrote = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def rows():  # the task's input: one batch, then the executor freezes
        yield _kv([1, 2])
        wrote.set()
        thaw.wait(120)
        yield _kv([3])

    def task() -> None:
        try:
            outcome["msg"] = plan.new_writer().write(rows(), TaskInfo(qid, 0, 0, 0, 1))
        except Exception as e:  # noqa: BLE001 - the frozen task's end, checked below
            outcome["error"] = e

    frozen = threading.Thread(target=task, daemon=True)
    frozen.start()
    try:
        assert wrote.wait(60), "the task did not start writing"
        t0 = time.monotonic()
        again = _plan(url, table, sink_id, lockTimeoutMs="20000")  # the next run's start: its take-over
        took = time.monotonic() - t0
        assert again.claim.fence == plan.claim.fence + 1
        assert took < 10, f"the take-over waited {took:.1f} s for the frozen task's transaction"
    finally:
        thaw.set()
        frozen.join(60)
    assert "error" in outcome, outcome  # its session was ended: the thawed task fails, writes nothing
    assert prepared(url, sink_id) == [] and query(url, f"SELECT count(*) FROM {table}") == [(0,)]


def test_upsert_tasks_of_one_batch_never_wait_on_each_other_s_staged_rows(services):
    """Under exactly_once a task's staged rows stay locked until the batch is decided: the
    next task of the batch, writing other keys, must not scan or lock them (with one staging
    table shared by the tasks it waited until lockTimeoutMs)."""
    url = services.mariadb_url
    table = _table(url, "stage", "id bigint PRIMARY KEY, v longtext")
    sink_id, qid = table_name("stage"), new_query_id()
    plan = _plan(url, table, sink_id, upsertKeys="id", lockTimeoutMs="2000")
    evens = plan.new_writer().write(iter([_kv(list(range(0, 2000, 2)))]), TaskInfo(qid, 0, 0, 0, 1))
    odds = plan.new_writer().write(iter([_kv(list(range(1, 2000, 2)))]), TaskInfo(qid, 0, 1, 0, 2))
    plan.new_committer().commit([evens, odds], 0, plan.claim)
    assert query(url, f"SELECT count(*), count(DISTINCT id) FROM {table}") == [(2000, 2000)]


def test_two_tasks_writing_one_key_time_out_naming_the_fix(services):
    """Under exactly_once a task's rows stay locked until the batch is decided: another
    task of the batch writing the same key can only time out, and says why."""
    url = services.mariadb_url
    table = _table(url, "dupkey", "id bigint PRIMARY KEY, v longtext")
    sink_id, qid = table_name("dupkey"), new_query_id()
    plan = _plan(url, table, sink_id, upsertKeys="id", lockTimeoutMs="1000")
    first = plan.new_writer().write(iter([_kv([1])]), TaskInfo(qid, 0, 0, 0, 1))
    t0 = time.monotonic()
    with pytest.raises(ConnectorError, match=r"Lock wait timeout.*dropDuplicates"):
        plan.new_writer().write(iter([_kv([1])]), TaskInfo(qid, 0, 1, 0, 2))
    assert time.monotonic() - t0 < 10
    plan.new_committer().commit([first], 0, plan.claim)  # nothing left in doubt on the server
    assert prepared(url, sink_id) == [] and query(url, f"SELECT id FROM {table}") == [(1,)]


@pytest.mark.parametrize(("columns", "rows", "said"), [
    ("id bigint PRIMARY KEY, v longtext", _kv([5, 5]), "Duplicate entry"),
    ("id bigint, v varchar(3)", _kv([1000]), "Data truncated"),
    ("id bigint, v double", pa.record_batch({"id": pa.array([1], pa.int64()),
                                              "v": pa.array([float("nan")], pa.float64())}), "v"),
], ids=["duplicate-key", "too-long", "nan"])
def test_a_row_the_table_refuses_fails_the_task_instead_of_being_skipped_or_altered(services, columns, rows,
                                                                                     said):
    """LOAD DATA LOCAL acts as if IGNORE were given (a duplicate skipped, a value cut or
    zeroed, with a warning only): every such warning fails the task, nothing committed."""
    url = services.mariadb_url
    table = _table(url, "refuse", columns)
    schema = KV if rows.schema.field("v").type == pa.string() else StructType(
        [StructField("id", LongType()), StructField("v", DoubleType())])
    sink_id = table_name("refuse")
    plan = _plan(url, table, sink_id, schema)
    with pytest.raises(ConnectorError, match=rf"took \d of {rows.num_rows} rows.*{said}.*nothing of this"):
        plan.new_writer().write(iter([rows]), TaskInfo(new_query_id(), 0, 0, 0, 1))
    assert query(url, f"SELECT count(*) FROM {table}") == [(0,)]
    assert prepared(url, sink_id) == []


def test_sinks_of_one_id_in_two_databases_of_one_server_leave_each_other_alone(services):
    """XA ids are server-wide: a take-over in one database must neither roll back nor see
    the in-doubt transactions of a sink of the same id in another database."""
    url = services.mariadb_url
    other_db = "sparkext_other"
    execute(url, f"CREATE DATABASE IF NOT EXISTS {other_db}")
    other_url = url.rsplit("/", 1)[0] + f"/{other_db}"
    sink_id, qid = table_name("twodb"), new_query_id()
    here, there = _table(url, "twodb"), _table(other_url, "twodb")
    plan = _plan(url, here, sink_id)
    decided = plan.new_writer().write(iter([_kv([1])]), TaskInfo(qid, 0, 0, 0, 1))
    committer = plan.new_committer()
    with committer.connected():  # decided, not yet committed: the driver died
        committer.record(Batch(0, (decided,), plan.claim))
    _plan(other_url, there, sink_id)  # the other database's sink takes itself over
    assert prepared(url, sink_id) == [decided.gid] and prepared(other_url, sink_id) == []
    _plan(url, here, sink_id)  # this one's own take-over commits it
    assert query(url, f"SELECT id FROM {here}") == [(1,)]


def test_a_table_that_cannot_roll_back_is_refused_naming_the_engine(services):
    url = services.mariadb_url
    table = _table(url, "myisam", engine="MyISAM")
    for guarantee in (Guarantee.EXACTLY_ONCE, Guarantee.AT_LEAST_ONCE):
        with pytest.raises(InvalidOptionError, match=rf"storage engine MyISAM.*TABLE {table} ENGINE=InnoDB"):
            _plan(url, table, table_name("myisam"), guarantee=guarantee)
    plain = _plan(url, table, table_name("myisam"), guarantee=Guarantee.NONE)  # nothing to roll back
    msg = plain.new_writer().write(iter([_kv([7])]), TaskInfo(new_query_id(), 0, 0, 0, 1))
    assert msg.rows == 1 and query(url, f"SELECT id FROM {table}") == [(7,)]


def test_an_unknown_dialect_is_refused_listing_the_supported_ones():
    for url in ("jdbc:oracle:thin:@//host:1521/db", "sqlite:///x.db", "jdbc:sqlserver://h:1433"):
        with pytest.raises(InvalidOptionError) as info:
            parse_url(url, None, None)
        assert "PostgreSQL, MariaDB and MySQL" in str(info.value) and "jdbc:mariadb://" in str(info.value)
    assert parse_url("jdbc:mariadb://h:3307/db?user=u", None, "pw").render_as_string(False) == \
        "mysql+pymysql://u:pw@h:3307/db"
    assert parse_url("mariadb://u@h/db", None, None).drivername == "mysql+pymysql"
    with pytest.raises(InvalidOptionError, match=r"useSSL.*ssl_ca"):  # never clear text by mistake
        parse_url("jdbc:mysql://h:3306/db?useSSL=true", None, None)


def _tls_url(services, ca: str, **query: str) -> str:
    url = parse_url(services.mariadb_url, None, None)
    return url.update_query_dict({"ssl_ca": str(services.pki / ca), **query}).render_as_string(
        hide_password=False)


def test_a_certificate_the_client_refuses_fails_at_start_in_seconds_naming_ssl_ca(services):
    """A CA in the URL is what the server is checked with: a server certificate signed by
    another CA is refused at start, in seconds (never retried as a server still starting,
    for reconnectTimeoutMs), naming ssl_ca and the host; nothing is written. PyMySQL alone
    would check nothing with ``ssl_ca`` and no ``ssl_verify_cert``."""
    table = _table(services.mariadb_url, "tlsca")
    t0 = time.monotonic()
    with pytest.raises(ConnectorError) as info:
        _plan(_tls_url(services, "other-ca.pem"), table, table_name("tlsca"))
    assert time.monotonic() - t0 < 15, "retried as a server not up yet"
    text = str(info.value)
    assert "ssl_ca" in text and "127.0.0.1" in text and "certificate verify failed" in text, text
    assert "reconnectTimeoutMs" not in text, text
    assert query(services.mariadb_url, f"SELECT count(*) FROM {table}") == [(0,)]


def test_the_right_ca_verifies_the_server_and_writes(services):
    """The local CA that signed the server's certificate: TLS is verified and rows land."""
    table = _table(services.mariadb_url, "tlsok")
    plain = _plan(_tls_url(services, "ca.pem"), table, table_name("tlsok"), guarantee=Guarantee.NONE)
    msg = plain.new_writer().write(iter([_kv([1, 2])]), TaskInfo(new_query_id(), 0, 0, 0, 1))
    assert msg.rows == 2
    assert query(services.mariadb_url, f"SELECT id FROM {table} ORDER BY id") == [(1,), (2,)]
    cipher = query(_tls_url(services, "ca.pem"), "SHOW SESSION STATUS LIKE 'Ssl_cipher'")
    assert cipher and cipher[0][1], "the session was not encrypted"


def test_a_wrong_password_fails_at_once_naming_the_fix_and_not_the_password(services):
    url = parse_url(services.mariadb_url, None, None)
    bad = url._replace(password="wrong-Secret-42").render_as_string(hide_password=False)
    t0 = time.monotonic()
    with pytest.raises(ConnectorError) as info:
        _plan(bad, "t", table_name("pw"))
    assert time.monotonic() - t0 < 30  # not the reconnect wait
    assert "Access denied" in str(info.value) and "passwordFile" in str(info.value)
    assert "wrong-Secret-42" not in str(info.value)


def test_doctor_and_status_list_and_resolve_in_doubt_xa_transactions(services, capsys):
    url = services.mariadb_url
    table = _table(url, "dr")
    sink_id, qid = table_name("doctor"), new_query_id()
    plan = _plan(url, table, sink_id)
    decided = plan.new_writer().write(iter([_kv([1, 2])]), TaskInfo(qid, 0, 0, 0, 1))
    undecided = plan.new_writer().write(iter([_kv([3])]), TaskInfo(qid, 1, 0, 0, 2))
    committer = plan.new_committer()
    with committer.connected():  # as if the driver died after deciding
        committer.record(Batch(0, (decided,), plan.claim))
    assert cli.main(["doctor", "jdbc", "list", "--url", url, "--sink", sink_id]) == 0
    listed = capsys.readouterr().out
    assert f"gid={decided.gid}" in listed and "state=decided: commit" in listed
    assert f"gid={undecided.gid}" in listed and "state=undecided" in listed
    assert cli.main(["status", "jdbc", "--url", url, "--sink", sink_id, "--json"]) == 0
    out = capsys.readouterr().out
    assert '"in_doubt": 2' in out and '"finished": false' in out
    assert str(parse_url(url, None, None).password) not in out + listed
    assert cli.main(["doctor", "jdbc", "resolve", "--url", url, "--sink", sink_id]) == 0
    assert prepared(url, sink_id) == []
    assert [r[0] for r in query(url, f"SELECT id FROM {table} ORDER BY id")] == [1, 2]


@pytest.mark.restarts_services
def test_a_server_killed_with_batches_prepared_keeps_them_and_the_restart_is_exactly_once(services, tmp_path):
    """kill -9 of the server while a batch is prepared and decided and the next one only
    prepared: XA PREPARE is durable (redo log and binary log), so after the restart the
    take-over commits the decided winners and rolls back the rest, and the replay of the
    undecided batch writes its rows once."""
    from services.common import LOCAL

    url = services.mariadb_url
    table = _table(url, "srvkill")
    sink_id, qid = table_name("srvkill"), new_query_id()
    plan = _plan(url, table, sink_id)
    decided = plan.new_writer().write(iter([_kv([1, 2])]), TaskInfo(qid, 0, 0, 0, 1))
    undecided = plan.new_writer().write(iter([_kv([3])]), TaskInfo(qid, 1, 0, 0, 2))
    committer = plan.new_committer()
    with committer.connected():
        committer.record(Batch(0, (decided,), plan.claim))
    pid = int((LOCAL / "mariadb.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    up = subprocess.run([sys.executable, "-m", "services", "up", "mariadb"], capture_output=True, text=True,
                        timeout=180)
    assert up.returncode == 0, driver_report(up)
    assert sorted(prepared(url, sink_id)) == sorted([str(decided.gid), str(undecided.gid)])
    again = _plan(url, table, sink_id)  # the restarted query's take-over
    assert prepared(url, sink_id) == [] and again.claim.fence > plan.claim.fence
    assert [r[0] for r in query(url, f"SELECT id FROM {table} ORDER BY id")] == [1, 2]
    replay = again.new_writer().write(iter([_kv([3])]), TaskInfo(qid, 1, 0, 0, 3))
    again.new_committer().commit([replay], 1, again.claim)
    assert [r[0] for r in query(url, f"SELECT id FROM {table} ORDER BY id")] == [1, 2, 3]
