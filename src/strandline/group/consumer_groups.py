"""The consumer groups of the KIP-848 protocol as the broker coordinates them (Kafka's
``GroupCoordinatorShard`` for the groups of type consumer).

The rules are the pure core's (:mod:`strandline.group.consumer`): a heartbeat, or a session or
rebalance timeout that passes, yields records of ``__consumer_offsets``, already applied to the
group. Here they are written through the classic coordinator's append path (acks=all to the
group's offsets partition) and the answer goes out once the ISR has them; a write that fails puts
the group back as it was, when nothing changed it since, and the member is told the coordinator's
error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE), which makes it find the coordinator again.
A broker that becomes leader of an offsets partition replays its consumer group records
(:meth:`ConsumerGroups.load_partition`) and starts every member's session anew; so a coordinator
failover resumes each group at its epochs and assignments.

Committed offsets of a consumer group are kept with the classic ones (one offset record per
partition, Kafka's format); :meth:`ConsumerGroups.check_member` is the member epoch check of an
OffsetCommit (v9+) or OffsetFetch (v9+) from a member (Kafka's ``ConsumerGroup.validateOffsetCommit``).
A group id is of one protocol at a time, and a live group moves between them as Kafka 4.x's
does (:mod:`strandline.group.consumer_classic`): the first heartbeat of the consumer protocol to a
classic group with members upgrades it, members of the classic protocol join a consumer group with
members and are served by it, and a consumer group left with classic members only becomes a classic
group again (``group.consumer.migration.policy``).
"""

from __future__ import annotations

import functools

from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.group.consumer.assignors import CLASS_NAMES
from strandline.group.consumer import records as crec
from strandline.group.consumer.describe import describe
from strandline.group.consumer.group import ConsumerGroup, ConsumerGroupState
from strandline.group.consumer.heartbeat import (ConsumerGroupConfig, ConsumerGroupCoordinator, HeartbeatRequest,
                                                 HeartbeatResponse)
from strandline.group.consumer.model import LEAVE_GROUP_MEMBER_EPOCH, TopicMetadata
from strandline.group.consumer_classic import ClassicMembers, Encoded
from strandline.group.coordinator import GroupCoordinator

#: ``respond(answer)``: the effects that send a heartbeat's answer.
HeartbeatRespond = Callable[[HeartbeatResponse], list[Effect]]


def consumer_group_config(config: Any) -> ConsumerGroupConfig:
    """The core's settings from the broker's ``group.consumer.*`` keys, already checked by the
    broker's configuration (an assignor by its name or Kafka's class name)."""
    assignors = tuple(CLASS_NAMES.get(name, name) for name in config["group.consumer.assignors"])
    return ConsumerGroupConfig(config["group.consumer.session.timeout.ms"],
                               config["group.consumer.heartbeat.interval.ms"], config["group.consumer.max.size"],
                               assignors)


#: ``log_end(offsets partition)``: where this leader's log of the partition ends
LogEnd = Callable[[int], int]
#: ``wait_committed(offsets partition, offset, timeout_ms, done(error, when_ms), now_ms)``
WaitCommitted = Callable[[int, int, int, Callable[[ErrorCode, int], list[Effect]], int], list[Effect]]
#: a fencing that could not be written is tried again this much later
EXPIRY_RETRY_MS = 500


