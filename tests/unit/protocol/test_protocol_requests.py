"""decode_request: every advertised API and version round-trips; malformed frames are
ProtocolErrors; ApiVersions above our maximum gets the KIP-511 fallback."""

from __future__ import annotations

import struct

import pytest
from strandline.protocol.old_versions import request_schema as load_request_schema, response_schema as load_response_schema  # kio's, and the versions kio lacks
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from strandline.protocol import api
from strandline.protocol.api import SUPPORTED, ApiKey, RequestHeader, UnsupportedApiVersions, decode_request
from strandline.protocol.frames import FrameDecoder, ProtocolError

from .test_protocol_samples import framed, request_frame, sample, versions_with_schemas

VERSIONS = list(versions_with_schemas())


def test_the_advertised_table():
    assert SUPPORTED == {
        ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 13), ApiKey.DESCRIBE_CLUSTER: (0, 0), ApiKey.PRODUCE: (0, 13),
        ApiKey.FETCH: (0, 16), ApiKey.LIST_OFFSETS: (0, 11), ApiKey.LEADER_AND_ISR: (0, 5),
        ApiKey.STOP_REPLICA: (0, 3), ApiKey.UPDATE_METADATA: (0, 7), ApiKey.CONTROLLED_SHUTDOWN: (0, 3), ApiKey.CREATE_TOPICS: (0, 7),
        ApiKey.DELETE_TOPICS: (0, 6), ApiKey.INIT_PRODUCER_ID: (0, 5),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4), ApiKey.FIND_COORDINATOR: (0, 6), ApiKey.ELECT_LEADERS: (0, 2),
        ApiKey.JOIN_GROUP: (0, 9), ApiKey.SYNC_GROUP: (0, 5), ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 5),
        ApiKey.OFFSET_COMMIT: (0, 9), ApiKey.OFFSET_FETCH: (0, 9), ApiKey.LIST_GROUPS: (0, 5),
        ApiKey.DESCRIBE_GROUPS: (0, 6), ApiKey.DELETE_GROUPS: (0, 2),
        ApiKey.DESCRIBE_CONFIGS: (0, 4), ApiKey.ALTER_CONFIGS: (0, 2), ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        ApiKey.CREATE_PARTITIONS: (0, 3), ApiKey.DELETE_RECORDS: (0, 2), ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
        ApiKey.DESCRIBE_PRODUCERS: (0, 0), ApiKey.OFFSET_DELETE: (0, 0),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0), ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.ALTER_REPLICA_LOG_DIRS: (0, 2), ApiKey.DESCRIBE_ACLS: (0, 3), ApiKey.CREATE_ACLS: (0, 3),
        ApiKey.DELETE_ACLS: (0, 3), ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5), ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
        ApiKey.END_TXN: (0, 5), ApiKey.WRITE_TXN_MARKERS: (0, 2), ApiKey.TXN_OFFSET_COMMIT: (0, 5),
        ApiKey.DESCRIBE_TRANSACTIONS: (0, 0), ApiKey.LIST_TRANSACTIONS: (0, 0),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1), ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0), ApiKey.UPDATE_FEATURES: (0, 2),
        ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2), ApiKey.CREATE_DELEGATION_TOKEN: (0, 2),
        ApiKey.RENEW_DELEGATION_TOKEN: (0, 2), ApiKey.EXPIRE_DELEGATION_TOKEN: (0, 2),
        ApiKey.DESCRIBE_DELEGATION_TOKEN: (0, 2), ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.ALTER_ISR: (0, 0), ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1), ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
        ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1), ApiKey.SHARE_GROUP_DESCRIBE: (1, 1), ApiKey.SHARE_FETCH: (1, 1),
        ApiKey.SHARE_ACKNOWLEDGE: (1, 1), ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
        ApiKey.READ_SHARE_GROUP_STATE: (0, 0), ApiKey.WRITE_SHARE_GROUP_STATE: (0, 1),
        ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0), ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 1),
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 0)}


@pytest.mark.parametrize("api_key,version", VERSIONS)
def test_every_version_round_trips_with_every_field_set(api_key, version):
    req_cls = load_request_schema(api_key, version)
    body = sample(req_cls)
    frame = request_frame(api_key, version, correlation_id=-2_000_000_000, body=body, client_id="cli-é")
    header, decoded = decode_request(frame)
    assert header == RequestHeader(api_key, version, -2_000_000_000, "cli-é")
    assert type(decoded) is req_cls
    assert decoded == body


@pytest.mark.parametrize("api_key,version", VERSIONS)
def test_every_version_round_trips_with_defaults_and_null_client_id(api_key, version):
    frame = request_frame(api_key, version, correlation_id=0, body={}, client_id=None)
    header, decoded = decode_request(frame)
    assert header == RequestHeader(api_key, version, 0, None)
    assert decoded == api.build(load_request_schema(api_key, version), {})


@pytest.mark.parametrize("api_key,version", VERSIONS)
def test_trailing_bytes_are_ignored_and_every_truncation_is_a_protocol_error(api_key, version):
    """Kafka ignores bytes after a request's body (librdkafka 2.15+ sends 3 after an all-topics
    Metadata v12); a frame cut short anywhere is still malformed."""
    frame = request_frame(api_key, version, body=sample(load_request_schema(api_key, version), items=1))
    expected = decode_request(frame)
    for extra in (b"\x00", b"\x00\x00\x00", b"\x01\x02\x03\x04\x05", b"\x7f\xff\xff\xff" * 16):
        assert decode_request(frame + extra) == expected
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_request(frame[:cut])


