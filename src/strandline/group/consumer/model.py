"""The vocabulary of a consumer group of the KIP-848 protocol: topics as the coordinator sees
them, assignments, and a member with its epochs and its state (Kafka's ``ConsumerGroupMember``
and ``MemberState``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable, Mapping
from uuid import UUID

from kio.schema.errors import ErrorCode

#: A member's partitions: topic id -> partition indexes. Kept without empty entries, so that two
#: equal assignments compare equal.
Assignment = Mapping[UUID, frozenset[int]]

EMPTY: Assignment = {}

#: the member epoch of a heartbeat that leaves the group (Kafka's LEAVE_GROUP_MEMBER_EPOCH)
LEAVE_GROUP_MEMBER_EPOCH = -1
#: the member epoch of a static member that leaves for a while, keeping its place (Kafka's
#: LEAVE_GROUP_STATIC_MEMBER_EPOCH)
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class ConsumerGroupError(Exception):
    """A heartbeat the coordinator refuses; the answer carries ``error`` (Kafka's ApiException)."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic as the coordinator knows it: its id, name and number of partitions."""

    topic_id: UUID
    name: str
    partitions: int


class MemberState(enum.IntEnum):
    """Where a member is in its reconciliation; each value is the one written in the
    ConsumerGroupCurrentMemberAssignment record (Kafka's ``MemberState``)."""

    STABLE = 0                    # it owns what its epoch's target gives it
    UNREVOKED_PARTITIONS = 1      # it must first give up the partitions pending revocation
    UNRELEASED_PARTITIONS = 2     # some of its target partitions are still owned by others
    UNKNOWN = 127                 # a value this coordinator does not know

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat) joined
    with: its session timeout and the protocols it offered, each a name and the embedded
    protocol's subscription (Kafka's ``ClassicMemberMetadata``)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member of a consumer group. A value: a change makes a new member."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: the partitions it owns or is given (Kafka's assignedPartitions)
    assigned: Assignment = field(default_factory=dict)
    #: the partitions it owns and must give up before it moves on
    pending_revocation: Assignment = field(default_factory=dict)
    #: set for a member of the classic protocol (a consumer of a group being upgraded or downgraded)
    classic: ClassicMemberMetadata | None = None

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch


def assignment(pairs: Iterable[tuple[UUID, int]]) -> Assignment:
    """An assignment of the ``(topic id, partition)`` pairs."""
    found: dict[UUID, set[int]] = {}
    for topic_id, partition in pairs:
        found.setdefault(topic_id, set()).add(partition)
    return {t: frozenset(ps) for t, ps in found.items() if ps}


def pairs(a: Assignment) -> list[tuple[UUID, int]]:
    """The ``(topic id, partition)`` pairs of ``a``, sorted."""
    return sorted((t, p) for t, ps in a.items() for p in ps)


def size(a: Assignment) -> int:
    return sum(len(ps) for ps in a.values())


def normalized(a: Mapping[UUID, Iterable[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in a.items() if ps}
