"""The payments pipeline end to end, as ``make cluster-demo`` runs it (issue 17): the
environment packed and shipped to a standalone cluster, spark-submit, a kill -9 of the job
after committed output, a restart from the checkpoint, and the verification against the
real Kafka and PostgreSQL. (``make demo`` is the same runner with a local master; the
suite covers local spark-submit in test_submit.py.) The job is launched with
``--packages`` naming the companion jar, so the windows fold in the JVM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.services]
ROOT = Path(__file__).resolve().parent.parent


def _run(module: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    res = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    return out


def _verified(out: str) -> None:
    lines = out.splitlines()
    for item in ("duplicates: 0", "lost: 0", "in doubt: 0", "kill -9 and restart: 1", "verification: passed"):
        assert any(line.startswith(item) for line in lines), (item, out[-3000:])


@pytest.mark.campaign  # two minutes of the suite: make faults runs it; test_submit.py keeps spark-submit
def test_cluster_demo_ships_the_environment_to_a_standalone_cluster(services) -> None:
    """Also the companion jar as users name it: spark-submit --packages with this release's
    coordinate, from a directory outside the checkout; the windows query folds in the JVM
    (SPARK_EXT_WINDOWS_FOLD=jvm: it fails without the jar) and its windows verify."""
    from spark_ext import release
    from spark_ext.windows import native

    env_fold = os.environ.pop(native.ENV, None)  # the demo's own default (jvm) must hold
    try:
        out = _run("examples.payments.cluster", "--count", "5000", "--rate", "800", "--workers", "1")
    finally:
        if env_fold is not None:
            os.environ[native.ENV] = env_fold
    assert "cluster up at spark://127.0.0.1:" in out
    assert f"--packages {release.coordinate()} job.py" in out
    [logs] = [line.rsplit("logs in ", 1)[1] for line in out.splitlines() if "logs in " in line]
    assert not Path(logs).resolve().is_relative_to(ROOT), logs
    _verified(out)
