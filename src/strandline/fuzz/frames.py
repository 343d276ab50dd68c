"""What the fuzzer sends: request frames that are valid (built from kio's schemas for every API
key and version a broker advertises), mutated (valid frames with bytes flipped, lengths changed,
fields set to boundary values, nulls and overlong varints) and random, and the byte stream of one
connection with its size prefixes (some of them wrong).

Everything is drawn from a :class:`random.Random` the caller seeds, so a seed and a connection's
number give the same bytes again.

The fuzzer looks for frames a broker mishandles, not for the damage well-formed requests may do
to a cluster: a frame that still decodes after mutation and would create or change something
(topics, groups, ACLs, configs, transactions) is sent only when every name in it is one of
:data:`NAMES`, so that a long run creates a bounded number of topics and groups; a well-formed
inter-broker request (LeaderAndIsr, UpdateMetadata, StopReplica, ControlledShutdown) is never
sent unless asked for (:attr:`FrameMaker.inter_broker`): its fencing is not this tool's concern.
"""

from __future__ import annotations

import dataclasses
import io
import random
import struct
import uuid
from datetime import timedelta
from functools import lru_cache
from typing import Any, Iterator, NamedTuple

from strandline.protocol.old_versions import request_schema as load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveTupleField, classify_field,
                                    is_optional)
from kio.serial.readers import tz_aware_from_i64
from kio.serial.writers import Writer
from kio.static.primitive import i64

from strandline.group.records import build_batch
from strandline.protocol import control
from strandline.protocol.api import UnsupportedApiVersions, decode_request
from strandline.protocol.frames import ProtocolError

#: The names (topics, groups, transactional ids, principals, config keys...) valid requests use:
#: a few valid topic names, and some a broker must refuse.
NAMES = ("fuzz-0", "fuzz-1", "fuzz-2", "fuzz-3", "", ".", "..", "fuzz bad name", "f" * 250,
         "fuzz-\u00fc\u00df", "User:fuzz-0", "fuzz-group")
_NAME_SET = frozenset(NAMES)

#: APIs whose well-formed request may create or change cluster state.
CHANGING_APIS = frozenset({0, 3, 8, 10, 11, 19, 20, 21, 22, 24, 25, 26, 28, 30, 31, 33, 34, 37, 42, 43, 44,
                           45, 47, 49})

_INT_RANGES = {"int8": 7, "int16": 15, "int32": 31, "int64": 63, "uint16": 16, "uint32": 32, "uint64": 64,
               "uint8": 8}
