"""The request router (Kafka's KafkaApis): decode each request, hand it to the component that
owns what it asks about, encode the answer.

Produce and Fetch go to the :class:`ReplicaManager`; the controller's LeaderAndIsr,
UpdateMetadata and StopReplica to the replica manager too, and ControlledShutdown to the
:class:`Controller`; the other APIs to their handlers (:mod:`strandline.broker.log_apis` for
ListOffsets, OffsetForLeaderEpoch and the log admin APIs, :mod:`strandline.broker.admin_apis`,
:mod:`strandline.broker.group_apis`, ...). Metadata answers from
the broker's metadata cache. A client's request other than ApiVersions waits until the broker has
loaded the cluster (:meth:`KafkaApis.metadata_loaded`).

A malformed request never stops a broker. A frame that cannot be parsed (truncated, an unknown
API or version, a null where the schema allows none) closes its connection, as Kafka does; an
exception while a parsed request is handled (a handler's bug) answers that request with
UNKNOWN_SERVER_ERROR in every part, or closes its connection when no answer can be built, with one
ERROR line (rate-limited by the shell). The broker goes on serving everyone else. Only
:data:`STOPS_THE_BROKER` propagates to the shell, which stops the broker: a
:class:`~strandline.errors.BrokenInvariant` (its own state broke a rule it must keep), ``OSError``
(its storage failed) and ``MemoryError``.
"""

from __future__ import annotations

import re
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.broker.admin_apis import AdminApis
from strandline.security.authorizer import AclAuthorizer
from strandline.broker.auto_topic_creation import AutoTopicCreationManager
from strandline.broker.config_apis import ConfigApis
from strandline.core.effects import Close, LogLine, Send
from strandline.broker.group_apis import GroupApis
from strandline.broker.log_apis import LogApis
from strandline.transaction.producer_ids import ProducerIdManager
from strandline.broker import sasl_apis
from strandline.broker.quota_apis import QuotaApis
from strandline.broker.txn_apis import TxnApis
from strandline.core.wire import duration_ms, response
from strandline.controller.controller import Controller
from strandline.errors import BrokenInvariant
from strandline.log.disk import FileRegion
from strandline.coordination.metadata import MetadataCache, topic_name_error
from strandline.group.offsets_topic import INTERNAL_TOPICS
from strandline.protocol import api, control
from strandline.protocol.api import ApiKey, RequestHeader
from strandline.protocol.frames import ProtocolError
from strandline.protocol.hot_readers import decode_produce_request
from strandline.protocol.legacy_records import UnsupportedCompression, down_convert
from strandline.protocol.records import UndecodableRecordsError
from strandline.replication.fetch_session import FetchContext, FetchSessionCache
from strandline.replication.purgatory import ProduceResult
from strandline.replication.replica_manager import ProduceEntry, ReplicaManager
from strandline.security.acl import AclOperation, ResourceType

