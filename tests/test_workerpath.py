"""The suite's Python processes started by Spark import PySpark from its installed package
(tests/support/workerpath/sitecustomize.py), not from the source-only pyspark.zip that
they would compile again each time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

WORKER_PATH = Path(__file__).resolve().parent / "support" / "workerpath"
PACKAGE = Path(pyspark.__file__).resolve().parent
ZIP = PACKAGE / "python" / "lib" / "pyspark.zip"


def _imported_from(pythonpath: list[Path]) -> list[str]:
    """``pyspark.__file__`` and the zips on ``sys.path`` in a Python started as Spark starts
    its workers: with ``pythonpath`` (Spark's zips first) as ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    out = subprocess.run([sys.executable, "-c", "import sys, pyspark; print(pyspark.__file__); "
                          "print(*[p for p in sys.path if p.endswith('pyspark.zip')], sep='\\n')"],
                         env=env, capture_output=True, text=True, check=True, cwd="/")
    return out.stdout.split()


def test_the_zip_of_the_installed_package_is_dropped():
    assert ZIP.is_file(), f"PySpark installed without its zip: {ZIP}"
    first, *zips = _imported_from([ZIP, WORKER_PATH])
    assert Path(first).resolve() == PACKAGE / "__init__.py" and zips == []


def test_a_zip_of_another_spark_stays_first(tmp_path):
    other = tmp_path / "spark" / "python" / "lib" / "pyspark.zip"  # a SPARK_HOME of its own
    other.parent.mkdir(parents=True)
    shutil.copy2(ZIP, other)
    first, *zips = _imported_from([other, WORKER_PATH])
    assert first == f"{other}/pyspark/__init__.py" and zips == [str(other)]


@pytest.mark.spark
def test_sparks_python_workers_import_the_installed_package(spark):
    files = spark.range(2).rdd.map(lambda _: __import__("pyspark").__file__).distinct().collect()
    assert [Path(f).resolve() for f in files] == [PACKAGE / "__init__.py"], files
