"""What the request router saw of the requests coming in, for the handlers whose answers wait
(for replication, for a fetch's bytes): the client quotas record a request when it is answered."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Arrivals:
    size: int = 0           # the size of the request being handled (a produce's, for its quota)
    clock_ms: int = 0       # the newest time a request came: when a delayed answer is sent

    def came(self, size: int, now_ms: int) -> None:
        self.size = size
        self.clock_ms = max(self.clock_ms, now_ms)
