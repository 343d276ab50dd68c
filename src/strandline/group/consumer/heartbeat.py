"""ConsumerGroupHeartbeat in the pure core (Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``).

A heartbeat joins (member epoch 0), reports (the member's epoch and what it owns) or leaves (-1;
-2 for a static member that will come back under its instance id). Each is answered with the
member's id and epoch, the interval of its heartbeats and, when it changed or the member sent a
full request, the partitions it is to own. What the heartbeat changes is a list of records for
``__consumer_offsets``, applied to a copy of the group as they are made and kept only when the
heartbeat succeeds: the caller appends them and the group is what they make.

The steps are Kafka's: update the member and bump the group epoch when a subscription (or the
subscribed topics) changed; compute a new target assignment with the group's assignor when the
group epoch is ahead of the target's; move the member one step towards its target
(:func:`.reconcile.reconcile`). A member that does not heartbeat within
``group.consumer.session.timeout.ms`` is fenced (removed, and the group epoch bumped); one that
keeps partitions it must give up longer than its rebalance timeout is fenced too. Both are named
deadlines (:class:`SessionTimeout`, :class:`RebalanceTimeout`) that :meth:`expire` fires.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping
from uuid import UUID

from kio.schema.errors import ErrorCode

from strandline.group.consumer import records as rec
from strandline.group.consumer import regex
from strandline.group.consumer.assignors import ASSIGNORS, CLASS_NAMES, RANGE, UNIFORM, MemberSpec
from strandline.group.consumer.describe import preferred_assignor
from strandline.group.consumer.group import ConsumerGroup
from strandline.group.consumer.model import (EMPTY, LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                             Assignment, ClassicMemberMetadata, ConsumerGroupError,
                                             ConsumerGroupMember, MemberState, TopicMetadata)
from strandline.group.consumer.reconcile import reconcile


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The coordinator's keys for consumer groups, with Kafka's defaults."""

    session_timeout_ms: int = 45_000               # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000             # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1                      # group.consumer.max.size
    assignors: tuple[str, ...] = (UNIFORM, RANGE)  # group.consumer.assignors; the first is the default

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ConsumerGroupConfig:
        names = tuple(CLASS_NAMES.get(n.strip(), n.strip())
                      for n in props.get("group.consumer.assignors", "uniform,range").split(",") if n.strip())
        unknown = [n for n in names if n not in ASSIGNORS]
        if unknown or not names:
            raise ValueError(f"group.consumer.assignors: unknown assignors {unknown}; known: {sorted(ASSIGNORS)}")
        return cls(int(props.get("group.consumer.session.timeout.ms", "45000")),
                   int(props.get("group.consumer.heartbeat.interval.ms", "5000")),
                   int(props.get("group.consumer.max.size", str(2**31 - 1))), names)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """The fields of a ConsumerGroupHeartbeat request."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: what the member owns, by topic id; None when it did not say
    topic_partitions: tuple[tuple[UUID, tuple[int, ...]], ...] | None = None
    client_id: str = ""
    client_host: str = ""
    #: a JoinGroup of the classic protocol, taken as a heartbeat (:mod:`.classic`): no epoch to
    #: check, what the member owns from its subscription; ``member_epoch`` 0 when it came without
    #: a member id
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: the partitions the member is to own; None when the answer does not carry them
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class SessionTimeout:
    """The member is fenced at ``due_ms`` unless it heartbeats before."""

    group_id: str
    member_id: str
    due_ms: int
    kind = "session"


@dataclass(frozen=True, slots=True)
class RebalanceTimeout:
    """The member is fenced at ``due_ms`` if it is still at ``member_epoch``, still owning
    partitions it was asked to give up."""

    group_id: str
    member_id: str
    member_epoch: int
    due_ms: int
    kind = "rebalance"


@dataclass(frozen=True, slots=True)
class ClassicTimeout:
    """A member of the classic protocol is fenced at ``due_ms`` unless it joins again (``join``:
    it was told to, REBALANCE_IN_PROGRESS) or syncs (``sync``: it joined) before, within its
    rebalance timeout (Kafka's join and sync timeouts of a consumer group's classic members)."""

    group_id: str
    member_id: str
    due_ms: int
    kind: str


Deadline = SessionTimeout | RebalanceTimeout | ClassicTimeout
_KIND_ORDER = {"session": 0, "rebalance": 1, "join": 2, "sync": 3}


def _fail(error: ErrorCode, message: str) -> ConsumerGroupError:
    return ConsumerGroupError(error, message)


class ConsumerGroupCoordinator:
    """The consumer groups of the KIP-848 protocol one coordinator holds."""

    def __init__(self, config: ConsumerGroupConfig, new_member_id: Callable[[], str]) -> None:
        self.config = config
        self.new_member_id = new_member_id
        #: a group's (session timeout, heartbeat interval): the broker's, or the group's own configs
        self.timings: Callable[[str], tuple[int, int]] = \
            lambda group_id: (config.session_timeout_ms, config.heartbeat_interval_ms)
        #: group.consumer.migration.policy: whether a classic group may become a consumer group
        #: (upgrade) and back (downgrade)
        self.upgrade_enabled = True
        self.downgrade_enabled = True
        self.groups: dict[str, ConsumerGroup] = {}
        self.deadlines: dict[tuple[str, str, str], Deadline] = {}
        #: the cluster's topic names last seen, and their version (regular expressions resolve against it)
        self.topic_names: frozenset[str] = frozenset()
        self.topics_version = 0

    # -- loading ---------------------------------------------------------------------------------

    def load(self, records: Iterable[rec.Record], now_ms: int) -> None:
        """Rebuild the groups from their records, as a coordinator that takes over the partition
        of ``__consumer_offsets`` does, and start each member's session (and the rebalance timeout
        of a member that must give up partitions) anew."""
        for record in records:
            group_id = record[0].group_id
            self.groups.setdefault(group_id, ConsumerGroup(group_id)).replay(record)
        for group in self.groups.values():
            self.topics_version = max([self.topics_version, *(r.version for r in group.resolved_regexes.values())])
            for member in group.members.values():
                self.arm_session(group.group_id, member.member_id, now_ms, member)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._arm_rebalance(group.group_id, member, now_ms)

    # -- heartbeats ------------------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest, topics: Mapping[str, TopicMetadata], now_ms: int,
                  may_describe: Callable[[str], bool] | None = None) -> tuple[list[rec.Record], HeartbeatResponse]:
        """Handle one heartbeat; ``topics`` are the cluster's topics by name, ``may_describe``
        whether the member's client may DESCRIBE a topic (its regular expression resolves to those
        only; None: every topic). Returns the records to append (already applied to the group)
        and the answer."""
        self._note_topics(topics)
        group = self.groups.get(request.group_id)
        work = group.copy() if group is not None else ConsumerGroup(request.group_id)
        written: list[rec.Record] = []
        try:
            if request.classic is None:
                self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                response = self._leave(group, work, request, topics, written)
            else:
                if group is None and request.member_epoch != 0:
                    raise _fail(ErrorCode.group_id_not_found, f"Group {request.group_id} not found.")
                response = self._heartbeat(work, request, topics, now_ms, written, may_describe)
        except ConsumerGroupError as e:
            return [], HeartbeatResponse(e.error, e.message, heartbeat_interval_ms=0)
        if written or group is not None:
            self.groups[request.group_id] = work
        for key in [k for k in self.deadlines if k[1] == work.group_id and k[2] not in work.members]:
            del self.deadlines[key]                        # of a member that left or was replaced
        return written, response

    def _validate(self, r: HeartbeatRequest) -> None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``."""
        invalid = ErrorCode.invalid_request
        if not r.group_id:
            raise _fail(invalid, "GroupId can't be empty.")
        if r.instance_id == "" or r.rack_id == "":
            raise _fail(invalid, "InstanceId and RackId can't be empty.")
        if r.member_epoch > 0 or r.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not r.member_id:
                raise _fail(invalid, "MemberId can't be empty.")
        elif r.member_epoch == 0:
            if r.rebalance_timeout_ms == -1:
                raise _fail(invalid, "RebalanceTimeoutMs must be provided in first request.")
            if r.topic_partitions is None or r.topic_partitions:
                raise _fail(invalid, "TopicPartitions must be empty when (re-)joining.")
            if not r.subscribed_topic_names and r.subscribed_topic_regex is None:
                raise _fail(invalid, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not r.member_id or r.instance_id is None:
                raise _fail(invalid, "MemberId and InstanceId can't be empty.")
        else:
            raise _fail(invalid, "MemberEpoch is invalid.")
        if r.server_assignor is not None and r.server_assignor not in self.config.assignors:
            raise _fail(ErrorCode.unsupported_assignor,
                        f"ServerAssignor {r.server_assignor} is not supported. Supported assignors: "
                        f"{', '.join(self.config.assignors)}.")

    def _note_topics(self, topics: Mapping[str, TopicMetadata]) -> None:
        """A new version of the topic set when its names changed (Kafka compares a regular
        expression's resolution with the metadata image that last brought new topics)."""
        names = frozenset(topics)
        if names != self.topic_names:
            self.topic_names = names
            self.topics_version += 1

    def _heartbeat(self, work: ConsumerGroup, r: HeartbeatRequest, topics: Mapping[str, TopicMetadata],
                   now_ms: int, written: list[rec.Record],
                   may_describe: Callable[[str], bool] | None = None) -> HeartbeatResponse:
        def emit(record: rec.Record) -> None:
            work.replay(record)
            written.append(record)

        if len(work.members) >= self.config.max_size and r.member_id not in work.members:
            raise _fail(ErrorCode.group_max_size_reached, f"The consumer group has reached its maximum capacity "
                                                          f"of {self.config.max_size} members.")
        member_id = r.member_id or self.new_member_id()
        member = self._member(work, r, member_id, emit)
        # 1. the member, its subscription, the group epoch
        updated = replace(
            member, instance_id=r.instance_id if r.instance_id is not None else member.instance_id,
            rack_id=r.rack_id if r.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=r.rebalance_timeout_ms if r.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=r.server_assignor if r.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(r.subscribed_topic_names) if r.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(r.subscribed_topic_regex if r.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=r.client_id, client_host=r.client_host,
            classic=r.classic if r.classic is not None else member.classic)
        bump = False
        # its regular expression (Kafka's maybeUpdateRegularExpressions): the old one's record goes
        # with its last member; a new one is compiled, and resolved below (a bump then if its topics
        # changed), or, already resolved for another member, counts at once
        old_regex, new_regex = member.subscribed_topic_regex, updated.subscribed_topic_regex
        new_unresolved = False
        if old_regex != new_regex:
            if old_regex and work.regex_members(old_regex) == 1 and member_id in work.members:
                emit(regex.tombstone(work.group_id, old_regex))
            if new_regex and work.regex_members(new_regex) == 0:
                regex.compile_regex(new_regex)
                new_unresolved = True
            elif new_regex and new_regex in work.resolved_regexes:
                bump = True
        if updated != member:
            emit((rec.Key(rec.MEMBER_METADATA, work.group_id, member_id), metadata_value(updated)))
            bump = bump or updated.subscribed_topic_names != member.subscribed_topic_names
        if regex.refresh_due(work, self.topics_version, now_ms, forced=new_unresolved):
            records, changed = regex.resolve(work, list(topics), may_describe or _anyone, self.topics_version, now_ms)
            for record in records:
                emit(record)
            bump = bump or changed
        bump = self._update_subscription_metadata(work, topics, emit) or bump
        if bump:
            emit((rec.Key(rec.GROUP_METADATA, work.group_id), rec.GroupEpochValue(work.group_epoch + 1)))
        # 2. the target assignment
        if work.group_epoch > work.assignment_epoch:
            self._assign(work, emit)
        # 3. one step of the member towards its target
        current = work.members[member_id]
        reconciled = current
        if not current.is_reconciled_to(work.assignment_epoch):
            owned = None if r.topic_partitions is None else [(t, ps) for t, ps in r.topic_partitions]
            reconciled = reconcile(current, work.assignment_epoch, work.target.get(member_id, EMPTY),
                                   work.owner_epoch, owned)
            if reconciled != current:
                emit((rec.Key(rec.CURRENT_MEMBER_ASSIGNMENT, work.group_id, member_id), current_value(reconciled)))
                if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                    self._arm_rebalance(work.group_id, reconciled, now_ms)
                else:
                    self.deadlines.pop(("rebalance", work.group_id, member_id), None)
        self.arm_session(work.group_id, member_id, now_ms, reconciled)
        full = r.member_epoch == 0 or (r.rebalance_timeout_ms != -1 and r.subscribed_topic_names is not None
                                       and r.topic_partitions is not None)
        changed = reconciled.assigned != member.assigned
        return HeartbeatResponse(ErrorCode.none, None, member_id, reconciled.member_epoch,
                                 self.timings(work.group_id)[1],
                                 reconciled.assigned if full or changed else None)

    def _member(self, work: ConsumerGroup, r: HeartbeatRequest, member_id: str,
                emit: Callable[[rec.Record], None]) -> ConsumerGroupMember:
        """The member the heartbeat is from (Kafka's ``getOrMaybeSubscribe...ConsumerGroupMember``)."""
        if r.classic is not None:
            return self._classic_member(work, r, member_id, emit)
        if r.instance_id is None:
            member = work.members.get(member_id)
            if member is None:
                if r.member_epoch != 0:
                    raise _fail(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group "
                                                             f"{work.group_id}.")
                return ConsumerGroupMember(member_id)
            if r.member_epoch != 0:
                # epoch 0 under a known id: the member (re)joins and keeps what it has, its epoch,
                # its assignment and its state, answered in full (Kafka 4.2's KAFKA-19233; 4.0 and
                # 4.1 answered FENCED_MEMBER_EPOCH); owning nothing now, it goes on reconciling
                _check_epoch(member, r.member_epoch, r.topic_partitions)
            return member
        existing = work.static_member(r.instance_id)
        if r.member_epoch == 0:
            if existing is None:
                return ConsumerGroupMember(member_id)
            if existing.member_id == member_id:
                return _restart(work, existing, emit)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise _fail(ErrorCode.unreleased_instance_id,
                            f"Static member {member_id} with instance id {r.instance_id} cannot join the group "
                            f"because the instance id is owned by {existing.member_id} member.")
            return self._replace_static(work, existing, member_id, emit)
        if existing is None:
            raise _fail(ErrorCode.unknown_member_id, f"Instance id {r.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise _fail(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id "
                                                      f"{r.instance_id} was fenced by member {existing.member_id}.")
        _check_epoch(existing, r.member_epoch, r.topic_partitions)
        return existing

    def _classic_member(self, work: ConsumerGroup, r: HeartbeatRequest, member_id: str,
                        emit: Callable[[rec.Record], None]) -> ConsumerGroupMember:
        """The member a JoinGroup is from: no epoch to check; a static member's instance that
        comes without a member id replaces the one before it (Kafka's
        ``getOrMaybeSubscribeStaticConsumerGroupMember`` for the classic protocol)."""
        if r.instance_id is None:
            return work.members.get(member_id) or ConsumerGroupMember(member_id)
        existing = work.static_member(r.instance_id)
        if existing is None:
            return work.members.get(member_id) or ConsumerGroupMember(member_id)
        if existing.member_id == member_id:
            return existing
        if r.member_epoch != 0:
            raise _fail(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id "
                                                      f"{r.instance_id} was fenced by member {existing.member_id}.")
        return self._replace_static(work, existing, member_id, emit)

    @staticmethod
    def _replace_static(work: ConsumerGroup, existing: ConsumerGroupMember, member_id: str,
                        emit: Callable[[rec.Record], None]) -> ConsumerGroupMember:
        """The instance of a static member comes back under a new member id and takes its place,
        with its target: no rebalance."""
        new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        target = work.target.get(existing.member_id, EMPTY)
        for record in removal(work.group_id, existing.member_id):
            emit(record)
        emit((rec.Key(rec.MEMBER_METADATA, work.group_id, member_id), metadata_value(new)))
        emit((rec.Key(rec.TARGET_ASSIGNMENT_MEMBER, work.group_id, member_id),
              rec.TargetAssignmentMemberValue(target)))
        emit((rec.Key(rec.CURRENT_MEMBER_ASSIGNMENT, work.group_id, member_id), current_value(new)))
        return new

    def _update_subscription_metadata(self, work: ConsumerGroup, topics: Mapping[str, TopicMetadata],
                                      emit: Callable[[rec.Record], None]) -> bool:
        """Write the subscribed topics when they changed; says whether they did."""
        names = set().union(*(work.subscribed_names(m) for m in work.members.values()))
        metadata = {n: topics[n] for n in sorted(names) if n in topics}
        if metadata == work.subscription_metadata:
            return False
        emit((rec.Key(rec.PARTITION_METADATA, work.group_id), rec.PartitionMetadataValue(tuple(metadata.values()))))
        return True

    def _assign(self, work: ConsumerGroup, emit: Callable[[rec.Record], None]) -> None:
        """A new target assignment at the group epoch (Kafka's ``TargetAssignmentBuilder``): a
        record for each member whose target changed, then the target's epoch."""
        name = preferred_assignor(work, self.config.assignors[0])
        by_name = work.subscription_metadata
        specs = [MemberSpec(m.member_id, m.instance_id,
                            frozenset(by_name[n].topic_id for n in work.subscribed_names(m) if n in by_name),
                            work.target.get(m.member_id, EMPTY))
                 for m in sorted(work.members.values(), key=lambda m: m.member_id)]
        partitions = {t.topic_id: t.partitions for t in by_name.values()}
        new = ASSIGNORS[name](specs, partitions)
        for member_id in sorted(new):
            if new[member_id] != work.target.get(member_id, EMPTY) or member_id not in work.target:
                emit((rec.Key(rec.TARGET_ASSIGNMENT_MEMBER, work.group_id, member_id),
                      rec.TargetAssignmentMemberValue(new[member_id])))
        emit((rec.Key(rec.TARGET_ASSIGNMENT_METADATA, work.group_id),
              rec.TargetAssignmentEpochValue(work.group_epoch)))

    # -- leaving and fencing -----------------------------------------------------------------

    def _leave(self, group: ConsumerGroup | None, work: ConsumerGroup, r: HeartbeatRequest,
               topics: Mapping[str, TopicMetadata], written: list[rec.Record]) -> HeartbeatResponse:
        if group is None:
            raise _fail(ErrorCode.group_id_not_found, f"Group {r.group_id} not found.")
        if r.instance_id is None:
            member = work.members.get(r.member_id)
            if member is None:
                raise _fail(ErrorCode.unknown_member_id, f"Member {r.member_id} is not a member of group "
                                                         f"{r.group_id}.")
        else:
            static = work.static_member(r.instance_id)
            if static is None:
                raise _fail(ErrorCode.unknown_member_id, f"Instance id {r.instance_id} is unknown.")
            if static.member_id != r.member_id:
                raise _fail(ErrorCode.fenced_instance_id, f"Static member {r.member_id} with instance id "
                                                          f"{r.instance_id} was fenced by member {static.member_id}.")
            member = static
            if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # it keeps its place (and its target) until its session ends; what it was giving up is free
                away = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation=EMPTY)
                record = (rec.Key(rec.CURRENT_MEMBER_ASSIGNMENT, r.group_id, member.member_id), current_value(away))
                work.replay(record)
                written.append(record)
                return HeartbeatResponse(member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        written.extend(self.fence(work, member, topics))
        return HeartbeatResponse(member_id=r.member_id, member_epoch=r.member_epoch)

    def fence(self, work: ConsumerGroup, member: ConsumerGroupMember,
               topics: Mapping[str, TopicMetadata]) -> list[rec.Record]:
        """Remove ``member`` and bump the group epoch (Kafka's ``consumerGroupFenceMember``)."""
        written: list[rec.Record] = []

        def emit(record: rec.Record) -> None:
            work.replay(record)
            written.append(record)

        if member.subscribed_topic_regex and work.regex_members(member.subscribed_topic_regex) == 1:
            emit(regex.tombstone(work.group_id, member.subscribed_topic_regex))
        for record in removal(work.group_id, member.member_id):
            emit(record)
        self._update_subscription_metadata(work, topics, emit)
        emit((rec.Key(rec.GROUP_METADATA, work.group_id), rec.GroupEpochValue(work.group_epoch + 1)))
        self._cancel(work.group_id, member.member_id)
        return written

    # -- deadlines -----------------------------------------------------------------------------

    def arm_session(self, group_id: str, member_id: str, now_ms: int,
                     member: ConsumerGroupMember | None = None) -> None:
        """The member's session: the group's session timeout, or the one a member of the classic
        protocol joined with."""
        timeout = (member.classic.session_timeout_ms if member is not None and member.classic is not None
                   else self.timings(group_id)[0])
        self.deadlines[("session", group_id, member_id)] = SessionTimeout(group_id, member_id, now_ms + timeout)

    def arm_classic(self, group_id: str, member_id: str, kind: str, due_ms: int | None) -> None:
        """Arm (``due_ms``) or cancel (None) a classic member's ``join`` or ``sync`` timeout."""
        if due_ms is None:
            self.deadlines.pop((kind, group_id, member_id), None)
        else:
            self.deadlines[(kind, group_id, member_id)] = ClassicTimeout(group_id, member_id, due_ms, kind)

    def _arm_rebalance(self, group_id: str, member: ConsumerGroupMember, now_ms: int) -> None:
        self.deadlines[("rebalance", group_id, member.member_id)] = RebalanceTimeout(
            group_id, member.member_id, member.member_epoch, now_ms + max(member.rebalance_timeout_ms, 0))

    def keep_sessions(self, group_id: str, now_ms: int) -> None:
        """After a group was put back as it was (a write refused): every member it has again has a
        session, and no deadline is left of a member it no longer has; else a member whose leaving
        was refused would stay in the group forever."""
        group = self.groups.get(group_id)
        members = {} if group is None else group.members
        for key in [k for k in self.deadlines if k[1] == group_id and k[2] not in members]:
            del self.deadlines[key]
        for member in members.values():
            if ("session", group_id, member.member_id) not in self.deadlines:
                self.arm_session(group_id, member.member_id, now_ms, member)

    def _cancel(self, group_id: str, member_id: str) -> None:
        for kind in ("session", "rebalance", "join", "sync"):
            self.deadlines.pop((kind, group_id, member_id), None)

    def next_deadline_ms(self) -> int | None:
        return min((d.due_ms for d in self.deadlines.values()), default=None)

    def expire(self, topics: Mapping[str, TopicMetadata], now_ms: int) -> list[rec.Record]:
        """Fence the members whose session, rebalance, join or sync timeout passed; the records to
        append."""
        written: list[rec.Record] = []
        due = sorted((d for d in self.deadlines.values() if d.due_ms <= now_ms),
                     key=lambda d: (d.due_ms, d.group_id, d.member_id, _KIND_ORDER[d.kind]))
        for deadline in due:
            kind = deadline.kind
            if self.deadlines.get((kind, deadline.group_id, deadline.member_id)) != deadline:
                continue                                   # cancelled or moved by an earlier fencing
            del self.deadlines[(kind, deadline.group_id, deadline.member_id)]
            group = self.groups.get(deadline.group_id)
            member = None if group is None else group.members.get(deadline.member_id)
            if group is None or member is None:
                continue
            if isinstance(deadline, RebalanceTimeout) and member.member_epoch != deadline.member_epoch:
                continue
            work = group.copy()
            written.extend(self.fence(work, member, topics))
            self.groups[group.group_id] = work
        return written


def _restart(work: ConsumerGroup, member: ConsumerGroupMember,
             emit: Callable[[rec.Record], None]) -> ConsumerGroupMember:
    """A member that joins again under its id (epoch 0, owning nothing, as a fenced consumer does)
    starts over from epoch 0 without partitions; its target stays, so it gets them back as they
    are free."""
    restarted = replace(member, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                        assigned=EMPTY, pending_revocation=EMPTY)
    emit((rec.Key(rec.CURRENT_MEMBER_ASSIGNMENT, work.group_id, member.member_id), current_value(restarted)))
    return restarted


def _check_epoch(member: ConsumerGroupMember, epoch: int,
                 owned: tuple[tuple[UUID, tuple[int, ...]], ...] | None) -> None:
    """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``: an epoch ahead is fenced; one behind
    only when it is not the previous epoch with a subset of the assignment (the answer that bumped
    the epoch may have been lost)."""
    if epoch > member.member_epoch:
        raise _fail(ErrorCode.fenced_member_epoch, f"The consumer group member has a greater member epoch ({epoch}) "
                                                   f"than the one known by the group coordinator "
                                                   f"({member.member_epoch}).")
    if epoch < member.member_epoch:
        subset = owned is not None and all(p in member.assigned.get(t, ()) for t, ps in owned for p in ps)
        if epoch != member.previous_member_epoch or not subset:
            raise _fail(ErrorCode.fenced_member_epoch, f"The consumer group member has a smaller member epoch "
                                                       f"({epoch}) than the one known by the group coordinator "
                                                       f"({member.member_epoch}).")


def _anyone(topic: str) -> bool:
    return True


def removal(group_id: str, member_id: str) -> list[rec.Record]:
    """The tombstones that remove a member, in Kafka's order."""
    return [(rec.Key(rec.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None),
            (rec.Key(rec.TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None),
            (rec.Key(rec.MEMBER_METADATA, group_id, member_id), None)]


def metadata_value(m: ConsumerGroupMember) -> rec.MemberMetadataValue:
    return rec.MemberMetadataValue(m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names,
                                   m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic)


def current_value(m: ConsumerGroupMember) -> rec.CurrentAssignmentValue:
    return rec.CurrentAssignmentValue(m.member_epoch, m.previous_member_epoch, m.state, m.assigned,
                                      m.pending_revocation)

