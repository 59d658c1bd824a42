"""Waiting on a condition (query progress, sink contents), never on a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Poll a condition (query progress, sink contents), never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_for_idle_trigger(q, timeout: float = 120.0) -> None:
    """Until a trigger that read nothing ran after now: Spark planned past every committed
    batch (a queue source acknowledges then, not when rows reach the sink)."""
    seen = len(q.recentProgress)
    wait_for(lambda: any(p["numInputRows"] == 0 for p in q.recentProgress[seen:]), "an idle trigger", timeout)
