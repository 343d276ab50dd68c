"""Members of the classic protocol in a consumer group, and a group's move from one protocol to
the other (Kafka 4.x's online migration, KIP-848's "upgrade and downgrade",
``group.consumer.migration.policy``).

A live classic group of consumers becomes a consumer group when the first member of the new
protocol joins it (:func:`from_classic`): its members keep their partitions at the generation's
epoch, and go on speaking the classic protocol inside the consumer group, where the coordinator
assigns for them. Their JoinGroup is taken as a heartbeat (what they own is in their subscription);
their SyncGroup gets the partitions they are to own now; their Heartbeat is told
REBALANCE_IN_PROGRESS whenever they must join again to move on (the group epoch moved, or they must
give up partitions, or partitions they wait for are free); each of those steps has its deadline.
When the last member of the new protocol leaves a group whose other members all speak the classic
protocol, the group becomes a classic group again (:func:`downgrade_tombstones` and the classic
coordinator's rebalance).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping
from uuid import UUID

from kio.schema.errors import ErrorCode

from strandline.group.consumer import embedded
from strandline.group.consumer import records as rec
from strandline.group.consumer.group import ConsumerGroup
from strandline.group.consumer.heartbeat import (ConsumerGroupCoordinator, HeartbeatRequest, current_value,
                                                 metadata_value, removal)
from strandline.group.consumer.model import (Assignment, ClassicMemberMetadata, ConsumerGroupError,
                                             ConsumerGroupMember, MemberState, TopicMetadata, assignment, pairs)

@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup to a consumer group."""

    group_id: str
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    #: JoinGroup v4+ without an instance id: a member without an id is given one and asked again
    requires_known_member_id: bool = False


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_name: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ClassicMemberInfo:
    """A member of a classic group, as the upgrade reads it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


def _names(topics: Mapping[str, TopicMetadata]) -> dict[UUID, str]:
    return {t.topic_id: name for name, t in topics.items()}


def _by_name(a: Assignment, topics: Mapping[str, TopicMetadata]) -> dict[str, list[int]]:
    names = _names(topics)
    found: dict[str, list[int]] = {}
    for topic_id, p in pairs(a):
        if topic_id in names:
            found.setdefault(names[topic_id], []).append(p)
    return found


def _by_id(partitions: Iterable[tuple[str, Iterable[int]]], topics: Mapping[str, TopicMetadata]) -> Assignment:
    return assignment((topics[name].topic_id, p) for name, ps in partitions if name in topics for p in ps)


def supports(group: ConsumerGroup, member_id: str, protocol_type: str, protocols: Iterable[str]) -> bool:
    """Kafka's ``supportsClassicProtocols``: the embedded protocol, and a protocol every other
    classic member offers too."""
    if protocol_type != embedded.PROTOCOL_TYPE:
        return False
    offered = set(protocols)
    others = [m.classic for m in group.members.values() if m.classic is not None and m.member_id != member_id]
    if not others:
        return bool(offered)
    return any(all(name in {n for n, _ in c.protocols} for c in others) for name in offered)


def join(core: ConsumerGroupCoordinator, j: ClassicJoin, topics: Mapping[str, TopicMetadata], new_member_id: str,
         now_ms: int) -> tuple[list[rec.Record], JoinAnswer]:
    """A JoinGroup to consumer group ``j.group_id`` (Kafka's ``classicGroupJoinToConsumerGroup``):
    the member is updated from its subscription, and moves towards its target as a heartbeat
    would; the answer's generation is its member epoch."""
    group = core.groups[j.group_id]
    known = bool(j.member_id)
    member_id = j.member_id or new_member_id
    if member_id not in group.members and len(group.members) >= core.config.max_size:
        return [], JoinAnswer(ErrorCode.group_max_size_reached, member_id)
    if not supports(group, member_id, j.protocol_type, (n for n, _ in j.protocols)):
        return [], JoinAnswer(ErrorCode.inconsistent_group_protocol, member_id)
    if not known and j.requires_known_member_id and j.instance_id is None:
        return [], JoinAnswer(ErrorCode.member_id_required, member_id)
    try:
        subscription = embedded.decode_subscription(j.protocols[0][1])
    except embedded.MalformedProtocol as e:
        return [], JoinAnswer(ErrorCode.inconsistent_group_protocol, member_id,
                              message=f"The subscription cannot be read: {e}.")
    owned = _by_id(subscription.owned, topics)
    request = HeartbeatRequest(
        j.group_id, member_id, 0 if not known else 1, j.instance_id, subscription.rack_id, j.rebalance_timeout_ms,
        subscription.topics, None, None, tuple((t, tuple(sorted(ps))) for t, ps in sorted(owned.items())),
        j.client_id, j.client_host, ClassicMemberMetadata(j.session_timeout_ms, tuple(j.protocols)))
    records, answer = core.heartbeat(request, topics, now_ms)
    if answer.error_code is not ErrorCode.none or answer.member_id is None:
        return [], JoinAnswer(answer.error_code, member_id, message=answer.error_message)
    core.arm_classic(j.group_id, answer.member_id, "join", None)
    core.arm_classic(j.group_id, answer.member_id, "sync", now_ms + max(j.rebalance_timeout_ms, 0))
    return records, JoinAnswer(ErrorCode.none, answer.member_id, answer.member_epoch, j.protocols[0][0])


def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None,
                    generation: int) -> ConsumerGroupMember:
    """Kafka's ``validateConsumerGroupMember``, ``throwIfMemberDoesNotUseClassicProtocol`` and
    ``throwIfGenerationIdUnmatched``."""
    member = group.members.get(member_id)
    if instance_id is not None:
        static = group.static_member(instance_id)
        if static is not None and static.member_id != member_id:
            raise ConsumerGroupError(ErrorCode.fenced_instance_id, f"Instance id {instance_id} is owned by "
                                                                   f"{static.member_id}.")
    if member is None or member.classic is None:
        raise ConsumerGroupError(ErrorCode.unknown_member_id, f"Member {member_id} is not a classic member of "
                                                              f"group {group.group_id}.")
    if generation != member.member_epoch:
        raise ConsumerGroupError(ErrorCode.illegal_generation, f"The generation id {generation} is not equal to "
                                                               f"the member epoch {member.member_epoch}.")
    return member


