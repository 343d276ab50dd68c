"""Fetch: records for consumers and followers, read by the :class:`ReplicaManager` (Kafka's
KafkaApis ``handleFetchRequest``).

A follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic; a refused partition
never enters the fetch session (KIP-227) and is answered TOPIC_AUTHORIZATION_FAILED. Fetch v13+
names topics by id (KIP-516). A consumer's bytes count against the fetch quota: over it the answer
is empty and says how long the client is throttled. Fetch v0-v3 down-convert the stored batches to
the message format the client reads.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, NamedTuple, Sequence, TypedDict

from kio.schema.errors import ErrorCode

from strandline.broker.arrivals import Arrivals
from strandline.broker.quota_apis import QuotaApis
from strandline.coordination.metadata import MetadataCache
from strandline.core.effects import Effect, Send
from strandline.core.wire import Handler, duration_ms
from strandline.log.disk import FileRegion
from strandline.protocol.hot_responses import encode_fetch_response
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.protocol.legacy_records import UnsupportedCompression, down_convert
from strandline.protocol.records import UndecodableRecordsError
from strandline.replication.fetch_session import FetchContext, FetchSessionCache
from strandline.replication.fetch_types import FetchedPartition, FetchedTopic, FetchPartitionRequest
from strandline.replication.replica_manager import ReplicaManager
from strandline.security.acl import AclOperation
from strandline.security.authorizer import AclAuthorizer
from strandline.core.config import BrokerConfig

DOWN_CONVERTED_FETCH_BELOW = 4           # Fetch v0-v3 read message sets of format v0 (v0-v1) and v1 (v2-v3)


class _TopicById(TypedDict):
    """One topic of a Fetch v13+ answer: named by its id (KIP-516)."""

    topic_id: uuid.UUID
    partitions: list[FetchedPartition]


class _FetchLimits(NamedTuple):
    """What a Fetch asks of its read as a whole: who asks, how long it may wait, how many bytes at
    least and at most, and its isolation level."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: int


