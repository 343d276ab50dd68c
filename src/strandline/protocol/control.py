"""The controller's requests to brokers (LeaderAndIsr, UpdateMetadata, StopReplica) and a
broker's ControlledShutdown request to the controller.

Brokers of a ZooKeeper-mode Kafka 2.x cluster receive these from the controller on their client
port. The kio schemas are generated from Kafka 4.x, which dropped them, so they are encoded here
by hand in Kafka 2.8/3.x's layouts: LeaderAndIsr v5 and UpdateMetadata v7 (with topic ids: a
broker tells a topic from an earlier, deleted topic of the same name) and StopReplica v3 (with each
partition's leader epoch, KIP-570: one retried late does not stop a replica a newer epoch gave the
broker back), and ControlledShutdown v3, all flexible (the v2 request header and v1 response
header, compact strings and arrays, empty tagged fields). Only Strandline's controller sends them.
GetReplicaLogInfo v0 (KIP-966's unclean recovery, API key 93 of Kafka's newer releases) is a
controller's question to a replica about its log; it is not advertised in ApiVersions.

A broker also reads the older versions a Kafka 2.8 broker serves (:data:`OLDER`: LeaderAndIsr
v0-v4, StopReplica v0-v2, UpdateMetadata v0-v6, ControlledShutdown v0-v2; ControlledShutdown v0
has the v0 request header, without a client id) and answers each in its own version. Those that
carry the broker epoch (KIP-380) are taken in the newest version's shape (:func:`upgrade`,
:func:`downgrade_answer`); the others are refused (STALE_BROKER_EPOCH), as without a broker epoch
a client's request cannot be told from the controller's.

A schema is a tuple of fields; a field is ``(name, type)`` where type is one of ``int8``,
``int16``, ``int32``, ``int64``, ``bool``, ``uuid``, ``string``, ``nullable_string``, ``int32s``
(an array of int32) or a nested schema tuple (an array of structs).
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from strandline.protocol.frames import ProtocolError
from strandline.protocol.varints import read_uvarint as _read_uvarint
from strandline.protocol.varints import skip_tagged_fields as _skip_tagged_fields
from strandline.protocol.varints import write_uvarint as _uvarint

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7
GET_REPLICA_LOG_INFO = 93

#: What the controller's requests start with, and the partition state LeaderAndIsr and
#: UpdateMetadata share.
_CONTROLLER_HEADER = (("controller_id", "int32"), ("controller_epoch", "int32"), ("broker_epoch", "int64"))
_PARTITION_STATE = (
    ("partition_index", "int32"), ("controller_epoch", "int32"), ("leader", "int32"),
    ("leader_epoch", "int32"), ("isr", "int32s"), ("zk_version", "int32"), ("replicas", "int32s"),
)

LEADER_AND_ISR_PARTITION = _PARTITION_STATE + (
    ("adding_replicas", "int32s"), ("removing_replicas", "int32s"), ("is_new", "bool"))
LEADER_AND_ISR_REQUEST = _CONTROLLER_HEADER + (
    ("type", "int8"),
    ("topic_states", (("topic_name", "string"), ("topic_id", "uuid"), ("partition_states", LEADER_AND_ISR_PARTITION))),
    ("live_leaders", (("broker_id", "int32"), ("host_name", "string"), ("port", "int32"))),
)
LEADER_AND_ISR_RESPONSE = (
    ("error_code", "int16"),
    ("topics", (("topic_id", "uuid"), ("partition_errors", (("partition_index", "int32"), ("error_code", "int16"))))),
)
PARTITION_ERRORS_RESPONSE = (
    ("error_code", "int16"),
    ("partition_errors", (("topic_name", "string"), ("partition_index", "int32"), ("error_code", "int16"))),
)
UPDATE_METADATA_PARTITION = _PARTITION_STATE + (("offline_replicas", "int32s"),)
UPDATE_METADATA_REQUEST = _CONTROLLER_HEADER + (
    ("topic_states", (("topic_name", "string"), ("topic_id", "uuid"), ("partition_states", UPDATE_METADATA_PARTITION))),
    ("live_brokers", (("id", "int32"),
                      ("endpoints", (("port", "int32"), ("host", "string"), ("listener", "string"),
                                     ("security_protocol", "int16"))),
                      ("rack", "nullable_string"))),
)
UPDATE_METADATA_RESPONSE = (("error_code", "int16"),)
STOP_REPLICA_REQUEST = _CONTROLLER_HEADER + (
    ("topic_states", (("topic_name", "string"), ("partition_states", (
        ("partition_index", "int32"), ("leader_epoch", "int32"), ("delete_partition", "bool"))))),
)
#: StopReplica's leader epoch for a partition of a topic being deleted: stop it whatever its epoch
EPOCH_DURING_DELETE = -2

CONTROLLED_SHUTDOWN_REQUEST = (("broker_id", "int32"), ("broker_epoch", "int64"))
CONTROLLED_SHUTDOWN_REQUEST_V0 = (("broker_id", "int32"),)        # v0 and v1: no broker epoch (KIP-380)
CONTROLLED_SHUTDOWN_RESPONSE = (
    ("error_code", "int16"),
    ("remaining_partitions", (("topic_name", "string"), ("partition_index", "int32"))),
)

#: GetReplicaLogInfo v0 (KIP-966's unclean recovery): a controller asks a replica for its log's
#: last written leader epoch and end offset, whatever its role
GET_REPLICA_LOG_INFO_REQUEST = (
    ("topic_partitions", (("topic_id", "uuid"), ("partitions", "int32s"))),
)
GET_REPLICA_LOG_INFO_RESPONSE = (
    ("throttle_time_ms", "int32"), ("broker_epoch", "int64"), ("truncated", "bool"),
    ("topic_partition_log_info_list", (("topic_id", "uuid"), ("partition_log_info", (
        ("partition", "int32"), ("last_written_leader_epoch", "int32"), ("current_leader_epoch", "int32"),
        ("log_end_offset", "int64"), ("error_code", "int16"))))),
)
#: the most partitions one GetReplicaLogInfo answers (Kafka's MAX_PARTITIONS_PER_REQUEST)
GET_REPLICA_LOG_INFO_MAX_PARTITIONS = 1000

# api key -> (version, request schema, response schema)
SCHEMAS: dict[int, tuple[int, tuple[Any, ...], tuple[Any, ...]]] = {
    LEADER_AND_ISR: (5, LEADER_AND_ISR_REQUEST, LEADER_AND_ISR_RESPONSE),
    UPDATE_METADATA: (7, UPDATE_METADATA_REQUEST, UPDATE_METADATA_RESPONSE),
    STOP_REPLICA: (3, STOP_REPLICA_REQUEST, PARTITION_ERRORS_RESPONSE),
    CONTROLLED_SHUTDOWN: (3, CONTROLLED_SHUTDOWN_REQUEST, CONTROLLED_SHUTDOWN_RESPONSE),
    GET_REPLICA_LOG_INFO: (0, GET_REPLICA_LOG_INFO_REQUEST, GET_REPLICA_LOG_INFO_RESPONSE),
}
#: the APIs whose version here is flexible (KIP-482)
FLEXIBLE = frozenset({LEADER_AND_ISR, UPDATE_METADATA, STOP_REPLICA, CONTROLLED_SHUTDOWN, GET_REPLICA_LOG_INFO})

# -- the older versions Kafka 2.8 serves (clients/src/main/resources/common/message/*.json) --------
_LIVE_LEADERS = (("broker_id", "int32"), ("host_name", "string"), ("port", "int32"))
_UNGROUPED_STATE = (("topic_name", "string"),) + _PARTITION_STATE     # v0-v1 (LeaderAndIsr), v0-v4 (UpdateMetadata)
_LEADER_AND_ISR_V0 = (("controller_id", "int32"), ("controller_epoch", "int32"),
                      ("ungrouped_partition_states", _UNGROUPED_STATE), ("live_leaders", _LIVE_LEADERS))
_LEADER_AND_ISR_V1 = (("controller_id", "int32"), ("controller_epoch", "int32"),
                      ("ungrouped_partition_states", _UNGROUPED_STATE + (("is_new", "bool"),)),
                      ("live_leaders", _LIVE_LEADERS))


def _leader_and_isr_grouped(partition: tuple[Any, ...]) -> tuple[Any, ...]:
    """LeaderAndIsr v2-v4: the broker epoch, partitions grouped by topic (no topic id)."""
    return _CONTROLLER_HEADER + (
        ("topic_states", (("topic_name", "string"), ("partition_states", partition))),
        ("live_leaders", _LIVE_LEADERS))


_LEADER_AND_ISR_V2 = _leader_and_isr_grouped(_PARTITION_STATE + (("is_new", "bool"),))
_LEADER_AND_ISR_V3 = _leader_and_isr_grouped(LEADER_AND_ISR_PARTITION)    # adding and removing replicas

_STOP_REPLICA_V0 = (("controller_id", "int32"), ("controller_epoch", "int32"), ("delete_partitions", "bool"),
                    ("ungrouped_partitions", (("topic_name", "string"), ("partition_index", "int32"))))
_STOP_REPLICA_V1 = _CONTROLLER_HEADER + (("delete_partitions", "bool"),
                                         ("topics", (("name", "string"), ("partition_indexes", "int32s"))))

_ENDPOINT_V1 = (("port", "int32"), ("host", "string"), ("security_protocol", "int16"))
_LIVE_BROKERS_V3 = UPDATE_METADATA_REQUEST[-1][1]


def _update_metadata_ungrouped(partition: tuple[Any, ...], live_brokers: tuple[Any, ...]) -> tuple[Any, ...]:
    """UpdateMetadata v0-v4: no broker epoch, every partition with its topic's name."""
    return (("controller_id", "int32"), ("controller_epoch", "int32"),
            ("ungrouped_partition_states", partition), ("live_brokers", live_brokers))


