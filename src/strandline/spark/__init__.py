"""Strandline topics as Spark DataFrames through PySpark's Python data source API."""

from __future__ import annotations

from typing import Any

from strandline.spark.options import OptionError

__all__ = ["OptionError", "register"]


def register(spark: Any) -> None:
    """Register the ``strandline`` data source with ``spark`` (``spark.read.format("strandline")``)."""
    from strandline.spark.source import register as _register

    _register(spark)