def _must_rejoin(core: ConsumerGroupCoordinator, group: ConsumerGroup, member: ConsumerGroupMember,
                 now_ms: int, on_heartbeat: bool) -> bool:
    """Whether the member must join again; if so its join timeout starts (unless it runs)."""
    rejoin = group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS
    if on_heartbeat:
        rejoin = (group.group_epoch > member.member_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                  or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting(group, member)))
    if rejoin and ("join", group.group_id, member.member_id) not in core.deadlines:
        core.arm_classic(group.group_id, member.member_id, "join", now_ms + max(member.rebalance_timeout_ms, 0))
    return rejoin


def _waiting(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Whether a partition of the member's target it does not have yet is still owned by another
    (Kafka's ``waitingOnUnreleasedPartition``)."""
    target = group.target.get(member.member_id, {})
    return any(tp not in set(pairs(member.assigned)) and group.owner_epoch(*tp) != -1 for tp in pairs(target))


def sync(core: ConsumerGroupCoordinator, group_id: str, member_id: str, instance_id: str | None, generation: int,
         protocol_type: str | None, protocol_name: str | None, topics: Mapping[str, TopicMetadata],
         now_ms: int) -> tuple[ErrorCode, bytes]:
    """A SyncGroup of a classic member (Kafka's ``classicGroupSyncToConsumerGroup``): the
    partitions it is to own now, in the version of the embedded protocol it offered."""
    group = core.groups[group_id]
    try:
        member = _classic_member(group, member_id, instance_id, generation)
    except ConsumerGroupError as e:
        return e.error, b""
    assert member.classic is not None
    first = member.classic.protocols[0] if member.classic.protocols else ("", b"")
    if (protocol_type is not None and protocol_type != embedded.PROTOCOL_TYPE) or \
            (protocol_name is not None and protocol_name != first[0]):
        return ErrorCode.inconsistent_group_protocol, b""
    if _must_rejoin(core, group, member, now_ms, on_heartbeat=False):
        return ErrorCode.rebalance_in_progress, b""
    core.arm_classic(group_id, member_id, "sync", None)
    core.arm_session(group_id, member_id, now_ms, member)
    return ErrorCode.none, embedded.encode_assignment(_by_name(member.assigned, topics),
                                                      embedded.protocol_version(first[1]))


def heartbeat(core: ConsumerGroupCoordinator, group_id: str, member_id: str, instance_id: str | None,
              generation: int, now_ms: int) -> ErrorCode:
    """A Heartbeat of a classic member (Kafka's ``classicGroupHeartbeatToConsumerGroup``)."""
    group = core.groups[group_id]
    try:
        member = _classic_member(group, member_id, instance_id, generation)
    except ConsumerGroupError as e:
        return e.error
    core.arm_session(group_id, member_id, now_ms, member)
    if _must_rejoin(core, group, member, now_ms, on_heartbeat=True):
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none


def leaving(group: ConsumerGroup, members: list[tuple[str, str | None]]
            ) -> tuple[list[ConsumerGroupMember], list[tuple[str, str | None, ErrorCode]]]:
    """The members a LeaveGroup removes, and each one's answer (Kafka's
    ``classicGroupLeaveToConsumerGroup``): by instance id for a static member, by member id
    otherwise."""
    gone: list[ConsumerGroupMember] = []
    answers = []
    for member_id, instance_id in members:
        member = group.static_member(instance_id) if instance_id is not None else group.members.get(member_id)
        if member is None:
            answers.append((member_id, instance_id, ErrorCode.unknown_member_id))
        elif instance_id is not None and member_id and member.member_id != member_id:
            answers.append((member_id, instance_id, ErrorCode.fenced_instance_id))
        elif member.classic is None:
            answers.append((member_id, instance_id, ErrorCode.unknown_member_id))
        else:
            if member not in gone:
                gone.append(member)
            answers.append((member.member_id, instance_id, ErrorCode.none))
    return gone, answers


# -- the protocol changes -------------------------------------------------------------------------


def from_classic(group_id: str, generation: int, protocol: str | None, members: list[ClassicMemberInfo],
                 topics: Mapping[str, TopicMetadata]) -> list[rec.Record]:
    """The records of a consumer group made from a classic group at ``generation`` (Kafka's
    ``ConsumerGroup.fromClassicGroup`` and ``createConsumerGroupRecords``): each member at the
    generation's epoch, owning what its assignment gave it, which is also its target.
    :class:`ConsumerGroupError` (GROUP_ID_NOT_FOUND) when a member's subscription or assignment
    cannot be read or two members were given one partition."""
    def refuse(why: str) -> ConsumerGroupError:
        return ConsumerGroupError(ErrorCode.group_id_not_found,
                                  f"Cannot upgrade classic group {group_id} to consumer group because {why}.")
    converted: list[ConsumerGroupMember] = []
    taken: set[tuple[UUID, int]] = set()
    for m in members:
        # a group in its first rebalance has no protocol yet: its members own nothing, and their
        # subscriptions are in the first protocol each offered
        metadata = (next((meta for name, meta in m.protocols if name == protocol), None) if protocol is not None
                    else m.protocols[0][1] if m.protocols else None)
        if metadata is None:
            raise refuse("the embedded consumer protocol is malformed")
        try:
            subscription = embedded.decode_subscription(metadata)
            assigned = _by_id(embedded.decode_assignment(m.assignment), topics)
        except embedded.MalformedProtocol:
            raise refuse("the embedded consumer protocol is malformed") from None
        if taken & set(pairs(assigned)):
            raise refuse("two members were assigned one partition")
        taken |= set(pairs(assigned))
        converted.append(ConsumerGroupMember(
            m.member_id, generation, generation, MemberState.STABLE, m.instance_id, subscription.rack_id,
            m.rebalance_timeout_ms, m.client_id, m.client_host, subscription.topics, None, None, assigned, {},
            ClassicMemberMetadata(m.session_timeout_ms, m.protocols)))
    names = sorted({n for m in converted for n in m.subscribed_topic_names if n in topics})
    records: list[rec.Record] = [(rec.Key(rec.MEMBER_METADATA, group_id, m.member_id), metadata_value(m))
                                 for m in converted]
    records.append((rec.Key(rec.GROUP_METADATA, group_id), rec.GroupEpochValue(generation)))
    records.append((rec.Key(rec.PARTITION_METADATA, group_id),
                    rec.PartitionMetadataValue(tuple(topics[n] for n in names))))
    records += [(rec.Key(rec.TARGET_ASSIGNMENT_MEMBER, group_id, m.member_id),
                 rec.TargetAssignmentMemberValue(m.assigned)) for m in converted]
    records.append((rec.Key(rec.TARGET_ASSIGNMENT_METADATA, group_id), rec.TargetAssignmentEpochValue(generation)))
    records += [(rec.Key(rec.CURRENT_MEMBER_ASSIGNMENT, group_id, m.member_id), current_value(m))
                for m in converted]
    return records


def downgradable(core: ConsumerGroupCoordinator, group: ConsumerGroup, leaving_ids: set[str],
                 classic_max_size: int) -> bool:
    """Kafka's ``validateOnlineDowngradeWithFencedMembers``: the members that stay all speak the
    classic protocol, there is one at least, downgrade is allowed and they fit a classic group."""
    staying = [m for m in group.members.values() if m.member_id not in leaving_ids]
    return (bool(staying) and all(m.classic is not None for m in staying) and core.downgrade_enabled
            and len(staying) <= classic_max_size and bool(leaving_ids & set(group.members)))


def downgrade_tombstones(group: ConsumerGroup) -> list[rec.Record]:
    """The tombstones that end consumer group ``group`` (Kafka's ``createGroupTombstoneRecords``):
    each member's, its regular expressions', then the target's, the subscription's and the epoch's."""
    records: list[rec.Record] = []
    for member_id in sorted(group.members):
        records += removal(group.group_id, member_id)
    records += [(rec.Key(rec.REGULAR_EXPRESSION, group.group_id, regex=r), None) for r in sorted(group.resolved_regexes)]
    records += [(rec.Key(kind, group.group_id), None)
                for kind in (rec.TARGET_ASSIGNMENT_METADATA, rec.PARTITION_METADATA, rec.GROUP_METADATA)]
    return records


def classic_members(group: ConsumerGroup, leaving_ids: set[str], topics: Mapping[str, TopicMetadata]
                    ) -> list[tuple[ConsumerGroupMember, bytes]]:
    """The members that stay, each with its target assignment in the embedded protocol, for the
    classic group a downgrade makes (Kafka's ``ClassicGroup.fromConsumerGroup``)."""
    staying = []
    for member_id in sorted(group.members):
        member = group.members[member_id]
        if member_id in leaving_ids or member.classic is None:
            continue
        version = embedded.protocol_version(member.classic.protocols[0][1]) if member.classic.protocols else 0
        staying.append((replace(member), embedded.encode_assignment(
            _by_name(group.target.get(member_id, {}), topics), version)))
    return staying
