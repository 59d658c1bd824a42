"""The PySpark internals spark-ext relies on (``spark_ext/compat.py``), checked against the
installed PySpark. A failure names the assumption a PySpark upgrade broke: fix it in
``spark_ext/compat.py``."""

from __future__ import annotations

import importlib.util
import json

import pytest

from spark_ext import compat
from tests.protocol_probe import ProbeSink


def test_the_commit_runner_module_exists():
    assert importlib.util.find_spec(compat.COMMIT_RUNNER) is not None, (
        f"PySpark no longer has {compat.COMMIT_RUNNER}: sinks cannot tell a commit worker from a "
        "planning worker; fix compat.in_commit_runner")


def test_in_commit_runner_recognises_the_runner_by_module_name():
    assert compat.in_commit_runner() is False
    scope: dict[str, object] = {"__name__": compat.COMMIT_RUNNER, "compat": compat}
    exec("def probe():\n    return compat.in_commit_runner()\n", scope)
    assert scope["probe"]() is True  # type: ignore[operator]


def test_arrow_schema_helpers_round_trip_a_timestamp():
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType

    schema = StructType([StructField("t", TimestampType()), StructField("n", LongType())])
    arrow = compat.to_arrow_schema(schema)
    assert str(arrow.field("t").type) == "timestamp[us, tz=UTC]", (
        "pyspark.sql.pandas.types.to_arrow_schema changed its timestamp mapping; fix compat")
    assert compat.from_arrow_schema(arrow) == schema


@pytest.mark.spark
def test_streaming_sink_assumptions_hold_in_a_real_query(spark, tmp_path):
    spark.dataSource.register(ProbeSink)
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    for i in range(2):
        (src / f"f{i}.json").write_text(json.dumps({"id": i}) + "\n")
    q = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(src))
         .writeStream.format("protocolprobe").option("out", str(out))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert q.awaitTermination(180), "the query did not finish"
    assert q.exception() is None, q.exception()

    commits = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    tasks = [c for e in commits for c in e["committables"]]
    assert [e["batch_id"] for e in commits] == [0, 1]
    assert sorted({c["batch_id"] for c in tasks}) == [0, 1], (
        f"task property {compat.BATCH_ID_PROPERTY!r} no longer carries the micro-batch id; fix compat")
    assert {c["query_id"] for c in tasks} == {q.id}, (
        f"task property {compat.QUERY_ID_PROPERTY!r} no longer carries the query id; fix compat")

    writers = [json.loads(x) for x in (out / "writers.jsonl").read_text().splitlines()]
    runner = [w["in_commit_runner"] for w in writers]
    assert runner.count(True) == len(commits), (
        "streamWriter is no longer called from the commit runner once per commit; "
        f"compat.in_commit_runner saw {runner}")
    assert runner.count(False) >= len(commits), "planning calls of streamWriter were taken for commits"
    assert all(compat.CHECKPOINT_OPTION in w["options"] for w in writers), (
        f"sink options no longer include {compat.CHECKPOINT_OPTION!r}; sinks derive their ids from it")
