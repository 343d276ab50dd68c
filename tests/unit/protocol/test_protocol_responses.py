"""encode_response and build(): dicts become the right kio dataclasses for every version and
decode back with kio (and with kafka-python's own parser for Metadata)."""

from __future__ import annotations

import dataclasses
import struct
from datetime import timedelta

import pytest
from strandline.protocol.old_versions import response_schema as load_response_schema  # kio's, and the versions kio lacks
from kio.schema.errors import ErrorCode

from strandline.protocol import api, errors
from strandline.protocol.api import SUPPORTED, ApiKey, RequestHeader, build, encode_response
from strandline.protocol.build import _plan

from .test_protocol_samples import SAMPLE_UUID, read_response, sample, to_dict, versions_with_schemas

VERSIONS = list(versions_with_schemas())


def encode_decode(api_key: int, version: int, body, correlation_id: int = 99, plain: bool = False):
    out = encode_response(RequestHeader(api_key, version, correlation_id, "c"), body)
    corr, decoded = read_response(out, api_key, version, plain)
    assert corr == correlation_id
    return decoded


@pytest.mark.parametrize("api_key,version", VERSIONS)
def test_every_response_version_round_trips_a_full_dataclass(api_key, version):
    obj = sample(load_response_schema(api_key, version))
    assert encode_decode(api_key, version, obj) == obj


@pytest.mark.parametrize("api_key,version", VERSIONS)
def test_every_response_version_builds_from_its_dict(api_key, version):
    cls = load_response_schema(api_key, version)
    obj = sample(cls)
    as_dict = to_dict(obj)
    assert build(cls, as_dict) == obj
    assert encode_decode(api_key, version, as_dict) == obj


@pytest.mark.parametrize("api_key,version", VERSIONS)
def test_every_response_version_builds_from_an_empty_dict(api_key, version):
    # a timestamp's default is -1, which kio refuses to read back as a datetime
    encode_decode(api_key, version, {}, plain=api_key in (38, 39, 40))


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_uses_response_header_v0_for_every_version(version):
    out = encode_response(RequestHeader(18, version, 5, None), api.api_versions_body())
    assert struct.unpack_from(">ii", out) == (len(out) - 4, 5)
    body = encode_decode(18, version, api.api_versions_body(), correlation_id=5)
    assert body.error_code == ErrorCode.none
    assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} == \
        {(k, lo, hi) for k, (lo, hi) in SUPPORTED.items()}
    # right after the correlation id: error_code int16, then the api_keys array length
    # (compact in v3+); a response header v1 would put a tagged-field byte in between
    assert out[8:10] == b"\x00\x00"
    if version >= 3:
        assert out[10] == len(SUPPORTED) + 1
    else:
        assert struct.unpack_from(">i", out, 10)[0] == len(SUPPORTED)


@pytest.mark.parametrize("version", [9, 12])
def test_flexible_versions_use_response_header_v1(version):
    out = encode_response(RequestHeader(3, version, 6, None), {})
    assert struct.unpack_from(">iib", out) == (len(out) - 4, 6, 0)


METADATA = {
    "throttle_time": 0, "cluster_id": "strandline-1", "controller_id": 2,
    "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None},
                {"node_id": 2, "host": "127.0.0.1", "port": 9093, "rack": "r2"}],
    "topics": [{"error_code": 0, "name": "events", "is_internal": False, "topic_id": SAMPLE_UUID,
                "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3,
                                "replica_nodes": [1, 2], "isr_nodes": [1, 2], "offline_replicas": []},
                               {"error_code": ErrorCode.leader_not_available, "partition_index": 1,
                                "leader_id": -1, "leader_epoch": 4, "replica_nodes": [2, 1],
                                "isr_nodes": [2]}]},
               {"error_code": 3, "name": "missing", "partitions": []}],
}


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_every_version(version):
    body = encode_decode(3, version, METADATA)
    assert [b.node_id for b in body.brokers] == [1, 2]
    if version >= 1:
        assert body.brokers[1].rack == "r2" and body.controller_id == 2
    if version >= 2:
        assert body.cluster_id == "strandline-1"
    if version >= 10:
        assert body.topics[0].topic_id == SAMPLE_UUID
        assert body.topics[1].topic_id is None  # kio reads the all-zero UUID as None
    events, missing = body.topics
    assert missing.error_code == ErrorCode.unknown_topic_or_partition and missing.partitions == ()
    p0, p1 = events.partitions
    assert (p0.leader_id, tuple(p0.replica_nodes), tuple(p0.isr_nodes)) == (1, (1, 2), (1, 2))
    assert p1.error_code == ErrorCode.leader_not_available
    if version >= 7:
        assert (p0.leader_epoch, p1.leader_epoch) == (3, 4)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's importlib.resources use
