"""DescribeShareGroupOffsets (KIP-932): where each share-partition of a share group starts, as
``kafka-share-groups --describe`` and ``Admin.listShareGroupOffsets`` ask.

The group's coordinator answers. For each share-partition it asks the share coordinator of that
share-partition (ReadShareGroupStateSummary) for the committed start offset and leader epoch;
a share-partition never initialized, or whose state could not be read, is reported with start
offset -1, as Kafka treats a missing state as absence of data. A request naming no topics asks
for every share-partition of the group with a state: Strandline keeps no record of which
partitions a share group has initialized, so every partition of every topic the client may
describe is asked, and those with a state are reported. Errors are Kafka's:
GROUP_AUTHORIZATION_FAILED (DESCRIBE on the group), TOPIC_AUTHORIZATION_FAILED on a named topic
(DESCRIBE), NOT_COORDINATOR, UNSUPPORTED_VERSION unless ``group.share.enable``. The lag is not
computed (version 0 has none).
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.coordination.metadata import MetadataCache
from strandline.core.effects import Effect
from strandline.core.wire import Handler, response
from strandline.group.coordinator import GroupCoordinator
from strandline.group.offsets_topic import INTERNAL_TOPICS
from strandline.group.share.persister import SharePersister
from strandline.group.share.records import ShareStateKey
from strandline.group.share.state_topic import SHARE_STATE_TOPIC
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security.acl import AclOperation, ResourceType
from strandline.security.authorizer import AclAuthorizer

UNINITIALIZED = -1


class ShareGroupOffsetsApis:
    def __init__(self, config: Any, metadata: MetadataCache, authorizer: AclAuthorizer,
                 coordinator: GroupCoordinator, persister: SharePersister) -> None:
        self.config = config
        self.metadata = metadata
        self.authorizer = authorizer
        self.coordinator = coordinator
        self.persister = persister

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self._describe_offsets}

    def _describe_offsets(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        groups: list[dict[str, Any]] = []
        asks: list[tuple[dict[str, Any], ShareStateKey]] = []      # (the partition's entry, its state's key)
        for g in request.groups:
            entry: dict[str, Any] = {"group_id": g.group_id, "topics": [], "error_code": ErrorCode.none,
                                     "error_message": None}
            groups.append(entry)
            error = self._group_error(conn_id, g.group_id)
            if error is not None:
                entry["error_code"] = error
                continue
            for name, partitions, topic_error in self._topics(conn_id, g.topics):
                topic = self.metadata.topics.get(name)
                topic_id = topic.topic_id if topic is not None and topic_error is None else uuid.UUID(int=0)
                parts = [{"partition_index": p, "start_offset": UNINITIALIZED, "leader_epoch": 0,
                          "error_code": topic_error or ErrorCode.none, "error_message": None} for p in partitions]
                entry["topics"].append({"topic_name": name, "topic_id": topic_id, "partitions": parts})
                if topic is not None and topic_error is None and SHARE_STATE_TOPIC in self.metadata.topics:
                    asks += [(part, ShareStateKey(g.group_id, topic.topic_id, p))
                             for part, p in zip(parts, partitions) if 0 <= p < topic.num_partitions]
        waiting = [len(asks)]

        def respond() -> list[Effect]:
            for g, entry in zip(request.groups, groups):
                if g.topics is None:          # every share-partition with a state: only those
                    for t in entry["topics"]:
                        t["partitions"] = [p for p in t["partitions"] if p["start_offset"] != UNINITIALIZED]
                    entry["topics"] = [t for t in entry["topics"] if t["partitions"]]
            return [response(conn_id, header, {"throttle_time": 0, "groups": groups})]

        def one_done(part: dict[str, Any]) -> Any:
            def done(error: ErrorCode, start_offset: int, leader_epoch: int, at_ms: int) -> list[Effect]:
                if error is ErrorCode.none and start_offset >= 0:
                    part["start_offset"], part["leader_epoch"] = start_offset, max(leader_epoch, 0)
                waiting[0] -= 1
                return respond() if waiting[0] == 0 else []
            return done

        if not asks:
            return respond()
        effects: list[Effect] = []
        for part, key in asks:
            effects += self.persister.read_summary(key, one_done(part), now_ms)
        return effects

    def _group_error(self, conn_id: int, group_id: str) -> ErrorCode | None:
        if not self.config["group.share.enable"]:
            return ErrorCode.unsupported_version
        if not self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return ErrorCode.group_authorization_failed
        if not self.coordinator.owns(group_id):
            return ErrorCode.not_coordinator
        return None

    def _topics(self, conn_id: int, asked: Any) -> list[tuple[str, list[int], ErrorCode | None]]:
        """(topic name, partitions, the error of all of them) for the topics asked, or every topic
        the client may describe when none are named."""
        if asked is None:
            return [(name, list(range(t.num_partitions)), None) for name, t in sorted(self.metadata.topics.items())
                    if name not in INTERNAL_TOPICS
                    and self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.TOPIC, name)]
        found = []
        for t in asked:
            allowed = self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic_name)
            found.append((t.topic_name, list(t.partitions), None if allowed else ErrorCode.topic_authorization_failed))
        return found
