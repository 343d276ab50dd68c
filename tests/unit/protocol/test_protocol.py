"""Protocol: frames fed whole, byte by byte and split at random; every advertised API and version
round-trips through the decoder; the zero-copy Fetch encoder is byte-identical to kio."""

from __future__ import annotations

import io
import random
import struct

import pytest
from strandline.protocol.old_versions import request_schema as load_request_schema, response_schema as load_response_schema  # kio's, and the versions kio lacks
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from strandline.protocol import api
from strandline.protocol.api import SUPPORTED, ApiKey, RequestHeader, build
from strandline.protocol.frames import FrameDecoder, ProtocolError


def request_frame(api_key: int, version: int, correlation_id: int = 7, body: dict | None = None) -> bytes:
    req_cls = load_request_schema(api_key, version)
    header_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, build(header_cls, {"request_api_key": api_key, "request_api_version": version,
                                                      "correlation_id": correlation_id, "client_id": "t"}))
    entity_writer(req_cls)(buf, build(req_cls, body or {}))
    return buf.getvalue()


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def decodable_versions():
    for key, (lo, hi) in sorted(SUPPORTED.items()):
        for version in range(lo, hi + 1):
            try:
                load_request_schema(key, version)
            except Exception:
                continue
            yield key, version


@pytest.mark.parametrize("api_key,version", list(decodable_versions()))
def test_every_advertised_version_round_trips(api_key, version):
    frame = request_frame(api_key, version, correlation_id=1234)
    header, body = api.decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == \
        (api_key, version, 1234, "t")
    assert type(body).__name__.endswith("Request")
    assert api.decode_request(frame + b"\x00") == (header, body)
    with pytest.raises(ProtocolError):
        api.decode_request(frame[:-1] if len(frame) > 8 else frame[:7])


def test_produce_below_v3_is_advertised_and_decoded():
    """librdkafka 2.0 gates gzip/snappy on Produce v0 being listed; v0-2 requests (no
    transactional id) are served, as Kafka 2.8 serves them."""
    assert SUPPORTED[ApiKey.PRODUCE][0] == 0
    frame = struct.pack(">hhih", 0, 1, 9, 1) + b"x" + struct.pack(">hii", -1, 1500, 0)
    header, body = api.decode_request(frame)
    assert (header.api_version, header.correlation_id, header.client_id) == (1, 9, "x")
    assert (body.acks, body.timeout.total_seconds(), body.topic_data) == (-1, 1.5, ())
    assert not hasattr(body, "transactional_id")


def test_api_versions_above_our_max_get_the_kip_511_fallback():
    frame = struct.pack(">hhih", 18, 9, 77, -1)
    with pytest.raises(api.UnsupportedApiVersions) as info:
        api.decode_request(frame)
    out = api.api_versions_fallback(info.value.correlation_id)
    resp_cls = load_response_schema(18, 0)
    _, hsize = entity_reader(resp_cls.__header_schema__)(out, 4)
    body, _ = entity_reader(resp_cls)(out, 4 + hsize)
    assert body.error_code == ErrorCode.unsupported_version
    assert {k.api_key for k in body.api_keys} == set(SUPPORTED)


def test_unknown_api_and_unsupported_version_are_protocol_errors():
    with pytest.raises(ProtocolError, match="unknown"):
        api.decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(ProtocolError, match="not supported"):
        api.decode_request(struct.pack(">hhih", 1, 99, 1, -1))
    with pytest.raises(ProtocolError, match="shorter"):
        api.decode_request(b"\x00\x01")


def test_frames_whole_byte_by_byte_and_randomly_split():
    frames = [request_frame(3, 4, i) for i in range(5)] + [request_frame(18, 3, 99)]
    stream = b"".join(framed(f) for f in frames)
    assert FrameDecoder(1 << 20).feed(stream) == frames
    decoder = FrameDecoder(1 << 20)
    out = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i:i + 1])
    assert out == frames
    rng = random.Random(5)
    for _ in range(50):
        decoder = FrameDecoder(1 << 20)
        out = []
        pos = 0
        while pos < len(stream):
            step = rng.randrange(1, 40)
            out += decoder.feed(stream[pos:pos + step])
            pos += step
        assert out == frames


def test_large_frame_in_small_chunks_is_assembled_once():
    payload = bytes(range(256)) * 40000
    stream = framed(payload)
    decoder = FrameDecoder(1 << 24)
    out = []
    for pos in range(0, len(stream), 65536):
        out += decoder.feed(stream[pos:pos + 65536])
    assert out == [payload]


def test_oversized_and_negative_sizes_are_refused():
    with pytest.raises(ProtocolError, match="exceeds socket.request.max.bytes 100"):
        FrameDecoder(100).feed(struct.pack(">i", 101))
    with pytest.raises(ProtocolError, match="negative"):
        FrameDecoder(100).feed(struct.pack(">i", -1))


@pytest.mark.parametrize("version", range(4, 13))
def test_fast_fetch_encoder_is_byte_identical_to_kio(version):
    header = RequestHeader(ApiKey.FETCH, version, 42, None)
    body = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
             "records": b"abc" * 100},
            {"partition_index": 1, "error_code": ErrorCode.offset_out_of_range, "high_watermark": -1,
             "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
             "preferred_read_replica": -1, "records": b""}]},
        {"topic": "empty", "partitions": []}]}
    buffers = api.encode_fetch_response(header, body)
    assert b"".join(buffers) == api.encode_response(header, body)
    assert any(b is body["responses"][0]["partitions"][0]["records"] for b in buffers)  # not copied


def test_encode_response_builds_dicts_for_every_version():
    for version in range(0, 13):
        header = RequestHeader(ApiKey.METADATA, version, 5, None)
        out = api.encode_response(header, {"brokers": [{"node_id": 1, "host": "h", "port": 9}],
                                           "cluster_id": "c", "controller_id": 1, "topics": [
                                               {"error_code": 0, "name": "t", "partitions": [
                                                   {"error_code": 0, "partition_index": 0, "leader_id": 1,
                                                    "leader_epoch": 3, "replica_nodes": [1], "isr_nodes": [1]}]}]})
        resp_cls = load_response_schema(3, version)
        _, hsize = entity_reader(resp_cls.__header_schema__)(out, 4)
        body, size = entity_reader(resp_cls)(out, 4 + hsize)
        assert 4 + hsize + size == len(out)
        assert body.topics[0].partitions[0].leader_id == 1
