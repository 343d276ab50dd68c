"""The consumer group protocol of KIP-848 on the wire: ConsumerGroupHeartbeat (API 68) and
ConsumerGroupDescribe (API 69).

Each maps its request onto :class:`strandline.group.consumer_groups.ConsumerGroups` and shapes
the answer. Both are served only when ``group.coordinator.rebalance.protocols`` lists
``consumer`` (Kafka 4.0's default); otherwise they are not advertised and a request for them is
answered UNSUPPORTED_VERSION. A heartbeat needs READ on its group, a description DESCRIBE (as
Kafka's ``KafkaApis``). Since Kafka 4.0 (KAFKA-18813) topics are checked too: a heartbeat
subscribing to a topic it may not DESCRIBE is refused whole (TOPIC_AUTHORIZATION_FAILED, the
coordinator not asked), and a described group one of whose members is assigned, or is to be
assigned, a topic the client may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED with no
members.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.core.wire import Handler, duration_ms, response
from strandline.group.consumer.heartbeat import HeartbeatRequest, HeartbeatResponse
from strandline.group.consumer_groups import ConsumerGroups
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security.acl import AclOperation, ResourceType
from strandline.security.authorizer import AclAuthorizer

#: AuthorizedOperations when they were not asked for (Kafka's Integer.MIN_VALUE)
NOT_ASKED = -2147483648
UNAUTHORIZED_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


class ConsumerGroupApis:
    def __init__(self, groups: ConsumerGroups, authorizer: AclAuthorizer) -> None:
        self.groups = groups
        self.authorizer = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.CONSUMER_GROUP_HEARTBEAT: self._heartbeat,
                ApiKey.CONSUMER_GROUP_DESCRIBE: self._describe}

    def _heartbeat(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def respond(answer: HeartbeatResponse) -> list[Effect]:
            assignment = None
            if answer.assignment is not None:
                assignment = {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)}
                                                   for t, ps in sorted(answer.assignment.items())]}
            return [response(conn_id, header, {
                "throttle_time": 0, "error_code": answer.error_code, "error_message": answer.error_message,
                "member_id": answer.member_id, "member_epoch": answer.member_epoch,
                "heartbeat_interval": answer.heartbeat_interval_ms, "assignment": assignment})]

        if not self.groups.enabled:
            return respond(HeartbeatResponse(ErrorCode.unsupported_version,
                                             "The new consumer group protocol is not enabled."))
        if not self.authorizer.allows(conn_id, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return respond(HeartbeatResponse(ErrorCode.group_authorization_failed, None))
        if header.api_version >= 1 and not request.member_id:     # v1+: the consumer makes its member id
            return respond(HeartbeatResponse(ErrorCode.invalid_request, "MemberId can't be empty."))
        owned = request.topic_partitions
        names = request.subscribed_topic_names
        if names and not all(self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.TOPIC, n)
                             for n in set(names)):
            return respond(HeartbeatResponse(ErrorCode.topic_authorization_failed, None))
        beat = HeartbeatRequest(
            request.group_id, request.member_id, request.member_epoch, request.instance_id, request.rack_id,
            duration_ms(request.rebalance_timeout), None if names is None else tuple(names),
            getattr(request, "subscribed_topic_regex", None), request.server_assignor,
            None if owned is None else tuple((t.topic_id, tuple(t.partitions)) for t in owned),
            header.client_id or "", "/127.0.0.1")
        def may_describe(topic: str) -> bool:
            return self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
        return self.groups.heartbeat(beat, respond, now_ms, may_describe if self.authorizer.enabled else None)

    def _describe(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        wanted = list(request.group_ids)
        allowed = [g for g in wanted if self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.GROUP, g)]
        if not self.groups.enabled:
            return self._described(conn_id, header, request, wanted, {})
        return self.groups.describe_committed(allowed, lambda found: self._described(
            conn_id, header, request, wanted, {d["group_id"]: d for d in found}), now_ms)

    def _described(self, conn_id: int, header: RequestHeader, request: Any, wanted: list[str],
                   described: dict[str, dict[str, Any]]) -> list[Effect]:
        groups = []
        for group_id in wanted:
            d = described.get(group_id)
            if d is None or not self.groups.enabled:
                d = {"error_code": ErrorCode.group_authorization_failed if self.groups.enabled
                     else ErrorCode.unsupported_version, "error_message": None, "group_id": group_id,
                     "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": []}
            if header.api_version < 1:                # MemberType came with v1
                d = {**d, "members": [{k: v for k, v in m.items() if k != "member_type"} for m in d["members"]]}
            operations = NOT_ASKED
            if request.include_authorized_operations and d["error_code"] is ErrorCode.none:
                operations = self.authorizer.authorized_operations(conn_id, ResourceType.GROUP, group_id)
            if self.authorizer.enabled and not all(
                    self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
                    for name in _assigned_topics(d["members"])):
                d = {"error_code": ErrorCode.topic_authorization_failed, "error_message": UNAUTHORIZED_TOPICS,
                     "group_id": group_id, "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                     "assignor_name": "", "members": []}
                operations = NOT_ASKED
            groups.append({**d, "authorized_operations": operations})
        return [response(conn_id, header, {"throttle_time": 0, "groups": groups})]


def _assigned_topics(members: list[dict[str, Any]]) -> set[str]:
    """The names of the topics of the members' assignments and target assignments."""
    return {t["topic_name"] for m in members for which in ("assignment", "target_assignment")
            for t in (m.get(which) or {}).get("topic_partitions", ())}