_UPDATE_METADATA_V0 = _update_metadata_ungrouped(
    _UNGROUPED_STATE, (("id", "int32"), ("v0_host", "string"), ("v0_port", "int32")))
_UPDATE_METADATA_V1 = _update_metadata_ungrouped(_UNGROUPED_STATE, (("id", "int32"), ("endpoints", _ENDPOINT_V1)))
_UPDATE_METADATA_V2 = _update_metadata_ungrouped(
    _UNGROUPED_STATE, (("id", "int32"), ("endpoints", _ENDPOINT_V1), ("rack", "nullable_string")))
_UPDATE_METADATA_V3 = _update_metadata_ungrouped(_UNGROUPED_STATE, _LIVE_BROKERS_V3)
_UPDATE_METADATA_V4 = _update_metadata_ungrouped(_UNGROUPED_STATE + (("offline_replicas", "int32s"),),
                                                 _LIVE_BROKERS_V3)
_UPDATE_METADATA_V5 = _CONTROLLER_HEADER + (
    ("topic_states", (("topic_name", "string"), ("partition_states", UPDATE_METADATA_PARTITION))),
    ("live_brokers", _LIVE_BROKERS_V3))

#: older versions read too: (api key, version) -> (request schema, response schema, flexible)
OLDER: dict[tuple[int, int], tuple[tuple[Any, ...], tuple[Any, ...], bool]] = {
    (LEADER_AND_ISR, 0): (_LEADER_AND_ISR_V0, PARTITION_ERRORS_RESPONSE, False),
    (LEADER_AND_ISR, 1): (_LEADER_AND_ISR_V1, PARTITION_ERRORS_RESPONSE, False),
    (LEADER_AND_ISR, 2): (_LEADER_AND_ISR_V2, PARTITION_ERRORS_RESPONSE, False),
    (LEADER_AND_ISR, 3): (_LEADER_AND_ISR_V3, PARTITION_ERRORS_RESPONSE, False),
    (LEADER_AND_ISR, 4): (_LEADER_AND_ISR_V3, PARTITION_ERRORS_RESPONSE, True),
    (STOP_REPLICA, 0): (_STOP_REPLICA_V0, PARTITION_ERRORS_RESPONSE, False),
    (STOP_REPLICA, 1): (_STOP_REPLICA_V1, PARTITION_ERRORS_RESPONSE, False),
    (STOP_REPLICA, 2): (_STOP_REPLICA_V1, PARTITION_ERRORS_RESPONSE, True),
    (UPDATE_METADATA, 0): (_UPDATE_METADATA_V0, UPDATE_METADATA_RESPONSE, False),
    (UPDATE_METADATA, 1): (_UPDATE_METADATA_V1, UPDATE_METADATA_RESPONSE, False),
    (UPDATE_METADATA, 2): (_UPDATE_METADATA_V2, UPDATE_METADATA_RESPONSE, False),
    (UPDATE_METADATA, 3): (_UPDATE_METADATA_V3, UPDATE_METADATA_RESPONSE, False),
    (UPDATE_METADATA, 4): (_UPDATE_METADATA_V4, UPDATE_METADATA_RESPONSE, False),
    (UPDATE_METADATA, 5): (_UPDATE_METADATA_V5, UPDATE_METADATA_RESPONSE, False),
    (UPDATE_METADATA, 6): (_UPDATE_METADATA_V5, UPDATE_METADATA_RESPONSE, True),
    (CONTROLLED_SHUTDOWN, 0): (CONTROLLED_SHUTDOWN_REQUEST_V0, CONTROLLED_SHUTDOWN_RESPONSE, False),
    (CONTROLLED_SHUTDOWN, 1): (CONTROLLED_SHUTDOWN_REQUEST_V0, CONTROLLED_SHUTDOWN_RESPONSE, False),
    (CONTROLLED_SHUTDOWN, 2): (CONTROLLED_SHUTDOWN_REQUEST, CONTROLLED_SHUTDOWN_RESPONSE, False),
}
NAMES = {LEADER_AND_ISR: "LeaderAndIsr", STOP_REPLICA: "StopReplica", UPDATE_METADATA: "UpdateMetadata",
         CONTROLLED_SHUTDOWN: "ControlledShutdown", GET_REPLICA_LOG_INFO: "GetReplicaLogInfo"}

