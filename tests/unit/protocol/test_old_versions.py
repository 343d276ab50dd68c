"""The API versions Kafka 2.8 serves that newer clients no longer send: Produce v0-v2 with message
sets of format v0 and v1 (up-converted to record batches v2 on append, as Kafka's LogValidator),
Fetch v0-v3 (the stored batches down-converted, as Kafka's RecordsUtil.downConvert), ListOffsets
v0 (``old_style_offsets``), CreateTopics, DeleteTopics, OffsetForLeaderEpoch and DescribeLogDirs'
old versions, OffsetCommit v0-v1 and OffsetFetch v0 (v0 in ZooKeeper), WriteTxnMarkers v0, the ACL
APIs' v0 and DescribeConfigs v0; and that ApiVersions lists a superset of Kafka 2.8's ranges.

Message sets, requests and responses are built and read by kafka-python's own code (its legacy
record builder and reader, and its hand-written protocol structs of the old versions), not by
Strandline's."""

from __future__ import annotations

import io
import struct
import zlib

import crc32c
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.protocol.old.fetch import FetchRequest_v0, FetchRequest_v1, FetchRequest_v2, FetchRequest_v3
from kafka.protocol.old.fetch import FetchResponse_v0, FetchResponse_v1, FetchResponse_v2, FetchResponse_v3
from kafka.protocol.old.list_offsets import ListOffsetsRequest_v0, ListOffsetsResponse_v0
from kafka.protocol.old.produce import ProduceRequest_v0, ProduceRequest_v1, ProduceRequest_v2, ProduceRequest_v3
from kafka.protocol.old.produce import ProduceResponse_v0, ProduceResponse_v1, ProduceResponse_v2, ProduceResponse_v3
from kio.schema.errors import ErrorCode

from strandline.coordination.store import GetData, SetData
from strandline.core.effects import Send
from strandline.protocol.api import SUPPORTED
from strandline.protocol.legacy_records import UnsupportedCompression, down_convert, up_convert
from strandline.protocol.records import crc_ok, iter_batches, iter_records
from tests.unit.batches import keyed_batch, make_batch
from tests.unit.broker.test_broker_core import Harness

NOW = 1_700_000_000_000
PRODUCE_REQUESTS = {0: ProduceRequest_v0, 1: ProduceRequest_v1, 2: ProduceRequest_v2, 3: ProduceRequest_v3}
PRODUCE_RESPONSES = {0: ProduceResponse_v0, 1: ProduceResponse_v1, 2: ProduceResponse_v2, 3: ProduceResponse_v3}
FETCH_REQUESTS = {0: FetchRequest_v0, 1: FetchRequest_v1, 2: FetchRequest_v2, 3: FetchRequest_v3}
FETCH_RESPONSES = {0: FetchResponse_v0, 1: FetchResponse_v1, 2: FetchResponse_v2, 3: FetchResponse_v3}


def message_set(magic: int, codec: int, items, first_offset: int = 0) -> bytes:
    """kafka-python's legacy message set: ``items`` is ``[(timestamp, key, value), ...]``."""
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, (ts, key, value) in enumerate(items):
        assert builder.append(first_offset + i, ts, key, value) is not None
    return bytes(builder.build())


def read_legacy(data: bytes) -> list[tuple]:
    """``(offset, timestamp, timestamp type, key, value)`` of each message, read by kafka-python,
    every CRC checked."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            assert r.validate_crc()
            out.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value))
    return out


def stored(batch) -> list[tuple]:
    [(pos, header)] = list(iter_batches(batch))
    assert header.magic == 2 and crc_ok(batch, pos, header)
    return [(r.offset, r.timestamp, r.key, r.value) for r in iter_records(batch, pos, header)]


ITEMS = [(NOW + 5, b"k0", b"v0"), (NOW + 2, None, b"v1" * 50), (NOW + 9, b"k2", None), (NOW + 1, b"", b"")]


def convert(records, **kw):
    args = dict(max_message_bytes=1 << 20, target_codec=None, compacted=False, max_timestamp_difference_ms=None,
                now_ms=NOW, where="t-0")
    args.update(kw)
    return up_convert(records, **args)


# -- up-conversion ------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", [0, 1, 2, 3])
@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_message_set_becomes_one_record_batch_v2(magic, codec):
    """Offsets from 0, keys and values kept, timestamps kept (magic 1) or NO_TIMESTAMP (magic 0),
    the producer's codec kept (compression.type=producer), CRC-32C right."""
    converted = convert(message_set(magic, codec, ITEMS))
    assert converted.error is ErrorCode.none, converted
    [(_, header)] = list(iter_batches(converted.batch))
    assert header.compression == codec and header.records_count == 4 and header.producer_id == -1
    stamps = [ts for ts, _, _ in ITEMS] if magic == 1 else [-1] * 4
    assert stored(converted.batch) == [(i, stamps[i], k, v) for i, (_, k, v) in enumerate(ITEMS)]
    assert (header.base_timestamp, header.max_timestamp) == (stamps[0], max(stamps))


