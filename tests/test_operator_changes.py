"""What operators do between two runs of a query: move its checkpoint, change the sink's
name. The query (Spark's query id, kept in the checkpoint) must end correct, or be
refused with the option that makes it correct, never written twice or left in doubt."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from spark_ext.options import checkpoint_sink_id
from tests.support.kafka_sink import consume, open_transactions, prefix_of
from tests.support.kafka_util import create_topic
from tests.support.pg_util import execute, prepared, query, table_name, write_json_files

pytestmark = [pytest.mark.spark, pytest.mark.services]


def _ids(url: str, table: str) -> list[int]:
    return [r[0] for r in query(url, f"SELECT id FROM {table} ORDER BY id")]


def test_a_checkpoint_copied_after_a_decision_carries_the_old_sink_on(services, tmp_path):
    """A PostgreSQL exactly_once query dies right after batch 1's decision (before Spark's
    commit log 1); its checkpoint is copied to another path and the query restarted from
    the copy (same query id, a new sink id from the new path). Before: the copy wrote batch 1
    afresh as a new sink and the old sink's three decided transactions stayed prepared for
    ever (a later resolve of the old sink would write batch 1 twice). Now the copy is
    refused at its first batch, naming the old sink and the option; restarted with that
    sinkId it finishes the old decision: every row once, nothing in doubt."""
    url = services.postgres_url
    table = table_name("moved")
    execute(url, f"CREATE TABLE {table} (id bigint, v text)")
    write_json_files(tmp_path / "src", [100, 200, 50])
    old, new = tmp_path / "ckpt", tmp_path / "moved" / "ckpt"

    def argv(ckpt) -> list[str]:
        return [sys.executable, "-m", "tests.drivers.files_to_jdbc", str(tmp_path / "src"), str(ckpt), url,
                table]

    crashed = subprocess.run([*argv(old), "jdbc.after_decision@1"], start_new_session=True,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    old_sink = checkpoint_sink_id(str(old))
    assert _ids(url, table) == list(range(100)) and len(prepared(url, old_sink)) == 3
    shutil.copytree(old, new)

    refused = subprocess.run([*argv(new), "-"], capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0, "the copy ran on as a new sink: " + refused.stderr[-2000:]
    assert f"ran before as sink '{old_sink}'" in refused.stderr, refused.stderr[-3000:]
    assert f".option('sinkId', '{old_sink}')" in refused.stderr
    assert _ids(url, table) == list(range(100))  # nothing of the refused batch landed
    assert prepared(url, checkpoint_sink_id(str(new))) == []

    done = subprocess.run([*argv(new), "-", f"sinkId={old_sink}"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _ids(url, table) == list(range(350))
    assert prepared(url, old_sink) == [] and prepared(url, checkpoint_sink_id(str(new))) == []


def test_a_kafka_checkpoint_copied_after_a_decision_is_refused_until_the_old_run_finished(services, tmp_path):
    """The same with the Kafka sink: killed right after batch 1's decision, the checkpoint
    copied, the query restarted from the copy (a new transactional-id prefix). Before: the
    copy wrote batches 1 and 2 afresh while the old prefix's decided transactions stayed
    open, holding every read_committed consumer at batch 0 until the broker timed them
    out (then batch 1 would be lost from the old run's side, or, had they committed,
    written twice). Now the copy is refused naming the old prefix and checkpoint; the old
    path restarted finishes batch 1, and a fresh copy then goes on: every record once."""
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 3, "moved")
    write_json_files(tmp_path / "src", [40, 40, 40])
    old, new = tmp_path / "ckpt", tmp_path / "moved" / "ckpt"

    def argv(ckpt) -> list[str]:
        return [sys.executable, "-m", "tests.drivers.files_to_kafka", str(tmp_path / "src"), str(ckpt),
                bootstrap, topic]

    def values() -> list[int]:
        return sorted(int(v) for _, _, v in consume(bootstrap, topic))

    crashed = subprocess.run([*argv(old), "kafka.after_decision@1"], start_new_session=True,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert values() == list(range(40)) and len(open_transactions(bootstrap, prefix_of(old))) == 3
    shutil.copytree(old, new)

    refused = subprocess.run([*argv(new), "-"], capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0, "the copy ran on as a new sink: " + refused.stderr[-2000:]
    assert f"transactionalIdPrefix '{prefix_of(old)}'" in refused.stderr, refused.stderr[-3000:]
    assert open_transactions(bootstrap, prefix_of(new)) == []

    finished = subprocess.run([*argv(old), "-"], capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert values() == list(range(120))
    shutil.rmtree(new)
    shutil.copytree(old, new)
    write_json_files(tmp_path / "src", [40], start=120)
    moved = subprocess.run([*argv(new), "-"], capture_output=True, text=True, timeout=300)
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert values() == list(range(160))
    assert open_transactions(bootstrap, prefix_of(old)) == open_transactions(bootstrap, prefix_of(new)) == []
