"""One member's step towards its target assignment (Kafka's ``CurrentAssignmentBuilder``).

A member is given a partition only once no other member owns it, in its assignment or among the
partitions it must still give up: the coordinator knows every owned partition with the epoch of
its owner (``owner_epoch``, -1 for none). A member that must give up partitions stays at its epoch
until its heartbeat no longer lists them; only then does it move to the target's epoch and get the
partitions now free.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable
from uuid import UUID

from kio.schema.errors import ErrorCode

from strandline.group.consumer.model import (Assignment, ConsumerGroupError, ConsumerGroupMember, MemberState,
                                             normalized)

#: (topic id, partition) -> the epoch of the member that owns it, or -1
OwnerEpoch = Callable[[UUID, int], int]
#: a heartbeat's TopicPartitions: what the member says it owns; None when it did not say
Owned = Iterable[tuple[UUID, Iterable[int]]] | None


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment, owner_epoch: OwnerEpoch,
              owned: Owned) -> ConsumerGroupMember:
    """The member after one step towards ``target`` at ``target_epoch``; the same member when it
    cannot move (it still owns partitions it must give up) or has nothing to do."""
    owned_list = None if owned is None else [(t, frozenset(ps)) for t, ps in owned]
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned_list)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned_list, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owner_epoch, owned_list)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned_list)
    # UNKNOWN: a state a newer coordinator wrote; the member starts over without partitions
    if owned_list is None or any(ps for _, ps in owned_list):
        raise ConsumerGroupError(ErrorCode.fenced_member_epoch,
                                 "The consumer group member is in a unknown state. "
                                 "The member must abandon all its partitions and rejoin.")
    return _next(member, target_epoch, target_epoch, target, owner_epoch, owned_list)


def _owns_any(owned: list[tuple[UUID, frozenset[int]]] | None, revoking: Assignment) -> bool:
    """Whether the member still owns a partition of ``revoking``; one that did not say what it
    owns is taken to own them all."""
    if owned is None:
        return True
    return any(p in revoking.get(t, ()) for t, ps in owned for p in ps)


def _with(member: ConsumerGroupMember, state: MemberState, epoch: int, assigned: Assignment,
          revoking: Assignment) -> ConsumerGroupMember:
    """The one place a member's state changes: Kafka's ``updateMemberEpoch`` keeps the epoch it
    leaves as the previous one."""
    return replace(member, state=state, member_epoch=epoch, previous_member_epoch=member.member_epoch,
                   assigned=normalized(assigned), pending_revocation=normalized(revoking))


def _next(member: ConsumerGroupMember, member_epoch: int, target_epoch: int, target: Assignment,
          owner_epoch: OwnerEpoch, owned: list[tuple[UUID, frozenset[int]]] | None) -> ConsumerGroupMember:
    assigned: dict[UUID, frozenset[int]] = {}
    revoking: dict[UUID, frozenset[int]] = {}
    to_assign: dict[UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        assigned[topic_id] = current & wanted
        revoking[topic_id] = current - wanted
        pending = wanted - current
        free = frozenset(p for p in pending if owner_epoch(topic_id, p) == -1)
        unreleased = unreleased or free != pending
        to_assign[topic_id] = free
    revoking_n = normalized(revoking)
    if revoking_n and _owns_any(owned, revoking_n):
        # it keeps its epoch and is asked to give these up first
        return _with(member, MemberState.UNREVOKED_PARTITIONS, member_epoch, assigned, revoking_n)
    given = {t: assigned.get(t, frozenset()) | to_assign.get(t, frozenset()) for t in set(assigned) | set(to_assign)}
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with(member, state, target_epoch, given, {})