def test_the_topics_compression_type_is_the_stored_codec():
    converted = convert(message_set(1, 3, ITEMS), target_codec=1)
    [(_, header)] = list(iter_batches(converted.batch))
    assert header.compression == 1
    assert [r[3] for r in stored(converted.batch)] == [v for _, _, v in ITEMS]


def test_what_kafka_refuses_in_a_legacy_message_set():
    one = message_set(1, 0, ITEMS[:1])
    bad_crc = bytearray(one)
    bad_crc[-1] ^= 1
    assert convert(bytes(bad_crc)).error is ErrorCode.corrupt_message
    # magic 0 then magic 1: "Batch magic 1 is not the same as the first batch'es magic byte 0"
    assert convert(message_set(0, 0, ITEMS[:1]) + message_set(1, 0, ITEMS[:1], 1)).error is ErrorCode.invalid_record
    # two compressed wrappers in one set
    assert convert(message_set(1, 1, ITEMS) + message_set(1, 1, ITEMS)).error is ErrorCode.invalid_record
    # an entry larger than max.message.bytes
    assert convert(message_set(1, 0, ITEMS), max_message_bytes=60).error is ErrorCode.message_too_large
    # a size field below the smallest message: CorruptRecordException
    assert convert(struct.pack(">qi", 0, 5) + b"\0" * 5).error is ErrorCode.corrupt_message


def test_a_producer_may_not_set_log_append_time():
    data = bytearray(message_set(1, 0, ITEMS[:1]))
    data[17] |= 0x08                                      # the attributes' timestamp type bit
    data[12:16] = struct.pack(">I", zlib.crc32(bytes(data[16:])))
    converted = convert(bytes(data))
    assert converted.error is ErrorCode.invalid_timestamp and [i for i, _ in converted.record_errors] == [0]


def test_keyless_messages_of_a_compacted_topic_and_timestamps_out_of_range_are_named():
    converted = convert(message_set(1, 2, ITEMS), compacted=True)
    assert converted.error is ErrorCode.invalid_record
    assert [i for i, _ in converted.record_errors] == [1]
    converted = convert(message_set(1, 0, ITEMS + [(NOW - 10_000, b"k", b"v")]), max_timestamp_difference_ms=1000)
    assert converted.error is ErrorCode.invalid_timestamp
    assert [i for i, _ in converted.record_errors] == [4]
    # magic 0 has no timestamps: nothing to check
    assert convert(message_set(0, 0, ITEMS), max_timestamp_difference_ms=1000).error is ErrorCode.none


def test_an_empty_set_appends_nothing_and_a_partial_last_entry_is_left_out():
    assert convert(b"") == (ErrorCode.none, None, None, ())
    whole = message_set(0, 0, ITEMS)
    converted = convert(whole + whole[:20])
    assert converted.error is ErrorCode.none and len(stored(converted.batch)) == 4


# -- down-conversion ----------------------------------------------------------------------------

def test_down_conversion_to_magic_0_is_kafka_pythons_message_set_byte_for_byte():
    batch = keyed_batch([(b"a", b"1"), (None, b"2"), (b"c", None)])
    batch[0:8] = struct.pack(">q", 40)
    assert down_convert(bytes(batch), 0, 0, 1 << 20) == message_set(0, 0, [(None, b"a", b"1"), (None, None, b"2"),
                                                                           (None, b"c", None)], first_offset=40)


def test_down_conversion_to_magic_1_is_kafka_pythons_message_set_byte_for_byte():
    stamps = [NOW + 3, NOW, NOW + 7]
    batch = make_batch([b"x", b"y", b"z"], timestamps=stamps, base_offset=7)
    assert down_convert(bytes(batch), 1, 0, 1 << 20) == message_set(
        1, 0, [(ts, None, v) for ts, v in zip(stamps, (b"x", b"y", b"z"))], first_offset=7)


