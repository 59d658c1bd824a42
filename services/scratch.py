"""Spark's scratch directories for a run of many local drivers (make bench, make faults).

Every Spark driver makes ``spark-<uuid>`` directories (and ``blockmgr-*`` under them) in
its local directories, ``/tmp`` unless told otherwise, and deletes them in a JVM shutdown
hook. A driver killed with ``kill -9`` (the crash tests and campaigns do it hundreds of
times) never runs that hook, so its directories stay; they once filled a machine's disk.
``SPARK_LOCAL_DIRS``, which Spark reads before ``spark.local.dir``, sends every driver a
run starts into one directory of that run, removed when the run ends; directories of
runs that were themselves killed are removed by the next run. A run holds a lock on its
directory for its lifetime (``flock``: released by the kernel when the process dies), so
a directory is swept only when no live run holds it, whatever its pid says.
(``make test`` sends its JVMs' temporary directories to one per pytest process instead,
``tests/conftest.py``.)
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / ".local" / "scratch"
ENV = "SPARK_LOCAL_DIRS"


LOCK = ".lock"
_held: dict[Path, int] = {}  # claimed directory -> its open, locked lock file


def _unheld(path: Path) -> bool:
    """Whether no live process holds ``path``'s lock (taking it for a moment to know)."""
    try:
        fd = os.open(path / LOCK, os.O_RDWR)
    except FileNotFoundError:
        return True  # never claimed with a lock, or half made: nobody's
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def claim(name: str) -> Path:
    """This process's scratch directory ``<name>-<pid>``, locked for its lifetime and set as
    ``SPARK_LOCAL_DIRS`` for every Spark driver this process or its children start.
    Directories no live run holds are removed first."""
    ROOT.mkdir(parents=True, exist_ok=True)
    for old in ROOT.iterdir():
        if old.is_dir() and old not in _held and _unheld(old):
            shutil.rmtree(old, ignore_errors=True)
    path = ROOT / f"{name}-{os.getpid()}"
    path.mkdir(exist_ok=True)
    fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held[path] = fd
    os.environ[ENV] = str(path)
    return path


def release(path: Path) -> None:
    """Remove the scratch directory ``claim`` returned (its drivers have ended)."""
    shutil.rmtree(path, ignore_errors=True)
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)
    if os.environ.get(ENV) == str(path):
        del os.environ[ENV]
