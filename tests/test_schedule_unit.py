"""The suite's order under pytest-xdist (tests/support/schedule.py), as make test collects it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import schedule

ROOT = Path(__file__).resolve().parent.parent
# make test's parallel part (Makefile): what it leaves out is deselected after collection.
MAKE_TEST = ("not restarts_services and not compat_only and not kafka_cluster and not campaign "
             "and not broker_clock")


def test_each_worker_starts_its_half_with_its_slowest_tests_after_the_deselection():
    """worksteal hands each of two workers a contiguous half of the collection as it stands
    after ``-m`` deselected tests. Each half must open with its slow tests, slowest first,
    and the halves must weigh about the same: a slow test left at the end of a half runs
    while the other worker has nothing left (the deal was once made before the
    deselection, and two crash tests of about 100 s each ended the first half)."""
    env = {**os.environ, "PYTEST_XDIST_WORKER_COUNT": "2"}
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-m", MAKE_TEST], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    ids = [line for line in res.stdout.splitlines() if "::" in line]
    assert len(ids) > 100, res.stdout[-2000:]
    half = len(ids) // 2  # worksteal's first split for two workers
    weights = [[schedule.weight(i.split("::")[-1]) for i in part] for part in (ids[:half], ids[half:])]
    for part in weights:
        slow = [w for w in part if w > schedule.DEFAULT_S]
        assert slow, "a half without a slow test"
        assert part[:len(slow)] == sorted(slow, reverse=True), part[:len(slow) + 5]
    assert abs(sum(weights[0]) - sum(weights[1])) <= max(max(w) for w in weights)
