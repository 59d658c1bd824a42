"""Put first on the suite's ``PYTHONPATH`` by ``tests/conftest.py``, so it runs as each
Python process Spark starts for a test begins.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python
process it starts: a daemon per worker module (the tasks, the data source lookup, the
planner, the write, the streaming sink's commit runner), five of them in a fresh driver's
first streaming batch. Python never caches bytecode for a zip, so each one compiled PySpark
again: ``import pyspark.worker`` took 0.8-1.05 s from the zip against 0.2-0.25 s from the
installed package, one after another on the batch's path.

With pip's PySpark the zip is a copy of the package it sits in
(``<site-packages>/pyspark/python/lib/pyspark.zip``). When that package is importable here
(its parent directory is on ``sys.path``), the zip's entry is dropped and the process
imports the same PySpark from the package, whose bytecode Python keeps. A zip of any other
Spark (a ``SPARK_HOME`` of its own) is left where it is. Tests that run a job as a user
would start their processes without the suite's ``PYTHONPATH``, so they pay what users pay;
so do the benchmarks.
"""

import os
import sys


def _installed_package_of(entry: str) -> bool:
    """Whether ``entry`` is ``<dir>/pyspark/python/lib/pyspark.zip`` with ``<dir>`` on the path."""
    real = os.path.realpath(entry)
    package = os.path.dirname(os.path.dirname(os.path.dirname(real)))
    if os.path.basename(real) != "pyspark.zip" or os.path.basename(package) != "pyspark":
        return False
    if not os.path.isfile(os.path.join(package, "__init__.py")):
        return False
    parent = os.path.dirname(package)
    return any(os.path.realpath(p or ".") == parent for p in sys.path if p != entry)


sys.path[:] = [p for p in sys.path if not _installed_package_of(p)]
