"""The windows' own state (``state_location``) under crashes, in real Spark queries: a
replayed batch, a retried task, old versions purged."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from tests.support.processes import driver_report
from tests.support.windows_data import in_order_batches, write_files

pytestmark = [pytest.mark.spark]


def test_a_replayed_batch_and_a_retried_task_give_the_windows_of_one_uninterrupted_run(spark, tmp_path):
    """The driver is killed once a bucket wrote batch 2's version, before Spark recorded the
    batch: the restart replays batch 2, which must start from batch 1's version, not the
    one it wrote itself. Then a task of batch 3 dies after writing its version (Spark
    retries it, so batch 3 has two). The windows equal Spark's over the same events, each
    once, and each bucket keeps only the newest two versions."""
    from pyspark.sql import functions as F

    batches = in_order_batches(21, 6, 300)
    write_files(tmp_path / "src", batches)
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "tests.drivers.files_to_windows", str(tmp_path / "src"),
            str(tmp_path / "ckpt"), str(tmp_path / "out")]
    env = {**os.environ, "SPARK_EXT_FAILPOINT_LOG": str(tmp_path / "struck")}
    crashed = subprocess.run([*argv, "windows.state_written@2", str(state)], start_new_session=True,
                             capture_output=True, text=True, timeout=300, env=env)
    assert crashed.returncode == -9, driver_report(crashed)
    [query] = list(state.iterdir())
    buckets = list((query / "windows").iterdir())  # the aggregation's metrics name, then its buckets
    written = {int(f.name[:20]) for d in buckets for f in d.iterdir()}
    assert 2 in written and not (tmp_path / "ckpt" / "commits" / "2").exists()
    done = subprocess.run([*argv, "task:windows.state_written@3", str(state)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, driver_report(done)
    assert "task:windows.state_written@3" in (tmp_path / "struck").read_text()

    events = [r for rows in batches for r in rows]
    df = spark.createDataFrame(events, "account string, ts double, amount long") \
        .withColumn("ts", F.col("ts").cast("timestamp"))
    ref = (df.groupBy("account", F.window("ts", "30 seconds", "10 seconds"))
           .agg(F.count("*").alias("n"), F.sum("amount").alias("total"), F.max("amount").alias("top"))
           .select("account", "window.start", "window.end", "n", "total", "top").where("account != '~flush'"))
    got = [tuple(r) for r in spark.read.parquet(str(tmp_path / "out")).where("account != '~flush'").collect()]
    assert got and Counter(got) == Counter(tuple(r) for r in ref.collect())
    last = max(int(f.name) for f in (tmp_path / "ckpt" / "commits").iterdir() if f.name.isdigit())
    for bucket in buckets:
        assert {int(f.name[:20]) for f in bucket.iterdir()} <= {last - 1, last}, sorted(bucket.iterdir())
