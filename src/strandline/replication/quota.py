"""Replication throttles (Kafka's ReplicationQuotaManager, KIP-73).

``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` (bytes/s, dynamic
broker configs) bound the replication traffic of the replicas a topic names in
``leader.replication.throttled.replicas`` and ``follower.replication.throttled.replicas``
(``partition:broker`` pairs, or ``*``). Only a replica outside the ISR is ever throttled, so a
reassignment's new replicas catch up without starving the followers that acknowledge writes.
The rate is measured as Kafka does: bytes over the last 11 one-second samples, counted as at
least ten seconds.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

LONG_MAX = 9223372036854775807
SAMPLES = 11
SAMPLE_MS = 1000


def throttled(configs: dict[str, Any], key: str, index: int, broker_id: int) -> bool:
    """Whether a topic's ``key`` (a throttled-replicas list) names partition ``index`` on ``broker_id``."""
    replicas = configs.get(key)
    if not replicas:
        return False
    return replicas == ["*"] or f"{index}:{broker_id}" in replicas


class ReplicationQuota:
    def __init__(self, bound: Callable[[], int]) -> None:
        self.bound = bound                         # bytes per second; LONG_MAX: no throttle
        self.samples: deque[list[int]] = deque()   # [start ms, bytes]

    def record(self, size: int, now_ms: int) -> None:
        if self.samples and now_ms - self.samples[-1][0] < SAMPLE_MS:
            self.samples[-1][1] += size
        else:
            self.samples.append([now_ms, size])
        self._expire(now_ms)

    def _expire(self, now_ms: int) -> None:
        while self.samples and self.samples[0][0] <= now_ms - SAMPLES * SAMPLE_MS:
            self.samples.popleft()

    def rate(self, now_ms: int) -> float:
        """Bytes per second over the samples kept."""
        self._expire(now_ms)
        if not self.samples:
            return 0.0
        elapsed = max(now_ms - self.samples[0][0], (SAMPLES - 1) * SAMPLE_MS)
        return sum(size for _, size in self.samples) * 1000.0 / elapsed

    def exceeded(self, now_ms: int) -> bool:
        bound = self.bound()
        return bound < LONG_MAX and self.rate(now_ms) > bound
