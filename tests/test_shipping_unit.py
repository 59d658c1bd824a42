"""Executors without our package get an error that names the fix (issue 17 item 4), and
``configure`` / ``ensure_python_env`` choose the Pythons a cluster needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow
import pytest
from pyspark import cloudpickle

from spark_ext import env
from spark_ext.datasource import HzSink
from spark_ext.errors import ConfigurationError

SITE = str(Path(pyarrow.__file__).resolve().parent.parent)


def _unpickle_elsewhere(payload: bytes, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Unpickle in a Python that has pyarrow and pyspark but not spark-ext (no site hooks,
    so the editable install's path entry is absent), as an executor with a wrong archive."""
    blob = tmp_path / "task.pickle"
    blob.write_bytes(payload)
    code = (f"import sys; sys.path.append({SITE!r}); from pyspark import cloudpickle; "
            f"obj = cloudpickle.loads(open({str(blob)!r}, 'rb').read()); print(obj.options)")
    envs = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, env=envs, capture_output=True,
                          text=True, timeout=60)


def test_an_executor_without_spark_ext_is_told_how_to_ship_it(tmp_path: Path) -> None:
    res = _unpickle_elsewhere(cloudpickle.dumps(HzSink({"connector": "jdbc"})), tmp_path)
    assert res.returncode != 0
    assert "spark-ext cannot run in this executor's Python" in res.stderr
    assert "No module named 'spark_ext'" in res.stderr
    assert "--archives env.tar.gz#environment" in res.stderr
    assert "PYSPARK_PYTHON=./environment/bin/python" in res.stderr


def test_shipped_objects_keep_their_state(tmp_path: Path) -> None:
    sink = cloudpickle.loads(cloudpickle.dumps(HzSink({"connector": "jdbc", "dbtable": "t"})))
    assert isinstance(sink, HzSink) and dict(sink.options) == {"connector": "jdbc", "dbtable": "t"}


class _Builder:
    def __init__(self) -> None:
        self._options: dict[str, str] = {}

    def config(self, key: str, value: str) -> _Builder:
        self._options[key] = value
        return self


def test_configure_ships_the_archive_and_merges_packages(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"x")
    (tmp_path / "environment" / "bin").mkdir(parents=True)
    (tmp_path / "environment" / "bin" / "python").touch()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    b = _Builder().config("spark.jars.packages", "io.delta:delta-spark_2.13:4.0.0")
    env.configure(b, archive=str(archive), packages=["org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0"])
    assert b._options["spark.archives"] == f"{archive}#environment"
    assert b._options["spark.jars.packages"] == (
        "io.delta:delta-spark_2.13:4.0.0,org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0")
    assert os.environ["PYSPARK_PYTHON"] == os.environ["PYSPARK_DRIVER_PYTHON"] == "./environment/bin/python"


def test_configure_adds_the_jvm_companion_jar_to_the_jars() -> None:
    from spark_ext import release as native

    assert native.jar_path().is_file(), "run make jvm"
    b = env.configure(_Builder().config("spark.jars", "/opt/a.jar"))
    assert b._options["spark.jars"] == f"/opt/a.jar,{native.jar_path()}"
    assert env.configure(env.configure(_Builder()))._options["spark.jars"] == str(native.jar_path())
    assert "spark.jars" not in env.configure(_Builder(), native=False)._options


def test_configure_turns_adaptive_execution_off_for_stateless_streaming_unless_set() -> None:
    assert env.configure(_Builder())._options[env.STATELESS_STREAMING_AQE] == "false"
    chosen = _Builder().config(env.STATELESS_STREAMING_AQE, "true")
    assert env.configure(chosen)._options[env.STATELESS_STREAMING_AQE] == "true"
    assert "spark.sql.adaptive.enabled" not in env.configure(_Builder())._options  # batch keeps it


def test_configure_refuses_an_archive_the_driver_cannot_run(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "env.tar.gz"
    archive.write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="unpack the archive here too"):
        env.configure(_Builder(), archive=str(archive))
    with pytest.raises(ConfigurationError, match="venv-pack"):
        env.configure(_Builder(), archive=str(tmp_path / "missing.tar.gz"))


@pytest.mark.parametrize(("setting", "expected"), [
    ({}, sys.executable),
    ({"PYSPARK_SUBMIT_ARGS": "--master local[2] pyspark-shell"}, sys.executable),
    ({"PYSPARK_SUBMIT_ARGS": "--master spark://10.0.0.1:7077 pyspark-shell"}, None),
    ({"MASTER": "yarn"}, None),
    ({"PYSPARK_GATEWAY_PORT": "4242"}, None),  # spark-submit chose the Pythons
])
def test_ensure_python_env_sets_the_interpreter_for_local_masters_only(
        setting: dict[str, str], expected: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS", "MASTER", "SPARK_MASTER",
              "PYSPARK_GATEWAY_PORT"):
        monkeypatch.delenv(k, raising=False)
    for k, v in setting.items():
        monkeypatch.setenv(k, v)
    env.ensure_python_env()
    assert os.environ.get("PYSPARK_PYTHON") == expected