_FIXED = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "int32": struct.Struct(">i"),
          "int64": struct.Struct(">q"), "bool": struct.Struct(">?")}
_I16 = _FIXED["int16"]
_I32 = _FIXED["int32"]


def _length(n: int, out: bytearray, flexible: bool, string: bool) -> None:
    """The length of a string or an array (-1: null)."""
    if flexible:
        _uvarint(n + 1, out)
    else:
        out.extend((_I16 if string else _I32).pack(n))


def _encode(schema: tuple[Any, ...], value: dict[str, Any], out: bytearray, flexible: bool = False) -> None:
    for name, kind in schema:
        v = value[name]
        fixed = _FIXED.get(kind) if isinstance(kind, str) else None
        if fixed is not None:
            out += fixed.pack(v)
        elif kind == "uuid":
            out += v.bytes
        elif kind == "string" or kind == "nullable_string":
            if v is None:
                if kind == "string":
                    raise ValueError(f"{name} must not be null")
                _length(-1, out, flexible, True)
            else:
                data = v.encode()
                _length(len(data), out, flexible, True)
                out += data
        elif kind == "int32s":
            _length(len(v), out, flexible, False)
            for x in v:
                out += _I32.pack(x)
        else:
            _length(len(v), out, flexible, False)
            for item in v:
                _encode(kind, item, out, flexible)
    if flexible:
        out.append(0)                   # no tagged fields


