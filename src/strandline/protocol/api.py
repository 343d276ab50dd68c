"""The API table, request decoding and response encoding (kio schemas), sans-IO.

Requests are decoded with kio's native reader (:func:`decode_request`). Responses are plain dicts
(or kio dataclasses) built into the kio dataclasses of the request's version by :func:`build`
(keys a version lacks are ignored, missing fields get their defaults), so request handlers are
version-agnostic (:func:`encode_response`). The two hot responses have hand-written encoders,
byte-identical to kio: :func:`encode_fetch_response` returns a list of buffers so stored record
batches are never copied, and :func:`encode_produce_response` skips the dataclass round trip.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (  # private kio API (see the note in build())
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.serial.readers import tz_aware_from_i64
from kio.static.constants import uuid_zero

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
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61


# Advertised version ranges {api_key: (min, max)}; every range overlaps what kafka-python
# 3.0.12, confluent-kafka 2.16 (librdkafka 2.16), aiokafka 0.14 and kcat 1.7.1 (librdkafka 2.0.2)
# use, and kio 0.6.5 has request and response schemas for every version in it, except:
#  * Produce is advertised from v0 although kio (and we) only speak v3+: librdkafka <= 2.11.0
#    (kcat links 2.0.2) silently stops compressing with gzip, snappy and lz4 unless the broker's
#    Produce range reaches down to v0 (rd_kafka_msgset_writer_select_MsgVersion asks
#    ApiVersion_supported(Produce, 0, 0)). v0-v2 requests are refused like any unsupported
#    version; no client sends them to a broker that offers v3+.
#  * Fetch stops at 12 so no client addresses partitions by topic id (Fetch 13+).
# FindCoordinator is listed because librdkafka enables LZ4 only when it is advertised; until
# consumer groups exist it answers COORDINATOR_NOT_AVAILABLE. v4+ is the batched form.
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
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.JOIN_GROUP: (0, 7),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
}


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


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


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


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame."""
    if len(frame) < 8:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header (8)")
    return _PEEK.unpack_from(frame, 0)


@lru_cache(maxsize=None)
def _readers(api_key: int, api_version: int):
    req_cls = load_request_schema(api_key, api_version)
    header_cls = req_cls.__header_schema__
    return (_shape_walker(header_cls), _shape_walker(req_cls),
            entity_reader(header_cls), entity_reader(req_cls))


# -- shape check before kio ---------------------------------------------------------------------
#
# kio 0.6.5's native reader reserves memory for a whole array as soon as it reads the array's
# length (Rust Vec::with_capacity), before checking that the bytes are there. A corrupt or hostile
# frame with a length such as 0x7fffffff makes it ask for hundreds of GB, and the Rust allocator
# then *aborts the process* (no Python exception). So every frame is first walked here, cheaply,
# along its schema: each array length must fit in the bytes that are left (at the minimum encoded
# size of one element), each string/bytes length and tagged field must lie inside the frame. Only
# then does kio decode it.

class _Malformed(Exception):
    pass


_UNPACK_I8 = struct.Struct(">b").unpack_from
_UNPACK_I16 = struct.Struct(">h").unpack_from
_UNPACK_I32 = struct.Struct(">i").unpack_from

_FIXED_SIZES = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
    "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8,
    "datetime_i64": 8, "uuid": 16,
}


