"""Servers a test starts itself: stopped by their own process group, never anyone else's."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM ``proc``'s process group (started with ``start_new_session``), SIGKILL
    after ``grace_s``."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