def _decode(schema: tuple[Any, ...], buf: bytes | bytearray | memoryview, pos: int, flexible: bool = False
            ) -> tuple[dict[str, Any], int]:
    value: dict[str, Any] = {}
    for name, kind in schema:
        fixed = _FIXED.get(kind) if isinstance(kind, str) else None
        if fixed is not None:
            value[name] = fixed.unpack_from(buf, pos)[0]
            pos += fixed.size
            continue
        if kind == "uuid":
            if pos + 16 > len(buf):
                raise ProtocolError(f"truncated {name}")
            value[name] = uuid.UUID(bytes=bytes(buf[pos:pos + 16]))
            pos += 16
            continue
        if flexible:
            n, pos = _read_uvarint(buf, pos)
            n -= 1
        elif kind == "string" or kind == "nullable_string":
            n = _I16.unpack_from(buf, pos)[0]
            pos += 2
        else:
            n = _I32.unpack_from(buf, pos)[0]
            pos += 4
        if kind == "string" or kind == "nullable_string":
            if n < 0:
                if kind == "string":
                    raise ProtocolError(f"null {name}")
                value[name] = None
            else:
                if pos + n > len(buf):
                    raise ProtocolError(f"truncated {name}")
                value[name] = bytes(buf[pos:pos + n]).decode()
                pos += n
            continue
        if n < 0 or n > len(buf) - pos:
            raise ProtocolError(f"bad length {n} of {name}")
        if kind == "int32s":
            value[name] = list(struct.unpack_from(f">{n}i", buf, pos))
            pos += 4 * n
        else:
            items = []
            for _ in range(n):
                item, pos = _decode(kind, buf, pos, flexible)
                items.append(item)
            value[name] = items
    if flexible:
        pos = _skip_tagged_fields(buf, pos)
    return value, pos


