"""Shared helpers for the protocol tests: sample kio entities, request frames, response reading.

``sample(cls)`` fills any kio dataclass (request, response, nested) with non-default values in
every field, tagged fields and nested arrays included, so round trips exercise every field of
every version. The few tests at the bottom check the helpers themselves.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import uuid
from datetime import timedelta

import pytest
from strandline.protocol.old_versions import request_schema as load_request_schema, response_schema as load_response_schema  # kio's, and the versions kio lacks
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field
from kio.serial.readers import tz_aware_from_i64

from strandline.protocol.api import SUPPORTED, build

SAMPLE_UUID = uuid.UUID("0123456789abcdef0123456789abcdef")
SAMPLE_RECORDS = bytes(range(256)) * 3

_PRIMITIVES = {
    "int8": lambda i: 1 + i,
    "int16": lambda i: 300 + i,
    "int32": lambda i: 70000 + i,
    "int64": lambda i: 5_000_000_000 + i,
    "uint8": lambda i: 200 + i,
    "uint16": lambda i: 60000 + i,
    "uint32": lambda i: 4_000_000_000 + i,
    "uint64": lambda i: 2**63 + i,
    "float64": lambda i: 1.5 + i,
    "bool": lambda i: True,
    "string": lambda i: f"tópic-é-{i}",
    "bytes": lambda i: bytes([1, 2, 3, i % 256]),
    "records": lambda i: SAMPLE_RECORDS,
    "uuid": lambda i: SAMPLE_UUID,
    "error_code": lambda i: ErrorCode.corrupt_message,
    "timedelta_i32": lambda i: timedelta(milliseconds=1500 + i),
    "timedelta_i64": lambda i: timedelta(milliseconds=86_400_123 + i),
    "datetime_i64": lambda i: tz_aware_from_i64(1_700_000_000_123 + i),
}


def sample(cls: type, i: int = 0, items: int = 2):
    """An instance of kio dataclass ``cls`` with a non-default value in every field."""
    kwargs = {}
    for n, field in enumerate(dataclasses.fields(cls)):
        kind = classify_field(field)
        j = i + n
        if isinstance(kind, EntityField):
            kwargs[field.name] = sample(kind.type_, j, items)
        elif isinstance(kind, EntityTupleField):
            kwargs[field.name] = tuple(sample(kind.type_, j + k, items) for k in range(items))
        elif isinstance(kind, PrimitiveTupleField):
            make = _PRIMITIVES[field.metadata["kafka_type"]]
            kwargs[field.name] = tuple(make(j + k) for k in range(items))
        else:
            value = _PRIMITIVES[field.metadata["kafka_type"]](j)
            if value == field.default and isinstance(value, bool):
                value = not value
            kwargs[field.name] = value
    return cls(**kwargs)


def to_dict(obj):
    """A kio dataclass as nested plain dicts/lists (ErrorCodes as ints, timedeltas as ms)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, ErrorCode):
        return int(obj)
    if isinstance(obj, timedelta):
        return round(obj.total_seconds() * 1000)
    return obj


def request_frame(api_key: int, version: int, correlation_id: int = 7, body=None,
                  client_id: str | None = "t") -> bytes:
    """A request frame (no size prefix) written by kio: header v1/v2 as the version needs."""
    req_cls = load_request_schema(api_key, version)
    header_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id=client_id))
    if body is None or isinstance(body, dict):
        body = build(req_cls, body or {})
    entity_writer(req_cls)(buf, body)
    return buf.getvalue()


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def plain_timestamps(cls: type) -> type:
    """``cls`` with its (non-nullable) timestamps read as int64: kio refuses a negative one, which
    Kafka answers where there is no token (-1, DelegationTokenManager.ErrorTimestamp)."""
    from strandline.protocol.old_versions import _Added, derive

    stamps = [f.name for f in dataclasses.fields(cls) if f.metadata.get("kafka_type") == "datetime_i64"]
    if not stamps:
        return cls
    added, anchor = [], None
    for f in dataclasses.fields(cls):
        if f.name in stamps:
            added.append(_Added(f.name, int, "int64", after=anchor))
        else:
            anchor = f.name
    plain = derive(cls, int(cls.__version__), drop=tuple(stamps), add=tuple(added))
    plain.__header_schema__ = cls.__header_schema__
    return plain


def read_response(out: bytes, api_key: int, version: int, plain: bool = False):
    """Decode a framed response with kio: (correlation_id, body). Asserts the size prefix.
    ``plain``: the delegation token APIs' timestamps read as int64 (a broker answers -1)."""
    (size,) = struct.unpack_from(">i", out, 0)
    assert size == len(out) - 4
    resp_cls = load_response_schema(api_key, version)
    if plain:
        resp_cls = plain_timestamps(resp_cls)
    header, hsize = entity_reader(resp_cls.__header_schema__)(out, 4)
    body, bsize = entity_reader(resp_cls)(out, 4 + hsize)
    assert 4 + hsize + bsize == len(out), "bytes left over after the response body"
    return header.correlation_id, body


def versions_with_schemas():
    """Every (api_key, version) in SUPPORTED that kio has request and response schemas for."""
    for key, (lo, hi) in sorted(SUPPORTED.items()):
        for version in range(lo, hi + 1):
            try:
                load_request_schema(key, version)
                load_response_schema(key, version)
            except Exception:
                continue
            yield key, version


# -- the helpers themselves -------------------------------------------------------------------

def test_every_advertised_version_has_schemas():
    """kio's, or derived for the versions kio lacks (strandline.protocol.old_versions); the
    controller's APIs in strandline.protocol.control."""
    from strandline.protocol import control
    hand_made = {(k, v) for k in control.SCHEMAS if k in SUPPORTED for v in range(SUPPORTED[k][1] + 1)
                 if v == control.SCHEMAS[k][0] or (k, v) in control.OLDER}
    missing = [(k, v) for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1)
               if (k, v) not in set(versions_with_schemas()) and (k, v) not in hand_made]
    assert missing == []


@pytest.mark.parametrize("api_key,version", [(0, 9), (1, 12), (3, 12), (18, 3)])
def test_sample_fills_every_field_with_a_non_default(api_key, version):
    cls = load_request_schema(api_key, version)
    obj = sample(cls)
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            assert getattr(obj, field.name) != field.default, field.name
