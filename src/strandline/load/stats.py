"""Counting a load generator's records and latencies, and the lines it prints (pure).

Worker processes send :class:`Window` deltas as they go and a latency sample at the end; the parent
merges them. The lines follow ``kafka-producer-perf-test``'s, so scripts that read Kafka's output
read ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Window:
    """Records done over some time, with their latencies (milliseconds)."""

    records: int = 0
    bytes: int = 0
    latency_sum_ms: float = 0.0
    latency_max_ms: float = 0.0
    failed: int = 0

    def add(self, other: "Window") -> None:
        self.records += other.records
        self.bytes += other.bytes
        self.latency_sum_ms += other.latency_sum_ms
        self.latency_max_ms = max(self.latency_max_ms, other.latency_max_ms)
        self.failed += other.failed

    def record_many(self, count: int, size: int, latency_ms: float) -> None:
        """``count`` records of ``size`` bytes in all, each ``latency_ms`` late."""
        self.records += count
        self.bytes += size
        self.latency_sum_ms += latency_ms * count
        if latency_ms > self.latency_max_ms:
            self.latency_max_ms = latency_ms

    def record(self, size: int, latency_ms: float) -> None:
        self.records += 1
        self.bytes += size
        self.latency_sum_ms += latency_ms
        if latency_ms > self.latency_max_ms:
            self.latency_max_ms = latency_ms


def percentile(sorted_values: list[float], p: float) -> float:
    """The nearest-rank percentile ``p`` (0-100) of sorted values; 0 for none."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(round(p * len(sorted_values) / 100, 9)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class Sampler:
    """Keeps every ``every``-th latency, so that at most about ``limit`` are kept (as Kafka's tool)."""

    expected: int
    limit: int = 500_000
    values: list[float] = field(default_factory=list)
    seen: int = 0

    def __post_init__(self) -> None:
        self.every = max(1, self.expected // self.limit) if self.expected > 0 else 1

    def add(self, latency_ms: float) -> None:
        if self.seen % self.every == 0:
            self.values.append(latency_ms)
        self.seen += 1


def _rates(w: Window, seconds: float) -> tuple[float, float, float]:
    seconds = max(seconds, 1e-9)
    return w.records / seconds, w.bytes / seconds / 1024 / 1024, (w.latency_sum_ms / w.records if w.records else 0.0)


def rate_line(verb: str, w: Window, seconds: float) -> str:
    """Kafka's progress line: ``N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency.``"""
    per_s, mb_s, avg = _rates(w, seconds)
    return (f"{w.records} records {verb}, {per_s:.1f} records/sec ({mb_s:.2f} MB/sec), {avg:.1f} ms avg latency, "
            f"{w.latency_max_ms:.1f} ms max latency.")


def final_line(verb: str, w: Window, seconds: float, samples: list[float]) -> str:
    """Kafka's final line: the totals, and the 50th, 95th, 99th and 99.9th latency percentiles."""
    per_s, mb_s, avg = _rates(w, seconds)
    ordered = sorted(samples)
    return (f"{w.records} records {verb}, {per_s:.1f} records/sec ({mb_s:.2f} MB/sec), {avg:.2f} ms avg latency, "
            f"{w.latency_max_ms:.2f} ms max latency, {percentile(ordered, 50):.0f} ms 50th, "
            f"{percentile(ordered, 95):.0f} ms 95th, {percentile(ordered, 99):.0f} ms 99th, "
            f"{percentile(ordered, 99.9):.0f} ms 99.9th.")