def error_answer(api_key: int, code: int, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """The answer to a request (``body``) refused as a whole with error ``code``."""
    if api_key == GET_REPLICA_LOG_INFO:         # no error of its own: each partition asked has it
        return {"throttle_time_ms": 0, "broker_epoch": -1, "truncated": False, "topic_partition_log_info_list": [
            {"topic_id": t["topic_id"], "partition_log_info": [
                {"partition": i, "last_written_leader_epoch": -1, "current_leader_epoch": -1, "log_end_offset": -1,
                 "error_code": code} for i in t["partitions"]]} for t in (body or {}).get("topic_partitions", ())]}
    if api_key == UPDATE_METADATA:
        return {"error_code": code}
    if api_key == LEADER_AND_ISR:
        return {"error_code": code, "topics": []}
    if api_key == CONTROLLED_SHUTDOWN:
        return {"error_code": code, "remaining_partitions": []}
    return {"error_code": code, "partition_errors": []}


def _version(api_key: int, version: int | None) -> tuple[int, tuple[Any, ...], tuple[Any, ...], bool]:
    """(version, request schema, response schema, flexible) of ``api_key`` in ``version`` (None:
    the newest)."""
    newest, schema, response = SCHEMAS[api_key]
    if version is None or version == newest:
        return newest, schema, response, api_key in FLEXIBLE
    older = OLDER.get((api_key, version))
    if older is None:
        raise ProtocolError(f"{NAMES.get(api_key, api_key)} version {version} is not supported")
    return (version,) + older


def has_broker_epoch(api_key: int, version: int) -> bool:
    """Whether ``api_key`` v``version`` carries the broker epoch (KIP-380: LeaderAndIsr v2+,
    StopReplica v1+, UpdateMetadata v5+, ControlledShutdown v2+)."""
    return any(name == "broker_epoch" for name, _ in _version(api_key, version)[1])


def upgrade(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """An older request that carries the broker epoch in the newest version's shape: no topic
    ids (the zero id: a topic is taken by its name, as Kafka's brokers take a request without
    one), no replicas being added or removed (LeaderAndIsr v2), StopReplica's delete flag in each
    partition with no leader epoch (-1: stop whatever the replica's epoch, as Kafka's
    ``ReplicaManager.stopReplicas``)."""
    newest = SCHEMAS[api_key][0]
    if version == newest or api_key == CONTROLLED_SHUTDOWN:
        return body
    if not has_broker_epoch(api_key, version):
        raise ValueError(f"{NAMES[api_key]} v{version} has no broker epoch: it is refused, not upgraded")
    zero = uuid.UUID(int=0)
    if api_key == STOP_REPLICA:
        return {"controller_id": body["controller_id"], "controller_epoch": body["controller_epoch"],
                "broker_epoch": body["broker_epoch"], "topic_states": [
                    {"topic_name": t["name"], "partition_states": [
                        {"partition_index": i, "leader_epoch": -1, "delete_partition": body["delete_partitions"]}
                        for i in t["partition_indexes"]]} for t in body["topics"]]}
    topics = [{"topic_name": t["topic_name"], "topic_id": zero, "partition_states": [
        {"adding_replicas": [], "removing_replicas": [], **p} if api_key == LEADER_AND_ISR else p
        for p in t["partition_states"]]} for t in body["topic_states"]]
    if api_key == LEADER_AND_ISR:
        return dict(body, type=0, topic_states=topics)
    return dict(body, topic_states=topics)


def downgrade_answer(api_key: int, version: int, answer: dict[str, Any]) -> dict[str, Any]:
    """The newest version's answer in ``version``'s shape: LeaderAndIsr v0-v4 list each partition
    with its topic's name, not grouped by topic id."""
    if api_key != LEADER_AND_ISR or version >= SCHEMAS[api_key][0]:
        return answer
    return {"error_code": answer["error_code"], "partition_errors": [
        {"topic_name": t["topic_name"], "partition_index": p["partition_index"], "error_code": p["error_code"]}
        for t in answer["topics"] for p in t["partition_errors"]]}


def encode_request(api_key: int, correlation_id: int, client_id: str, body: dict[str, Any],
                   version: int | None = None) -> bytes:
    """A request frame (without the size prefix): the v1 header (v2 for a flexible version, v0 for
    ControlledShutdown v0), then the body; ``version`` None: the newest."""
    version, schema, _, flexible = _version(api_key, version)
    out = bytearray(struct.pack(">hhi", api_key, version, correlation_id))
    if not (api_key == CONTROLLED_SHUTDOWN and version == 0):
        cid = client_id.encode()
        out += _I16.pack(len(cid)) + cid
    if flexible:
        out.append(0)                   # the header's tagged fields
    _encode(schema, body, out, flexible)
    return bytes(out)


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[int, int, int, str | None, dict[str, Any]]:
    """(api_key, version, correlation_id, client_id, body) of a control request frame; bytes after
    the body are ignored, as for every API."""
    try:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        expected = SCHEMAS.get(api_key)
        if expected is None or expected[0] != version and (api_key, version) not in OLDER:
            raise ProtocolError(f"{NAMES.get(api_key, api_key)} version {version} is not supported "
                                f"(supported: {expected[0] if expected else 'none'})")
        _, schema, _, flexible = _version(api_key, version)
        if api_key == CONTROLLED_SHUTDOWN and version == 0:
            pos, client_id = 8, None    # the v0 request header: no client id
        else:
            n = _I16.unpack_from(frame, 8)[0]
            pos = 10 + max(n, 0)
            client_id = bytes(frame[10:pos]).decode() if n >= 0 else None
        if flexible:
            pos = _skip_tagged_fields(frame, pos)
        body, _ = _decode(schema, frame, pos, flexible)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed control request: {exc}") from None
    return api_key, version, correlation_id, client_id, body


def encode_response(api_key: int, correlation_id: int, body: dict[str, Any], version: int | None = None) -> bytes:
    """A response frame (without the size prefix) to a request of ``version`` (None: the newest)."""
    _, _, schema, flexible = _version(api_key, version)
    out = bytearray(_I32.pack(correlation_id))
    if flexible:
        out.append(0)                   # the v1 response header's tagged fields
    _encode(schema, body, out, flexible)
    return bytes(out)


def decode_response(api_key: int, frame: bytes | memoryview, version: int | None = None) -> dict[str, Any]:
    """The body of a control response frame (correlation id first) to a request of ``version``."""
    _, _, schema, flexible = _version(api_key, version)
    try:
        body, end = _decode(schema, frame, _skip_tagged_fields(frame, 4) if flexible else 4, flexible)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed {NAMES[api_key]} response: {exc}") from None
    if end != len(frame):
        raise ProtocolError(f"{len(frame) - end} unexpected bytes after a {NAMES[api_key]} response")
    return body