def _read_uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise _Malformed("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise _Malformed("varint longer than 5 bytes")


# Elements of arrays of strings or bytes are never nullable in Kafka's schemas.

def _skip_legacy_string(buf, pos: int, end: int) -> int:
    (n,) = _UNPACK_I16(buf, pos)
    if n < 0:
        raise _Malformed(f"negative string length {n}" if n < -1 else "null array element")
    return pos + 2 + n


def _skip_legacy_bytes(buf, pos: int, end: int) -> int:
    (n,) = _UNPACK_I32(buf, pos)
    if n < 0:
        raise _Malformed(f"negative bytes length {n}" if n < -1 else "null array element")
    return pos + 4 + n


def _skip_compact(buf, pos: int, end: int) -> int:
    n, pos = _read_uvarint(buf, pos, end)
    if not n:
        raise _Malformed("null array element")
    return pos + n - 1


def _walk_tags(buf, pos: int, end: int, tags: Mapping[int, Any]) -> int:
    count, pos = _read_uvarint(buf, pos, end)
    if count * 2 > end - pos:
        raise _Malformed(f"{count} tagged fields cannot fit in the {max(end - pos, 0)} bytes left")
    for _ in range(count):
        tag, pos = _read_uvarint(buf, pos, end)
        size, pos = _read_uvarint(buf, pos, end)
        if size > end - pos:
            raise _Malformed(f"tagged field of {size} bytes overruns the frame")
        inner = tags.get(tag)
        if inner is not None and inner(buf, pos, pos + size) != pos + size:
            raise _Malformed(f"tagged field {tag} does not fill its {size} bytes")
        pos += size
    return pos


class _ShapeCompiler:
    """Generates one straight-line Python function per kio entity class that walks its encoding.

    Generated code (rather than a loop over field descriptors) keeps the walk of a typical
    Produce or Fetch request around a microsecond.
    """

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "_uv": _read_uvarint, "_I8": _UNPACK_I8, "_I16": _UNPACK_I16, "_I32": _UNPACK_I32,
            "_M": _Malformed, "_tags": _walk_tags, "_skip_compact": _skip_compact,
            "_skip_legacy_string": _skip_legacy_string, "_skip_legacy_bytes": _skip_legacy_bytes,
        }
        self.entities: dict[type, tuple[str, int]] = {}

    def _name(self, obj: Any, prefix: str) -> str:
        name = f"{prefix}{len(self.ns)}"
        self.ns[name] = obj
        return name

    def entity(self, cls: type) -> tuple[str, int]:
        """(name of the generated walker in self.ns, minimum encoded size) of ``cls``."""
        done = self.entities.get(cls)
        if done is not None:
            return done
        flexible = cls.__flexible__
        is_header = cls.__name__ == "RequestHeader"
        body: list[str] = []
        tags: dict[int, Any] = {}
        min_size = 1 if flexible else 0
        fixed = 0
        for field in dataclasses.fields(cls):
            tag = field.metadata.get("tag")
            if tag is not None:
                tags[tag] = self._tag_walker(field, flexible)
                continue
            code, size, field_min = self._field(field, flexible, is_header, False)
            min_size += field_min
            if code is None:
                fixed += size
                continue
            if fixed:
                body.append(f"pos += {fixed}")
                fixed = 0
            body += code
        if fixed:
            body.append(f"pos += {fixed}")
        if flexible:
            tags_name = self._name(tags, "T")
            body += ["if buf[pos] == 0:", "    pos += 1", "else:",
                     f"    pos = _tags(buf, pos, end, {tags_name})"]
        name = f"W{len(self.ns)}_{cls.__name__}"
        source = f"def {name}(buf, pos, end):\n" + "".join(f"    {line}\n" for line in body) + \
            "    return pos\n"
        self.ns[name] = None  # reserve the name; recursive types are not in Kafka's schemas
        exec(compile(source, f"<shape of {cls.__module__}.{cls.__qualname__}>", "exec"), self.ns)
        self.entities[cls] = (name, min_size)
        return name, min_size

    def _tag_walker(self, field: dataclasses.Field, flexible: bool):
        code, size, _ = self._field(field, flexible, False, True)
        if code is None:
            code = [f"pos += {size}"]
        name = f"G{len(self.ns)}"
        source = f"def {name}(buf, pos, end):\n" + "".join(f"    {line}\n" for line in code) + \
            "    return pos\n"
        exec(compile(source, f"<shape of tagged {field.name}>", "exec"), self.ns)
        return self.ns[name]

    def _field(self, field: dataclasses.Field, flexible: bool, is_header: bool,
               is_tag: bool) -> tuple[list[str] | None, int, int]:
        """(lines | None if fixed-size, fixed size, minimum size) of one field, as kio lays it out."""
        kind = classify_field(field)
        # Kafka refuses a null where the schema allows none ("non-nullable field X was serialized
        # as null"); kio would hand the handlers a None instead.
        refuse_null = "" if is_optional(field) else \
            f"    raise _M('non-nullable field {field.name} was serialized as null')"
        if isinstance(kind, EntityTupleField):
            inner, inner_min = self.entity(kind.type_)
            return self._array(flexible, inner_min, [f"pos = {inner}(buf, pos, end)"], None, refuse_null)
        if isinstance(kind, EntityField):
            inner, inner_min = self.entity(kind.type_)
            if not is_tag and is_optional(field):  # KIP-893 nullable struct: int8 marker, -1 = null
                return ["if _I8(buf, pos)[0] < 0:", "    pos += 1", "else:",
                        f"    pos = {inner}(buf, pos + 1, end)"], 0, 1
            return [f"pos = {inner}(buf, pos, end)"], 0, inner_min
        kafka_type = field.metadata["kafka_type"]
        size = _FIXED_SIZES.get(kafka_type)
        if isinstance(kind, PrimitiveTupleField):
            if size is not None:
                return self._array(flexible, size, None, size, refuse_null)
            skip = self._skipper(kafka_type, flexible)
            return self._array(flexible, 1 if flexible else 2, [f"pos = {skip}(buf, pos, end)"], None,
                               refuse_null)
        if size is not None:
            return None, size, size
        if is_header and field.name == "client_id":
            flexible = False  # always a legacy nullable string (KIP-482), kio special-cases it
        if kafka_type not in ("string", "bytes", "records"):
            raise TypeError(f"no shape walker for kafka type {kafka_type!r}")
        if flexible:
            code = ["n = buf[pos]", "if n < 128:", "    pos += n or 1", "else:",
                    "    n, pos = _uv(buf, pos, end)", "    pos += n - 1"]
            return code + (["if n == 0:", refuse_null] if refuse_null else []), 0, 1
        if kafka_type == "string":
            code = ["n = _I16(buf, pos)[0]", "if n > 0:", "    pos += 2 + n", "elif n < -1:",
                    "    raise _M(f'negative string length {n}')", "else:", "    pos += 2"]
        else:
            code = ["n = _I32(buf, pos)[0]", "if n > 0:", "    pos += 4 + n", "elif n < -1:",
                    "    raise _M(f'negative bytes length {n}')", "else:", "    pos += 4"]
        return code + (["if n == -1:", refuse_null] if refuse_null else []), 0, 2 if kafka_type == "string" else 4

    def _skipper(self, kafka_type: str, flexible: bool) -> str:
        if flexible:
            return "_skip_compact"
        return "_skip_legacy_string" if kafka_type == "string" else "_skip_legacy_bytes"

    @staticmethod
    def _array(flexible: bool, element_min: int, element: list[str] | None,
               element_size: int | None, refuse_null: str) -> tuple[list[str], int, int]:
        if flexible:
            code = ["n = buf[pos]", "if n < 128:", "    pos += 1", "else:",
                    "    n, pos = _uv(buf, pos, end)", "n -= 1"]
        else:
            code = ["n = _I32(buf, pos)[0]", "pos += 4", "if n < -1:",
                    "    raise _M(f'negative array length {n}')"]
        if refuse_null:
            code += ["if n == -1:", refuse_null]
        code += ["if n > 0:",
                 f"    if n * {max(element_min, 1)} > end - pos:",
                 "        raise _M(f'array of {n} elements cannot fit in the {max(end - pos, 0)} bytes left')"]
        if element_size is not None:
            code.append(f"    pos += n * {element_size}")
        else:
            code.append("    for _ in range(n):")
            code += [f"        {line}" for line in element]
        return code, 0, (1 if flexible else 4)


