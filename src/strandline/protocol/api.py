"""The API table, request decoding and response encoding (kio schemas), sans-IO.

Requests are decoded with kio's native reader (:func:`decode_request`) once their shape is checked
(:mod:`strandline.protocol.shapes`). Responses are plain dicts (or kio dataclasses) built into the
kio dataclasses of the request's version by :func:`~strandline.protocol.build.build` (keys a
version lacks are ignored, missing fields get their defaults), so request handlers are
version-agnostic (:func:`encode_response`). The two hot responses, Fetch and Produce, have
hand-written encoders (:mod:`strandline.protocol.hot_responses`), re-exported here; Metadata answers
go through its hand-written encoder too.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from functools import lru_cache
from typing import Any, Callable

from strandline.protocol.old_versions import request_schema as load_request_schema
from strandline.protocol.old_versions import response_schema as load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityTupleField, classify_field  # private kio API (see build())

from strandline.protocol.build import build  # noqa: F401  (part of this module's interface)
from strandline.protocol.frames import ProtocolError
from strandline.protocol.header import RequestHeader
from strandline.protocol.hot_responses import (  # noqa: F401  (part of this module's interface)
    PartitionData,
    PartitionProduceResult,
    encode_fetch_response,
    encode_metadata_response,
    encode_produce_response,
)
from strandline.protocol.shapes import Malformed, shape_walker

_I32 = struct.Struct(">i")


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    ALTER_ISR = 56
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90


# Advertised version ranges {api_key: (min, max)}; every range overlaps what kafka-python
# 3.0.12, confluent-kafka 2.16 (librdkafka 2.16), aiokafka 0.14 and kcat 1.7.1 (librdkafka 2.0.2)
# use, and kio 0.6.5 has request and response schemas for every version in it, except:
#  * Produce v0-v2, Fetch v0-v3, ListOffsets v0, CreateTopics v0-v1, DeleteTopics v0,
#    OffsetForLeaderEpoch v0-v1, OffsetCommit v0-v1, OffsetFetch v0, WriteTxnMarkers v0, the
#    ACL APIs' v0, DescribeConfigs v0, AlterReplicaLogDirs v0,
#    DescribeLogDirs v0, the delegation token APIs' v0, AlterIsr v0 (Kafka 2.8 serves them;
#    kio, from Kafka 4.x, lacks them): their schemas are derived in strandline.protocol.old_versions. Message sets of
#    format v0 and v1 are converted to record batches v2 on produce and back on fetch
#    (strandline.protocol.legacy_records).
#  * Fetch 13-16 and Produce 13 address topics by id (KIP-516); librdkafka 2.16 uses Fetch 16.
#  * Produce 12, EndTxn 5, TxnOffsetCommit 5, AddPartitionsToTxn 5 and AddOffsetsToTxn 4 are
#    transactions v2 (KIP-890 part 2), which Kafka 4.x clients use when ApiVersions finalizes the
#    feature transaction.version at 2 (TRANSACTION_VERSION, the broker's transaction.version): a
#    Produce v12 or TxnOffsetCommit v5 adds its partition to the transaction through the
#    coordinator, and EndTxn v5 bumps the producer epoch. EndTxn 4 and TxnOffsetCommit 4 only
#    allow new errors, AddOffsetsToTxn 4 and Produce 11 likewise.
#  * InitProducerId stops at v5 (PRODUCER_FENCED may be returned): v6 adds two-phase commit
#    (KIP-939), which needs a transaction coordinator.
#  * LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown (the controller's APIs,
#    advertised as Kafka 2.8's ZooKeeper-mode brokers do) are encoded by hand in
#    strandline.protocol.control, which kio (from Kafka 4.x, without ZooKeeper) lacks.
#  * ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) are advertised only by a broker
#    whose group.coordinator.rebalance.protocols lists consumer (:data:`CONSUMER_GROUP_APIS`).
#  * The share group APIs (KIP-932) start at v1, Kafka 4.1's first stable version, and are
#    advertised only with group.share.enable=true (:data:`SHARE_GROUP_APIS`), as are the share
#    coordinator's (Initialize/Read/Write/DeleteShareGroupState), which brokers send each other.
# FindCoordinator is listed because librdkafka enables LZ4 only when it is advertised; until
# consumer groups exist it answers COORDINATOR_NOT_AVAILABLE. v4+ is the batched form.
SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 13),
    ApiKey.FETCH: (0, 16),
    ApiKey.LIST_OFFSETS: (0, 11),
    ApiKey.METADATA: (0, 13),
    ApiKey.LEADER_AND_ISR: (0, 5),
    ApiKey.STOP_REPLICA: (0, 3),
    ApiKey.UPDATE_METADATA: (0, 7),
    ApiKey.CONTROLLED_SHUTDOWN: (0, 3),
    ApiKey.DESCRIBE_CLUSTER: (0, 0),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (0, 9),
    ApiKey.OFFSET_FETCH: (0, 9),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (0, 2),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 0),
    ApiKey.WRITE_TXN_MARKERS: (0, 2),
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.UPDATE_FEATURES: (0, 2),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_DELEGATION_TOKEN: (0, 2),
    ApiKey.RENEW_DELEGATION_TOKEN: (0, 2),
    ApiKey.EXPIRE_DELEGATION_TOKEN: (0, 2),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: (0, 2),
    ApiKey.ALTER_ISR: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 1),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 1),
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 1),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 0),
}

#: The APIs of the consumer group protocol (KIP-848), served when it is enabled.
CONSUMER_GROUP_APIS = frozenset({ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE})
#: The APIs of share groups (KIP-932), served when group.share.enable is true.
SHARE_GROUP_APIS = frozenset({ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH,
                              ApiKey.SHARE_ACKNOWLEDGE, ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                              ApiKey.READ_SHARE_GROUP_STATE, ApiKey.WRITE_SHARE_GROUP_STATE,
                              ApiKey.DELETE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
                              ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS})


def register(api_key: int, min_version: int, max_version: int) -> None:
    """Advertise (or re-advertise) ``api_key`` with versions ``min_version..max_version``."""
    if not 0 <= min_version <= max_version:
        raise ValueError(f"bad version range {min_version}-{max_version} for API key {api_key}")
    SUPPORTED[int(api_key)] = (min_version, max_version)


def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"


class UnsupportedApiVersions(Exception):
    """An ApiVersions request newer than we know (KIP-511).

    Answer it with ``api_versions_fallback(exc.correlation_id)`` and keep the connection.
    """

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(f"ApiVersions version {header.api_version} is above our maximum "
                         f"{SUPPORTED[ApiKey.API_VERSIONS][1]}")
        self.header = header
        self.correlation_id = header.correlation_id


_PEEK = struct.Struct(">hhi")


def peek_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame."""
    if len(frame) < 8:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header (8)")
    return _PEEK.unpack_from(frame, 0)


