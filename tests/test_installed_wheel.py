"""The built wheel, installed with one connector's extra into a fresh virtualenv, runs a
job of that connector, and a job naming another connector fails at start with the extra.

The job runs from a directory outside the checkout with no ``PYTHONPATH``, so PySpark's
workers import the installed wheel, never the repository.
"""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from bench.common import read_to_end
from tests.drivers import installed_kafka_job
from tests.support import kafka_util
from tests.support.processes import driver_report
from tests.support.wheel import build_wheel

pytestmark = [pytest.mark.spark, pytest.mark.services]
ROOT = Path(__file__).resolve().parent.parent


def _venv_with_wheel(tmp: Path, extra: str) -> Path:
    wheel = build_wheel(tmp)
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # PYTHONPATH (the checkout, for the suite's own workers) would show pip the editable install.
    # --no-compile: the job imports a small part of PySpark; byte-compiling all of it at
    # install took 14.7 s against 7.1 s without (the test: 38-42 s, then 34 s).
    res = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", f"{wheel}[{extra}]"],
                         env=_outside_env(), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, driver_report(res)
    return py


def _outside_env() -> dict[str, str]:
    """This environment without what points into the checkout or the suite's virtualenv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV")}


def test_wheel_with_the_kafka_extra_runs_kafka_and_names_the_extra_for_jdbc(services, tmp_path: Path):
    py = _venv_with_wheel(tmp_path, "kafka")
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True,
                            env=_outside_env(), text=True, check=True).stdout.lower()
    assert "spark-ext==" in listed and "kafka-python" in listed
    assert "psycopg2" not in listed and "sqlalchemy" not in listed and "stomp.py" not in listed

    src = kafka_util.create_topic(services.kafka_bootstrap, 2, "wheel-in")
    dst = kafka_util.create_topic(services.kafka_bootstrap, 2, "wheel-out")
    kafka_util.produce(services.kafka_bootstrap, src, kafka_util.numbered(2, 300))
    work = tmp_path / "job"
    work.mkdir()
    script = work / "job.py"
    script.write_text(Path(installed_kafka_job.__file__).read_text())
    env = _outside_env()
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(py)

    args = [services.kafka_bootstrap, src, dst, str(tmp_path / "ck")]
    ran = subprocess.run([str(py), str(script), *args], cwd=work, env=env, capture_output=True, text=True,
                         timeout=400)
    assert ran.returncode == 0, driver_report(ran) + _spark_error(ran.stderr)
    assert "ROWS 300" in ran.stdout
    c = KafkaConsumer(bootstrap_servers=services.kafka_bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False)
    try:
        got = sorted(bytes(r.value) for r in read_to_end(c, dst, timeout_s=60))
    finally:
        c.close()
    assert got == sorted(v for _, _, v in kafka_util.numbered(2, 300) if v is not None)
    # the second query of the job names the PostgreSQL sink, whose extra is not installed
    assert "QUERY FAILED" in ran.stdout, driver_report(ran)
    assert "pip install 'spark-ext[postgres]'" in ran.stdout, driver_report(ran)


def _spark_error(stderr: str) -> str:
    """The lines of a failed job's log that say what failed, not the JVM's stack frames."""
    return "\n".join(line for line in stderr.splitlines() if not line.lstrip().startswith("at "))[-4000:]
