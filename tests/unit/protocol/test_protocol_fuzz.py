"""Fuzzing: random bytes and mutated valid frames (bit flips, truncations, insertions, length
changes) through FrameDecoder + decode_request only ever raise ProtocolError or
UnsupportedApiVersions, and always finish quickly. Seeded, bounded in cases and time. Nulls are
refused where the schema allows none; the broker core answers every request of every version
with nulls, repeated arrays and integers at their extremes."""

from __future__ import annotations

import dataclasses
import random
import struct
import time
from datetime import timedelta

import pytest

from strandline.fuzz.frames import mutate
from strandline.protocol.old_versions import request_schema as load_request_schema  # kio's, and the versions kio lacks
from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional
from kio.serial.readers import tz_aware_from_i64
from kio.static.constants import uuid_zero

from strandline.core.effects import Close
from strandline.protocol.api import SUPPORTED, UnsupportedApiVersions, api_name, decode_request
from strandline.protocol.frames import FrameDecoder, ProtocolError

from tests.unit.batches import make_batch
from .test_protocol_samples import framed, read_response, request_frame, sample, versions_with_schemas

SEED = 20261122
CASES = 4000
TIME_BUDGET_S = 10.0

VALID = [request_frame(k, v, correlation_id=i, body=sample(load_request_schema(k, v), items=i % 3))
         for i, (k, v) in enumerate(versions_with_schemas())]

def check_decode(frame: bytes) -> None:
    try:
        decode_request(frame)
    except (ProtocolError, UnsupportedApiVersions):
        pass


def check_stream(rng: random.Random, stream: bytes, limit: int) -> None:
    decoder = FrameDecoder(limit)
    pos = 0
    try:
        while pos < len(stream):
            step = rng.choice((1, 3, 64, 4096, len(stream)))
            for frame in decoder.feed(stream[pos:pos + step]):
                check_decode(frame)
            pos += step
    except ProtocolError:
        pass


def test_fuzz_only_protocol_errors():
    rng = random.Random(SEED)
    started = time.perf_counter()
    api_keys = sorted(SUPPORTED)
    for case in range(CASES):
        kind = case % 4
        if kind == 0:    # a mutated valid request, decoded directly
            check_decode(mutate(rng, rng.choice(VALID)))
        elif kind == 1:  # random bytes behind a plausible header
            head = struct.pack(">hhi", rng.choice(api_keys), rng.randrange(0, 14), case)
            check_decode(head + rng.randbytes(rng.randrange(0, 64)))
        elif kind == 2:  # a stream of valid and mutated frames, with corrupted size prefixes
            frames = [rng.choice(VALID) if rng.random() < 0.5 else mutate(rng, rng.choice(VALID))
                      for _ in range(rng.randrange(1, 5))]
            stream = bytearray(b"".join(framed(f) for f in frames))
            if rng.random() < 0.5:
                stream = bytearray(mutate(rng, bytes(stream)))
            check_stream(rng, bytes(stream), rng.choice((64, 4096, 1 << 20)))
        else:            # pure noise into the frame decoder
            check_stream(rng, rng.randbytes(rng.randrange(0, 300)), rng.choice((16, 1 << 20)))
        assert time.perf_counter() - started < TIME_BUDGET_S, f"too slow at case {case}"


def test_valid_frames_still_decode():
    """The fuzz corpus itself is valid (so the mutations start from real requests)."""
    for frame in VALID:
        decode_request(frame)


# -- kio 0.6.5 aborts the whole process (Rust allocation failure, no exception) when it reads an
# -- array length far beyond the frame; decode_request must refuse such frames before kio sees them

CRASHED_KIO = [
    # ListOffsets v6 found by this fuzzer: kio asked for 257 GB and aborted the interpreter
    "0002000600000016000174000001116074f8f2f78078d77002020c7400007069632dc3a92d320200011173",
]
BOMBS = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xfe\x0f", b"\x00\x10\x00\x00"]


def test_frames_that_crashed_kio_are_protocol_errors():
    """Also with bytes after the body: they are ignored, but an array must still fit in the frame."""
    for hex_frame in CRASHED_KIO:
        for extra in (b"", b"\0\0\0"):
            with pytest.raises(ProtocolError, match="cannot fit"):
                decode_request(bytes.fromhex(hex_frame) + extra)


def test_huge_lengths_at_every_position_of_every_request():
    for frame in VALID:
        for pos in range(8, len(frame)):
            for bomb in BOMBS:
                check_decode(frame[:pos] + bomb + frame[pos + len(bomb):])
                check_decode(frame[:pos] + bomb + frame[pos:])