@lru_cache(maxsize=None)
def _readers(api_key: int, api_version: int) -> tuple[Callable[..., int], Callable[..., int], Any, Any]:
    req_cls: Any = load_request_schema(api_key, api_version)
    header_cls = req_cls.__header_schema__
    return (shape_walker(header_cls), shape_walker(req_cls),
            entity_reader(header_cls), entity_reader(req_cls))


def _client_id_or_none(frame: bytes | bytearray | memoryview) -> str | None:
    """Best-effort client_id (a legacy nullable string in every request header version)."""
    try:
        (length,) = struct.unpack_from(">h", frame, 8)
        if length < 0 or 10 + length > len(frame):
            return None
        return bytes(frame[10:10 + length]).decode("utf-8", "replace")
    except struct.error:
        return None


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Any]:
    """Decode one request frame (without its size prefix) into (header, kio request object).

    Raises :class:`ProtocolError` for an unknown API key, a version we do not support, or any
    malformed content (truncation, garbage), and :class:`UnsupportedApiVersions` for an
    ApiVersions request newer than we support. Bytes after the body are ignored, as Kafka does
    (librdkafka 2.15+ sends three after an all-topics Metadata v12); every array must still fit
    in the frame.
    """
    api_key, api_version, correlation_id = peek_header(frame)
    if type(frame) is not bytes:
        # kio's native reader refuses writable buffers (bytearray): hand it a read-only view
        frame = memoryview(frame).toreadonly()
    supported = SUPPORTED.get(api_key)
    if supported is None:
        raise ProtocolError(f"unknown or unsupported API key {api_key} (version {api_version})")
    if api_key == ApiKey.API_VERSIONS and api_version > supported[1]:
        raise UnsupportedApiVersions(
            RequestHeader(api_key, api_version, correlation_id, _client_id_or_none(frame)))
    if not supported[0] <= api_version <= supported[1]:
        raise ProtocolError(f"{api_name(api_key)} version {api_version} is not supported "
                            f"(supported: {supported[0]}-{supported[1]})")
    try:
        walk_header, walk_body, header_reader, body_reader = _readers(api_key, api_version)
    except Exception:
        raise ProtocolError(f"{api_name(api_key)} version {api_version} is not supported "
                            f"(no schema for it)") from None
    end = len(frame)
    try:
        body_at = walk_header(frame, 0, end)
        if body_at > end:
            raise Malformed("truncated request header")
        body_end = walk_body(frame, body_at, end)
    except (Malformed, struct.error, IndexError) as exc:
        raise ProtocolError(f"malformed {api_name(api_key)} v{api_version} request: "
                            f"{exc or 'truncated'}") from None
    if body_end > end:
        raise ProtocolError(f"truncated {api_name(api_key)} v{api_version} request "
                            f"({end} bytes, {body_end - end} missing)")
    header, body = _read_with_kio(header_reader, body_reader, frame, api_key, api_version, "request")
    return RequestHeader(api_key, api_version, correlation_id, header.client_id), body