TOPIC_ID_PRODUCE = 13                    # Produce v13+ names topics by id (KIP-516)
LEGACY_PRODUCE_BELOW = 3                 # Produce v0-v2 may carry message sets of format v0 and v1
DOWN_CONVERTED_FETCH_BELOW = 4           # Fetch v0-v3 read message sets of format v0 (v0-v1) and v1 (v2-v3)
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648     # KIP-430: not asked for
#: What stops the broker when it escapes a request's handling: a broken invariant of its own state,
#: its storage failing (Kafka takes a failed log directory offline; this broker has one), memory.
STOPS_THE_BROKER = (BrokenInvariant, OSError, MemoryError)
#: the user of an unauthenticated connection's quotas (Kafka's principal User:ANONYMOUS)
ANONYMOUS = "ANONYMOUS"
_SOFTWARE_FIELD = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@dataclass
class KafkaApis:
    config: Any
    metadata: MetadataCache
    replicas: ReplicaManager
    controller: Controller
    auto_topics: AutoTopicCreationManager
    producer_ids: ProducerIdManager
    group_apis: GroupApis
    admin_apis: AdminApis
    config_apis: ConfigApis
    fetch_sessions: FetchSessionCache
    authorizer: AclAuthorizer
    txn_apis: TxnApis
    log_apis: LogApis
    quota_apis: QuotaApis
    _topic_ids: dict[str, Any] = field(default_factory=dict)      # by name, every topic id seen by Fetch v13+
    _before_load: list[tuple[int, bytes]] | None = field(default_factory=list)  # client requests until loaded
    _request_bytes: int = 0             # the size of the request being handled (a produce's, for its quota)
    _clock_ms: int = 0                  # the newest time a request came: when a delayed answer is sent

    def __post_init__(self) -> None:
        self._handlers: dict[int, Callable] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.METADATA: self._metadata,
            ApiKey.DESCRIBE_CLUSTER: self._describe_cluster,
            ApiKey.PRODUCE: self._produce,
            ApiKey.FETCH: self._fetch,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            **self.authorizer.handlers(),
            **self.txn_apis.handlers(),
            **self.log_apis.handlers(),
            **self.admin_apis.handlers(),
            **self.config_apis.handlers(),
            **self.group_apis.handlers(),
            **self.quota_apis.handlers(),
            **sasl_apis.handlers(self.authorizer.session),
        }

    def _user(self, conn_id: int) -> str:
        """The user the connection's quotas are kept under: its principal's name."""
        return self.authorizer.session(conn_id).user

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

    def _may_create(self, conn_id: int, name: str) -> bool:
        """Kafka's rule for creating a topic: CREATE on the cluster, or on the topic."""
        return self.authorizer.allows_cluster(conn_id, AclOperation.CREATE) or \
            self.authorizer.allows_topic(conn_id, AclOperation.CREATE, name)

    def metadata_loaded(self, now_ms: int) -> list:
        """The broker knows the cluster: serve the client requests that waited for it."""
        waiting, self._before_load = self._before_load or [], None
        effects: list = []
        for conn_id, frame in waiting:
            effects.extend(self.handle_request(conn_id, frame, now_ms))
        return effects

    def connection_closed(self, conn_id: int) -> None:
        if self._before_load:
            self._before_load = [(c, frame) for c, frame in self._before_load if c != conn_id]
        self.group_apis.connection_closed(conn_id)

    def handle_request(self, conn_id: int, frame: bytes, now_ms: int) -> list:
        """Decode and answer one request frame of connection ``conn_id``.

        The controller's requests are served as soon as the broker listens. A client's request
        other than ApiVersions waits until :meth:`load_metadata`: before it the broker knows no
        brokers, controller or topics, and clients take such an answer for the cluster's state.

        A request fails alone. A frame that cannot be parsed closes its connection (Kafka's
        ``InvalidRequestException``); any other exception while it is handled answers it with
        UNKNOWN_SERVER_ERROR in every part (:func:`~strandline.protocol.api.error_response`; an
        acks=0 produce, which has no answer, closes its connection), with one ERROR line, as
        Kafka's ``handleError``; the broker goes on serving everyone else. Only what
        :data:`STOPS_THE_BROKER` names propagates and stops it: a
        :class:`~strandline.errors.BrokenInvariant` of its own state, a failing disk, no memory."""
        try:
            return self._dispatch(conn_id, frame, now_ms)
        except STOPS_THE_BROKER:
            raise
        except Exception as exc:
            return self._request_failed(conn_id, frame, exc)

    def _request_failed(self, conn_id: int, frame: bytes, exc: Exception) -> list:
        try:
            header, request = api.decode_request(frame)
        except Exception:                   # not even its header: nothing to answer it with
            header = request = None
        where = describe_exception(exc)
        what = api.api_name(header.api_key) + f" v{header.api_version}" if header is not None else "a request"
        line = LogLine("error", f"Error handling {what} of connection {conn_id}: {where}", kind="request failed")
        if header is None or (header.api_key == ApiKey.PRODUCE and getattr(request, "acks", None) == 0):
            return [line, Close(conn_id, f"handling the request failed: {where}")]
        answer = api.error_response(header, request, ErrorCode.unknown_server_error)
        if answer is None:
            return [line, Close(conn_id, f"handling the request failed: {where}")]
        return [line, Send(conn_id, [answer])]

    def _dispatch(self, conn_id: int, frame: bytes, now_ms: int) -> list:
        api_key = int.from_bytes(frame[:2], "big") if len(frame) >= 2 else -1
        self._request_bytes = len(frame)
        self._clock_ms = max(self._clock_ms, now_ms)
        if api_key in control.SCHEMAS:
            return self._control_request(conn_id, frame, now_ms)
        if self._before_load is not None and api_key != ApiKey.API_VERSIONS:
            self._before_load.append((conn_id, frame))
            return []
        if api_key == ApiKey.PRODUCE:
            fast = decode_produce_request(frame)      # records stay views of the frame (no copy)
            if fast is not None:
                version, correlation_id, client_id, produce = fast
                return self._handlers[ApiKey.PRODUCE](
                    conn_id, api.RequestHeader(ApiKey.PRODUCE, version, correlation_id, client_id), produce, now_ms)
        try:
            header, request = api.decode_request(frame)
        except api.UnsupportedApiVersions as exc:
            return [Send(conn_id, [api.api_versions_fallback(exc.correlation_id)])]
        except ProtocolError as exc:
            return [Close(conn_id, str(exc))]
        handler = self._handlers.get(header.api_key)
        if handler is None:
            return [Close(conn_id, f"API key {header.api_key} is not handled")]
        return handler(conn_id, header, request, now_ms)

    def _control_request(self, conn_id: int, frame: bytes, now_ms: int) -> list:
        """LeaderAndIsr, UpdateMetadata, StopReplica (the replica manager's) and ControlledShutdown
        (the controller's)."""
        try:
            api_key, version, correlation_id, _, body = control.decode_request(frame)
        except Exception as exc:
            return [Close(conn_id, f"malformed control request: {exc}")]

        def respond(answer: dict) -> list:
            data = control.encode_response(api_key, correlation_id, control.downgrade_answer(api_key, version, answer),
                                           version)
            return [Send(conn_id, [len(data).to_bytes(4, "big"), data])]

        if not self.authorizer.allows_cluster(conn_id, AclOperation.CLUSTER_ACTION):
            return respond(control.error_answer(api_key, int(ErrorCode.cluster_authorization_failed)))
        if api_key == control.CONTROLLED_SHUTDOWN:
            # v0 and v1 carry no broker epoch: -1, which the controller refuses (STALE_BROKER_EPOCH).
            # Strandline's brokers send v3; without authentication an older request cannot be told
            # from a client's forgery, and it would move the named broker's leaderships away.
            return self.controller.on_controlled_shutdown(body["broker_id"], body.get("broker_epoch", -1), respond, now_ms)
        if not control.has_broker_epoch(api_key, version):
            # LeaderAndIsr v0-v1, StopReplica v0, UpdateMetadata v0-v4 (before KIP-380): Kafka takes
            # them (the unknown epoch); here, as ControlledShutdown v0-v1, they are refused: without
            # a broker epoch a client's request cannot be told from the controller's.
            return respond(control.error_answer(api_key, int(ErrorCode.stale_broker_epoch)))
        return self.replicas.handle_control(api_key, control.upgrade(api_key, version, body), respond, now_ms)

    # -- ApiVersions

    def _api_versions(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        body = api.api_versions_body()
        name = getattr(request, "client_software_name", None)
        version = getattr(request, "client_software_version", None)
        if header.api_version >= 3 and not (_valid_software_field(name) and _valid_software_field(version)):
            # as Kafka's ApiVersionsRequest.getErrorResponse: the error, no API list
            body["error_code"], body["api_keys"] = ErrorCode.invalid_request, []
        return [response(conn_id, header, body)]

    # -- DescribeCluster (KIP-700)

    def _describe_cluster(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
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

    def _metadata(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        requested = request.topics
        if requested is not None and header.api_version == 0 and len(requested) == 0:
            requested = None
        names = None if requested is None else list(dict.fromkeys(t.name for t in requested))  # a set, as Kafka
        allow_auto = getattr(request, "allow_auto_topic_creation", True) and \
            self.config["auto.create.topics.enable"]
        # a topic the client may not DESCRIBE: TOPIC_AUTHORIZATION_FAILED when named (whether it
        # exists or not), left out of "every topic"; one it may not create is not created
        allows = self.authorizer.allows_topic
        denied = {n for n in names or () if n is not None and not allows(conn_id, AclOperation.DESCRIBE, n)}
        missing = [n for n in (names or ()) if n not in self.metadata.topics and topic_name_error(n) is None
                   and n not in denied]
        if missing and allow_auto:
            denied.update(n for n in missing if not self._may_create(conn_id, n))
            missing = [n for n in missing if n not in denied]
        shown = _MetadataView(conn_id, denied, bool(getattr(request, "include_topic_authorized_operations", False)),
                              bool(getattr(request, "include_cluster_authorized_operations", False)), allow_auto)
        if missing and allow_auto:
            pending = set(missing)
            outcomes: dict[str, ErrorCode] = {}
            effects: list = []

            def created(name: str) -> Callable[[ErrorCode, str | None, int], list]:
                def done(error: ErrorCode, message: str | None, when_ms: int) -> list:
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
                       creations: dict[str, ErrorCode] | None = None) -> dict:
        """``creations``: the outcome of auto-creating each missing topic; a created topic (or one
        another broker created) is LEADER_NOT_AVAILABLE until this broker knows it, a failed
        creation answers with its error (as Kafka's createTopic)."""
        md = self.metadata
        brokers = [{"node_id": b.id, "host": host, "port": port, "rack": b.rack}
                   for b, host, port in self._brokers_for(shown.conn_id)]
        topics = []
        for name in (sorted(md.topics) if names is None else names):
            if name in shown.denied:
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

    # -- Produce

    def _produce(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
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
        results: dict[tuple[str, int], ProduceResult] = {}
        entries: list[ProduceEntry] = []
        effects: list = []
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
                            self.config["auto.create.topics.enable"] and self._may_create(conn_id, name):
                        effects.extend(self.auto_topics.create(name, lambda e, m, t: [], now_ms))
                    any_error = True
                    continue
                if name in INTERNAL_TOPICS:
                    results[key] = ProduceResult(ErrorCode.invalid_topic_exception,
                                                 message=f"Cannot append to internal topic {name}")
                    any_error = True
                    continue
                entries.append(ProduceEntry(topic, pdata.index, pdata.records))
        request_bytes = self._request_bytes
        if acks == 0:
            def respond(appended: dict) -> list:
                if any_error or any(r.error is not ErrorCode.none for r in appended.values()):
                    return [Close(conn_id, "acks=0 produce failed")]
                throttle = self.quota_apis.produce.record(self._user(conn_id), header.client_id or "",
                                                          request_bytes, now_ms)
                return [Send(conn_id, [], throttle)]
        else:
            # what the answer names, kept apart from the request: an answer waiting for replication
            # does not keep the request's records (views of its frame) alive
            shape = self._produce_shape(header, request, by_id)

            def respond(appended: dict) -> list:
                results.update(appended)
                # Kafka's produce quota: the request's bytes, recorded when it is answered; over the
                # quota, the answer says for how long the client is throttled and the connection is muted
                throttle = self.quota_apis.produce.record(self._user(conn_id), header.client_id or "", request_bytes,
                                                          max(now_ms, self._clock_ms))
                return [Send(conn_id, [self._encode_produce(header, shape, results, throttle)], throttle)]

        return effects + self.replicas.append_records(
            conn_id, duration_ms(request.timeout), acks, entries, respond, now_ms,
            transactional=transactional_id is not None, legacy=header.api_version < LEGACY_PRODUCE_BELOW)

    def _produce_all_failed(self, conn_id: int, header: RequestHeader, request: Any, code: ErrorCode) -> list:
        if request.acks == 0:
            return [Close(conn_id, f"acks=0 produce failed with {code.name}")]
        by_id = self._topics_by_id() if header.api_version >= TOPIC_ID_PRODUCE else None
        shape = self._produce_shape(header, request, by_id)
        results = {(key, index): ProduceResult(code) for _, key, indexes in shape for index in indexes}
        return [Send(conn_id, [self._encode_produce(header, shape, results)])]

    def _topics_by_id(self) -> dict:
        return {t.topic_id: t for t in self.metadata.topics.values()}

    @staticmethod
    def _produce_key(topic_data: Any, by_id: dict | None) -> Any:
        """The name results are kept under: the topic's name, or its id when v13+ names an unknown id."""
        if by_id is None:
            return topic_data.name
        topic = by_id.get(topic_data.topic_id)
        return topic_data.topic_id if topic is None else topic.name

    def _produce_shape(self, header: RequestHeader, request: Any, by_id: dict | None) -> list:
        """What a Produce answer names, in the request's order: for each topic, the name or id it
        answers with, the :meth:`_produce_key` its results are kept under (as it was when the
        request came), and its partition indexes."""
        by_topic_id = header.api_version >= TOPIC_ID_PRODUCE
        # kio reads a zero topic id as None; the answer names it as it came, zero
        return [((t.topic_id or uuid.UUID(int=0)) if by_topic_id else t.name, self._produce_key(t, by_id),
                 [p.index for p in t.partition_data]) for t in request.topic_data]

    def _encode_produce(self, header: RequestHeader, shape: list, results: dict, throttle_ms: int = 0) -> bytes:
        topics = []
        for named, key, indexes in shape:
            parts = []
            for index in indexes:
                parts.append((index, *results[(key, index)]))      # error, base, time, lso, message[, record errors]
            topics.append((named, parts))
        return api.encode_produce_response(header, topics, throttle_ms)

    # -- Fetch

    def _fetch(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        if header.api_version >= 15:
            replica_id = request.replica_state.replica_id
        else:
            replica_id = request.replica_id
        max_wait_ms = duration_ms(request.max_wait)
        min_bytes = request.min_bytes
        max_bytes = min(getattr(request, "max_bytes", 0x7FFFFFFF), self.config["fetch.max.bytes"])
        if replica_id < 0 and self.quota_apis.fetch.enabled:
            # never more than the quota allows in its whole window (Kafka's maxQuotaWindowBytes)
            max_bytes = int(min(max_bytes, self.quota_apis.fetch.max_window_bytes(self._user(conn_id),
                                                                                  header.client_id or "")))
        isolation = getattr(request, "isolation_level", 0)
        if header.api_version >= 13:
            return self._fetch_by_topic_id(conn_id, header, request, replica_id, max_wait_ms, min_bytes, max_bytes,
                                           isolation, now_ms)
        # one entry per partition, the last one named, as Kafka's fetch request keeps them
        wanted = list({(t.topic, p.partition): (t.topic, p) for t in request.topics for p in t.partitions}.values())
        forgotten = [(t.topic, index) for t in getattr(request, "forgotten_topics_data", ()) for index in t.partitions]
        wanted, denied = self._fetch_allowed(conn_id, replica_id, wanted)
        context = self._fetch_context(header, request, replica_id, wanted, forgotten, now_ms)
        if context.error is not ErrorCode.none:
            return [self._fetch_response(conn_id, header, [], context)]
        denied += self._session_denied(conn_id, replica_id, context)

        def respond(topics: list) -> list:
            throttled = self._fetch_throttle(conn_id, header, replica_id, topics, context, now_ms)
            if throttled is not None:
                return throttled
            topics = context.answer(topics)
            if header.api_version < DOWN_CONVERTED_FETCH_BELOW:
                self._down_convert(topics, header.api_version, wanted, replica_id >= 0)
            self.replicas.topic_stats.fetched(topics, replica_id >= 0)
            if denied:
                topics += _fetch_denied(denied)
            return [self._fetch_response(conn_id, header, topics, context)]

        return self.replicas.fetch_messages(conn_id, replica_id, max_wait_ms, min_bytes, max_bytes, isolation,
                                            context.wanted, respond, now_ms, context.session_keys,
                                            _client_rack(header, request))

    def _fetch_throttle(self, conn_id: int, header: RequestHeader, replica_id: int, topics: list,
                        context: FetchContext, now_ms: int) -> list | None:
        """Kafka's fetch quota for a consumer: the bytes read are recorded; over the quota they are
        taken back and the answer is empty (no partition, the session unchanged; a full fetch's
        session id 0), saying for how long the client is throttled, and the connection is muted."""
        quota = self.quota_apis.fetch
        if replica_id >= 0 or not quota.enabled:
            return None
        size = sum(len(entry["records"] or b"") for t in topics for entry in t["partitions"])
        client_id, when = header.client_id or "", max(now_ms, self._clock_ms)
        user = self._user(conn_id)
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
        return [Send(conn_id, api.encode_fetch_response(header, body), throttle)]

    def _down_convert(self, topics: list, version: int, wanted: list, follower: bool) -> None:
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
                data = records.read() if records.__class__ is FileRegion else records
                try:
                    entry["records"] = down_convert(data, to_magic, offsets.get((name, entry["partition_index"]), 0),
                                                    len(data))
                except UnsupportedCompression:
                    _fetch_error(entry, ErrorCode.unsupported_compression_type)
                except UndecodableRecordsError:
                    _fetch_error(entry, ErrorCode.corrupt_message)

    def _fetch_allowed(self, conn_id: int, replica_id: int, wanted: list) -> tuple[list, list[tuple[str, int]]]:
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

    def _fetch_context(self, header: RequestHeader, request: Any, replica_id: int, wanted: list,
                       forgotten: list, now_ms: int) -> FetchContext:
        """Fetch v7+ may belong to an incremental fetch session (KIP-227); earlier ones never do."""
        if header.api_version < 7:
            return FetchContext(wanted)
        return self.fetch_sessions.context(request.session_id, request.session_epoch, wanted, forgotten,
                                           replica_id >= 0, now_ms)

    def _fetch_by_topic_id(self, conn_id: int, header: RequestHeader, request: Any, replica_id: int,
                           max_wait_ms: int, min_bytes: int, max_bytes: int, isolation: int, now_ms: int) -> list:
        """Fetch v13+ names topics by id (KIP-516): an id this broker does not know is answered
        UNKNOWN_TOPIC_ID for each of its partitions; the others are fetched as by name."""
        names = {t.topic_id: t.name for t in self.metadata.topics.values()}
        # every id ever seen, so that a session partition of a topic deleted since is still answered
        # (UNKNOWN_TOPIC_OR_PARTITION, under its id) and can be forgotten by its id
        self._topic_ids.update((t.name, t.topic_id) for t in self.metadata.topics.values())
        ids = self._topic_ids
        known = {topic_id: name for name, topic_id in ids.items()}
        wanted: dict[tuple[str, int], tuple[str, Any]] = {}
        unknown: dict[Any, list[int]] = {}
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
        allowed, denied = self._fetch_allowed(conn_id, replica_id, list(wanted.values()))
        context = self._fetch_context(header, request, replica_id, allowed, forgotten, now_ms)
        if context.error is not ErrorCode.none:
            return [self._fetch_response(conn_id, header, [], context)]
        denied += self._session_denied(conn_id, replica_id, context)

        def respond(topics: list) -> list:
            throttled = self._fetch_throttle(conn_id, header, replica_id, topics, context, now_ms)
            if throttled is not None:
                return throttled
            topics = context.answer(topics)
            self.replicas.topic_stats.fetched(topics, replica_id >= 0)
            if denied:
                topics += _fetch_denied(denied)
            by_id = [{"topic_id": ids.get(t["topic"], uuid.UUID(int=0)), "partitions": t["partitions"]}
                     for t in topics]
            by_id += [{"topic_id": topic_id, "partitions": [
                {"partition_index": index, "error_code": ErrorCode.unknown_topic_id, "high_watermark": -1,
                 "last_stable_offset": -1, "log_start_offset": -1, "records": b""} for index in indexes]}
                for topic_id, indexes in unknown.items()]
            return [self._fetch_response(conn_id, header, by_id, context)]

        return self.replicas.fetch_messages(conn_id, replica_id, max_wait_ms, min_bytes, max_bytes, isolation,
                                            context.wanted, respond, now_ms, context.session_keys,
                                            _client_rack(header, request))

    def _fetch_response(self, conn_id: int, header: RequestHeader, topics: list, context: FetchContext) -> Send:
        body = {"throttle_time": 0, "error_code": context.error, "session_id": context.session_id,
                "responses": topics}
        return Send(conn_id, api.encode_fetch_response(header, body))

    # -- InitProducerId

    def _init_producer_id(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        if request.transactional_id is not None:
            if not self.authorizer.allows(conn_id, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                          request.transactional_id):
                return [response(conn_id, header, {
                    "throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                    "producer_id": -1, "producer_epoch": -1})]
            return self.txn_apis.init_producer_id(conn_id, header, request, now_ms)
        if not self.authorizer.allows_cluster(conn_id, AclOperation.IDEMPOTENT_WRITE):
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                               "producer_id": -1, "producer_epoch": -1})]
        old_pid = getattr(request, "producer_id", -1)
        old_epoch = getattr(request, "producer_epoch", -1)
        if old_pid >= 0 and 0 <= old_epoch < 32766:
            # KIP-360: an idempotent producer bumps its epoch to recover from a sequence error.
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none,
                                                    "producer_id": old_pid, "producer_epoch": old_epoch + 1})]

        def answer(pid: int, when_ms: int) -> list:
            if pid < 0:
                return [response(conn_id, header, {"throttle_time": 0,
                                                        "error_code": ErrorCode.coordinator_not_available,
                                                        "producer_id": -1, "producer_epoch": -1})]
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none,
                                                    "producer_id": pid, "producer_epoch": 0})]

        return self.producer_ids.generate_producer_id(answer, now_ms)


