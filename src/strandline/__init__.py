"""Strandline: a Kafka-compatible, replicated commit log."""

__version__ = "0.1.0"

from strandline import speedups as _speedups  # noqa: E402

_speedups.install()     # the compiled hot path, where built and current (strandline.speedups)
