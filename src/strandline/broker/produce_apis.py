"""Produce: a client's records, checked and handed to the :class:`ReplicaManager` to append
(Kafka's KafkaApis ``handleProduceRequest``).

Each partition is answered alone: TOPIC_AUTHORIZATION_FAILED without WRITE on its topic,
UNKNOWN_TOPIC_OR_PARTITION (creating the topic when ``auto.create.topics.enable`` allows),
INVALID_TOPIC_EXCEPTION for an internal topic; a transactional producer needs WRITE on its
transactional id and an idempotent one IDEMPOTENT_WRITE on the cluster, or every partition fails.
Produce v13+ names topics by id (KIP-516). The request's bytes count against the produce quota
when it is answered; an acks=0 request has no answer and a failure closes its connection.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.broker.features import FinalizedFeatures
from strandline.broker.arrivals import Arrivals
from strandline.broker.auto_topic_creation import AutoTopicCreationManager, may_create
from strandline.broker.quota_apis import QuotaApis
from strandline.coordination.metadata import MetadataCache, TopicMetadata, topic_name_error
from strandline.core.effects import Close, Effect, Send
from strandline.core.wire import Handler, duration_ms
from strandline.group.offsets_topic import INTERNAL_TOPICS
from strandline.protocol.hot_responses import encode_produce_response
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.replication.purgatory import ProduceResult
from strandline.replication.replica_manager import ProduceEntry, ReplicaManager
from strandline.security.acl import AclOperation, ResourceType
from strandline.security.authorizer import AclAuthorizer
from strandline.core.config import BrokerConfig

TOPIC_ID_PRODUCE = 13                    # Produce v13+ names topics by id (KIP-516)
LEGACY_PRODUCE_BELOW = 3                 # Produce v0-v2 may carry message sets of format v0 and v1
TV2_PRODUCE = 12                         # Produce v12+: transactions v2 (KIP-890 part 2), the leader adds the partition
#: what a partition's result is kept under: its topic's name (or, for a v13+ request naming a topic id this
#: broker does not know, that id) and its index
ResultKey = tuple[str | uuid.UUID, int]
#: one topic of a Produce answer: the name or id it answers with, the key its results are kept under, and
#: its partition indexes
TopicShape = tuple[str | uuid.UUID, str | uuid.UUID, list[int]]


class ProduceApis:
    def __init__(self, config: BrokerConfig, metadata: MetadataCache, replicas: ReplicaManager, authorizer: AclAuthorizer,
                 auto_topics: AutoTopicCreationManager, quota_apis: QuotaApis, arrivals: Arrivals,
                 features: FinalizedFeatures) -> None:
        self.config = config
        self.features = features
        self.metadata = metadata
        self.replicas = replicas
        self.authorizer = authorizer
        self.auto_topics = auto_topics
        self.quota_apis = quota_apis
        self.arrivals = arrivals

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.PRODUCE: self._produce}

    def _produce(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        acks = request.acks
        transactional_id = getattr(request, "transactional_id", None)     # v3+
        if transactional_id is not None and not self.authorizer.allows(
                conn_id, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            code = ErrorCode.transactional_id_authorization_failed
            return self._produce_all_failed(conn_id, header, request, code)
        if acks not in (-1, 0, 1):
            return self._produce_all_failed(conn_id, header, request, ErrorCode.invalid_required_acks)
        checking = self.authorizer.enabled
        if checking and _has_idempotent_batches(request) and \
                not self.authorizer.allows_cluster(conn_id, AclOperation.IDEMPOTENT_WRITE):
            return self._produce_all_failed(conn_id, header, request, ErrorCode.cluster_authorization_failed)
        results: dict[ResultKey, ProduceResult] = {}
        entries: list[ProduceEntry] = []
        effects: list[Effect] = []
        any_error = False
        by_id = self._topics_by_id() if header.api_version >= TOPIC_ID_PRODUCE else None
        for topic_data in request.topic_data:
            if by_id is not None:   # v13+: an id this broker does not know is UNKNOWN_TOPIC_ID
                topic = by_id.get(topic_data.topic_id)
                if topic is None:
                    for pdata in topic_data.partition_data:
                        results[(topic_data.topic_id, pdata.index)] = ProduceResult(ErrorCode.unknown_topic_id)
                    any_error = True
                    continue
                name = topic.name
            else:
                name = topic_data.name
                topic = self.metadata.topics.get(name)
            writable = not checking or self.authorizer.allows_topic(conn_id, AclOperation.WRITE, name)
            for pdata in topic_data.partition_data:
                key = (name, pdata.index)
                if not writable:
                    results[key] = ProduceResult(ErrorCode.topic_authorization_failed)
                    any_error = True
                    continue
                if topic is None or pdata.index not in topic.assignment:
                    results[key] = ProduceResult(ErrorCode.unknown_topic_or_partition)
                    if topic is None and by_id is None and topic_name_error(name) is None and \
                            self.config["auto.create.topics.enable"] and may_create(self.authorizer, conn_id, name):
                        effects.extend(self.auto_topics.create(name, lambda e, m, t: [], now_ms))
                    any_error = True
                    continue
                if name in INTERNAL_TOPICS:
                    results[key] = ProduceResult(ErrorCode.invalid_topic_exception,
                                                 message=f"Cannot append to internal topic {name}")
                    any_error = True
                    continue
                entries.append(ProduceEntry(topic, pdata.index, pdata.records))
        request_bytes = self.arrivals.size
        if acks == 0:
            def respond(appended: dict[tuple[str, int], ProduceResult]) -> list[Effect]:
                if any_error or any(r.error is not ErrorCode.none for r in appended.values()):
                    return [Close(conn_id, "acks=0 produce failed")]
                throttle = self.quota_apis.produce.record(self.quota_apis.user(conn_id), header.client_id or "",
                                                          request_bytes, now_ms)
                return [Send(conn_id, [], throttle)]
        else:
            # what the answer names, kept apart from the request: an answer waiting for replication
            # does not keep the request's records (views of its frame) alive
            shape = self._produce_shape(header, request, by_id)

            def respond(appended: dict[tuple[str, int], ProduceResult]) -> list[Effect]:
                results.update(appended.items())
                # Kafka's produce quota: the request's bytes, recorded when it is answered; over the
                # quota, the answer says for how long the client is throttled and the connection is muted
                throttle = self.quota_apis.produce.record(self.quota_apis.user(conn_id), header.client_id or "", request_bytes,
                                                          max(now_ms, self.arrivals.clock_ms))
                return [Send(conn_id, [self._encode_produce(header, shape, results, throttle)], throttle)]

        return effects + self.replicas.append_records(
            conn_id, duration_ms(request.timeout), acks, entries, respond, now_ms,
            transactional=transactional_id is not None, legacy=header.api_version < LEGACY_PRODUCE_BELOW,
            transactional_id=transactional_id,
            tv2=header.api_version >= TV2_PRODUCE and self.features.transaction_version >= 2)

    def _produce_all_failed(self, conn_id: int, header: RequestHeader, request: Any, code: ErrorCode) -> list[Effect]:
        if request.acks == 0:
            return [Close(conn_id, f"acks=0 produce failed with {code.name}")]
        by_id = self._topics_by_id() if header.api_version >= TOPIC_ID_PRODUCE else None
        shape = self._produce_shape(header, request, by_id)
        results: dict[ResultKey, ProduceResult] = {(key, index): ProduceResult(code) for _, key, indexes in shape for index in indexes}
        return [Send(conn_id, [self._encode_produce(header, shape, results)])]

    def _topics_by_id(self) -> dict[uuid.UUID, TopicMetadata]:
        return {t.topic_id: t for t in self.metadata.topics.values()}

    @staticmethod
    def _produce_key(topic_data: Any, by_id: dict[uuid.UUID, TopicMetadata] | None) -> str | uuid.UUID:
        """The name results are kept under: the topic's name, or its id when v13+ names an unknown id."""
        if by_id is None:
            name: str = topic_data.name
            return name
        topic = by_id.get(topic_data.topic_id)
        if topic is None:
            topic_id: uuid.UUID = topic_data.topic_id
            return topic_id
        return topic.name

    def _produce_shape(self, header: RequestHeader, request: Any, by_id: dict[uuid.UUID, TopicMetadata] | None
                       ) -> list[TopicShape]:
        """What a Produce answer names, in the request's order: for each topic, the name or id it
        answers with, the :meth:`_produce_key` its results are kept under (as it was when the
        request came), and its partition indexes."""
        by_topic_id = header.api_version >= TOPIC_ID_PRODUCE
        # kio reads a zero topic id as None; the answer names it as it came, zero
        return [((t.topic_id or uuid.UUID(int=0)) if by_topic_id else t.name, self._produce_key(t, by_id),
                 [p.index for p in t.partition_data]) for t in request.topic_data]

    def _encode_produce(self, header: RequestHeader, shape: list[TopicShape], results: dict[ResultKey, ProduceResult],
                        throttle_ms: int = 0) -> bytes:
        topics: list[tuple[str | uuid.UUID, list[tuple[Any, ...]]]] = []
        for named, key, indexes in shape:
            parts: list[tuple[Any, ...]] = []
            for index in indexes:
                parts.append((index, *results[(key, index)]))      # error, base, time, lso, message[, record errors]
            topics.append((named, parts))
        return encode_produce_response(header, topics, throttle_ms)


def _has_idempotent_batches(request: Any) -> bool:
    """Kafka's ``hasIdempotentRecords``: does any v2 batch carry a producer id?"""
    for topic_data in request.topic_data:
        for pdata in topic_data.partition_data:
            records = pdata.records
            if not records:
                continue
            view = memoryview(records)
            pos = 0
            while pos + 51 <= len(view):
                if view[pos + 16] >= 2 and int.from_bytes(view[pos + 43:pos + 51], "big", signed=True) >= 0:
                    return True
                length = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
                if length < 49:
                    break                   # malformed: validation refuses the batch
                pos += 12 + length
    return False