@dataclass(frozen=True)
class _MetadataView:
    """What one Metadata request may see: the topics it named but may not DESCRIBE (or create),
    and whether it asked for KIP-430 authorized operations."""

    conn_id: int
    denied: set[str]
    topic_operations: bool
    cluster_operations: bool
    auto_create: bool = False           # the request may create the topics it names


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


def _client_rack(header: RequestHeader, request: Any) -> str | None:
    """A Fetch's client rack (KIP-392): v11+ name one, "" for none; None before v11, whose
    consumers only leaders serve (Kafka's ``fetchOnlyFromLeader``)."""
    if header.api_version < 11:
        return None
    return getattr(request, "rack_id", "") or ""


def _fetch_error(entry: dict, code: ErrorCode) -> None:
    """A Fetch response partition answered ``code`` alone (Kafka's ``errorResponse``)."""
    entry.update(error_code=code, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, records=b"")


def _fetch_denied(denied: list[tuple[str, int]]) -> list[dict]:
    """Fetch response topics answering ``denied`` partitions TOPIC_AUTHORIZATION_FAILED."""
    topics: dict[str, list] = {}
    for name, index in denied:
        topics.setdefault(name, []).append({
            "partition_index": index, "error_code": ErrorCode.topic_authorization_failed, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1, "records": b""})
    return [{"topic": name, "partitions": parts} for name, parts in topics.items()]


def _valid_software_field(value: str | None) -> bool:
    """KIP-511: client software name and version must match ``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?``."""
    return bool(value) and _SOFTWARE_FIELD.fullmatch(value) is not None


def describe_exception(exc: BaseException) -> str:
    """``Type: message (at file:line in function)`` of where ``exc`` was raised: one line."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno} in {frames[-1].name})" \
        if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