_SHAPES = _ShapeCompiler()


def _shape_walker(cls: type):
    return _SHAPES.ns[_SHAPES.entity(cls)[0]]


def _client_id_or_none(frame: bytes) -> str | None:
    """Best-effort client_id (a legacy nullable string in every request header version)."""
    try:
        (length,) = struct.unpack_from(">h", frame, 8)
        if length < 0 or 10 + length > len(frame):
            return None
        return bytes(frame[10:10 + length]).decode("utf-8", "replace")
    except struct.error:
        return None


def decode_request(frame: bytes) -> tuple[RequestHeader, Any]:
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
            raise _Malformed("truncated request header")
        body_end = walk_body(frame, body_at, end)
    except (_Malformed, struct.error, IndexError) as exc:
        raise ProtocolError(f"malformed {api_name(api_key)} v{api_version} request: "
                            f"{exc or 'truncated'}") from None
    if body_end > end:
        raise ProtocolError(f"truncated {api_name(api_key)} v{api_version} request "
                            f"({end} bytes, {body_end - end} missing)")
    try:
        header, offset = header_reader(frame, 0)
        body, _ = body_reader(frame, offset)
    except Exception as exc:  # kio raises assorted errors on malformed input
        raise ProtocolError(f"malformed {api_name(api_key)} v{api_version} request: "
                            f"{type(exc).__name__}: {exc}") from None
    return RequestHeader(api_key, api_version, correlation_id, header.client_id), body


