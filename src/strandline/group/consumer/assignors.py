"""The server-side assignors of the consumer group protocol, ``uniform`` and ``range``
(``group.consumer.assignors``), as Kafka's group coordinator has them.

An assignor gets every member (its id, instance id, the ids of the topics it is subscribed to and
its current target assignment) and each subscribed topic's number of partitions, and returns the
new target assignment: every partition of a subscribed topic goes to exactly one member subscribed
to it.

``uniform`` (Kafka's ``UniformAssignor``) spreads the partitions evenly and sticks: a member keeps
what it had up to its share. When every member has the same subscription, shares differ by at most
one partition (Kafka's ``UniformHomogeneousAssignmentBuilder``); otherwise each partition goes to
the least loaded member that may take it and partitions then move from a member holding two or more
than another member subscribed to their topic (the balance Kafka's
``UniformHeterogeneousAssignmentBuilder`` seeks, balance before stickiness). The extra partitions of
the even shares go first to the members holding the most, so that the fewest partitions move.

``range`` (Kafka's ``RangeAssignor``) gives each member subscribed to a topic one contiguous range
of its partitions: members in order (static members by instance id first, then the others by member
id), each taking ``partitions // members`` and the first ``partitions % members`` one more. It does
not stick, as Kafka's does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence
from uuid import UUID

from strandline.group.consumer.model import Assignment, assignment, normalized

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """A member as an assignor sees it."""

    member_id: str
    instance_id: str | None
    subscribed: frozenset[UUID]
    assignment: Assignment


#: members, partitions of each topic -> member id -> its new target assignment
Assignor = Callable[[Sequence[MemberSpec], Mapping[UUID, int]], dict[str, Assignment]]


def _kept(member: MemberSpec, partitions: Mapping[UUID, int]) -> list[tuple[UUID, int]]:
    """What ``member`` holds that it may keep: partitions that exist, of topics it subscribes to."""
    return sorted((t, p) for t, ps in member.assignment.items() if t in member.subscribed
                  for p in ps if p < partitions.get(t, 0))


def uniform(members: Sequence[MemberSpec], partitions: Mapping[UUID, int]) -> dict[str, Assignment]:
    if not members:
        return {}
    if len({m.subscribed for m in members}) == 1:
        return _uniform_homogeneous(members, partitions)
    return _uniform_heterogeneous(members, partitions)


def _uniform_homogeneous(members: Sequence[MemberSpec], partitions: Mapping[UUID, int]) -> dict[str, Assignment]:
    topics = sorted(t for t in members[0].subscribed if t in partitions)
    total = sum(partitions[t] for t in topics)
    minimum, extra = divmod(total, len(members))
    held = {m.member_id: _kept(m, partitions) for m in members}
    # the extra partitions go first to those that hold the most: the fewest partitions move
    order = sorted(members, key=lambda m: (-len(held[m.member_id]), m.member_id))
    result: dict[str, list[tuple[UUID, int]]] = {}
    room: dict[str, int] = {}
    taken: set[tuple[UUID, int]] = set()
    for index, member in enumerate(order):
        quota = minimum + (1 if index < extra else 0)
        keep = [tp for tp in held[member.member_id] if tp not in taken][:quota]
        taken.update(keep)
        result[member.member_id] = keep
        room[member.member_id] = quota - len(keep)
    free = iter([(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken])
    for member in order:
        for _ in range(room[member.member_id]):
            result[member.member_id].append(next(free))
    return {member_id: assignment(tps) for member_id, tps in result.items()}


def _uniform_heterogeneous(members: Sequence[MemberSpec], partitions: Mapping[UUID, int]) -> dict[str, Assignment]:
    subscribers: dict[UUID, list[str]] = {}
    for member in sorted(members, key=lambda m: m.member_id):
        for topic_id in member.subscribed:
            if topic_id in partitions:
                subscribers.setdefault(topic_id, []).append(member.member_id)
    owner: dict[tuple[UUID, int], str] = {}
    owned: dict[str, set[tuple[UUID, int]]] = {m.member_id: set() for m in members}
    for member in sorted(members, key=lambda m: m.member_id):
        for tp in _kept(member, partitions):
            if tp not in owner:
                owner[tp] = member.member_id
                owned[member.member_id].add(tp)

    def least_loaded(topic_id: UUID) -> str:
        return min(subscribers[topic_id], key=lambda m: (len(owned[m]), m))

    # partitions nobody keeps, topics with the fewest subscribers (the fewest choices) first
    for topic_id in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        for p in range(partitions[topic_id]):
            if (topic_id, p) not in owner:
                to = least_loaded(topic_id)
                owner[(topic_id, p)] = to
                owned[to].add((topic_id, p))
    # balance: a partition moves while its owner holds two or more than another member that may
    # take it; each move lowers the sum of the squared loads, so this ends
    moved = True
    while moved:
        moved = False
        for member_id in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[member_id]):
                to = least_loaded(tp[0])
                if len(owned[member_id]) - len(owned[to]) > 1:
                    owned[member_id].discard(tp)
                    owned[to].add(tp)
                    moved = True
    return {member_id: assignment(tps) for member_id, tps in owned.items()}


def _range_order(member: MemberSpec) -> tuple[int, str]:
    return (0, member.instance_id) if member.instance_id is not None else (1, member.member_id)


def range_(members: Sequence[MemberSpec], partitions: Mapping[UUID, int]) -> dict[str, Assignment]:
    ordered = sorted(members, key=_range_order)
    result: dict[str, dict[UUID, range]] = {m.member_id: {} for m in ordered}
    for topic_id in sorted({t for m in ordered for t in m.subscribed if t in partitions}):
        takers = [m for m in ordered if topic_id in m.subscribed]
        minimum, extra = divmod(partitions[topic_id], len(takers))
        start = 0
        for index, member in enumerate(takers):
            end = start + minimum + (1 if index < extra else 0)
            result[member.member_id][topic_id] = range(start, end)
            start = end
    return {member_id: normalized(topics) for member_id, topics in result.items()}


#: the assignors by the names ``group.consumer.assignors`` and a heartbeat's ServerAssignor use
ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_}
#: Kafka's class names for them, also accepted in ``group.consumer.assignors``
CLASS_NAMES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
               "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE}
