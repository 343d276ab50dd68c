"""Metadata and DescribeCluster (KIP-700): what a client learns of the cluster, answered from the
broker's metadata cache (Kafka's KafkaApis ``handleTopicMetadataRequest`` and
``handleDescribeCluster``).

Each broker is named by its endpoint of the listener the client came in on. A topic the client may
not DESCRIBE is TOPIC_AUTHORIZATION_FAILED where it is named and left out of "every topic"; a missing
topic is created when the request allows it and ``auto.create.topics.enable`` is set
(:mod:`strandline.broker.auto_topic_creation`), and is LEADER_NOT_AVAILABLE until this broker knows it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.broker.auto_topic_creation import AutoTopicCreationManager, may_create
from strandline.coordination.metadata import MetadataCache, topic_name_error
from strandline.core.wire import Handler, response
from strandline.group.offsets_topic import INTERNAL_TOPICS
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security.acl import AclOperation, ResourceType
from strandline.security.authorizer import AclAuthorizer
from strandline.core.effects import Effect
from strandline.core.config import BrokerConfig

UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648     # KIP-430: not asked for


class MetadataApis:
    def __init__(self, config: BrokerConfig, metadata: MetadataCache, authorizer: AclAuthorizer,
                 auto_topics: AutoTopicCreationManager) -> None:
        self.config = config
        self.metadata = metadata
        self.authorizer = authorizer
        self.auto_topics = auto_topics

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.METADATA: self._metadata, ApiKey.DESCRIBE_CLUSTER: self._describe_cluster}

    def _brokers_for(self, conn_id: int) -> list[tuple[Any, str, int]]:
        """The live brokers with their endpoint of the listener the client came in on; a broker
        without that listener is left out (Kafka's MetadataCache.getAliveEndpoints)."""
        listener = self.authorizer.listener(conn_id)
        found = []
        for b in self.metadata.brokers.values():
            address = b.endpoint(listener) if hasattr(b, "endpoint") else (b.host, b.port)
            if address is not None:
                found.append((b, address[0], address[1]))
        return found


    # -- DescribeCluster (KIP-700)

    def _describe_cluster(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        """The live brokers, the cluster id and the controller, as Metadata names them; the cluster's
        authorized operations when asked for (0 without DESCRIBE on the cluster), as Kafka 2.8."""
        md = self.metadata
        operations = UNKNOWN_AUTHORIZED_OPERATIONS
        if request.include_cluster_authorized_operations:
            operations = self.authorizer.authorized_operations(conn_id, ResourceType.CLUSTER, "kafka-cluster") \
                if self.authorizer.allows_cluster(conn_id, AclOperation.DESCRIBE) else 0
        return [response(conn_id, header, {
            "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "cluster_id": md.cluster_id,
            "controller_id": md.controller_id,
            "brokers": [{"broker_id": b.id, "host": host, "port": port, "rack": b.rack}
                        for b, host, port in self._brokers_for(conn_id)],
            "cluster_authorized_operations": operations})]

    # -- Metadata

    def _metadata(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        requested = request.topics
        if requested is not None and header.api_version == 0 and len(requested) == 0:
            requested = None
        # v10+ may name a topic by its id alone (KIP-516; a KIP-848 consumer does, for its assignment)
        ids = [t.topic_id for t in requested or () if t.name is None and getattr(t, "topic_id", None)
               not in (None, uuid.UUID(int=0))]
        by_id = {t.topic_id: n for n, t in self.metadata.topics.items()} if ids else {}
        names = None if requested is None else list(dict.fromkeys(
            [t.name for t in requested if t.name is not None] + [by_id[i] for i in ids if i in by_id]))  # a set, as Kafka
        allow_auto = getattr(request, "allow_auto_topic_creation", True) and \
            self.config["auto.create.topics.enable"] and not ids
        # a topic the client may not DESCRIBE: TOPIC_AUTHORIZATION_FAILED when named (whether it
        # exists or not), left out of "every topic"; one it may not create is not created
        allows = self.authorizer.allows_topic
        denied = {n for n in names or () if n is not None and not allows(conn_id, AclOperation.DESCRIBE, n)}
        missing = [n for n in (names or ()) if n not in self.metadata.topics and topic_name_error(n) is None
                   and n not in denied]
        if missing and allow_auto:
            denied.update(n for n in missing if not may_create(self.authorizer, conn_id, n))
            missing = [n for n in missing if n not in denied]
        shown = _MetadataView(conn_id, denied, bool(getattr(request, "include_topic_authorized_operations", False)),
                              bool(getattr(request, "include_cluster_authorized_operations", False)), allow_auto,
                              {i: by_id.get(i) for i in ids})
        if missing and allow_auto:
            pending = set(missing)
            outcomes: dict[str, ErrorCode] = {}
            effects: list[Effect] = []

            def created(name: str) -> Callable[[ErrorCode, str | None, int], list[Effect]]:
                def done(error: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
                    pending.discard(name)
                    outcomes[name] = error
                    if pending:
                        return []
                    return [response(conn_id, header, self._metadata_body(names, header, shown, outcomes))]
                return done

            for name in missing:
                effects.extend(self.auto_topics.create(name, created(name), now_ms))
            return effects
        return [response(conn_id, header, self._metadata_body(names, header, shown))]

    def _metadata_body(self, names: list[str] | None, header: RequestHeader, shown: "_MetadataView",
                       creations: dict[str, ErrorCode] | None = None) -> dict[str, Any]:
        """``creations``: the outcome of auto-creating each missing topic; a created topic (or one
        another broker created) is LEADER_NOT_AVAILABLE until this broker knows it, a failed
        creation answers with its error (as Kafka's createTopic)."""
        md = self.metadata
        brokers = [{"node_id": b.id, "host": host, "port": port, "rack": b.rack}
                   for b, host, port in self._brokers_for(shown.conn_id)]
        topics: list[dict[str, Any]] = []
        for topic_id, known in shown.by_id.items():
            if known is None or known in shown.denied:    # as Kafka: the name of a topic denied is not told
                topics.append({"error_code": ErrorCode.unknown_topic_id if known is None
                               else ErrorCode.topic_authorization_failed, "name": None, "topic_id": topic_id,
                               "partitions": []})
        for name in (sorted(md.topics) if names is None else names):
            if name in shown.denied:
                if name in shown.by_id.values():            # answered by its id above
                    continue
                topics.append({"error_code": ErrorCode.topic_authorization_failed, "name": name,
                               "topic_id": uuid.UUID(int=0), "partitions": []})
                continue
            if names is None and not self.authorizer.allows_topic(shown.conn_id, AclOperation.DESCRIBE, name):
                continue
            topic = md.topics.get(name)
            if topic is not None and not topic.states:
                # read from ZooKeeper for a LeaderAndIsr, but no UpdateMetadata yet: Kafka's cache
                # does not hold it until then (a topic being created, to a client)
                if names is None:
                    continue
                error = ErrorCode.leader_not_available if shown.auto_create else ErrorCode.unknown_topic_or_partition
                topics.append({"error_code": error, "name": name, "topic_id": uuid.UUID(int=0), "partitions": []})
                continue
            if topic is None:
                invalid = topic_name_error(name)
                creation = (creations or {}).get(name)
                if invalid:
                    error = ErrorCode.invalid_topic_exception
                elif creation is None:
                    error = ErrorCode.unknown_topic_or_partition
                elif creation in (ErrorCode.none, ErrorCode.topic_already_exists):
                    error = ErrorCode.leader_not_available
                else:
                    error = creation
                topics.append({"error_code": error, "name": name, "topic_id": uuid.UUID(int=0), "partitions": []})
                continue
            partitions = []
            for index in sorted(topic.assignment):
                replicas = list(topic.assignment[index])
                state = topic.states.get(index)
                if state is None:       # added, but no UpdateMetadata for it yet: not in Kafka's cache either
                    continue
                leader = state.leader
                error = ErrorCode.none if leader >= 0 and leader in md.brokers else ErrorCode.leader_not_available
                partitions.append({
                    "error_code": error, "partition_index": index, "leader_id": leader,
                    "leader_epoch": state.leader_epoch,
                    "replica_nodes": replicas, "isr_nodes": list(state.isr),
                    "offline_replicas": [r for r in replicas if r not in md.brokers],
                })
            topics.append({"error_code": ErrorCode.none, "name": name, "topic_id": topic.topic_id,
                           "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
                           "topic_authorized_operations": self.authorizer.authorized_operations(
                               shown.conn_id, ResourceType.TOPIC, name) if shown.topic_operations
                           else UNKNOWN_AUTHORIZED_OPERATIONS})
        return {"brokers": brokers, "cluster_id": md.cluster_id, "controller_id": md.controller_id,
                "topics": topics, "cluster_authorized_operations": self.authorizer.authorized_operations(
                    shown.conn_id, ResourceType.CLUSTER, "kafka-cluster") if shown.cluster_operations
                else UNKNOWN_AUTHORIZED_OPERATIONS}


@dataclass(frozen=True)
class _MetadataView:
    """What one Metadata request may see: the topics it named but may not DESCRIBE (or create),
    and whether it asked for KIP-430 authorized operations."""

    conn_id: int
    denied: set[str]
    topic_operations: bool
    cluster_operations: bool
    auto_create: bool = False           # the request may create the topics it names
    #: the topics it named by id: id -> the name, None for an id no topic has
    by_id: dict[uuid.UUID, str | None] = field(default_factory=dict)
