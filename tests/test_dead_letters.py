"""Dead letters against the real PostgreSQL and Kafka: rows the table refuses for their own
sake (too long, a NUL byte, a check constraint, a duplicate key) land in the dead-letter
destination with their error, the good rows in the table, under one decision a batch;
killed with kill -9 at the decision's steps after committed batches, every input row is in
exactly one place, once; errors of the system are not dead-lettered; a cap fails the batch."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import sqlalchemy as sa
from pyspark.errors import StreamingQueryException

from spark_ext.connectors.jdbc.doctor import sink_status
from spark_ext.connectors.jdbc.writer import row_error
from tests.support import kafka_sink, kafka_util, pg_util
from tests.support.deadletters import FIRST as _FIRST
from tests.support.deadletters import OTHERS as _OTHERS
from tests.support.deadletters import run as _run
from tests.support.processes import driver_report

pytestmark = [pytest.mark.spark, pytest.mark.services]

BATCH = 40


def _poison(i: int) -> str | None:
    """The bad value of row ``i``, if it is one of the poison rows (two of each kind a batch)."""
    kind = i % BATCH
    return {3: "x" * 20, 11: "bad", 17: "nul\u0000byte", 23: "x" * 9, 29: "bad", 31: "a\u0000"}.get(kind)


def _files(src: Path, batches: int) -> None:
    """One JSON file a batch: ``{"id", "v"}``; each batch also repeats the previous batch's
    first id (a duplicate key) once."""
    import time
    src.mkdir(parents=True, exist_ok=True)
    base = time.time() - 1000
    for b in range(batches):
        ids = range(b * BATCH, (b + 1) * BATCH)
        rows = [{"id": i, "v": _poison(i) or f"v{i}"} for i in ids]
        if b:
            rows.append({"id": (b - 1) * BATCH, "v": "again"})
        f = src / f"f{b:03d}.json"
        f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.utime(f, (base + b, base + b))


def _expected(batches: int) -> tuple[list[int], list[tuple[int, str]]]:
    """(ids in the table, (id, SQLSTATE) of the dead letters)."""
    good, dead = [], []
    for i in range(batches * BATCH):
        v = _poison(i)
        if v is None:
            good.append(i)
        else:
            dead.append((i, "23514" if v == "bad" else "22021" if "\u0000" in v else "22001"))
    dead += [((b - 1) * BATCH, "23505") for b in range(1, batches)]
    return good, sorted(dead)


class Target:
    def __init__(self, services: Any) -> None:
        self.url = services.postgres_url
        self.table = pg_util.table_name("dl_target")
        self.dlq = pg_util.table_name("dl_dead")
        pg_util.execute(self.url, f"CREATE TABLE {self.table} (id bigint PRIMARY KEY, "
                                  "v varchar(8) CHECK (v <> 'bad'))")
        self.sink_id = f"dl-{uuid.uuid4().hex[:12]}"

    def options(self, **more: str) -> dict[str, str]:
        return {"connector": "jdbc", "url": self.url, "dbtable": self.table, "sinkId": self.sink_id,
                "deadLetter.connector": "jdbc", "deadLetter.url": self.url, "deadLetter.dbtable": self.dlq,
                "deadLetter.createTable": "true", **more}

    def landed(self) -> tuple[list[int], list[tuple[int, str]]]:
        good = [r[0] for r in pg_util.query(self.url, f"SELECT id FROM {self.table} ORDER BY id")]
        try:
            rows = pg_util.query(self.url, f"SELECT row, error_code, sink_id FROM {self.dlq}")
        except sa.exc.ProgrammingError:  # the dead-letter table comes with the first dead letter's batch
            rows = []
        assert all(s == self.sink_id for _, _, s in rows)
        return good, sorted((json.loads(r)["id"], code) for r, code, _ in rows)

    def in_doubt(self) -> list[str]:
        return (pg_util.prepared(self.url, f"{self.sink_id}--target")
                + pg_util.prepared(self.url, f"{self.sink_id}--dead"))




@pytest.mark.parametrize("points", [
    pytest.param(_FIRST, id="after-the-decision"),
    pytest.param(_OTHERS, id="every-other-step", marks=pytest.mark.campaign),
])
def test_kill_9_with_dead_letters_leaves_every_row_in_one_place_once(services, tmp_path, points):
    """Point k strikes in batch k, after batches 0..k-1 committed (their dead letters too);
    after the last run every row is in the table or the dead letters, once, with its
    SQLSTATE, and nothing is in doubt."""
    t = Target(services)
    n = len(points) + 2
    _files(tmp_path / "src", n)
    for batch, point in enumerate(points, start=1):
        crashed = _run(tmp_path, t.options(), f"{point}@{batch}")
        assert crashed.returncode == -9, f"{point}: {driver_report(crashed)}"
        good, dead = t.landed()
        assert len(set(good)) == len(good) and len(set(dead)) == len(dead), point
        want_good, want_dead = _expected(batch)
        assert set(want_good) <= set(good) and set(want_dead) <= set(dead), point
    done = _run(tmp_path, t.options())
    assert done.returncode == 0, driver_report(done)
    assert t.landed() == _expected(n)
    # What an operator reads in the driver's log, per batch that set rows aside, and in status:
    assert "committed 7 refused row(s) as dead letters (sub-sink 'dead'); the first: " in done.stderr
    assert re.search(rf"committed batch={n - 1} .* rows=41 .* dead_letters=7 ", done.stderr)
    assert t.in_doubt() == []
    [status] = sink_status(t.url, "public", t.sink_id)
    assert (status.batch, status.finished, status.dead_letters) == (n - 1, True, 7)


def test_dead_letters_to_kafka_and_a_cap(spark, services, tmp_path):
    """Any connector takes the dead letters: here a Kafka topic (JSON documents, read
    committed). With maxDeadLetters below a batch's refused rows the batch fails naming
    the count and the first error, and nothing of it is committed anywhere."""
    t = Target(services)
    topic = kafka_util.create_topic(services.kafka_bootstrap, 2, "dlq")
    _files(tmp_path / "src", 2)
    kafka = {k: v for k, v in t.options().items() if not k.startswith("deadLetter.")}
    kafka.update({"deadLetter.connector": "kafka", "deadLetter.topic": topic,
                  "deadLetter.kafka.bootstrap.servers": services.kafka_bootstrap})

    def run(opts: dict[str, str], ckpt: str) -> Any:
        df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(
            str(tmp_path / "src"))
        q = (df.writeStream.format("hzsink").options(**opts)
             .option("checkpointLocation", str(tmp_path / ckpt)).trigger(availableNow=True).start())
        try:
            q.awaitTermination()
        except StreamingQueryException:
            pass  # read below
        return q.exception()

    capped = run({**kafka, "maxDeadLetters": "5"}, "ck-capped")
    assert capped is not None and "6 rows refused, more than maxDeadLetters 5" in str(capped), capped
    assert "the first: " in str(capped)
    capped = run({**kafka, "maxDeadLetterRatio": "0.1"}, "ck-ratio")  # 6 of 40 rows
    assert capped is not None and "6 rows refused, 15.00% of its 40 rows, more than maxDeadLetterRatio 0.1" \
        in str(capped), capped
    assert pg_util.query(t.url, f"SELECT count(*) FROM {t.table}") == [(0,)]
    assert kafka_sink.consume(services.kafka_bootstrap, topic) == []
    assert t.in_doubt() == []

    assert run(kafka, "ck") is None
    good, _ = t.landed()
    docs = [json.loads(v) for _, _, v in kafka_sink.consume(services.kafka_bootstrap, topic)]
    want_good, want_dead = _expected(2)
    assert good == want_good
    assert sorted((json.loads(d["row"])["id"], d["error_code"]) for d in docs) == want_dead
    assert {d["sink_id"] for d in docs} == {t.sink_id}
    assert all(d["error_class"] and d["error_message"] and d["batch_id"] in (0, 1) for d in docs)


def test_a_query_stopped_by_a_refused_row_goes_on_with_dead_letters_from_its_checkpoint(spark, services,
                                                                                        tmp_path):
    """What an operator does when a row stops the query: restart it from the same checkpoint
    with a dead-letter destination. The failed batch was never decided, so it is written
    then, each row once, in the table or the dead letters."""
    t = Target(services)
    _files(tmp_path / "src", 2)
    plain = {k: v for k, v in t.options().items() if not k.startswith("deadLetter.") and k != "sinkId"}

    def run(opts: dict[str, str]) -> Any:
        df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(
            str(tmp_path / "src"))
        q = (df.writeStream.format("hzsink").options(**opts)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        try:
            q.awaitTermination()
        except StreamingQueryException:
            pass  # read below
        return q.exception()

    stopped = run(plain)
    assert stopped is not None and "value too long" in str(stopped), stopped
    assert run({**plain, **{k: v for k, v in t.options().items() if k.startswith("deadLetter.")}}) is None
    good = [r[0] for r in pg_util.query(t.url, f"SELECT id FROM {t.table} ORDER BY id")]
    rows = pg_util.query(t.url, f"SELECT row, error_code FROM {t.dlq}")
    dead = sorted((json.loads(r)["id"], c) for r, c in rows)
    assert (good, dead) == _expected(2)


def test_only_row_errors_are_dead_lettered(services):
    """What PostgreSQL itself says: data exceptions and constraint violations belong to the
    row; a missing table, a syntax error or a lost connection do not."""
    url = services.postgres_url
    table = pg_util.table_name("dl_class")
    pg_util.execute(url, f"CREATE TABLE {table} (id int PRIMARY KEY, v varchar(2) CHECK (v <> 'no'))")
    eng = pg_util.engine(url)

    def error(sql: str) -> psycopg2.Error:
        conn = eng.raw_connection()
        try:
            cur = conn.cursor()
            cur.execute(f"INSERT INTO {table} VALUES (1, 'a')")
            cur.execute(sql)
        except psycopg2.Error as e:
            return e
        finally:
            conn.close()
        raise AssertionError(f"no error from {sql}")

    for sql in (f"INSERT INTO {table} VALUES (2, 'toolong')", f"INSERT INTO {table} VALUES (1, 'b')",
                f"INSERT INTO {table} VALUES (3, 'no')", f"INSERT INTO {table} VALUES (99999999999, 'a')"):
        assert row_error(error(sql)), sql
    for sql in (f"INSERT INTO {table}_missing VALUES (1)", "SELEC 1",
                "SELECT pg_terminate_backend(pg_backend_pid())"):
        assert not row_error(error(sql)), sql
    eng.dispose()


def _error_line(text: str) -> str:
    """The sink's own error in a failed query's message (not the traceback's code lines)."""
    return next((line for line in text.splitlines() if "spark_ext.errors." in line), text)


def test_refused_at_start_naming_the_fix(spark, services, tmp_path):
    t = Target(services)
    _files(tmp_path / "src", 1)
    df = spark.readStream.schema("id long, v string").json(str(tmp_path / "src"))

    def start_error(opts: dict[str, str], rows: Any = df) -> str:
        """The query fails as it starts, before any batch: Spark builds the sink's writer then."""
        q = rows.writeStream.format("hzsink").options(**opts).option(
            "checkpointLocation", str(tmp_path / uuid.uuid4().hex)).trigger(availableNow=True).start()
        with pytest.raises(StreamingQueryException) as e:
            q.awaitTermination(120)
        return str(e.value)

    assert "drop upsertKeys or the dead-letter options" in start_error(t.options(upsertKeys="id"))
    assert "maxDeadLetters is checked when a batch is decided" in start_error(
        t.options(maxDeadLetters="3", guarantee="at_least_once"))
    nested = {"connector": "routing", "sinks.a.connector": "jdbc", "sinks.a.url": t.url,
              "sinks.a.dbtable": t.table, "sinks.a.deadLetter.connector": "jdbc"}
    routed = df.selectExpr("'a' AS sink", "id", "v")
    assert "dead letters are not set per sub-sink" in start_error(nested, routed)
    kafka = services.kafka_bootstrap
    kafka_only = {"connector": "kafka", "kafka.bootstrap.servers": kafka, "topic": "unused",
                  "deadLetter.connector": "kafka", "deadLetter.kafka.bootstrap.servers": kafka,
                  "deadLetter.topic": "unused-dlq"}
    assert "write the dead letters to PostgreSQL" in start_error(kafka_only, df.selectExpr("v AS value"))
    # a MariaDB table with dead letters in Kafka: the real reason, in the options the user wrote
    from tests.support import mysql_util

    mtable = pg_util.table_name("dl_maria")
    mysql_util.execute(services.mariadb_url, f"CREATE TABLE {mtable} (id bigint, v longtext)")
    maria = {"connector": "jdbc", "url": services.mariadb_url, "dbtable": mtable,
             "sinkId": f"dlm-{uuid.uuid4().hex[:12]}", "deadLetter.connector": "kafka",
             "deadLetter.kafka.bootstrap.servers": kafka, "deadLetter.topic": "unused-dlq"}
    said = _error_line(start_error(maria))
    assert "MariaDB and MySQL" in said and "write the dead letters to PostgreSQL" in said, said
    assert "decider" not in said and "sub-sink" not in said, said
    # a dead-letter table that is missing: the hint names the option as the user writes it
    uncreated = {k: v for k, v in t.options().items() if k != "deadLetter.createTable"}
    missing = _error_line(start_error(uncreated))
    assert "'deadLetter.createTable'" in missing and "dead-letter destination" in missing, missing
    assert "sub-sink" not in missing and "'dead'" not in missing, missing
    no_connector = {k: v for k, v in t.options().items() if k != "deadLetter.connector"}
    assert "needs option 'deadLetter.connector'" in start_error(no_connector)
    assert "maxDeadLetters needs a dead-letter destination" in start_error(
        {k: v for k, v in t.options(maxDeadLetters="3").items() if not k.startswith("deadLetter.")})
    ratio = start_error(t.options(maxDeadLetterRatio="5%"))
    assert "expected a fraction of a batch's rows from 0 to 1" in ratio


@pytest.mark.parametrize("system_error", ["lock-timeout", "session-ended"])
def test_a_system_error_mid_write_fails_the_task_instead_of_setting_rows_aside(services, system_error):
    """After a first Arrow batch that had rows refused, PostgreSQL refuses the second for
    the system's sake: a row lock another session holds outlives the sink's lock timeout
    (SQLSTATE 55P03, the connection lives on), or the task's session is ended as a shutdown
    or a failover ends it (57P01). The task fails, for Spark to retry; no row is taken for a
    dead letter for it, and nothing commits."""
    import psycopg2
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    from sqlalchemy.engine import make_url

    from spark_ext.commit import TaskInfo
    from spark_ext.connectors.jdbc import JdbcSink
    from spark_ext.deadletters import SetsAside
    from spark_ext.errors import ConnectorError
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    t = Target(services)
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    opts = {"url": t.url, "dbtable": t.table, "sinkid": t.sink_id, "locktimeoutms": "500"}
    plan = JdbcSink().plan(Options(opts, "hzsink"), schema, Guarantee.EXACTLY_ONCE)
    writer = plan.new_writer()
    assert isinstance(writer, SetsAside)
    writer.refused = []
    u = make_url(t.url)
    holder = psycopg2.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                              dbname=u.database)
    ended: list[int] = []

    def part(lo: int) -> pa.RecordBatch:
        ids = list(range(lo, lo + 100))
        return pa.record_batch({"id": pa.array(ids, pa.int64()),
                                "v": pa.array([_poison(i) or f"v{i}" for i in ids])})

    def rows():
        yield part(0)
        if system_error == "lock-timeout":
            with holder.cursor() as cur:  # uncommitted: the sink's row 150 waits on it
                cur.execute(f"INSERT INTO {t.table} VALUES (150, 'held')")
        else:
            for (pid,) in pg_util.query(t.url, "SELECT pid FROM pg_stat_activity WHERE application_name "
                                        "LIKE :n", n=f"spark-ext {t.sink_id}%"):
                pg_util.query(t.url, "SELECT pg_terminate_backend(:pid)", pid=pid)
                ended.append(pid)
            assert ended, "the task's session was not found"
        yield part(100)

    try:
        with pytest.raises(ConnectorError) as e:
            writer.write(rows(), TaskInfo(f"q-{uuid.uuid4().hex}", 0, 0, 0, 1))
    finally:
        holder.rollback()
        holder.close()
    said = {"lock-timeout": "lock timeout", "session-ended": "server closed the connection"}[system_error]
    assert said in str(e.value), e.value
    aside = {r.row.to_pylist()[0]["id"] for r in writer.refused}
    assert {i for i in range(100) if _poison(i)} <= aside  # the first batch's, set aside before
    assert all(_poison(i) for i in aside), sorted(i for i in aside if not _poison(i))  # never row 150
    assert pg_util.query(t.url, f"SELECT count(*) FROM {t.table}") == [(0,)]
    assert t.in_doubt() == []


