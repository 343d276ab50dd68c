"""A malformed request never stops a broker: a frame that cannot be parsed closes its connection,
an error while a request is handled answers it UNKNOWN_SERVER_ERROR, and the broker goes on
serving everyone else; only a broken invariant of its own state (or its disk failing) stops it."""

from __future__ import annotations

import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from strandline.core.effects import Close, LogLine, Send
from strandline.errors import BrokenInvariant
from strandline.log.checkpoint import MalformedCheckpoint
from strandline.log.txn_index import CorruptIndexError
from strandline.protocol.api import decode_request
from strandline.protocol.frames import ProtocolError
from tests.unit.broker.test_broker_core import Harness
from tests.unit.protocol.test_protocol_samples import read_response, request_frame

SYNC_GROUP, PRODUCE, METADATA, LIST_OFFSETS = 14, 0, 3, 2

# SyncGroup v5 whose nullable protocol_type is a null written as a two-byte varint of 0 (80 00):
# kio and Kafka read it as null and go on after it; the shape check went back one byte, so it
# checked other bytes than kio read, and kio handed the handler a null assignments array
# (``TypeError: 'NoneType' object is not iterable`` at group_apis.py in _sync_group stopped the
# broker under the fuzzer).
SYNC_GROUP_OVERLONG_NULL = bytes.fromhex("000e00050000000700017400026700000001026d008000010000")


def test_an_overlong_null_varint_is_read_as_kio_reads_it_and_a_null_array_is_refused():
    with pytest.raises(ProtocolError, match="non-nullable field assignments was serialized as null"):
        decode_request(SYNC_GROUP_OVERLONG_NULL)


def test_the_sync_group_frame_that_stopped_a_broker_closes_only_its_connection():
    h = Harness(**{"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1"})
    effects = h.broker.handle_request(5, SYNC_GROUP_OVERLONG_NULL, h.now)
    assert [type(e) for e in effects] == [Close] and "non-nullable field assignments" in effects[0].reason
    assert h.create("still-serving").error_code == ErrorCode.none


def test_an_overlong_varint_of_a_non_null_string_still_decodes():
    """80 00 is 0 (null); 82 00 is 2, a string of one byte, as Kafka's readUnsignedVarint reads it."""
    frame = request_frame(SYNC_GROUP, 5, body={"group_id": "g", "generation_id": 1, "member_id": "m",
                                                "group_instance_id": None, "protocol_type": "c",
                                                "protocol_name": None, "assignments": []})
    at = frame.index(b"\x02c")
    _, body = decode_request(frame[:at] + b"\x82\x00c" + frame[at + 2:])
    assert body.protocol_type == "c" and body.assignments == ()


class Boom(Exception):
    pass


def _failing(h: Harness, api_key: int, exc: Exception) -> None:
    def handler(*args, **kwargs):
        raise exc
    h.broker.apis._handlers[api_key] = handler


def test_an_error_in_a_handler_answers_unknown_server_error_and_the_broker_serves_on():
    h = Harness()
    h.create("t", partitions=2)
    _failing(h, LIST_OFFSETS, Boom("a handler's bug"))
    frame = request_frame(LIST_OFFSETS, 5, correlation_id=41, body={
        "replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1},
                                         {"partition_index": 1, "timestamp": -1}]}]})
    effects = h.broker.handle_request(3, frame, h.now)
    logs = [e for e in effects if isinstance(e, LogLine)]
    assert len(logs) == 1 and logs[0].level == "error" and logs[0].kind == "request failed"
    assert "Boom: a handler's bug (at test_request_failures.py" in logs[0].message
    (send,) = [e for e in effects if isinstance(e, Send)]
    correlation, body = read_response(b"".join(bytes(b) for b in send.buffers), LIST_OFFSETS, 5)
    assert correlation == 41
    # every part of the request is answered, under its name and index, as Kafka's getErrorResponse
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in body.topics] == \
        [("t", [(0, ErrorCode.unknown_server_error), (1, ErrorCode.unknown_server_error)])]
    assert h.create("still-serving").error_code == ErrorCode.none


def test_an_error_in_a_handler_with_a_top_level_error_code_answers_it():
    h = Harness()
    _failing(h, SYNC_GROUP, TypeError("'NoneType' object is not iterable"))
    frame = request_frame(SYNC_GROUP, 3, correlation_id=9, body={
        "group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None, "assignments": []})
    (send,) = [e for e in h.broker.handle_request(3, frame, h.now) if isinstance(e, Send)]
    assert read_response(b"".join(bytes(b) for b in send.buffers), SYNC_GROUP, 3)[1].error_code == \
        ErrorCode.unknown_server_error


def test_a_failed_acks_0_produce_closes_its_connection():
    """It has no answer to carry the error (Kafka closes the connection too)."""
    h = Harness()
    _failing(h, PRODUCE, ValueError("odd"))
    frame = request_frame(PRODUCE, 7, body={"transactional_id": None, "acks": 0, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b""}]}]})
    effects = h.broker.handle_request(3, frame, h.now)
    assert [type(e) for e in effects] == [LogLine, Close]


