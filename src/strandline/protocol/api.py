"""The API table, request decoding and response encoding (kio schemas), sans-IO.

Requests are decoded with kio's native reader. Responses are plain dicts built into the kio
dataclasses of the request's version by :func:`build` (keys a version lacks are ignored, missing
fields get their defaults), so handlers are version-agnostic. The Fetch response has a
hand-written encoder that returns a list of buffers, so stored record batches are never copied.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import struct
import types
import typing
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, PrimitiveTupleField, classify_field

from strandline.protocol.frames import ProtocolError


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
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    DELETE_GROUPS = 42


# Advertised version ranges. Each range overlaps what kafka-python 3.0.12, confluent-kafka 2.16
# (librdkafka 2.16), aiokafka 0.14 and kcat 1.7.1 (librdkafka 2.0.2) use; floors are kio's.
# Fetch stops at 12 so no client addresses partitions by topic id (Fetch 13+).
# Produce is advertised from v0 because librdkafka 2.0.x (kcat) enables gzip and snappy only when
# a broker lists Produce v0; requests below v3 (message formats v0/v1) are refused like any
# unsupported version, and no client sends them to a broker that offers v3+.
SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 10),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 8),
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    # Consumer groups arrive with their own coordinator; until then FindCoordinator answers
    # COORDINATOR_NOT_AVAILABLE. librdkafka only enables LZ4 when FindCoordinator is advertised.
    ApiKey.FIND_COORDINATOR: (0, 3),
}


def register(api_key: int, min_version: int, max_version: int) -> None:
    SUPPORTED[api_key] = (min_version, max_version)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class UnsupportedApiVersions(Exception):
    """An ApiVersions request newer than we know: answer with :func:`api_versions_fallback`."""

    def __init__(self, correlation_id: int) -> None:
        super().__init__(f"ApiVersions request version above {SUPPORTED[ApiKey.API_VERSIONS][1]}")
        self.correlation_id = correlation_id


_PEEK = struct.Struct(">hhi")


def peek_header(frame: bytes) -> tuple[int, int, int]:
    if len(frame) < 8:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header")
    return _PEEK.unpack_from(frame, 0)


@lru_cache(maxsize=None)
def _readers(api_key: int, api_version: int):
    req_cls = load_request_schema(api_key, api_version)
    return entity_reader(req_cls.__header_schema__), entity_reader(req_cls)


def decode_request(frame: bytes) -> tuple[RequestHeader, Any]:
    api_key, api_version, correlation_id = peek_header(frame)
    supported = SUPPORTED.get(api_key)
    if supported is None:
        raise ProtocolError(f"unknown or unsupported API key {api_key}")
    if api_key == ApiKey.API_VERSIONS and api_version > supported[1]:
        raise UnsupportedApiVersions(correlation_id)
    if not supported[0] <= api_version <= supported[1]:
        raise ProtocolError(f"{ApiKey(api_key).name} version {api_version} is not supported "
                            f"(supported: {supported[0]}-{supported[1]})")
    try:
        header_reader, body_reader = _readers(api_key, api_version)
    except Exception:
        raise ProtocolError(f"{ApiKey(api_key).name} version {api_version} is not supported") from None
    try:
        header, offset = header_reader(frame, 0)
        body, size = body_reader(frame, offset)
    except Exception as exc:  # kio raises assorted errors on malformed input
        raise ProtocolError(f"malformed {ApiKey(api_key).name} v{api_version} request: {exc!r}") from None
    if offset + size != len(frame):
        raise ProtocolError(f"{len(frame) - offset - size} unexpected bytes after a "
                            f"{ApiKey(api_key).name} v{api_version} request")
    return RequestHeader(api_key, api_version, correlation_id, header.client_id), body


# -- building kio dataclasses from dicts ------------------------------------------------------

def _zero(type_: Any, field: dataclasses.Field) -> Any:
    kafka_type = field.metadata.get("kafka_type", "")
    if type_ is ErrorCode:
        return ErrorCode.none
    if kafka_type.startswith("timedelta") or type_ is timedelta:
        return timedelta(0)
    if kafka_type.startswith("datetime"):
        return datetime.fromtimestamp(0, timezone.utc)
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type in ("string", "records", "bytes"):
        return None if _optional(field) else ("" if kafka_type == "string" else b"")
    if kafka_type == "bool":
        return False
    return 0


def _optional(field: dataclasses.Field) -> bool:
    t = field.type
    return typing.get_origin(t) in (typing.Union, types.UnionType) and type(None) in typing.get_args(t)


@lru_cache(maxsize=None)
def _plan(cls: type) -> tuple:
    plan = []
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        plan.append((field.name, kind, has_default, field))
    return tuple(plan)


def build(cls: type, data: Any) -> Any:
    """Build kio dataclass ``cls`` from a dict (or pass an instance through)."""
    if isinstance(data, cls):
        return data
    kwargs = {}
    for name, kind, has_default, field in _plan(cls):
        if name not in data or (data[name] is None and isinstance(kind, EntityField)):
            if has_default:
                continue
            if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
                kwargs[name] = None if _optional(field) else ()
            else:
                kwargs[name] = _zero(kind.type_, field)
            continue
        value = data[name]
        if isinstance(kind, EntityField):
            kwargs[name] = build(kind.type_, value)
        elif isinstance(kind, EntityTupleField):
            kwargs[name] = None if value is None else tuple(build(kind.type_, v) for v in value)
        elif isinstance(kind, PrimitiveTupleField):
            kwargs[name] = None if value is None else tuple(value)
        else:
            kwargs[name] = _convert(kind.type_, field, value)
    return cls(**kwargs)


def _convert(type_: Any, field: dataclasses.Field, value: Any) -> Any:
    if value is None:
        return None
    if type_ is ErrorCode and not isinstance(value, ErrorCode):
        return ErrorCode(int(value))
    kafka_type = field.metadata.get("kafka_type", "")
    if kafka_type.startswith("timedelta") and not isinstance(value, timedelta):
        return timedelta(milliseconds=int(value))
    if kafka_type.startswith("datetime") and isinstance(value, int):
        return None if value < 0 and _optional(field) else datetime.fromtimestamp(max(value, 0) / 1000, timezone.utc)
    return value


@lru_cache(maxsize=None)
def _writers(api_key: int, api_version: int):
    resp_cls = load_response_schema(api_key, api_version)
    header_cls = resp_cls.__header_schema__
    return resp_cls, header_cls, entity_writer(header_cls), entity_writer(resp_cls)


def encode_response(header: RequestHeader, body: Any) -> bytes:
    """A framed response (int32 size, response header, body) for ``header``'s API and version."""
    resp_cls, header_cls, write_header, write_body = _writers(header.api_key, header.api_version)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, header_cls(correlation_id=header.correlation_id))
    write_body(buf, build(resp_cls, body))
    data = buf.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    del data
    return buf.getvalue()


