"""The one retry helper (``spark_ext.retry``): pure logic on a fake clock, no services.

Every test pins exact counts (calls, sleeps, log records), so a helper that retried once
too often or too rarely, slept the wrong delays, or swallowed an error fails here.
"""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

import spark_ext.retry as retry_mod
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient, _Retriable
from spark_ext.connectors.kafka.source.admin import KafkaMetadata
from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.errors import ConnectorError, RetriableCommitError
from spark_ext.options import Options
from spark_ext.retry import Backoff, Deadline, retry


class FakeClock:
    """Stands in for the ``time`` module inside ``spark_ext.retry``: sleeping advances it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.events: list[str] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.events.append(f"sleep {s}")
        self.now += s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(retry_mod, "time", c)
    return c


class Flaky:
    """Fails ``failures`` times with ``error``, then returns "ok"."""

    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "ok"


def test_retries_until_success_with_the_backoff_delays(clock: FakeClock) -> None:
    fn = Flaky(3)
    assert retry(fn, what="x", retry_on=ConnectionError, attempts=5) == "ok"
    assert fn.calls == 4
    assert clock.sleeps == [0.02, 0.04, 0.08]  # the default Backoff, one delay per retry


def test_gives_up_after_the_attempts_with_the_given_error(clock: FakeClock) -> None:
    fn = Flaky(10)
    with pytest.raises(TimeoutError, match=r"^gave up after failure 3$") as info:
        retry(fn, what="x", retry_on=ConnectionError, attempts=3, backoff=Backoff(0.5, 0.5),
              give_up=lambda e: TimeoutError(f"gave up after {e}"))
    assert fn.calls == 3
    assert clock.sleeps == [0.5, 0.5]  # no sleep after the last attempt
    assert isinstance(info.value.__cause__, ConnectionError)
    assert str(info.value.__cause__) == "failure 3"


def test_without_give_up_the_last_error_itself_is_raised(clock: FakeClock) -> None:
    fn = Flaky(10)
    with pytest.raises(ConnectionError, match=r"^failure 2$"):
        retry(fn, what="x", retry_on=ConnectionError, attempts=2)
    assert fn.calls == 2


def test_gives_up_at_the_deadline(clock: FakeClock) -> None:
    fn = Flaky(10**6)
    with pytest.raises(RuntimeError, match="timed out") as info:
        retry(fn, what="x", retry_on=ConnectionError, timeout_s=1.0, backoff=Backoff(0.375, 0.375),
              give_up=lambda e: RuntimeError("timed out"))
    # calls at t = 0, 0.375, 0.75 and 1.0: the last sleep is cut to what is left of the second
    assert fn.calls == 4
    assert clock.sleeps == [0.375, 0.375, 0.25]
    assert str(info.value.__cause__) == "failure 4"


def test_attempts_and_timeout_together_stop_at_the_first_bound(clock: FakeClock) -> None:
    fn = Flaky(10**6)
    with pytest.raises(ConnectionError):
        retry(fn, what="x", retry_on=ConnectionError, timeout_s=100.0, attempts=3, backoff=Backoff(1, 1))
    assert fn.calls == 3
    fn = Flaky(10**6)
    with pytest.raises(ConnectionError):
        retry(fn, what="x", retry_on=ConnectionError, timeout_s=2.0, attempts=100, backoff=Backoff(1, 1))
    assert fn.calls == 3  # t = 0, 1, 2


def test_other_errors_propagate_at_once(clock: FakeClock) -> None:
    fn = Flaky(5, error=KeyError)
    on_retry: list[BaseException] = []
    with pytest.raises(KeyError, match="failure 1"):
        retry(fn, what="x", retry_on=(ConnectionError, TimeoutError), attempts=10,
              on_retry=on_retry.append, give_up=lambda e: AssertionError("not for other errors"))
    assert fn.calls == 1
    assert clock.sleeps == [] and on_retry == []


def test_on_retry_runs_before_each_sleep(clock: FakeClock) -> None:
    retry(Flaky(2), what="x", retry_on=ConnectionError, attempts=5,
          on_retry=lambda e: clock.events.append(f"on_retry {e}"))
    assert clock.events == ["on_retry failure 1", "sleep 0.02", "on_retry failure 2", "sleep 0.04"]


def test_the_first_retry_is_logged_at_warning_the_rest_at_debug(
        clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="spark_ext.retry"):
        retry(Flaky(3), what="reading offsets", retry_on=ConnectionError, attempts=5)
    records = [r for r in caplog.records if r.name == "spark_ext.retry"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert [r.getMessage() for r in records] == [
        f"reading offsets failed (ConnectionError: failure {i}); retrying" for i in (1, 2, 3)]


def test_needs_a_bound() -> None:
    with pytest.raises(ValueError, match="timeout_s or attempts"):
        retry(Flaky(0), what="x", retry_on=ConnectionError)
    with pytest.raises(ValueError, match="attempts >= 1"):
        retry(Flaky(0), what="x", retry_on=ConnectionError, attempts=0)


def test_backoff_grows_by_its_factor_up_to_its_cap() -> None:
    d = Backoff(initial_s=0.125, max_s=0.5).delays()
    assert [next(d) for _ in range(5)] == [0.125, 0.25, 0.5, 0.5, 0.5]
    d = Backoff(initial_s=1.0, max_s=20.0, factor=3.0).delays()
    assert [next(d) for _ in range(4)] == [1.0, 3.0, 9.0, 20.0]


def test_deadline_expires_and_reset_moves_it_forward(clock: FakeClock) -> None:
    d = Deadline(2.0)
    clock.now += 1.5
    assert not d.expired and d.remaining == 0.5
    clock.now += 1.0
    assert d.expired and d.remaining == 0.0
    d.reset()
    assert not d.expired and d.remaining == 2.0
    clock.now += 2.0
    assert d.expired and d.remaining == 0.0  # reached is expired: remaining 0 never spins


# --- the call sites keep their errors and bounds -------------------------------------------


class FakeConn:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_txn_client_retries_until_its_timeout_then_raises_retriable_commit_error(clock: FakeClock) -> None:
    client = KafkaTxnClient("127.0.0.1:1", timeout_s=1.0)  # connects on first use only
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1
        raise _Retriable(15, "committing")  # COORDINATOR_NOT_AVAILABLE

    expected = (r"^ending: Kafka still answers .* while committing after 1 s "
                r"\(option kafka.delivery.timeout.ms\)$")
    with pytest.raises(RetriableCommitError, match=expected):
        client._retry("ending", fn)
    # 0.02, 0.04, ... 0.32, then the 0.38 s left of the second: calls at 0 .. 1.0
    assert clock.sleeps[:5] == [0.02, 0.04, 0.08, 0.16, 0.32]
    assert calls == len(clock.sleeps) + 1 == 7
    assert sum(clock.sleeps) == pytest.approx(1.0)


def test_txn_client_retries_past_one_request_timeout_until_its_budget(clock: FakeClock) -> None:
    """A request to a frozen broker costs a whole request timeout; the retries that find
    its successor must still fit: the budget, not the request timeout, ends them."""
    client = KafkaTxnClient("127.0.0.1:1", timeout_s=5.0, budget_s=60.0)
    calls = 0

    def fn() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            clock.now += 5.0  # the frozen coordinator: the request times out
            raise TimeoutError("timed out")
        if calls < 4:
            raise _Retriable(16, "reading offsets")  # NOT_COORDINATOR while it moves
        return "ok"

    assert client._retry("reading offsets", fn) == "ok" and calls == 4
    assert client.budget_s == 60.0 and KafkaTxnClient("127.0.0.1:1", timeout_s=5.0).budget_s == 5.0


def test_txn_client_drops_a_moved_coordinator_and_a_dead_connection(clock: FakeClock) -> None:
    client = KafkaTxnClient("127.0.0.1:1", timeout_s=5.0)
    coord, any_ = FakeConn(), FakeConn()
    client._coords[(1, "tid")] = 5
    client._coords[(1, "other")] = 5  # one connection per broker, shared by the keys it coordinates
    client._nodes[5] = coord  # type: ignore[assignment]
    client._any = any_  # type: ignore[assignment]
    errors: list[BaseException] = [_Retriable(7, "x"), _Retriable(16, "x")]

    def fn() -> str:
        if errors:
            raise errors.pop(0)
        return "done"

    assert client._retry("x", fn, ("tid", 1)) == "done"
    assert len(clock.sleeps) == 2
    # NOT_COORDINATOR (16): where "tid" is coordinated is asked again; the broker's
    # connection is fine and still serves "other"
    assert client._coords == {(1, "other"): 5} and not coord.closed
    errors.append(OSError("reset"))
    assert client._retry("x", fn, ("other", 1)) == "done"
    assert coord.closed and client._coords == {} and client._nodes == {}  # the dead connection
    assert any_.closed and client._any is None    # the OSError dropped the bootstrap connection too


def _metadata(**opts: str) -> KafkaMetadata:
    options = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "a", **opts}
    cfg = KafkaSourceConfig.parse(Options(options, "hzsource"))
    md = KafkaMetadata.__new__(KafkaMetadata)  # no AdminClient: only _retry is exercised
    md._cfg = cfg
    return md


def test_admin_retries_retriable_errors_numretries_times_then_fails_clearly(clock: FakeClock) -> None:
    md = _metadata(**{"fetchOffset.numRetries": "2", "fetchOffset.retryIntervalMs": "250"})
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down", retriable=True))

    with pytest.raises(ConnectorError, match="failed while listing topics: broker down"):
        md._retry("listing topics", fn)
    assert calls == 3
    assert clock.sleeps == [0.25, 0.25]


def test_admin_fails_at_once_on_a_non_retriable_error(clock: FakeClock) -> None:
    md = _metadata()
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied"))

    with pytest.raises(ConnectorError, match="failed while listing topics: denied") as info:
        md._retry("listing topics", fn)
    assert calls == 1 and clock.sleeps == []
    assert info.value.__cause__ is None  # as before: the client's exception is not chained
