"""The hand-written Fetch and Produce response encoders are byte-identical to kio for every
version in range, and never copy record bytes."""

from __future__ import annotations

import random
import uuid

import pytest
from kio.schema.errors import ErrorCode

from strandline.protocol.api import (
    PartitionData,
    PartitionProduceResult,
    RequestHeader,
    encode_fetch_response,
    encode_produce_response,
    encode_response,
)

from .test_protocol_samples import read_response

FETCH_VERSIONS = range(4, 17)
PRODUCE_VERSIONS = range(3, 14)


# -- Fetch ------------------------------------------------------------------------------------

def fetch_body(throttle_ms, error_code, session_id, topics) -> dict:
    """The same response as a dict for kio (the reference encoding)."""
    def partition(p: PartitionData) -> dict:
        records = p.records
        if isinstance(records, (list, tuple)):
            records = b"".join(bytes(r) for r in records)
        elif records is not None:
            records = bytes(records)
        d = {"partition_index": p.partition_index, "error_code": p.error_code,
             "high_watermark": p.high_watermark, "last_stable_offset": p.last_stable_offset,
             "log_start_offset": p.log_start_offset, "records": records,
             "preferred_read_replica": p.preferred_read_replica,
             "aborted_transactions": None if p.aborted_transactions is None else
             [{"producer_id": a, "first_offset": b} for a, b in p.aborted_transactions]}
        if p.diverging_epoch is not None:
            d["diverging_epoch"] = {"epoch": p.diverging_epoch[0], "end_offset": p.diverging_epoch[1]}
        if p.current_leader is not None:
            d["current_leader"] = {"leader_id": p.current_leader[0], "leader_epoch": p.current_leader[1]}
        return d
    return {"throttle_time": throttle_ms, "error_code": error_code, "session_id": session_id,
            "responses": [{"topic_id" if isinstance(name, uuid.UUID) else "topic": name,
                           "partitions": [partition(p) for p in parts]} for name, parts in topics]}


def by_version(topics: list, version: int) -> list:
    """Fetch v13+ names each topic by its id (KIP-516)."""
    if version < 13:
        return topics
    return [(uuid.uuid5(uuid.NAMESPACE_URL, name), parts) for name, parts in topics]


BLOB = bytes(range(256)) * 64  # 16 KiB

FETCH_CASES = {
    "no topics": (0, 0, 0, []),
    "empty topic": (0, 0, 0, [("t", [])]),
    "typical": (0, 0, 0, [("events", [
        PartitionData(0, 0, 100, 100, 0, BLOB),
        PartitionData(1, ErrorCode.offset_out_of_range, -1, -1, -1, b""),
        PartitionData(2, 0, 5, 5, 0, memoryview(BLOB)[100:200]),
        PartitionData(3, 0, 7, records=None)]),
        ("other-tópic", [PartitionData(0, 0, 0, records=[BLOB[:10], b"", BLOB[10:50]])])]),
    "session, throttle, error": (250, ErrorCode.fetch_session_id_not_found, 123456, [
        ("t", [PartitionData(0, ErrorCode.not_leader_or_follower, 10, 9, 1, b"", 2)])]),
    "aborted transactions": (0, 0, 0, [("t", [
        PartitionData(0, 0, 10, 8, 0, BLOB, aborted_transactions=[]),
        PartitionData(1, 0, 10, 8, 0, BLOB, aborted_transactions=[(4000, 3), (4001, 7)])])]),
    "tagged fields": (0, 0, 0, [("t", [
        PartitionData(0, ErrorCode.fenced_leader_epoch, 10, diverging_epoch=(3, 42)),
        PartitionData(1, ErrorCode.not_leader_or_follower, 10, current_leader=(2, 9)),
        PartitionData(2, 0, 10, diverging_epoch=(4, 1), current_leader=(1, 1), records=BLOB),
        PartitionData(3, 0, 10, diverging_epoch=(-1, -1), current_leader=(-1, -1))])]),
    "many partitions": (0, 0, 0, [(f"topic-{t}", [PartitionData(p, 0, p * 10, p * 10, 0, BLOB[:p])
                                                  for p in range(30)]) for t in range(5)]),
}


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@pytest.mark.parametrize("case", list(FETCH_CASES))
def test_fetch_byte_identical_to_kio(case, version):
    throttle_ms, error_code, session_id, topics = FETCH_CASES[case]
    topics = by_version(topics, version)
    header = RequestHeader(1, version, 0x7FFFFFFF, "c")
    buffers = encode_fetch_response(header, throttle_ms, error_code, session_id, topics)
    reference = encode_response(header, fetch_body(throttle_ms, error_code, session_id, topics))
    assert b"".join(buffers) == reference
    read_response(reference, 1, version)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_random_bodies_byte_identical_to_kio(version):
    rng = random.Random(version)
    header = RequestHeader(1, version, 1, None)
    for _ in range(40):
        topics = []
        for _t in range(rng.randrange(0, 4)):
            parts = []
            for _p in range(rng.randrange(0, 5)):
                records = rng.choice([b"", None, BLOB[:rng.randrange(0, 3000)],
                                      [BLOB[:rng.randrange(0, 200)] for _ in range(rng.randrange(0, 4))]])
                aborted = rng.choice([None, [], [(rng.randrange(2**40), rng.randrange(2**40))]])
                parts.append(PartitionData(
                    rng.randrange(2**31), rng.choice([0, 1, 6, 74, 75]), rng.randrange(-1, 2**62),
                    rng.randrange(-1, 2**62), rng.randrange(-1, 2**62), records, rng.randrange(-1, 5), aborted,
                    rng.choice([None, (rng.randrange(-1, 9), rng.randrange(-1, 999))]),
                    rng.choice([None, (rng.randrange(-1, 9), rng.randrange(-1, 99))])))
            topics.append(("x" * rng.randrange(1, 249), parts))
        args = (rng.randrange(0, 1000), rng.choice([0, 70]), rng.randrange(0, 2**31), by_version(topics, version))
        assert b"".join(encode_fetch_response(header, *args)) == encode_response(header, fetch_body(*args))


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_never_copies_records(version):
    records = bytes(1 << 20)
    view = memoryview(bytearray(4096))
    buffers = encode_fetch_response(RequestHeader(1, version, 1, None), 0, 0, 0, [
        ("t", [PartitionData(0, 0, 1, records=records), PartitionData(1, 0, 1, records=[view, records])])])
    assert [b for b in buffers if b is records] == [records, records]
    assert any(b is view for b in buffers)
    assert sum(len(b) for b in buffers if b is not records and b is not view) < 200
    assert all(isinstance(b, (bytes, memoryview)) for b in buffers)


