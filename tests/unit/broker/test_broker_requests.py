"""Requests through the broker core that Kafka answers and Strandline used to drop or get wrong:
bytes after a request's body, null arrays, sizes beyond what ZooKeeper can hold, deleting an
internal topic, ListOffsets by timestamp inside a batch, commits for unknown topics."""

from __future__ import annotations

import dataclasses
import struct
import uuid

import pytest
from strandline.protocol.old_versions import request_schema as load_request_schema  # kio's, and the versions kio lacks
from kio.schema.errors import ErrorCode

from strandline.core.effects import Close, Send, ZkRequest
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination import zk_layout
from strandline.coordination import znodes
from strandline.coordination.store import SetData
from strandline.protocol.api import build
from strandline.protocol.records import HEADER_SIZE, compute_crc
from strandline.coordination.metadata import LeaderAndIsr
from tests.unit.batches import make_batch
from tests.unit.broker.test_broker_core import Harness
from tests.unit.protocol.test_protocol_samples import read_response, request_frame


def answer(h: Harness, frame: bytes, api_key: int, version: int, conn: int = 1):
    """Feed one raw request frame; the decoded response body (asserts a well-formed answer)."""
    h.run(h.broker.handle_request(conn, frame, h.now))
    effect = h.sent[conn].pop(0)
    assert isinstance(effect, Send), effect
    return read_response(b"".join(bytes(b) for b in effect.buffers), api_key, version)[1]


def test_an_all_topics_metadata_v12_with_three_trailing_bytes_is_answered():
    """What librdkafka 2.15+ sends for AdminClient.list_topics() and regex subscriptions."""
    h = Harness()
    h.create("listed")
    body = answer(h, null_frame(3, 12, {"topics": None}) + b"\x00\x00\x00", 3, 12)
    assert [t.name for t in body.topics] == ["listed"]


# -- sizes: a topic's znodes are created in one ZooKeeper multi, which ZooKeeper refuses above
# -- jute.maxbuffer (1048575 bytes, closing the connection); Kafka answers a bad size at once

def create(h: Harness, name: str, partitions: int, replication_factor: int = 1, version: int = 4):
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [], "configs": []}], "timeout": 1000, "validate_only": False}
    return answer(h, request_frame(19, version, body=body), 19, version).topics[0]


def test_a_topic_too_big_for_one_zookeeper_request_is_refused_with_invalid_partitions():
    h = Harness()
    result = create(h, "huge", 100_000)
    assert result.error_code == ErrorCode.invalid_partitions
    assert "huge" not in h.broker.metadata.topics and not any(p.startswith("/brokers/topics/huge") for p in h.zk.nodes)


def test_sixteen_million_partitions_are_refused_at_once_naming_the_limit():
    h = Harness()
    result = create(h, "huge", 16_777_215, version=5)
    assert result.error_code == ErrorCode.invalid_partitions
    assert "Number of partitions 16777215 is above the limit of" in result.error_message
    assert "jute.maxbuffer" in result.error_message


def creation_multi_size(h: Harness, name: str, partitions: int, replication_factor: int) -> int | ErrorCode:
    """The size of the ZooKeeper multi a CreateTopics request asks for (not carried out), or the
    error code the request is answered with at once."""
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [], "configs": []}], "timeout": 1000, "validate_only": False}
    effects = h.broker.handle_request(1, request_frame(19, 4, body=body), h.now)
    multis = [e for e in effects if isinstance(e, ZkRequest) and e.transaction]
    if multis:
        return zk_layout.multi_size(multis[0].ops)
    [send] = effects
    return read_response(b"".join(send.buffers), 19, 4)[1].topics[0].error_code


@pytest.mark.parametrize("name_length,brokers", [(1, (1,)), (249, (1,)), (20, (1, 2, 3)),
                                                 (20, (1, 1000, 99999999))])
def test_the_largest_topic_accepted_fits_in_one_zookeeper_request_and_one_more_partition_is_refused(name_length,
                                                                                                     brokers):
    h = Harness(brokers=brokers)
    rf = len(brokers)
    limit = zk_layout.max_partitions(TopicMetadata("n" * name_length, uuid.UUID(int=0), {}, {}, {}), rf,
                                     list(brokers), h.broker.controller_epoch,
                                     h.broker.controller.fenced(h.broker.controller.ctx, []))
    assert creation_multi_size(h, "a" * name_length, limit + 1, rf) == ErrorCode.invalid_partitions
    size = creation_multi_size(h, "b" * name_length, limit, rf)
    assert size <= zk_layout.JUTE_MAXBUFFER
    if len({len(str(b)) for b in brokers}) == 1:   # then every partition costs what the limit assumed
        assert size > zk_layout.JUTE_MAXBUFFER - 2 * size / limit