@pytest.mark.parametrize("codec", [1, 2, 3])
@pytest.mark.parametrize("magic", [0, 1])
def test_a_compressed_batch_becomes_one_wrapper_message(magic, codec):
    """Inner offsets relative (magic 1) or absolute (magic 0), the wrapper's offset the last one;
    magic 0's LZ4 frame with Kafka 0.8's header checksum (kafka-python reads it only so)."""
    stamps = [NOW + 3, NOW, NOW + 7]
    batch = make_batch([b"x" * 100, b"y", b"z"], timestamps=stamps, base_offset=100, compression=codec)
    data = down_convert(bytes(batch), magic, 0, 1 << 20)
    assert struct.unpack_from(">q", data)[0] == 102 and data[17] & 0x07 == codec
    expected_ts = stamps if magic == 1 else [None] * 3
    assert read_legacy(data) == [(100 + i, expected_ts[i], 0 if magic else None, None, v)
                                 for i, v in enumerate((b"x" * 100, b"y", b"z"))]


def test_log_append_time_is_kept_in_magic_1():
    batch = make_batch([b"x", b"y"], timestamps=[NOW, NOW + 1])
    batch[22] |= 0x08
    batch[35:43] = struct.pack(">q", NOW + 500)
    batch[17:21] = struct.pack(">I", crc32c.crc32c(bytes(batch[21:])))
    assert [(o, ts, tt) for o, ts, tt, _, _ in read_legacy(down_convert(bytes(batch), 1, 0, 1 << 20))] == \
        [(0, NOW + 500, 1), (1, NOW + 500, 1)]


def test_control_batches_are_left_out_transactional_records_kept_and_zstd_refused():
    data = make_batch([b"a"], base_offset=0, producer_id=5, producer_epoch=0, base_sequence=0)
    data[22] |= 0x10                                      # transactional
    data[17:21] = struct.pack(">I", crc32c.crc32c(bytes(data[21:])))
    marker = make_batch([b"\0\0\0\0\0\0"], base_offset=1, producer_id=5, producer_epoch=0, base_sequence=-1)
    marker[22] |= 0x30                                    # transactional control batch
    marker[17:21] = struct.pack(">I", crc32c.crc32c(bytes(marker[21:])))
    after = make_batch([b"b"], base_offset=2)
    assert [(o, v) for o, _, _, _, v in read_legacy(down_convert(bytes(data + marker + after), 1, 0, 1 << 20))] == \
        [(0, b"a"), (2, b"b")]
    with pytest.raises(UnsupportedCompression):
        down_convert(bytes(make_batch([b"a"], compression=4)), 1, 0, 1 << 20)


def test_records_below_the_fetch_offset_and_past_the_size_are_left_out():
    data = bytes(make_batch([b"a", b"b", b"c"], base_offset=10) + make_batch([b"d"], base_offset=13))
    assert [o for o, *_ in read_legacy(down_convert(data, 0, 11, 1 << 20))] == [11, 12, 13]
    assert [o for o, *_ in read_legacy(down_convert(data, 0, 11, 10))] == [11, 12]     # first batch whole
    assert down_convert(data[:-3], 0, 0, 1 << 20) == down_convert(data[:-3], 0, 0, 1 << 20)
    assert [o for o, *_ in read_legacy(down_convert(data[:-3], 0, 0, 1 << 20))] == [10, 11, 12]


# -- through the broker -------------------------------------------------------------------------

def call_old(h: Harness, request, response_cls, conn: int = 1):
    h.correlation += 1
    request.with_header(correlation_id=h.correlation, client_id="old-client")
    h.run(h.broker.handle_request(conn, request.encode(header=True), h.now))
    effect = h.sent[conn].pop(0)
    assert isinstance(effect, Send), effect
    frame = b"".join(bytes(b) for b in effect.buffers)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    stream = io.BytesIO(frame)
    body = response_cls.decode(stream, header=True, framed=True)
    assert body.header.correlation_id == h.correlation
    assert stream.read() == b"", "bytes after the response body"
    return body


def produce_old(h, version, topic, records, acks=1):
    body = call_old(h, PRODUCE_REQUESTS[version](
        *(((None,) if version >= 3 else ()) + (acks, 1000, [(topic, [(0, records)])]))), PRODUCE_RESPONSES[version])
    [(name, [partition])] = body.responses
    assert name == topic
    return partition


def fetch_old(h, version, topic, offset, max_bytes=1 << 20):
    args = (-1, 0, 1) + ((1 << 20,) if version >= 3 else ()) + ([(topic, [(0, offset, max_bytes)])],)
    body = call_old(h, FETCH_REQUESTS[version](*args), FETCH_RESPONSES[version])
    [(name, [(index, error, hw, records)])] = body.topics
    assert (name, index) == (topic, 0)
    return error, hw, records


