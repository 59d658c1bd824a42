"""What the dead-letter tests share: the driver run and the routing sink's crash points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def write_files(src: Path, batches: int, rows: int, kind: Callable[[int], str | None]) -> None:
    """One JSON file a batch of ``rows`` rows ``{"id", "v"}``: ``v`` is the row's poison
    kind (``kind(id)``) or ``v<id>``."""
    src.mkdir(parents=True, exist_ok=True)
    base = time.time() - 1000
    for b in range(batches):
        f = src / f"f{b:03d}.json"
        f.write_text("".join(json.dumps({"id": i, "v": kind(i) or f"v{i}"}) + "\n"
                             for i in range(b * rows, (b + 1) * rows)))
        os.utime(f, (base + b, base + b))


def ended(query: Any) -> Any:
    """Wait for an AvailableNow ``query`` to end; its exception, None when it ended cleanly."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(300)
    except StreamingQueryException:
        pass  # returned below
    return query.exception()
