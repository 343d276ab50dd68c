"""What the explorer's members of a group share, whatever the group's protocol (the consumer group
protocol of KIP-848, share groups of KIP-932): a member id made from its random source, finding the
group's coordinator and heartbeating on the interval it gives, and what the nemesis does to a
member: leaving the group for a while (a last heartbeat at epoch -1), or stalling (its process
paused: no request leaves it and no answer is taken, until it resumes).

:class:`Members` is the nemesis of a workload's members: every 3-9 s while the faults last, one of
them leaves for 1-5 s or stalls for 2-10 s.
"""

from __future__ import annotations

import random
import uuid
from typing import Any, Callable
from uuid import UUID

from strandline.sim.cluster import SimCluster
from strandline.sim.workload import RETRY_BACKOFF_MS, _Client


class Member(_Client):
    """One member of ``group_id``, subscribed to ``topic``."""

    def __init__(self, sim: SimCluster, name: str, group_id: str, topic: str, partitions: int,
                 rng: random.Random, note: Callable[[str], None]) -> None:
        super().__init__(sim, name, topic, partitions, rng)
        self.group_id = group_id
        self.note = note
        self.member_id = str(uuid.UUID(int=rng.getrandbits(128)))
        self.coordinator: int | None = None
        self.epoch = 0
        self.topic_id: UUID | None = None
        self.joined = False               # in the group, as far as it knows
        self.stalled = False              # its process paused: no heartbeat leaves it
        self.away = False                 # it left the group, for a while
        self.heartbeat_ms = 1000
        self.generation = 0               # each step scheduled carries the generation it was made in
        self.incarnation = 0              # bumped when it leaves or stalls: answers to before are not its own

    def start(self) -> None:
        self.step()

    def schedule(self, delay_ms: int) -> None:
        generation = self.generation = self.generation + 1
        self.later(delay_ms, lambda: self.step() if generation == self.generation else None)

    def step(self) -> None:
        if self.stalled or self.away:
            return
        if self.coordinator is None:
            self.find_coordinator(self.group_id, 0, self.on_coordinator)
        else:
            self.heartbeat()

    def on_coordinator(self, coordinator: int | None) -> None:
        if coordinator is not None:
            self.coordinator = coordinator
        self.schedule(0 if coordinator is not None else RETRY_BACKOFF_MS)

    def heartbeat(self) -> None:
        """One heartbeat to the coordinator (each protocol has its own)."""
        raise NotImplementedError

    # -- what the nemesis does to a member ------------------------------------------------------

    def leave(self, back_in_ms: int) -> None:
        """It leaves the group (its last heartbeat, :meth:`leaving`) and joins again later."""
        if self.away or self.stalled or self.coordinator is None or not self.joined:
            return
        self.note(f"{self.name}: leaves the group for {back_in_ms} ms")
        api_key, version, body = self.leaving()
        self.send(self.coordinator, api_key, version, body, lambda resp: None)
        self.forget()
        self.away = True
        self.generation += 1
        self.incarnation += 1

        def back() -> None:
            self.away = False
            self.schedule(0)
        self.later(back_in_ms, back)

    def close(self) -> None:
        """It stops for good, leaving the group as a closing client does (its last heartbeat)."""
        if self.joined and not self.away and not self.stalled and self.coordinator is not None:
            api_key, version, body = self.leaving()
            self.send(self.coordinator, api_key, version, body, lambda resp: None)
        self.stopped = True

    def leaving(self) -> tuple[int, int, dict[str, Any]]:
        """The heartbeat that leaves the group: its API key, version and body."""
        raise NotImplementedError

    def forget(self) -> None:
        """What a member that left the group no longer has."""
        raise NotImplementedError

    def stall(self, for_ms: int) -> None:
        """Its process pauses: no heartbeat, no answer taken; it still believes what it believed."""
        if self.stalled or self.away:
            return
        self.note(f"{self.name}: stalls for {for_ms} ms{self.stalled_with()}")
        self.stalled = True
        self.generation += 1
        self.incarnation += 1

        def resume() -> None:
            self.stalled = False
            self.schedule(0)
            self.resumed()
        self.later(for_ms, resume)

    def stalled_with(self) -> str:
        """What the trace says a stalling member holds."""
        return ""

    def resumed(self) -> None:
        """Its process runs again (after the heartbeat it schedules)."""


class Members:
    """The nemesis of a workload's members while the faults last (``duration_ms``)."""

    def __init__(self, sim: SimCluster, rng: random.Random, members: list[Any], duration_ms: int) -> None:
        self.sim = sim
        self.rng = rng
        self.members = members
        self.end_ms = sim.now + duration_ms

    def start(self) -> None:
        for member in self.members:
            member.start()
        self.sim.schedule_in(self.rng.randint(3000, 9000), self._perturb)

    def _perturb(self) -> None:
        if self.sim.now >= self.end_ms:
            return
        member = self.rng.choice(self.members)
        if self.rng.random() < 0.5:
            member.leave(self.rng.randint(1000, 5000))
        else:
            member.stall(self.rng.randint(2000, 10000))
        self.sim.schedule_in(self.rng.randint(3000, 9000), self._perturb)
