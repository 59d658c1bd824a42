"""``batch_df.write.format("hzsink")`` inside ``foreachBatch`` against the real PostgreSQL,
Kafka and Artemis: a function writing every batch to all three, killed between and inside
its writes after earlier batches committed, lands every id once in each system; a replay
of a decided batch writes nothing on every connector; bad input fails at ``save()``."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_ext import failpoints
from tests.support import mysql_util, pg_util
from tests.support.processes import driver_report
from tests.support.routing import Targets

pytestmark = [pytest.mark.spark, pytest.mark.services]

BATCH = 30


def _writes(t: Targets, base: str, guarantee: str = "exactly_once") -> dict[str, dict[str, str]]:
    """One write per system, in this order; ids ``<base>--<name>``, as Targets reads them."""
    s = t.s
    return {
        "ledger": {"select": "id,v", "connector": "jdbc", "url": s.postgres_url, "dbtable": t.table,
                   "sinkId": f"{base}--ledger", "guarantee": guarantee},
        "alerts": {"select": "key,value", "connector": "kafka", "kafka.bootstrap.servers": s.kafka_bootstrap,
                   "topic": t.topic, "transactionalIdPrefix": f"{base}--alerts", "guarantee": guarantee},
        "notes": {"select": "body", "connector": "jms", "host": s.stomp_host, "port": str(s.stomp_port),
                  "user": s.stomp_user, "password": s.stomp_password, "destination": t.queue,
                  "sinkId": f"{base}--notes", "guarantee": guarantee},
    }


def _run(tmp: Path, writes: dict[str, dict[str, str]],
         failpoint: str = "-") -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tests.drivers.files_to_foreach_batch", str(tmp / "src"), str(tmp / "ckpt"),
            failpoint, *(f"{n}.{k}={v}" for n, opts in writes.items() for k, v in opts.items())]
    env = {**os.environ, failpoints.LOG_ENV: str(tmp / "struck.log")}
    return subprocess.run(argv, start_new_session=True, capture_output=True, text=True, timeout=600, env=env)


_BETWEEN = ("jdbc.after_done",)  # make test: the first write committed, the other two not begun
_INSIDE = ("kafka.after_decision", "jms.after_decision", "jdbc.after_decision", "kafka.after_done",
           "jms.mid_commit")


@pytest.mark.parametrize("points", [
    pytest.param(_BETWEEN, id="between-writes"),
    pytest.param(_INSIDE, id="inside-each-write", marks=pytest.mark.campaign),
])
def test_kill_9_in_a_foreach_batch_function_lands_each_id_once_in_every_system(services, tmp_path, points):
    """Point k strikes in batch k, after batches 0..k-1 committed everywhere. After each
    crash every system holds the earlier batches and at most the struck batch, none twice;
    the restart replays the struck batch (Spark runs it again) and the writes it had
    decided write nothing, so after the last run every id is in every system once."""
    t = Targets(services)
    pg_util.write_json_files(tmp_path / "src", [BATCH] * (len(points) + 2))
    base = f"fb-{uuid.uuid4().hex[:12]}"
    writes = _writes(t, base)
    for batch, point in enumerate(points, start=1):
        crashed = _run(tmp_path, writes, f"{point}@{batch}")
        assert crashed.returncode == -9, f"{point}: {driver_report(crashed)}"
        assert f"{point}@{batch}" in (tmp_path / "struck.log").read_text()
        for name, ids in t.committed().items():
            before, this = list(range(batch * BATCH)), set(range(batch * BATCH, (batch + 1) * BATCH))
            assert ids[:len(before)] == before, f"{point}: {name} lost or doubled earlier batches: {ids}"
            rest = ids[len(before):]
            assert len(set(rest)) == len(rest) and set(rest) <= this, f"{point}: {name}: {rest}"
    done = _run(tmp_path, writes)
    assert done.returncode == 0, driver_report(done)
    every = list(range((len(points) + 2) * BATCH))
    assert t.committed() == {"ledger": every, "alerts": every, "notes": every}
    assert t.in_doubt(base) == []


def _write(spark: Any, df: Any, opts: dict[str, str], **ids: str) -> None:
    own = dict(opts)
    cols = own.pop("select").split(",")
    df.select(*cols).write.format("hzsink").options(**own, **ids).mode("append").save()


def _rows(spark: Any, first: int, n: int) -> Any:
    return spark.range(first, first + n, numPartitions=3).selectExpr(
        "id", "concat('v', id) AS v", "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value",
        "CAST(id AS STRING) AS body")


@pytest.mark.parametrize("name", [pytest.param("ledger", marks=pytest.mark.compat),
                                  pytest.param("alerts", marks=pytest.mark.campaign),
                                  pytest.param("notes", marks=pytest.mark.campaign), "routing"])
def test_a_replay_of_a_decided_batch_writes_nothing_on_every_connector(spark, services, name):
    """Hand-driven, with the ids given as options (as under Spark Connect): batch 0 lands,
    batch 0 again writes nothing, batch 1 lands, and batch 0 of a new query (its
    checkpoint deleted: Spark gives it a new id) lands too."""
    t = Targets(services)
    base = f"fb-{uuid.uuid4().hex[:12]}"
    if name == "routing":
        opts = {"select": "sink,id,v,key,value,body", **t.options(sinkId=base)}
        data = [_rows(spark, i * 10, 10).selectExpr(
            "CASE id % 3 WHEN 0 THEN 'ledger' WHEN 1 THEN 'alerts' ELSE 'notes' END AS sink", "*")
            for i in range(3)]
    else:
        opts = _writes(t, base)[name]
        data = [_rows(spark, i * 10, 10) for i in range(3)]

    def landed() -> list[int]:
        return sorted(i for ids in t.committed().values() for i in ids)

    _write(spark, data[0], opts, batchId="0", queryId="q-1")
    assert landed() == list(range(10))
    _write(spark, data[1], opts, batchId="0", queryId="q-1")  # a replay: other rows, same batch
    assert landed() == list(range(10))
    _write(spark, data[1], opts, batchId="1", queryId="q-1")
    assert landed() == list(range(20))
    _write(spark, data[2], opts, batchId="0", queryId="q-2")
    assert landed() == list(range(30))
    assert t.in_doubt(base) == []


def _error(fn: Any) -> str:
    with pytest.raises(Exception) as e:
        fn()
    return str(e.value)


def test_bad_batch_writes_fail_at_save_naming_the_fix(spark, services):
    t = Targets(services)
    base = f"fb-{uuid.uuid4().hex[:12]}"
    ledger = _writes(t, base)["ledger"]
    df = _rows(spark, 0, 5)
    no_id = {k: v for k, v in ledger.items() if k != "sinkId"}
    assert "needs .option('sinkId', ...)" in _error(lambda: _write(spark, df, no_id, batchId="0"))
    kafka = {k: v for k, v in _writes(t, base)["alerts"].items() if k != "transactionalIdPrefix"}
    refused = _error(lambda: _write(spark, df, kafka, batchId="0"))
    assert "needs .option('transactionalIdPrefix', ...)" in refused
    assert "batchId is 'x'" in _error(lambda: _write(spark, df, ledger, batchId="x"))
    overwrite = _error(lambda: df.select("id", "v").write.format("hzsink").options(
        **{k: v for k, v in ledger.items() if k != "select"}).mode("overwrite").save())
    assert "use mode('append')" in overwrite
    # Outside foreachBatch nothing names the batch: the tasks refuse before writing.
    outside = _error(lambda: _write(spark, df, ledger))
    assert "no batchId and queryId" in outside and "inside foreachBatch" in outside
    assert pg_util.query(services.postgres_url, f"SELECT count(*) FROM {t.table}") == [(0,)]
    assert pg_util.prepared(services.postgres_url, f"{base}--ledger") == []


def test_a_batch_id_other_than_the_running_batch_is_refused(spark, services, tmp_path):
    """Inside foreachBatch, an option naming another batch is a mistake: refused, nothing written."""
    t = Targets(services)
    ledger = _writes(t, f"fb-{uuid.uuid4().hex[:12]}")["ledger"]
    pg_util.write_json_files(tmp_path / "src", [5])
    errors: list[str] = []

    def each_batch(batch_df: Any, batch_id: int) -> None:
        df = batch_df.selectExpr("id", "v")
        opts = {**ledger, "select": "id,v"}
        errors.append(_error(lambda: _write(spark, df, opts, batchId=str(batch_id + 7))))

    q = (spark.readStream.schema("id long, v string").json(str(tmp_path / "src")).writeStream
         .foreachBatch(each_batch).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert len(errors) == 1, errors
    assert "option batchId is 7, but Spark runs this write for batchId 0" in errors[0], errors
    assert pg_util.query(services.postgres_url, f"SELECT count(*) FROM {t.table}") == [(0,)]


def test_two_writes_to_one_database_in_one_batch_both_land(spark, services):
    """A function's writes are several sinks of one query: the second jdbc write of a batch
    is not taken for a copied checkpoint of the first (the predecessor check)."""
    first, second = Targets(services), Targets(services)
    base = f"fb-{uuid.uuid4().hex[:12]}"
    for batch in (0, 1):
        df = _rows(spark, batch * 10, 10)
        _write(spark, df, _writes(first, base + "a")["ledger"], batchId=str(batch), queryId="q-same")
        _write(spark, df, _writes(second, base + "b")["ledger"], batchId=str(batch), queryId="q-same")
    assert first.committed()["ledger"] == second.committed()["ledger"] == list(range(20))


def _same_id_twice(spark: Any, src: Path, ckpt: Path, first: dict[str, str],
                   second: dict[str, str]) -> None:
    """A foreachBatch function writing each batch twice: with ``first``'s options, then ``second``'s."""
    def each_batch(batch_df: Any, batch_id: int) -> None:
        df = batch_df.selectExpr(
            "CASE id % 3 WHEN 0 THEN 'ledger' WHEN 1 THEN 'alerts' ELSE 'notes' END AS sink", "id", "v",
            "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value", "CAST(id AS STRING) AS body")
        _write(spark, df, first)
        _write(spark, df, second)

    q = (spark.readStream.schema("id long, v string").json(str(src)).writeStream.foreachBatch(each_batch)
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination()


@pytest.mark.parametrize("name", ["ledger", pytest.param("mariadb", marks=pytest.mark.campaign),
                                  pytest.param("alerts", marks=pytest.mark.campaign),
                                  pytest.param("notes", marks=pytest.mark.campaign), "routing"])
def test_a_second_write_under_one_id_in_a_batch_fails_the_query_naming_the_fix(spark, services, tmp_path,
                                                                                 name):
    """Two writes of one function under one sink id: the second would pass for a replay of
    the first and write nothing. The query fails in batch 0 naming the id and the fix, the
    first write's rows land once; restarted with an id of its own, the second write
    lands the batch's rows too (Spark runs batch 0 again)."""
    t, t2 = Targets(services), Targets(services)
    base = f"fb-{uuid.uuid4().hex[:12]}"
    if name == "routing":
        opts, fixed = ({"select": "sink,id,v,key,value,body", **x.options(sinkId=b)}
                       for x, b in ((t, base), (t2, base + "b")))
    elif name == "mariadb":
        tables = [pg_util.table_name("fbmy") for _ in range(2)]
        for table in tables:
            mysql_util.execute(services.mariadb_url, f"CREATE TABLE {table} (id bigint, v text)")
        opts, fixed = ({**_writes(t, b)["ledger"], "url": services.mariadb_url, "dbtable": table}
                       for b, table in zip((base, base + "b"), tables, strict=True))
    else:
        opts, fixed = _writes(t, base)[name], _writes(t2, base + "b")[name]

    def landed(targets: Targets, write: dict[str, str]) -> list[int]:
        if name == "mariadb":
            rows = mysql_util.query(services.mariadb_url, f"SELECT id FROM {write['dbtable']}")
            return sorted(r[0] for r in rows)
        return sorted(i for ids in targets.committed().values() for i in ids)

    pg_util.write_json_files(tmp_path / "src", [12])
    with pytest.raises(Exception) as failed:
        _same_id_twice(spark, tmp_path / "src", tmp_path / "ckpt", opts, opts)
    said = str(failed.value)
    option = "transactionalIdPrefix" if name == "alerts" else "sinkId"
    assert "already written in this run" in said and f".option('{option}'" in said, said
    assert landed(t, opts) == list(range(12))
    _same_id_twice(spark, tmp_path / "src", tmp_path / "ckpt", opts, fixed)
    assert landed(t, opts) == list(range(12))
    assert landed(t2, fixed) == list(range(12))
    if name == "mariadb":
        assert [mysql_util.prepared(services.mariadb_url, w["sinkId"]) for w in (opts, fixed)] == [[], []]
    else:
        assert t.in_doubt(base) == [] and t2.in_doubt(base + "b") == []