def test_undecodable_queue_messages_are_routed_aside(spark, services, tmp_path):
    """The documented example (docs/connectors/dead-letters.md), against the real broker
    and database: messages that are not the JSON the query expects, or not UTF-8 at all,
    land in a table of their own with their raw bytes, the others in the ledger, each once;
    every message is acknowledged after its batch committed."""
    from pyspark.sql import functions as F

    from tests.support.jms import jms
    from tests.support.stomp_util import drain, queue_name, send

    url, dest = services.postgres_url, queue_name("undecodable")
    ledger, undecodable = pg_util.table_name("dl_ledger"), pg_util.table_name("dl_undecodable")
    pg_util.execute(url, f"CREATE TABLE {ledger} (payment_id text, account text, amount numeric(18,2))")
    good = [json.dumps({"payment_id": f"p{i}", "account": f"a{i}", "amount": f"{i}.50"}) for i in range(3)]
    send(services, dest, [good[0].encode(), b"{not json", good[1].encode(), b"\xff\xfe\x00garbage",
                          good[2].encode()])

    schema = "payment_id string, account string, amount decimal(18,2)"
    routed = (jms(spark, services, dest)
              .withColumn("p", F.from_json("body_text", schema))
              .withColumn("sink", F.when(F.col("p.payment_id").isNull(), "undecodable").otherwise("ledger"))
              .select("sink", "p.*", "message_id", "body"))
    q = (routed.writeStream.format("hzsink").option("connector", "routing")
         .option("sinks.ledger.connector", "jdbc").option("sinks.ledger.url", url)
         .option("sinks.ledger.dbtable", ledger).option("sinks.ledger.columns", "payment_id,account,amount")
         .option("sinks.undecodable.connector", "jdbc").option("sinks.undecodable.url", url)
         .option("sinks.undecodable.dbtable", undecodable)
         .option("sinks.undecodable.columns", "message_id,body")
         .option("sinks.undecodable.createTable", "true")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert sorted(pg_util.query(url, f"SELECT payment_id, account, amount::text FROM {ledger}")) == [
        (f"p{i}", f"a{i}", f"{i}.50") for i in range(3)]
    aside = sorted(bytes(b) for (b,) in pg_util.query(url, f"SELECT body FROM {undecodable}"))
    assert aside == sorted([b"{not json", b"\xff\xfe\x00garbage"])
    assert drain(services, dest) == []


def test_a_10000_row_stream_with_three_poison_rows_of_each_kind(spark, services, tmp_path):
    """At a user's shape (2,500 rows a batch, 8 tasks): three rows too long for varchar(32),
    three with a NUL byte, three against a check constraint and three duplicate keys in
    append mode (of a key an earlier batch committed), among 10,000. The bisection finds
    exactly those twelve; 9,988 rows land in the table, twelve in the dead letters, each
    with its SQLSTATE."""
    url = services.postgres_url
    table, dlq = pg_util.table_name("dl_shape"), pg_util.table_name("dl_shape_dead")
    pg_util.execute(url, f"CREATE TABLE {table} (id bigint PRIMARY KEY, v varchar(32) CHECK (v <> 'bad'))")
    kinds = {"long": "22001", "nul": "22021", "bad": "23514", "dup": "23505"}
    poison = {11: "long", 4000: "long", 9990: "long", 12: "nul", 5000: "nul", 9000: "nul",
              13: "bad", 2600: "bad", 7777: "bad", 2700: "dup", 5150: "dup", 8200: "dup"}
    src = tmp_path / "src"
    src.mkdir()
    for b in range(4):
        rows = []
        for i in range(b * 2500, (b + 1) * 2500):
            kind = poison.get(i)
            value = {"long": "x" * 33, "nul": "a\u0000b", "bad": "bad"}.get(kind or "", f"v{i}")
            rows.append({"id": i - 2500 if kind == "dup" else i, "v": value, "n": i})  # a committed key
        (src / f"f{b}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(src / f"f{b}.json", (1_000_000 + b, 1_000_000 + b))
    df = spark.readStream.schema("id long, v string, n long").option("maxFilesPerTrigger", 1).json(str(src))
    q = (df.repartition(8, "n").select("id", "v").writeStream.format("hzsink")
         .option("connector", "jdbc").option("url", url).option("dbtable", table)
         .option("deadLetter.connector", "jdbc").option("deadLetter.url", url)
         .option("deadLetter.dbtable", dlq).option("deadLetter.createTable", "true")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    good = [r[0] for r in pg_util.query(url, f"SELECT id FROM {table} ORDER BY id")]
    letters = pg_util.query(url, f"SELECT row, error_code FROM {dlq}")
    dead = sorted((json.loads(r)["id"], c) for r, c in letters)
    assert sorted(set(good) ^ {i for i in range(10_000) if i not in poison}) == []
    assert len(good) == 9988 and len(dead) == 12
    assert dead == sorted((i - 2500 if k == "dup" else i, kinds[k]) for i, k in poison.items())


def test_a_key_twice_in_one_batch_fails_naming_the_cause_instead_of_setting_rows_aside(services):
    """Two tasks of one batch write the same key: the second waits on the first's prepared
    row, which stays locked until the batch is decided, so it can only time out. That is
    no row's fault: the task fails (not a dead letter), naming duplicates in the batch."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from spark_ext.commit import TaskInfo
    from spark_ext.connectors.jdbc import JdbcSink
    from spark_ext.deadletters import SetsAside
    from spark_ext.errors import ConnectorError
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    t = Target(services)
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    opts = {"url": t.url, "dbtable": t.table, "sinkid": t.sink_id, "locktimeoutms": "300"}
    plan = JdbcSink().plan(Options(opts, "hzsink"), schema, Guarantee.EXACTLY_ONCE)
    qid = f"q-{uuid.uuid4().hex}"

    def rows(ids: range) -> pa.RecordBatch:
        return pa.record_batch({"id": pa.array(list(ids), pa.int64()), "v": pa.array([f"v{i}" for i in ids])})

    first = plan.new_writer().write(iter([rows(range(0, 10))]), TaskInfo(qid, 0, 0, 0, 1))
    second = plan.new_writer()
    assert isinstance(second, SetsAside)
    second.refused = []
    try:
        with pytest.raises(ConnectorError, match="a key written twice in one batch always times out"):
            second.write(iter([rows(range(5, 15))]), TaskInfo(qid, 0, 1, 0, 2))
        assert second.refused == []
    finally:
        plan.new_committer().abort([first], 0, plan.claim)
    assert t.in_doubt() == []


def test_a_deferred_foreign_key_sets_the_row_aside_instead_of_failing_every_prepare(services):
    """A foreign key declared ``DEFERRABLE INITIALLY DEFERRED`` is checked when the
    transaction ends, at PREPARE: the whole batch failed there, no dead letter, and every
    restart failed the same way. With dead letters the writer checks constraints as each
    statement ends, so the row that breaks it is set aside like any constraint violation."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    from spark_ext.commit import TaskInfo
    from spark_ext.connectors.jdbc import JdbcSink
    from spark_ext.deadletters import SetsAside
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    url = services.postgres_url
    parent, child = pg_util.table_name("dl_parent"), pg_util.table_name("dl_child")
    pg_util.execute(url, f"CREATE TABLE {parent} (id bigint PRIMARY KEY); "
                    f"INSERT INTO {parent} VALUES (1), (2); "
                    f"CREATE TABLE {child} (id bigint, parent bigint REFERENCES {parent} (id) "
                    "DEFERRABLE INITIALLY DEFERRED)")
    schema = StructType([StructField("id", LongType()), StructField("parent", LongType())])
    sink_id = f"dlfk-{uuid.uuid4().hex[:12]}"
    plan = JdbcSink().plan(Options({"url": url, "dbtable": child, "sinkid": sink_id}, "hzsink"), schema,
                           Guarantee.EXACTLY_ONCE)
    writer = plan.new_writer()
    assert isinstance(writer, SetsAside)
    writer.refused = []
    rows = pa.record_batch({"id": pa.array([10, 11, 12], pa.int64()),
                            "parent": pa.array([1, 99, 2], pa.int64())})
    msg = writer.write(iter([rows]), TaskInfo(f"q-{uuid.uuid4().hex}", 0, 0, 0, 1))
    assert [r.row.to_pylist() for r in writer.refused] == [[{"id": 11, "parent": 99}]]
    assert writer.refused[0].error_code == "23503"  # foreign_key_violation
    plan.new_committer().commit([msg], 0, plan.claim)
    assert pg_util.query(url, f"SELECT id FROM {child} ORDER BY id") == [(10,), (12,)]
    assert pg_util.prepared(url, sink_id) == []
