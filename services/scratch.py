"""Spark's scratch directories for a run of many local drivers (make test, bench, faults).

Every Spark driver makes ``spark-<uuid>`` directories (and ``blockmgr-*`` under them) in
its local directories, ``/tmp`` unless told otherwise, and deletes them in a JVM shutdown
hook. A driver killed with ``kill -9`` (the crash tests and campaigns do it hundreds of
times) never runs that hook, so its directories stay; they once filled a machine's disk.
``SPARK_LOCAL_DIRS``, which Spark reads before ``spark.local.dir``, sends every driver a
run starts into one directory of that run, removed when the run ends; directories of
runs that were themselves killed are removed by the next run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / ".local" / "scratch"
ENV = "SPARK_LOCAL_DIRS"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(name: str) -> Path:
    """This process's scratch directory ``<name>-<pid>``, set as ``SPARK_LOCAL_DIRS`` for
    every Spark driver this process or its children start. Earlier runs' directories
    whose process is gone are removed first."""
    ROOT.mkdir(parents=True, exist_ok=True)
    for old in ROOT.iterdir():
        pid = old.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    path = ROOT / f"{name}-{os.getpid()}"
    path.mkdir(exist_ok=True)
    os.environ[ENV] = str(path)
    return path


def release(path: Path) -> None:
    """Remove the scratch directory ``claim`` returned (its drivers have ended)."""
    shutil.rmtree(path, ignore_errors=True)
    if os.environ.get(ENV) == str(path):
        del os.environ[ENV]
