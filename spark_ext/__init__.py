"""spark-ext: Hazelcast-Jet-grade fault tolerance for PySpark Structured Streaming.

``format("hzsource")`` and ``format("hzsink")`` work after ``pip install`` (Spark finds
the ``pyspark_hzsource`` / ``pyspark_hzsink`` modules); ``register(spark)`` does the
same explicitly, e.g. for a session started before the package was installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_ext.env import configure, ensure_python_env
from spark_ext.errors import SparkExtError
from spark_ext.guarantees import Guarantee
from spark_ext.release import VERSION

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__version__ = VERSION
__all__ = ["Guarantee", "SparkExtError", "__version__", "configure", "ensure_python_env", "register"]

ensure_python_env()


def __getattr__(name: str) -> Any:
    """``from spark_ext import aggregate``: the windows' aggregates, imported on use."""
    if name == "aggregate":
        from spark_ext.windows import aggregate

        return aggregate
    raise AttributeError(f"module 'spark_ext' has no attribute {name!r}")


def register(spark: SparkSession) -> None:
    """Register ``hzsource`` and ``hzsink`` with ``spark``, and start the metrics exporter
    when ``spark.sparkext.metrics.port`` is set and the companion jar's listener does not
    serve it already (``spark_ext.monitoring``). Driver; idempotent."""
    from spark_ext.datasource import HzSink, HzSource

    spark.dataSource.register(HzSource)
    spark.dataSource.register(HzSink)
    from spark_ext.monitoring import serve_configured

    serve_configured(spark)