# -- building kio dataclasses from dicts ------------------------------------------------------
#
# kio entities are frozen keyword-only dataclasses, one set per API version, and field names
# and presence differ across versions. build() fills one from a dict (or any object with the
# right attributes), so a handler writes one dict for every version. Field introspection uses
# kio.serial._introspect (private in kio 0.6.5: pin the version, which pyproject does).

_MISSING = object()

_PRIMITIVE, _ENTITY, _ENTITY_TUPLE, _PRIMITIVE_TUPLE = range(4)


def _to_error_code(value: Any) -> ErrorCode:
    return value if type(value) is ErrorCode else ErrorCode(int(value))


def _to_timedelta(value: Any) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(milliseconds=int(value))


def _to_uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray)):
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(str(value))


def _datetime_converter(nullable: bool):
    def convert(value: Any) -> Any:
        if isinstance(value, datetime):
            return value
        value = int(value)
        if value == -1 and nullable:
            return None  # Kafka's "no timestamp" (e.g. Produce log_append_time for CreateTime)
        return tz_aware_from_i64(value)
    return convert


def _primitive_converter(kafka_type: str, nullable: bool):
    if kafka_type == "error_code":
        return _to_error_code
    if kafka_type.startswith("timedelta"):
        return _to_timedelta
    if kafka_type.startswith("datetime"):
        return _datetime_converter(nullable)
    if kafka_type == "uuid":
        return _to_uuid
    return None


def _primitive_zero(kafka_type: str, nullable: bool) -> Any:
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type.startswith("timedelta"):
        return timedelta(0)
    if nullable:
        return None
    if kafka_type.startswith("datetime"):
        return tz_aware_from_i64(-1)
    if kafka_type == "uuid":
        return uuid_zero
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "float64":
        return 0.0
    return 0


class _Spec(NamedTuple):
    name: str
    kind: int
    sub: Any            # nested entity class, or a converter for primitives (None: as is)
    nullable: bool
    has_default: bool
    zero: Any


@lru_cache(maxsize=None)
def _plan(cls: type) -> tuple[_Spec, ...]:
    specs = []
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        tagged = "tag" in field.metadata
        has_default = (field.default is not dataclasses.MISSING
                       or field.default_factory is not dataclasses.MISSING)
        nullable = is_optional(field)
        kafka_type = field.metadata.get("kafka_type", "")
        if isinstance(kind, EntityField):
            specs.append(_Spec(field.name, _ENTITY, kind.type_, nullable, has_default,
                               None if nullable else _MISSING))
        elif isinstance(kind, EntityTupleField):
            specs.append(_Spec(field.name, _ENTITY_TUPLE, kind.type_, nullable, has_default,
                               None if nullable else ()))
        elif isinstance(kind, PrimitiveTupleField):
            specs.append(_Spec(field.name, _PRIMITIVE_TUPLE, _primitive_converter(kafka_type, False),
                               nullable, has_default, None if nullable else ()))
        else:
            specs.append(_Spec(field.name, _PRIMITIVE, _primitive_converter(kafka_type, nullable),
                               nullable, has_default, _primitive_zero(kafka_type, nullable)))
        # Tagged fields always have defaults in kio; an absent or None one keeps its default,
        # which kio then leaves off the wire (passing None for a tagged entity crashes kio).
        assert has_default or not tagged, (cls, field.name)
    return tuple(specs)