def test_fetch_accepts_dicts_tuples_and_a_whole_body():
    header = RequestHeader(1, 12, 3, None)
    as_tuple = encode_fetch_response(header, 0, 0, 0, [("t", [(0, 0, 10, 10, 0, b"abc")])])
    as_dict = encode_fetch_response(header, 0, 0, 0, [("t", [
        {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
         "log_start_offset": 0, "records": b"abc", "ignored": 1}])])
    body = {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "error_code": ErrorCode.none,
                                       "high_watermark": 10, "last_stable_offset": 10,
                                       "log_start_offset": 0, "aborted_transactions": None,
                                       "preferred_read_replica": -1, "records": b"abc"}]}]}
    as_body = encode_fetch_response(header, body)
    assert b"".join(as_tuple) == b"".join(as_dict) == b"".join(as_body) == encode_response(header, body)


def test_fetch_refuses_versions_out_of_range():
    with pytest.raises(ValueError, match="v17"):
        encode_fetch_response(RequestHeader(1, 17, 1, None), 0, 0, 0, [])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_fetch_cross_checked_with_kafka_python(version):
    from kafka.protocol.consumer.fetch import FetchResponse

    out = b"".join(encode_fetch_response(RequestHeader(1, version, 77, None), 0, 0, 0, [
        ("t", [PartitionData(0, 0, 10, 10, 0, BLOB[:100]), PartitionData(1, 6, -1)])]))
    parsed = FetchResponse.decode(out[4:], version=version, header=True)
    assert parsed.header.correlation_id == 77
    p0, p1 = parsed.responses[0].partitions
    assert (p0.partition_index, p0.high_watermark, bytes(p0.records)) == (0, 10, BLOB[:100])
    assert p1.error_code == 6


# -- Produce ----------------------------------------------------------------------------------