# -- nulls: Kafka's generated readers refuse a null where the schema allows none ("non-nullable
# -- field X was serialized as null", the connection is closed); kio would hand the handler a None

def _arrays_and_strings(obj, path: str = ""):
    """(path, field, kind) of every untagged array and string field of a kio entity, descending
    into nested entities and the first element of entity arrays."""
    for field in dataclasses.fields(obj):
        if "tag" in field.metadata:
            continue
        kind = classify_field(field)
        value = getattr(obj, field.name)
        here = f"{path}{field.name}"
        if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
            yield here, field, "array"
            if isinstance(kind, EntityTupleField) and value:
                yield from _arrays_and_strings(value[0], f"{here}[0].")
        elif isinstance(kind, EntityField) and value is not None:
            yield from _arrays_and_strings(value, f"{here}.")
        elif field.metadata.get("kafka_type") == "string":
            yield here, field, "string"


MARKER = "\u2603null-me\u2603"


def _replace(obj, path: str, value):
    """A copy of kio entity ``obj`` with the field at ``path`` (as _arrays_and_strings names it) set."""
    head, _, rest = path.partition(".")
    if not rest:
        return dataclasses.replace(obj, **{head: value})
    if head.endswith("[0]"):
        name = head[:-3]
        items = getattr(obj, name)
        return dataclasses.replace(obj, **{name: (_replace(items[0], rest, value), *items[1:])})
    return dataclasses.replace(obj, **{head: _replace(getattr(obj, head), rest, value)})


def with_null(api_key: int, version: int, body, path: str, kind: str) -> bytes:
    """A request frame whose field at ``path`` is null on the wire (kio writes null arrays itself;
    a string is written as a marker whose length prefix and bytes are then swapped for a null)."""
    if kind == "array":
        return request_frame(api_key, version, body=_replace(body, path, None))
    frame = request_frame(api_key, version, body=_replace(body, path, MARKER))
    marker = MARKER.encode()
    at = frame.index(marker)
    flexible = load_request_schema(api_key, version).__flexible__
    assert frame.count(marker) == 1
    if flexible:
        return frame[:at - 1] + b"\x00" + frame[at + len(marker):]
    return frame[:at - 2] + b"\xff\xff" + frame[at + len(marker):]


NULL_CASES = [(k, v, path, field, kind)
              for k, v in versions_with_schemas()
              for path, field, kind in _arrays_and_strings(sample(load_request_schema(k, v), items=1))]


@pytest.mark.parametrize("api_key,version,path,field,kind", NULL_CASES,
                         ids=[f"{k}-v{v}-{p}" for k, v, p, _, _ in NULL_CASES])
def test_a_null_is_refused_where_the_schema_allows_none_and_decoded_where_it_does(api_key, version, path,
                                                                                   field, kind):
    body = sample(load_request_schema(api_key, version), items=1)
    frame = with_null(api_key, version, body, path, kind)
    if is_optional(field):
        assert decode_request(frame)[1] == _replace(body, path, None)
    else:
        with pytest.raises(ProtocolError, match=f"non-nullable field {field.name} was serialized as null"):
            decode_request(frame)


# -- the broker core under requests with nulls and extreme values: every request of every
# -- advertised version, built to reach deep into its handler (existing topic "t", a group
# -- coordinator, stored records), then with each array null, each integer at its extremes and
# -- each array repeated many times. The core must never raise: a well-formed answer, or a
# -- closed connection when the frame is malformed (or an acks=0 produce failed, as in Kafka).

_PLAUSIBLE = {"string": "t", "bytes": b"", "bool": False, "float64": 0.0, "uuid": uuid_zero,
              "error_code": ErrorCode.none, "timedelta_i32": timedelta(0), "timedelta_i64": timedelta(0),
              "datetime_i64": tz_aware_from_i64(0)}
_EXTREMES = {"int8": (-(1 << 7), -1, (1 << 7) - 1), "int16": (-(1 << 15), -1, (1 << 15) - 1),
             "int32": (-(1 << 31), -1, (1 << 31) - 1), "int64": (-(1 << 63), -1, (1 << 63) - 1),
             "timedelta_i32": tuple(timedelta(milliseconds=ms) for ms in (-(1 << 31), -1, (1 << 31) - 1))}
REPEATS = 1000


def plausible(cls):
    """A kio entity naming topic "t", partition 0, group "t", one element per array, one record batch."""
    kwargs = {}
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue
        kind = classify_field(field)
        kafka_type = field.metadata.get("kafka_type")
        if isinstance(kind, EntityField):
            kwargs[field.name] = plausible(kind.type_)
        elif isinstance(kind, EntityTupleField):
            kwargs[field.name] = (plausible(kind.type_),)
        elif kafka_type == "records":
            kwargs[field.name] = bytes(make_batch([b"fuzz"]))
        else:
            value = _PLAUSIBLE.get(kafka_type, 0)
            kwargs[field.name] = (value,) if isinstance(kind, PrimitiveTupleField) else value
    return cls(**kwargs)