def _read_with_kio(read_header: Any, read_body: Any, frame: bytes | memoryview, api_key: int, api_version: int,
                   kind: str) -> tuple[Any, Any]:
    """A frame's header and body as kio reads them; malformed content is a :class:`ProtocolError`
    (named only then: this runs for every request)."""
    try:
        header, offset = read_header(frame, 0)
        body, _ = read_body(frame, offset)
    except Exception as exc:  # kio raises assorted errors on malformed input
        raise ProtocolError(f"malformed {api_name(api_key)} v{api_version} {kind}: "
                            f"{type(exc).__name__}: {exc}") from None
    return header, body


# -- generic response encoding ----------------------------------------------------------------

@lru_cache(maxsize=None)
def _writers(api_key: int, api_version: int) -> tuple[type, type, Any, Any]:
    resp_cls: Any = load_response_schema(api_key, api_version)
    header_cls = resp_cls.__header_schema__  # ApiVersions: always response header v0 (kio)
    return resp_cls, header_cls, entity_writer(header_cls), entity_writer(resp_cls)


def response_class(api_key: int, api_version: int) -> type:
    """kio's response dataclass for ``api_key`` v``api_version``."""
    return _writers(api_key, api_version)[0]


class _Buffer(bytearray):
    """What kio's writers write into: bytes in memory, grown by ``write``."""

    def write(self, data: bytes) -> int:
        self += data
        return len(data)


def encode_response(header: RequestHeader, body: Any) -> bytes:
    """A framed response (int32 size, response header, body) for ``header``'s API and version.

    ``body`` is a kio response dataclass of that version or a dict (see :func:`build`).
    """
    if header.api_key == ApiKey.METADATA and isinstance(body, dict):
        return encode_metadata_response(header, body)
    resp_cls, header_cls, write_header, write_body = _writers(header.api_key, header.api_version)
    obj = build(resp_cls, body)
    buf = _Buffer(b"\0\0\0\0")
    write_header(buf, header_cls(correlation_id=header.correlation_id))
    write_body(buf, obj)
    _I32.pack_into(buf, 0, len(buf) - 4)
    return bytes(buf)


# -- requests this broker sends (forwarding, replica fetching) ----------------------------------

@lru_cache(maxsize=None)
def _request_codec(api_key: int, api_version: int) -> tuple[type, type, Any, Any, Any, Any]:
    req_cls: Any = load_request_schema(api_key, api_version)
    resp_cls: Any = load_response_schema(api_key, api_version)
    header_cls = req_cls.__header_schema__
    return (req_cls, header_cls, entity_writer(header_cls), entity_writer(req_cls),
            entity_reader(resp_cls.__header_schema__), entity_reader(resp_cls))


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str, body: Any) -> bytes:
    """A request frame without its size prefix: kio header and body (``body`` as in :func:`build`)."""
    req_cls, header_cls, write_header, write_body, _, _ = _request_codec(api_key, api_version)
    header = build(header_cls, {"request_api_key": api_key, "request_api_version": api_version,
                                "correlation_id": correlation_id, "client_id": client_id})
    buf = _Buffer()
    write_header(buf, header)
    write_body(buf, build(req_cls, body))
    return bytes(buf)


