"""Share groups on the wire (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and
ShareAcknowledge, served when ``group.share.enable`` is true (UNSUPPORTED_VERSION otherwise).

The group coordinator of a group id (FindCoordinator, key type 0) keeps its share group's members
and assignment (:mod:`strandline.group.share.group`); each partition's leader keeps, per share
group, which records are in flight (:mod:`strandline.group.share.partition`) and each member's
share session with it (:mod:`strandline.group.share.sessions`). A share-partition a leader has not
seen starts where the group's ``share.auto.offset.reset`` says (the high watermark by default).
The leader keeps each share-partition's state with the share coordinator
(:mod:`strandline.broker.share_partitions`), so that the next leader starts where it was: what was
acknowledged is not handed out again, what was in flight is, with its delivery counts. The group's
members and assignment are written to ``__consumer_offsets`` in Kafka's records
(:mod:`strandline.group.share.group_records`), a heartbeat answered once they are committed, so
that a new coordinator resumes the group; DeleteGroups deletes an empty one.

A ShareFetch first applies the acknowledgements it carries (and goes on once the share
coordinator has them), then hands out what its session's partitions have up to their high
watermarks: whole stored batches, with the offsets acquired (AcquiredRecords) that the consumer
may process. With nothing to hand out it waits up to its
MaxWaitMs, answered as soon as one of its partitions gets records (in the fetch purgatory, as a
long-polling Fetch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from strandline.broker.group_configs import GroupConfigs
from strandline.coordination.metadata import MetadataCache
from strandline.core.effects import Effect
from strandline.core.wire import Handler, duration_ms, response
from strandline.group.coordinator import GroupCoordinator
from strandline.group.share import group_records
from strandline.group.share.group import ShareGroup, ShareGroupConfig, ShareHeartbeat
from strandline.group.share.partition import AcquiredRange, SharePartition
from strandline.group.offsets_topic import INTERNAL_TOPICS
from strandline.group.share.persister import SharePersister
from strandline.group.share.records import ShareStateKey
from strandline.group.share.state_topic import SHARE_STATE_TOPIC
from strandline.broker.share_partitions import LedSharePartitions, ShareKey, Version
from strandline.group.share.sessions import FINAL_EPOCH, ShareSession, ShareSessions
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.protocol.records import iter_batches
from strandline.replication.purgatory import DelayedCall
from strandline.replication.replica_manager import ReplicaManager
from strandline.security.acl import AclOperation, ResourceType
from strandline.security.authorizer import AclAuthorizer

#: ShareGroupDescribe's AuthorizedOperations when not asked for (Kafka's Integer.MIN_VALUE)
NOT_ASKED = -2147483648
SIMPLE = "simple"
#: a group whose write failed is written again, whole, this much later
REWRITE_BACKOFF_MS = 500


@dataclass
class PendingShareFetch:
    """A ShareFetch's reading part: answered at once, or when records come, or at ``deadline_ms``."""

    conn_id: int
    header: RequestHeader
    session: ShareSession
    max_bytes: int
    max_records: int
    acknowledged: dict[tuple[Any, int], ErrorCode]
    deadline_ms: int