def build(cls: type, data: Any) -> Any:
    """Build kio dataclass ``cls`` from a dict (or any object with matching attributes).

    * an instance of ``cls`` passes through unchanged;
    * keys ``cls`` lacks are ignored; nested dicts / lists of dicts are built recursively;
    * a missing field (or None for a non-nullable one) gets its schema default, else a zero:
      0, "", b"", None if nullable, () for arrays, ErrorCode.none, timedelta(0), UUID 0;
    * ints are accepted for ErrorCode fields, ms for timedelta fields, epoch ms for datetime
      fields (-1 means null where nullable), strings for UUIDs; lists for tuples.
    """
    if type(data) is cls:
        return data
    if isinstance(data, Mapping):
        get = data.get
    else:
        def get(name: str, default: Any, _obj: Any = data) -> Any:
            return getattr(_obj, name, default)
    kwargs = {}
    for spec in _plan(cls):
        value = get(spec.name, _MISSING)
        if value is _MISSING or (value is None and not spec.nullable):
            if spec.has_default:
                continue
            zero = spec.zero
            if zero is _MISSING:  # a required, non-nullable nested entity: build it empty
                zero = build(spec.sub, {})
            kwargs[spec.name] = zero
            continue
        kind = spec.kind
        if value is None:
            kwargs[spec.name] = None
        elif kind == _PRIMITIVE:
            kwargs[spec.name] = value if spec.sub is None else spec.sub(value)
        elif kind == _ENTITY_TUPLE:
            sub = spec.sub
            kwargs[spec.name] = tuple([build(sub, v) for v in value])
        elif kind == _ENTITY:
            kwargs[spec.name] = build(spec.sub, value)
        else:
            conv = spec.sub
            kwargs[spec.name] = tuple(value) if conv is None else tuple([conv(v) for v in value])
    return cls(**kwargs)


# -- generic response encoding ----------------------------------------------------------------

@lru_cache(maxsize=None)
def _writers(api_key: int, api_version: int):
    resp_cls = load_response_schema(api_key, api_version)
    header_cls = resp_cls.__header_schema__  # ApiVersions: always response header v0 (kio)
    return resp_cls, header_cls, entity_writer(header_cls), entity_writer(resp_cls)


def response_class(api_key: int, api_version: int) -> type:
    """kio's response dataclass for ``api_key`` v``api_version``."""
    return _writers(api_key, api_version)[0]


def encode_response(header: RequestHeader, body: Any) -> bytes:
    """A framed response (int32 size, response header, body) for ``header``'s API and version.

    ``body`` is a kio response dataclass of that version or a dict (see :func:`build`).
    """
    resp_cls, header_cls, write_header, write_body = _writers(header.api_key, header.api_version)
    obj = build(resp_cls, body)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, header_cls(correlation_id=header.correlation_id))
    write_body(buf, obj)
    with buf.getbuffer() as data:
        _I32.pack_into(data, 0, len(data) - 4)
    return buf.getvalue()


# -- requests this broker sends (forwarding, replica fetching) ----------------------------------

