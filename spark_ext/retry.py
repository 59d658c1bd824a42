"""One way to retry: a deadline, a backoff, and which errors are worth another try.

Every loop that waits for an external system (a broker restarting, a lock held by a
task, a coordinator moving) uses these, so timeouts and delays behave the same
everywhere and every retry is logged the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``initial_s``, multiplied by ``factor`` up to ``max_s``.

    Short first delays let a blip (a coordinator moving) pass quickly; the cap keeps a
    long outage (a broker restarting) from being noticed late.
    """

    initial_s: float = 0.02
    max_s: float = 0.5
    factor: float = 2.0

    def delays(self) -> Iterator[float]:
        """The sleep before each retry, without end."""
        delay = self.initial_s
        while True:
            yield min(delay, self.max_s)
            delay = min(delay * self.factor, self.max_s)


class Deadline:
    """A monotonic point in time a loop must not pass; ``reset()`` when it made progress.

    Monotonic, so a wall-clock jump (NTP, suspend) neither fires nor hides a timeout.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds

    def reset(self) -> None:
        """Start the full ``seconds`` again from now."""
        self._at = time.monotonic() + self.seconds

    @property
    def expired(self) -> bool:
        """True once the point is reached: exactly when ``remaining`` is 0."""
        return time.monotonic() >= self._at

    @property
    def remaining(self) -> float:
        """Seconds left, never negative (safe to pass to ``sleep``)."""
        return max(0.0, self._at - time.monotonic())


def retry(fn: Callable[[], T], *, what: str,
          retry_on: type[BaseException] | tuple[type[BaseException], ...],
          timeout_s: float | None = None, attempts: int | None = None,
          backoff: Backoff = Backoff(),
          on_retry: Callable[[BaseException], None] | None = None,
          give_up: Callable[[BaseException], BaseException] | None = None) -> T:
    """Call ``fn`` until it returns.

    An exception of ``retry_on`` is retried (``on_retry(e)`` first, e.g. to drop a stale
    connection, then the next backoff delay is slept) until ``timeout_s`` has passed or
    ``attempts`` calls were made (at least one of the two must be given, so no loop can
    spin forever); then ``give_up(e)`` is raised from ``e`` (``e`` itself without
    ``give_up``). Any other exception propagates at once: retrying cannot fix it.

    Each retry is logged at WARNING with ``what`` and the error as it is: errors of this
    code base never carry client settings, so nothing secret is added here.
    """
    if timeout_s is None and attempts is None:
        raise ValueError("retry() needs timeout_s or attempts")
    if attempts is not None and attempts < 1:
        raise ValueError(f"retry() needs attempts >= 1, got {attempts}")
    deadline = Deadline(timeout_s) if timeout_s is not None else None
    delays = backoff.delays()
    calls = 0
    while True:
        calls += 1
        try:
            return fn()
        except retry_on as e:
            if (attempts is not None and calls >= attempts) or (deadline is not None and deadline.expired):
                if give_up is None:
                    raise
                raise give_up(e) from e
            # The first retry is worth a warning; the rest would flood the log during an outage
            # (give_up reports a system that stays away).
            log.log(logging.WARNING if calls == 1 else logging.DEBUG, "%s failed (%s: %s); retrying",
                    what, type(e).__name__, e)
            if on_retry is not None:
                on_retry(e)
            delay = next(delays)
            if deadline is not None:
                delay = min(delay, deadline.remaining)
            if delay > 0:
                time.sleep(delay)
