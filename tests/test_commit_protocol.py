"""Unit tests of the commit protocol's driver-side logic (pure logic, fakes allowed)."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import FrozenInstanceError, dataclass
from typing import Any

import pytest

from spark_ext.commit import (
    Claim,
    Committable,
    Committer,
    NoOpCommitter,
    TaskInfo,
)
from spark_ext.errors import (
    FatalCommitError,
    FencedError,
    RetriableCommitError,
    RetriesExhaustedError,
    SparkExtError,
    UnknownCommitError,
)
from spark_ext.guarantees import Guarantee
from spark_ext.stream import ProtocolStreamWriter, SinkPlan, TaskReport, call_with_retries
from tests.support.fakes import NullWriter

CLAIM = Claim(fence=7)


@dataclass(frozen=True)
class TxnCommittable(Committable):
    transactional_id: str


class RecordingCommitter(Committer[Committable]):
    calls: list[tuple[str, list[Committable], int]] = []
    fail_times = 0
    error: type[Exception] = RetriableCommitError

    def commit(self, committables: Sequence[Committable], batch_id: int, claim: Claim[Any] | None,
               run_id: str = "") -> None:
        RecordingCommitter.calls.append(("commit", list(committables), batch_id))
        if RecordingCommitter.fail_times > 0:
            RecordingCommitter.fail_times -= 1
            raise RecordingCommitter.error("boom")

    def abort(self, committables: Sequence[Committable], batch_id: int, claim: Claim[Any] | None) -> None:
        RecordingCommitter.calls.append(("abort", list(committables), batch_id))


@pytest.fixture(autouse=True)
def _reset():
    RecordingCommitter.calls = []
    RecordingCommitter.fail_times = 0
    RecordingCommitter.error = RetriableCommitError


def _writer(retries: int = 3) -> ProtocolStreamWriter:
    plan = SinkPlan(Guarantee.EXACTLY_ONCE, new_writer=NotImplemented, new_committer=RecordingCommitter,
                    commit_retries=retries, retry_backoff_s=0.0)
    return ProtocolStreamWriter(plan)


def test_commit_passes_messages_of_successful_tasks_with_the_batch_id():
    m0 = TxnCommittable(batch_id=4, partition_id=0, attempt=0, rows=10, transactional_id="s-0")
    m1 = TxnCommittable(batch_id=4, partition_id=1, attempt=1, rows=5, transactional_id="s-1")
    _writer().commit([TaskReport(m0, CLAIM), None, TaskReport(m1, CLAIM)], 4)
    assert RecordingCommitter.calls == [("commit", [m0, m1], 4)]


def test_abort_reaches_the_committer():
    m0 = TxnCommittable(batch_id=2, partition_id=0, attempt=0, rows=1, transactional_id="s-0")
    _writer().abort([None, TaskReport(m0, CLAIM)], 2)
    assert RecordingCommitter.calls == [("abort", [m0], 2)]


def test_retriable_commit_errors_are_retried_then_succeed():
    RecordingCommitter.fail_times = 2
    _writer(retries=3).commit([], 7)
    assert len(RecordingCommitter.calls) == 3


def test_retriable_errors_give_up_after_the_bound():
    RecordingCommitter.fail_times = 10
    with pytest.raises(RetriesExhaustedError, match="commit of batch 7 still failing after 2 retries") as e:
        _writer(retries=2).commit([], 7)
    assert len(RecordingCommitter.calls) == 3
    assert not isinstance(e.value, RetriableCommitError)  # no caller may retry it again
    assert isinstance(e.value.__cause__, RetriableCommitError)


@pytest.mark.parametrize("error", [FatalCommitError, FencedError])
def test_fatal_commit_errors_are_not_retried(error):
    RecordingCommitter.fail_times = 1
    RecordingCommitter.error = error
    with pytest.raises(error):
        _writer().commit([], 1)
    assert len(RecordingCommitter.calls) == 1


def test_unexpected_errors_become_unknown_commit_errors_naming_the_batch():
    def boom() -> None:
        raise KeyError("x")

    with pytest.raises(UnknownCommitError, match=r"batch 9.*KeyError"):
        call_with_retries(boom, "commit of batch 9", retries=3, backoff_s=0.0)


def test_foreign_commit_messages_are_rejected():
    with pytest.raises(UnknownCommitError, match="expected a TaskReport"):
        _writer().commit([object()], 1)  # type: ignore[list-item]


def test_committables_are_small_frozen_and_picklable():
    m = TxnCommittable(batch_id=1, partition_id=2, attempt=0, rows=3, transactional_id="sink-2-0")
    with pytest.raises(FrozenInstanceError):
        m.rows = 4  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(m)) == m
    assert len(pickle.dumps(m)) < 400


def test_plan_pickles_without_live_state():
    plan = SinkPlan(Guarantee.AT_LEAST_ONCE, new_writer=NullWriter, new_committer=NoOpCommitter)
    assert pickle.loads(pickle.dumps(ProtocolStreamWriter(plan))).plan == plan


def test_task_info_outside_a_task_is_a_clear_error():
    with pytest.raises(SparkExtError, match="outside a Spark task"):
        TaskInfo.current()


def test_a_claims_epoch_is_its_fence_or_the_fences_epoch():
    """The metrics card's epoch: PostgreSQL's fence is the epoch; Kafka's, the queue's and
    routing's fences carry one; anything else has none."""
    from types import SimpleNamespace

    assert Claim(5).epoch == 5
    assert Claim(SimpleNamespace(epoch=7), committed=2, rolled_back=1).epoch == 7
    assert Claim(SimpleNamespace(epoch=7), committed=2, rolled_back=1).resolved == 3
    assert Claim(True).epoch is None and Claim("t").epoch is None
