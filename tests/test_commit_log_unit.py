"""The one INFO line per committed batch (``spark_ext.commit``), and that it reaches stderr
in the driver's Python worker, where no logging is set up (pure logic; a recording fake)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from pyspark.sql.datasource import WriterCommitMessage

from spark_ext import timeline
from spark_ext.commit import Claim, Committable, NoOpCommitter
from spark_ext.guarantees import Guarantee
from spark_ext.stream import ProtocolStreamWriter, SinkPlan, TaskReport
from spark_ext.timeline import PlanTimes, WriteTimes
from tests.support.fakes import NullWriter, RecordingTwoPhaseCommitter


def _c(partition: int) -> Committable:
    return Committable(3, partition, 0, 10, query_id="q-9")


def _writer(guarantee: Guarantee = Guarantee.EXACTLY_ONCE, **fake: Any) -> ProtocolStreamWriter:
    committer = NoOpCommitter if not guarantee.transactional else (lambda: RecordingTwoPhaseCommitter(**fake))
    return ProtocolStreamWriter(SinkPlan(guarantee, NullWriter, committer))


def _info(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.INFO and r.name == "spark_ext.commit"]


def test_each_committed_batch_logs_one_info_line_with_counts_and_timings(caplog):
    caplog.set_level(logging.DEBUG, logger="spark_ext")
    plan = PlanTimes(started_ms=timeline.now_ms() - 500, configure_ms=1, validate_ms=12, take_over_ms=30)
    took = ((0, 40.0), (1, 80.0), (2, 90.0))
    reports: list[WriterCommitMessage | None] = [TaskReport(_c(p), Claim(1), plan, WriteTimes(ms))
                                                 for p, ms in took]
    _writer().commit(reports, 3)
    lines = _info(caplog)
    assert len(lines) == 1
    msg = lines[0]
    assert msg.startswith("rec: committed batch=3 query=q-9 transactions=3 rows=30 decide_ms=")
    fields = dict(f.split("=", 1) for f in msg.split() if "=" in f)
    assert fields["tasks"] == "3" and fields["write_ms_median"] == "80" and fields["write_ms_max"] == "90"
    assert (fields["plan_ms"], fields["configure_ms"], fields["validate_ms"], fields["take_over_ms"]) == \
        ("43", "1", "12", "30")
    assert 500 <= int(fields["batch_ms"]) < 60_000  # from the plan's start to the commit's end, one clock


def test_a_weaker_guarantee_logs_the_line_too(caplog):
    caplog.set_level(logging.DEBUG, logger="spark_ext")
    _writer(Guarantee.AT_LEAST_ONCE).commit([TaskReport(_c(0), None, None, WriteTimes(5.0))], 3)
    (msg,) = _info(caplog)
    assert msg.startswith("hzsink: committed batch=3 query=q-9 transactions=0 rows=10 ")
    assert " tasks=1 " in msg


def test_a_batch_finished_before_logs_no_second_line(caplog):
    caplog.set_level(logging.DEBUG, logger="spark_ext")
    _writer(decided=(5,), done=True).commit([TaskReport(_c(0), Claim(1))], 3)
    assert _info(caplog) == []


def test_a_replay_its_take_over_finished_counts_the_recovery_in_the_sinks_card(tmp_path, monkeypatch):
    """After a crash past the decision the restart's take-over commits the batch, and the
    replay's commit finds it finished: no line, but the card counts what was resolved and
    the rows the decision committed."""
    from spark_ext.monitoring import cards

    monkeypatch.setenv(cards.ENV, str(tmp_path))
    _writer(decided=(5,), done=True).commit([TaskReport(_c(0), Claim(7, committed=2, rolled_back=1))], 3)
    [card] = cards.read("q-9")
    assert (card["batch"], card["rows_total"], card["recovered_total"], card["epoch"]) == (3, 0, 3, 7)
    assert card["rolled_back_total"] == 1
    # A batch killed after its commit and before its card: its replay counts its rows, once.
    for _ in range(2):
        _writer(decided=(5,), done=True, decided_rows=25).commit([TaskReport(_c(0), Claim(8))], 4)
        [card] = cards.read("q-9")
        assert (card["batch"], card["rows_total"], card["recovered_total"]) == (4, 25, 3)


def test_a_replay_after_the_card_replaces_the_batchs_rows_and_adds_its_own_recoveries(tmp_path, monkeypatch):
    """Killed after batch 4's card, before Spark's commit log: the replay's card counts the
    batch's rows once, adds what its own take-over resolved, and never lowers a total;
    rows its decision did not keep leave the count as it was."""
    from spark_ext.monitoring import cards

    monkeypatch.setenv(cards.ENV, str(tmp_path))
    _writer().commit([TaskReport(_c(0), Claim(7, committed=2))], 4)  # the batch's own card: 10 rows
    _writer(decided=(5,), done=True, decided_rows=10).commit([TaskReport(_c(0), Claim(8, rolled_back=1))], 4)
    [card] = cards.read("q-9")
    assert (card["rows_total"], card["recovered_total"], card["rolled_back_total"]) == (10, 3, 1)
    _writer(decided=(5,), done=True).commit([TaskReport(_c(0), Claim(9))], 4)  # rows not kept
    [card] = cards.read("q-9")
    assert (card["rows_total"], card["recovered_total"]) == (10, 3)


def test_a_replay_whose_decision_is_carried_out_now_logs_the_rows_the_decision_commits(caplog):
    caplog.set_level(logging.DEBUG, logger="spark_ext")
    _writer(decided=(5,), decided_rows=25).commit([TaskReport(_c(0), Claim(1))], 3)
    (msg,) = _info(caplog)
    assert msg.startswith("rec: committed batch=3 query=q-9 transactions=1 rows=25 ")


def test_the_commit_worker_writes_the_line_to_stderr_without_any_logging_set_up():
    """Spark's driver worker runs commit() with no logging configured: the line must show."""
    script = textwrap.dedent("""
        from spark_ext.commit import Claim, Committable
        from spark_ext.stream import ProtocolStreamWriter, SinkPlan, TaskReport
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
        from spark_ext.timeline import log_to_stderr
        log_to_stderr()
        logging.getLogger("spark_ext.commit").info("marker")
    """)
    env = {**os.environ, "SPARK_EXT_LOG_LEVEL": level}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert ("marker" in res.stderr) is shown, res.stderr