@pytest.mark.parametrize("version,magic", [(0, 0), (1, 0), (2, 1)])
def test_produce_v0_to_v2_appends_and_every_fetch_version_reads_it(version, magic):
    h = Harness()
    h.create("old")
    first = produce_old(h, version, "old", message_set(magic, 1, ITEMS))
    assert first[:3] == (0, 0, 0)
    second = produce_old(h, version, "old", message_set(magic, 0, ITEMS[:2]))
    assert second[:3] == (0, 0, 4)
    if version == 2:
        assert second[3] == -1                    # log_append_time: CreateTime topic
    # the log holds record batches v2 only
    new = h.call(1, 4, h.fetch_body("old", 0))
    stored_batches = new.responses[0].partitions[0].records
    assert [hdr.magic for _, hdr in iter_batches(stored_batches)] == [2, 2]
    stamps = [ts for ts, _, _ in ITEMS] if magic == 1 else [-1] * 4
    for fetch_version in range(4):
        read: list = []
        while len(read) < 6:        # as a consumer: from the offset after the last message read
            error, hw, records = fetch_old(h, fetch_version, "old", read[-1][0] + 1 if read else 0)
            assert (error, hw) == (0, 6) and records
            assert records[16] == (0 if fetch_version <= 1 else 1)       # the magic of the message set
            read += read_legacy(records)
        assert [(o, k, v) for o, _, _, k, v in read] == [(i, k, v) for i, (_, k, v) in enumerate(ITEMS + ITEMS[:2])]
        if fetch_version >= 2:
            assert [ts for _, ts, _, _, _ in read] == stamps + stamps[:2]


def test_produce_v2_answers_the_log_append_time_of_a_log_append_time_topic():
    h = Harness()
    h.create("lat", configs={"message.timestamp.type": "LogAppendTime"})
    assert produce_old(h, 2, "lat", message_set(1, 0, ITEMS))[:4] == (0, 0, 0, h.now)
    error, _, records = fetch_old(h, 2, "lat", 0)
    assert error == 0 and {(ts, tt) for _, ts, tt, _, _ in read_legacy(records)} == {(h.now, 1)}


def test_a_v2_produced_batch_is_read_by_fetch_v0_to_v3():
    h = Harness()
    h.create("new")
    h.produce("new", make_batch([b"a", b"b"], timestamps=[NOW, NOW + 1], compression=2))
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none
    for version in range(4):
        error, hw, records = fetch_old(h, version, "new", 1)
        assert (error, hw) == (0, 2)
        assert [(o, v) for o, _, _, _, v in read_legacy(records)] == [(0, b"a"), (1, b"b")]


def test_produce_v3_with_a_legacy_message_set_is_invalid_record_whatever_its_length():
    """Kafka's ProduceRequest.validateRecords: v3+ carries magic 2 only (INVALID_RECORD), also for a
    message set shorter than a record batch header (61 bytes), which used to be CORRUPT_MESSAGE."""
    h = Harness()
    h.create("t")
    short = message_set(0, 0, [(None, None, b"v")])
    assert len(short) < 61
    for records in (short, message_set(1, 0, ITEMS)):
        assert produce_old(h, 3, "t", records)[1] == ErrorCode.invalid_record


def test_a_bad_message_set_fails_its_partition_alone():
    h = Harness()
    h.create("t")
    bad = bytearray(message_set(1, 0, ITEMS[:1]))
    bad[-1] ^= 1
    assert produce_old(h, 1, "t", bytes(bad))[1] == ErrorCode.corrupt_message
    assert produce_old(h, 1, "t", b"")[:3] == (0, 0, -1)          # nothing appended, as Kafka
    assert produce_old(h, 1, "t", message_set(0, 0, ITEMS[:1]))[:3] == (0, 0, 0)


def test_down_conversion_disabled_is_unsupported_version_and_zstd_unsupported_compression():
    h = Harness()
    h.create("off", configs={"message.downconversion.enable": "false"})
    assert fetch_old(h, 0, "off", 0)[0] == 0                      # no records: nothing to convert
    produce_old(h, 0, "off", message_set(0, 0, ITEMS))
    assert fetch_old(h, 1, "off", 0) == (ErrorCode.unsupported_version, -1, b"")
    h.create("z", configs={"compression.type": "zstd"})
    assert fetch_old(h, 3, "z", 0)[0] == ErrorCode.unsupported_compression_type


