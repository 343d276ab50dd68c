"""The simulation's clock and its queue of events: what happens when, one event at a time.

Every part of the simulated cluster (the network, the ZooKeeper clients, the workload, the
nemesis) schedules what it does through one :class:`Scheduler`; ties at the same millisecond run in
the order they were scheduled, so the same seed gives the same run.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable

#: an event: when it is due, its place in the order of scheduling (ties), what it does
Event = tuple[int, int, Callable[[], object]]


class Scheduler:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms
        self.queue: list[Event] = []        # a heap; an action's value is not used
        self._seq = itertools.count(1)

    def schedule_in(self, delay_ms: int, action: Callable[[], object]) -> None:
        """Run ``action()`` ``delay_ms`` from now (simulated time)."""
        heapq.heappush(self.queue, (self.now + delay_ms, next(self._seq), action))

    def schedule_at(self, when_ms: int, action: Callable[[], object]) -> None:
        heapq.heappush(self.queue, (when_ms, next(self._seq), action))

    def next_at(self) -> int | None:
        """When the earliest event is due, None with none scheduled."""
        return self.queue[0][0] if self.queue else None

    def pop_due(self) -> Callable[[], object] | None:
        """The next event due by now, taken off the queue; None when none is."""
        queue = self.queue
        if not queue or queue[0][0] > self.now:
            return None
        return heapq.heappop(queue)[2]
