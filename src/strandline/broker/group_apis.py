"""The consumer-group APIs on the wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups.

Each handler maps its request's versions onto :class:`strandline.group.coordinator.GroupCoordinator`
and shapes the answer; FindCoordinator creates ``__consumer_offsets`` on first use. The rules
of groups live in ``group/``. OffsetCommit v0 and OffsetFetch v0 keep offsets in ZooKeeper
(:mod:`strandline.broker.zk_offsets`), as Kafka 2.8.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from strandline.security.authorizer import AclAuthorizer
from strandline.broker.auto_topic_creation import AutoTopicCreationManager
from strandline.core.effects import Effect, LogLine
from strandline.broker.txn_apis import TxnApis, fenced_as
from strandline.broker.zk_offsets import ZkOffsets
from strandline.core.wire import Handler, duration_ms, response
from strandline.coordination.metadata import MetadataCache
from strandline.broker.consumer_group_apis import ConsumerGroupApis
from strandline.group.consumer.classic import ClassicJoin
from strandline.group.consumer_groups import ConsumerGroups
from strandline.group.coordinator import GroupCoordinator, GroupState
from strandline.group.model import Respond
from strandline.group.offsets_topic import OFFSETS_TOPIC, OffsetsTopic
from strandline.group.share.group import ShareGroup
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security.acl import AclOperation, ResourceType

CLASSIC = "classic"                 # a group of JoinGroup/SyncGroup
CONSUMER = "consumer"               # a group of ConsumerGroupHeartbeat (KIP-848)
SHARE = "share"                     # a share group (ShareGroupHeartbeat, KIP-932)
GROUP_ID_NOT_FOUND_VERSION = 6      # DescribeGroups v6+


class GroupApis:
    def __init__(self, metadata: MetadataCache, groups: GroupCoordinator, offsets: OffsetsTopic,
                 auto_topics: AutoTopicCreationManager, authorizer: AclAuthorizer, txn_apis: TxnApis,
                 zk_offsets: ZkOffsets, consumer_groups: ConsumerGroups) -> None:
        self.metadata = metadata
        self.consumer_groups = consumer_groups
        self.consumer_group_apis = ConsumerGroupApis(consumer_groups, authorizer)
        self.zk_offsets = zk_offsets
        self.authorizer = authorizer
        self.txn_apis = txn_apis
        self.groups = groups
        self.offsets = offsets
        self.auto_topics = auto_topics
        self._responders: dict[int, int] = {}   # id(respond) -> connection
        #: the share groups this broker coordinates (KIP-932; :mod:`strandline.broker.share_group_apis`)
        self.share_groups: Callable[[], Iterable[ShareGroup]] = lambda: ()
        #: ``delete_share_group(group id, done, now_ms)``: its effects, or None when it is no share group here
        self.delete_share_group: Callable[[str, Callable[[ErrorCode, int], list[Effect]], int],
                                          "list[Effect] | None"] = lambda group_id, done, now_ms: None

    def handlers(self) -> dict[int, Handler]:
        return {
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.JOIN_GROUP: self._join_group,
            ApiKey.SYNC_GROUP: self._sync_group,
            ApiKey.HEARTBEAT: self._heartbeat,
            ApiKey.LEAVE_GROUP: self._leave_group,
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.DESCRIBE_GROUPS: self._describe_groups,
            ApiKey.DELETE_GROUPS: self._delete_groups,
            ApiKey.OFFSET_DELETE: self._offset_delete,
            ApiKey.TXN_OFFSET_COMMIT: self._txn_offset_commit,
            **self.consumer_group_apis.handlers(),
        }

    def _ensure_offsets_topic(self, now_ms: int) -> list[Effect]:
        if OFFSETS_TOPIC in self.metadata.topics or self.auto_topics.pending(OFFSETS_TOPIC):
            return []
        return self.auto_topics.create(OFFSETS_TOPIC, offsets_topic_created, now_ms)

    # ------------------------------------------------------------------ authorizing

    def _group_allowed(self, conn_id: int, op: AclOperation, group_id: str) -> bool:
        return self.authorizer.allows(conn_id, op, ResourceType.GROUP, group_id)

    def _refused(self, conn_id: int, header: RequestHeader, request: Any, fields: dict[str, Any] | None = None) -> list[Effect] | None:
        """GROUP_AUTHORIZATION_FAILED for a membership request on a group the client may not READ."""
        if self._group_allowed(conn_id, AclOperation.READ, request.group_id):
            return None
        return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed,
                                           **(fields or {})})]

    # ------------------------------------------------------------------ responding

    def _group_respond(self, conn_id: int, header: RequestHeader, shape: Callable[[dict[str, Any]], dict[str, Any]]) -> Respond:
        def respond(body: dict[str, Any]) -> list[Effect]:
            self._responders.pop(id(respond), None)
            return [response(conn_id, header, {"throttle_time": 0, **shape(body)})]
        self._responders[id(respond)] = conn_id
        return respond

    def connection_closed(self, conn_id: int) -> None:
        gone = {rid for rid, cid in self._responders.items() if cid == conn_id}
        if gone:
            self.groups.connection_closed(lambda respond: id(respond) in gone)
            for rid in gone:
                self._responders.pop(rid, None)

    # ------------------------------------------------------------------ FindCoordinator

    def _coordinator_address(self, answer: dict[str, Any], node: Any, conn_id: int) -> None:
        """The coordinator's endpoint of the client's listener (COORDINATOR_NOT_AVAILABLE when it has
        none, as Kafka)."""
        address = node.endpoint(self.authorizer.listener(conn_id))
        if address is None:
            answer.update(error_code=ErrorCode.coordinator_not_available, node_id=-1, host="", port=-1)
        else:
            answer.update(node_id=node.id, host=address[0], port=address[1])

    def _find_coordinator(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        version = header.api_version
        keys = list(request.coordinator_keys) if version >= 4 else [request.key]
        key_type = getattr(request, "key_type", 0)
        effects: list[Effect] = []
        answers = []
        topic = self.metadata.topics.get(OFFSETS_TOPIC)
        if key_type == 0 and topic is None and any(self._group_allowed(conn_id, AclOperation.DESCRIBE, k)
                                                   for k in keys):
            effects += self._ensure_offsets_topic(now_ms)
        for key in keys:
            answer = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.none,
                      "error_message": None}
            if key_type == 0 and not self._group_allowed(conn_id, AclOperation.DESCRIBE, key):
                answer["error_code"] = ErrorCode.group_authorization_failed
            elif key_type == 1:
                if self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
                    answer, created = self.txn_apis.find_coordinator(key, now_ms)
                    effects += created
                    node = self.metadata.brokers.get(answer.get("node_id", -1))
                    if answer.get("error_code", ErrorCode.none) == ErrorCode.none and node is not None:
                        self._coordinator_address(answer, node, conn_id)
                else:
                    answer["error_code"] = ErrorCode.transactional_id_authorization_failed
            elif key_type != 0:
                answer["error_code"], answer["error_message"] = ErrorCode.invalid_request, \
                    f"Unknown coordinator type {key_type}"
            elif topic is None:
                answer["error_code"] = ErrorCode.coordinator_not_available
            else:
                state = topic.states.get(self.groups.partition_of(key))
                node = self.metadata.brokers.get(state.leader) if state else None
                if node is None:
                    answer["error_code"] = ErrorCode.coordinator_not_available
                else:
                    self._coordinator_address(answer, node, conn_id)
            answers.append(answer)
        if version >= 4:
            body = {"throttle_time": 0, "coordinators": answers}
        else:
            body = {"throttle_time": 0, **answers[0]}
        return effects + [response(conn_id, header, body)]

    # ------------------------------------------------------------------ membership

    def _join_group(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        version = header.api_version
        refused = self._refused(conn_id, header, request, {"generation_id": -1, "leader": "", "member_id": ""})
        if refused is not None:
            return refused

        def shape(body: dict[str, Any]) -> dict[str, Any]:
            if version < 7 and body.get("protocol_name") is None:
                body["protocol_name"] = ""
            return body

        req = {"group_id": request.group_id, "member_id": request.member_id,
               "group_instance_id": getattr(request, "group_instance_id", None),
               "client_id": header.client_id or "", "client_host": "/127.0.0.1",
               "session_timeout_ms": duration_ms(request.session_timeout),
               "rebalance_timeout_ms": duration_ms(getattr(request, "rebalance_timeout", request.session_timeout)),
               "protocol_type": request.protocol_type,
               "protocols": [(p.name, p.metadata) for p in request.protocols], "version": version,
               "reason": getattr(request, "reason", None)}
        if self.consumer_groups.has_members(request.group_id):
            # a consumer group (KIP-848) with members: the classic member joins it, served by it,
            # with the classic protocol's bounds on its session (Kafka checks them before either)
            if not (self.groups.config["group.min.session.timeout.ms"] <= req["session_timeout_ms"]
                    <= self.groups.config["group.max.session.timeout.ms"]):
                return self._group_respond(conn_id, header, shape)({
                    "error_code": ErrorCode.invalid_session_timeout, "generation_id": -1, "protocol_name": None,
                    "leader": "", "member_id": request.member_id, "members": []})
            join = ClassicJoin(request.group_id, request.member_id, req["group_instance_id"], request.protocol_type,
                               tuple(req["protocols"]), req["session_timeout_ms"], req["rebalance_timeout_ms"],
                               req["client_id"], req["client_host"], requires_known_member_id=version >= 4)
            return self.consumer_groups.classic_members.join(join, self._group_respond(conn_id, header, shape),
                                                             now_ms)
        effects: list[Effect] = []
        if self.consumer_groups.holds(request.group_id) is not None:     # an empty one: it becomes classic
            effects += self.consumer_groups.delete(request.group_id, lambda error, when_ms: [], now_ms)
        return effects + self.groups.join(req, self._group_respond(conn_id, header, shape), now_ms)

    def _sync_group(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        refused = self._refused(conn_id, header, request, {"assignment": b""})
        if refused is not None:
            return refused
        req = {"group_id": request.group_id, "generation_id": request.generation_id, "member_id": request.member_id,
               "group_instance_id": getattr(request, "group_instance_id", None),
               "protocol_type": getattr(request, "protocol_type", None),
               "protocol_name": getattr(request, "protocol_name", None),
               "assignments": [{"member_id": a.member_id, "assignment": a.assignment} for a in request.assignments]}
        if self.consumer_groups.has_members(request.group_id):
            return self.consumer_groups.classic_members.sync(req, self._group_respond(conn_id, header, lambda b: b),
                                                             now_ms)
        return self.groups.sync(req, self._group_respond(conn_id, header, lambda b: b), now_ms)

    def _heartbeat(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        refused = self._refused(conn_id, header, request)
        if refused is not None:
            return refused
        req = {"group_id": request.group_id, "generation_id": request.generation_id, "member_id": request.member_id,
               "group_instance_id": getattr(request, "group_instance_id", None)}
        if self.consumer_groups.has_members(request.group_id):
            return self.consumer_groups.classic_members.heartbeat(
                req, self._group_respond(conn_id, header, lambda b: b), now_ms)
        return self.groups.heartbeat(req, self._group_respond(conn_id, header, lambda b: b), now_ms)

    def _leave_group(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        refused = self._refused(conn_id, header, request)
        if refused is not None:
            return refused
        if header.api_version >= 3:
            leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            leaving = [(request.member_id, None)]
        if self.consumer_groups.has_members(request.group_id):
            return self.consumer_groups.classic_members.leave(
                request.group_id, leaving, self._group_respond(conn_id, header, lambda b: b), now_ms)
        return self.groups.leave(request.group_id, leaving, self._group_respond(conn_id, header, lambda b: b), now_ms)

    # ------------------------------------------------------------------ offsets

    def _offset_commit(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        """v0 writes to ZooKeeper; v1's commit timestamp, when set (not -1), is the offset's."""
        if header.api_version == 0:
            return self.zk_offsets.commit(conn_id, header, request, now_ms)
        generation = getattr(request, "generation_id_or_member_epoch", -1)
        topics = self.metadata.topics
        offsets: list[tuple[str, int, int, int, str | None]] = []
        unknown: dict[tuple[str, int], ErrorCode] = {}
        stamps: dict[tuple[str, int], int] = {}
        group_allowed = self._group_allowed(conn_id, AclOperation.READ, request.group_id)
        for t in request.topics:
            for p in t.partitions:
                if not group_allowed:
                    unknown[(t.name, p.partition_index)] = ErrorCode.group_authorization_failed
                elif not self.authorizer.allows_topic(conn_id, AclOperation.READ, t.name):
                    unknown[(t.name, p.partition_index)] = ErrorCode.topic_authorization_failed
                elif t.name in topics and p.partition_index in topics[t.name].assignment:
                    offsets.append((t.name, p.partition_index, p.committed_offset,
                                    getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
                    if getattr(p, "commit_timestamp", -1) != -1:
                        stamps[(t.name, p.partition_index)] = p.commit_timestamp
                else:  # as Kafka: that partition is refused, the others are committed
                    unknown[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
        req = {"group_id": request.group_id, "generation_id": generation, "member_id": request.member_id,
               "group_instance_id": getattr(request, "group_instance_id", None), "offsets": offsets,
               "commit_timestamps": stamps}
        checked = ErrorCode.none
        if self.consumer_groups.holds(request.group_id) is not None and self.groups.owns(request.group_id):
            checked = self.consumer_groups.check_member(request.group_id, request.member_id, generation,
                                                        header.api_version)
            req["member_checked"] = True

        def respond(results: dict[tuple[str, int], ErrorCode]) -> list[Effect]:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (name, index), code in {**unknown, **results}.items():
                by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
            return [response(conn_id, header, {
                "throttle_time": 0, "topics": [{"name": n, "partitions": p} for n, p in by_topic.items()]})]

        if not offsets:
            return respond({})
        if checked is not ErrorCode.none:
            return respond({(t, p): checked for t, p, *_ in offsets})
        return self.groups.commit(req, respond, now_ms)

    def _txn_offset_commit(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        """Offsets committed in a transaction (``sendOffsetsToTransaction``): they count when it commits."""
        wanted = [(t.name, p) for t in request.topics for p in t.partitions]
        denied_all = None
        if not self.authorizer.allows(conn_id, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                      request.transactional_id):
            denied_all = ErrorCode.transactional_id_authorization_failed
        elif not self._group_allowed(conn_id, AclOperation.READ, request.group_id):
            denied_all = ErrorCode.group_authorization_failed
        elif self.groups.owns(request.group_id):       # a consumer group's member at its epoch (KIP-848)
            checked = self.consumer_groups.check_member(
                request.group_id, getattr(request, "member_id", ""), getattr(request, "generation_id", -1),
                header.api_version, transactional=True)
            denied_all = None if checked is ErrorCode.none else checked
        errors: dict[tuple[str, int], ErrorCode] = {}
        offsets = []
        topics = self.metadata.topics
        for name, p in wanted:
            key = (name, p.partition_index)
            if denied_all is not None:
                errors[key] = denied_all
            elif not self.authorizer.allows_topic(conn_id, AclOperation.READ, name):
                errors[key] = ErrorCode.topic_authorization_failed
            elif name not in topics or p.partition_index not in topics[name].assignment:
                errors[key] = ErrorCode.unknown_topic_or_partition
            else:
                offsets.append((name, p.partition_index, p.committed_offset,
                                getattr(p, "committed_leader_epoch", -1), p.committed_metadata))

        def respond(results: dict[tuple[str, int], ErrorCode]) -> list[Effect]:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (name, index), code in {**errors, **results}.items():
                code = fenced_as(code, header.api_version, 3)
                by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
            return [response(conn_id, header, {
                "throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})]

        if not offsets:
            return respond({})

        def commit(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is not ErrorCode.none:
                return respond({(name, index): error for name, index, *_ in offsets})
            return self.groups.txn_commit({
                "group_id": request.group_id, "producer_id": request.producer_id,
                "producer_epoch": request.producer_epoch, "generation_id": getattr(request, "generation_id", -1),
                "member_id": getattr(request, "member_id", ""),
                "group_instance_id": getattr(request, "group_instance_id", None), "offsets": offsets},
                respond, when_ms)

        if self.txn_apis.add_offsets_implicitly(header.api_version):
            # transactions v2 (KIP-890 part 2): no AddOffsetsToTxn came; the group's partition joins first
            return self.txn_apis.add_offsets_partition(request.transactional_id, request.producer_id,
                                                       request.producer_epoch, request.group_id, commit, now_ms)
        return commit(ErrorCode.none, now_ms)

    def _offset_fetch_group(self, conn_id: int, group_id: str, topics: Any,
                            require_stable: bool = False, partition_errors: bool = False,
                            member: tuple[str | None, int] = (None, -1)) -> tuple[ErrorCode, list[dict[str, Any]]]:
        """A group's committed offsets: GROUP_AUTHORIZATION_FAILED unless the client may DESCRIBE the
        group; a topic it may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED when named, left out when
        every topic is asked for. ``require_stable`` (KIP-447): a partition with offsets committed in
        a transaction not ended yet is UNSTABLE_OFFSET_COMMIT, which clients retry. A group's error
        is repeated in each partition asked for only with ``partition_errors`` (v0-v1, which have no
        error of their own); v2+ answer it alone, no topics, as Kafka's getErrorResponse."""
        wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
        if not self._group_allowed(conn_id, AclOperation.DESCRIBE, group_id):
            return ErrorCode.group_authorization_failed, [] if wanted is None or not partition_errors else [
                {"name": name, "partitions": [
                    {"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                     "error_code": ErrorCode.group_authorization_failed} for i in indexes]}
                for name, indexes in wanted]
        allows = self.authorizer.allows_topic
        denied = {name for name, _ in wanted or () if not allows(conn_id, AclOperation.DESCRIBE, name)}
        if denied:
            wanted = [(name, indexes) for name, indexes in wanted or () if name not in denied]
        error, found = self.groups.fetch_offsets(group_id, wanted)
        if error is ErrorCode.none:     # a consumer group's member (OffsetFetch v9+) at its epoch
            error = self.consumer_groups.check_member(group_id, member[0], member[1], 9, fetch=True)
        unstable = self.groups.pending_txn_partitions(group_id) if require_stable else set()
        by_topic: dict[str, list[dict[str, Any]]] = {}
        if error is ErrorCode.none:
            for (name, index), value in sorted(found.items()):
                if topics is None and not self.authorizer.allows_topic(conn_id, AclOperation.DESCRIBE, name):
                    continue
                if (name, index) in unstable:
                    by_topic.setdefault(name, []).append({
                        "partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1,
                        "metadata": "", "error_code": ErrorCode.unstable_offset_commit})
                    continue
                by_topic.setdefault(name, []).append({
                    "partition_index": index, "committed_offset": value.offset if value else -1,
                    "committed_leader_epoch": value.leader_epoch if value else -1,
                    "metadata": value.metadata if value else "", "error_code": ErrorCode.none})
        elif wanted is not None and partition_errors:
            for name, indexes in wanted:
                by_topic[name] = [{"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1,
                                   "metadata": "", "error_code": error} for i in indexes]
        for t in topics or ():
            if t.name in denied:
                by_topic[t.name] = [{"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1,
                                     "metadata": "", "error_code": ErrorCode.topic_authorization_failed}
                                    for i in t.partition_indexes]
        return error, [{"name": n, "partitions": p} for n, p in by_topic.items()]

    def _offset_fetch(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        if header.api_version == 0:
            return self.zk_offsets.fetch(conn_id, header, request, now_ms)
        if header.api_version >= 8:
            groups = []
            for g in request.groups:
                error, topics = self._offset_fetch_group(conn_id, g.group_id, g.topics,
                                                         bool(getattr(request, "require_stable", False)),
                                                         member=(getattr(g, "member_id", None),
                                                                 getattr(g, "member_epoch", -1)))
                groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
            body = {"throttle_time": 0, "groups": groups}
        else:
            error, topics = self._offset_fetch_group(conn_id, request.group_id, request.topics,
                                                     bool(getattr(request, "require_stable", False)),
                                                     header.api_version < 2)
            body = {"throttle_time": 0, "topics": topics, "error_code": error}
        return [response(conn_id, header, body)]

    # ------------------------------------------------------------------ admin

    def _list_groups(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        """States (v4+) and types (v5+, KIP-848) filter case-insensitively, an empty filter not at all.
        A consumer group (KIP-848) is listed as type "consumer" (protocol type "consumer"); the
        committed offsets it keeps with the classic ones are not a classic group of its id."""
        states = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
        everything = self.authorizer.allows_cluster(conn_id, AclOperation.DESCRIBE)
        groups = [{"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state,
                   "group_type": CLASSIC}
                  for g in self.groups.list_groups()
                  if (not states or g.state.lower() in states) and (not types or CLASSIC in types)
                  and self.consumer_groups.holds(g.group_id) is None
                  and (everything or self._group_allowed(conn_id, AclOperation.DESCRIBE, g.group_id))]
        groups += [{"group_id": g.group_id, "protocol_type": CONSUMER, "group_state": g.state.value,
                    "group_type": CONSUMER}
                   for g in self.consumer_groups.list_groups()
                   if (not states or g.state.value.lower() in states) and (not types or CONSUMER in types)
                   and (everything or self._group_allowed(conn_id, AclOperation.DESCRIBE, g.group_id))]
        groups += [{"group_id": g.group_id, "protocol_type": SHARE, "group_state": g.state, "group_type": SHARE}
                   for g in self.share_groups()
                   if (not states or g.state.lower() in states) and (not types or SHARE in types)
                   and (everything or self._group_allowed(conn_id, AclOperation.DESCRIBE, g.group_id))]
        return [response(conn_id, header, {
            "throttle_time": 0, "error_code": ErrorCode.none, "groups": groups})]

    def _describe_groups(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        wants_operations = getattr(request, "include_authorized_operations", False)
        groups = []
        for g in request.groups:
            if not self._group_allowed(conn_id, AclOperation.DESCRIBE, g):
                groups.append({"group_id": g, "error_code": ErrorCode.group_authorization_failed, "group_state": "",
                               "protocol_type": "", "protocol_data": "", "members": [],
                               "authorized_operations": -2147483648})
                continue
            described = self.groups.describe(g)
            if self.consumer_groups.holds(g) is not None:      # not a classic group (Kafka: "Group g is
                described.update(group_state=GroupState.DEAD, members=[])  # not a classic group.")
            groups.append({**described, "authorized_operations": (
                self.authorizer.authorized_operations(conn_id, ResourceType.GROUP, g) if wants_operations
                else -2147483648)})
        if header.api_version >= GROUP_ID_NOT_FOUND_VERSION:   # KIP-1043: a group that does not exist says so
            for g in groups:
                if g["error_code"] is ErrorCode.none and g["group_state"] == GroupState.DEAD:
                    g["error_code"], g["error_message"] = ErrorCode.group_id_not_found, f"Group {g['group_id']} not found."

        return [response(conn_id, header, {"throttle_time": 0, "groups": groups})]

    def _delete_groups(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        names = list(dict.fromkeys(request.groups_names))
        results: dict[str, ErrorCode] = {}
        effects: list[Effect] = []

        def finish() -> list[Effect]:
            return [response(conn_id, header, {
                "throttle_time": 0,
                "results": [{"group_id": n, "error_code": results[n]} for n in names]})]

        allowed = [n for n in names if self._group_allowed(conn_id, AclOperation.DELETE, n)]
        results.update((n, ErrorCode.group_authorization_failed) for n in names if n not in allowed)
        for name in allowed:
            def done(error: ErrorCode, when_ms: int, name: str = name) -> list[Effect]:
                results[name] = error
                return finish() if len(results) == len(names) else []
            if self.consumer_groups.holds(name) is not None and self.groups.owns(name):
                effects += self.consumer_groups.delete(name, self._then_offsets(name, done), now_ms)
                continue
            shared = self.delete_share_group(name, self._then_offsets(name, done), now_ms)
            if shared is not None:
                effects += shared
                continue
            effects += self.groups.delete(name, done, now_ms)
        if not allowed:
            effects += finish()
        return effects

    def _then_offsets(self, name: str, done: Callable[[ErrorCode, int], list[Effect]]
                      ) -> Callable[[ErrorCode, int], list[Effect]]:
        """After a consumer group's deletion, that of its committed offsets (a classic group of
        offsets only), when it had any."""
        def deleted(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is not ErrorCode.none or name not in self.groups.groups:
                return done(error, when_ms)
            return self.groups.delete(name, done, when_ms)
        return deleted

    def _offset_delete(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        wanted = list(dict.fromkeys((t.name, p.partition_index) for t in request.topics for p in t.partitions))
        if not self._group_allowed(conn_id, AclOperation.DELETE, request.group_id):
            return [response(conn_id, header, {"error_code": ErrorCode.group_authorization_failed,
                                               "throttle_time": 0, "topics": []})]
        denied = {name for name, _ in wanted if not self.authorizer.allows_topic(conn_id, AclOperation.READ, name)}
        subscribed = self.consumer_groups.subscribed_topics(request.group_id)     # of a consumer group (KIP-848)

        def done(error: ErrorCode, errors: dict[tuple[str, int], ErrorCode], when_ms: int) -> list[Effect]:
            topics: dict[str, list[dict[str, Any]]] = {}
            for name, index in wanted:
                code = errors.get((name, index), ErrorCode.none)
                if name in denied:
                    code = ErrorCode.topic_authorization_failed
                elif name in subscribed:
                    code = ErrorCode.group_subscribed_to_topic
                elif error is ErrorCode.none and name not in self.metadata.topics:
                    code = ErrorCode.unknown_topic_or_partition
                topics.setdefault(name, []).append({"partition_index": index, "error_code": code})
            return [response(conn_id, header, {
                "error_code": error, "throttle_time": 0,
                "topics": [] if error is not ErrorCode.none else
                [{"name": n, "partitions": ps} for n, ps in topics.items()]})]

        return self.groups.delete_offsets(request.group_id, [w for w in wanted if w[0] not in denied | subscribed],
                                          done, now_ms)


def offsets_topic_created(error: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
    """The end of this broker's request to create ``__consumer_offsets``. Another broker creating it
    first (TOPIC_ALREADY_EXISTS, a race of two coordinators' first requests) is as good as done; too
    few brokers alive (INVALID_REPLICATION_FACTOR), the creation manager said so."""
    if error in (ErrorCode.none, ErrorCode.topic_already_exists, ErrorCode.invalid_replication_factor):
        return []
    return [LogLine("warning", f"Creating {OFFSETS_TOPIC} failed: {error.name} {message or ''}")]
