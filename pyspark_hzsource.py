"""Spark's data source lookup imports ``pyspark_*`` modules: this one gives ``hzsource``."""

from spark_ext.datasource import HzSource as DefaultSource

__all__ = ["DefaultSource"]
