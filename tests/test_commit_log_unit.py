"""The one INFO line per committed batch (``spark_ext.commit``), and that it reaches stderr
in the driver's Python worker, where no logging is set up (pure logic; a recording fake)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from spark_ext.commit import Claim, Committable
from tests.support.fakes import RecordingTwoPhaseCommitter


def _c(partition: int) -> Committable:
    return Committable(3, partition, 0, 10, query_id="q-9")


def test_each_committed_batch_logs_one_info_line_with_counts_and_timings(caplog):
    caplog.set_level(logging.DEBUG, logger="spark_ext")
    RecordingTwoPhaseCommitter().commit([_c(0), _c(1)], 3, Claim(1))
    lines = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(lines) == 1 and lines[0].name == "spark_ext.commit"
    msg = lines[0].getMessage()
    assert msg.startswith("rec: committed batch=3 query=q-9 transactions=2 rows=20 decide_ms=")
    assert " commit_ms=" in msg


def test_a_batch_finished_before_logs_no_second_line(caplog):
    caplog.set_level(logging.DEBUG, logger="spark_ext")
    RecordingTwoPhaseCommitter(decided=(5,), done=True).commit([_c(0)], 3, Claim(1))
    assert [r for r in caplog.records if r.levelno == logging.INFO] == []


def test_the_commit_worker_writes_the_line_to_stderr_without_any_logging_set_up():
    """Spark's driver worker runs commit() with no logging configured: the line must show."""
    script = textwrap.dedent("""
        from spark_ext.commit import Claim, Committable, ProtocolStreamWriter, SinkPlan, TaskReport
        from spark_ext.guarantees import Guarantee
        from tests.support.fakes import NullWriter, RecordingTwoPhaseCommitter
        plan = SinkPlan(Guarantee.EXACTLY_ONCE, NullWriter, RecordingTwoPhaseCommitter)
        claim = Claim(1)
        msgs = [TaskReport(Committable(4, p, 0, 5, query_id="q"), claim) for p in (0, 1)]
        ProtocolStreamWriter(plan).commit(msgs, 4)
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if "committed batch=4" in line]
    assert len(lines) == 1
    assert " INFO spark_ext.commit: rec: committed batch=4 query=q transactions=2 rows=10 " in lines[0]


@pytest.mark.parametrize(("level", "shown"), [("WARNING", False), ("debug", True), ("bogus", True)])
def test_the_level_comes_from_the_environment(level, shown):
    script = textwrap.dedent("""
        import logging
        from spark_ext.commit import log_to_stderr
        log_to_stderr()
        logging.getLogger("spark_ext.commit").info("marker")
    """)
    env = {**os.environ, "SPARK_EXT_LOG_LEVEL": level}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert ("marker" in res.stderr) is shown, res.stderr