@pytest.mark.parametrize("version", [1, 4, 5, 7, 8, 9, 12])
def test_metadata_cross_checked_with_kafka_pythons_parser(version):
    from kafka.protocol.metadata import MetadataResponse

    out = encode_response(RequestHeader(3, version, 1234, None), METADATA)
    parsed = MetadataResponse.decode(out[4:], version=version, header=True)
    assert parsed.header.correlation_id == 1234
    assert [(b.node_id, b.host, b.port) for b in parsed.brokers] == \
        [(1, "127.0.0.1", 9092), (2, "127.0.0.1", 9093)]
    events = parsed.topics[0]
    assert events.name == "events" and events.error_code == 0
    assert [(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
            for p in events.partitions] == [(0, 1, [1, 2], [1, 2]), (1, -1, [2, 1], [2])]
    assert parsed.topics[1].error_code == 3
    if version >= 2:
        assert parsed.cluster_id == "strandline-1"


@pytest.mark.parametrize("version", range(3, 11))
def test_produce_every_version(version):
    body = encode_decode(0, version, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time": -1, "log_start_offset": 7},
        {"index": 1, "error_code": 87, "base_offset": -1, "log_append_time": 1_700_000_000_123,
         "error_message": "bad batch", "record_errors": [{"batch_index": 2}]}]}], "throttle_time": 0})
    p0, p1 = body.responses[0].partition_responses
    assert (p0.index, p0.error_code, p0.base_offset, p0.log_append_time) == (0, ErrorCode.none, 42, None)
    assert p1.error_code == ErrorCode.invalid_record
    assert p1.log_append_time.timestamp() * 1000 == 1_700_000_000_123
    if version >= 5:
        assert (p0.log_start_offset, p1.log_start_offset) == (7, -1)
    if version >= 8:
        assert p1.error_message == "bad batch" and p1.record_errors[0].batch_index == 2
        assert p0.error_message is None and p0.record_errors == ()


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_every_version(version):
    body = encode_decode(1, version, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
         "log_start_offset": 0, "records": b"batch"},
        {"partition_index": 1, "error_code": ErrorCode.offset_out_of_range, "high_watermark": 5,
         "current_leader": None, "diverging_epoch": None}]}]})
    p0, p1 = body.responses[0].partitions
    assert p0.records == b"batch" and p0.high_watermark == 10
    assert p1.error_code == ErrorCode.offset_out_of_range
    assert p1.records is None and p1.aborted_transactions is None  # nullable: missing -> null
    if version >= 7:
        assert body.error_code == ErrorCode.none and body.session_id == 0
    if version >= 11:
        assert p1.preferred_read_replica == -1  # the schema default


@pytest.mark.parametrize("version", range(1, 9))
def test_list_offsets_every_version(version):
    body = encode_decode(2, version, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 1234, "leader_epoch": 5}]}]})
    p = body.topics[0].partitions[0]
    assert (p.partition_index, p.offset, p.timestamp) == (0, 1234, -1)
    if version >= 4:
        assert p.leader_epoch == 5


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_every_version(version):
    body = encode_decode(19, version, {"throttle_time": 10, "topics": [
        {"name": "a", "error_code": 0, "num_partitions": 3, "replication_factor": 2,
         "configs": [{"name": "cleanup.policy", "value": "delete", "read_only": False,
                      "config_source": 5, "is_sensitive": False}]},
        {"name": "b", "error_code": ErrorCode.topic_already_exists, "error_message": "exists"}]})
    a, b = body.topics
    assert body.throttle_time == timedelta(milliseconds=10)
    assert (a.name, b.error_code, b.error_message) == ("a", ErrorCode.topic_already_exists, "exists")
    if version >= 5:
        assert (a.num_partitions, a.replication_factor) == (3, 2)
        assert a.configs[0].value == "delete"
        assert b.num_partitions == -1  # the schema default, not 0
    if version >= 7:
        assert b.topic_id is None  # all-zero UUID on the wire


@pytest.mark.parametrize("version", range(0, 5))
def test_init_producer_id_every_version(version):
    body = encode_decode(22, version, {"error_code": 0, "producer_id": 4000, "producer_epoch": 0})
    assert (body.error_code, body.producer_id, body.producer_epoch) == (ErrorCode.none, 4000, 0)
    assert body.throttle_time == timedelta(0)


@pytest.mark.parametrize("version", range(2, 5))
def test_offset_for_leader_epoch_every_version(version):
    body = encode_decode(23, version, {"topics": [{"topic": "t", "partitions": [
        {"error_code": 0, "partition": 0, "leader_epoch": 3, "end_offset": 100},
        {"error_code": ErrorCode.fenced_leader_epoch, "partition": 1}]}]})
    p0, p1 = body.topics[0].partitions
    assert (p0.leader_epoch, p0.end_offset) == (3, 100)
    assert (p1.error_code, p1.leader_epoch, p1.end_offset) == (ErrorCode.fenced_leader_epoch, -1, -1)


