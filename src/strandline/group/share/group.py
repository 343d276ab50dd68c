"""A share group's members and ShareGroupHeartbeat (KIP-932), in the pure core.

A member joins with epoch 0 and the topics it subscribes to, heartbeats with its epoch, and leaves
with -1. Unlike a consumer group there is nothing to hand over: a partition may be read by many
members at once, and each record is locked for one at a time by its partition's leader
(:mod:`.partition`). So a member's epoch goes straight to the group's assignment epoch and its
partitions straight to its target (:mod:`.assignor`): no revocation step, no rebalance timeout.

The group epoch is bumped when a member joins, leaves, is fenced, or changes its subscription, and
when a subscribed topic appears, goes or gains partitions; the target assignment is then computed
again. A member silent for ``group.share.session.timeout.ms`` is fenced (:meth:`ShareGroup.expire`).
Errors and messages are Kafka's (``GroupCoordinatorService`` and ``GroupMetadataManager``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping
from uuid import UUID

from kio.schema.errors import ErrorCode

from strandline.group.share.assignor import Assignment, assign

JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """The coordinator's keys for share groups, with Kafka's defaults."""

    session_timeout_ms: int = 45_000         # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000       # group.share.heartbeat.interval.ms
    max_size: int = 200                      # group.share.max.size

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ShareGroupConfig:
        return cls(int(props.get("group.share.session.timeout.ms", "45000")),
                   int(props.get("group.share.heartbeat.interval.ms", "5000")),
                   int(props.get("group.share.max.size", "200")))


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...] | None = None     # None: unchanged
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatAnswer:
    error_code: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None        # None: unchanged since the member's last answer


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    rack_id: str | None
    client_id: str
    client_host: str
    assignment: Assignment = field(default_factory=dict)
    deadline_ms: int = 0


#: a topic as the group sees it: name -> (topic id, partition count)
Topics = Mapping[str, "tuple[UUID, int]"]


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    #: the subscribed topics as the last target assignment saw them
    topics_seen: dict[str, tuple[UUID, int]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """ShareGroupDescribe's GroupState: Empty or Stable (nothing to reconcile)."""
        return "Stable" if self.members else "Empty"

    def heartbeat(self, beat: ShareHeartbeat, topics: Topics, config: ShareGroupConfig,
                  now_ms: int) -> ShareHeartbeatAnswer:
        """Apply one ShareGroupHeartbeat; the answer, with an error and nothing changed when refused."""
        refused = self._check(beat, config)
        if refused is not None:
            return refused
        if beat.member_epoch == LEAVE_EPOCH:
            del self.members[beat.member_id]
            self._bump(topics)
            return ShareHeartbeatAnswer(ErrorCode.none, None, beat.member_id, LEAVE_EPOCH,
                                        config.heartbeat_interval_ms)
        member = self.members.get(beat.member_id)
        joining = member is None or beat.member_epoch == JOIN_EPOCH
        changed = member is None
        if member is None:
            member = ShareMember(beat.member_id, 0, beat.subscribed_topic_names or (), beat.rack_id,
                                 beat.client_id, beat.client_host)
            self.members[beat.member_id] = member
        elif beat.subscribed_topic_names is not None and \
                tuple(sorted(beat.subscribed_topic_names)) != tuple(sorted(member.subscribed_topic_names)):
            member.subscribed_topic_names = beat.subscribed_topic_names
            changed = True
        member.rack_id = beat.rack_id if beat.rack_id is not None else member.rack_id
        member.deadline_ms = now_ms + config.session_timeout_ms
        if changed or self._subscribed(topics) != self.topics_seen:     # one bump for all of it
            self.group_epoch += 1
        if self.assignment_epoch < self.group_epoch:
            self._assign(topics)
        before = member.assignment
        member.member_epoch = self.assignment_epoch
        member.assignment = self.targets.get(member.member_id, {})
        tell = joining or member.assignment != before
        return ShareHeartbeatAnswer(ErrorCode.none, None, member.member_id, member.member_epoch,
                                    config.heartbeat_interval_ms, member.assignment if tell else None)

    def expire(self, topics: Topics, now_ms: int) -> list[str]:
        """Fence the members whose session ran out by ``now_ms``; their ids."""
        fenced = sorted(m for m, member in self.members.items() if member.deadline_ms <= now_ms)
        for member_id in fenced:
            del self.members[member_id]
        if fenced:
            self._bump(topics)
        return fenced

    def next_deadline_ms(self) -> int | None:
        return min((m.deadline_ms for m in self.members.values()), default=None)

    # ------------------------------------------------------------------ internals

    def _check(self, beat: ShareHeartbeat, config: ShareGroupConfig) -> ShareHeartbeatAnswer | None:
        if not beat.member_id:
            return ShareHeartbeatAnswer(ErrorCode.invalid_request, "MemberId can't be empty.")
        if beat.member_epoch < LEAVE_EPOCH:
            return ShareHeartbeatAnswer(ErrorCode.invalid_request, "MemberEpoch is invalid.")
        if beat.member_epoch == JOIN_EPOCH and not beat.subscribed_topic_names:
            return ShareHeartbeatAnswer(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
        member = self.members.get(beat.member_id)
        if beat.member_epoch == JOIN_EPOCH:
            if member is None and len(self.members) >= config.max_size:
                return ShareHeartbeatAnswer(ErrorCode.group_max_size_reached,
                                            f"The share group has reached its maximum capacity of "
                                            f"{config.max_size} members.")
            return None
        if member is None:
            return ShareHeartbeatAnswer(ErrorCode.unknown_member_id,
                                        f"Member {beat.member_id} is not a member of group {self.group_id}.")
        if beat.member_epoch != LEAVE_EPOCH and beat.member_epoch != member.member_epoch:
            which = "smaller" if beat.member_epoch < member.member_epoch else "greater"
            return ShareHeartbeatAnswer(ErrorCode.fenced_member_epoch,
                                        f"The share group member has a {which} member epoch ({beat.member_epoch}) "
                                        f"than the one known by the group coordinator ({member.member_epoch}). "
                                        "The member must abandon all its partitions and rejoin.")
        return None

    def _subscribed(self, topics: Topics) -> dict[str, tuple[UUID, int]]:
        names = {n for m in self.members.values() for n in m.subscribed_topic_names}
        return {n: topics[n] for n in sorted(names) if n in topics}

    def _bump(self, topics: Topics) -> None:
        self.group_epoch += 1
        self._assign(topics)

    def _assign(self, topics: Topics) -> None:
        seen = self._subscribed(topics)
        ids = {name: topic_id for name, (topic_id, _) in seen.items()}
        subscriptions = {m.member_id: frozenset(ids[n] for n in m.subscribed_topic_names if n in ids)
                         for m in self.members.values()}
        counts = {topic_id: count for topic_id, count in seen.values()}
        current = {m.member_id: m.assignment for m in self.members.values()}
        self.targets = assign(subscriptions, counts, current)
        self.topics_seen = seen
        self.assignment_epoch = self.group_epoch