def decode_response(api_key: int, api_version: int, frame: bytes | bytearray | memoryview) -> Any:
    """The kio body of a response frame (without its size prefix)."""
    *_, read_header, read_body = _request_codec(api_key, api_version)
    if type(frame) is not bytes:
        frame = memoryview(frame).toreadonly()
    return _read_with_kio(read_header, read_body, frame, api_key, api_version, "response")[1]


#: Kafka's feature of the transaction protocol (KIP-890 part 2: level 2, transactions v2), and the
#: levels this broker supports
TRANSACTION_VERSION = "transaction.version"
TRANSACTION_VERSIONS = (0, 2)


def api_versions_body(version: int = 0, transaction_version: int = 0,
                      without: frozenset[int] = frozenset(), features_epoch: int = 0) -> dict[str, Any]:
    """An ApiVersions response body advertising :data:`SUPPORTED`; from v3 with the features
    (KIP-584): supported, ``transaction.version`` 0-2 (omitted before v4, whose clients take a
    minimum of 0 for no support, as Kafka omits it), and finalized, ``transaction.version`` at
    ``transaction_version`` (omitted at 0, as Kafka omits a feature at level 0) in epoch
    ``features_epoch``. The APIs
    ``without`` names (those the broker's configuration turns off) are not advertised."""
    body: dict[str, Any] = {"error_code": ErrorCode.none, "throttle_time": 0,
                            "api_keys": [{"api_key": int(k), "min_version": lo, "max_version": hi}
                                         for k, (lo, hi) in sorted(SUPPORTED.items()) if k not in without]}
    if version >= 3:
        lo, hi = TRANSACTION_VERSIONS
        body["supported_features"] = [{"name": TRANSACTION_VERSION, "min_version": lo, "max_version": hi}
                                      ] if version >= 4 or lo > 0 else []
        body["finalized_features_epoch"] = features_epoch
        body["finalized_features"] = [{"name": TRANSACTION_VERSION, "max_version_level": transaction_version,
                                       "min_version_level": transaction_version}] if transaction_version > 0 else []
    return body


def api_versions_fallback(correlation_id: int) -> bytes:
    """KIP-511: ApiVersions v0 response, UNSUPPORTED_VERSION and the full API list (framed)."""
    body = api_versions_body()
    body["error_code"] = ErrorCode.unsupported_version
    return encode_response(RequestHeader(ApiKey.API_VERSIONS, 0, correlation_id, None), body)



# -- the answer to a request that failed --------------------------------------------------------

def error_response(header: RequestHeader, request: Any, code: int) -> bytes | None:
    """A framed response to ``request`` (its kio object) that answers every part of it ``code``,
    as Kafka's ``AbstractRequest.getErrorResponse`` does: each ``error_code`` of the response is
    ``code``, and each array of entities mirrors the request's array in the same place (the
    first response array answers the first request array, ...), keeping the fields both share
    (a topic's name, a partition's index). None when no such response can be built: the
    connection is then closed."""
    try:
        resp_cls = response_class(header.api_key, header.api_version)
        return encode_response(header, _mirror(resp_cls, request, int(code)))
    except Exception:               # a request too odd to mirror: closing the connection answers it
        return None


def _entity_arrays(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if "tag" not in f.metadata
            and isinstance(classify_field(f), EntityTupleField)]


def _mirror(resp_cls: type, request: Any, code: int) -> dict[str, Any]:
    body: dict[str, Any] = {}
    req_arrays = _entity_arrays(type(request)) if dataclasses.is_dataclass(request) else []
    for i, field in enumerate(_entity_arrays(resp_cls)):
        items = getattr(request, req_arrays[i].name, None) if i < len(req_arrays) else None
        inner = classify_field(field).type_
        body[field.name] = [_mirror(inner, item, code) for item in items or ()]
    for field in dataclasses.fields(resp_cls):
        if field.name in body or "tag" in field.metadata:
            continue
        if field.name == "error_code":
            body[field.name] = code
        elif not isinstance(classify_field(field), EntityTupleField) and hasattr(request, field.name) and \
                field.metadata.get("kafka_type") not in ("bytes", "records"):
            body[field.name] = getattr(request, field.name)
    return body
