"""Checking a request frame's shape before kio decodes it.

kio 0.6.5's native reader reserves memory for a whole array as soon as it reads the array's
length, before checking that the bytes are there; a hostile length would abort the process. So
every frame is first walked along its schema (:func:`shape_walker`).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping
from typing import Any, Callable

from kio.serial._introspect import (  # private kio API (see the note in build())
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)



# -- shape check before kio ---------------------------------------------------------------------
#
# kio 0.6.5's native reader reserves memory for a whole array as soon as it reads the array's
# length (Rust Vec::with_capacity), before checking that the bytes are there. A corrupt or hostile
# frame with a length such as 0x7fffffff makes it ask for hundreds of GB, and the Rust allocator
# then *aborts the process* (no Python exception). So every frame is first walked here, cheaply,
# along its schema: each array length must fit in the bytes that are left (at the minimum encoded
# size of one element), each string/bytes length and tagged field must lie inside the frame. Only
# then does kio decode it.

class Malformed(Exception):
    pass


_UNPACK_I8 = struct.Struct(">b").unpack_from
_UNPACK_I16 = struct.Struct(">h").unpack_from
_UNPACK_I32 = struct.Struct(">i").unpack_from
_Buffer = bytes | bytearray | memoryview

_FIXED_SIZES = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
    "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8,
    "datetime_i64": 8, "uuid": 16,
}


def _read_uvarint(buf: _Buffer, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise Malformed("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise Malformed("varint longer than 5 bytes")


# Elements of arrays of strings or bytes are never nullable in Kafka's schemas.

def _skip_legacy_string(buf: _Buffer, pos: int, end: int) -> int:
    n: int = _UNPACK_I16(buf, pos)[0]
    if n < 0:
        raise Malformed(f"negative string length {n}" if n < -1 else "null array element")
    return pos + 2 + n


def _skip_legacy_bytes(buf: _Buffer, pos: int, end: int) -> int:
    n: int = _UNPACK_I32(buf, pos)[0]
    if n < 0:
        raise Malformed(f"negative bytes length {n}" if n < -1 else "null array element")
    return pos + 4 + n


def _skip_compact(buf: _Buffer, pos: int, end: int) -> int:
    n, pos = _read_uvarint(buf, pos, end)
    if not n:
        raise Malformed("null array element")
    return pos + n - 1


def _walk_tags(buf: _Buffer, pos: int, end: int, tags: Mapping[int, Any]) -> int:
    count, pos = _read_uvarint(buf, pos, end)
    if count * 2 > end - pos:
        raise Malformed(f"{count} tagged fields cannot fit in the {max(end - pos, 0)} bytes left")
    for _ in range(count):
        tag, pos = _read_uvarint(buf, pos, end)
        size, pos = _read_uvarint(buf, pos, end)
        if size > end - pos:
            raise Malformed(f"tagged field of {size} bytes overruns the frame")
        inner = tags.get(tag)
        if inner is not None and inner(buf, pos, pos + size) != pos + size:
            raise Malformed(f"tagged field {tag} does not fill its {size} bytes")
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
            "_M": Malformed, "_tags": _walk_tags, "_skip_compact": _skip_compact,
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
        flexible = cls.__flexible__  # type: ignore[attr-defined]  # every kio entity class has it
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

    def _tag_walker(self, field: dataclasses.Field[Any], flexible: bool) -> Callable[..., int]:
        code, size, _ = self._field(field, flexible, False, True)
        if code is None:
            code = [f"pos += {size}"]
        name = f"G{len(self.ns)}"
        source = f"def {name}(buf, pos, end):\n" + "".join(f"    {line}\n" for line in code) + \
            "    return pos\n"
        exec(compile(source, f"<shape of tagged {field.name}>", "exec"), self.ns)
        walker: Callable[..., int] = self.ns[name]
        return walker

    def _field(self, field: dataclasses.Field[Any], flexible: bool, is_header: bool,
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
            # a null may come as a longer varint of 0 (80 00): kio and Kafka read it as null and
            # go on after it, so the walk must too (it went back one byte and checked other bytes)
            code = ["n = buf[pos]", "if n < 128:", "    pos += n or 1", "else:",
                    "    n, pos = _uv(buf, pos, end)", "    if n:", "        pos += n - 1"]
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
            assert element is not None                  # given whenever element_size is not
            code.append("    for _ in range(n):")
            code += [f"        {line}" for line in element]
        return code, 0, (1 if flexible else 4)


_SHAPES = _ShapeCompiler()


def shape_walker(cls: type) -> Callable[..., int]:
    walker: Callable[..., int] = _SHAPES.ns[_SHAPES.entity(cls)[0]]
    return walker
