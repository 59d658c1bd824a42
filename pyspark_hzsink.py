"""Spark's data source lookup imports ``pyspark_*`` modules: this one gives ``hzsink``."""

from spark_ext.datasource import HzSink as DefaultSource

__all__ = ["DefaultSource"]