@lru_cache(maxsize=None)
def _request_codec(api_key: int, api_version: int):
    req_cls = load_request_schema(api_key, api_version)
    resp_cls = load_response_schema(api_key, api_version)
    header_cls = req_cls.__header_schema__
    return (req_cls, header_cls, entity_writer(header_cls), entity_writer(req_cls),
            entity_reader(resp_cls.__header_schema__), entity_reader(resp_cls))


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str, body: Any) -> bytes:
    """A request frame without its size prefix: kio header and body (``body`` as in :func:`build`)."""
    req_cls, header_cls, write_header, write_body, _, _ = _request_codec(api_key, api_version)
    header = build(header_cls, {"request_api_key": api_key, "request_api_version": api_version,
                                "correlation_id": correlation_id, "client_id": client_id})
    buf = io.BytesIO()
    write_header(buf, header)
    write_body(buf, build(req_cls, body))
    return buf.getvalue()


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview) -> Any:
    """The kio body of a response frame (without its size prefix)."""
    *_, read_header, read_body = _request_codec(api_key, api_version)
    if type(frame) is not bytes:
        frame = memoryview(frame).toreadonly()
    try:
        _, offset = read_header(frame, 0)
        body, _ = read_body(frame, offset)
    except Exception as exc:  # kio raises assorted errors on malformed input
        raise ProtocolError(f"malformed {api_name(api_key)} v{api_version} response: "
                            f"{type(exc).__name__}: {exc}") from None
    return body


