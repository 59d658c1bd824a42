"""The Kafka sink's decision records outlive the broker's ``offsets.retention.minutes``.

Runs a broker of its own with a one-minute offsets retention (the shared one keeps the
default), so the expiry is the broker's, not a test's deletion. That takes two minutes of
waiting: ``make faults`` runs it (marker broker_clock), ``make test`` does not.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient
from tests.support.kafka_broker import temporary_broker
from tests.support.kafka_sink import consume, open_transactions, prefix_of
from tests.support.kafka_util import create_topic
from tests.support.pg_util import write_json_files
from tests.support.processes import driver_report

pytestmark = [pytest.mark.spark, pytest.mark.services, pytest.mark.broker_clock]

RETENTION = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000"}


def _wait_expired(bootstrap: str, topic: str, prefix: str) -> None:
    """Until the broker dropped the sink's transactional decision record (bounded)."""
    client = KafkaTxnClient(bootstrap, 10.0)
    try:
        deadline = time.monotonic() + 180
        while client.fetch_offsets(f"{prefix}.batches", topic, [0]).get(0, (-1, ""))[0] >= 0:
            assert time.monotonic() < deadline, "the broker never expired the decision record"
            time.sleep(2)
    finally:
        client.close()


def test_a_restart_after_the_decision_records_expired_is_still_exactly_once(services, tmp_path):
    """Two queries crash in batch 1, after batch 0 committed, and stay down until the
    broker has expired their decision records:

    - A dies after batch 1 was fully committed but before Spark's commit log: the
      replay must write nothing of batch 1 again (before the kept copy: 40 duplicates);
    - B dies half-way through batch 1's commits and its other winners time out: the
      restart must stop and name the batch and the doctor, as when the records exist
      (before: it silently rewrote batch 1, duplicating the committed winner).
    """
    with temporary_broker(tmp_path / "broker", RETENTION) as bootstrap:
        runs = {}
        for name, point, extra in [("a", "kafka.after_done@1", []),
                                   ("b", "kafka.mid_commit@1", ["kafka.transaction.timeout.ms=15000"])]:
            topic = create_topic(bootstrap, 3, f"expiry{name}")
            write_json_files(tmp_path / f"src{name}", [40, 40, 40])
            argv = [sys.executable, "-m", "tests.drivers.files_to_kafka", str(tmp_path / f"src{name}"),
                    str(tmp_path / f"ckpt{name}"), bootstrap, topic]
            crashed = subprocess.run([*argv, point, *extra], start_new_session=True, capture_output=True,
                                     text=True, timeout=300)
            assert crashed.returncode == -9, driver_report(crashed)
            runs[name] = (argv, extra, topic, prefix_of(tmp_path / f"ckpt{name}"))

        argv, extra, topic, prefix = runs["a"]
        assert sorted(int(v) for _, _, v in consume(bootstrap, topic)) == list(range(80))
        _wait_expired(bootstrap, topic, prefix)
        done = subprocess.run([*argv, "-", *extra], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, driver_report(done)
        assert sorted(int(v) for _, _, v in consume(bootstrap, topic)) == list(range(120))

        argv, extra, topic, prefix = runs["b"]
        _wait_expired(bootstrap, topic, prefix)
        deadline = time.monotonic() + 60
        while open_transactions(bootstrap, prefix):  # the broker aborts the other winners after 15 s
            assert time.monotonic() < deadline, "the broker never aborted the timed-out transactions"
            time.sleep(0.5)
        stuck = subprocess.run([*argv, "-", *extra], capture_output=True, text=True, timeout=300)
        assert stuck.returncode != 0
        assert "batch 1 was decided" in stuck.stderr and "spark-ext doctor kafka resolve" in stuck.stderr
        visible = sorted(int(v) for _, _, v in consume(bootstrap, topic))
        assert len(visible) == len(set(visible)) and visible[:40] == list(range(40))
