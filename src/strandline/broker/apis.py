"""The request router (Kafka's KafkaApis): decode each request, hand it to the component that
owns what it asks about, encode the answer.

Produce and Fetch go to their handlers (:mod:`strandline.broker.produce_apis`,
:mod:`strandline.broker.fetch_apis`), which hand them to the :class:`ReplicaManager`; the
controller's LeaderAndIsr, UpdateMetadata and StopReplica to the replica manager too, and
ControlledShutdown to the :class:`Controller`; Metadata and DescribeCluster to
:mod:`strandline.broker.metadata_apis`, which answers from the broker's metadata cache; the other
APIs to their handlers (:mod:`strandline.broker.log_apis` for ListOffsets, OffsetForLeaderEpoch and
the log admin APIs, :mod:`strandline.broker.admin_apis`, :mod:`strandline.broker.group_apis`, ...).
ApiVersions and InitProducerId (for an idempotent producer) are answered here. A client's request
other than ApiVersions waits until the broker has loaded the cluster
(:meth:`KafkaApis.metadata_loaded`).

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
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.broker import sasl_apis
from strandline.broker.admin_apis import AdminApis
from strandline.broker.arrivals import Arrivals
from strandline.broker.auto_topic_creation import AutoTopicCreationManager
from strandline.broker.config_apis import ConfigApis
from strandline.broker.fetch_apis import FetchApis
from strandline.broker.group_apis import GroupApis
from strandline.broker.log_apis import LogApis
from strandline.broker.metadata_apis import MetadataApis
from strandline.broker.produce_apis import ProduceApis
from strandline.broker.quota_apis import QuotaApis
from strandline.broker.group_configs import GroupConfigs
from strandline.broker.share_group_apis import ShareGroupApis
from strandline.broker.share_group_offsets import ShareGroupOffsetsApis
from strandline.broker.share_state_apis import ShareStateApis
from strandline.broker.features import FeatureApis, FinalizedFeatures
from strandline.broker.txn_apis import TxnApis
from strandline.controller.controller import Controller
from strandline.coordination.metadata import MetadataCache
from strandline.core.effects import Close, Effect, LogLine, Send
from strandline.core.wire import Handler, response
from strandline.errors import BrokenInvariant, describe_exception
from strandline.group.share.persister import SharePersister
from strandline.group.share.state_topic import SHARE_STATE_TOPIC
from strandline.protocol import api, control
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.protocol.frames import ProtocolError
from strandline.protocol.hot_readers import decode_produce_request
from strandline.replication.fetch_session import FetchSessionCache
from strandline.replication.replica_manager import ReplicaManager
from strandline.security.acl import AclOperation, ResourceType
from strandline.security.authorizer import AclAuthorizer
from strandline.transaction.producer_ids import ProducerIdManager
from strandline.core.config import BrokerConfig

#: What stops the broker when it escapes a request's handling: a broken invariant of its own state,
#: its storage failing (Kafka takes a failed log directory offline; this broker has one), memory.
STOPS_THE_BROKER = (BrokenInvariant, OSError, MemoryError)
_SOFTWARE_FIELD = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@dataclass
class KafkaApis:
    config: BrokerConfig
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
    feature_apis: FeatureApis
    share_state_apis: ShareStateApis | None = None     # the share coordinator's APIs
    group_configs: GroupConfigs | None = None          # every group's config overrides
    _before_load: list[tuple[int, bytes | bytearray]] | None = field(default_factory=list)  # client requests until loaded
    arrivals: Arrivals = field(default_factory=Arrivals)

    def __post_init__(self) -> None:
        self.metadata_apis = MetadataApis(self.config, self.metadata, self.authorizer, self.auto_topics)
        self.produce_apis = ProduceApis(self.config, self.metadata, self.replicas, self.authorizer, self.auto_topics,
                                        self.quota_apis, self.arrivals, self.feature_apis.features)
        self.fetch_apis = FetchApis(self.config, self.metadata, self.replicas, self.authorizer, self.fetch_sessions,
                                    self.quota_apis, self.arrivals)
        persister = SharePersister(self.config, self.metadata, self.auto_topics.outbox,
                                   lambda now_ms: self.auto_topics.create(SHARE_STATE_TOPIC, _share_state_created,
                                                                          now_ms))
        if self.group_configs is None:
            self.group_configs = GroupConfigs(self.config, self.auto_topics.outbox)
        self.share_apis = ShareGroupApis(self.config, self.metadata, self.replicas, self.authorizer,
                                         self.group_apis.groups, persister, self.group_configs)
        self.group_apis.share_groups = lambda: self.share_apis.groups.values()
        self.group_apis.delete_share_group = self.share_apis.delete_group
        self.share_offsets_apis = ShareGroupOffsetsApis(self.config, self.metadata, self.authorizer,
                                                        self.group_apis.groups, persister)
        self._handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            **self.metadata_apis.handlers(),
            **self.produce_apis.handlers(),
            **self.fetch_apis.handlers(),
            **self.authorizer.handlers(),
            **self.txn_apis.handlers(),
            **self.log_apis.handlers(),
            **self.admin_apis.handlers(),
            **self.config_apis.handlers(),
            **self.group_apis.handlers(),
            **self.quota_apis.handlers(),
            **self.feature_apis.handlers(),
            **self.share_apis.handlers(),
            **self.share_offsets_apis.handlers(),
            **(self.share_state_apis.handlers() if self.share_state_apis is not None else {}),
            **sasl_apis.handlers(self.authorizer.session),
        }

    def metadata_loaded(self, now_ms: int) -> list[Effect]:
        """The broker knows the cluster: serve the client requests that waited for it."""
        waiting, self._before_load = self._before_load or [], None
        effects: list[Effect] = []
        for conn_id, frame in waiting:
            effects.extend(self.handle_request(conn_id, frame, now_ms))
        return effects

    def connection_closed(self, conn_id: int) -> None:
        if self._before_load:
            self._before_load = [(c, frame) for c, frame in self._before_load if c != conn_id]
        self.group_apis.connection_closed(conn_id)

    def handle_request(self, conn_id: int, frame: bytes | bytearray, now_ms: int) -> list[Effect]:
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

    def _request_failed(self, conn_id: int, frame: bytes | bytearray, exc: Exception) -> list[Effect]:
        header: RequestHeader | None
        request: Any
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

    def _dispatch(self, conn_id: int, frame: bytes | bytearray, now_ms: int) -> list[Effect]:
        api_key = int.from_bytes(frame[:2], "big") if len(frame) >= 2 else -1
        self.arrivals.came(len(frame), now_ms)
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
                    conn_id, RequestHeader(ApiKey.PRODUCE, version, correlation_id, client_id), produce, now_ms)
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

    def _control_request(self, conn_id: int, frame: bytes | bytearray, now_ms: int) -> list[Effect]:
        """LeaderAndIsr, UpdateMetadata, StopReplica, GetReplicaLogInfo (the replica manager's) and
        ControlledShutdown (the controller's)."""
        try:
            api_key, version, correlation_id, _, body = control.decode_request(frame)
        except Exception as exc:
            return [Close(conn_id, f"malformed control request: {exc}")]

        def respond(answer: dict[str, Any]) -> list[Effect]:
            data = control.encode_response(api_key, correlation_id, control.downgrade_answer(api_key, version, answer),
                                           version)
            return [Send(conn_id, [len(data).to_bytes(4, "big"), data])]

        if not self.authorizer.allows_cluster(conn_id, AclOperation.CLUSTER_ACTION):
            return respond(control.error_answer(api_key, int(ErrorCode.cluster_authorization_failed), body))
        if api_key == control.GET_REPLICA_LOG_INFO:     # a controller's question, read only
            return respond(self.replicas.replica_log_info(body))
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

    def _api_versions(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        return [response(conn_id, header, api_versions_answer(self.config, header.api_version, request,
                                                              self.feature_apis.features))]

    # -- InitProducerId

    def _init_producer_id(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
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

        def answer(pid: int, when_ms: int) -> list[Effect]:
            if pid < 0:
                return [response(conn_id, header, {"throttle_time": 0,
                                                        "error_code": ErrorCode.coordinator_not_available,
                                                        "producer_id": -1, "producer_epoch": -1})]
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none,
                                                    "producer_id": pid, "producer_epoch": 0})]

        return self.producer_ids.generate_producer_id(answer, now_ms)



def _share_state_created(error: ErrorCode, message: str | None, now_ms: int) -> list[Effect]:
    """``__share_group_state`` was created, or not (its first user tries again later)."""
    if error in (ErrorCode.none, ErrorCode.topic_already_exists):
        return []
    return [LogLine("warning", f"Creating {SHARE_STATE_TOPIC} failed: {error.name} {message or ''}")]


def api_versions_answer(config: BrokerConfig, version: int, request: Any,
                        features: FinalizedFeatures | None = None) -> dict[str, Any]:
    """The body of this broker's ApiVersions answer, the same before a SASL listener's
    authentication as after it (Kafka's ApiVersionManager answers both): the APIs served (the
    consumer group protocol's only when ``group.coordinator.rebalance.protocols`` lists
    ``consumer``) and, from v3, the finalized ``transaction.version``; a v3+ request whose client
    software name or version is malformed (KIP-511) gets INVALID_REQUEST with no API list and no
    features, as Kafka's ``ApiVersionsRequest.getErrorResponse``."""
    without = frozenset() if "consumer" in config["group.coordinator.rebalance.protocols"] else api.CONSUMER_GROUP_APIS
    if not config["group.share.enable"]:
        without |= api.SHARE_GROUP_APIS
    name = getattr(request, "client_software_name", None)
    software_version = getattr(request, "client_software_version", None)
    if version >= 3 and not (_valid_software_field(name) and _valid_software_field(software_version)):
        return {"error_code": ErrorCode.invalid_request, "throttle_time": 0, "api_keys": []}
    if features is None:
        return api.api_versions_body(version, config["transaction.version"], without)
    return api.api_versions_body(version, features.transaction_version, without, features.epoch)


def _valid_software_field(value: str | None) -> bool:
    """KIP-511: client software name and version must match ``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?``."""
    return value is not None and _SOFTWARE_FIELD.fullmatch(value) is not None