class ShareGroupApis:
    def __init__(self, config: Any, metadata: MetadataCache, replicas: ReplicaManager, authorizer: AclAuthorizer,
                 coordinator: GroupCoordinator, persister: SharePersister,
                 group_configs: GroupConfigs) -> None:
        self.config = config
        self.metadata = metadata
        self.replicas = replicas
        self.authorizer = authorizer
        self.coordinator = coordinator
        self.group_configs = group_configs
        self.groups: dict[str, ShareGroup] = {}
        #: group id -> members gone whose tombstones no write has yet carried to the log
        self.unwritten_leaves: dict[str, set[str]] = {}
        #: groups whose last write failed -> when they are written again, whole
        self.rewrite: dict[str, int] = {}
        self.sessions = ShareSessions(config["group.share.max.share.sessions"])
        self.persister = persister
        self.led = LedSharePartitions(config, replicas, persister, self._topic_name, self.group_configs)
        #: told of every record handed out: ``listener(share-partition, the ranges acquired)``
        self.acquired_listeners: list[Callable[[ShareKey, list[AcquiredRange]], None]] = []

    @property
    def enabled(self) -> bool:
        return bool(self.config["group.share.enable"])

    def group_config(self, group_id: str) -> ShareGroupConfig:
        """The group's timings: its own configs (``share.session.timeout.ms``,
        ``share.heartbeat.interval.ms``), else the broker's."""
        return ShareGroupConfig(self.group_configs.value(group_id, "share.session.timeout.ms"),
                                self.group_configs.value(group_id, "share.heartbeat.interval.ms"),
                                self.config["group.share.max.size"])

    def lock_duration_ms(self, group_id: str) -> int:
        return int(self.group_configs.value(group_id, "share.record.lock.duration.ms"))

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.SHARE_GROUP_HEARTBEAT: self._heartbeat, ApiKey.SHARE_GROUP_DESCRIBE: self._describe,
                ApiKey.SHARE_FETCH: self._fetch, ApiKey.SHARE_ACKNOWLEDGE: self._acknowledge}

    # ------------------------------------------------------------------ time

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for g in self.groups.values() if (d := g.next_deadline_ms()) is not None]
        deadlines += self.rewrite.values()          # failed writes to make good
        if (d := self.led.next_deadline_ms()) is not None:
            deadlines.append(d)
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> list[Effect]:
        topics = self._topics()
        effects: list[Effect] = []
        for group_id in sorted(g for g, due in self.rewrite.items() if due <= now_ms):
            del self.rewrite[group_id]
            if group_id in self.groups and self.coordinator.owns(group_id):
                effects += self._persist(group_id, None, self.groups[group_id], lambda error, t: [], now_ms)
        for group_id, group in list(self.groups.items()):
            before = group_records.image(group)
            if group.expire(topics, now_ms):
                effects += self._persist(group_id, before, group, lambda error, t: [], now_ms)
        return effects + self.led.tick(now_ms)

    # ------------------------------------------------------------------ the group's records

    def load_partition(self, partition: int, records: Iterable[tuple[Any, ...]], now_ms: int) -> None:
        """This broker coordinates the groups of offsets partition ``partition``: the share groups
        its records describe, each member with a full session from now."""
        self.unload_partition(partition)
        if not self.enabled:
            return
        loaded = group_records.replay(((item[1], item[2]) for item in records if item[1]), self._topics(),
                                      self.config["group.share.session.timeout.ms"], now_ms)
        for group_id, group in loaded.items():
            if self.coordinator.partition_of(group_id) == partition:
                for member in group.members.values():
                    member.deadline_ms = now_ms + self.group_config(group_id).session_timeout_ms
                self.groups[group_id] = group

    def unload_partition(self, partition: int) -> None:
        for group_id in [g for g in self.groups if self.coordinator.partition_of(g) == partition]:
            del self.groups[group_id]
            self.unwritten_leaves.pop(group_id, None)
            self.rewrite.pop(group_id, None)

    def delete_group(self, group_id: str, done: Callable[[ErrorCode, int], list[Effect]],
                     now_ms: int) -> list[Effect] | None:
        """DeleteGroups of a share group (None: no share group of that id here): NON_EMPTY_GROUP
        while it has members; else its share-partitions' state is deleted from the share
        coordinators (every partition of every topic is asked, as no record says which it used),
        then its records are tombstoned."""
        group = self.groups.get(group_id)
        if group is None or not self.coordinator.owns(group_id):
            return None
        if group.members:
            return done(ErrorCode.non_empty_group, now_ms)
        keys = [ShareStateKey(group_id, t.topic_id, p) for name, t in sorted(self.metadata.topics.items())
                if name not in INTERNAL_TOPICS for p in range(t.num_partitions)] \
            if SHARE_STATE_TOPIC in self.metadata.topics else []
        failed: list[ErrorCode] = []
        waiting = [len(keys)]

        def tombstone(at_ms: int) -> list[Effect]:
            if failed:
                return done(ErrorCode.coordinator_not_available, at_ms)
            if self.groups.get(group_id) is not group or group.members:
                return done(ErrorCode.non_empty_group, at_ms)        # joined again meanwhile
            del self.groups[group_id]
            self.rewrite.pop(group_id, None)

            def written(error: ErrorCode, when_ms: int, _base_offset: int) -> list[Effect]:
                return done(ErrorCode.none if error is ErrorCode.none else ErrorCode.coordinator_not_available,
                            when_ms)
            return self.coordinator.append(self.coordinator.partition_of(group_id),
                                           group_records.deletion(group_id), written, at_ms)

        def state_deleted(error: ErrorCode, at_ms: int) -> list[Effect]:
            if error is not ErrorCode.none:
                failed.append(error)
            waiting[0] -= 1
            return tombstone(at_ms) if waiting[0] == 0 else []

        if not keys:
            return tombstone(now_ms)
        effects: list[Effect] = []
        for key in keys:
            effects += self.persister.delete(key, state_deleted, now_ms)
        return effects

    def _persist(self, group_id: str, before: group_records.GroupImage | None, group: ShareGroup,
                 done: Callable[[ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        """Write the group to its offsets partition when it changed; ``done(error, when_ms)`` once
        committed (at once when nothing changed). Each write holds the whole group, and the
        tombstones of every member gone since the last write that succeeded: a write that failed
        is made good by the next. The group keeps the change either way."""
        if not group_records.changed(before, group):
            return done(ErrorCode.none, now_ms)
        gone = self.unwritten_leaves.setdefault(group_id, set())
        gone |= (set(before.members) if before is not None else set()) - set(group.members)
        tombstoned = set(gone)
        records = group_records.snapshot(group_id, group, tombstoned, before)

        def written(error: ErrorCode, when_ms: int, _base_offset: int) -> list[Effect]:
            if error is ErrorCode.none:
                gone.difference_update(tombstoned - set(group.members))
            else:
                self.rewrite[group_id] = when_ms + REWRITE_BACKOFF_MS
            if error in (ErrorCode.request_timed_out, ErrorCode.not_enough_replicas):
                error = ErrorCode.coordinator_not_available
            elif error is ErrorCode.not_leader_or_follower:
                error = ErrorCode.not_coordinator
            return done(error, when_ms)
        return self.coordinator.append(self.coordinator.partition_of(group_id), records, written, now_ms)

    # ------------------------------------------------------------------ ShareGroupHeartbeat

    def _heartbeat(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def answer(error: ErrorCode, message: str | None = None, **fields: Any) -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "error_code": error, "error_message": message,
                                               "member_id": None, "member_epoch": 0, "heartbeat_interval": 0,
                                               "assignment": None, **fields})]
        if not self.enabled:
            return answer(ErrorCode.unsupported_version)
        if not self.authorizer.allows(conn_id, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return answer(ErrorCode.group_authorization_failed)
        names = request.subscribed_topic_names
        if names and not all(self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.TOPIC, n)
                             for n in set(names)):
            return answer(ErrorCode.topic_authorization_failed)
        if not self.coordinator.owns(request.group_id):
            return answer(ErrorCode.not_coordinator)
        known = self.groups.get(request.group_id)
        group = known or ShareGroup(request.group_id)
        before = group_records.image(known)
        beat = ShareHeartbeat(request.group_id, request.member_id or "", request.member_epoch,
                              None if names is None else tuple(names), request.rack_id, header.client_id or "",
                              "/127.0.0.1")
        result = group.heartbeat(beat, self._topics(), self.group_config(request.group_id), now_ms)
        if result.error_code is not ErrorCode.none:
            return answer(result.error_code, result.error_message)
        self.groups[request.group_id] = group
        assignment = None
        if result.assignment is not None:
            assignment = {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)}
                                               for t, ps in sorted(result.assignment.items())]}

        def written(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is not ErrorCode.none:
                return answer(error)
            return answer(ErrorCode.none, None, member_id=result.member_id, member_epoch=result.member_epoch,
                          heartbeat_interval=result.heartbeat_interval_ms, assignment=assignment)
        return self._persist(request.group_id, before, group, written, now_ms)

    # ------------------------------------------------------------------ ShareGroupDescribe

    def _describe(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        names = {t.topic_id: t.name for t in self.metadata.topics.values()}
        described = []
        for group_id in request.group_ids:
            entry: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None, "group_id": group_id,
                                     "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                                     "assignor_name": "", "members": [], "authorized_operations": NOT_ASKED}
            group = self.groups.get(group_id)
            if not self.enabled:
                entry["error_code"] = ErrorCode.unsupported_version
            elif not self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                entry["error_code"] = ErrorCode.group_authorization_failed
            elif not self.coordinator.owns(group_id):
                entry["error_code"] = ErrorCode.not_coordinator
            elif group is None:
                entry.update(error_code=ErrorCode.group_id_not_found,
                             error_message=f"Group {group_id} not found.")
            else:
                entry.update(group_state=group.state, group_epoch=group.group_epoch,
                             assignment_epoch=group.assignment_epoch, assignor_name=SIMPLE, members=[
                                 {"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                                  "client_id": m.client_id, "client_host": m.client_host,
                                  "subscribed_topic_names": list(m.subscribed_topic_names),
                                  "assignment": {"topic_partitions": [
                                      {"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                                      for t, ps in sorted(m.assignment.items())]}}
                                 for m in group.members.values()])
                if request.include_authorized_operations:
                    entry["authorized_operations"] = self.authorizer.authorized_operations(
                        conn_id, ResourceType.GROUP, group_id)
            described.append(entry)
        return [response(conn_id, header, {"throttle_time": 0, "groups": described})]

    # ------------------------------------------------------------------ ShareFetch

    def _fetch(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        lock_ms = self.lock_duration_ms(request.group_id)

        def refuse(error: ErrorCode, message: str | None = None) -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "error_code": error, "error_message": message,
                                               "acquisition_lock_timeout": lock_ms, "responses": [],
                                               "node_endpoints": []})]
        if not self.enabled:
            return refuse(ErrorCode.unsupported_version)
        if not self.authorizer.allows(conn_id, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return refuse(ErrorCode.group_authorization_failed)
        if not request.member_id:
            return refuse(ErrorCode.invalid_request, "Invalid member id in the request.")
        added = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
        forgotten = [(t.topic_id, index) for t in request.forgotten_topics_data for index in t.partitions]
        acks = {(t.topic_id, p.partition_index): [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                                                  for b in p.acknowledgement_batches]
                for t in request.topics for p in t.partitions if p.acknowledgement_batches}
        epoch = request.share_session_epoch
        session, error = self.sessions.fetch(request.group_id, request.member_id, epoch, added, forgotten,
                                             bool(acks))
        if error is not ErrorCode.none or session is None:
            return refuse(error)
        acknowledged = {key: self._acknowledge_partition(conn_id, session, key, batches)
                        for key, batches in acks.items()}
        changed: dict[ShareKey, Version] = {}
        effects: list[Effect] = self.led.take_effects()
        for key, code in acknowledged.items():
            if code is ErrorCode.none:
                k = (session.group_id, *key)
                effects += self.led.changed(k, now_ms)
                changed[k] = self.led.version(k)
        if epoch == FINAL_EPOCH:
            effects += self.led.release_member(session.group_id, session.member_id, now_ms)
        max_wait_ms = duration_ms(request.max_wait)

        def go_on(errors: dict[ShareKey, ErrorCode], at_ms: int) -> list[Effect]:
            """The acknowledgements are written (or failed to be): hand out records."""
            for (_, topic_id, index), error in errors.items():
                acknowledged[(topic_id, index)] = error
            if epoch == FINAL_EPOCH:
                closing = PendingShareFetch(conn_id, header, session, 0, 0, acknowledged, at_ms)
                return self._answer_fetch(closing, at_ms, only=set(acknowledged))
            fetch = PendingShareFetch(conn_id, header, session, request.max_bytes, request.max_records,
                                      acknowledged, at_ms + max_wait_ms)
            if fetch.max_records > 0 and fetch.deadline_ms > at_ms and not self._has_records(session, at_ms):
                # a long poll: answered when one of its partitions gets records (an append, the high
                # watermark moving, its state read), or at its deadline with what there is then
                def check(t: int, expired: bool) -> list[Effect] | None:
                    if expired or self._has_records(session, t):
                        return self._answer_fetch(fetch, t)
                    return None
                keys = tuple(key for p in session.partitions if (key := self._key(p)) is not None)
                self.replicas.fetch_purgatory.watch(DelayedCall(conn_id, fetch.deadline_ms, keys, check))
                return []
            return self._answer_fetch(fetch, at_ms)
        return effects + self.led.when_written(changed, go_on, now_ms)

    def _answer_fetch(self, fetch: PendingShareFetch, now_ms: int,
                      only: set[tuple[Any, int]] | None = None) -> list[Effect]:
        session = fetch.session
        by_topic: dict[Any, list[dict[str, Any]]] = {}
        effects: list[Effect] = []
        budget, records_left = fetch.max_bytes, fetch.max_records
        keys = list(session.partitions) if only is None else [k for k in session.partitions if k in only]
        keys += [k for k in fetch.acknowledged if k not in keys]
        for key in keys:
            entry: dict[str, Any] = {"partition_index": key[1], "error_code": ErrorCode.none, "error_message": None,
                                     "acknowledge_error_code": fetch.acknowledged.get(key, ErrorCode.none),
                                     "acknowledge_error_message": None,
                                     "current_leader": {"leader_id": -1, "leader_epoch": -1},
                                     "records": b"", "acquired_records": []}
            name = self._topic_name(key[0])
            k = (session.group_id, key[0], key[1])
            found = self.led.get(k, now_ms) if name is None or \
                self.authorizer.allows(fetch.conn_id, AclOperation.READ, ResourceType.TOPIC, name) \
                else ErrorCode.topic_authorization_failed
            if isinstance(found, ErrorCode):
                entry["error_code"] = found
                entry["current_leader"] = self._current_leader(key)
            elif isinstance(found, tuple) and budget > 0 and records_left > 0:
                partition, sp = found
                sp.lock_duration_ms = self.lock_duration_ms(session.group_id)    # the group's, as it is now
                entry["current_leader"] = {"leader_id": partition.local_broker_id, "leader_epoch": partition.leader_epoch}
                data, acquired, changed = self._acquire(partition, sp, session.member_id, budget, records_left,
                                                        now_ms)
                if changed:
                    effects += self.led.changed(k, now_ms)
                for listener in self.acquired_listeners if acquired else ():
                    listener(k, acquired)
                if acquired:
                    entry["records"] = data
                    entry["acquired_records"] = [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                                  "delivery_count": a.delivery_count} for a in acquired]
                    budget -= len(data)
                    records_left -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            by_topic.setdefault(key[0], []).append(entry)
        effects += self.led.take_effects()
        body = {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                "acquisition_lock_timeout": self.lock_duration_ms(session.group_id),
                "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                "node_endpoints": []}
        return effects + [response(fetch.conn_id, fetch.header, body)]

    def _acquire(self, partition: Any, sp: SharePartition, member_id: str, max_bytes: int, max_records: int,
                 now_ms: int) -> tuple[bytes, list[Any], bool]:
        """Read the partition from the share-partition's next offset up to its high watermark and
        hand what was read to ``member_id``: the stored batches, the ranges acquired, and whether
        the share-partition changed (its start moved with the log's, locks expired, records went
        out)."""
        log = partition.log
        before = sp.start_offset
        sp.move_start(log.log_start_offset)
        changed = sp.expire_locks(now_ms) > 0 or sp.start_offset != before
        offset = sp.next_fetch_offset()
        hw = partition.high_watermark
        if offset >= hw or not sp.can_acquire():
            return b"", [], changed
        data = bytes(log.read(offset, max_bytes, max_offset=hw))
        last = -1
        for _, batch in iter_batches(data):
            last = batch.last_offset
        if last < offset:
            return b"", [], changed
        acquired = sp.acquire(member_id, offset, min(last, hw - 1), max_records, now_ms)
        return data, acquired, changed or bool(acquired)

    def _has_records(self, session: ShareSession, now_ms: int) -> bool:
        for key in session.partitions:
            found = self.led.get((session.group_id, key[0], key[1]), now_ms)
            if isinstance(found, ErrorCode):
                return True                      # an error to answer at once
            if not isinstance(found, tuple):
                continue                         # LOADING: answered once its state is read
            partition, sp = found
            sp.expire_locks(now_ms)
            if sp.next_fetch_offset() < partition.high_watermark and sp.can_acquire():
                return True
        return False

    # ------------------------------------------------------------------ ShareAcknowledge

    def _acknowledge(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def answer(error: ErrorCode, responses: list[dict[str, Any]]) -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "error_code": error, "error_message": None,
                                               "responses": responses, "node_endpoints": []})]
        if not self.enabled:
            return answer(ErrorCode.unsupported_version, [])
        if not self.authorizer.allows(conn_id, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return answer(ErrorCode.group_authorization_failed, [])
        if not request.member_id:
            return answer(ErrorCode.invalid_request, [])
        epoch = request.share_session_epoch
        session, error = self.sessions.acknowledge(request.group_id, request.member_id, epoch)
        if error is not ErrorCode.none or session is None:
            return answer(error, [])
        responses = []
        changed: dict[ShareKey, Version] = {}
        effects: list[Effect] = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                key = (t.topic_id, p.partition_index)
                code = self._acknowledge_partition(conn_id, session, key, [
                    (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches])
                parts.append({"partition_index": p.partition_index, "error_code": code, "error_message": None,
                              "current_leader": self._current_leader(key)})
                if code is ErrorCode.none:
                    k = (session.group_id, *key)
                    effects += self.led.changed(k, now_ms)
                    changed[k] = self.led.version(k)
            responses.append({"topic_id": t.topic_id, "partitions": parts})
        if epoch == FINAL_EPOCH:
            effects += self.led.release_member(session.group_id, session.member_id, now_ms)
        effects += self.led.take_effects()

        def written(errors: dict[ShareKey, ErrorCode], at_ms: int) -> list[Effect]:
            for topic in responses:
                for part in topic["partitions"]:
                    error = errors.get((session.group_id, topic["topic_id"], part["partition_index"]))
                    if error is not None:
                        part["error_code"] = error
            return answer(ErrorCode.none, responses)
        return effects + self.led.when_written(changed, written, now_ms)

    def _acknowledge_partition(self, conn_id: int, session: ShareSession, key: tuple[Any, int],
                               batches: list[Any]) -> ErrorCode:
        name = self._topic_name(key[0])
        if name is not None and not self.authorizer.allows(conn_id, AclOperation.READ, ResourceType.TOPIC, name):
            return ErrorCode.topic_authorization_failed
        return self.led.acknowledge((session.group_id, key[0], key[1]), session.member_id, batches)

    # ------------------------------------------------------------------ lookups

    def _topics(self) -> dict[str, tuple[Any, int]]:
        return {name: (t.topic_id, t.num_partitions) for name, t in self.metadata.topics.items()}

    def _key(self, partition: tuple[Any, int]) -> tuple[str, int] | None:
        name = self._topic_name(partition[0])
        return (name, partition[1]) if name is not None else None

    def _topic_name(self, topic_id: Any) -> str | None:
        return self.metadata.topic_name_of(topic_id)

    def _current_leader(self, key: tuple[Any, int]) -> dict[str, int]:
        name = self._topic_name(key[0])
        topic = self.metadata.topics.get(name) if name is not None else None
        state = topic.states.get(key[1]) if topic is not None else None
        if state is None:
            return {"leader_id": -1, "leader_epoch": -1}
        return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
