"""The fuzzer's frame generators (strandline.fuzz.frames): valid frames of every API version,
mutations, random frames and connection streams, all reproducible from a seed; and the property
they found broken: what the shape check passes, kio reads without a null the schema forbids."""

from __future__ import annotations

import dataclasses
import random
import struct
import time

import pytest
from strandline.protocol.old_versions import request_schema as load_request_schema  # kio's, and the versions kio lacks
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from strandline.fuzz.frames import (NAMES, FrameMaker, frames_seen, harmless, mutate, random_frame, request_frame,
                                    valid_frame, well_formed)
from strandline.protocol import control
from strandline.protocol.api import SUPPORTED, UnsupportedApiVersions, decode_request
from strandline.protocol.frames import ProtocolError
from tests.unit.protocol.test_protocol_samples import versions_with_schemas

VERSIONS = {k: SUPPORTED[k] for k, _ in versions_with_schemas()}


@pytest.fixture(scope="module")
def maker() -> FrameMaker:
    return FrameMaker(dict(SUPPORTED), seed=11, pool_per_version=2)


@pytest.mark.parametrize("api_key,version", list(versions_with_schemas()))
def test_a_valid_frame_of_every_api_version_decodes(api_key, version):
    rng = random.Random(api_key * 100 + version)
    for _ in range(5):
        header, _ = decode_request(valid_frame(rng, api_key, version, correlation_id=9))
        assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 9)


def test_the_pool_holds_every_advertised_version_with_a_schema(maker):
    seen = {struct.unpack_from(">hh", f) for f in maker.pool}
    assert seen == {(k, v) for k, v in versions_with_schemas()}


def test_a_connection_is_the_same_bytes_for_the_same_seed(maker):
    other = FrameMaker(dict(SUPPORTED), seed=11, pool_per_version=2)
    for n in range(50):
        assert maker.connection(random.Random(n)) == other.connection(random.Random(n))
    assert maker.connection(random.Random(1)) != maker.connection(random.Random(2))


def test_connections_mix_structured_mutated_and_random_frames_with_their_own_correlation_ids(maker):
    rng = random.Random(5)
    totals = {"structured": 0, "mutated": 0, "random": 0}
    wrong_sizes = 0
    for _ in range(300):
        stream, kinds = maker.connection(rng, first_correlation=100)
        for kind, n in kinds.items():
            totals[kind] += n
        seen, ending = frames_seen(stream, 104857600)
        if ending != "whole":
            wrong_sizes += 1
            continue
        assert len(seen) == sum(kinds.values())
        ids = [e.correlation_id for e in seen if e.correlation_id is not None]
        assert ids == list(range(100, 100 + len(ids)))
    assert min(totals.values()) > 100, totals
    assert wrong_sizes > 0


def test_frames_seen_reads_the_stream_as_the_broker_does():
    frame = request_frame(18, 0, 42, load_request_schema(18, 0)())
    one = struct.pack(">i", len(frame)) + frame
    assert frames_seen(one + one, 1000) == ([(42, frame), (42, frame)], "whole")
    assert frames_seen(one + one[:-1], 1000) == ([(42, frame)], "partial")
    assert frames_seen(one + struct.pack(">i", -1) + frame, 1000)[1] == "bad size"
    assert frames_seen(one + struct.pack(">i", 2000) + frame, 1000)[1] == "bad size"
    assert frames_seen(struct.pack(">i", 3) + b"abc", 1000) == ([(None, b"abc")], "whole")


def test_mutations_change_frames_in_every_way():
    rng = random.Random(3)
    base = valid_frame(rng, 14, 5)
    mutated = {mutate(rng, base, [0, 3]) for _ in range(500)}
    assert len(mutated) > 400
    assert any(len(m) < len(base) for m in mutated) and any(len(m) > len(base) for m in mutated)
    assert any(m[:2] != base[:2] for m in mutated)                          # another API's key
    assert any(b"\x80\x00" in m and b"\x80\x00" not in base for m in mutated)   # overlong varints


def test_random_frames_have_plausible_headers_or_none():
    rng = random.Random(4)
    frames = [random_frame(rng, VERSIONS) for _ in range(500)]
    keys = {struct.unpack_from(">h", f)[0] for f in frames if len(f) >= 2}
    assert set(VERSIONS) & keys and keys - set(VERSIONS)
    assert any(len(f) < 8 for f in frames)


def test_a_frame_that_changes_the_cluster_is_sent_only_with_the_fuzzers_names():
    create = load_request_schema(19, 4)
    topic = dataclasses.fields(create)[0]

    def creating(name: str) -> bytes:
        body = create(topics=(classify_field(topic).type_(name=name, num_partitions=1, replication_factor=1,
                                                          assignments=(), configs=()),),
                      timeout=__import__("datetime").timedelta(seconds=1), validate_only=False)
        return request_frame(19, 4, 1, body)

    assert harmless(creating(NAMES[0]))
    assert not harmless(creating("somebody-elses-topic"))
    assert harmless(creating("somebody-elses-topic")[:-3])                # malformed: the broker refuses it
    ctl = control.encode_request(control.CONTROLLED_SHUTDOWN, 1, "fuzz", {"broker_id": 1, "broker_epoch": 5})
    assert well_formed(ctl) is not None
    assert not harmless(ctl) and harmless(ctl, inter_broker=True)
    assert harmless(ctl[:-2])