class FetchApis:
    def __init__(self, config: BrokerConfig, metadata: MetadataCache, replicas: ReplicaManager, authorizer: AclAuthorizer,
                 fetch_sessions: FetchSessionCache, quota_apis: QuotaApis, arrivals: Arrivals) -> None:
        self.config = config
        self.metadata = metadata
        self.replicas = replicas
        self.authorizer = authorizer
        self.fetch_sessions = fetch_sessions
        self.quota_apis = quota_apis
        self.arrivals = arrivals
        self._topic_ids: dict[str, uuid.UUID] = {}        # by name, every topic id seen by Fetch v13+

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.FETCH: self._fetch}

    def _fetch(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        if header.api_version >= 15:
            replica_id = request.replica_state.replica_id
        else:
            replica_id = request.replica_id
        max_wait_ms = duration_ms(request.max_wait)
        min_bytes = request.min_bytes
        max_bytes = min(getattr(request, "max_bytes", 0x7FFFFFFF), self.config["fetch.max.bytes"])
        if replica_id < 0 and self.quota_apis.fetch.enabled:
            # never more than the quota allows in its whole window (Kafka's maxQuotaWindowBytes)
            max_bytes = int(min(max_bytes, self.quota_apis.fetch.max_window_bytes(self.quota_apis.user(conn_id),
                                                                                  header.client_id or "")))
        limits = _FetchLimits(replica_id, max_wait_ms, min_bytes, max_bytes, getattr(request, "isolation_level", 0))
        if header.api_version >= 13:
            return self._fetch_by_topic_id(conn_id, header, request, limits, now_ms)
        # one entry per partition, the last one named, as Kafka's fetch request keeps them
        wanted: list[tuple[str, FetchPartitionRequest]] = list({(t.topic, p.partition): (t.topic, p) for t in request.topics
                                                           for p in t.partitions}.values())
        forgotten = [(t.topic, index) for t in getattr(request, "forgotten_topics_data", ()) for index in t.partitions]

        def convert(topics: list[FetchedTopic]) -> None:
            if header.api_version < DOWN_CONVERTED_FETCH_BELOW:
                self._down_convert(topics, header.api_version, wanted, replica_id >= 0)

        return self._serve(conn_id, header, request, limits, wanted, forgotten, now_ms, convert, lambda topics: topics)

    def _serve(self, conn_id: int, header: RequestHeader, request: Any, limits: _FetchLimits,
               wanted: list[tuple[str, FetchPartitionRequest]], forgotten: list[tuple[str, int]], now_ms: int,
               convert: Callable[[list[FetchedTopic]], None],
               shape: Callable[[list[FetchedTopic]], Sequence[FetchedTopic | _TopicById]]) -> list[Effect]:
        """What a Fetch by names and one by ids share: the ACL checks, the fetch session, the read
        (long-polled by the :class:`ReplicaManager`), the consumer's quota and the answer.
        ``convert`` rewrites the read partitions' records in place (down-conversion); ``shape``
        turns the answer's topics into the version's form (by name or by id)."""
        replica_id = limits.replica_id
        allowed, denied = self._fetch_allowed(conn_id, replica_id, wanted)
        context = self._fetch_context(header, request, replica_id, allowed, forgotten, now_ms)
        if context.error is not ErrorCode.none:
            return [self._fetch_response(conn_id, header, [], context)]
        denied += self._session_denied(conn_id, replica_id, context)

        def respond(topics: list[FetchedTopic]) -> list[Effect]:
            throttled = self._fetch_throttle(conn_id, header, replica_id, topics, context, now_ms)
            if throttled is not None:
                return throttled
            topics = context.answer(topics)
            convert(topics)
            self.replicas.topic_stats.fetched(topics, replica_id >= 0)
            if denied:
                topics += _fetch_denied(denied)
            return [self._fetch_response(conn_id, header, shape(topics), context)]

        return self.replicas.fetch_messages(conn_id, replica_id, limits.max_wait_ms, limits.min_bytes,
                                            limits.max_bytes, limits.isolation, context.wanted, respond, now_ms,
                                            context.session_keys, _client_rack(header, request))

    def _fetch_throttle(self, conn_id: int, header: RequestHeader, replica_id: int, topics: list[FetchedTopic],
                        context: FetchContext, now_ms: int) -> list[Effect] | None:
        """Kafka's fetch quota for a consumer: the bytes read are recorded; over the quota they are
        taken back and the answer is empty (no partition, the session unchanged; a full fetch's
        session id 0), saying for how long the client is throttled, and the connection is muted."""
        quota = self.quota_apis.fetch
        if replica_id >= 0 or not quota.enabled:
            return None
        size = sum(len(entry["records"] or b"") for t in topics for entry in t["partitions"])
        client_id, when = header.client_id or "", max(now_ms, self.arrivals.clock_ms)
        user = self.quota_apis.user(conn_id)
        throttle = quota.record(user, client_id, size, when)
        if throttle <= 0:
            return None
        quota.unrecord(user, client_id, size, when)
        if context.incremental:
            session_id = context.session_id
        else:               # a full fetch's new session is not kept: the client starts afresh, as Kafka's
            session_id = 0
            if context.session is not None:
                self.fetch_sessions.sessions.pop(context.session.id, None)
        body = {"throttle_time": throttle, "error_code": ErrorCode.none, "session_id": session_id, "responses": []}
        return [Send(conn_id, encode_fetch_response(header, body), throttle)]

    def _down_convert(self, topics: list[FetchedTopic], version: int, wanted: list[tuple[str, FetchPartitionRequest]], follower: bool) -> None:
        """Fetch v0-v3: each partition's stored batches as a message set of format v0 (Fetch
        v0-v1) or v1 (v2-v3), in place, as Kafka's ``handleFetchRequest`` (``maybeConvertFetchedData``)
        answers: UNSUPPORTED_COMPRESSION_TYPE for a topic whose ``compression.type`` is zstd
        (Fetch before v10) or a zstd batch; UNSUPPORTED_VERSION to a consumer when records would
        need converting and the topic's ``message.downconversion.enable`` is false. The converted
        set holds at most as many bytes as were read, but at least its first batch whole."""
        to_magic = 0 if version <= 1 else 1
        offsets = {(name, p.partition): p.fetch_offset for name, p in wanted}
        for t in topics:
            name = t["topic"]
            known = self.metadata.topics.get(name)
            configs = known.configs if known is not None else {}
            for entry in t["partitions"]:
                records = entry.get("records")
                if self.config.topic_value(configs, "compression.type") == "zstd":
                    _fetch_error(entry, ErrorCode.unsupported_compression_type)
                    continue
                if not records:
                    continue
                if not follower and not self.config.topic_value(configs, "message.downconversion.enable"):
                    _fetch_error(entry, ErrorCode.unsupported_version)
                    continue
                data = records.read() if isinstance(records, FileRegion) else records
                try:
                    entry["records"] = down_convert(data, to_magic, offsets.get((name, entry["partition_index"]), 0),
                                                    len(data))
                except UnsupportedCompression:
                    _fetch_error(entry, ErrorCode.unsupported_compression_type)
                except UndecodableRecordsError:
                    _fetch_error(entry, ErrorCode.corrupt_message)

    def _fetch_allowed(self, conn_id: int, replica_id: int, wanted: list[tuple[str, FetchPartitionRequest]]
                       ) -> tuple[list[tuple[str, FetchPartitionRequest]], list[tuple[str, int]]]:
        """Split a fetch's partitions into those the client may fetch and those it may not: a
        follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic (Kafka's rule).
        The refused ones never enter the fetch session; they are answered TOPIC_AUTHORIZATION_FAILED."""
        if not self.authorizer.enabled:
            return wanted, []
        if replica_id >= 0:
            if self.authorizer.allows_cluster(conn_id, AclOperation.CLUSTER_ACTION):
                return wanted, []
            return [], [(name, p.partition) for name, p in wanted]
        allows = self.authorizer.allows_topic
        readable = {name: allows(conn_id, AclOperation.READ, name) for name in {n for n, _ in wanted}}
        return ([(n, p) for n, p in wanted if readable[n]],
                [(n, p.partition) for n, p in wanted if not readable[n]])

    def _session_denied(self, conn_id: int, replica_id: int, context: FetchContext) -> list[tuple[str, int]]:
        """Partitions of an incremental fetch session the client may no longer fetch (an ACL
        changed since they joined it): forgotten from the session, and answered
        TOPIC_AUTHORIZATION_FAILED, as Kafka checks every session partition on each Fetch."""
        session = context.session
        if not self.authorizer.enabled or session is None:
            return []
        keys = list(session.partitions)
        if replica_id >= 0:
            refused = [] if self.authorizer.allows_cluster(conn_id, AclOperation.CLUSTER_ACTION) else keys
        else:
            readable = {n: self.authorizer.allows_topic(conn_id, AclOperation.READ, n) for n in {k[0] for k in keys}}
            refused = [k for k in keys if not readable[k[0]]]
        for key in refused:
            session.forget(key)
        return refused

    def _fetch_context(self, header: RequestHeader, request: Any, replica_id: int, wanted: list[tuple[str, FetchPartitionRequest]],
                       forgotten: list[tuple[str, int]], now_ms: int) -> FetchContext:
        """Fetch v7+ may belong to an incremental fetch session (KIP-227); earlier ones never do."""
        if header.api_version < 7:
            return FetchContext(wanted)
        return self.fetch_sessions.context(request.session_id, request.session_epoch, wanted, forgotten,
                                           replica_id >= 0, now_ms)

    def _fetch_by_topic_id(self, conn_id: int, header: RequestHeader, request: Any, limits: _FetchLimits,
                           now_ms: int) -> list[Effect]:
        """Fetch v13+ names topics by id (KIP-516): an id this broker does not know is answered
        UNKNOWN_TOPIC_ID for each of its partitions; the others are fetched as by name."""
        names = {t.topic_id: t.name for t in self.metadata.topics.values()}
        # every id ever seen, so that a session partition of a topic deleted since is still answered
        # (UNKNOWN_TOPIC_OR_PARTITION, under its id) and can be forgotten by its id
        self._topic_ids.update((t.name, t.topic_id) for t in self.metadata.topics.values())
        ids = self._topic_ids
        known = {topic_id: name for name, topic_id in ids.items()}
        wanted: dict[tuple[str, int], tuple[str, FetchPartitionRequest]] = {}
        unknown: dict[uuid.UUID, list[int]] = {}
        for t in request.topics:
            topic_id = t.topic_id or uuid.UUID(int=0)
            name = names.get(topic_id) if topic_id.int else None
            for p in t.partitions:
                if name is None:
                    unknown.setdefault(topic_id, []).append(p.partition)
                else:
                    wanted[(name, p.partition)] = (name, p)
        forgotten = [(known[t.topic_id], index) for t in request.forgotten_topics_data
                     if t.topic_id in known for index in t.partitions]

        def by_id(topics: list[FetchedTopic]) -> list[_TopicById]:
            shaped: list[_TopicById] = [{"topic_id": ids.get(t["topic"], uuid.UUID(int=0)), "partitions": t["partitions"]}
                                        for t in topics]
            shaped += [{"topic_id": topic_id, "partitions": [_error_partition(index, ErrorCode.unknown_topic_id)
                                                             for index in indexes]}
                       for topic_id, indexes in unknown.items()]
            return shaped

        return self._serve(conn_id, header, request, limits, list(wanted.values()), forgotten, now_ms,
                           lambda topics: None, by_id)

    def _fetch_response(self, conn_id: int, header: RequestHeader, topics: Sequence[FetchedTopic | _TopicById],
                        context: FetchContext) -> Send:
        body = {"throttle_time": 0, "error_code": context.error, "session_id": context.session_id,
                "responses": topics}
        return Send(conn_id, encode_fetch_response(header, body))


def _client_rack(header: RequestHeader, request: Any) -> str | None:
    """A Fetch's client rack (KIP-392): v11+ name one, "" for none; None before v11, whose
    consumers only leaders serve (Kafka's ``fetchOnlyFromLeader``)."""
    if header.api_version < 11:
        return None
    return getattr(request, "rack_id", "") or ""


def _fetch_error(entry: FetchedPartition, code: ErrorCode) -> None:
    """A Fetch response partition answered ``code`` alone (Kafka's ``errorResponse``)."""
    entry["error_code"], entry["high_watermark"], entry["records"] = code, -1, b""
    entry["last_stable_offset"] = entry["log_start_offset"] = -1


def _error_partition(index: int, code: ErrorCode) -> FetchedPartition:
    """A Fetch response partition answering ``code`` alone."""
    return {"partition_index": index, "error_code": code, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}


def _fetch_denied(denied: list[tuple[str, int]]) -> list[FetchedTopic]:
    """Fetch response topics answering ``denied`` partitions TOPIC_AUTHORIZATION_FAILED."""
    topics: dict[str, list[FetchedPartition]] = {}
    for name, index in denied:
        topics.setdefault(name, []).append(_error_partition(index, ErrorCode.topic_authorization_failed))
    return [{"topic": name, "partitions": parts} for name, parts in topics.items()]
