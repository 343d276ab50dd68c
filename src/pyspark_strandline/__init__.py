"""Lets Spark find the ``strandline`` data source without a register() call: Spark's Python
workers import every top-level ``pyspark_*`` module and register its ``DefaultSource``."""

from strandline.spark.source import StrandlineDataSource as DefaultSource

__all__ = ["DefaultSource"]
