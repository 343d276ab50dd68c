"""Members of the classic protocol in the broker's consumer groups, and the groups' moves between
protocols (Kafka 4.x's online upgrade and downgrade, ``group.consumer.migration.policy``).

The rules are the pure core's (:mod:`strandline.group.consumer.classic`); here their records are
written to the group's offsets partition with the rest of the consumer group's, and the classic
coordinator hands its members over or takes them back (:mod:`strandline.group.classic_migration`).

- **Upgrade**: the first ConsumerGroupHeartbeat (epoch 0) to a classic group with members turns
  it into a consumer group in the same write: the classic group's tombstone, then the consumer
  group's records (each member at the generation, owning what it was assigned), then what the
  heartbeat changes. Refused with GROUP_ID_NOT_FOUND, as Kafka does, when the policy does not
  allow upgrades, the group is not of the embedded consumer protocol, or its members' metadata
  cannot be read.
- **Classic members of a consumer group**: JoinGroup, SyncGroup, Heartbeat and LeaveGroup for a
  consumer group with members are served by the consumer group (:class:`ClassicMembers`).
- **Downgrade**: when members leave (LeaveGroup, a leaving heartbeat, an expired session) and all
  that stay speak the classic protocol, the group becomes a classic group instead: the consumer
  group's tombstones and the classic group's record in one write, then a rebalance of the classic
  group that every member joins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.core.group_keys import MIGRATION_POLICIES
from strandline.group import classic_migration as handover
from strandline.group import records as classic_records
from strandline.group.consumer import classic as cls
from strandline.group.consumer import records as crec
from strandline.group.consumer.group import ConsumerGroup, rebuild
from strandline.group.consumer.heartbeat import ConsumerGroupCoordinator
from strandline.group.consumer.model import ConsumerGroupError, TopicMetadata
from strandline.group.coordinator import GroupCoordinator

Encoded = list[tuple[bytes, bytes | None]]
Done = Callable[[ErrorCode, int], list[Effect]]
Respond = Callable[[dict[str, Any]], list[Effect]]


class Host(Protocol):
    """What the broker's consumer groups lend: the core, the classic coordinator, the cluster's
    topics and their write path."""

    core: ConsumerGroupCoordinator
    classic: GroupCoordinator
    topics: Callable[[], Mapping[str, TopicMetadata]]

    def write_encoded(self, group_id: str, encoded: Encoded, done: Done, now_ms: int,
                      undo: Callable[[int], None] | None = None) -> list[Effect]: ...

    def when_committed(self, group_id: str, then: Callable[[ErrorCode], list[Effect]],
                       now_ms: int) -> list[Effect]: ...


@dataclass
class Upgrade:
    """A classic group turned into a consumer group, its records not yet written."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    encoded: Encoded = field(default_factory=list)
    undo: Callable[[int], None] | None = None
    effects: list[Effect] = field(default_factory=list)


def _join_body(answer: cls.JoinAnswer) -> dict[str, Any]:
    if answer.error is not ErrorCode.none:
        return {"error_code": answer.error, "generation_id": -1, "protocol_name": None, "leader": "",
                "member_id": answer.member_id, "members": []}
    return {"error_code": ErrorCode.none, "generation_id": answer.generation, "protocol_type": "consumer",
            "protocol_name": answer.protocol_name, "leader": "", "member_id": answer.member_id, "members": [],
            "skip_assignment": False}


