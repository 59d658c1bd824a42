"""Process environment Spark's Python workers need."""

from __future__ import annotations

import os
import sys


def ensure_python_env() -> None:
    """Make Python workers use this interpreter unless the user chose another.

    Without it, workers may start a different Python and fail with "Timed out while
    waiting for the Python worker to connect back". Call before the SparkSession starts.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