BOUNDARY_BYTES = [0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
_TIMEOUT_WORDS = ("timeout", "max_wait", "wait")


def _int(rng: random.Random, kafka_type: str, name: str) -> int:
    bits = _INT_RANGES[kafka_type]
    signed = not kafka_type.startswith("uint")
    hi = (1 << bits) - 1
    lo = -(1 << bits) if signed else 0
    if any(word in name for word in _TIMEOUT_WORDS):
        return rng.choice((0, 1, 10, 100, 500, -1))   # requests that may wait, wait little
    r = rng.random()
    if r < 0.5:
        return rng.choice((0, 1, 2, 3) if signed or True else (0, 1))
    if r < 0.7:
        return -1 if signed else 0
    if r < 0.9:
        return rng.choice((hi, lo, hi - 1, lo + 1))
    return rng.randint(lo, hi)


def _records(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.6:
        records = [(rng.choice((b"k", b"", b"key")), rng.choice((b"v", None, b"x" * rng.randrange(0, 200))))
                   for _ in range(rng.randrange(1, 4))]
        pid = rng.choice((-1, -1, 0, 1, 1 << 40))
        batch = build_batch(records, rng.choice((0, 1_700_000_000_000, -1)), producer_id=pid,
                            producer_epoch=rng.choice((-1, 0, 1)) if pid >= 0 else -1,
                            base_sequence=rng.choice((-1, 0, 5)) if pid >= 0 else -1,
                            transactional=rng.random() < 0.1)
        return bytes(batch)
    if r < 0.8:
        return b""
    return rng.randbytes(rng.randrange(1, 80))


_ENTITY_TUPLE, _ENTITY, _PRIMITIVE_TUPLE, _PRIMITIVE = range(4)


@lru_cache(maxsize=None)
def _plan(cls: type) -> tuple[tuple[str, int, Any, bool], ...]:
    """(name, shape, inner class or kafka type, nullable) of each untagged field of ``cls``."""
    plan: list[tuple[str, int, Any, bool]] = []
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            plan.append((field.name, _ENTITY_TUPLE, kind.type_, is_optional(field)))
        elif isinstance(kind, EntityField):
            plan.append((field.name, _ENTITY, kind.type_, is_optional(field)))
        elif isinstance(kind, PrimitiveTupleField):
            plan.append((field.name, _PRIMITIVE_TUPLE, field.metadata["kafka_type"], is_optional(field)))
        else:
            plan.append((field.name, _PRIMITIVE, field.metadata["kafka_type"], is_optional(field)))
    return tuple(plan)


def _value(rng: random.Random, name: str, shape: int, what: Any, nullable: bool, depth: int) -> Any:
    if nullable and rng.random() < 0.1:
        return None
    if shape == _ENTITY_TUPLE:
        return tuple(random_entity(rng, what, depth + 1) for _ in range(rng.choice((0, 1, 1, 2, 3))))
    if shape == _ENTITY:
        return random_entity(rng, what, depth + 1)
    if shape == _PRIMITIVE_TUPLE:
        return tuple(_primitive(rng, what, name) for _ in range(rng.choice((0, 1, 2))))
    return _primitive(rng, what, name)


def _primitive(rng: random.Random, kafka_type: str, name: str) -> Any:
    if kafka_type in _INT_RANGES:
        return _int(rng, kafka_type, name)
    if kafka_type == "string":
        return rng.choice(NAMES)
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "records":
        return _records(rng)
    if kafka_type == "bytes":
        return rng.choice((b"", b"\0", rng.randbytes(rng.randrange(1, 40))))
    if kafka_type == "float64":
        return rng.choice((0.0, 1.5, -1.0))
    if kafka_type == "uuid":
        return rng.choice((uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))))
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return timedelta(milliseconds=rng.choice((0, 1, 10, 100, 500, -1)))
    if kafka_type == "datetime_i64":
        return tz_aware_from_i64(i64(rng.choice((0, 1_700_000_000_000))))
    raise TypeError(f"no random value for kafka type {kafka_type!r}")


def random_entity(rng: random.Random, cls: type, depth: int = 0) -> Any:
    """A kio entity of ``cls`` with random untagged fields (tagged ones keep their defaults)."""
    return cls(**{name: _value(rng, name, shape, what, nullable, depth) for name, shape, what, nullable in _plan(cls)})


def request_frame(api_key: int, version: int, correlation_id: int, body: Any, client_id: str | None = "fuzz") -> bytes:
    """A request frame (without its size prefix): kio's header of the version, then ``body``."""
    req_cls, header_cls, write_header, write_body = _writers(api_key, version)
    buf = io.BytesIO()
    write_header(buf, header_cls(request_api_key=api_key, request_api_version=version,
                                 correlation_id=correlation_id, client_id=client_id))
    write_body(buf, body)
    return buf.getvalue()


@lru_cache(maxsize=None)
def _writers(api_key: int, version: int) -> tuple[type, type, Writer[Any], Writer[Any]]:
    req_cls: Any = load_request_schema(api_key, version)          # a kio request class: it names its header
    header_cls = req_cls.__header_schema__
    return req_cls, header_cls, entity_writer(header_cls), entity_writer(req_cls)


def valid_frame(rng: random.Random, api_key: int, version: int, correlation_id: int = 0) -> bytes:
    """A well-formed request of ``api_key`` v``version`` with random contents."""
    return request_frame(api_key, version, correlation_id, random_entity(rng, _writers(api_key, version)[0]))


def long_frame(rng: random.Random, api_key: int, version: int, correlation_id: int = 0) -> bytes:
    """A well-formed request whose first array of entities holds one element thousands of times:
    a handler whose work grows faster than its request shows it as a hang."""
    req_cls = _writers(api_key, version)[0]
    body = random_entity(rng, req_cls)
    arrays = [name for name, shape, _, _ in _plan(req_cls) if shape == _ENTITY_TUPLE]
    for name in arrays:
        items = getattr(body, name)
        if items:
            body = dataclasses.replace(body, **{name: items[:1] * rng.choice((1000, 1000, 5000, 20000))})
            break
    return request_frame(api_key, version, correlation_id, body)


# -- mutations --------------------------------------------------------------------------------