def api_versions_body() -> dict:
    """An ApiVersions response body (any version) advertising :data:`SUPPORTED`."""
    return {"error_code": ErrorCode.none, "throttle_time": 0,
            "api_keys": [{"api_key": int(k), "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(SUPPORTED.items())]}


def api_versions_fallback(correlation_id: int) -> bytes:
    """KIP-511: ApiVersions v0 response, UNSUPPORTED_VERSION and the full API list (framed)."""
    body = api_versions_body()
    body["error_code"] = ErrorCode.unsupported_version
    return encode_response(RequestHeader(ApiKey.API_VERSIONS, 0, correlation_id, None), body)


# -- hand-written encoders for the hot responses ----------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I64_I64 = struct.Struct(">qq")
_NULL_ARRAY = _I32.pack(-1)
_NULL_STRING = _I16.pack(-1)


_SMALL_UVARINTS = [bytes((n,)) for n in range(128)]


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_UVARINTS[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n < 0x200000:
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else _NULL_STRING
    return _string(s, flexible)


def _array_len(n: int | None, flexible: bool) -> bytes:
    if n is None:
        return b"\x00" if flexible else _NULL_ARRAY
    return _uvarint(n + 1) if flexible else _I32.pack(n)


class PartitionData(NamedTuple):
    """One partition of a Fetch response, for :func:`encode_fetch_response`.

    ``records`` is a bytes-like object, a list/tuple of them (written back to back, e.g. the
    batches of several segments; never copied) or None (null). ``aborted_transactions`` is
    None (null, READ_UNCOMMITTED) or a list of (producer_id, first_offset). ``diverging_epoch``
    (epoch, end_offset) and ``current_leader`` (leader_id, leader_epoch) are tagged fields,
    written in v12 only and only when given and not (-1, -1), as kio does.
    """

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = b""
    preferred_read_replica: int = -1
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None


_PARTITION_FIELDS = PartitionData._fields


def _partition_from(p: Any) -> PartitionData:
    if isinstance(p, PartitionData):
        return p
    if isinstance(p, Mapping):
        return PartitionData(**{k: p[k] for k in _PARTITION_FIELDS if k in p})
    return PartitionData(*p)


@lru_cache(maxsize=None)
def _fetch_partition_structs(version: int) -> tuple[struct.Struct, struct.Struct]:
    """(general, common) layouts of a Fetch partition's fixed fields for ``version``.

    general: partition_index, error_code, high_watermark, last_stable_offset[, log_start v5+].
    common (aborted_transactions null, records present): the same, then the null array, the
    preferred read replica (v11+) and, non-flexible, the int32 records length, in one pack.
    """
    general = ">ihqqq" if version >= 5 else ">ihqq"
    if version >= 12:
        common = general + "bi"            # null compact array (0), replica; uvarint size follows
    elif version >= 11:
        common = general + "iii"           # null array (-1), replica, records size
    else:
        common = general + "ii"            # null array (-1), records size
    return struct.Struct(general), struct.Struct(common)


def _fetch_args_from_body(body: Mapping) -> tuple:
    topics = [(t["topic"], t["partitions"]) for t in body.get("responses", ())]
    return (body.get("throttle_time", 0), body.get("error_code", 0), body.get("session_id", 0),
            topics)


def encode_fetch_response(header: RequestHeader, throttle_ms: Any = 0, error_code: int = 0,
                          session_id: int = 0, topics: Sequence = ()) -> list:
    """A framed Fetch v4..v12 response as a list of buffers, for ``transport.writelines``.

    ``topics`` is a list of ``(topic_name, [PartitionData | dict | tuple, ...])``. The record
    buffers are placed in the list as they are (never copied); the concatenation of the list is
    byte-identical to kio's encoding of the same response. For compatibility the second
    argument may instead be a whole response body dict (``throttle_time``, ``error_code``,
    ``session_id``, ``responses``: [{"topic", "partitions": [dict, ...]}]).
    """
    if isinstance(throttle_ms, Mapping):
        throttle_ms, error_code, session_id, topics = _fetch_args_from_body(throttle_ms)
    if isinstance(throttle_ms, timedelta):
        throttle_ms = round(throttle_ms.total_seconds() * 1000)
    v = header.api_version
    if not 4 <= v <= 12:
        raise ValueError(f"encode_fetch_response handles Fetch v4-v12, not v{v}")
    flexible = v >= 12
    fixed, common = _fetch_partition_structs(v)
    parts: list = []
    head = bytearray(b"\0\0\0\0")  # size, filled in at the end
    head += _I32.pack(header.correlation_id)
    if flexible:
        head += b"\x00"  # response header v1: no tagged fields
    head += _I32.pack(throttle_ms)
    if v >= 7:
        head += _I16.pack(error_code)
        head += _I32.pack(session_id)
    head += _array_len(len(topics), flexible)
    total = 0
    null = b"\x00" if flexible else _NULL_ARRAY
    with_log_start = v >= 5
    with_replica = v >= 11
    for name, partitions in topics:
        head += _string(name, flexible)
        head += _array_len(len(partitions), flexible)
        for p in partitions:
            if p.__class__ is not PartitionData:
                p = _partition_from(p)
            (index, error, high_watermark, last_stable, log_start, records, replica, aborted,
             diverging, leader) = p
            if records is not None and aborted is None:
                if records.__class__ is list or records.__class__ is tuple:
                    size = sum(map(len, records))
                else:
                    size = len(records)
                if flexible:
                    head += common.pack(index, error, high_watermark, last_stable, log_start, 0, replica)
                    head += _uvarint(size + 1)
                elif with_replica:
                    head += common.pack(index, error, high_watermark, last_stable, log_start, -1, replica, size)
                elif with_log_start:
                    head += common.pack(index, error, high_watermark, last_stable, log_start, -1, size)
                else:
                    head += common.pack(index, error, high_watermark, last_stable, -1, size)
            else:
                size = 0
                if with_log_start:
                    head += fixed.pack(index, error, high_watermark, last_stable, log_start)
                else:
                    head += fixed.pack(index, error, high_watermark, last_stable)
                if aborted is None:
                    head += null
                else:
                    head += _array_len(len(aborted), flexible)
                    for producer_id, first_offset in aborted:
                        head += _I64_I64.pack(producer_id, first_offset)
                        if flexible:
                            head += b"\x00"
                if with_replica:
                    head += _I32.pack(replica)
                if records is None:
                    head += null
                else:
                    if records.__class__ is list or records.__class__ is tuple:
                        size = sum(map(len, records))
                    else:
                        size = len(records)
                    head += _uvarint(size + 1) if flexible else _I32.pack(size)
            if size:
                parts.append(head if not parts else bytes(head))
                total += len(head) + size
                if records.__class__ is list or records.__class__ is tuple:
                    parts += [b for b in records if len(b)]
                else:
                    parts.append(records)
                head = bytearray()
            if flexible:
                if diverging is None and leader is None:
                    head += b"\x00"
                else:
                    head += _fetch_partition_tags(diverging, leader)
        if flexible:
            head += b"\x00"  # topic tagged fields
    if flexible:
        head += b"\x00"  # response tagged fields
    parts.append(head if not parts else bytes(head))
    total += len(head)
    first = parts[0]  # always the first head segment, still a bytearray: fill in the size
    _I32.pack_into(first, 0, total - 4)
    parts[0] = bytes(first)
    return parts


def _fetch_partition_tags(diverging: Any, leader: Any) -> bytes:
    if diverging is not None and tuple(diverging) == (-1, -1):
        diverging = None
    if leader is not None and tuple(leader) == (-1, -1):
        leader = None
    if diverging is None and leader is None:
        return b"\x00"
    out = bytearray(_uvarint((diverging is not None) + (leader is not None)))
    if diverging is not None:  # tag 0: EpochEndOffset {epoch int32, end_offset int64, tags}
        out += b"\x00\x0d" + struct.pack(">iq", diverging[0], diverging[1]) + b"\x00"
    if leader is not None:  # tag 1: LeaderIdAndEpoch {leader_id int32, leader_epoch int32, tags}
        out += b"\x01\x09" + struct.pack(">ii", leader[0], leader[1]) + b"\x00"
    return bytes(out)


class PartitionProduceResult(NamedTuple):
    """One partition of a Produce response, for :func:`encode_produce_response`.

    A plain tuple of the first five fields works too. ``log_append_time`` is epoch ms, -1 for
    CreateTime topics. ``record_errors`` is a list of (batch_index, message | None) (v8+);
    ``current_leader`` (leader_id, leader_epoch) is the v10 tagged field (KIP-951).
    """

    index: int
    error_code: int
    base_offset: int
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: Sequence[tuple[int, str | None]] = ()
    current_leader: tuple[int, int] | None = None


def encode_produce_response(header: RequestHeader, topics: Sequence, throttle_ms: int = 0,
                            node_endpoints: Sequence = ()) -> bytes:
    """A framed Produce v3..v10 response, byte-identical to kio's encoding.

    ``topics`` is ``[(name, [(index, error_code, base_offset, log_append_time,
    log_start_offset[, error_message[, record_errors[, current_leader]]]), ...]), ...]``.
    ``node_endpoints`` (v10, tagged) is a list of (node_id, host, port, rack | None).
    """
    v = header.api_version
    if not 3 <= v <= 10:
        raise ValueError(f"encode_produce_response handles Produce v3-v10, not v{v}")
    flexible = v >= 9
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(header.correlation_id)
    if flexible:
        out += b"\x00"
    out += _array_len(len(topics), flexible)
    for name, partitions in topics:
        out += _string(name, flexible)
        out += _array_len(len(partitions), flexible)
        for p in partitions:
            n = len(p)
            out += struct.pack(">ihqq", p[0], p[1], p[2], p[3])
            if v >= 5:
                out += _I64.pack(p[4])
            if v >= 8:
                record_errors = p[6] if n > 6 else ()
                out += _array_len(len(record_errors), flexible)
                for batch_index, message in record_errors:
                    out += _I32.pack(batch_index)
                    out += _nullable_string(message, flexible)
                    if flexible:
                        out += b"\x00"
                out += _nullable_string(p[5] if n > 5 else None, flexible)
            if flexible:
                leader = p[7] if n > 7 and v >= 10 else None
                if leader is not None and tuple(leader) != (-1, -1):
                    out += b"\x01\x00\x09" + struct.pack(">ii", leader[0], leader[1]) + b"\x00"
                else:
                    out += b"\x00"
        if flexible:
            out += b"\x00"
    out += _I32.pack(throttle_ms)
    if flexible:
        if v >= 10 and node_endpoints:
            tag = bytearray(_array_len(len(node_endpoints), True))
            for node_id, host, port, rack in node_endpoints:
                tag += _I32.pack(node_id) + _string(host, True) + _I32.pack(port)
                tag += _nullable_string(rack, True) + b"\x00"
            out += b"\x01\x00" + _uvarint(len(tag)) + tag
        else:
            out += b"\x00"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