class ClassicMembers:
    def __init__(self, host: Host, config: Any) -> None:
        self.host = host
        upgrade, downgrade = MIGRATION_POLICIES[str(config["group.consumer.migration.policy"]).lower()]
        host.core.upgrade_enabled, host.core.downgrade_enabled = upgrade, downgrade
        self.classic_max_size = int(config["group.max.size"])

    @property
    def core(self) -> ConsumerGroupCoordinator:
        return self.host.core

    # ------------------------------------------------------------------ upgrade and downgrade

    def upgrade(self, group_id: str, now_ms: int) -> Upgrade:
        """Turn classic group ``group_id`` (with members) into a consumer group in memory; the
        records to write come back with the way to undo it."""
        classic = self.host.classic
        group = classic.groups[group_id]

        def refuse(why: str) -> Upgrade:
            return Upgrade(ErrorCode.group_id_not_found,
                           f"Cannot upgrade classic group {group_id} to consumer group because {why}.")
        if not self.core.upgrade_enabled:
            return refuse("online upgrade is disabled")
        if group.protocol_type != "consumer":
            return refuse("the group does not use the consumer embedded protocol")
        if len(group.members) > self.core.config.max_size:
            return refuse("the group size exceeds the consumer group maximum size")
        infos = [cls.ClassicMemberInfo(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                       m.rebalance_timeout_ms, m.session_timeout_ms, tuple(m.protocols),
                                       m.assignment) for m in group.members.values()]
        try:
            records = cls.from_classic(group_id, group.generation, group.protocol, infos, self.host.topics())
        except ConsumerGroupError as e:
            return Upgrade(e.error, e.message)
        before, effects = handover.hand_over(classic, group_id)
        converted = rebuild(group_id, records)
        self.core.groups[group_id] = converted
        for member in converted.members.values():
            self.core.arm_session(group_id, member.member_id, now_ms, member)

        def undo(when_ms: int) -> None:
            self.core.groups.pop(group_id, None)
            self._forget_deadlines(group_id)
            handover.take_back(classic, before, when_ms)
        encoded: Encoded = [(classic_records.group_key(group_id), None)]
        effects.append(LogLine("info", f"[GroupId {group_id}] Converted the classic group to a consumer group "
                                       f"at epoch {converted.group_epoch}."))
        return Upgrade(encoded=encoded + [crec.encode(r) for r in records], undo=undo, effects=effects)

    def _forget_deadlines(self, group_id: str) -> None:
        for key in [k for k in self.core.deadlines if k[1] == group_id]:
            del self.core.deadlines[key]

    def downgradable(self, group: ConsumerGroup, leaving_ids: set[str]) -> bool:
        return cls.downgradable(self.core, group, leaving_ids, self.classic_max_size)

    def downgrade(self, before: ConsumerGroup, leaving_ids: set[str], done: Done, now_ms: int) -> list[Effect]:
        """Consumer group ``before`` becomes a classic group of the members that stay."""
        group_id = before.group_id
        staying = cls.classic_members(before, leaving_ids, self.host.topics())
        members = [handover.member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                   m.classic.session_timeout_ms, m.classic.protocols, assignment)
                   for m, assignment in staying if m.classic is not None]
        self.core.groups.pop(group_id, None)
        self._forget_deadlines(group_id)
        record, effects = handover.adopt(self.host.classic, group_id, before.group_epoch, members, now_ms)

        def undo(when_ms: int) -> None:
            handover.drop(self.host.classic, group_id)
            self.core.groups[group_id] = before
            for member in before.members.values():
                self.core.arm_session(group_id, member.member_id, when_ms, member)
        encoded: Encoded = [crec.encode(r) for r in cls.downgrade_tombstones(before)]
        effects.append(LogLine("info", f"[GroupId {group_id}] Converted the consumer group to a classic group at "
                                       f"generation {before.group_epoch}."))
        return effects + self.host.write_encoded(group_id, encoded + [record], done, now_ms, undo)

    # ------------------------------------------------------------------ the classic protocol's requests

    def join(self, j: cls.ClassicJoin, respond: Respond, now_ms: int) -> list[Effect]:
        """A JoinGroup to a consumer group with members."""
        group_id = j.group_id
        before = self.core.groups.get(group_id)
        records, answer = cls.join(self.core, j, self.host.topics(), self.core.new_member_id(), now_ms)
        if answer.error is not ErrorCode.none:
            return respond(_join_body(answer))
        after = self.core.groups.get(group_id)

        def written(error: ErrorCode, when_ms: int = 0) -> list[Effect]:
            if error is ErrorCode.request_timed_out:
                error = ErrorCode.coordinator_not_available
            if error is not ErrorCode.none:
                return respond(_join_body(cls.JoinAnswer(error, answer.member_id)))
            return respond(_join_body(answer))
        if not records:
            return self.host.when_committed(group_id, written, now_ms)

        def undo(when_ms: int) -> None:
            if self.core.groups.get(group_id) is after and before is not None:
                self.core.groups[group_id] = before
                self.core.keep_sessions(group_id, when_ms)
        return self.host.write_encoded(group_id, [crec.encode(r) for r in records], written, now_ms, undo)

    def sync(self, req: dict[str, Any], respond: Respond, now_ms: int) -> list[Effect]:
        error, assignment = cls.sync(self.core, req["group_id"], req["member_id"], req.get("group_instance_id"),
                                     req["generation_id"], req.get("protocol_type"), req.get("protocol_name"),
                                     self.host.topics(), now_ms)
        group = self.core.groups.get(req["group_id"])
        member = None if group is None else group.members.get(req["member_id"])
        name = req.get("protocol_name")
        if name is None and member is not None and member.classic is not None and member.classic.protocols:
            name = member.classic.protocols[0][0]
        if error is not ErrorCode.none:
            return respond({"error_code": error, "assignment": b"", "protocol_type": None, "protocol_name": None})

        def committed(error: ErrorCode) -> list[Effect]:
            if error is not ErrorCode.none:
                return respond({"error_code": error, "assignment": b"", "protocol_type": None,
                                "protocol_name": None})
            return respond({"error_code": ErrorCode.none, "assignment": assignment, "protocol_type": "consumer",
                            "protocol_name": name})
        return self.host.when_committed(req["group_id"], committed, now_ms)

    def heartbeat(self, req: dict[str, Any], respond: Respond, now_ms: int) -> list[Effect]:
        error = cls.heartbeat(self.core, req["group_id"], req["member_id"], req.get("group_instance_id"),
                              req["generation_id"], now_ms)
        return respond({"error_code": error})

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]], respond: Respond,
              now_ms: int) -> list[Effect]:
        """A LeaveGroup: the members leave the consumer group, or, if only classic members stay,
        the group becomes a classic group without them."""
        group = self.core.groups[group_id]
        gone, answers = cls.leaving(group, leaving)
        results = [{"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in answers]
        top = results[0]["error_code"] if len(results) == 1 else ErrorCode.none

        def done(error: ErrorCode, when_ms: int = 0) -> list[Effect]:
            if error is ErrorCode.request_timed_out:
                error = ErrorCode.coordinator_not_available
            if error is not ErrorCode.none:
                return respond({"error_code": error, "members": []})
            return respond({"error_code": top, "members": results})
        if not gone:
            return done(ErrorCode.none)
        ids = {m.member_id for m in gone}
        if self.downgradable(group, ids):
            return self.downgrade(group, ids, done, now_ms)
        work = group.copy()
        records: list[crec.Record] = []
        for member in gone:
            records += self.core.fence(work, member, self.host.topics())
        self.core.groups[group_id] = work

        def undo(when_ms: int) -> None:
            if self.core.groups.get(group_id) is work:
                self.core.groups[group_id] = group
                self.core.keep_sessions(group_id, when_ms)
        return self.host.write_encoded(group_id, [crec.encode(r) for r in records], done, now_ms, undo)
