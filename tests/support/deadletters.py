"""What the dead-letter tests share: the driver run and the routing sink's crash points."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spark_ext import failpoints


def run(tmp: Path, options: dict[str, str], failpoint: str = "-",
        select: str = "id|v") -> subprocess.CompletedProcess[str]:
    """The files of ``tmp / "src"`` through ``hzsink`` with ``options`` in a driver of its
    own (4 tasks a batch), killed at ``failpoint`` if given."""
    argv = [sys.executable, "-m", "tests.drivers.files_to_sink", str(tmp / "src"), str(tmp / "ckpt"),
            select, failpoint, *(f"{k}={v}" for k, v in options.items())]
    env = {**os.environ, failpoints.LOG_ENV: str(tmp / "struck.log"), "SPARK_EXT_TEST_TASKS": "4"}
    return subprocess.run(argv, start_new_session=True, capture_output=True, text=True, timeout=600, env=env)


# The routing sink's crash points: the first struck in make test, the others in make faults.
FIRST = ("routing.after_decision",)
OTHERS = ("routing.before_decision", "routing.between_sinks", "routing.mid_commit", "routing.after_done")
