"""PySpark's ``pyspark.zip`` with its bytecode, for the Python processes Spark starts in tests.

Spark starts each Python process it needs (a daemon per worker module: the task workers,
the data source planner, the streaming sink's runner, its commit runner) with
``$SPARK_HOME/python/lib/pyspark.zip`` first on the path, so they import PySpark from
that zip. It holds sources only, and Python never caches bytecode for a zip: every such
process compiles the PySpark modules it imports. Measured here: importing
``pyspark.worker`` took 1.06 s from the zip against 0.31 s with bytecode in it; a fresh
driver's first batch into a Python sink that writes nothing, 6.5 s against 4.4 s; one
crash test that starts eight drivers, 100 s against 80 s. The suite starts well over a
hundred fresh drivers.

So the suite keeps a copy of the zip that also holds each module's bytecode (an
unchecked hash-based ``.pyc`` beside each ``.py``, which ``zipimport`` reads without
looking at the source; every entry of the original kept as it was), built once per
PySpark install and Python under ``~/.cache/spark-ext/pyzip``, and puts a directory first
on ``PYTHONPATH`` whose ``sitecustomize`` swaps the original's entry on ``sys.path`` for
the copy. Spark adds the environment's ``PYTHONPATH`` to its processes' own, so they use
the copy; the installed PySpark is not touched, and benchmarks, which do not set the
hook, pay what users pay. A test that starts a process without the suite's
``PYTHONPATH`` (a user's environment) runs it as before. Only speed depends on this: if
the copy cannot be built, the suite runs without it (a warning says why).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import sys
import warnings
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path

CACHE = Path(os.environ.get("SPARK_EXT_PYZIP_DIR", Path.home() / ".cache" / "spark-ext" / "pyzip"))
KEEP = 6  # copies kept: this checkout's, the compat virtualenvs', a few recent checkouts'

_HOOK = '''\
"""Written by tests/support/pyzip.py: PySpark's pyspark.zip on sys.path is swapped for a
copy that also holds its bytecode (the same sources)."""
import os
import sys

_ORIGINAL, _COPY = {original!r}, {copy!r}
sys.path[:] = [_COPY if os.path.realpath(p) == _ORIGINAL else p for p in sys.path]
'''


def compile_zip(src: Path, dst: Path, final: Path) -> int:
    """Write ``src``'s entries to ``dst`` with a ``.pyc`` beside each ``.py`` (code objects
    naming the file inside ``final``, where ``dst`` will be); the number of modules compiled."""
    n = 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        names = set(zin.namelist())
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, data)
            pyc = info.filename[:-3] + ".pyc"
            if not info.filename.endswith(".py") or pyc in names:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # PySpark's own tests hold a few SyntaxWarnings
                try:
                    code = compile(data, f"{final}{os.sep}{info.filename}", "exec", dont_inherit=True)
                except SyntaxError:
                    continue  # left to zipimport, which reports it if the module is ever imported
            entry = zipfile.ZipInfo(pyc, info.date_time)
            entry.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(entry, bytes(_code_to_hash_pyc(code, importlib.util.source_hash(data), False)))
            n += 1
    return n


def _original() -> Path:
    """This interpreter's PySpark's ``python/lib/pyspark.zip`` (PySpark not imported)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise OSError("PySpark is not installed in this environment")
    home = Path(os.path.realpath(next(iter(spec.submodule_search_locations))))
    return home / "python" / "lib" / "pyspark.zip"


def hook() -> Path | None:
    """The directory to put first on ``PYTHONPATH`` (its ``sitecustomize`` swaps the zip
    for the copy), built if missing; None if it cannot be."""
    try:
        original = _original()
        st = original.stat()
        key = hashlib.sha256(repr((str(original), st.st_size, st.st_mtime_ns, sys.version)).encode())
        home = CACHE / key.hexdigest()[:16]
        copy, site = home / "pyspark.zip", home / "hook" / "sitecustomize.py"
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(CACHE / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another pytest process may be building it
            if not site.exists():
                site.parent.mkdir(parents=True, exist_ok=True)
                tmp = copy.with_name(f"{copy.name}.{os.getpid()}.tmp")
                try:
                    compile_zip(original, tmp, copy)
                    os.replace(tmp, copy)
                finally:
                    tmp.unlink(missing_ok=True)
                site.write_text(_HOOK.format(original=str(original), copy=str(copy)))
            os.utime(home)  # in use: the newest copies are the ones kept
            copies = sorted((d for d in CACHE.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
            for old in copies[:-KEEP]:
                shutil.rmtree(old, ignore_errors=True)  # about 11 MB each; a fresh checkout makes another
        return site.parent
    except (OSError, zipfile.BadZipFile) as e:
        warnings.warn(f"no compiled pyspark.zip (the suite runs, only slower): {e}", stacklevel=2)
        return None
