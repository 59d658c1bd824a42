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


@pytest.mark.campaign  # make faults: a demo run (test_jvm_exporter.py keeps the listener in make test)
def test_the_unchanged_payments_job_serves_metrics_from_spark_submit_settings_alone(tmp_path) -> None:
    """The demo with ``--metrics-chart`` turns the exporter on by ``--conf`` alone (the companion
    jar's listener; the job is given no metrics option) and scrapes it once a second through the
    kill -9 and the restart: the query's batches, its Kafka lag and the routing sink's rows."""
    import csv

    # 10,000 payments, 4,000 a batch (the job's cap): the restart's first batch leaves a lag.
    out = _run("examples.payments.demo", "--count", "10000", "--rate", "2000", "--work-dir", str(tmp_path),
               "--metrics-chart", str(tmp_path / "metrics.png"))
    _verified(out)
    [job] = [line for line in out.splitlines() if "; job: spark-submit" in line]
    assert "streamingQueryListeners=dev.sparkext.monitoring.MetricsListener" in job, job
    assert "--metrics-port" not in out
    [samples] = tmp_path.glob("*/metrics.csv")
    rows = [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(samples.open())]
    served = [r for r in rows if r["up"] == 1 and "batch_id" in r]
    assert len(served) >= 3, rows
    batches = [r["batch_id"] for r in served]
    assert max(batches) >= 2, batches
    assert any(r.get("lag_records_max", 0) > 0 for r in rows), "no Kafka lag was ever seen"
    assert max(r.get("sink_rows_total", 0) for r in rows) > 0  # the routing sink's rows, all four sub-sinks
    assert any(r["up"] == 0 for r in rows[rows.index(served[0]):]), "the kill -9 left no gap in the scrapes"
