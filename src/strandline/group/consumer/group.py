"""A consumer group of the KIP-848 protocol as its records make it (Kafka's ``ConsumerGroup`` and
the ``replay`` methods of ``GroupMetadataManager``).

The coordinator changes a group only by replaying the records it writes, so that a coordinator
that reads ``__consumer_offsets`` after a failover rebuilds the group exactly: :meth:`replay` is
the one way in. The group keeps, beside its members and target assignment, which member owns each
partition and at what epoch; a record that would give a partition to a member while another still
owns it is a broken invariant of the coordinator.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from uuid import UUID

from strandline.errors import BrokenInvariant
from strandline.group.consumer import records as rec
from strandline.group.consumer.model import (EMPTY, LEAVE_GROUP_MEMBER_EPOCH, Assignment, ConsumerGroupMember,
                                             TopicMetadata, pairs)


class ConsumerGroupState(enum.StrEnum):
    """A consumer group's state, derived from its epochs and members; each value the name
    ConsumerGroupDescribe and ListGroups answer with (Kafka's ``ConsumerGroupState``)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"            # the group epoch is ahead of the target assignment's
    RECONCILING = "Reconciling"        # a member is not yet at the target assignment
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    #: instance id -> member id of the static members
    static_members: dict[str, str] = field(default_factory=dict)
    #: member id -> its target assignment
    target: dict[str, Assignment] = field(default_factory=dict)
    #: topic name -> the topic, for every topic a member is subscribed to (by name or regex)
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    #: (topic id, partition) -> (member id, its epoch) of the member owning the partition
    owners: dict[tuple[UUID, int], tuple[str, int]] = field(default_factory=dict)
    #: the deletion of the group was read
    deleted: bool = False
    #: subscribed regular expression -> the topics it resolved to (record type 16)
    resolved_regexes: dict[str, rec.RegularExpressionValue] = field(default_factory=dict)

    @property
    def last_regex_refresh_ms(self) -> int:
        """When the regular expressions were last resolved (-1: never)."""
        return max((r.timestamp_ms for r in self.resolved_regexes.values()), default=-1)

    def subscribed_names(self, member: ConsumerGroupMember) -> set[str]:
        """The topic names ``member`` subscribes to: by name, and those its regular expression last
        resolved to."""
        names = set(member.subscribed_topic_names)
        resolved = self.resolved_regexes.get(member.subscribed_topic_regex or "")
        if resolved is not None:
            names.update(resolved.topics)
        return names

    def regex_members(self, regex: str) -> int:
        """How many members subscribe with ``regex``."""
        return sum(1 for m in self.members.values() if m.subscribed_topic_regex == regex)

    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's ``maybeUpdateGroupState``, computed when asked."""
        if self.deleted:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def copy(self) -> ConsumerGroup:
        """A copy to change: members are values, so copying the tables is enough."""
        return ConsumerGroup(self.group_id, self.group_epoch, self.assignment_epoch, dict(self.members),
                             dict(self.static_members), dict(self.target), dict(self.subscription_metadata),
                             dict(self.owners), self.deleted, dict(self.resolved_regexes))

    def owner_epoch(self, topic_id: UUID, partition: int) -> int:
        """The epoch of the member owning the partition, or -1 (Kafka's ``currentPartitionEpoch``)."""
        owner = self.owners.get((topic_id, partition))
        return -1 if owner is None else owner[1]

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = None if instance_id is None else self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    # -- replay: the one way a group changes ----------------------------------------------------

    def replay(self, record: rec.Record) -> None:
        key, value = record
        if key.group_id != self.group_id:
            raise BrokenInvariant(f"a record of group {key.group_id} replayed into group {self.group_id}")
        self.deleted = False
        match value:
            case rec.GroupEpochValue(epoch):
                self.group_epoch = epoch
            case rec.PartitionMetadataValue(topics):
                self.subscription_metadata = {t.name: t for t in topics}
            case rec.TargetAssignmentEpochValue(epoch):
                self.assignment_epoch = epoch
            case rec.TargetAssignmentMemberValue(assigned):
                self.target[_member_id(key)] = assigned
            case rec.MemberMetadataValue():
                self._subscribe(_member_id(key), value)
            case rec.RegularExpressionValue():
                self.resolved_regexes[key.regex or ""] = value
            case rec.CurrentAssignmentValue():
                member = self.members.get(_member_id(key)) or ConsumerGroupMember(_member_id(key))
                self._update(replace(member, member_epoch=value.member_epoch,
                                     previous_member_epoch=value.previous_member_epoch, state=value.state,
                                     assigned=value.assigned, pending_revocation=value.pending_revocation))
            case None:
                self._tombstone(key)

    def _subscribe(self, member_id: str, v: rec.MemberMetadataValue) -> None:
        member = self.members.get(member_id) or ConsumerGroupMember(member_id)
        self._update(replace(member, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
                             client_host=v.client_host, subscribed_topic_names=v.subscribed_topic_names,
                             subscribed_topic_regex=v.subscribed_topic_regex,
                             rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor,
                             classic=v.classic))

    def _tombstone(self, key: rec.Key) -> None:
        if key.type == rec.GROUP_METADATA:
            if self.members or self.target or self.assignment_epoch != -1:
                raise BrokenInvariant(f"group {self.group_id} deleted while it has members or a target assignment")
            self.deleted = True
        elif key.type == rec.PARTITION_METADATA:
            self.subscription_metadata = {}
        elif key.type == rec.TARGET_ASSIGNMENT_METADATA:
            if self.target:
                raise BrokenInvariant(f"group {self.group_id}: target assignment deleted while members have one")
            self.assignment_epoch = -1
        elif key.type == rec.TARGET_ASSIGNMENT_MEMBER:
            self.target.pop(_member_id(key), None)
        elif key.type == rec.REGULAR_EXPRESSION:
            self.resolved_regexes.pop(key.regex or "", None)
        elif key.type == rec.CURRENT_MEMBER_ASSIGNMENT:
            member = self.members.get(_member_id(key))
            if member is not None:
                self._update(replace(member, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                     previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH, assigned=EMPTY,
                                     pending_revocation=EMPTY))
        elif key.type == rec.MEMBER_METADATA:
            member = self.members.pop(_member_id(key), None)
            if member is not None:
                self._disown(member)
                if member.instance_id is not None and self.static_members.get(member.instance_id) == member.member_id:
                    del self.static_members[member.instance_id]

    def _update(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._disown(old)
        for tp in pairs(member.assigned) + pairs(member.pending_revocation):
            owner = self.owners.get(tp)
            if owner is not None:
                raise BrokenInvariant(f"group {self.group_id}: partition {tp[0]}-{tp[1]} given to member "
                                      f"{member.member_id} at epoch {member.member_epoch} is still owned by "
                                      f"member {owner[0]} at epoch {owner[1]}")
            self.owners[tp] = (member.member_id, member.member_epoch)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def _disown(self, member: ConsumerGroupMember) -> None:
        for tp in pairs(member.assigned) + pairs(member.pending_revocation):
            if self.owners.get(tp, (None, 0))[0] == member.member_id:
                del self.owners[tp]


def _member_id(key: rec.Key) -> str:
    if key.member_id is None:
        raise BrokenInvariant(f"a member's record of group {key.group_id} without a member id")
    return key.member_id


def rebuild(group_id: str, records: list[rec.Record]) -> ConsumerGroup:
    """The group its records make, replayed in order (what a coordinator loading the partition
    does)."""
    group = ConsumerGroup(group_id)
    for record in records:
        group.replay(record)
    return group

