"""The newest versions of Produce, JoinGroup, ListGroups, DescribeGroups and InitProducerId that
Kafka 3.x/4.x clients pick: each request is written by kio at that version, answered by the broker
core and read back by kio."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from tests.unit.batches import make_batch
from tests.unit.broker.test_broker_core import Harness


def produce_by_id(h: Harness, topic_id, records: bytes, version: int = 13, acks: int = 1):
    return h.call(0, version, {"transactional_id": None, "acks": acks, "timeout": 1000, "topic_data": [
        {"topic_id": topic_id, "partition_data": [{"index": 0, "records": records}]}]})


def test_produce_v13_addresses_a_topic_by_its_id_and_answers_under_that_id():
    h = Harness()
    h.create("t")
    topic_id = h.broker.metadata.topics["t"].topic_id
    body = produce_by_id(h, topic_id, make_batch([b"a", b"b"]))
    [topic] = body.responses
    assert topic.topic_id == topic_id
    assert [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses] == [(0, ErrorCode.none, 0)]
    assert h.broker.replica_manager.partitions[("t", 0)].log.log_end_offset == 2


def test_produce_v13_with_an_unknown_topic_id_is_unknown_topic_id_and_creates_nothing():
    h = Harness()
    h.create("t")
    stranger = uuid.uuid4()
    body = produce_by_id(h, stranger, make_batch([b"a"]))
    [topic] = body.responses
    assert topic.topic_id == stranger
    assert [(p.error_code, p.base_offset) for p in topic.partition_responses] == [(ErrorCode.unknown_topic_id, -1)]
    assert h.broker.replica_manager.partitions[("t", 0)].log.log_end_offset == 0
    assert set(h.broker.metadata.topics) == {"t"}


def test_produce_v13_mixes_known_and_unknown_ids_in_one_request():
    h = Harness()
    h.create("t")
    topic_id = h.broker.metadata.topics["t"].topic_id
    stranger = uuid.UUID(int=1)
    body = h.call(0, 13, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"topic_id": stranger, "partition_data": [{"index": 0, "records": make_batch([b"x"])}]},
        {"topic_id": topic_id, "partition_data": [{"index": 0, "records": make_batch([b"y"])},
                                                  {"index": 5, "records": make_batch([b"z"])}]}]})
    assert [(t.topic_id, [(p.index, p.error_code) for p in t.partition_responses]) for t in body.responses] == [
        (stranger, [(0, ErrorCode.unknown_topic_id)]),
        (topic_id, [(0, ErrorCode.none), (5, ErrorCode.unknown_topic_or_partition)])]


@pytest.mark.parametrize("version", [11, 12])
def test_produce_v11_and_v12_append_by_name(version):
    h = Harness()
    h.create("t")
    body = h.call(0, version, {"transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": make_batch([b"a"])}]}]})
    assert [(p.error_code, p.base_offset) for p in body.responses[0].partition_responses] == [(ErrorCode.none, 0)]


def test_a_transactional_produce_v12_appends_a_transactional_batch():
    # no transaction coordinator here to verify the batch with or add its partition through (KIP-890
    # parts 1 and 2): the wire format is what is tested
    h = Harness(**{"transaction.partition.verification.enable": "false", "transaction.version": "1"})
    h.create("t")
    batch = make_batch([b"a"], producer_id=7, producer_epoch=0, base_sequence=0)
    batch[21:23] = (0x10).to_bytes(2, "big")            # attributes: transactional
    from strandline.protocol.records import compute_crc
    batch[17:21] = compute_crc(batch, 0, len(batch)).to_bytes(4, "big")
    body = h.call(0, 12, {"transactional_id": "tx", "acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": batch}]}]})
    assert body.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_init_producer_id_v5_gives_an_idempotent_producer_an_id_and_bumps_its_epoch():
    h = Harness()
    first = h.call(22, 5, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                           "producer_epoch": -1})
    assert first.error_code == ErrorCode.none and first.producer_id >= 0 and first.producer_epoch == 0
    bumped = h.call(22, 5, {"transactional_id": None, "transaction_timeout": 60000,
                            "producer_id": first.producer_id, "producer_epoch": 0})
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.none, first.producer_id, 1)


def test_init_producer_id_v6_is_not_advertised():
    from strandline.protocol.api import SUPPORTED, ApiKey
    assert SUPPORTED[ApiKey.INIT_PRODUCER_ID] == (0, 5)


# -- groups, on simulated brokers (the coordinator writes to __consumer_offsets) ------------------

from strandline.sim.cluster import SimCluster  # noqa: E402
from tests.sim.test_groups_sim import SESSION_MS, coordinator  # noqa: E402


def groups_cluster() -> SimCluster:
    return SimCluster((1, 2, 3), **{"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
                                    "replica.lag.time.max.ms": "1000"})


def static_join(instance: str, version: int, reason=None) -> dict:
    body = {"group_id": "st", "session_timeout": SESSION_MS, "rebalance_timeout": SESSION_MS, "member_id": "",
            "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"sub-" + instance.encode()}]}
    if reason is not None:
        body["reason"] = reason
    return body


def stable_static_group(c: SimCluster, version: int):
    """Two static members, "host-a" the leader, synced: (coordinator, leader id, follower id)."""
    coord = coordinator(c, "st")
    first = c.call(coord, 11, version, static_join("host-a", version), "a")
    c.request(coord, 11, version, static_join("host-b", version), "b")            # a rebalance: "a" joins again
    c.request(coord, 11, version, dict(static_join("host-a", version), member_id=first.member_id), "a")
    c.settle()
    a, b = c.response(coord, 11, version, "a"), c.response(coord, 11, version, "b")
    assert a.error_code == b.error_code == ErrorCode.none and a.leader == a.member_id
    c.request(coord, 14, 5, {"group_id": "st", "generation_id": a.generation_id, "member_id": a.member_id,
                             "group_instance_id": "host-a", "protocol_type": "consumer", "protocol_name": "range",
                             "assignments": [{"member_id": a.member_id, "assignment": b"A"},
                                             {"member_id": b.member_id, "assignment": b"B"}]}, "a")
    c.request(coord, 14, 5, {"group_id": "st", "generation_id": b.generation_id, "member_id": b.member_id,
                             "group_instance_id": "host-b", "protocol_type": "consumer", "protocol_name": "range",
                             "assignments": []}, "b")
    c.settle()
    assert c.response(coord, 14, 5, "a").assignment == b"A" and c.response(coord, 14, 5, "b").assignment == b"B"
    return coord, a, b


def describe(c: SimCluster, coord: int, version: int = 6):
    return c.call(coord, 15, version, {"groups": ["st"], "include_authorized_operations": False}, "admin").groups[0]


def test_join_group_v9_a_static_leader_back_with_a_new_id_skips_the_assignment_without_a_rebalance():
    c = groups_cluster()
    coord, a, b = stable_static_group(c, 9)
    again = c.call(coord, 11, 9, static_join("host-a", 9), "a2")
    assert again.error_code == ErrorCode.none and again.member_id != a.member_id
    assert again.generation_id == a.generation_id                  # no rebalance
    assert again.leader == again.member_id and again.skip_assignment is True
    assert sorted((m.group_instance_id, m.metadata) for m in again.members) == [
        ("host-a", b"sub-host-a"), ("host-b", b"sub-host-b")]
    group = describe(c, coord)
    assert group.group_state == "Stable"
    assert {m.member_id for m in group.members} == {again.member_id, b.member_id}
    synced = c.call(coord, 14, 5, {"group_id": "st", "generation_id": again.generation_id, "member_id": again.member_id,
                                   "group_instance_id": "host-a", "protocol_type": "consumer",
                                   "protocol_name": "range", "assignments": []}, "a2")
    assert synced.error_code == ErrorCode.none and synced.assignment == b"A"


def test_join_group_v8_a_static_leader_back_with_a_new_id_is_told_the_old_leader_and_no_members():
    c = groups_cluster()
    coord, a, b = stable_static_group(c, 8)
    again = c.call(coord, 11, 8, static_join("host-a", 8, reason="restarted"), "a2")
    assert again.error_code == ErrorCode.none and again.generation_id == a.generation_id
    assert again.leader == a.member_id and list(again.members) == []
    assert describe(c, coord).group_state == "Stable"


def test_join_group_v9_a_static_follower_back_is_not_the_leader_and_skips_nothing():
    c = groups_cluster()
    coord, a, b = stable_static_group(c, 9)
    again = c.call(coord, 11, 9, static_join("host-b", 9), "b2")
    assert (again.error_code, again.generation_id, again.leader) == (ErrorCode.none, a.generation_id, a.member_id)
    assert again.skip_assignment is False and list(again.members) == []


def test_join_group_v8_reason_is_in_the_rebalance_log_line():
    c = groups_cluster()
    coord = coordinator(c, "st")
    c.call(coord, 11, 8, static_join("host-a", 8, reason="the client's reason"), "a")
    lines = c.brokers[coord].log
    assert any("Preparing to rebalance group st" in line and "client reason: the client's reason" in line
               for line in lines), lines


def test_list_groups_v5_filters_by_type_case_insensitively():
    c = groups_cluster()
    coord, a, b = stable_static_group(c, 9)
    listed = c.call(coord, 16, 5, {"states_filter": [], "types_filter": []}, "admin")
    assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [("st", "classic", "Stable")]
    assert [g.group_id for g in c.call(coord, 16, 5, {"states_filter": ["STABLE"], "types_filter": ["Classic"]},
                                       "admin").groups] == ["st"]
    assert list(c.call(coord, 16, 5, {"states_filter": [], "types_filter": ["consumer"]}, "admin").groups) == []
    assert list(c.call(coord, 16, 5, {"states_filter": ["empty"], "types_filter": []}, "admin").groups) == []


def test_describe_groups_v6_answers_group_id_not_found_and_v5_a_dead_group():
    c = groups_cluster()
    coord = coordinator(c, "st")
    v6 = describe(c, coord, 6)
    assert (v6.error_code, v6.error_message, v6.group_state) == (ErrorCode.group_id_not_found,
                                                                 "Group st not found.", "Dead")
    v5 = describe(c, coord, 5)
    assert (v5.error_code, v5.group_state) == (ErrorCode.none, "Dead")