@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics_every_version(version):
    body = encode_decode(20, version, {"responses": [{"name": "t", "error_code": 0}]})
    assert body.responses[0].error_code == ErrorCode.none


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_every_version(version):
    body = encode_decode(10, version, {"error_code": ErrorCode.coordinator_not_available,
                                       "node_id": -1, "host": "", "port": -1})
    assert body.error_code == ErrorCode.coordinator_not_available and body.node_id == -1


# -- build() semantics ------------------------------------------------------------------------

def test_build_ignores_unknown_keys_and_fills_defaults_and_zeros():
    cls = load_response_schema(0, 10)
    part_cls = cls.__dataclass_fields__["responses"].type.__args__[0]
    obj = build(cls, {"responses": [{"name": "t", "partition_responses": [{"index": 1, "bogus": 3}]}],
                      "not_a_field": 1})
    p = obj.responses[0].partition_responses[0]
    assert isinstance(obj.responses[0], part_cls)
    assert p.error_code is ErrorCode.none                  # error code zero
    assert p.base_offset == 0                              # plain int zero
    assert p.log_start_offset == -1                        # schema default
    assert p.log_append_time is None and p.error_message is None  # nullable
    assert p.record_errors == ()                           # arrays
    assert obj.throttle_time == timedelta(0)
    assert obj.node_endpoints == ()                        # tagged default kept


def test_build_leaves_tagged_entities_off_the_wire_when_absent_or_none():
    cls = load_response_schema(1, 12)
    for value in ({}, {"current_leader": None, "diverging_epoch": None, "snapshot_id": None}):
        obj = build(cls, {"responses": [{"topic": "t", "partitions": [dict(partition_index=0, **value)]}]})
        out = encode_response(RequestHeader(1, 12, 1, None), obj)
        assert out == encode_response(RequestHeader(1, 12, 1, None), {
            "responses": [{"topic": "t", "partitions": [{"partition_index": 0}]}]})
    with_leader = encode_response(RequestHeader(1, 12, 1, None), {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "current_leader": {"leader_id": 2, "leader_epoch": 9}}]}]})
    assert len(with_leader) == len(out) + 2 + 9
    assert read_response(with_leader, 1, 12)[1].responses[0].partitions[0].current_leader.leader_id == 2


def test_build_converts_ints_to_error_codes_timedeltas_datetimes_and_uuids():
    obj = build(load_response_schema(3, 12), {"throttle_time": 250, "topics": [
        {"error_code": 3, "name": "t", "topic_id": str(SAMPLE_UUID)}]})
    assert obj.throttle_time == timedelta(milliseconds=250)
    assert obj.topics[0].error_code is ErrorCode.unknown_topic_or_partition
    assert obj.topics[0].topic_id == SAMPLE_UUID
    produce = build(load_response_schema(0, 9), {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "log_append_time": 1_700_000_000_001}, {"index": 1, "log_append_time": -1}]}]})
    p0, p1 = produce.responses[0].partition_responses
    assert round(p0.log_append_time.timestamp() * 1000) == 1_700_000_000_001 and p1.log_append_time is None


def test_build_reads_attributes_of_any_object_and_passes_instances_through():
    cls = load_response_schema(22, 4)
    obj = sample(cls)
    assert build(cls, obj) is obj
    other = build(load_response_schema(22, 3), obj)  # another version's dataclass as the source
    assert (other.producer_id, other.producer_epoch, other.error_code) == \
        (obj.producer_id, obj.producer_epoch, obj.error_code)


def test_build_is_cached_per_class():
    _plan.cache_clear()
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 5}]}]}
    for _ in range(3):
        encode_response(RequestHeader(2, 5, 1, None), body)            # ListOffsets v5
    info = _plan.cache_info()
    assert info.misses == 3 and info.hits >= 6  # response, topic, partition


def test_build_rejects_unknown_error_codes():
    with pytest.raises(ValueError):
        build(load_response_schema(22, 4), {"error_code": 31999})


def test_build_keeps_explicit_none_for_nullable_fields():
    obj = build(load_response_schema(3, 12), {"cluster_id": None, "topics": [{"name": None}]})
    assert obj.cluster_id is None and obj.topics[0].name is None
    obj = build(load_response_schema(3, 5), {"topics": [{"name": None}]})  # not nullable in v5
    assert obj.topics[0].name == ""


def test_errors_module():
    assert errors.ErrorCode is ErrorCode
    assert errors.code(ErrorCode.not_leader_or_follower) == 6
    assert errors.code(74) == 74
    assert type(errors.code(ErrorCode.none)) is int


def test_response_class():
    assert api.response_class(ApiKey.FETCH, 12) is load_response_schema(1, 12)
    assert dataclasses.is_dataclass(api.response_class(18, 0))