def test_list_offsets_v0_answers_old_style_offsets():
    h = Harness()
    h.create("t")
    for _ in range(3):
        produce_old(h, 0, "t", message_set(0, 0, ITEMS))

    def offsets(timestamp, count, replica=-1):
        body = call_old(h, ListOffsetsRequest_v0(replica, [("t", [(0, timestamp, count)])]), ListOffsetsResponse_v0)
        [(name, [(index, error, found)])] = body.topics
        return error, found

    assert offsets(-1, 10) == (0, [12, 0])                # the log end offset, then each segment's start
    assert offsets(-1, 1) == (0, [12])
    assert offsets(-2, 10) == (0, [0])
    assert offsets(NOW - 10**9, 10) == (0, [])            # before anything was written
    body = call_old(h, ListOffsetsRequest_v0(-1, [("missing", [(0, -1, 1)])]), ListOffsetsResponse_v0)
    assert body.topics[0][1][0][1] == ErrorCode.unknown_topic_or_partition


#: Kafka 2.8.2's ApiVersions answer (ApiKeys.zkBrokerApis()), key: (min, max)
KAFKA_2_8 = {
    0: (0, 9), 1: (0, 12), 2: (0, 6), 3: (0, 11), 4: (0, 5), 5: (0, 3), 6: (0, 7), 7: (0, 3), 8: (0, 8), 9: (0, 7),
    10: (0, 3), 11: (0, 7), 12: (0, 4), 13: (0, 4), 14: (0, 5), 15: (0, 5), 16: (0, 4), 17: (0, 1), 18: (0, 3),
    19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 4), 23: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 27: (0, 1),
    28: (0, 3), 29: (0, 2), 30: (0, 2), 31: (0, 2), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 2), 36: (0, 2),
    37: (0, 3), 38: (0, 2), 39: (0, 2), 40: (0, 2), 41: (0, 2), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0),
    46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 56: (0, 0), 57: (0, 0), 60: (0, 0),
    61: (0, 0),
}


#: what Kafka 2.8 advertises that Strandline does not, and why (docs/compatibility.md, "API versions")
def test_every_kafka_2_8_version_is_advertised():
    """ApiVersions lists a superset of Kafka 2.8's ranges, for every API Kafka 2.8 serves."""
    for key, (low, high) in KAFKA_2_8.items():
        assert key in SUPPORTED, key
        lo, hi = SUPPORTED[key]
        assert lo <= low and hi >= high, (key, SUPPORTED[key], (low, high))


def test_batches_without_timestamps_past_the_index_interval_are_appended():
    """Message format v0 has no timestamps (NO_TIMESTAMP, -1), nor may a batch v2 (CreateTime -1).
    Kafka's time index takes no entry while every timestamp is -1; Strandline's used to try one at
    offset -1 once index.interval.bytes (4096) had been written, failing every later produce."""
    h = Harness()
    h.create("untimed")
    for i in range(8):
        h.produce("untimed", make_batch([b"x" * 1000], timestamp_ms=-1))
        assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none, i
    for i in range(8):
        assert produce_old(h, 0, "untimed", message_set(0, 0, [(None, None, b"y" * 1000)]))[:3] == (0, 0, 8 + i)


def test_create_delete_topics_offset_for_leader_epoch_and_describe_log_dirs_old_versions():
    """CreateTopics v0-v1, DeleteTopics v0, OffsetForLeaderEpoch v0-v1 and DescribeLogDirs v0 in
    kafka-python's encoding, as Kafka 2.8 serves them."""
    from kafka.protocol.old.admin import (CreateTopicsRequest_v0, CreateTopicsRequest_v1, CreateTopicsResponse_v0,
                                          CreateTopicsResponse_v1, DeleteTopicsRequest_v0, DeleteTopicsResponse_v0,
                                          DescribeLogDirsResponse_v0)
    from kafka.protocol.old.offset_for_leader_epoch import (OffsetForLeaderEpochRequest_v0,
                                                            OffsetForLeaderEpochRequest_v1,
                                                            OffsetForLeaderEpochResponse_v0,
                                                            OffsetForLeaderEpochResponse_v1)
    h = Harness()
    body = call_old(h, CreateTopicsRequest_v0([("a", 1, 1, [], [])], 1000), CreateTopicsResponse_v0)
    assert body.topics == [("a", 0)]
    body = call_old(h, CreateTopicsRequest_v1([("b", 1, 1, [], []), ("a", 1, 1, [], [])], 1000, False),
                    CreateTopicsResponse_v1)
    assert [(n, e) for n, e, _ in body.topics] == [("b", 0), ("a", ErrorCode.topic_already_exists)]
    assert "b" in h.broker.metadata.topics
    produce_old(h, 0, "a", message_set(0, 0, ITEMS))
    body = call_old(h, OffsetForLeaderEpochRequest_v0([("a", [(0, 0)])]), OffsetForLeaderEpochResponse_v0)
    assert body.topics == [("a", [(0, 0, 4)])]                     # error, partition, end offset
    body = call_old(h, OffsetForLeaderEpochRequest_v1([("a", [(0, 0)])]), OffsetForLeaderEpochResponse_v1)
    assert body.topics == [("a", [(0, 0, 0, 4)])]                  # error, partition, leader epoch, end offset
    # kafka-python's DescribeLogDirs v0 request has partitions as one int32, not an array: by hand
    frame = struct.pack(">hhih", 35, 0, 77, 1) + b"x" + struct.pack(">ih", 1, 1) + b"a" + struct.pack(">ii", 1, 0)
    h.run(h.broker.handle_request(1, frame, h.now))
    out = b"".join(bytes(b) for b in h.sent[1].pop(0).buffers)
    body = DescribeLogDirsResponse_v0.decode(io.BytesIO(out), header=True, framed=True)
    [(error, log_dir, topics)] = body.results
    assert (error, log_dir, [t[0] for t in topics]) == (0, "/data/logs", ["a"])
    body = call_old(h, DeleteTopicsRequest_v0(["b"], 1000), DeleteTopicsResponse_v0)
    assert [tuple(r) for r in body.responses] == [("b", 0)]


