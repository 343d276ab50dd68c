"""The error a bad option of the ``strandline`` data source raises."""

from __future__ import annotations


class OptionError(ValueError):
    """A bad or contradictory option of the ``strandline`` data source, named in the message;
    raised when the query starts."""