@pytest.mark.parametrize("exc", [BrokenInvariant("segments overlap"), OSError(5, "Input/output error"),
                                 MemoryError(), MalformedCheckpoint("malformed checkpoint file /d/x: bad"),
                                 CorruptIndexError("transaction index /d/x of 3 bytes is not whole entries")],
                         ids=["invariant", "disk", "memory", "checkpoint", "txn-index"])
def test_a_broken_invariant_a_failing_disk_or_no_memory_stops_the_broker(exc):
    h = Harness()
    _failing(h, METADATA, exc)
    with pytest.raises(type(exc)):
        h.broker.handle_request(3, request_frame(METADATA, 4, body={"topics": None,
                                                                   "allow_auto_topic_creation": False}), h.now)


# -- handlers the fuzzer found wanting

CREATE_PARTITIONS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 37, 33, 44


def test_growing_a_topic_to_two_billion_partitions_is_refused_before_any_planning():
    """The fuzzer's CreatePartitions with count 2147483647 had the controller plan that many
    partitions: the broker stopped answering and grew past 5 GB."""
    h = Harness()
    h.create("t", partitions=1)
    started = time.perf_counter()
    resp = h.call(CREATE_PARTITIONS, 3, {"topics": [{"name": "t", "count": 0x7FFFFFFF, "assignments": None}],
                                         "timeout": 1000, "validate_only": False})
    assert time.perf_counter() - started < 5
    assert resp.results[0].error_code == ErrorCode.invalid_partitions
    assert "above the limit" in resp.results[0].error_message
    assert h.call(CREATE_PARTITIONS, 3, {"topics": [{"name": "t", "count": 3, "assignments": None}],
                                         "timeout": 1000, "validate_only": False}).results[0].error_code == \
        ErrorCode.none


@pytest.mark.parametrize("api_key,version,body", [
    (CREATE_PARTITIONS, 3, lambda n: {"topics": [{"name": "t", "count": 2, "assignments": None}] * n,
                                      "timeout": 1000, "validate_only": True}),
    (ALTER_CONFIGS, 2, lambda n: {"resources": [{"resource_type": 2, "resource_name": "t", "configs": []}] * n,
                                  "validate_only": True}),
    (INCREMENTAL_ALTER_CONFIGS, 1, lambda n: {"resources": [{"resource_type": 2, "resource_name": "t",
                                                             "configs": []}] * n, "validate_only": True}),
], ids=["CreatePartitions", "AlterConfigs", "IncrementalAlterConfigs"])
def test_a_request_naming_one_resource_many_times_is_answered_at_once(api_key, version, body):
    """Duplicates were found by counting each name in the whole list, and the answer waited by
    looking at every resource after each one: the time grew with the square of the entries (40,000
    of them, a 400 kB request, took about a minute). Ten times the entries must now cost about ten
    times the time, not a hundred (the CPU time of each, so that a busy machine does not decide)."""
    h = Harness()
    h.create("t", partitions=1)
    took = {}
    for n in (4_000, 40_000):
        frame = h.frame(api_key, version, body(n))
        started = time.process_time()
        h.run(h.broker.handle_request(1, frame, h.now))
        took[n] = time.process_time() - started
        resp = h.response(api_key, version)
        assert len(resp.results if api_key == CREATE_PARTITIONS else resp.responses) == n
    assert took[40_000] < 30 * took[4_000] + 0.5, took


def test_a_produce_v13_naming_the_zero_topic_id_is_answered_unknown_topic_id():
    """kio reads a zero topic id as None (the frame goes to kio when the fast reader declines it,
    here for its trailing bytes): the answer's encoder failed on it (found by the fuzzer)."""
    h = Harness()
    h.create("t", partitions=1)
    body = {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"topic_id": uuid.UUID(int=0), "partition_data": [{"index": 0, "records": b""}]}]}
    frame = request_frame(PRODUCE, 13, correlation_id=5, body=body) + b"\0\0\0"
    effects = h.broker.handle_request(3, frame, h.now)
    assert [type(e) for e in effects] == [Send]
    _, resp = read_response(b"".join(bytes(b) for b in effects[0].buffers), PRODUCE, 13)
    assert [(p.index, p.error_code) for t in resp.responses for p in t.partition_responses] == \
        [(0, ErrorCode.unknown_topic_id)]
