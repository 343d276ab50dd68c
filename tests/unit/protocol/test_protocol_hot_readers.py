"""The hand-written Produce request reader agrees with kio on every version it takes, hands out
records as views of the frame (writable when the frame is a bytearray), and leaves every frame it
does not read exactly to kio (returns None)."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest

from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.protocol.hot_readers import (FETCH_RESPONSE_VERSION, FIRST_VERSION, LAST_VERSION,
                                             decode_fetch_response, decode_produce_request)

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)


def produce_frame(version: int, rng: random.Random, *, transactional_id=None, client_id="producer-1") -> bytes:
    topics = []
    for t in range(rng.randrange(0, 4)):
        partitions = []
        for _ in range(rng.randrange(0, 4)):
            records = None if rng.random() < 0.15 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
            partitions.append({"index": rng.randrange(0, 1 << 20), "records": records})
        name = f"töpic-{t}-" + "x" * rng.randrange(0, 200)
        if version >= 13:       # topics by id (KIP-516)
            topics.append({"topic_id": uuid.UUID(int=rng.getrandbits(128)), "partition_data": partitions})
        else:
            topics.append({"name": name, "partition_data": partitions})
    body = {"transactional_id": transactional_id, "acks": rng.choice((-1, 0, 1, 5)),
            "timeout": rng.randrange(0, 1 << 30), "topic_data": topics}
    return api.encode_request(ApiKey.PRODUCE, version, rng.randrange(-(1 << 31), 1 << 31), client_id, body)


def as_plain(request) -> tuple:
    return (getattr(request, "transactional_id", None), request.acks, api_ms(request.timeout),
            [(getattr(t, "name", None), getattr(t, "topic_id", None), [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
             for t in request.topic_data])


def api_ms(value) -> int:
    return value if isinstance(value, int) else value // timedelta(milliseconds=1)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_reader_agrees_with_kio(version):
    rng = random.Random(version)
    for i in range(40):
        frame = produce_frame(version, rng, transactional_id=None if i % 3 else f"tx-{i}",
                              client_id=None if i % 5 == 0 else "producer-1")
        header, expected = api.decode_request(frame)
        got_version, correlation_id, client_id, request = decode_produce_request(frame)
        assert (got_version, correlation_id, client_id) == (header.api_version, header.correlation_id,
                                                            header.client_id)
        assert as_plain(request) == as_plain(expected)


@pytest.mark.parametrize("version", VERSIONS)
def test_records_are_views_of_the_frame_writable_only_in_a_bytearray(version):
    rng = random.Random(1000 + version)
    body = {"transactional_id": None, "acks": -1, "timeout": 3000,
            "topic_data": [{"name": "t", "topic_id": uuid.UUID(int=7),
                            "partition_data": [{"index": 0, "records": b"R" * 70000}]}]}
    frame = bytearray(api.encode_request(ApiKey.PRODUCE, version, rng.randrange(1 << 30), "c", body))
    records = decode_produce_request(frame)[3].topic_data[0].partition_data[0].records
    assert records.obj is frame and not records.readonly and bytes(records) == b"R" * 70000
    before = frame.count(b"S")                           # a random correlation id may hold one
    records[0:1] = b"S"                                  # the leader stamps the request's own bytes
    assert frame.count(b"S") == before + 1
    readonly = decode_produce_request(bytes(frame))[3].topic_data[0].partition_data[0].records
    assert readonly.readonly


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_and_any_trailing_byte_is_left_to_kio(version):
    frame = produce_frame(version, random.Random(2000 + version))
    for cut in range(len(frame)):
        assert decode_produce_request(frame[:cut]) is None
    assert decode_produce_request(frame + b"\x00") is None


def test_other_apis_and_versions_are_left_to_kio():
    fetch = api.encode_request(ApiKey.METADATA, 9, 1, "c", {"topics": None, "allow_auto_topic_creation": True,
                                                             "include_cluster_authorized_operations": False,
                                                             "include_topic_authorized_operations": False})
    assert decode_produce_request(fetch) is None
    for version in (-1, LAST_VERSION + 1):
        frame = bytearray(produce_frame(FIRST_VERSION, random.Random(3)))
        frame[2:4] = version.to_bytes(2, "big", signed=True)
        assert decode_produce_request(bytes(frame)) is None


def test_a_flexible_frame_with_a_tagged_field_is_left_to_kio():
    frame = bytearray(produce_frame(9, random.Random(5)))
    assert frame[-1] == 0                                 # the body's empty tagged fields
    frame[-1:] = b"\x01\x00\x01\x07"                      # one unknown tagged field (tag 0, 1 byte)
    assert decode_produce_request(bytes(frame)) is None


# -- Fetch response v11 ---------------------------------------------------------------------------

def fetch_response_frame(rng: random.Random, correlation_id: int) -> bytes:
    from strandline.protocol.api import PartitionData, RequestHeader, encode_fetch_response
    topics = []
    for t in range(rng.randrange(0, 4)):
        partitions = []
        for i in range(rng.randrange(0, 4)):
            records = None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
            aborted = None if rng.random() < 0.7 else [(rng.randrange(1 << 40), rng.randrange(1 << 40))
                                                       for _ in range(rng.randrange(0, 3))]
            partitions.append(PartitionData(i, rng.choice((0, 1, 6)), rng.randrange(1 << 40), rng.randrange(1 << 40),
                                            rng.randrange(1 << 40), records, rng.randrange(-1, 3), aborted))
        topics.append((f"töpic-{t}", partitions))
    header = RequestHeader(ApiKey.FETCH, FETCH_RESPONSE_VERSION, correlation_id, "c")
    return b"".join(bytes(b) for b in encode_fetch_response(header, 0, rng.choice((0, 70)),
                                                            rng.randrange(1 << 30), topics))[4:]


def plain_fetch(resp) -> tuple:
    return (int(resp.error_code), int(resp.session_id),
            [(str(t.topic), [(p.partition_index, int(p.error_code), p.high_watermark, p.last_stable_offset,
                              p.log_start_offset, None if p.aborted_transactions is None else
                              [(a[0], a[1]) if isinstance(a, tuple) else (a.producer_id, a.first_offset)
                               for a in p.aborted_transactions],
                              p.preferred_read_replica, None if p.records is None else bytes(p.records))
                             for p in t.partitions]) for t in resp.responses])


def test_the_fetch_reader_agrees_with_kio():
    rng = random.Random(11)
    for i in range(60):
        frame = fetch_response_frame(rng, i)
        assert plain_fetch(decode_fetch_response(frame)) == plain_fetch(
            api.decode_response(ApiKey.FETCH, FETCH_RESPONSE_VERSION, frame))


def test_fetched_records_are_views_of_the_frame_and_bad_frames_are_left_to_kio():
    rng = random.Random(12)
    frame = fetch_response_frame(rng, 1)
    while not any(p.records for t in decode_fetch_response(frame).responses for p in t.partitions):
        frame = fetch_response_frame(rng, 1)
    owned = bytearray(frame)
    records = next(p.records for t in decode_fetch_response(owned).responses for p in t.partitions if p.records)
    assert records.obj is owned
    for cut in range(len(frame)):
        assert decode_fetch_response(frame[:cut]) is None
    assert decode_fetch_response(frame + b"\x00") is None
