"""The commit protocol in a real Spark query: the batch id and query id agree on both
sides, every task's committable reaches the driver's commit, and a restart from the
checkpoint continues with the same query id and the next batch id."""

from __future__ import annotations

import json

import pytest

from tests.support.protocol_probe import ProbeSink

pytestmark = pytest.mark.spark


def _start(spark, src, ckpt, out, **options):
    df = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(src))
    w = (df.repartition(2).writeStream.format("protocolprobe").option("out", str(out))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True))
    for k, v in options.items():
        w = w.option(k, v)
    return w.start()


def _run(spark, src, ckpt, out):
    q = _start(spark, src, ckpt, out)
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None
    return q.id


def _inputs(tmp_path, sizes):
    spark_dirs = tmp_path / "in", tmp_path / "ckpt", tmp_path / "out"
    src, _, out = spark_dirs
    src.mkdir()
    out.mkdir()
    start = 0
    for i, n in enumerate(sizes):
        (src / f"f{i}.json").write_text("".join(json.dumps({"id": start + k}) + "\n" for k in range(n)))
        start += n
    return spark_dirs


def test_commit_messages_carry_task_identity_to_the_driver(spark, tmp_path):
    spark.dataSource.register(ProbeSink)
    sizes = [3, 5, 7]
    src, ckpt, out = _inputs(tmp_path, sizes)

    query_id = _run(spark, src, ckpt, out)

    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in log] == ["commit"] * 3
    assert [e["batch_id"] for e in log] == [0, 1, 2]
    for entry, n in zip(log, sizes, strict=True):
        cs = entry["committables"]
        assert sorted(c["partition_id"] for c in cs) == [0, 1]  # one per task
        assert all(c["batch_id"] == entry["batch_id"] for c in cs)  # executor and driver agree
        assert all(c["query_id"] == query_id for c in cs)
        assert sum(c["rows"] for c in cs) == n

    # Restart from the same checkpoint with one more file: same query id, next batch id.
    (src / "f3.json").write_text(json.dumps({"id": 100}) + "\n")
    assert _run(spark, src, ckpt, out) == query_id
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e["batch_id"] for e in log] == [0, 1, 2, 3]
    assert all(c["query_id"] == query_id for c in log[-1]["committables"])
    assert sum(c["rows"] for c in log[-1]["committables"]) == 1


def test_failed_task_aborts_the_batch_and_fails_the_query(spark, tmp_path):
    spark.dataSource.register(ProbeSink)
    src, ckpt, out = _inputs(tmp_path, [2, 2, 2])
    q = _start(spark, src, ckpt, out, fail_batch="1")
    with pytest.raises(Exception, match="probe: failing batch 1 on purpose"):
        assert q.awaitTermination(180), "still running after 180 s"
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["batch_id"]) for e in log] == [("commit", 0), ("abort", 1)]
    # The failed task sent no message; the other task (it succeeded first) is named for abort.
    assert [c["partition_id"] for c in log[1]["committables"]] == [1]
