"""The order ``TwoPhaseCommitter`` carries out steps 4 and 5 in (pure logic; a recording fake).

Whether a real sink's primitives do what they claim is the conformance suite's job
(``tests/test_sink_conformance.py``), against the real services.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_ext import failpoints
from spark_ext.commit import Claim, Committable
from spark_ext.errors import FatalCommitError, FencedError, SecondWriteError
from spark_ext.timeline import DoneBefore
from tests.support.fakes import RecordingTwoPhaseCommitter

ROOT = Path(__file__).resolve().parent.parent


def _c(partition: int, query: str = "q") -> Committable:
    return Committable(3, partition, 0, 10, query_id=query)


def test_a_new_decision_checks_records_then_commits_each_winner_finishes_and_rolls_back_the_rest():
    rec = RecordingTwoPhaseCommitter()
    rec.commit([_c(0), _c(1)], 3, Claim(1))
    assert rec.calls == ["connect", "recorded", "check", "record", "before_winners", "commit 0", "commit 1",
                         "finish", "roll_back_others", "close"]


def test_a_batch_decided_before_goes_on_at_the_commit_of_its_recorded_winners():
    rec = RecordingTwoPhaseCommitter(decided=(5,))
    rec.commit([_c(0)], 3, Claim(1))
    assert rec.calls == ["connect", "recorded", "finished", "before_winners", "commit 5", "finish",
                         "roll_back_others", "close"]


def test_a_batch_carried_out_to_its_end_before_commits_nothing_again():
    rec = RecordingTwoPhaseCommitter(decided=(5,), done=True)
    rec.commit([_c(0)], 3, Claim(1))
    assert rec.calls == ["connect", "recorded", "finished", "roll_back_others", "close"]


@dataclass(frozen=True)
class _WroteNothing(Committable):
    """A task that found its batch decided when it began (a replay): nothing prepared."""

    @property
    def prepared(self) -> bool:
        return False


def test_a_batch_decided_earlier_in_the_same_run_and_written_again_is_refused_naming_the_fix():
    rec = RecordingTwoPhaseCommitter(decided=(5,), done=True, decided_in="run-1")
    with pytest.raises(SecondWriteError, match=r"share sinkId .*Give each write its own \.option\('sinkId'"):
        rec.commit([_WroteNothing(3, 0, 0, 0, query_id="q")], 3, Claim(1), "run-1")
    assert rec.calls == ["connect", "recorded", "close"]


@pytest.mark.parametrize("committable,run", [
    pytest.param(_WroteNothing(3, 0, 0, 0, query_id="q"), "run-2", id="replayed-in-a-new-run"),
    pytest.param(_WroteNothing(3, 0, 0, 0, query_id="q"), "", id="run-not-known"),
    pytest.param(_c(0), "run-1", id="a-retry-of-the-commit-whose-tasks-prepared"),
])
def test_a_decided_batch_run_again_by_a_new_run_or_retried_is_no_second_write(committable, run):
    rec = RecordingTwoPhaseCommitter(decided=(5,), done=True, decided_in="run-1")
    assert rec.commit([committable], 3, Claim(1), run) == DoneBefore(None)  # its rows: not kept here
    assert rec.calls == ["connect", "recorded", "finished", "roll_back_others", "close"]


def test_a_write_the_function_retries_after_its_commit_failed_is_no_second_write():
    """Same run, tasks wrote nothing, but this write's take-over finished what the failed
    commit of the first try left in doubt: a retry, carried on."""
    rec = RecordingTwoPhaseCommitter(decided=(5,), done=True, decided_in="run-1")
    assert rec.commit([_WroteNothing(3, 0, 0, 0, query_id="q")], 3, Claim(1, committed=1), "run-1") == \
        DoneBefore(None)
    assert rec.calls == ["connect", "recorded", "finished", "roll_back_others", "close"]


def test_a_fenced_run_records_nothing():
    rec = RecordingTwoPhaseCommitter(fenced=True)
    with pytest.raises(FencedError):
        rec.commit([_c(0)], 3, Claim(1))
    assert rec.calls == ["connect", "recorded", "check", "close"]


def test_lost_winners_fail_after_every_other_winner_was_committed():
    rec = RecordingTwoPhaseCommitter(lose=frozenset({0}))
    with pytest.raises(FatalCommitError, match=r"lost \[0\]"):
        rec.commit([_c(0), _c(1)], 3, Claim(1))
    assert rec.calls[-3:] == ["commit 0", "commit 1", "close"]


def test_no_report_or_nothing_prepared_touches_nothing():
    rec = RecordingTwoPhaseCommitter()
    rec.commit([], 3, None)
    assert rec.calls == []

    class NothingPrepared(Committable):
        @property
        def prepared(self) -> bool:
            return False

    rec.commit([NothingPrepared(3, 0, 0, 0, query_id="q")], 3, Claim(1))
    assert rec.calls == ["connect", "recorded", "close"]


def test_abort_leaves_a_decided_batch_to_the_take_over_and_rolls_back_an_undecided_one():
    decided = RecordingTwoPhaseCommitter(decided=(0,))
    decided.abort([_c(0)], 3, Claim(1))
    assert decided.calls == ["connect", "recorded", "close"]
    undecided = RecordingTwoPhaseCommitter()
    undecided.abort([_c(0)], 3, Claim(1))
    assert undecided.calls == ["connect", "recorded", "roll_back", "close"]
    nobody = RecordingTwoPhaseCommitter(decided=(0,))
    nobody.abort([], 3, None)  # no task reported: no query id to look the decision up by
    assert nobody.calls == ["connect", "roll_back", "close"]


def test_tasks_of_two_queries_in_one_batch_are_refused():
    with pytest.raises(FatalCommitError, match="mixes tasks of queries"):
        RecordingTwoPhaseCommitter().commit([_c(0, "a"), _c(1, "b")], 3, Claim(1))


@pytest.mark.parametrize("point", ["before_decision", "after_decision", "mid_commit", "after_done"])
def test_the_crash_points_sit_at_the_step_boundaries(monkeypatch, point):
    hits: list[str] = []
    monkeypatch.setattr(failpoints, "hit", lambda name, *a: hits.append(name))
    rec = RecordingTwoPhaseCommitter()
    rec.commit([_c(0), _c(1)], 3, Claim(1))
    assert hits == ["rec.before_decision", "rec.after_decision", "rec.mid_commit", "rec.after_done"]
    assert f"rec.{point}" in hits


def test_no_connector_orders_the_protocol_steps_itself():
    """A connector's committer supplies primitives; ``commit`` / ``abort`` are the core's."""
    offenders = []
    for path in (ROOT / "spark_ext" / "connectors").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any("Committer" in ast.unparse(b) for b in node.bases):
                defined = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
                if defined & {"commit", "abort"}:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert offenders == []