def test_accepts_bytearray_and_memoryview_frames():
    frame = request_frame(3, 12, body={"topics": [{"name": "t"}]})
    for variant in (bytearray(frame), memoryview(frame)):
        header, body = decode_request(variant)
        assert header.api_version == 12 and body.topics[0].name == "t"


def test_produce_records_come_out_intact():
    records = bytes(range(256)) * 4096
    frame = request_frame(0, 9, body={"acks": -1, "timeout": 1500, "topic_data": [
        {"name": "t", "partition_data": [{"index": 3, "records": records}]}]})
    _, body = decode_request(frame)
    assert body.topic_data[0].partition_data[0].records == records
    assert body.timeout.total_seconds() == 1.5


def test_produce_below_v3_is_advertised_and_served():
    """librdkafka <= 2.11 compresses only if Produce v0 is listed; v0-2 requests are decoded (no
    transactional id), as Kafka 2.8 serves them."""
    assert SUPPORTED[ApiKey.PRODUCE][0] == 0
    for version in (0, 1, 2):
        header, body = decode_request(struct.pack(">hhih", 0, version, 9, 1) + b"x" + b"\x00" * 10)
        assert (header.api_version, body.acks, body.topic_data) == (version, 0, ())


def test_unknown_api_and_versions_outside_the_range():
    with pytest.raises(ProtocolError, match="unknown or unsupported API key 999"):
        decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(ProtocolError, match="unknown or unsupported API key 58"):  # Envelope: not served
        decode_request(struct.pack(">hhih", 58, 0, 1, -1))
    with pytest.raises(ProtocolError, match=r"ALTER_ISR version 2 is not supported \(supported: 0-0\)"):
        decode_request(request_frame(56, 2))
    with pytest.raises(ProtocolError, match=r"FETCH version 17 is not supported \(supported: 0-16\)"):
        decode_request(request_frame(1, 17))
    with pytest.raises(ProtocolError, match="malformed FETCH v3 request"):     # served, but truncated
        decode_request(struct.pack(">hhih", 1, 3, 1, -1))
    with pytest.raises(ProtocolError, match="METADATA version -1 is not supported"):
        decode_request(struct.pack(">hhih", 3, -1, 1, -1))
    with pytest.raises(ProtocolError, match="shorter than a request header"):
        decode_request(b"\x00\x01")


def test_peek_header():
    assert api.peek_header(request_frame(1, 12, correlation_id=77)) == (1, 12, 77)
    with pytest.raises(ProtocolError, match="7 bytes"):
        api.peek_header(b"\x00" * 7)


def test_register_adds_an_api():
    saved = dict(SUPPORTED)
    try:
        api.register(ApiKey.HEARTBEAT, 0, 4)
        header, _ = decode_request(request_frame(12, 4))
        assert header.api_key == ApiKey.HEARTBEAT
        assert {"api_key": 12, "min_version": 0, "max_version": 4} in api.api_versions_body()["api_keys"]
        with pytest.raises(ValueError):
            api.register(ApiKey.HEARTBEAT, 3, 1)
    finally:
        SUPPORTED.clear()
        SUPPORTED.update(saved)


@pytest.mark.parametrize("version", [5, 6, 127])
def test_api_versions_above_our_max_gets_the_kip_511_fallback(version):
    # a newer client would send header v2 (flexible); we must not try to parse the body
    frame = struct.pack(">hhih", 18, version, 4242, 3) + b"cli" + b"\x00" + b"\x07garbage"
    with pytest.raises(UnsupportedApiVersions) as info:
        decode_request(frame)
    assert info.value.header == RequestHeader(18, version, 4242, "cli")
    assert info.value.correlation_id == 4242
    out = api.api_versions_fallback(4242)
    # response header v0: size, correlation id, then the v0 body straight away
    assert struct.unpack_from(">ii", out, 0) == (len(out) - 4, 4242)
    resp_cls = load_response_schema(18, 0)
    body, size = entity_reader(resp_cls)(out, 8)
    assert 8 + size == len(out)
    assert body.error_code == ErrorCode.unsupported_version == 35
    assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} == \
        {(k, lo, hi) for k, (lo, hi) in SUPPORTED.items()}


def test_frames_of_every_version_through_the_decoder():
    """A stream of every advertised request, fed whole, byte by byte and split at random."""
    import random

    frames = [request_frame(k, v, correlation_id=i, body=sample(load_request_schema(k, v), items=1))
              for i, (k, v) in enumerate(VERSIONS)]
    stream = b"".join(framed(f) for f in frames)

    def check(out):
        assert out == frames
        assert [decode_request(f)[0].correlation_id for f in out] == list(range(len(frames)))

    check(FrameDecoder(1 << 20).feed(stream))
    decoder = FrameDecoder(1 << 20)
    check([f for i in range(len(stream)) for f in decoder.feed(stream[i:i + 1])])
    rng = random.Random(11)
    for _ in range(20):
        decoder = FrameDecoder(1 << 20)
        out, pos = [], 0
        while pos < len(stream):
            step = rng.choice((1, 2, 3, 5, 64, 1000, 5000))
            out += decoder.feed(stream[pos:pos + step])
            pos += step
        check(out)
