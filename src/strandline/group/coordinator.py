"""The group coordinator: Kafka's classic rebalance protocol and committed offsets (CON-1, CON-2).

A group belongs to the leader of partition ``abs(hash(group)) % offsets.topic.num.partitions`` of
``__consumer_offsets``. Its state lives in memory and every change that must survive is written
to that partition first (acks=all through the ISR); a broker that becomes the partition's
leader rebuilds its groups by reading the partition. Clients' assignors run on the clients: the
coordinator carries their protocol metadata and assignments as opaque bytes. The rebalance's
transitions of a group, and the answers to its waiting members, are in ``group.rebalance``.

Pure: requests arrive with a ``respond(body) -> effects`` callback and the current time; writes
go through the ``append(partition, records, done, now_ms, producer=None)`` function the broker
provides, which calls ``done(error, when_ms, base_offset)`` once the ISR has them (``base_offset``:
where the first record lies in ``__consumer_offsets``; of two commits of a partition, the later
one in the log counts, as in Kafka).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.group import records as rec
from strandline.group.model import Append, Group, GroupState, Member, Respond
from strandline.group.rebalance import (answer_join, answer_sync, common_protocols, maybe_complete_join,
                                        prepare_rebalance, remove_members, select_protocol)
from strandline.group.static_members import rejoin_stable

__all__ = ["Group", "GroupCoordinator", "GroupState", "Member", "Respond"]

#: The answer to an offset commit, per partition.
CommitRespond = Callable[[dict[tuple[str, int], ErrorCode]], list[Effect]]


class GroupCoordinator:
    def __init__(self, config: Any, append: Append, new_member_suffix: Callable[[], str]) -> None:
        self.config = config
        self.append = append
        self.new_member_suffix = new_member_suffix
        self.num_partitions = config["offsets.topic.num.partitions"]
        self.groups: dict[str, Group] = {}
        self.owned: set[int] = set()

    # ------------------------------------------------------------------ ownership

    def partition_of(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.num_partitions)

    def owns(self, group_id: str) -> bool:
        return self.partition_of(group_id) in self.owned

    def load_partition(self, partition: int, records: Iterable[tuple[Any, ...]], now_ms: int) -> int:
        """Become coordinator for the groups of an offsets partition: replay its records."""
        for group_id in [g for g in self.groups if self.partition_of(g) == partition]:
            del self.groups[group_id]
        count = 0
        group: Group | None
        for item in records:
            position, key, value = item[:3]
            producer, marker = (item[3], item[4]) if len(item) == 5 else (-1, None)
            count += 1
            if marker is not None:          # a transaction ended: its offsets count, or never will
                self._end_txn_offsets(partition, producer, marker == 1)
                continue
            decoded = rec.decode_key(key) if key else None
            if isinstance(decoded, rec.OffsetKey) and producer >= 0:      # part of a transaction
                group = self.groups.setdefault(decoded.group, Group(decoded.group))
                tp = (decoded.topic, decoded.partition)
                pending = group.pending_txn_offsets.setdefault(producer, {})
                if value is None:
                    pending.pop(tp, None)
                else:
                    pending[tp] = (rec.decode_offset_value(value), position)
            elif isinstance(decoded, rec.OffsetKey):
                group = self.groups.setdefault(decoded.group, Group(decoded.group))
                tp = (decoded.topic, decoded.partition)
                if value is None:
                    group.drop_offset(tp)
                else:
                    group.install_offset(tp, rec.decode_offset_value(value), position)
            elif isinstance(decoded, rec.GroupKey):
                if value is None:
                    group = self.groups.get(decoded.group)
                    if group is not None:
                        group.members.clear()
                        group.restore(GroupState.DEAD)
                        group.generation, group.protocol_type = 0, None
                    continue
                v = rec.decode_group_value(value)
                group = self.groups.setdefault(decoded.group, Group(decoded.group))
                group.protocol_type, group.generation, group.protocol = v.protocol_type, v.generation, v.protocol
                group.leader, group.state_timestamp = v.leader, v.state_timestamp
                group.members = {m.member_id: Member(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                    m.session_timeout, v.protocol_type, [(v.protocol or "", m.subscription)], m.assignment,
                    heartbeat_deadline_ms=now_ms + m.session_timeout) for m in v.members}
                group.restore(GroupState.STABLE if group.members else GroupState.EMPTY)
        for group_id in [g for g, grp in self.groups.items()
                         if grp.state is GroupState.DEAD and not grp.offsets and not grp.pending_txn_offsets
                         and self.partition_of(g) == partition]:
            del self.groups[group_id]
        for grp in self.groups.values():
            if grp.state is GroupState.DEAD:        # a group of offsets only (Kafka: a new Empty group)
                grp.restore(GroupState.EMPTY)
        self.owned.add(partition)
        return count

    def unload_partition(self, partition: int) -> list[Effect]:
        """No longer the leader of this offsets partition: forget its groups; waiting members are
        told NOT_COORDINATOR and find the new coordinator."""
        self.owned.discard(partition)
        effects: list[Effect] = []
        for group_id in [g for g in self.groups if self.partition_of(g) == partition]:
            group = self.groups.pop(group_id)
            group.transition_to(GroupState.DEAD)             # removed by partition emigration, as in Kafka
            for m in group.members.values():
                effects += answer_join(m, {"error_code": ErrorCode.not_coordinator})
                effects += answer_sync(m, ErrorCode.not_coordinator)
        return effects

    # ------------------------------------------------------------------ persistence

    def group_record(self, group: Group) -> tuple[bytes, bytes]:
        members = tuple(rec.MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                        m.rebalance_timeout_ms, m.session_timeout_ms,
                                        m.metadata_for(group.protocol), m.assignment)
                        for m in group.members.values())
        value = rec.GroupValue(group.protocol_type or "", group.generation, group.protocol, group.leader,
                               group.state_timestamp, members)
        return rec.group_key(group.group_id), rec.group_value(value)

    # ------------------------------------------------------------------ JoinGroup

    def join(self, req: dict[str, Any], respond: Respond, now_ms: int) -> list[Effect]:
        group_id, member_id = req["group_id"], req["member_id"]
        instance_id = req.get("group_instance_id")

        def fail(code: ErrorCode, mid: str = member_id) -> list[Effect]:
            return respond({"error_code": code, "generation_id": -1, "protocol_name": None, "leader": "",
                            "member_id": mid, "members": []})

        if not self.owns(group_id):
            return fail(ErrorCode.not_coordinator)
        session = req["session_timeout_ms"]
        if not self.config["group.min.session.timeout.ms"] <= session <= self.config["group.max.session.timeout.ms"]:
            return fail(ErrorCode.invalid_session_timeout)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return fail(ErrorCode.unknown_member_id)
            group = self.groups[group_id] = Group(group_id)
        protocols = [(name, bytes(meta)) for name, meta in req["protocols"]]
        if not req["protocol_type"] or not protocols:
            return fail(ErrorCode.inconsistent_group_protocol)
        if group.members and (req["protocol_type"] != group.protocol_type or
                              not common_protocols(group, {n for n, _ in protocols}, exclude=member_id)):
            return fail(ErrorCode.inconsistent_group_protocol)
        if len(group.members) >= self.config["group.max.size"] and member_id not in group.members:
            return fail(ErrorCode.group_max_size_reached)
        rejoined = None             # a static member back with a new id: (old id, old leader, old settings)
        if not member_id:
            new_id = f"{req['client_id']}-{self.new_member_suffix()}"
            static = group.static_member(instance_id)
            if static is not None:
                rejoined = (static.member_id, group.leader,
                            (static.protocols, static.session_timeout_ms, static.rebalance_timeout_ms))
                del group.members[static.member_id]
                if group.leader == static.member_id:
                    group.leader = new_id
                static.member_id = new_id
                group.members[new_id] = static
                member_id = new_id
            elif req["version"] >= 4 and instance_id is None:
                group.pending[new_id] = now_ms + session
                return fail(ErrorCode.member_id_required, new_id)
            else:
                member_id = new_id
        elif group.fenced(member_id, instance_id):
            return fail(ErrorCode.fenced_instance_id)
        elif member_id not in group.members:
            if member_id not in group.pending:
                return fail(ErrorCode.unknown_member_id)
        group.pending.pop(member_id, None)
        member = group.members.get(member_id)
        created = member is None or rejoined is not None
        if member is None:
            member = group.members[member_id] = Member(member_id, instance_id, req["client_id"], req["client_host"],
                                                       req["rebalance_timeout_ms"], session, req["protocol_type"],
                                                       protocols)
        member.protocols, member.protocol_type = protocols, req["protocol_type"]
        member.session_timeout_ms, member.rebalance_timeout_ms = session, req["rebalance_timeout_ms"]
        member.join_respond, member.join_version = respond, req["version"]
        member.heartbeat_deadline_ms = now_ms + session
        group.protocol_type = req["protocol_type"]
        if rejoined is not None and group.state is GroupState.STABLE and select_protocol(group) == group.protocol:
            return rejoin_stable(group, member, *rejoined, self._persist_group, now_ms)
        effects: list[Effect] = []
        if group.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            reason = req.get("reason") or "not provided"
            why = (f"Adding new member {member_id} with group instance id {instance_id}; client reason: {reason}"
                   if created else f"Updating metadata for member {member_id} during {group.state}; "
                   f"client reason: {reason}")
            effects.append(LogLine("info", f"Preparing to rebalance group {group_id} in state {group.state} with old "
                                       f"generation {group.generation} (__consumer_offsets-"
                                       f"{self.partition_of(group_id)}) (reason: {why})"))
            effects += prepare_rebalance(group, self.config, now_ms)
        return effects + maybe_complete_join(group, now_ms, self._persist_group)

    # ------------------------------------------------------------------ SyncGroup

    def sync(self, req: dict[str, Any], respond: Respond, now_ms: int) -> list[Effect]:
        group_id, member_id = req["group_id"], req["member_id"]

        def fail(code: ErrorCode) -> list[Effect]:
            return respond({"error_code": code, "assignment": b"", "protocol_type": None, "protocol_name": None})

        if not self.owns(group_id):
            return fail(ErrorCode.not_coordinator)
        group = self.groups.get(group_id)
        if group is not None and group.fenced(member_id, req.get("group_instance_id")):
            return fail(ErrorCode.fenced_instance_id)
        if group is None or member_id not in group.members:
            return fail(ErrorCode.unknown_member_id)
        if req["generation_id"] != group.generation:
            return fail(ErrorCode.illegal_generation)
        if (req.get("protocol_type") not in (None, group.protocol_type)) or \
                (req.get("protocol_name") not in (None, group.protocol)):
            return fail(ErrorCode.inconsistent_group_protocol)
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return fail(ErrorCode.rebalance_in_progress)
        if group.state is GroupState.STABLE:
            return respond({"error_code": ErrorCode.none, "assignment": member.assignment,
                            "protocol_type": group.protocol_type, "protocol_name": group.protocol})
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return fail(ErrorCode.unknown_member_id)
        member.sync_respond = respond
        if member_id != group.leader:
            return []
        assignments = {a["member_id"]: bytes(a["assignment"]) for a in req["assignments"]}
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        generation = group.generation

        def persisted(error: ErrorCode, when_ms: int) -> list[Effect]:
            if group.state is not GroupState.COMPLETING_REBALANCE or group.generation != generation:
                return []
            effects: list[Effect] = []
            if error is not ErrorCode.none:
                for m in group.members.values():
                    m.assignment = b""
                    effects += answer_sync(m, error)
                return effects + prepare_rebalance(group, self.config, when_ms)
            group.transition_to(GroupState.STABLE)
            for m in group.members.values():
                effects += answer_sync(m, ErrorCode.none, m.assignment, group)
            return effects

        return self._persist_group(group, now_ms, persisted)

    def _persist_group(self, group: Group, now_ms: int, done: Callable[[ErrorCode, int], list[Effect]]) -> list[Effect]:
        return self.append(self.partition_of(group.group_id), [self.group_record(group)],
                           lambda error, when_ms, _base_offset: done(error, when_ms), now_ms)

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup, expiry

    def heartbeat(self, req: dict[str, Any], respond: Respond, now_ms: int) -> list[Effect]:
        group_id, member_id = req["group_id"], req["member_id"]
        if not self.owns(group_id):
            return respond({"error_code": ErrorCode.not_coordinator})
        group = self.groups.get(group_id)
        if group is not None and group.fenced(member_id, req.get("group_instance_id")):
            return respond({"error_code": ErrorCode.fenced_instance_id})
        if group is None or member_id not in group.members or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return respond({"error_code": ErrorCode.unknown_member_id})
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            return respond({"error_code": ErrorCode.rebalance_in_progress})
        if req["generation_id"] != group.generation:
            return respond({"error_code": ErrorCode.illegal_generation})
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return respond({"error_code": ErrorCode.none})

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]], respond: Respond, now_ms: int) -> list[Effect]:
        if not self.owns(group_id):
            return respond({"error_code": ErrorCode.not_coordinator, "members": []})
        group = self.groups.get(group_id)
        results: list[dict[str, Any]] = []
        removed: list[Member] = []
        for member_id, instance_id in leaving:
            member = None
            if group is not None:
                member = group.members.get(member_id) if member_id else None
                if member is None and instance_id is not None:
                    member = group.static_member(instance_id)
                    if member is not None and member_id and member.member_id != member_id:
                        results.append({"member_id": member_id, "group_instance_id": instance_id,
                                        "error_code": ErrorCode.fenced_instance_id})
                        continue
            if member is None:
                results.append({"member_id": member_id, "group_instance_id": instance_id,
                                "error_code": ErrorCode.unknown_member_id})
                continue
            removed.append(member)
            results.append({"member_id": member.member_id, "group_instance_id": instance_id,
                            "error_code": ErrorCode.none})
        effects: list[Effect] = []
        if group is not None and removed:
            effects += remove_members(group, removed, now_ms, self.config, self._persist_group)
        top = ErrorCode.none
        if len(leaving) == 1 and results and results[0]["error_code"] is not ErrorCode.none:
            top = results[0]["error_code"]
        return effects + respond({"error_code": top, "members": results})

    def tick(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending.items()):
                if deadline <= now_ms:
                    del group.pending[member_id]
            expired = [m for m in group.members.values()
                       if m.heartbeat_deadline_ms <= now_ms and m.join_respond is None]
            if expired:
                effects += remove_members(group, expired, now_ms, self.config, self._persist_group)
            effects += maybe_complete_join(group, now_ms, self._persist_group)
        return effects

    def next_deadline_ms(self) -> int | None:
        times = []
        for group in self.groups.values():
            if group.join_deadline_ms is not None:
                times.append(group.join_deadline_ms)
            times += [m.heartbeat_deadline_ms for m in group.members.values() if m.join_respond is None]
            times += list(group.pending.values())
        return min(times) if times else None

    def connection_closed(self, is_from: Callable[[Respond], bool]) -> None:
        """A client went away: its waiting JoinGroup/SyncGroup answer has nowhere to go."""
        for group in self.groups.values():
            for m in group.members.values():
                if m.join_respond is not None and is_from(m.join_respond):
                    m.join_respond = None
                if m.sync_respond is not None and is_from(m.sync_respond):
                    m.sync_respond = None

    # ------------------------------------------------------------------ offsets

    def commit(self, req: dict[str, Any], respond: CommitRespond, now_ms: int) -> list[Effect]:
        group_id, member_id, generation = req["group_id"], req["member_id"], req["generation_id"]
        wanted = [((t, p), off, epoch, meta) for t, p, off, epoch, meta in req["offsets"]]

        def all_failed(code: ErrorCode) -> list[Effect]:
            return respond({tp: code for tp, *_ in wanted})

        if not self.owns(group_id):
            return all_failed(ErrorCode.not_coordinator)
        group = self.groups.get(group_id)
        if req.get("member_checked"):       # a consumer group's (KIP-848), its member epoch checked
            group = self.groups.setdefault(group_id, Group(group_id))
        elif group is None:
            if generation >= 0 or member_id:
                return all_failed(ErrorCode.illegal_generation if generation >= 0 else ErrorCode.unknown_member_id)
            group = self.groups[group_id] = Group(group_id)
        elif group.fenced(member_id, req.get("group_instance_id")):
            return all_failed(ErrorCode.fenced_instance_id)
        elif generation < 0 and group.state is GroupState.EMPTY:
            pass                                    # a standalone consumer (assign()) commits
        elif group.state is GroupState.COMPLETING_REBALANCE:
            return all_failed(ErrorCode.rebalance_in_progress)
        elif member_id not in group.members:
            return all_failed(ErrorCode.unknown_member_id)
        elif generation != group.generation:
            return all_failed(ErrorCode.illegal_generation)
        results: dict[tuple[str, int], ErrorCode] = {}
        records: list[rec.KeyValue] = []
        values = {}
        limit = self.config["offset.metadata.max.bytes"]
        stamps = req.get("commit_timestamps", {})       # OffsetCommit v1's, where the client set one
        for tp, offset, epoch, metadata in wanted:
            if metadata is not None and len(metadata.encode()) > limit:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            value = rec.OffsetValue(offset, epoch, metadata or "", stamps.get(tp, now_ms))
            values[tp] = (value, len(records))
            records.append((rec.offset_key(group_id, tp[0], tp[1]), rec.offset_value(value)))
            results[tp] = ErrorCode.none
        if not records:
            return respond(results)

        def persisted(error: ErrorCode, when_ms: int, base_offset: int) -> list[Effect]:
            for tp, (value, index) in values.items():
                if error is ErrorCode.none:
                    # a transactional offset appended after this one and already committed stays
                    group.install_offset(tp, value, base_offset + index)
                else:
                    results[tp] = error
            return respond(results)

        return self.append(self.partition_of(group_id), records, persisted, now_ms)

    def txn_commit(self, req: dict[str, Any], respond: CommitRespond, now_ms: int) -> list[Effect]:
        """TxnOffsetCommit: write offsets as part of a producer's transaction (a transactional batch
        of that producer id and epoch). They count once its commit marker reaches this partition
        (:meth:`end_txn`), never if it aborts."""
        group_id, producer_id, epoch = req["group_id"], req["producer_id"], req["producer_epoch"]
        wanted = [((t, p), off, lep, meta) for t, p, off, lep, meta in req["offsets"]]
        if not self.owns(group_id):
            return respond({tp: ErrorCode.not_coordinator for tp, *_ in wanted})
        group = self.groups.get(group_id)
        generation, member_id = req.get("generation_id", -1), req.get("member_id", "")
        if group is not None and group.fenced(member_id, req.get("group_instance_id")):
            return respond({tp: ErrorCode.fenced_instance_id for tp, *_ in wanted})
        if group is not None and generation >= 0 and group.members:
            code = None
            if member_id not in group.members:
                code = ErrorCode.unknown_member_id
            elif generation != group.generation:
                code = ErrorCode.illegal_generation
            if code is not None:
                return respond({tp: code for tp, *_ in wanted})
        results: dict[tuple[str, int], ErrorCode] = {}
        records: list[rec.KeyValue] = []
        values: dict[tuple[str, int], tuple[rec.OffsetValue, int]] = {}
        limit = self.config["offset.metadata.max.bytes"]
        for tp, offset, leader_epoch, metadata in wanted:
            if metadata is not None and len(metadata.encode()) > limit:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            value = rec.OffsetValue(offset, leader_epoch, metadata or "", now_ms)
            values[tp] = (value, len(records))
            records.append((rec.offset_key(group_id, tp[0], tp[1]), rec.offset_value(value)))
            results[tp] = ErrorCode.none
        if not records:
            return respond(results)

        def persisted(error: ErrorCode, when_ms: int, base_offset: int) -> list[Effect]:
            target = self.groups.setdefault(group_id, Group(group_id))
            for tp, (value, index) in values.items():
                if error is ErrorCode.none:
                    target.pending_txn_offsets.setdefault(producer_id, {})[tp] = (value, base_offset + index)
                else:
                    results[tp] = error
            return respond(results)

        return self.append(self.partition_of(group_id), records, persisted, now_ms,
                           producer=(producer_id, epoch))

    def pending_txn_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions with offsets committed in a transaction of ``group_id`` not ended yet."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        return {tp for offsets in group.pending_txn_offsets.values() for tp in offsets}

    def end_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction's marker reached offsets partition ``partition``: its offsets count (commit)
        or are dropped (abort)."""
        if partition in self.owned:
            self._end_txn_offsets(partition, producer_id, commit)

    def _end_txn_offsets(self, partition: int, producer_id: int, commit: bool) -> None:
        for group_id, group in self.groups.items():
            if self.partition_of(group_id) != partition:
                continue
            pending = group.pending_txn_offsets.pop(producer_id, None)
            if pending and commit:
                # Kafka's completePendingTxnOffsetCommit: a plain commit appended to the log after
                # the transaction's offset keeps its place
                for tp, (value, position) in pending.items():
                    group.install_offset(tp, value, position)

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                      ) -> tuple[ErrorCode, dict[tuple[str, int], rec.OffsetValue | None]]:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, {}
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if topics is None:
            return ErrorCode.none, dict(offsets)
        return ErrorCode.none, {(t, p): offsets.get((t, p)) for t, parts in topics for p in parts}

    # ------------------------------------------------------------------ admin

    def describe(self, group_id: str) -> dict[str, Any]:
        if not self.owns(group_id):
            return {"error_code": ErrorCode.not_coordinator, "group_id": group_id, "group_state": "",
                    "protocol_type": "", "protocol_data": "", "members": []}
        group = self.groups.get(group_id)
        if group is None:
            return {"error_code": ErrorCode.none, "group_id": group_id, "group_state": GroupState.DEAD,
                    "protocol_type": "", "protocol_data": "", "members": []}
        return {"error_code": ErrorCode.none, "group_id": group_id, "group_state": group.state,
                "protocol_type": group.protocol_type or "", "protocol_data": group.protocol or "",
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": m.metadata_for(group.protocol) if group.state is GroupState.STABLE else b"",
                             "member_assignment": m.assignment if group.state is GroupState.STABLE else b""}
                            for m in group.members.values()]}

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if self.owns(g.group_id) and g.state is not GroupState.DEAD]

    def delete(self, group_id: str, done: Callable[[ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        if not self.owns(group_id):
            return done(ErrorCode.not_coordinator, now_ms)
        group = self.groups.get(group_id)
        if group is None:
            return done(ErrorCode.group_id_not_found, now_ms)
        if group.state is not GroupState.EMPTY:
            return done(ErrorCode.non_empty_group, now_ms)
        records = [(rec.offset_key(group_id, t, p), None) for t, p in group.offsets]
        records.append((rec.group_key(group_id), None))

        def persisted(error: ErrorCode, when_ms: int, base_offset: int) -> list[Effect]:
            if error is ErrorCode.none and self.groups.get(group_id) is group and group.state is GroupState.EMPTY:
                group.transition_to(GroupState.DEAD)
                del self.groups[group_id]
            return done(error, when_ms)

        return self.append(self.partition_of(group_id), records, persisted, now_ms)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                       done: Callable[[ErrorCode, dict[tuple[str, int], ErrorCode], int], list[Effect]],
                       now_ms: int) -> list[Effect]:
        """OffsetDelete (KIP-496): drop a group's committed offsets of ``partitions`` unless its
        members consume those topics (GROUP_SUBSCRIBED_TO_TOPIC); an empty group may drop any.
        ``done(group error, partition errors, now_ms)``."""
        if not self.owns(group_id):
            return done(ErrorCode.not_coordinator, {}, now_ms)
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return done(ErrorCode.group_id_not_found, {}, now_ms)
        subscribed: set[str] = set()
        if group.state is not GroupState.EMPTY:
            if group.protocol_type != "consumer":
                return done(ErrorCode.non_empty_group, {}, now_ms)
            for member in group.members.values():
                subscribed |= set(rec.subscribed_topics(member.metadata_for(group.protocol)))
        errors = {tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none
                  for tp in partitions}
        doomed = [tp for tp, e in errors.items() if e is ErrorCode.none and tp in group.offsets]
        if not doomed:
            return done(ErrorCode.none, errors, now_ms)

        def persisted(error: ErrorCode, when_ms: int, base_offset: int) -> list[Effect]:
            if error is not ErrorCode.none:
                return done(error, {}, when_ms)
            for tp in doomed:
                group.drop_offset(tp)
            return done(ErrorCode.none, errors, when_ms)

        return self.append(self.partition_of(group_id), [(rec.offset_key(group_id, t, p), None) for t, p in doomed],
                           persisted, now_ms)

    def expire_offsets(self, now_ms: int) -> list[Effect]:
        """offsets.retention.minutes: an empty group's offsets older than the retention go."""
        retention = self.config["offsets.retention.minutes"] * 60_000
        effects: list[Effect] = []
        for group in list(self.groups.values()):
            if group.state is not GroupState.EMPTY or not self.owns(group.group_id):
                continue
            old = [tp for tp, v in group.offsets.items() if v.commit_timestamp + retention <= now_ms]
            if not old:
                continue
            records = [(rec.offset_key(group.group_id, t, p), None) for t, p in old]

            def persisted(error: ErrorCode, when_ms: int, base_offset: int, group: Group = group,
                          old: list[tuple[str, int]] = old) -> list[Effect]:
                if error is ErrorCode.none:
                    for tp in old:
                        group.drop_offset(tp)
                return []

            effects += self.append(self.partition_of(group.group_id), records, persisted, now_ms)
        return effects
