"""The PySpark internals spark-ext relies on (``spark_ext/compat.py``), checked against the
installed PySpark, one test per assumption. A failure names the assumption a PySpark upgrade
broke and says where to fix it: ``spark_ext/compat.py``, nowhere else."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark_ext import compat
from spark_ext.options import checkpoint_identity

pytestmark = pytest.mark.compat  # run on every supported release (make test-compat)


def broke(what: str, fix: str) -> str:
    return (f"PySpark {pyspark.__version__} changed {what}; spark_ext/compat.py {fix} "
            f"(checked on PySpark {compat.PYSPARK_CHECKED})")


# ---- unit level -------------------------------------------------------------------------------

def test_running_pyspark_is_a_supported_release():
    assert compat.check_version() is None, (
        f"{compat.check_version()}. Once every test marked compat passes on this release "
        "(make test-compat PYSPARK=<it>), add it to spark_ext/compat.py SUPPORTED")


def test_admission_control_is_known_for_the_running_release():
    """Spark passes a Python source its start offset and read limit from 4.2 on, and
    ``pyspark.sql.streaming.datasource`` arrived with it: compat tells one from the other."""
    release = tuple(int(x) for x in pyspark.__version__.split(".")[:2])
    since = tuple(int(x) for x in compat.ADMISSION_CONTROL_RELEASE.split("."))
    assert compat.HAS_ADMISSION_CONTROL is (release >= since), broke(
        "where the admission control API lives", "HAS_ADMISSION_CONTROL: import it from where it is now")
    runner = importlib.util.find_spec("pyspark.sql.streaming.python_streaming_source_runner")
    assert runner is not None and runner.origin is not None
    text = Path(runner.origin).read_text()
    if compat.HAS_ADMISSION_CONTROL:
        # the runner tells a reader with admission control by latestOffset's parameters
        assert "LATEST_OFFSET_ADMISSION_CONTROL_FUNC_ID" in text and "sig.parameters" in text, broke(
            "how the source runner detects admission control", "the readers' latestOffset signatures")
    else:
        assert "reader.latestOffset()" in text, broke(
            "how the source runner calls latestOffset", "the readers' latestOffset signatures")


def test_check_version_warns_and_does_not_raise_on_another_version(monkeypatch):
    monkeypatch.setattr(pyspark, "__version__", "9.9.0")
    text = compat.check_version()
    assert text is not None and "9.9.0" in text and compat.PYSPARK_CHECKED in text


def test_the_commit_runner_module_exists():
    assert importlib.util.find_spec(compat.COMMIT_RUNNER) is not None, broke(
        f"or removed the module {compat.COMMIT_RUNNER}",
        "in_commit_runner() can no longer tell a commit worker from a planning worker: find the "
        "module that now calls a streaming sink's commit/abort and set COMMIT_RUNNER")


def _call_from(scope: dict[str, Any], filename: str = "<probe>") -> bool:
    """compat.in_commit_runner() called one frame below a function whose globals are ``scope``."""
    scope["__builtins__"] = __builtins__
    exec(compile("def run(fn):\n    return fn()\n", filename, "exec"), scope)
    return bool(scope["run"](lambda: compat.in_commit_runner()))


def test_in_commit_runner_is_false_in_a_normal_call():
    assert compat.in_commit_runner() is False, "in_commit_runner() is True outside the commit runner"


@pytest.mark.parametrize("how", ["module name", "__spec__.name", "file name of __main__"])
def test_in_commit_runner_recognises_the_runner(how):
    runner_file = "/x/pyspark/sql/worker/python_streaming_sink_runner.py"
    if how == "module name":
        found = _call_from({"__name__": compat.COMMIT_RUNNER})
    elif how == "__spec__.name":
        found = _call_from({"__name__": "__main__",
                            "__spec__": importlib.machinery.ModuleSpec(compat.COMMIT_RUNNER, None)})
    else:
        found = _call_from({"__name__": "__main__"}, runner_file)
    assert found is True, f"spark_ext/compat.py in_commit_runner() no longer finds the runner by {how}"


def test_task_identity_is_none_outside_a_task():
    assert compat.task_identity() is None, broke(
        "TaskContext.get() outside a task (no longer None)", "task_identity() must return None there")


def test_arrow_schema_helpers_round_trip_timestamps():
    from pyspark.sql.types import LongType, StructField, TimestampNTZType, TimestampType

    schema = StructType([StructField("t", TimestampType()), StructField("ntz", TimestampNTZType()),
                         StructField("n", LongType())])
    try:
        arrow = compat.to_arrow_schema(schema)
        back = compat.from_arrow_schema(arrow)
    except (ImportError, TypeError) as e:
        pytest.fail(broke(f"pyspark.sql.pandas.types.to_arrow_schema/from_arrow_schema ({e!r})",
                          "to_arrow_schema/from_arrow_schema: import them from where they are now"))
    assert str(arrow.field("t").type) == "timestamp[us, tz=UTC]", broke(
        f"to_arrow_schema's timestamp mapping (now {arrow.field('t').type})", "to_arrow_schema")
    assert str(arrow.field("ntz").type) == "timestamp[us]", broke(
        f"to_arrow_schema's timestamp_ntz mapping (now {arrow.field('ntz').type})", "to_arrow_schema")
    assert back == schema, broke(f"from_arrow_schema's mapping ({back.simpleString()})", "from_arrow_schema")


# ---- Spark level: a real streaming query into a probe sink ------------------------------------
# Spark pickles the sink to Python workers by reference to this module (tests.test_compat);
# conftest puts the repository on the workers' PYTHONPATH.

def _record(out: str, entry: dict[str, Any]) -> None:
    with open(Path(out) / "calls.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


@dataclass(frozen=True)
class _Seen(WriterCommitMessage):
    identity: compat.TaskIdentity | None


class _ProbeWriter(DataSourceStreamWriter):
    def __init__(self, out: str) -> None:
        self.out = out

    def write(self, iterator: Iterator[Any]) -> _Seen:
        for _ in iterator:
            pass
        return _Seen(compat.task_identity())

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        tasks = [asdict(m.identity) if isinstance(m, _Seen) and m.identity else None for m in messages]
        _record(self.out, {"call": "commit", "batch_id": batchId, "tasks": tasks,
                           "in_commit_runner": compat.in_commit_runner()})

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        _record(self.out, {"call": "abort", "batch_id": batchId})


class _CompatProbeSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "compatprobe"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        out = self.options["out"]
        _record(out, {"call": "streamWriter", "in_commit_runner": compat.in_commit_runner(),
                      "options": {k: v for k, v in self.options.items() if k != "out"}})
        return _ProbeWriter(out)


@pytest.mark.spark
def test_streaming_sink_assumptions_hold_in_a_real_query(spark, tmp_path):
    spark.dataSource.register(_CompatProbeSink)
    src, out, ckpt = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    src.mkdir()
    out.mkdir()
    for i in range(2):
        (src / f"f{i}.json").write_text(json.dumps({"id": i}) + "\n")
    q = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(src))
         .writeStream.format("compatprobe").option("out", str(out)).option("MixedCase", "1")
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    assert q.awaitTermination(180) is True, "the AvailableNow query did not finish in 180 s"
    assert not q.isActive and q.exception() is None, q.exception()

    calls = [json.loads(x) for x in (out / "calls.jsonl").read_text().splitlines()]
    commits = [c for c in calls if c["call"] == "commit"]
    assert [c["batch_id"] for c in commits] == [0, 1], f"expected commits of batches 0 and 1: {calls}"
    for c in commits:
        tasks = c["tasks"]
        assert tasks and all(t is not None for t in tasks), broke(
            "TaskContext in a sink's write() (task_identity() was None)", "task_identity()")
        assert all(isinstance(t["batch_id"], int) and t["batch_id"] == c["batch_id"] for t in tasks), broke(
            f"the task local property {compat.BATCH_ID_PROPERTY!r}: task batch ids "
            f"{[t['batch_id'] for t in tasks]} in the commit of batch {c['batch_id']}",
            "BATCH_ID_PROPERTY")
        assert all(t["query_id"] == q.id for t in tasks), broke(
            f"the task local property {compat.QUERY_ID_PROPERTY!r}: task query ids "
            f"{sorted({t['query_id'] for t in tasks})}, query.id {q.id!r}", "QUERY_ID_PROPERTY")
        assert all(t["run_id"] == q.runId for t in tasks), broke(
            f"the task local properties {compat.JOB_GROUP_PROPERTY!r} and "
            f"{compat.JOB_DESCRIPTION_PROPERTY!r}: task run ids {sorted({t['run_id'] for t in tasks})}, "
            f"query.runId {q.runId!r}", "run_id_of()")
        ids = ("partition_id", "attempt", "task_attempt_id")
        assert all(isinstance(t[k], int) for t in tasks for k in ids), broke(
            f"TaskContext's partitionId/attemptNumber/taskAttemptId ({tasks})", "task_identity()")
    assert all(c["in_commit_runner"] for c in commits), broke(
        f"where a streaming sink's commit() runs (not under {compat.COMMIT_RUNNER})",
        "COMMIT_RUNNER / in_commit_runner()")

    writers = [c for c in calls if c["call"] == "streamWriter"]
    runner = [w["in_commit_runner"] for w in writers]
    assert runner.count(True) == len(commits), broke(
        f"how streamWriter() is called to run commits (in_commit_runner() per call: {runner})",
        "in_commit_runner()")
    assert runner.count(False) >= len(commits), broke(
        f"how streamWriter() is called to plan batches (in_commit_runner() per call: {runner})",
        "in_commit_runner()")
    for w in writers:
        names = list(w["options"])
        assert "mixedcase" in names and all(n == n.lower() for n in names), broke(
            f"the case of a data source's option names ({names})",
            "CHECKPOINT_OPTION (and spark_ext/options.py, which assumes lower-case names)")
        assert checkpoint_identity(w["options"].get(compat.CHECKPOINT_OPTION, "")) == \
            checkpoint_identity(str(ckpt)), broke(
            f"a streaming sink's options: no {compat.CHECKPOINT_OPTION!r} naming the checkpoint ({names})",
            "CHECKPOINT_OPTION")