def api_versions_body() -> dict:
    return {"error_code": ErrorCode.none, "throttle_time": 0,
            "api_keys": [{"api_key": int(k), "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(SUPPORTED.items())]}


def api_versions_fallback(correlation_id: int) -> bytes:
    """KIP-511: an ApiVersions v0 answer with UNSUPPORTED_VERSION and the full API list."""
    body = api_versions_body()
    body["error_code"] = ErrorCode.unsupported_version
    return encode_response(RequestHeader(ApiKey.API_VERSIONS, 0, correlation_id, None), body)


# -- the Fetch response, written by hand so record bytes are never copied ---------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _array_len(n: int | None, flexible: bool) -> bytes:
    if n is None:
        return _uvarint(0) if flexible else _I32.pack(-1)
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def encode_fetch_response(header: RequestHeader, body: dict) -> list:
    """Fetch v4..v12 as a list of buffers; byte-identical to kio's encoding of the same body."""
    v = header.api_version
    flexible = v >= 12
    parts: list = []
    head = bytearray()
    head += _I32.pack(header.correlation_id)
    if flexible:
        head += b"\x00"  # response header v1: no tagged fields
    head += _I32.pack(body.get("throttle_time", 0))
    if v >= 7:
        head += _I16.pack(int(body.get("error_code", 0)))
        head += _I32.pack(body.get("session_id", 0))
    topics = body["responses"]
    head += _array_len(len(topics), flexible)
    for topic in topics:
        head += _string(topic["topic"], flexible)
        partitions = topic["partitions"]
        head += _array_len(len(partitions), flexible)
        for p in partitions:
            head += _I32.pack(p["partition_index"])
            head += _I16.pack(int(p["error_code"]))
            head += _I64.pack(p["high_watermark"])
            head += _I64.pack(p.get("last_stable_offset", -1))
            if v >= 5:
                head += _I64.pack(p.get("log_start_offset", -1))
            aborted = p.get("aborted_transactions")
            head += _array_len(None if aborted is None else 0, flexible)
            if v >= 11:
                head += _I32.pack(p.get("preferred_read_replica", -1))
            records = p.get("records") or b""
            if flexible:
                head += _uvarint(len(records) + 1)
            else:
                head += _I32.pack(len(records))
            if records:
                parts.append(bytes(head))
                parts.append(records)
                head = bytearray()
            if flexible:
                head += b"\x00"  # partition tagged fields
        if flexible:
            head += b"\x00"  # topic tagged fields
    if flexible:
        head += b"\x00"  # response tagged fields
    parts.append(bytes(head))
    size = sum(len(b) for b in parts)
    return [_I32.pack(size)] + parts
