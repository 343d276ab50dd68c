"""Consumers of the consumer group protocol (KIP-848) for the explorer, driven as Kafka 4.x's
``KafkaConsumer`` with ``group.protocol=consumer`` drives its heartbeats, every request through the
simulated network, and the check of what they own.

A :class:`GroupMember` makes its member id, finds the group's coordinator (FindCoordinator, key
type 0), joins with epoch 0 and its subscription, then heartbeats every interval the coordinator
gives, reporting what it owns; it takes an assignment as the client does: it gives up at once the
partitions the answer no longer lists, then owns the new ones, and heartbeats again at once when
its assignment changed. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS
or no answer: find the coordinator again; after any heartbeat without its answer the next one is a
full request (its subscription and what it owns), which the coordinator answers with the whole
assignment, as the Java client resets the fields it sent. FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: it loses every
partition and joins again under its id; GROUP_ID_NOT_FOUND to a member of the group (it turned
classic, :mod:`.classic_member`) fails its client, which is started again. Now and then a member leaves (epoch -1) and joins again
later, or stalls past its session (its process paused: it still believes it owns its partitions,
a zombie, until an answer fences it).

:class:`GroupChecker` holds the rule KIP-848 promises: no partition is owned by two members at
one member epoch (a zombie may still believe it owns a partition another member owns now, at a
later epoch; never at the same one). After the faults heal, the group must settle: every
partition of the topic owned by exactly one member, every member at one epoch.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.protocol.api import ApiKey
from strandline.sim.checker import Violation
from strandline.sim.classic_member import ClassicMember
from strandline.sim.cluster import SimCluster
from strandline.sim.members import Member, Members
from strandline.sim.workload import RETRY_BACKOFF_MS

GROUP = "explorer-group"
HEARTBEAT_VERSION = 1
#: the brokers' keys for the group's timeouts in a run of a minute (Kafka's defaults are 45 s and 5 s)
#: and three partitions of __consumer_offsets (Kafka's 50 would slow the simulator for nothing)
BROKER_CONFIG = {"group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "6000",
                 "group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.heartbeat.interval.ms": "1000",
                 "offsets.topic.num.partitions": "3"}
#: once the group settled and its members stopped, the time its last records take to reach every
#: replica of __consumer_offsets before the replicas are compared
QUIET_MS = 3000
_FIND_AGAIN = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
               ErrorCode.network_exception}
_REJOIN = {ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id}


class GroupChecker:
    """What each member owns, at which epoch, as the members themselves see it."""

    def __init__(self, fail: Callable[[str, str], None], note: Callable[[str], None]) -> None:
        self.fail = fail
        self.note = note
        self.owned: dict[str, tuple[int, frozenset[int]]] = {}      # member -> (its epoch, its partitions)
        self.changes = 0

    def owns(self, member: str, epoch: int, partitions: frozenset[int]) -> None:
        before = self.owned.get(member)
        self.owned[member] = (epoch, partitions)
        if before == (epoch, partitions):
            return
        self.changes += 1
        for other, (other_epoch, theirs) in self.owned.items():
            both = partitions & theirs
            if other != member and other_epoch == epoch and both:
                self.fail("no partition has two owners of one epoch",
                          f"members {other} and {member} both own partitions {sorted(both)} at epoch {epoch}")

    def gone(self, member: str) -> None:
        self.owned.pop(member, None)

    def settled(self, partitions: int, members: list[Any]) -> str | None:
        """None once the group settled; else what is still wrong."""
        active = [m for m in members if m.joined and not m.stalled]
        if not active:
            return "no member is in the group"
        epochs = {m.epoch for m in active}
        owners: dict[int, list[str]] = {}
        for m in active:
            for p in m.owned:
                owners.setdefault(p, []).append(m.name)
        unowned = [p for p in range(partitions) if p not in owners]
        shared = {p: names for p, names in owners.items() if len(names) > 1}
        if len(epochs) == 1 and not unowned and not shared:
            return None
        return f"member epochs {sorted(epochs)}, unowned partitions {unowned}, shared {shared}"


class GroupMember(Member):
    """One consumer of the group, subscribed to ``topic`` by name."""

    def __init__(self, sim: SimCluster, name: str, topic: str, partitions: int, rng: random.Random,
                 checker: GroupChecker, note: Callable[[str], None]) -> None:
        super().__init__(sim, name, GROUP, topic, partitions, rng, note)
        self.checker = checker
        self.owned: frozenset[int] = frozenset()
        self.full = False                 # a heartbeat went unanswered: the next one is a full request

    def heartbeat(self) -> None:
        joining = self.epoch == 0
        full = joining or self.full
        owned = [] if joining or self.topic_id is None else \
            [{"topic_id": self.topic_id, "partitions": sorted(self.owned)}]
        body = {"group_id": GROUP, "member_id": self.member_id, "member_epoch": self.epoch, "instance_id": None,
                "rack_id": None, "rebalance_timeout": 30000 if full else -1,
                "subscribed_topic_names": [self.topic] if full else None, "subscribed_topic_regex": None,
                "server_assignor": None, "topic_partitions": owned}
        sent_epoch, generation = self.epoch, self.generation

        def on_answer(resp: Any) -> None:
            if self.stalled or self.away or generation != self.generation:
                self.full = True          # a paused process takes no answer; a left one ignores it
                return
            error = ErrorCode.network_exception if resp is None else ErrorCode(int(resp.error_code))
            if error is ErrorCode.none:
                if full:                  # only a full request's answer has the whole assignment
                    self.full = False
                self.on_heartbeat(resp, sent_epoch)
            elif error in _FIND_AGAIN:
                self.full = True
                self.coordinator = None
                self.schedule(RETRY_BACKOFF_MS)
            elif error in _REJOIN:
                self.note(f"{self.name}: {error.name} at epoch {sent_epoch}: it loses {sorted(self.owned)}, joins again")
                self.lose_everything()
                self.schedule(0)
            elif error is ErrorCode.group_id_not_found and sent_epoch > 0:
                # the group turned classic while this member was gone (its leaving, or its fencing,
                # downgraded it): Kafka answers so, and its client fails; the application starts
                # a new one, which joins (and upgrades the group) at epoch 0
                self.note(f"{self.name}: {resp.error_message} at epoch {sent_epoch}: its client fails and starts "
                          f"again, losing {sorted(self.owned)}")
                self.lose_everything()
                self.schedule(RETRY_BACKOFF_MS)
            else:
                self.checker.fail("heartbeats are answered", f"{self.name}: heartbeat at epoch {sent_epoch} answered "
                                                             f"{error.name}: {resp.error_message}")
                self.schedule(self.heartbeat_ms)
        self.send(self.coordinator if self.coordinator is not None else 1, ApiKey.CONSUMER_GROUP_HEARTBEAT,
                  HEARTBEAT_VERSION, body, on_answer)

    def on_heartbeat(self, resp: Any, sent_epoch: int) -> None:
        self.joined = True
        self.epoch = int(resp.member_epoch)
        self.heartbeat_ms = max(int(resp.heartbeat_interval.total_seconds() * 1000), 100)
        changed = False
        if resp.assignment is not None:
            assigned = frozenset(p for t in resp.assignment.topic_partitions for p in t.partitions)
            for t in resp.assignment.topic_partitions:
                self.topic_id = t.topic_id
            if assigned != self.owned:
                kept = self.owned & assigned            # revoked first, as the client's callbacks run
                if kept != self.owned:
                    self.checker.owns(self.name, self.epoch, kept)
                self.owned = assigned
                changed = True
        self.checker.owns(self.name, self.epoch, self.owned)
        self.schedule(0 if changed else self.heartbeat_ms)

    def lose_everything(self) -> None:
        self.owned = frozenset()
        self.epoch = 0
        self.joined = False
        self.checker.gone(self.name)

    # -- what the nemesis does to a member (see :class:`strandline.sim.members.Member`) ----------

    def leaving(self) -> tuple[int, int, dict[str, Any]]:
        return ApiKey.CONSUMER_GROUP_HEARTBEAT, HEARTBEAT_VERSION, {
            "group_id": GROUP, "member_id": self.member_id, "member_epoch": -1, "instance_id": None,
            "rack_id": None, "rebalance_timeout": -1, "subscribed_topic_names": None,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None}

    def forget(self) -> None:
        self.lose_everything()

    def stalled_with(self) -> str:
        # it still believes it owns its partitions: a zombie once the coordinator fences it
        return f", owning {sorted(self.owned)} at epoch {self.epoch}"


class GroupWorkload:
    """Three members of one group on ``topic`` for the explorer, and now and then one of them
    leaving for a while or stalling past its session, for ``duration_ms``."""

    def __init__(self, sim: SimCluster, topic: str, partitions: int, rng: random.Random,
                 fail: Callable[[str, str], None], note: Callable[[str], None], duration_ms: int,
                 classic_rng: random.Random | None = None) -> None:
        self.sim = sim
        self.note = note
        self.checker = GroupChecker(fail, note)
        self.members: list[Any] = [GroupMember(sim, f"g{n}", topic, partitions, random.Random(rng.random()),
                                               self.checker, note) for n in (1, 2, 3)]
        self.nemeses = []
        classic: list[Any] = []
        if classic_rng is not None:
            # consumers of the classic protocol too: three of the consumer protocol and one classic (a
            # consumer group serving a classic member), or one and two classic (the group turns classic
            # whenever the one is gone, and back when it returns)
            mixed = classic_rng.random() < 0.5
            self.members = self.members if mixed else self.members[:1]
            classic = [ClassicMember(sim, f"c{n}", GROUP, topic, partitions, random.Random(classic_rng.random()),
                                     self.checker, note) for n in ((1,) if mixed else (1, 2))]
            note(f"the group: {', '.join(m.name for m in self.members)} of the consumer protocol, "
                 f"{', '.join(m.name for m in classic)} of the classic protocol")
            self.nemeses.append(Members(sim, random.Random(classic_rng.random()), classic, duration_ms))
        self.nemeses.insert(0, Members(sim, rng, self.members, duration_ms))
        self.members = self.members + classic

    def start(self) -> None:
        for nemesis in self.nemeses:
            nemesis.start()

    def settle(self, partitions: int, within_ms: int) -> None:
        """After healing, the group settles within ``within_ms`` (every one of ``partitions`` owned
        by exactly one member, every member at one epoch; a Violation otherwise); then the members
        stop, and their last records are given the time to reach every replica."""
        deadline = self.sim.now + within_ms
        while (wrong := self.checker.settled(partitions, self.members)) is not None:
            if self.sim.now >= deadline:
                raise Violation("the consumer group settles", f"not settled within {within_ms} ms of healing: {wrong}",
                                self.sim.now)
            self.sim.advance(100)
        self.note(f"the consumer group settled: {self.checker.changes} ownership changes")
        for member in self.members:
            member.stopped = True
        self.sim.advance(QUIET_MS)