def _overlong_varint(rng: random.Random, data: bytearray) -> None:
    """A byte below 0x80 (a one-byte varint, such as a compact length) written as two bytes."""
    small = [i for i in range(8, len(data)) if data[i] < 0x80]
    if small:
        i = rng.choice(small)
        data[i:i + 1] = bytes((data[i] | 0x80, 0))


def mutate(rng: random.Random, frame: bytes, api_keys: list[int] | None = None) -> bytes:
    """``frame`` with one to three random changes."""
    data = bytearray(frame)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(12)
        if op == 0 and data:                        # flip a bit
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and data:                      # truncate
            del data[rng.randrange(len(data)):]
        elif op == 2:                               # insert random bytes
            i = rng.randrange(len(data) + 1)
            data[i:i] = rng.randbytes(rng.randrange(1, 9))
        elif op == 3 and len(data) > 8:             # a boundary value where a length may be
            i = rng.randrange(8, len(data))
            width = rng.choice((1, 2, 4))
            data[i:i + width] = (rng.choice(BOUNDARY_BYTES) & ((1 << (8 * width)) - 1)).to_bytes(width, "big")
        elif op == 4 and data:                      # delete a slice
            i = rng.randrange(len(data))
            del data[i:i + rng.randrange(1, 9)]
        elif op == 5 and len(data) >= 4:            # another API version
            struct.pack_into(">h", data, 2, rng.randrange(-2, 20))
        elif op == 6:                               # trailing garbage
            data += rng.randbytes(rng.randrange(1, 5))
        elif op == 7 and len(data) > 10:            # a null string (int16 -1) or null array (int32 -1)
            i = rng.randrange(8, len(data) - 1)
            width = rng.choice((2, 4))
            data[i:i + width] = b"\xff" * width
        elif op == 8 and len(data) > 8:             # a compact null (a varint of 0)
            data[rng.randrange(8, len(data))] = 0
        elif op == 9:
            _overlong_varint(rng, data)
        elif op == 10 and len(data) > 12:           # a huge count
            i = rng.randrange(8, len(data) - 3)
            data[i:i + 4] = rng.choice((b"\x7f\xff\xff\xff", b"\x00\x10\x00\x00", b"\xff\xff\xff\x0f"))
        elif op == 11 and len(data) >= 2 and api_keys:  # another API's key
            struct.pack_into(">h", data, 0, rng.choice(api_keys))
    return bytes(data)


def random_frame(rng: random.Random, versions: dict[int, tuple[int, int]]) -> bytes:
    """Random bytes behind a plausible header, or no header at all."""
    r = rng.random()
    if r < 0.7 and versions:
        key = rng.choice(list(versions))
        lo, hi = versions[key]
        head = struct.pack(">hhi", key, rng.randint(lo, hi), rng.getrandbits(31))
        return head + rng.randbytes(rng.randrange(0, 64))
    if r < 0.85:
        return struct.pack(">hhi", rng.randrange(-5, 80), rng.randrange(-2, 20), 0) + rng.randbytes(rng.randrange(0, 16))
    return rng.randbytes(rng.randrange(0, 24))


# -- what a broker sees -----------------------------------------------------------------------

def _strings(obj: Any) -> Iterator[str]:
    if dataclasses.is_dataclass(obj):
        for field in dataclasses.fields(obj):
            yield from _strings(getattr(obj, field.name))
    elif isinstance(obj, tuple):
        for item in obj:
            yield from _strings(item)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _strings(item)
    elif isinstance(obj, str):
        yield obj


def well_formed(frame: bytes) -> Any:
    """The decoded request if a broker would read ``frame`` as a well-formed request of an API it
    serves (its kio object; a dict for an inter-broker request), else None."""
    if len(frame) < 8:
        return None
    api_key = struct.unpack_from(">h", frame)[0]
    try:
        if api_key in control.SCHEMAS:
            return control.decode_request(frame)[4]
        return decode_request(frame)[1]
    except (ProtocolError, UnsupportedApiVersions):
        return None
    except Exception:
        return None


def harmless(frame: bytes, inter_broker: bool = False) -> bool:
    """Whether the fuzzer may send ``frame``: it is malformed, or it changes nothing but what
    :data:`NAMES` name (see the module's note)."""
    if len(frame) < 2:
        return True
    api_key = struct.unpack_from(">h", frame)[0]
    if api_key in control.SCHEMAS:
        return inter_broker or well_formed(frame) is None
    if api_key not in CHANGING_APIS:
        return True
    request = well_formed(frame)
    return request is None or all(s in _NAME_SET for s in _strings(request))