class ConsumerGroups:
    def __init__(self, config: Any, classic: GroupCoordinator, topics: Callable[[], Mapping[str, TopicMetadata]],
                 new_member_id: Callable[[], str], log_end: LogEnd | None = None,
                 wait_committed: WaitCommitted | None = None) -> None:
        self.enabled = "consumer" in config["group.coordinator.rebalance.protocols"]
        self.core = ConsumerGroupCoordinator(consumer_group_config(config), new_member_id)
        self.classic = classic
        self.topics = topics
        self.log_end = log_end
        self.wait_committed = wait_committed
        self.commit_timeout_ms = int(config["offsets.commit.timeout.ms"])
        #: offsets partition -> the end of the last records written to it: what the groups in
        #: memory may already hold, and an answer must wait to be committed
        self.written_to: dict[int, int] = {}
        #: the classic protocol's members of consumer groups, and the moves between protocols
        self.classic_members = ClassicMembers(self, config)

    # ------------------------------------------------------------------ ownership and loading

    def _owned_groups(self) -> dict[str, ConsumerGroup]:
        return {g: group for g, group in self.core.groups.items()
                if self.classic.owns(g) and group.state is not ConsumerGroupState.DEAD}

    def holds(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group ``group_id`` when this coordinator holds one."""
        group = self.core.groups.get(group_id)
        return group if group is not None and group.state is not ConsumerGroupState.DEAD else None

    def has_members(self, group_id: str) -> bool:
        group = self.holds(group_id)
        return group is not None and bool(group.members)

    def load_partition(self, partition: int, records: Iterable[tuple[Any, ...]], now_ms: int) -> None:
        """Rebuild the consumer groups of offsets partition ``partition`` from its records (those
        of key types 3-8; the rest are the classic coordinator's)."""
        self.unload_partition(partition)
        decoded = []
        for item in records:
            key, value = item[1], item[2]
            if key and len(key) >= 2 and int.from_bytes(key[:2], "big") in crec.KEY_TYPES:
                record = crec.decode(bytes(key), None if value is None else bytes(value))
                if record is not None:
                    decoded.append(record)
        fresh = ConsumerGroupCoordinator(self.core.config, self.core.new_member_id)
        fresh.load(decoded, now_ms)
        for group_id, group in fresh.groups.items():
            if group.state is not ConsumerGroupState.DEAD:
                self.core.groups[group_id] = group
        self.core.deadlines.update((k, d) for k, d in fresh.deadlines.items() if k[1] in self.core.groups)
        self.core.topics_version = max(self.core.topics_version, fresh.topics_version)

    def unload_partition(self, partition: int) -> None:
        self.written_to.pop(partition, None)
        gone = {g for g in self.core.groups if self.classic.partition_of(g) == partition}
        for group_id in gone:
            del self.core.groups[group_id]
        for key in [k for k in self.core.deadlines if k[1] in gone]:
            del self.core.deadlines[key]

    # ------------------------------------------------------------------ writing

    def _write(self, records: list[crec.Record], done: Callable[[ErrorCode, int], list[Effect]],
               now_ms: int, undo: Callable[[int], None] | None = None) -> list[Effect]:
        return self.write_encoded(records[0][0].group_id, [crec.encode(r) for r in records], done, now_ms, undo)

    def write_encoded(self, group_id: str, encoded: Encoded, done: Callable[[ErrorCode, int], list[Effect]],
                      now_ms: int, undo: Callable[[int], None] | None = None) -> list[Effect]:
        """Append the records of one group to its offsets partition; ``done(error, when_ms)``.

        The group already holds what the records say. A write refused at once, with nothing
        appended (too few replicas in the ISR, not the leader), first calls ``undo(when_ms)``: the
        records are not in the log, so the group must not hold them either, or a coordinator that
        loads the log later replays a history with a hole in it (a partition given to a member
        while the log still has it owned by another). A write that fails once appended (the
        followers did not copy it in time, the leadership moved) keeps the group as it is: the
        records are in this leader's log, as Kafka's coordinator keeps an uncommitted state."""
        partition = self.classic.partition_of(group_id)
        appending = True
        refused = False

        def finished(error: ErrorCode, when_ms: int, base_offset: int) -> list[Effect]:
            nonlocal refused
            if error is not ErrorCode.none and appending:
                refused = True
                if undo is not None:
                    undo(when_ms)
            return done(error, when_ms)

        effects = self.classic.append(partition, encoded, finished, now_ms)
        appending = False
        if not refused and self.log_end is not None:     # appended: an answer waits for it to commit
            self.written_to[partition] = max(self.written_to.get(partition, 0), self.log_end(partition))
        return effects

    def heartbeat(self, request: HeartbeatRequest, respond: HeartbeatRespond, now_ms: int,
                  may_describe: Callable[[str], bool] | None = None) -> list[Effect]:
        group_id = request.group_id
        if not self.classic.owns(group_id):
            return respond(HeartbeatResponse(ErrorCode.not_coordinator, None))
        classic = self.classic.groups.get(group_id)
        upgrade = None
        if classic is not None and classic.members:
            if request.member_epoch != 0:
                return respond(HeartbeatResponse(ErrorCode.group_id_not_found,
                                                 f"Group {group_id} is not a consumer group."))
            upgrade = self.classic_members.upgrade(group_id, now_ms)
            if upgrade.error is not ErrorCode.none:
                return respond(HeartbeatResponse(upgrade.error, upgrade.message))
        before = self.core.groups.get(group_id)
        records, answer = self.core.heartbeat(request, self.topics(), now_ms, may_describe)
        if upgrade is not None and answer.error_code is not ErrorCode.none and upgrade.undo is not None:
            upgrade.undo(now_ms)                          # a heartbeat refused: the group stays classic
            return upgrade.effects + respond(answer)

        def written(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is ErrorCode.request_timed_out:      # as Kafka's handleOperationException
                error = ErrorCode.coordinator_not_available
            return respond(answer if error is ErrorCode.none else HeartbeatResponse(error, None))

        if (request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH and answer.error_code is ErrorCode.none
                and before is not None and self.classic_members.downgradable(before, {request.member_id})):
            return self.classic_members.downgrade(before, {request.member_id}, written, now_ms)
        if not records and upgrade is None:
            return self.when_committed(group_id, lambda error: respond(
                answer if error is ErrorCode.none else HeartbeatResponse(error, None)), now_ms)
        after = self.core.groups.get(group_id)

        def undo(when_ms: int) -> None:
            self._undo(group_id, before, after, when_ms)
            if upgrade is not None and upgrade.undo is not None:
                upgrade.undo(when_ms)
        encoded = (upgrade.encoded if upgrade is not None else []) + [crec.encode(r) for r in records]
        effects = upgrade.effects if upgrade is not None else []
        return effects + self.write_encoded(group_id, encoded, written, now_ms, undo)

    def when_committed(self, group_id: str, then: Callable[[ErrorCode], list[Effect]], now_ms: int) -> list[Effect]:
        """``then(NONE)`` once every record written to the group's partition so far is committed,
        as Kafka's coordinator holds an answer read from a state not yet committed; a write that
        timed out keeps its records in memory (they are in the log), and an answer built on them
        must not go out before they are. COORDINATOR_NOT_AVAILABLE if they are not within
        ``offsets.commit.timeout.ms``, NOT_COORDINATOR if the partition's leadership moved."""
        partition = self.classic.partition_of(group_id)
        required = self.written_to.get(partition)
        if required is None or self.wait_committed is None:
            return then(ErrorCode.none)

        def committed(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is ErrorCode.none:
                if self.written_to.get(partition) == required:
                    del self.written_to[partition]
                return then(error)
            return then(ErrorCode.not_coordinator if error is ErrorCode.not_leader_or_follower
                        else ErrorCode.coordinator_not_available)
        return self.wait_committed(partition, required, self.commit_timeout_ms, committed, now_ms)

    def _undo(self, group_id: str, before: ConsumerGroup | None, after: ConsumerGroup | None, when_ms: int) -> None:
        """A write failed: the group goes back to what it was, unless a later change built on it;
        each member it has again has a session."""
        if self.core.groups.get(group_id) is not after:
            return
        if before is None:
            self.core.groups.pop(group_id, None)
        else:
            self.core.groups[group_id] = before
        self.core.keep_sessions(group_id, when_ms)

    def delete(self, group_id: str, done: Callable[[ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        """Delete an empty consumer group: its tombstones, in Kafka's order (target assignment,
        subscribed topics, group epoch); NON_EMPTY_GROUP while it has members. Its committed
        offsets are the classic coordinator's to delete. The group is gone at once: a JoinGroup
        of the classic protocol may take its id over (Kafka's conversion of an empty group)."""
        group = self.holds(group_id)
        if group is None:
            return done(ErrorCode.group_id_not_found, now_ms)
        if group.members:
            return done(ErrorCode.non_empty_group, now_ms)
        records: list[crec.Record] = [(crec.Key(kind, group_id), None) for kind in (
            crec.TARGET_ASSIGNMENT_METADATA, crec.PARTITION_METADATA, crec.GROUP_METADATA)]
        work = group.copy()
        for record in records:
            work.replay(record)
        self.core.groups.pop(group_id, None)

        def undo(when_ms: int) -> None:
            if group_id not in self.core.groups:
                self.core.groups[group_id] = group
        return self._write(records, done, now_ms, undo)

    # ------------------------------------------------------------------ time

    def tick(self, now_ms: int) -> list[Effect]:
        """Fence the members whose session or rebalance timeout passed; write what that changes."""
        due = self.core.next_deadline_ms()
        if due is None or due > now_ms:
            return []
        groups, deadlines = dict(self.core.groups), dict(self.core.deadlines)
        records = self.core.expire(self.topics(), now_ms)
        by_group: dict[str, list[crec.Record]] = {}
        for record in records:
            by_group.setdefault(record[0].group_id, []).append(record)
        effects: list[Effect] = []
        for group_id, group_records in by_group.items():
            before, after = groups.get(group_id), self.core.groups.get(group_id)
            fenced = set(before.members) - set(after.members) if before is not None and after is not None else set()
            if before is not None and fenced and self.classic_members.downgradable(before, fenced):
                effects += self.classic_members.downgrade(before, fenced, lambda error, when_ms: [], now_ms)
                continue

            def undo(when_ms: int, group_id: str = group_id) -> None:
                # the fencing is not written: the group as it was, its deadlines tried again
                # after a backoff (Kafka's coordinator timer retries a failed operation)
                self.core.groups[group_id] = groups[group_id]
                for key, deadline in deadlines.items():
                    if key[1] == group_id:
                        self.core.deadlines[key] = replace(deadline, due_ms=max(deadline.due_ms,
                                                                                when_ms + EXPIRY_RETRY_MS))
            effects += self._write(group_records, lambda error, when_ms: [], now_ms, undo)
        return effects

    def next_deadline_ms(self) -> int | None:
        return self.core.next_deadline_ms()

    # ------------------------------------------------------------------ offsets and admin

    def check_member(self, group_id: str, member_id: str | None, member_epoch: int, api_version: int,
                     fetch: bool = False, transactional: bool = False) -> ErrorCode:
        """An offset commit (OffsetCommit v9+, TxnOffsetCommit) or fetch (OffsetFetch v9+) of a
        consumer group (Kafka's ``validateOffsetCommit`` and ``validateOffsetFetch``): from outside
        the group (epoch < 0) a commit only while the group is empty, a transactional one naming no
        member always, a fetch that names no member always; from a member, at its current epoch."""
        group = self.holds(group_id)
        if group is None:
            return ErrorCode.none
        if member_epoch < 0 and (member_id is None if fetch else not group.members):
            return ErrorCode.none
        if transactional and member_epoch < 0 and not member_id:
            return ErrorCode.none
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member.classic is not None:             # a member of the classic protocol: its generation
            return ErrorCode.none if member_epoch == member.member_epoch else ErrorCode.illegal_generation
        if not fetch and not transactional and api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topics the members of consumer group ``group_id`` subscribe to (by name, or by a
        regular expression matching the whole name), whose offsets OffsetDelete keeps."""
        group = self.holds(group_id)
        if group is None:
            return set()
        return set().union(*(group.subscribed_names(m) for m in group.members.values()))

    def describe(self, group_ids: list[str]) -> list[dict[str, Any]]:
        """ConsumerGroupDescribe's groups: NOT_COORDINATOR for one this broker does not coordinate."""
        owned = self._owned_groups()
        found = {d["group_id"]: d for d in describe(owned, [g for g in group_ids if self.classic.owns(g)],
                                                    self.core.config.assignors[0], self.topics())}
        for d in found.values():
            group = owned.get(d["group_id"])
            if group is None and d["group_id"] in self.classic.groups and self.classic.groups[d["group_id"]].members:
                d["error_message"] = f"Group {d['group_id']} is not a consumer group."
        return [found.get(g) or {"error_code": ErrorCode.not_coordinator, "group_id": g, "error_message": None,
                                 "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
                                 "members": []}
                for g in group_ids]

    def describe_committed(self, group_ids: list[str], respond: Callable[[list[dict[str, Any]]], list[Effect]],
                           now_ms: int) -> list[Effect]:
        """:meth:`describe`, answered (``respond``) once every record written so far to the
        described groups' partitions is committed: a group's state is shown only once no leader
        change can take it back (Kafka's coordinator reads it at the last committed offset). A
        group whose records are not committed in time says COORDINATOR_NOT_AVAILABLE (or
        NOT_COORDINATOR: its partition's leadership moved)."""
        described = self.describe(group_ids)
        waiting = {g["group_id"] for g in described if g["error_code"] is ErrorCode.none}
        if not waiting:
            return respond(described)
        failed: dict[str, ErrorCode] = {}

        def settled(group_id: str, error: ErrorCode) -> list[Effect]:
            waiting.discard(group_id)
            if error is not ErrorCode.none:
                failed[group_id] = error
            if waiting:
                return []
            return respond([g if g["group_id"] not in failed else
                            {**g, "error_code": failed[g["group_id"]], "error_message": None, "group_state": "",
                             "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": []}
                            for g in described])
        effects: list[Effect] = []
        for group_id in sorted(waiting):
            effects.extend(self.when_committed(group_id, functools.partial(settled, group_id), now_ms))
        return effects

    def list_groups(self) -> list[ConsumerGroup]:
        return list(self._owned_groups().values())