def test_a_replication_factor_above_the_live_brokers_is_refused_before_any_planning():
    h = Harness()
    result = create(h, "wide", 16_777_215, replication_factor=32767)
    assert result.error_code == ErrorCode.invalid_replication_factor
    assert result.error_message is None or "larger than available brokers" in result.error_message


def test_auto_creation_above_the_limit_answers_at_once_and_creates_nothing():
    h = Harness(**{"num.partitions": "100000"})
    body = answer(h, request_frame(3, 9, body={"topics": [{"name": "auto"}], "allow_auto_topic_creation": True}), 3, 9)
    assert body.topics[0].error_code == ErrorCode.invalid_partitions     # the creation's error, as Kafka
    assert "auto" not in h.broker.metadata.topics


# -- nulls

def null_frame(api_key: int, version: int, body: dict) -> bytes:
    """A request frame with the fields given as None in ``body`` null on the wire (``build`` alone
    would write their defaults)."""
    req = build(load_request_schema(api_key, version), body)
    nulls = {k: None for k, v in body.items() if v is None}
    return request_frame(api_key, version, body=dataclasses.replace(req, **nulls))


@pytest.mark.parametrize("api_key,version,body", [
    (19, 4, {"topics": None, "timeout": 1000, "validate_only": False}),
    (2, 5, {"replica_id": -1, "isolation_level": 0, "topics": None}),
    (20, 4, {"topic_names": None, "timeout": 1000}),
    (20, 6, {"topics": None, "timeout": 1000}),
    (0, 7, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": None}),
    (9, 8, {"groups": None, "require_stable": False}),
], ids=["CreateTopics", "ListOffsets", "DeleteTopics-v4", "DeleteTopics-v6", "Produce", "OffsetFetch-v8"])
def test_a_null_array_the_schema_does_not_allow_closes_only_that_connection(api_key, version, body):
    """Kafka's reader refuses it ("non-nullable field ... was serialized as null") and closes the
    connection; the broker goes on serving everyone else."""
    h = Harness()
    effects = h.broker.handle_request(5, null_frame(api_key, version, body), h.now)
    assert [type(e) for e in effects] == [Close] and "non-nullable field" in effects[0].reason
    assert create(h, "still-serving", 1).error_code == ErrorCode.none


def commit_offsets(h: Harness, group: str, offsets: dict[int, int]) -> None:
    resp = h.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                         "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                             {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                              "committed_metadata": ""} for p, o in offsets.items()]}]})
    assert [p.error_code for t in resp.topics for p in t.partitions] == [ErrorCode.none] * len(offsets)


def group_harness() -> Harness:
    h = Harness(**{"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1"})
    h.create("t", partitions=2)
    h.call(10, 3, {"key": "g", "key_type": 0})      # creates __consumer_offsets
    h.call(10, 3, {"key": "g", "key_type": 0})
    return h


@pytest.mark.parametrize("version", [2, 5, 7])
def test_offset_fetch_with_null_topics_answers_every_committed_offset_of_the_group(version):
    """OffsetFetch v2+: a null topics array means all topics (Kafka's OffsetFetchRequest.isAllPartitions)."""
    h = group_harness()
    commit_offsets(h, "g", {0: 5, 1: 7})
    body = answer(h, null_frame(9, version, {"group_id": "g", "topics": None}), 9, version)
    assert body.error_code == ErrorCode.none
    assert {(t.name, p.partition_index, p.committed_offset) for t in body.topics for p in t.partitions} == \
        {("t", 0, 5), ("t", 1, 7)}


def test_offset_fetch_v8_with_null_topics_for_a_group_answers_every_committed_offset_of_it():
    h = group_harness()
    commit_offsets(h, "g", {0: 3})
    req = build(load_request_schema(9, 8), {"groups": [{"group_id": "g"}], "require_stable": False})
    req = dataclasses.replace(req, groups=(dataclasses.replace(req.groups[0], topics=None),))
    body = answer(h, request_frame(9, 8, body=req), 9, 8)
    [group] = body.groups
    assert group.error_code == ErrorCode.none
    assert [(t.name, p.partition_index, p.committed_offset) for t in group.topics for p in t.partitions] == \
        [("t", 0, 3)]


# -- internal topics

@pytest.mark.parametrize("version", [4, 5, 6])
def test_deleting_the_offsets_topic_is_refused_and_other_topics_in_the_request_are_deleted(version):
    """__consumer_offsets holds every group's committed offsets: DeleteTopics answers
    INVALID_TOPIC_EXCEPTION for it (with a message from v5) and deletes the rest of the request."""
    h = group_harness()
    commit_offsets(h, "g", {0: 5})
    names = ["__consumer_offsets", "t"]
    body = {"topics": [{"name": n} for n in names]} if version >= 6 else {"topic_names": names}
    resp = answer(h, request_frame(20, version, body={**body, "timeout": 1000}), 20, version)
    errors = {r.name: r.error_code for r in resp.responses}
    assert errors == {"__consumer_offsets": ErrorCode.invalid_topic_exception, "t": ErrorCode.none}
    if version >= 5:
        [message] = [r.error_message for r in resp.responses if r.name == "__consumer_offsets"]
        assert "__consumer_offsets is an internal topic" in message
    assert "__consumer_offsets" in h.broker.metadata.topics and "t" not in h.broker.metadata.topics
    assert h.broker.groups.fetch_offsets("g", None)[1][("t", 0)].offset == 5


# -- offset commits

def test_an_offset_commit_for_an_unknown_topic_or_partition_is_refused_for_that_partition_only():
    """Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have, and
    commits the others."""
    h = group_harness()
    resp = h.call(8, 8, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                         "group_instance_id": None, "topics": [
                             {"name": name, "partitions": [{"partition_index": p, "committed_offset": 9,
                                                            "committed_leader_epoch": -1, "committed_metadata": ""}]}
                             for name, p in (("nope", 0), ("t", 0), ("t", 5))]})
    errors = {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
    assert errors == {("nope", 0): ErrorCode.unknown_topic_or_partition, ("t", 0): ErrorCode.none,
                      ("t", 5): ErrorCode.unknown_topic_or_partition}
    assert set(h.broker.groups.fetch_offsets("g", None)[1]) == {("t", 0)}


def test_an_offset_commit_only_for_unknown_topics_is_answered_without_touching_the_group():
    h = group_harness()
    resp = h.call(8, 2, {"group_id": "fresh", "generation_id_or_member_epoch": 3, "member_id": "m",
                         "retention_time_ms": -1, "topics": [{"name": "nope", "partitions": [
                             {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
    assert [(t.name, p.error_code) for t in resp.topics for p in t.partitions] == \
        [("nope", ErrorCode.unknown_topic_or_partition)]


# -- ListOffsets by timestamp: Kafka answers the first record at or after the timestamp (it
# -- decodes the batch, compressed or not), and for MAX_TIMESTAMP (-3) the record holding it

def list_offset(h: Harness, timestamp: int, topic: str = "t", version: int = 7) -> tuple[int, int, int]:
    body = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]}
    p = answer(h, request_frame(2, version, body=body), 2, version).topics[0].partitions[0]
    assert p.error_code == ErrorCode.none
    return p.offset, p.timestamp, p.leader_epoch


def produced(h: Harness, *batches: bytearray, topic: str = "t") -> None:
    for batch in batches:
        h.produce(topic, batch)
        assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none


@pytest.mark.parametrize("compression", [0, 1], ids=["uncompressed", "gzip"])
def test_list_offsets_by_timestamp_answers_the_record_not_the_batch(compression):
    """Issue 10: a batch holding timestamps 1234 and 999999999999; asking for 999999999999 gives offset 1."""
    h = Harness()
    h.create("t")
    produced(h, make_batch([b"a", b"b"], timestamps=[1234, 999999999999], compression=compression))
    assert list_offset(h, 999999999999)[:2] == (1, 999999999999)
    assert list_offset(h, 1235)[:2] == (1, 999999999999)
    assert list_offset(h, 1234)[:2] == (0, 1234)
    assert list_offset(h, 0)[:2] == (0, 1234)
    assert list_offset(h, 1000000000000)[:2] == (-1, -1)


@pytest.mark.parametrize("compression", [0, 1], ids=["uncompressed", "gzip"])
def test_max_timestamp_answers_the_offset_of_the_record_holding_it(compression):
    """Kafka's offsetOfMaxTimestamp: the first record with the largest timestamp, not the batch's last offset."""
    h = Harness()
    h.create("t")
    produced(h, make_batch([b"a", b"b", b"c"], timestamps=[5, 50, 7], compression=compression),
             make_batch([b"d", b"e"], timestamps=[9, 50], compression=compression))
    assert list_offset(h, -3)[:2] == (1, 50)


def test_list_offsets_in_a_log_append_time_topic_answers_the_batchs_first_record():
    h = Harness()
    h.create("t", configs={"message.timestamp.type": "LogAppendTime"})
    produced(h, make_batch([b"a", b"b"], timestamps=[1, 2]), make_batch([b"c", b"d"], timestamps=[3, 4]))
    assert list_offset(h, 0)[:2] == (0, h.now)
    assert list_offset(h, -3)[:2] == (0, h.now)


def test_list_offsets_on_records_that_do_not_decode_answers_corrupt_message_and_goes_on_serving():
    """The CRC covers the records but nothing checked their layout when they were appended."""
    h = Harness()
    h.create("t")
    batch = make_batch([b"a", b"b"], timestamps=[1, 2])
    batch[HEADER_SIZE:] = b"\xff" * (len(batch) - HEADER_SIZE)
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    produced(h, batch)
    for timestamp in (2, -3):
        body = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]}
        [p] = answer(h, request_frame(2, 7, body=body), 2, 7).topics[0].partitions
        assert (p.error_code, p.offset) == (ErrorCode.corrupt_message, -1)
    assert list_offset(h, -1)[0] == 2


# -- work a client-given number must not multiply without bound

def fetch(h: Harness, entries: int, max_bytes: int = 0x7FFFFFFF):
    body = h.fetch_body("t", 0)
    part = body["topics"][0]["partitions"][0]
    body.update(max_bytes=max_bytes)
    part.update(partition_max_bytes=0x7FFFFFFF)
    body["topics"][0]["partitions"] = [part] * entries
    return answer(h, request_frame(1, 11, body=body), 1, 11).responses


def test_a_fetch_reads_at_most_fetch_max_bytes_whatever_the_client_asks():
    """Kafka caps a fetch's max_bytes with the broker's fetch.max.bytes (KIP-541, 55 MiB)."""
    batch = make_batch([b"x" * 1000])
    h = Harness(**{"fetch.max.bytes": str(3 * len(batch))})
    h.create("t")
    produced(h, *[make_batch([b"x" * 1000]) for _ in range(10)])
    [topic] = fetch(h, 1)
    assert len(topic.partitions[0].records) == 3 * len(batch)


def test_a_partition_named_many_times_in_one_fetch_is_read_and_answered_once():
    """As Kafka, whose fetch request keeps one entry per partition (the last)."""
    h = Harness()
    h.create("t")
    produced(h, make_batch([b"a"]))
    [topic] = fetch(h, 1000)
    assert len(topic.partitions) == 1 and topic.partitions[0].high_watermark == 1


def test_a_partition_named_many_times_in_one_leader_election_is_elected_once():
    """Kafka turns ElectLeaders' partitions into a set. Named twice, one partition was written twice
    in one ZooKeeper multi on the same version: it failed, and the controller retried for ever."""
    h = Harness(brokers=(1, 2))
    body = {"topics": [{"name": "e", "num_partitions": -1, "replication_factor": -1, "configs": [],
                        "assignments": [{"partition_index": 0, "broker_ids": [2, 1]}]}],
            "timeout": 1000, "validate_only": False}
    assert h.call(19, 4, body).topics[0].error_code == ErrorCode.none
    path = znodes.TopicPartitionStateZNode.path("e", 0)
    moved = LeaderAndIsr(1, 1, (1, 2), 1, 0)                # led by broker 1, not by its preferred 2
    h.zk.run([SetData(path, znodes.TopicPartitionStateZNode.encode(moved))], False)
    h.broker.controller.ctx.topics["e"].states[0] = dataclasses.replace(moved, zk_version=h.zk.nodes[path][1])
    body = {"election_type": 0, "timeout": 1000, "topic_partitions": [{"topic": "e", "partitions": [0, 0, 0]}]}
    pending = list(h.broker.handle_request(1, request_frame(43, 1, body=body), h.now))
    for _ in range(100):                                    # ZooKeeper answers at once; a retry loop shows
        if not pending:
            break
        effect = pending.pop(0)
        if isinstance(effect, ZkRequest):
            pending += h.broker.on_zk_result(effect.token, h.zk.run(effect.ops, effect.transaction), h.now)
        elif isinstance(effect, (Send, Close)):
            h.sent.setdefault(effect.conn_id, []).append(effect)
    assert not pending
    resp = h.response(43, 1)
    assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in resp.replica_election_results] == [("e", [(0, ErrorCode.none)])]
    assert znodes.TopicPartitionStateZNode.decode(h.zk.nodes[path][0]).leader == 2


def test_a_topic_named_many_times_in_one_metadata_request_is_answered_once():
    """Kafka reads Metadata's topics as a set; each name repeated would repeat every partition."""
    h = Harness()
    h.create("t", partitions=50)
    body = answer(h, request_frame(3, 9, body={"topics": [{"name": "t"}] * 1000,
                                              "allow_auto_topic_creation": False}), 3, 9)
    assert [(t.name, len(t.partitions)) for t in body.topics] == [("t", 50)]


def test_a_partition_named_twice_in_list_offsets_is_an_invalid_request():
    """Kafka 2.8 answers INVALID_REQUEST for every entry of a partition the request names twice."""
    h = Harness()
    h.create("t", partitions=2)
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in (0, 1, 0)]}]}
    parts = answer(h, request_frame(2, 7, body=body), 2, 7).topics[0].partitions
    assert [(p.partition_index, p.error_code) for p in parts] == \
        [(0, ErrorCode.invalid_request), (1, ErrorCode.none), (0, ErrorCode.invalid_request)]