class Expected(NamedTuple):
    """A frame as the broker will read it off the connection."""

    correlation_id: int | None      # None: too short to have one
    frame: bytes


def frames_seen(stream: bytes, max_frame_bytes: int) -> tuple[list[Expected], str]:
    """The frames a broker reads from ``stream`` (size-prefixed), as its frame decoder splits them,
    and how the stream ends: ``"whole"`` (every byte is in a frame), ``"bad size"`` (a negative
    size, or one above ``max_frame_bytes``: the broker closes the connection) or ``"partial"``
    (the last frame is not all there: the broker waits for the rest)."""
    out: list[Expected] = []
    pos = 0
    while pos < len(stream):
        if len(stream) - pos < 4:
            return out, "partial"
        (size,) = struct.unpack_from(">i", stream, pos)
        if size < 0 or size > max_frame_bytes:
            return out, "bad size"
        if pos + 4 + size > len(stream):
            return out, "partial"
        frame = stream[pos + 4:pos + 4 + size]
        out.append(Expected(struct.unpack_from(">i", frame, 4)[0] if size >= 8 else None, frame))
        pos += 4 + size
    return out, "whole"


class FrameMaker:
    """Makes the byte streams of fuzzed connections for a broker that advertises ``versions``
    ({api_key: (min, max)}, as its ApiVersions answer says)."""

    def __init__(self, versions: dict[int, tuple[int, int]], seed: int, pool_per_version: int = 4,
                 inter_broker: bool = False) -> None:
        self.versions = {}
        for key, (lo, hi) in versions.items():
            usable = [v for v in range(lo, hi + 1) if _has_schema(key, v)]
            if usable:
                self.versions[key] = (usable[0], usable[-1])
        self.inter_broker = inter_broker
        self.api_keys = sorted(self.versions) + sorted(control.SCHEMAS)
        rng = random.Random(seed)
        self.pool: list[bytes] = []         # valid frames that mutations start from
        for key, (lo, hi) in sorted(self.versions.items()):
            for version in range(lo, hi + 1):
                for _ in range(pool_per_version):
                    self.pool.append(valid_frame(rng, key, version))

    def frame(self, rng: random.Random) -> tuple[str, bytes]:
        """(kind, frame): ``structured``, ``mutated`` or ``random``."""
        r = rng.random()
        if r < 0.3:
            key = rng.choice(list(self.versions))
            lo, hi = self.versions[key]
            if rng.random() < 0.0005:
                return "structured", long_frame(rng, key, rng.randint(lo, hi))
            return "structured", valid_frame(rng, key, rng.randint(lo, hi))
        if r < 0.85:
            base = rng.choice(self.pool)
            for _ in range(4):
                frame = mutate(rng, base, self.api_keys)
                if harmless(frame, self.inter_broker):
                    return "mutated", frame
            return "structured", base
        for _ in range(4):
            frame = random_frame(rng, self.versions)
            if harmless(frame, self.inter_broker):
                return "random", frame
        return "structured", rng.choice(self.pool)

    def connection(self, rng: random.Random, first_correlation: int = 1) -> tuple[bytes, dict[str, int]]:
        """The bytes one connection sends: 1 to 20 frames, each with its size prefix and a
        correlation id of its own (when it is long enough to have one); now and then a size
        prefix is wrong (short, long, negative, huge). Also how many frames of each kind."""
        counts = {"structured": 0, "mutated": 0, "random": 0}
        parts = []
        correlation = first_correlation
        for _ in range(rng.choice((1, 2, 5, 10, 10, 20))):
            kind, frame = self.frame(rng)
            counts[kind] += 1
            if len(frame) >= 8:
                frame = frame[:4] + struct.pack(">i", correlation) + frame[8:]
                correlation += 1
            size = len(frame)
            if rng.random() < 0.02:
                size = rng.choice((size - 1, size + 1, -1, 0, 0x7FFFFFFF, size + 1000))
            parts.append(struct.pack(">i", size) + frame)
        return b"".join(parts), counts


def _has_schema(api_key: int, version: int) -> bool:
    try:
        load_request_schema(api_key, version)
    except Exception:
        return False
    return True
