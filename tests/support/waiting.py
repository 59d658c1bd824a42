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
