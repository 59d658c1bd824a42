"""A class-data-sharing archive of Spark's classes for the suite's driver JVMs.

A local Spark driver loads some 15,000 classes from ``pyspark/jars`` before it runs a
query; most of a short-lived driver's start is spent parsing and verifying them. The
JDK can dump the classes one run loaded (``-XX:ArchiveClassesAtExit``) and map them into
every later JVM (``-XX:SharedArchiveFile``): measured here, a session start and a tiny
query took 5.0-6.3 s with the archive against 8.5-9.6 s without. The suite starts over a
hundred drivers (crash tests, campaigns), so it runs them with the archive.

The archive is built once per PySpark install (its jars' sizes and times included) and JDK
(the key is in its file name) under
``~/.cache/spark-ext/cds``, outside git, by whichever pytest process gets the lock first.
A JVM that finds the archive unusable runs without it; so does the suite if it cannot be
built (a warning says why): only speed depends on it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

# The suite's driver JVMs' options, part of the archive's key: short-lived JVMs on 2 cores,
# where C2 compilation and parallel GC threads cost more CPU than they save (measured: 144 s
# -> 100 s of CPU for four crash tests).
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
KEEP = 6  # archives kept: this checkout's, the compat virtualenvs', a few recent checkouts'
CACHE = Path(os.environ.get("SPARK_EXT_CDS_DIR", Path.home() / ".cache" / "spark-ext" / "cds"))

_WARM_UP = """
from pyspark.sql import SparkSession
s = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
     .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1").getOrCreate())
s.range(1000).selectExpr("id % 3 AS k").groupBy("k").count().collect()
s.stop()
"""


def _key(jvm_opts: str) -> str:
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    # The JVM maps an archive only if every jar on the class path has the size and
    # modification time it had when the archive was dumped, and silently runs without it
    # otherwise: a reinstalled PySpark at the same path (a fresh checkout's virtualenv)
    # needs an archive of its own.
    jars = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                  for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    text = "\n".join([pyspark.__version__, str(Path(pyspark.__file__).parent), java, jvm_opts, repr(jars)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def archive(jvm_opts: str) -> Path | None:
    """The archive for this PySpark, JDK and ``jvm_opts``, built if missing; None if it cannot be."""
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        path = CACHE / f"spark-{_key(jvm_opts)}.jsa"
        with open(CACHE / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another pytest process may be building it
            if not path.exists():
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{jvm_opts} -XX:ArchiveClassesAtExit={tmp}",
                       "PYSPARK_PYTHON": sys.executable}
                res = subprocess.run([sys.executable, "-c", _WARM_UP], env=env, capture_output=True,
                                     text=True, timeout=300)
                if res.returncode != 0 or not tmp.exists():
                    tmp.unlink(missing_ok=True)
                    warnings.warn(f"no class-data-sharing archive (the suite runs, only slower): "
                                  f"{res.stderr[-500:]}", stacklevel=2)
                    return None
                tmp.rename(path)
            os.utime(path)  # in use: the newest archives are the ones kept
            for old in sorted(CACHE.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime)[:-KEEP]:
                old.unlink(missing_ok=True)  # ~150 MB each; a fresh checkout makes another
        return path
    except (OSError, subprocess.SubprocessError) as e:
        warnings.warn(f"no class-data-sharing archive (the suite runs, only slower): {e}", stacklevel=2)
        return None


if __name__ == "__main__":
    # make test builds it beside the services' start (make -j), not in the first pytest
    # process while the other waits on the lock.
    print(f"[cds] {archive(JVM_OPTS) or 'no archive: the suite runs without one'}")