def test_the_maker_never_sends_a_well_formed_inter_broker_request(maker):
    rng = random.Random(8)
    for _ in range(3000):
        _, frame = maker.frame(rng)
        if len(frame) >= 2 and struct.unpack_from(">h", frame)[0] in control.SCHEMAS:
            assert well_formed(frame) is None


# -- what the shape check passes, kio reads as the schema says: no null where none is allowed (a
# -- null compact string written as a two-byte varint of 0 made them read different bytes, and
# -- SyncGroup's handler got a null array)

def _forbidden_null(obj, path: str = "") -> str | None:
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if value is None:
            if not is_optional(field):
                return path + field.name
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            for item in value:
                found = _forbidden_null(item, f"{path}{field.name}[].")
                if found:
                    return found
        elif isinstance(kind, EntityField):
            found = _forbidden_null(value, f"{path}{field.name}.")
            if found:
                return found
    return None


def test_no_mutated_frame_decodes_with_a_null_the_schema_forbids(maker):
    rng = random.Random(20261206)
    started = time.perf_counter()
    decoded = 0
    for case in range(30_000):
        frame = mutate(rng, maker.pool[case % len(maker.pool)], list(VERSIONS))
        try:
            _, body = decode_request(frame)
        except (ProtocolError, UnsupportedApiVersions):
            continue
        decoded += 1
        assert _forbidden_null(body) is None, f"{_forbidden_null(body)} is null in {frame.hex()}"
        assert time.perf_counter() - started < 60
    assert decoded > 1000



def test_the_shape_check_ends_where_kio_ends_when_a_one_byte_varint_is_written_long(maker):
    """Every byte of every pooled frame that could be a one-byte varint, written as two bytes
    (Kafka and kio read 80 00 as 0, 81 00 as 1, ...): where the shape check accepts the frame, it
    walked the very bytes kio reads (its end is kio's end), so no null it refuses reaches a handler."""
    from strandline.protocol.api import _readers

    compared = 0
    for frame in maker.pool:
        api_key, version = struct.unpack_from(">hh", frame)
        walk_header, walk_body, read_header, read_body = _readers(api_key, version)
        for i in range(8, len(frame)):
            if frame[i] >= 0x80:
                continue
            long = frame[:i] + bytes((frame[i] | 0x80, 0)) + frame[i + 1:]
            try:
                walked = walk_body(long, walk_header(long, 0, len(long)), len(long))
                _, at = read_header(long, 0)
                body, read = read_body(long, at)
            except Exception:
                continue
            if walked <= len(long):
                compared += 1
                assert walked == at + read, f"shape check ends at {walked}, kio at {at + read}: {long.hex()}"
                assert _forbidden_null(body) is None, f"{_forbidden_null(body)} is null in {long.hex()}"
    assert compared > 1000


# -- what the fuzzer calls a hang

def _exchange_with(server_behaviour, stream: bytes):
    import asyncio

    from strandline.fuzz.run import exchange

    async def main():
        async def handle(reader, writer):
            await server_behaviour(reader, writer)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await exchange("127.0.0.1", port, stream, 1 << 20, hang_timeout_s=0.5)
        finally:
            server.close()

    return asyncio.run(main())


def _api_versions(correlation_id: int) -> bytes:
    frame = request_frame(18, 0, correlation_id, load_request_schema(18, 0)())
    return struct.pack(">i", len(frame)) + frame


def test_a_request_with_no_answer_and_no_close_is_a_hang_and_an_answer_or_a_close_is_not():
    import asyncio

    async def silent(reader, writer):
        await reader.read(1 << 16)
        await asyncio.sleep(2)

    async def closes(reader, writer):
        await reader.read(1 << 16)
        writer.close()

    async def answers(reader, writer):
        data = b""
        while len(data) < 2 * len(_api_versions(1)):
            data += await reader.read(1 << 16)
        for correlation_id in (1, 2):
            writer.write(struct.pack(">ii", 4, correlation_id))
        await writer.drain()
        await asyncio.sleep(2)

    stream = _api_versions(1) + _api_versions(2)
    hung = _exchange_with(silent, stream)
    assert hung.hang and "no answer and no close" in hung.hang
    assert _exchange_with(closes, stream).hang is None
    assert _exchange_with(answers, stream).hang is None
    # a frame the broker still waits the rest of is no hang
    assert _exchange_with(silent, stream[:-3]).hang is not None      # the first one is whole: a hang
    assert _exchange_with(silent, _api_versions(1)[:-3]).hang is None


def test_a_frame_size_the_broker_must_refuse_without_a_close_is_a_hang():
    import asyncio

    async def silent(reader, writer):
        await reader.read(1 << 16)
        await asyncio.sleep(2)

    async def closes(reader, writer):
        await reader.read(1 << 16)
        writer.close()

    bad = struct.pack(">i", -1) + b"junk"
    assert "no close" in _exchange_with(silent, bad).hang
    assert _exchange_with(closes, bad).hang is None


def test_a_record_reads_back_every_connection_in_order_and_a_cut_one_what_it_holds(tmp_path):
    from strandline.fuzz.run import Recorder, read_record

    path = str(tmp_path / "run.rec.gz")
    recorder = Recorder(path, {"seed": 7})
    streams = [(n, n % 3, bytes([n]) * (n * 10)) for n in range(50)]
    for conn_no, broker, stream in streams:
        recorder.write(conn_no, broker, stream)
    recorder.close()
    meta, connections = read_record(path)
    assert meta == {"seed": 7} and list(connections) == streams
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) // 2])            # the fuzzer was killed while writing
    _, connections = read_record(path)
    held = list(connections)
    assert held == streams[:len(held)]
