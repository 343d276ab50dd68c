"""A classic group and its members as the group coordinator keeps them in memory.

A group's state is a :class:`GroupState`, and it changes only through :meth:`Group.transition_to`,
which checks :data:`VALID_PREVIOUS_STATES` (Kafka's ``GroupState.validPreviousStates``) and raises
:class:`~strandline.errors.BrokenInvariant` on a transition the table does not allow, as Kafka's
``assertValidTransition`` throws.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.errors import BrokenInvariant
from strandline.group import records as rec

Respond = Callable[[dict[str, Any]], list[Effect]]
#: ``done(error, when_ms, base_offset)`` of an append to the offsets topic (-1 unless written).
Appended = Callable[[ErrorCode, int, int], list[Effect]]
#: ``append(partition, records, done, now_ms)``: write ``(key, value)`` records to an offsets partition.
class Append(Protocol):
    """``append(partition, records, done, now_ms, producer)``: write ``(key, value)`` records to an
    offsets partition, as a transactional producer's batch when ``producer`` (id, epoch) is given."""

    def __call__(self, index: int, records: Sequence[rec.KeyValue], done: Appended, now_ms: int,
                 producer: tuple[int, int] | None = None) -> list[Effect]: ...


class GroupState(enum.StrEnum):
    """A classic group's states; each value is the name DescribeGroups and ListGroups answer with."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


#: the states a group may enter each state from (Kafka's ``GroupState.validPreviousStates``)
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                               GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset({GroupState.STABLE, GroupState.PREPARING_REBALANCE,
                                GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}
#: the states a group is read back in from ``__consumer_offsets`` (Dead: its tombstone was read)
RESTORED_STATES = frozenset({GroupState.EMPTY, GroupState.STABLE, GroupState.DEAD})


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_respond: Respond | None = None
    join_version: int = 0
    sync_respond: Respond | None = None
    heartbeat_deadline_ms: int = 0

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")


@dataclass
class Group:
    group_id: str
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)          # member id -> join deadline
    offsets: dict[tuple[str, int], rec.OffsetValue] = field(default_factory=dict)
    #: where each committed offset's record lies in ``__consumer_offsets``: of two commits of a
    #: partition, the one appended later counts (Kafka's ``CommitRecordMetadataAndOffset.olderThan``)
    offset_positions: dict[tuple[str, int], int] = field(default_factory=dict)
    #: offsets committed in transactions not yet ended: producer id -> partition -> (offset, where
    #: its record lies in ``__consumer_offsets``)
    pending_txn_offsets: dict[int, dict[tuple[str, int], tuple[rec.OffsetValue, int]]] = \
        field(default_factory=dict)
    join_deadline_ms: int | None = None
    initial_delay: bool = False                                    # an empty group waits for more joiners
    state_timestamp: int = -1
    _state: GroupState = field(default=GroupState.EMPTY, init=False)

    @property
    def state(self) -> GroupState:
        return self._state

    def transition_to(self, state: GroupState) -> None:
        """Move to ``state``: a transition :data:`VALID_PREVIOUS_STATES` does not allow is a broken
        invariant of the coordinator (Kafka's ``assertValidTransition``)."""
        if self._state not in VALID_PREVIOUS_STATES[state]:
            raise BrokenInvariant(f"group {self.group_id} cannot move from {self._state} to {state}: "
                                  f"{state} follows only {', '.join(sorted(VALID_PREVIOUS_STATES[state]))}")
        self._state = state

    def restore(self, state: GroupState) -> None:
        """Take the state read back from ``__consumer_offsets`` while replaying it: not a
        transition, as a record read later replaces the group read before it (Kafka's
        ``GroupMetadata.loadGroup`` builds a new group in its initial state)."""
        if state not in RESTORED_STATES:
            raise BrokenInvariant(f"group {self.group_id} cannot be restored in state {state}")
        self._state = state

    def install_offset(self, tp: tuple[str, int], value: rec.OffsetValue, position: int) -> bool:
        """A commit of ``tp`` appended at ``position`` of ``__consumer_offsets`` counts unless one
        appended later already does (Kafka: ``offsets(tp).olderThan(commit)``). Says whether it did."""
        if tp in self.offsets and self.offset_positions.get(tp, -1) > position:
            return False
        self.offsets[tp] = value
        self.offset_positions[tp] = position
        return True

    def drop_offset(self, tp: tuple[str, int]) -> None:
        self.offsets.pop(tp, None)
        self.offset_positions.pop(tp, None)

    def static_member(self, instance_id: str | None) -> Member | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.group_instance_id == instance_id), None)

    def fenced(self, member_id: str, instance_id: str | None) -> bool:
        """Whether ``instance_id`` is a static member of the group under another member id: a newer
        instance replaced the one asking (Kafka's isStaticMemberFenced: FENCED_INSTANCE_ID)."""
        static = self.static_member(instance_id)
        return static is not None and static.member_id != member_id
