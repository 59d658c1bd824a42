"""Crash points for fault tests: simulate ``kill -9`` of the driver at a named step.

Set ``SPARK_EXT_FAILPOINTS`` to a comma list of names (for example
``jdbc.after_decision``) and ``SPARK_EXT_FAILPOINT_PGID`` to the process group of a
driver started in its own group; Python workers inherit both through the JVM. When a
worker reaches an armed step it sends SIGKILL to that group, as ``kill -9`` of the
driver would (PySpark's worker daemon runs in a group of its own, hence the variable).
Unset, ``hit`` is one dictionary lookup. Test-only: never set it in production.
"""

from __future__ import annotations

import os
import signal

ENV = "SPARK_EXT_FAILPOINTS"
PGID_ENV = "SPARK_EXT_FAILPOINT_PGID"


def hit(name: str) -> None:
    """Kill the driver's process group here if ``name`` is armed."""
    armed = os.environ.get(ENV)
    if armed and name in armed.split(","):
        os.killpg(int(os.environ.get(PGID_ENV) or os.getpgid(0)), signal.SIGKILL)
        # This worker may sit in the worker daemon's group and would run on, orphaned.
        os.kill(os.getpid(), signal.SIGKILL)
