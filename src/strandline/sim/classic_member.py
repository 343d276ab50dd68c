"""A consumer of the classic group protocol in the explorer's consumer group, driven as Kafka's
``KafkaConsumer`` with ``group.protocol=classic`` and the cooperative-sticky assignor drives it:
JoinGroup (asking for a member id first), SyncGroup, Heartbeat, LeaveGroup.

It shares the group with members of the consumer protocol (:mod:`.group_workload`), so that the
coordinator serves it inside a consumer group, and, when the last of those leaves, turns the group
into a classic group, then back into a consumer group when one of them joins again (Kafka 4.x's
online migration). In a classic group the member the coordinator names leader assigns: each
member keeps what it owns up to its share, the rest is spread, and a partition that moves from
one member to another is left out until its owner gave it up (the cooperative protocol's rule: the
owner revokes it and joins again, and the next generation gives it on).

What it owns, at its generation (the member epoch inside a consumer group), goes to the same
:class:`~strandline.sim.group_workload.GroupChecker` as the other members'.
"""

from __future__ import annotations

import random
import struct
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.group.consumer import embedded
from strandline.protocol.api import ApiKey
from strandline.sim.cluster import SimCluster
from strandline.sim.members import Member
from strandline.sim.workload import RETRY_BACKOFF_MS

PROTOCOL = "cooperative-sticky"
JOIN_VERSION, SYNC_VERSION, HEARTBEAT_VERSION, LEAVE_VERSION = 5, 5, 3, 3
SESSION_TIMEOUT_MS = 6000
REBALANCE_TIMEOUT_MS = 10000
HEARTBEAT_INTERVAL_MS = 1000
_FIND_AGAIN = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
               ErrorCode.network_exception, ErrorCode.request_timed_out}
_LOST = {ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.fenced_instance_id}


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s.encode())) + s.encode()


def subscription(topic: str, owned: frozenset[int]) -> bytes:
    """ConsumerProtocolSubscription v1: the topic, no user data, the partitions owned."""
    out = struct.pack(">hi", 1, 1) + _string(topic) + struct.pack(">i", -1)
    out += struct.pack(">i", 1) + _string(topic) + struct.pack(">i", len(owned))
    return out + b"".join(struct.pack(">i", p) for p in sorted(owned))


