"""The one retry helper (``spark_ext.retry``): pure logic, tiny delays."""

from __future__ import annotations

import time

import pytest

from spark_ext.retry import Backoff, Deadline, retry

NO_WAIT = Backoff(initial_s=0.0, max_s=0.0)


class Flaky:
    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "ok"


def test_retries_until_success():
    fn = Flaky(3)
    assert retry(fn, what="x", retry_on=ConnectionError, attempts=5, backoff=NO_WAIT) == "ok"
    assert fn.calls == 4


def test_gives_up_after_the_attempts_with_the_given_error():
    fn = Flaky(10)
    with pytest.raises(TimeoutError, match="gave up after failure 3") as info:
        retry(fn, what="x", retry_on=ConnectionError, attempts=3, backoff=NO_WAIT,
              give_up=lambda e: TimeoutError(f"gave up after {e}"))
    assert fn.calls == 3
    assert isinstance(info.value.__cause__, ConnectionError)


def test_gives_up_at_the_deadline():
    fn = Flaky(10**6)
    start = time.monotonic()
    with pytest.raises(ConnectionError):
        retry(fn, what="x", retry_on=ConnectionError, timeout_s=0.2, backoff=Backoff(0.01, 0.01))
    assert 0.2 <= time.monotonic() - start < 2
    assert 2 < fn.calls < 100


def test_other_errors_propagate_at_once():
    fn = Flaky(5, error=KeyError)
    with pytest.raises(KeyError):
        retry(fn, what="x", retry_on=ConnectionError, attempts=10, backoff=NO_WAIT)
    assert fn.calls == 1


def test_on_retry_sees_every_retried_error():
    seen: list[str] = []
    retry(Flaky(2), what="x", retry_on=ConnectionError, attempts=5, backoff=NO_WAIT,
          on_retry=lambda e: seen.append(str(e)))
    assert seen == ["failure 1", "failure 2"]


def test_needs_a_bound():
    with pytest.raises(ValueError, match="timeout_s or attempts"):
        retry(Flaky(0), what="x", retry_on=ConnectionError)


def test_backoff_doubles_up_to_its_cap():
    d = Backoff(initial_s=0.1, max_s=0.5).delays()
    assert [round(next(d), 3) for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]


def test_deadline_reset_moves_it_forward():
    d = Deadline(0.05)
    time.sleep(0.06)
    assert d.expired and d.remaining == 0
    d.reset()
    assert not d.expired and 0 < d.remaining <= 0.05
