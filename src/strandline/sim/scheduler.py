"""The simulation's clock and its queue of events: what happens when, one event at a time.

Every part of the simulated cluster (the network, the ZooKeeper clients, the workload, the
nemesis) schedules what it does through one :class:`Scheduler`; ties at the same millisecond run in
the order they were scheduled, so the same seed gives the same run.
"""

from __future__ import annotations

import heapq
from typing import Callable


class Scheduler:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms
        self._events: list[tuple[int, int, Callable[[], object]]] = []     # an action's value is not used
        self._seq = 0

    def schedule_in(self, delay_ms: int, action: Callable[[], object]) -> None:
        """Run ``action()`` ``delay_ms`` from now (simulated time)."""
        self.schedule_at(self.now + delay_ms, action)

    def schedule_at(self, when_ms: int, action: Callable[[], object]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when_ms, self._seq, action))

    def next_at(self) -> int | None:
        """When the earliest event is due, None with none scheduled."""
        return self._events[0][0] if self._events else None

    def pop_due(self) -> Callable[[], object] | None:
        """The next event due by now, taken off the queue; None when none is."""
        events = self._events
        if not events or events[0][0] > self.now:
            return None
        return heapq.heappop(events)[2]