def cooperative_assignment(members: dict[str, frozenset[int]], partitions: int) -> dict[str, list[int]]:
    """The leader's assignment (``members``: member id -> what it owns): sticky and balanced, with
    a partition that changes owner left out of this generation."""
    names = sorted(members)
    quota = {m: partitions // len(names) + (1 if i < partitions % len(names) else 0) for i, m in enumerate(names)}
    owner = {p: m for m in names for p in members[m] if p < partitions}
    target: dict[str, list[int]] = {m: [] for m in names}
    free = []
    for p in range(partitions):
        m = owner.get(p)
        if m is not None and len(target[m]) < quota[m]:
            target[m].append(p)
        else:
            free.append(p)
    for p in free:
        m = min(names, key=lambda n: (len(target[n]) - quota[n], n))
        target[m].append(p)
    return {m: [p for p in ps if owner.get(p, m) == m] for m, ps in target.items()}


class ClassicMember(Member):
    """One consumer of the classic protocol in the explorer's group, subscribed to ``topic``."""

    def __init__(self, sim: SimCluster, name: str, group_id: str, topic: str, partitions: int,
                 rng: random.Random, checker: Any, note: Callable[[str], None]) -> None:
        super().__init__(sim, name, group_id, topic, partitions, rng, note)
        self.checker = checker
        self.member_id = ""
        self.owned: frozenset[int] = frozenset()
        self.must_join = True

    def heartbeat(self) -> None:
        """The next request: a JoinGroup when it must join, else a Heartbeat."""
        if self.must_join:
            self.join()
            return
        body = {"group_id": self.group_id, "generation_id": self.epoch, "member_id": self.member_id,
                "group_instance_id": None}
        generation = self.generation

        def on_answer(resp: Any) -> None:
            if self._not_mine(generation):
                return
            error = ErrorCode.network_exception if resp is None else ErrorCode(int(resp.error_code))
            if error is ErrorCode.none:
                self.schedule(HEARTBEAT_INTERVAL_MS)
            elif error is ErrorCode.rebalance_in_progress:
                self.must_join = True
                self.schedule(0)
            else:
                self._failed("heartbeat", error, resp)
        self.send(self.coordinator or 1, ApiKey.HEARTBEAT, HEARTBEAT_VERSION, body, on_answer)

    def _not_mine(self, generation: int) -> bool:
        """An answer a paused, gone or moved-on member does not take."""
        return self.stalled or self.away or generation != self.generation

    def _lost(self, generation: int) -> bool:
        """:meth:`_not_mine` for the answer to a JoinGroup or SyncGroup: one a paused member did not
        take is lost to it, and it joins again once it runs (as a client whose request timed out
        does): the coordinator may have given it partitions it never heard of."""
        if self.stalled:
            self.must_join = True
        return self._not_mine(generation)

    def _failed(self, what: str, error: ErrorCode, resp: Any) -> None:
        if error in _FIND_AGAIN:
            self.coordinator = None
            self.schedule(RETRY_BACKOFF_MS)
        elif error in _LOST:
            self.note(f"{self.name}: {what} answered {error.name} at generation {self.epoch}: it loses "
                      f"{sorted(self.owned)}, joins again")
            self.lose_everything(reset_id=error is not ErrorCode.illegal_generation)
            self.schedule(0)
        elif error is ErrorCode.rebalance_in_progress:
            self.must_join = True
            self.schedule(0)
        else:
            self.checker.fail("classic members are answered", f"{self.name}: {what} answered {error.name}")
            self.schedule(HEARTBEAT_INTERVAL_MS)

    def join(self) -> None:
        body = {"group_id": self.group_id, "session_timeout": SESSION_TIMEOUT_MS,
                "rebalance_timeout": REBALANCE_TIMEOUT_MS, "member_id": self.member_id, "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": PROTOCOL, "metadata": subscription(self.topic, self.owned)}]}
        generation = self.generation

        def on_answer(resp: Any) -> None:
            if self._lost(generation):
                return
            error = ErrorCode.network_exception if resp is None else ErrorCode(int(resp.error_code))
            if error is ErrorCode.member_id_required:
                self.member_id = resp.member_id
                self.schedule(0)
            elif error is ErrorCode.none:
                self.member_id = resp.member_id
                self.must_join = False
                assignments = []
                if resp.leader == self.member_id and resp.members:
                    owned = {}
                    for m in resp.members:
                        try:
                            sub = embedded.decode_subscription(m.metadata)
                        except embedded.MalformedProtocol:
                            sub = embedded.Subscription(0, ())
                        owned[m.member_id] = frozenset(p for _, ps in sub.owned for p in ps)
                    plan = cooperative_assignment(owned, self.partitions)
                    assignments = [{"member_id": m, "assignment": embedded.encode_assignment({self.topic: ps}, 1)}
                                   for m, ps in sorted(plan.items())]
                self.sync(int(resp.generation_id), assignments)
            else:
                self._failed("JoinGroup", error, resp)
        self.send(self.coordinator or 1, ApiKey.JOIN_GROUP, JOIN_VERSION, body, on_answer)

    def sync(self, generation_id: int, assignments: list[dict[str, Any]]) -> None:
        body = {"group_id": self.group_id, "generation_id": generation_id, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": PROTOCOL,
                "assignments": assignments}
        self.generation += 1
        generation = self.generation

        def on_answer(resp: Any) -> None:
            if self._lost(generation):
                return
            error = ErrorCode.network_exception if resp is None else ErrorCode(int(resp.error_code))
            if error is not ErrorCode.none:
                self.must_join = True
                self._failed("SyncGroup", error, resp)
                return
            assigned = frozenset(p for _, ps in embedded.decode_assignment(resp.assignment) for p in ps)
            self.joined = True
            kept = self.owned & assigned
            if kept != self.owned:                  # it gives up what it no longer has, then joins again
                self.checker.owns(self.name, self.epoch, kept)
                self.must_join = True
            self.epoch = generation_id
            self.owned = assigned
            self.checker.owns(self.name, self.epoch, self.owned)
            self.schedule(0 if self.must_join else HEARTBEAT_INTERVAL_MS)
        self.send(self.coordinator or 1, ApiKey.SYNC_GROUP, SYNC_VERSION, body, on_answer)

    def lose_everything(self, reset_id: bool = True) -> None:
        self.owned = frozenset()
        self.epoch = 0
        self.joined = False
        self.must_join = True
        if reset_id:
            self.member_id = ""
        self.checker.gone(self.name)

    # -- what the nemesis does to a member (see :class:`strandline.sim.members.Member`) ----------

    def leaving(self) -> tuple[int, int, dict[str, Any]]:
        return ApiKey.LEAVE_GROUP, LEAVE_VERSION, {"group_id": self.group_id, "members": [
            {"member_id": self.member_id, "group_instance_id": None}]}

    def forget(self) -> None:
        self.lose_everything()

    def stalled_with(self) -> str:
        return f", owning {sorted(self.owned)} at generation {self.epoch}"
