"""What operators do between two runs of a query: move its checkpoint, change the sink's
name. The query (Spark's query id, kept in the checkpoint) must end correct, or be
refused with the option that makes it correct, never written twice or left in doubt.
Every sink's refusal of a copy and the way out its message names run in the sink
conformance suite's kill sequence (``make test``); here, in ``make faults`` (marker
campaign), what only Kafka does beyond it: its prefix belongs to one checkpoint, so the
old location finishes first and a later copy, taken then, goes on."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.support.kafka_sink import consume, open_transactions, prefix_of
from tests.support.kafka_util import create_topic
from tests.support.pg_util import write_json_files
from tests.support.processes import driver_report

pytestmark = [pytest.mark.spark, pytest.mark.services, pytest.mark.campaign]


def test_a_kafka_checkpoint_copied_after_a_decision_is_refused_until_the_old_run_finished(services, tmp_path):
    """A Kafka exactly_once query killed right after batch 1's decision, the checkpoint
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
    assert crashed.returncode == -9, driver_report(crashed)
    assert values() == list(range(40)) and len(open_transactions(bootstrap, prefix_of(old))) == 3
    shutil.copytree(old, new)

    refused = subprocess.run([*argv(new), "-"], capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0, "the copy ran on as a new sink: " + driver_report(refused)
    assert f"transactionalIdPrefix '{prefix_of(old)}'" in refused.stderr, driver_report(refused)
    assert open_transactions(bootstrap, prefix_of(new)) == []

    finished = subprocess.run([*argv(old), "-"], capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, driver_report(finished)
    assert values() == list(range(120))
    shutil.rmtree(new)
    shutil.copytree(old, new)
    write_json_files(tmp_path / "src", [40], start=120)
    moved = subprocess.run([*argv(new), "-"], capture_output=True, text=True, timeout=300)
    assert moved.returncode == 0, driver_report(moved)
    assert values() == list(range(160))
    assert open_transactions(bootstrap, prefix_of(old)) == open_transactions(bootstrap, prefix_of(new)) == []