def test_acl_apis_v0_see_literal_patterns_only():
    """DescribeAcls, CreateAcls and DeleteAcls v0 have no pattern type: every pattern they name,
    create or match is LITERAL (Kafka 2.8's ``DescribeAclsRequest.normalizeAndValidate``: ANY
    becomes LITERAL), so a PREFIXED ACL created by v1 is neither listed nor deleted by v0."""
    from kafka.protocol.old.admin import (CreateAclsRequest_v0, CreateAclsResponse_v0, DeleteAclsRequest_v0,
                                          DeleteAclsResponse_v0, DescribeAclsRequest_v0, DescribeAclsResponse_v0)
    from strandline.coordination.acl_znodes import ACL_PATHS
    from strandline.coordination.store import Create
    h = Harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    h.zk.execute([Create(path, make_parents=True) for path in ACL_PATHS])
    h.broker.connection_opened(1, "127.0.0.1")
    # TOPIC (2), READ (3), ALLOW (3); v0 creates a literal "orders"
    body = call_old(h, CreateAclsRequest_v0([(2, "orders", "User:a", "*", 3, 3)]), CreateAclsResponse_v0)
    assert [tuple(r) for r in body.results] == [(0, None)]
    created = h.call(30, 1, {"creations": [{"resource_type": 2, "resource_name": "orders", "resource_pattern_type": 4,
                                            "principal": "User:b", "host": "*", "operation": 3,
                                            "permission_type": 3}]})
    assert created.results[0].error_code == ErrorCode.none
    everything = h.call(29, 1, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    assert sorted((r.resource_name, r.pattern_type) for r in everything.resources) == [("orders", 3), ("orders", 4)]
    # ANY resource type (1), ANY operation and permission (1)
    body = call_old(h, DescribeAclsRequest_v0(1, None, None, None, 1, 1), DescribeAclsResponse_v0)
    assert (body.error_code, body.resources) == (0, [(2, "orders", [("User:a", "*", 3, 3)])])
    body = call_old(h, DeleteAclsRequest_v0([(2, "orders", None, None, 1, 1)]), DeleteAclsResponse_v0)
    assert body.filter_results == [(0, None, [(0, None, 2, "orders", "User:a", "*", 3, 3)])]
    left = h.call(29, 1, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                          "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    assert [(r.resource_name, r.pattern_type, r.acls[0].principal) for r in left.resources] == [("orders", 4, "User:b")]


def test_describe_configs_v0_answers_without_sources_and_synonyms():
    """DescribeConfigs v0: ``is_default`` where v1 has the config source, no synonyms.
    ``is_default`` is true for a value from the defaults, as Kafka up to 2.6 wrote it
    (``configEntry.source == ConfigSource.DEFAULT_CONFIG``); Kafka 2.7+ never sets it (false)."""
    from kafka.protocol.old.admin import DescribeConfigsRequest_v0, DescribeConfigsResponse_v0
    h = Harness()
    h.create("cfg", configs={"retention.ms": "600000"})
    body = call_old(h, DescribeConfigsRequest_v0([(2, "cfg", ["retention.ms", "cleanup.policy"])]),
                    DescribeConfigsResponse_v0)
    [(error, message, rtype, name, configs)] = body.results
    assert (error, rtype, name) == (0, 2, "cfg")
    assert sorted(configs) == [("cleanup.policy", "delete", False, True, False),
                               ("retention.ms", "600000", False, False, False)]
    body = call_old(h, DescribeConfigsRequest_v0([(2, "nosuch", None)]), DescribeConfigsResponse_v0)
    assert body.results[0][0] == ErrorCode.unknown_topic_or_partition
    body = call_old(h, DescribeConfigsRequest_v0([(4, "1", ["log.retention.hours"])]), DescribeConfigsResponse_v0)
    assert body.results[0][4] == [("log.retention.hours", "168", True, True, False)]


def test_offset_commit_and_fetch_v0_keep_offsets_in_zookeeper():
    """OffsetCommit v0 writes ``/consumers/<group>/offsets/<topic>/<partition>`` (the offset in
    decimal, no metadata) and OffsetFetch v0 reads it, on any broker, as Kafka 2.8's
    ``zkClient.setOrCreateConsumerOffset`` / ``getConsumerOffset``; v1+ do not see them."""
    from kafka.protocol.old.commit import (OffsetCommitRequest_v0, OffsetCommitResponse_v0, OffsetFetchRequest_v0,
                                           OffsetFetchResponse_v0)
    h = Harness(**{"offset.metadata.max.bytes": "10"})
    h.create("t", partitions=2)

    def commit(group, offsets, metadata=""):
        body = call_old(h, OffsetCommitRequest_v0(group, [(t, [(p, o, metadata)]) for t, p, o in offsets]),
                        OffsetCommitResponse_v0)
        return {(t, p): e for t, ps in body.topics for p, e in ps}

    def fetch(group, wanted):
        body = call_old(h, OffsetFetchRequest_v0(group, [(t, [p]) for t, p in wanted]), OffsetFetchResponse_v0)
        return {(t, p): (o, m, e) for t, ps in body.topics for p, o, m, e in ps}

    # nothing committed: -1 and UNKNOWN_TOPIC_OR_PARTITION, as Kafka's OffsetFetchResponse.UNKNOWN_PARTITION
    assert fetch("g", [("t", 0)]) == {("t", 0): (-1, "", ErrorCode.unknown_topic_or_partition)}
    assert commit("g", [("t", 0, 42), ("t", 1, 7), ("nope", 0, 1), ("t", 9, 1)]) == {
        ("t", 0): 0, ("t", 1): 0, ("nope", 0): ErrorCode.unknown_topic_or_partition,
        ("t", 9): ErrorCode.unknown_topic_or_partition}
    assert h.zk.run([GetData("/consumers/g/offsets/t/0")], False)[0].data == b"42"
    assert commit("g", [("t", 0, 43)]) == {("t", 0): 0}                                  # set again
    assert h.zk.run([GetData("/consumers/g/offsets/t/0")], False)[0].data == b"43"
    assert commit("g", [("t", 1, 8)], metadata="x" * 11) == {("t", 1): ErrorCode.offset_metadata_too_large}
    assert fetch("g", [("t", 0), ("t", 1), ("nope", 0)]) == {
        ("t", 0): (43, "", 0), ("t", 1): (7, "", 0), ("nope", 0): (-1, "", ErrorCode.unknown_topic_or_partition)}
    # a group name ZooKeeper refuses in a path: UNKNOWN_SERVER_ERROR, nothing written
    assert commit("", [("t", 0, 1)]) == {("t", 0): ErrorCode.unknown_server_error}
    assert commit("a/../b", [("t", 0, 1)]) == {("t", 0): ErrorCode.unknown_server_error}
    assert fetch("", [("t", 0)]) == {("t", 0): (-1, "", ErrorCode.unknown_server_error)}
    # a znode that holds no offset
    h.zk.run([SetData("/consumers/g/offsets/t/1", b"seven")], False)
    assert fetch("g", [("t", 1)]) == {("t", 1): (-1, "", ErrorCode.unknown_server_error)}
    # v1+ read the group coordinator's offsets, not ZooKeeper's
    assert h.call(9, 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}).topics[0] \
        .partitions[0].error_code == ErrorCode.not_coordinator


def test_offset_commit_v0_and_offset_fetch_v0_are_authorized_as_kafka():
    from kafka.protocol.old.commit import (OffsetCommitRequest_v0, OffsetCommitResponse_v0, OffsetFetchRequest_v0,
                                           OffsetFetchResponse_v0)
    from strandline.security.acl import AccessControlEntry, AclOperation, AclPermissionType, PatternType
    from strandline.security.acl import ResourcePattern, ResourceType
    h = Harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    h.create("t")
    h.create("secret")
    h.broker.connection_opened(1, "127.0.0.1")
    deny = lambda op: AccessControlEntry("User:ANONYMOUS", "*", op, AclPermissionType.DENY)   # noqa: E731
    h.broker.authorizer.load({
        ResourcePattern(ResourceType.GROUP, "closed", PatternType.LITERAL): frozenset({deny(AclOperation.ALL)}),
        ResourcePattern(ResourceType.TOPIC, "secret", PatternType.LITERAL): frozenset({deny(AclOperation.ALL)})})
    body = call_old(h, OffsetCommitRequest_v0("open", [("t", [(0, 5, "")]), ("secret", [(0, 5, "")])]),
                    OffsetCommitResponse_v0)
    assert {t: ps[0][1] for t, ps in body.topics} == {"t": 0, "secret": ErrorCode.topic_authorization_failed}
    body = call_old(h, OffsetCommitRequest_v0("closed", [("t", [(0, 5, "")])]), OffsetCommitResponse_v0)
    assert body.topics == [("t", [(0, ErrorCode.group_authorization_failed)])]
    body = call_old(h, OffsetFetchRequest_v0("open", [("t", [0]), ("secret", [0])]), OffsetFetchResponse_v0)
    assert {t: ps[0] for t, ps in body.topics} == {"t": (0, 5, "", 0),
                                                   "secret": (0, -1, "", ErrorCode.topic_authorization_failed)}
    body = call_old(h, OffsetFetchRequest_v0("closed", [("t", [0])]), OffsetFetchResponse_v0)
    assert body.topics == [("t", [(0, -1, "", ErrorCode.group_authorization_failed)])]


def test_offset_commit_v1_goes_to_the_coordinator_with_its_commit_timestamp():
    """v1: generation and member as v2+, and a commit timestamp per partition (-1: the broker's
    time), which the stored offset carries (Kafka's OffsetAndMetadata.commitTimestamp)."""
    from kafka.protocol.old.commit import (OffsetCommitRequest_v1, OffsetCommitResponse_v1, OffsetFetchRequest_v1,
                                           OffsetFetchResponse_v1)
    h = Harness(**{"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1"})
    h.create("t", partitions=2)
    h.call(10, 3, {"key": "g", "key_type": 0})      # creates __consumer_offsets
    h.call(10, 3, {"key": "g", "key_type": 0})
    body = call_old(h, OffsetCommitRequest_v1("g", -1, "", [("t", [(0, 11, NOW - 5000, "m0"), (1, 12, -1, "m1")])]),
                    OffsetCommitResponse_v1)
    assert sorted(p for _, ps in body.topics for p in ps) == [(0, 0), (1, 0)]
    body = call_old(h, OffsetFetchRequest_v1("g", [("t", [0, 1])]), OffsetFetchResponse_v1)
    assert sorted(p for _, ps in body.topics for p in ps) == [(0, 11, "m0", 0), (1, 12, "m1", 0)]
    _, offsets = h.broker.groups.fetch_offsets("g", None)
    assert (offsets[("t", 0)].commit_timestamp, offsets[("t", 1)].commit_timestamp) == (NOW - 5000, h.now)
    # an unknown member of a group that has none: as v2+ (UNKNOWN_MEMBER_ID)
    body = call_old(h, OffsetCommitRequest_v1("g", 1, "m", [("t", [(0, 1, -1, "")])]), OffsetCommitResponse_v1)
    assert body.topics[0][1][0][1] == ErrorCode.unknown_member_id


def test_write_txn_markers_v0_writes_the_marker_as_v1():
    """WriteTxnMarkers v0 is v1 before flexible versions (Kafka 2.8 serves both): a frame laid out
    by hand, the answer read by hand."""
    from strandline.protocol.records import compute_crc

    # no transaction coordinator here to verify the batch with (KIP-890)
    h = Harness(**{"transaction.partition.verification.enable": "false"})
    h.create("t")
    txn = make_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=0)
    txn[21:23] = (0x10).to_bytes(2, "big")                       # transactional
    txn[17:21] = compute_crc(txn, 0, len(txn)).to_bytes(4, "big")
    h.call(0, 7, {"transactional_id": "tx", "acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": bytes(txn)}]}]})
    frame = (struct.pack(">hhih", 27, 0, 91, 3) + b"old" + struct.pack(">iqhb", 1, 7, 0, 1)
             + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, 0))
    h.run(h.broker.handle_request(1, frame, h.now))
    out = b"".join(bytes(b) for b in h.sent[1].pop(0).buffers)
    expected = struct.pack(">iiqih", 91, 1, 7, 1, 1) + b"t" + struct.pack(">iih", 1, 0, 0)
    assert out == struct.pack(">i", len(expected)) + expected
    body = h.fetch_body("t", 0)
    body["isolation_level"] = 1
    partition = h.call(1, 11, body).responses[0].partitions[0]
    assert (partition.high_watermark, partition.last_stable_offset) == (2, 2)      # the commit marker at 1
