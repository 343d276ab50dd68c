"""The classic coordinator's side of a group's move between protocols: a classic group handing its
members over to a consumer group (upgrade), and taking members back from one (downgrade).

The group's committed offsets stay where they are (the classic coordinator keeps the offsets of
both kinds of group); only its members and generation move.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.group.coordinator import GroupCoordinator
from strandline.group.model import Group, GroupState, Member
from strandline.group.rebalance import answer_join, answer_sync, prepare_rebalance, select_protocol


@dataclass
class Handover:
    """A classic group's membership as it was before it was handed over, to put back if the
    records of the change could not be written."""

    group_id: str
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    members: dict[str, Member] = field(default_factory=dict)
    state: GroupState = GroupState.EMPTY


def hand_over(classic: GroupCoordinator, group_id: str) -> tuple[Handover, list[Effect]]:
    """The classic group gives its members up (Kafka's ``convertToConsumerGroup``): members
    waiting in JoinGroup or SyncGroup are told REBALANCE_IN_PROGRESS, and the group keeps only its
    offsets, Empty at generation 0, as its tombstone makes it when read back."""
    group = classic.groups[group_id]
    before = Handover(group_id, group.generation, group.protocol_type, group.protocol, group.leader,
                      dict(group.members), group.state)
    effects: list[Effect] = []
    for m in group.members.values():
        effects += answer_join(m, {"error_code": ErrorCode.rebalance_in_progress})
        effects += answer_sync(m, ErrorCode.rebalance_in_progress)
    _reset(group)
    return before, effects


def _reset(group: Group) -> None:
    group.members.clear()
    group.pending.clear()
    group.generation, group.protocol_type, group.protocol, group.leader = 0, None, None, None
    group.join_deadline_ms = None
    group.restore(GroupState.EMPTY)


def take_back(classic: GroupCoordinator, before: Handover, now_ms: int) -> None:
    """The handover's records were not written: the classic group is as it was."""
    group = classic.groups.setdefault(before.group_id, Group(before.group_id))
    group.generation, group.protocol_type, group.protocol = before.generation, before.protocol_type, before.protocol
    group.leader, group.members = before.leader, dict(before.members)
    if before.state in (GroupState.EMPTY, GroupState.STABLE):
        group.restore(before.state)
    else:                       # it was rebalancing: its members were told to join again, so it rebalances
        group.restore(GroupState.STABLE)
        prepare_rebalance(group, classic.config, now_ms)


def adopt(classic: GroupCoordinator, group_id: str, generation: int, members: list[Member],
          now_ms: int) -> tuple[tuple[bytes, bytes], list[Effect]]:
    """A consumer group's members become a classic group at ``generation`` (Kafka's
    ``ClassicGroup.fromConsumerGroup``): Stable with each member's assignment, its record (to write
    with the consumer group's tombstones), then a rebalance, so that every member joins the
    classic group. Returns the record and the rebalance's effects."""
    group = classic.groups.setdefault(group_id, Group(group_id))
    group.members = {m.member_id: m for m in members}
    group.generation, group.protocol_type = generation, "consumer"
    group.protocol = select_protocol(group)
    group.leader = members[0].member_id
    group.state_timestamp = now_ms
    for m in members:
        m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
    group.restore(GroupState.STABLE)
    record = classic.group_record(group)
    return record, prepare_rebalance(group, classic.config, now_ms)


def drop(classic: GroupCoordinator, group_id: str) -> None:
    """The adoption's records were not written: the classic group keeps only its offsets."""
    group = classic.groups.get(group_id)
    if group is not None:
        _reset(group)


def member(member_id: str, instance_id: str | None, client_id: str, client_host: str, rebalance_timeout_ms: int,
           session_timeout_ms: int, protocols: tuple[tuple[str, bytes], ...], assignment: bytes) -> Member:
    """A classic member of the embedded consumer protocol."""
    return Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                  "consumer", list(protocols), assignment)