def produce_body(topics, throttle_ms=0, node_endpoints=()) -> dict:
    def partition(p) -> dict:
        p = PartitionProduceResult(*p)
        d = {"index": p.index, "error_code": p.error_code, "base_offset": p.base_offset,
             "log_append_time": p.log_append_time, "log_start_offset": p.log_start_offset,
             "error_message": p.error_message,
             "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in p.record_errors]}
        if p.current_leader is not None:
            d["current_leader"] = {"leader_id": p.current_leader[0], "leader_epoch": p.current_leader[1]}
        return d
    return {"throttle_time": throttle_ms,
            "node_endpoints": [{"node_id": n, "host": h, "port": port, "rack": r} for n, h, port, r in node_endpoints],
            "responses": [{"topic_id" if isinstance(name, uuid.UUID) else "name": name,
                           "partition_responses": [partition(p) for p in parts]}
                          for name, parts in topics]}


PRODUCE_CASES = {
    "no topics": ([], {}),
    "acks": ([("t", [(0, 0, 42, -1, 0)])], {}),
    "log append time": ([("t", [(0, 0, 42, 1_700_000_000_123, 5), (1, 0, 0, 0, 0)])], {"throttle_ms": 30}),
    "errors": ([("a", [(0, ErrorCode.not_leader_or_follower, -1, -1, -1)]),
                ("b-é", [PartitionProduceResult(3, ErrorCode.invalid_record, -1, -1, -1, "bad record",
                                                [(0, None), (2, "key is null")]),
                         (4, ErrorCode.corrupt_message, -1, -1, -1, None)])], {}),
    "KIP-951 current leader": ([("t", [(0, 6, -1, -1, -1, None, (), (2, 9)), (1, 0, 1, -1, 0, None, (), (-1, -1))])],
                               {"node_endpoints": [(2, "127.0.0.1", 9093, None), (3, "h3", 9094, "rack-3")]}),
}


def by_id(topics, version):
    """From Produce v13 a response names each topic by its id."""
    if version < 13:
        return topics
    return [(uuid.uuid5(uuid.NAMESPACE_URL, name), parts) for name, parts in topics]


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("case", list(PRODUCE_CASES))
def test_produce_byte_identical_to_kio(case, version):
    topics, kwargs = PRODUCE_CASES[case]
    topics = by_id(topics, version)
    header = RequestHeader(0, version, 31337, "c")
    out = encode_produce_response(header, topics, **kwargs)
    reference = encode_response(header, produce_body(topics, **kwargs))
    assert out == reference
    read_response(out, 0, version)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_random_bodies_byte_identical_to_kio(version):
    rng = random.Random(100 + version)
    header = RequestHeader(0, version, 5, None)
    for _ in range(40):
        topics = [("t" * rng.randrange(1, 200), [
            PartitionProduceResult(rng.randrange(2**31), rng.choice([0, 2, 6, 87]), rng.randrange(-1, 2**62),
                                   rng.choice([-1, 0, rng.randrange(2**41)]), rng.randrange(-1, 2**62),
                                   rng.choice([None, "", "msg"]),
                                   [(rng.randrange(99), rng.choice([None, "x"])) for _ in range(rng.randrange(3))],
                                   rng.choice([None, (rng.randrange(-1, 5), rng.randrange(-1, 50))]))
            for _ in range(rng.randrange(0, 4))]) for _ in range(rng.randrange(0, 3))]
        topics = by_id(topics, version)
        throttle = rng.randrange(0, 10000)
        assert encode_produce_response(header, topics, throttle) == \
            encode_response(header, produce_body(topics, throttle))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("version", [3, 5, 8, 9])
def test_produce_cross_checked_with_kafka_python(version):
    from kafka.protocol.producer.produce import ProduceResponse

    out = encode_produce_response(RequestHeader(0, version, 8, None), [("t", [(1, 0, 99, -1, 0)])])
    parsed = ProduceResponse.decode(out[4:], version=version, header=True)
    assert parsed.header.correlation_id == 8
    p = parsed.responses[0].partition_responses[0]
    assert (p.index, p.error_code, p.base_offset) == (1, 0, 99)


def test_produce_refuses_versions_out_of_range():
    with pytest.raises(ValueError, match="v14"):
        encode_produce_response(RequestHeader(0, 14, 1, None), [])


# -- the follower's Fetch request -------------------------------------------------------------

def test_the_hand_written_fetch_request_is_byte_identical_to_kio():
    from strandline.protocol.api import ApiKey, encode_request
    from strandline.protocol.hot_responses import FETCH_REQUEST_VERSION, encode_fetch_request
    rng = random.Random(21)
    for _ in range(50):
        topics = [{"topic": f"t{t}-ü", "partitions": [
            {"partition": rng.randrange(1 << 16), "current_leader_epoch": rng.randrange(-1, 1 << 20),
             "fetch_offset": rng.randrange(1 << 50), "log_start_offset": rng.randrange(-1, 1 << 50),
             "partition_max_bytes": rng.randrange(1 << 30)} for _ in range(rng.randrange(0, 4))]}
            for t in range(rng.randrange(0, 4))]
        forgotten = [{"topic": f"f{t}", "partitions": [rng.randrange(1 << 16) for _ in range(rng.randrange(0, 4))]}
                     for t in range(rng.randrange(0, 3))]
        body = {"replica_id": rng.randrange(-1, 1000), "max_wait": rng.randrange(0, 10000),
                "min_bytes": rng.randrange(0, 1 << 20), "max_bytes": rng.randrange(0, 1 << 30),
                "isolation_level": rng.choice((0, 1)), "session_id": rng.randrange(0, 1 << 30),
                "session_epoch": rng.randrange(-1, 1 << 30), "topics": topics,
                "forgotten_topics_data": forgotten, "rack_id": rng.choice(("", "rack-a"))}
        cid = rng.randrange(-(1 << 31), 1 << 31)
        assert encode_fetch_request(cid, "strandline-replica-fetcher-2", body) == encode_request(
            ApiKey.FETCH, FETCH_REQUEST_VERSION, cid, "strandline-replica-fetcher-2", body)


def test_the_hand_written_produce_request_is_byte_identical_to_kio():
    from strandline.protocol.api import ApiKey, encode_request
    from strandline.protocol.hot_responses import PRODUCE_REQUEST_VERSION, encode_produce_request
    rng = random.Random(22)
    for _ in range(50):
        topics = [{"name": f"t{t}-ü", "partition_data": [
            {"index": rng.randrange(1 << 16), "records": rng.choice((None, b"", rng.randbytes(rng.randrange(200))))}
            for _ in range(rng.randrange(0, 4))]} for t in range(rng.randrange(0, 4))]
        body = {"transactional_id": rng.choice((None, "", "tx-1")), "acks": rng.choice((-1, 0, 1)),
                "timeout": rng.randrange(0, 1 << 31), "topic_data": topics}
        cid = rng.randrange(-(1 << 31), 1 << 31)
        assert encode_produce_request(cid, "p1", body) == encode_request(ApiKey.PRODUCE, PRODUCE_REQUEST_VERSION,
                                                                          cid, "p1", body)


def test_the_hand_written_metadata_response_is_byte_identical_to_kio():
    import uuid

    from strandline.protocol.api import ApiKey, RequestHeader, encode_response
    from strandline.protocol.hot_responses import encode_metadata_response
    rng = random.Random(23)

    def maybe(d: dict, key: str, value) -> None:
        if rng.random() < 0.8:
            d[key] = value

    for _ in range(400):
        version = rng.randrange(0, 14)
        brokers = []
        for _ in range(rng.randrange(0, 4)):
            b = {"node_id": rng.randrange(1 << 20), "host": rng.choice(("localhost", "h-ü", "")),
                 "port": rng.randrange(1 << 16)}
            maybe(b, "rack", rng.choice((None, "", "r1")))
            brokers.append(b)
        topics = []
        for _ in range(rng.randrange(0, 4)):
            t = {"error_code": rng.choice((0, 3, 5, 29)), "name": rng.choice(("t", "événements", "")),
                 "partitions": []}
            maybe(t, "topic_id", uuid.UUID(int=rng.randrange(1 << 128)))
            maybe(t, "is_internal", rng.random() < 0.3)
            maybe(t, "topic_authorized_operations", rng.choice((-2147483648, 0, 1234)))
            for _ in range(rng.randrange(0, 4)):
                p = {"error_code": rng.choice((0, 5)), "partition_index": rng.randrange(1000),
                     "leader_id": rng.randrange(-1, 5)}
                maybe(p, "leader_epoch", rng.randrange(-1, 1 << 20))
                maybe(p, "replica_nodes", [rng.randrange(10) for _ in range(rng.randrange(4))])
                maybe(p, "isr_nodes", [rng.randrange(10) for _ in range(rng.randrange(4))])
                maybe(p, "offline_replicas", [rng.randrange(10) for _ in range(rng.randrange(3))])
                t["partitions"].append(p)
            topics.append(t)
        body = {"brokers": brokers, "topics": topics}
        maybe(body, "cluster_id", rng.choice((None, "sim-cluster")))
        maybe(body, "controller_id", rng.randrange(-1, 5))
        maybe(body, "throttle_time", rng.randrange(0, 1000))
        maybe(body, "cluster_authorized_operations", rng.choice((-2147483648, 77)))
        maybe(body, "error_code", rng.choice((0, 31)))
        header = RequestHeader(ApiKey.METADATA, version, rng.randrange(1 << 31), "c")
        assert encode_metadata_response(header, body) == encode_response(header, body), (version, body)


def test_the_hand_written_metadata_request_is_byte_identical_to_kio():
    from strandline.protocol.api import ApiKey, encode_request
    from strandline.protocol.hot_responses import METADATA_REQUEST_VERSION, encode_metadata_request
    rng = random.Random(24)
    for _ in range(100):
        topics = None if rng.random() < 0.2 else [{"name": rng.choice(("t", "événements", "x" * 200))}
                                                  for _ in range(rng.randrange(0, 4))]
        body = {"topics": topics, "allow_auto_topic_creation": rng.random() < 0.5,
                "include_cluster_authorized_operations": rng.random() < 0.5,
                "include_topic_authorized_operations": rng.random() < 0.5}
        cid = rng.randrange(-(1 << 31), 1 << 31)
        client = rng.choice(("p1", "", "ü" * 40))
        assert encode_metadata_request(cid, client, body) == encode_request(ApiKey.METADATA, METADATA_REQUEST_VERSION,
                                                                             cid, client, body)
