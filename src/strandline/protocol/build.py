"""Building kio dataclasses from dicts (:func:`build`): one dict per handler for every API version."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Callable, NamedTuple

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (  # private kio API (see the note in build())
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.serial.readers import tz_aware_from_i64
from kio.static.constants import uuid_zero



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


def _datetime_converter(nullable: bool) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, datetime):
            return value
        value = int(value)
        if value == -1 and nullable:
            return None  # Kafka's "no timestamp" (e.g. Produce log_append_time for CreateTime)
        return tz_aware_from_i64(value)
    return convert


def _primitive_converter(kafka_type: str, nullable: bool) -> Callable[[Any], Any] | None:
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
        return tz_aware_from_i64(-1)  # type: ignore[arg-type]  # kio's i64 is a marker subclass of int; it reads any int
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
    get: Callable[[str, Any], Any]
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