def _integers(obj, path: str = ""):
    """(path, extremes) of every untagged integer field, as _arrays_and_strings walks."""
    for field in dataclasses.fields(obj):
        if "tag" in field.metadata:
            continue
        kind = classify_field(field)
        value = getattr(obj, field.name)
        here = f"{path}{field.name}"
        if isinstance(kind, EntityTupleField) and value:
            yield from _integers(value[0], f"{here}[0].")
        elif isinstance(kind, EntityField) and value is not None:
            yield from _integers(value, f"{here}.")
        elif not isinstance(kind, PrimitiveTupleField) and field.metadata.get("kafka_type") in _EXTREMES:
            yield here, _EXTREMES[field.metadata["kafka_type"]]


def variants(body):
    """(description, request body) of the plausible body and its nulls, extremes and repeats."""
    yield "plausible", body
    for path, _, kind in _arrays_and_strings(body):
        if kind == "array":
            yield f"{path}=null", _replace(body, path, None)
            items = _get(body, path)
            if items:
                yield f"{path}*{REPEATS}", _replace(body, path, items * REPEATS)
    for path, extremes in _integers(body):
        for value in extremes:
            yield f"{path}={value}", _replace(body, path, value)


def _get(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part[:-3])[0] if part.endswith("[0]") else getattr(obj, part)
    return obj


DESCRIBE_TRANSACTIONS = 65

class Exchange:
    """The fuzzed broker and what it sent: every answer is decoded as the response to its request."""

    def __init__(self) -> None:
        from tests.unit.broker.test_broker_core import Harness

        self.h = Harness(**{"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1"})
        self.h.create("t", partitions=2)
        self.h.call(10, 3, {"key": "t", "key_type": 0})
        self.h.produce("t", make_batch([b"a", b"b"], timestamps=[5, 1_000]))
        self.h.response(0, 7)
        self.h.sent.clear()
        self.requests: dict[int, tuple[int, int, bytes, str]] = {}
        self.conn = 100

    def send(self, api_key: int, version: int, body, what: str) -> None:
        self.conn += 1
        frame = request_frame(api_key, version, correlation_id=self.conn, body=body)
        self.requests[self.conn] = (api_key, version, frame, what)
        self.h.run(self.h.broker.handle_request(self.conn, frame, self.h.now))
        for _ in range(3):          # parked requests (long polls, rebalances) are answered by time
            if self.conn in self.h.sent:
                break
            self.h.tick(1 << 31)
        assert self.conn in self.h.sent, f"no answer to {api_name(api_key)} v{version} {what}"
        failed = [log.message for log in self.h.logs if log.kind == "request failed"]
        assert not failed, f"{api_name(api_key)} v{version} {what}: {failed[0]}"   # answered, but by the router's net
        self.check()

    def check(self) -> None:
        for conn, effects in self.h.sent.items():
            api_key, version, frame, what = self.requests[conn]
            for effect in effects:
                acks_0 = api_key == 0 and decoded(frame) is not None and decoded(frame).acks == 0
                if isinstance(effect, Close):
                    assert decoded(frame) is None or acks_0, \
                        f"{api_name(api_key)} v{version} {what}: well-formed, but closed: {effect.reason}"
                elif not effect.buffers:
                    assert acks_0, f"{api_name(api_key)} v{version} {what}: an empty answer"
                elif api_key == DESCRIBE_TRANSACTIONS:
                    # kio cannot read its -1 "no transaction started" timestamps (Kafka writes them):
                    # read as the CLI reads it
                    from strandline.cli.transactions import _describe_response
                    frame_out = b"".join(bytes(b) for b in effect.buffers)[4:]
                    assert int.from_bytes(frame_out[:4], "big") == conn
                    assert _describe_response(frame_out) is not None
                else:
                    correlation, _ = read_response(b"".join(bytes(b) for b in effect.buffers), api_key, version,
                                                  plain=api_key in (38, 39, 40))
                    assert correlation == conn
        self.h.sent.clear()


def decoded(frame: bytes):
    try:
        return decode_request(frame)[1]
    except ProtocolError:
        return None


@pytest.mark.parametrize("api_key,version", list(versions_with_schemas()))
def test_the_broker_core_answers_every_request_with_nulls_and_extreme_values(api_key, version):
    exchange = Exchange()
    body = plausible(load_request_schema(api_key, version))
    for what, variant in variants(body):
        exchange.send(api_key, version, variant, what)
