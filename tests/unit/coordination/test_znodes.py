"""Kafka's znode paths and JSON, byte for byte (SPEC CTL-1, CTL-2).

Expected texts are Kafka 2.x ``ZkData.scala`` formats (2.6 baseline; the topic id of 2.8+). The
"as Kafka wrote it" samples are real Kafka output, whose key order comes from hash maps.
"""

from __future__ import annotations

import json
import uuid

import pytest

from strandline.coordination import znodes as z
from strandline.coordination.store import (CheckVersion, Create, Delete, GetChildren, GetData, OpResult, SetData,
                                           ZkError)
from strandline.coordination.metadata import LeaderAndIsr

TOPIC_ID = uuid.UUID("4b3e0d95-b1a0-4a8f-9c5d-2b6f1e7a8c90")


def test_paths_are_kafkas():
    """CTL-1: the layout."""
    assert z.BrokerIdsZNode.path() == "/brokers/ids"
    assert z.BrokerIdZNode.path(3) == "/brokers/ids/3"
    assert z.TopicsZNode.path() == "/brokers/topics"
    assert z.TopicZNode.path("t") == "/brokers/topics/t"
    assert z.TopicPartitionsZNode.path("t") == "/brokers/topics/t/partitions"
    assert z.TopicPartitionZNode.path("t", 2) == "/brokers/topics/t/partitions/2"
    assert z.TopicPartitionStateZNode.path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert z.ConfigEntityZNode.path("topics", "t") == "/config/topics/t"
    assert z.ConfigEntityZNode.path("brokers", 1) == "/config/brokers/1"
    assert z.ControllerZNode.path() == "/controller"
    assert z.ControllerEpochZNode.path() == "/controller_epoch"
    assert z.IsrChangeNotificationZNode.path() == "/isr_change_notification"
    assert z.IsrChangeNotificationSequenceZNode.path() == "/isr_change_notification/isr_change_"
    assert z.IsrChangeNotificationSequenceZNode.path("0000000007") == "/isr_change_notification/isr_change_0000000007"
    assert z.IsrChangeNotificationSequenceZNode.sequence_number(
        "/isr_change_notification/isr_change_0000000007") == "0000000007"
    assert z.DeleteTopicsZNode.path() == "/admin/delete_topics"
    assert z.DeleteTopicsZNode.path("t") == z.DeleteTopicsTopicZNode.path("t") == "/admin/delete_topics/t"
    assert z.PreferredReplicaElectionZNode.path() == "/admin/preferred_replica_election"
    assert z.ClusterIdZNode.path() == "/cluster/id"
    assert z.ProducerIdBlockZNode.path() == "/latest_producer_id_block"


def test_persistent_paths_are_kafkas_startup_paths():
    """CTL-1: ``ZkData.PersistentZkPaths`` (2.6), plus /config/groups (group configs, which Kafka
    4.x keeps in its metadata log) and /cluster."""
    assert z.PERSISTENT_PATHS == (
        "/consumers", "/brokers/ids", "/brokers/topics", "/config/changes", "/admin/delete_topics",
        "/brokers/seqid", "/isr_change_notification", "/latest_producer_id_block", "/log_dir_event_notification",
        "/config/topics", "/config/clients", "/config/users", "/config/brokers", "/config/groups", "/cluster")


# -- /brokers/ids/<id>


def test_broker_registration_is_json_v4():
    """CTL-2: the ephemeral registration's data."""
    assert z.BrokerIdZNode.encode(1, "10.0.0.1", 9092, None, 1600000000000) == (
        b'{"version":4,"host":"10.0.0.1","port":9092,"jmx_port":-1,"timestamp":"1600000000000",'
        b'"endpoints":["PLAINTEXT://10.0.0.1:9092"],"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"}}')
    with_rack = json.loads(z.BrokerIdZNode.encode(1, "h", 9093, "us-east-1a", 5))
    assert with_rack["rack"] == "us-east-1a" and with_rack["timestamp"] == "5"


@pytest.mark.parametrize("host,rack", [("127.0.0.1", None), ("broker.example", "r1"), ("::1", None)])
def test_broker_registration_round_trip(host, rack):
    data = z.BrokerIdZNode.encode(7, host, 19092, rack, 123)
    assert z.BrokerIdZNode.decode(data, 7) == z.BrokerInfo(7, host, 19092, rack)


def test_broker_registration_as_kafka_wrote_it():
    kafka = (b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://kafka1:9092"],'
             b'"rack":null,"jmx_port":-1,"host":"kafka1","timestamp":"1589982324426","port":9092,"version":4}')
    assert z.BrokerIdZNode.decode(kafka, 1) == z.BrokerInfo(1, "kafka1", 9092, None)
    # v4 with named listeners: the PLAINTEXT one is the client endpoint
    named = (b'{"listener_security_protocol_map":{"REPL":"SSL","CLIENT":"PLAINTEXT"},'
             b'"endpoints":["REPL://h:9093","CLIENT://h:9092"],"jmx_port":-1,"host":null,"port":-1,'
             b'"timestamp":"1","version":4,"rack":"r"}')
    decoded = z.BrokerIdZNode.decode(named, 2)
    assert (decoded.host, decoded.port, decoded.rack) == ("h", 9092, "r")
    # every listener is kept, for the clients and brokers of each (SPEC-less: Kafka's MetadataCache)
    assert decoded.endpoints == (("REPL", "h", 9093, "SSL"), ("CLIENT", "h", 9092, "PLAINTEXT"))
    assert decoded.endpoint("REPL") == ("h", 9093) and decoded.endpoint("OTHER") is None
    v1 = b'{"version":1,"host":"old","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
    assert z.BrokerIdZNode.decode(v1, 3) == z.BrokerInfo(3, "old", 9092, None)


def test_broker_registration_with_several_listeners():
    """Kafka's encoding: an endpoint per advertised listener, the protocol map, the PLAINTEXT
    endpoint at the top (null/-1 without one); decoding gives them back."""
    eps = [("SASL_SSL", "h", 9094, "SASL_SSL"), ("INTERNAL", "h", 9095, "SSL")]
    obj = json.loads(z.BrokerIdZNode.encode(5, "h", 9094, None, 9, endpoints=eps))
    assert obj["endpoints"] == ["SASL_SSL://h:9094", "INTERNAL://h:9095"]
    assert obj["listener_security_protocol_map"] == {"SASL_SSL": "SASL_SSL", "INTERNAL": "SSL"}
    assert obj["host"] is None and obj["port"] == -1 and obj["version"] == 4
    decoded = z.BrokerIdZNode.decode(json.dumps(obj).encode(), 5)
    assert decoded.endpoints == tuple(eps) and decoded.endpoint("INTERNAL") == ("h", 9095)


def test_broker_id_comes_from_the_path_not_the_data():
    data = z.BrokerIdZNode.encode(7, "h", 1, None, 0)
    assert z.BrokerIdZNode.decode(data).id == -1


# -- /brokers/topics/<t>


def test_topic_assignment_without_topic_id_is_version_2():
    assert z.TopicZNode.encode({1: [2, 3, 1], 0: [1, 2, 3]}) == (
        b'{"version":2,"partitions":{"0":[1,2,3],"1":[2,3,1]},"adding_replicas":{},"removing_replicas":{}}')


def test_topic_assignment_with_topic_id_is_kafka_2_8_version_3():
    data = z.TopicZNode.encode({0: [1, 2, 3]}, TOPIC_ID)
    assert data == (b'{"version":3,"partitions":{"0":[1,2,3]},"adding_replicas":{},"removing_replicas":{},'
                    b'"topic_id":"Sz4NlbGgSo-cXStvHnqMkA"}')
    assignment, topic_id = z.TopicZNode.decode(data)
    assert assignment == {0: (1, 2, 3)} and topic_id == TOPIC_ID


def test_topic_assignment_decodes_kafka_versions_1_to_3():
    v1 = b'{"version":1,"partitions":{"1":[2,1],"0":[1,2]}}'
    decoded = z.TopicZNode.decode(v1)
    assert decoded.partitions == {0: (1, 2), 1: (2, 1)} and decoded.topic_id is None
    assert list(decoded.partitions) == [0, 1]
    v2 = b'{"version":2,"partitions":{"0":[1,2,3]},"adding_replicas":{"0":[3]},"removing_replicas":{"0":[4]}}'
    decoded = z.TopicZNode.decode(v2)
    assert decoded.adding_replicas == {0: (3,)} and decoded.removing_replicas == {0: (4,)}
    v3 = (b'{"removing_replicas":{},"partitions":{"0":[1001]},"topic_id":"Sz4NlbGgSo-cXStvHnqMkA",'
          b'"adding_replicas":{},"version":3}')
    assert tuple(z.TopicZNode.decode(v3)) == ({0: (1001,)}, TOPIC_ID)


def test_topic_assignment_round_trip_with_reassignment():
    data = z.TopicZNode.encode({0: (1, 2)}, None, adding_replicas={0: [3]}, removing_replicas={0: [1]})
    decoded = z.TopicZNode.decode(data)
    assert decoded == z.TopicAssignment({0: (1, 2)}, None, {0: (3,)}, {0: (1,)})


def test_uuid_base64_is_kafkas_uuid_string():
    assert z.uuid_to_base64(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert z.uuid_from_base64("Sz4NlbGgSo-cXStvHnqMkA") == TOPIC_ID
    assert z.uuid_from_base64(z.uuid_to_base64(TOPIC_ID)) == TOPIC_ID
    for bad in ("", "abc", "Sz4NlbGgSo-cXStvHnqMkA=", "!" * 22):
        with pytest.raises(ValueError):
            z.uuid_from_base64(bad)


# -- partition state


def test_partition_state_json():
    """CTL-1: ``{leader, leader_epoch, isr, controller_epoch}``; the stat version is the zk_version."""
    state = LeaderAndIsr(leader=2, leader_epoch=5, isr=(2, 3, 1), controller_epoch=7, zk_version=11)
    data = z.TopicPartitionStateZNode.encode(state)
    assert data == b'{"version":1,"leader":2,"leader_epoch":5,"isr":[2,3,1],"controller_epoch":7}'
    assert z.TopicPartitionStateZNode.decode(data, zk_version=11) == state
    assert z.TopicPartitionStateZNode.decode(data).zk_version == 0


def test_partition_state_as_kafka_wrote_it():
    kafka = b'{"controller_epoch":1,"leader":-1,"version":1,"leader_epoch":3,"isr":[1]}'
    assert z.TopicPartitionStateZNode.decode(kafka, 4) == LeaderAndIsr(-1, 3, (1,), 1, 4)
    newer = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1],"leader_recovery_state":0}'
    assert z.TopicPartitionStateZNode.decode(newer).leader == 1


# -- config, controller, cluster id, notifications


def test_config_entity_json():
    data = z.ConfigEntityZNode.encode({"retention.ms": "3600000", "cleanup.policy": "delete",
                                       "unclean.leader.election.enable": True, "min.insync.replicas": 2})
    assert data == (b'{"version":1,"config":{"cleanup.policy":"delete","min.insync.replicas":"2",'
                    b'"retention.ms":"3600000","unclean.leader.election.enable":"true"}}')
    assert z.ConfigEntityZNode.decode(data) == {"cleanup.policy": "delete", "min.insync.replicas": "2",
                                                "retention.ms": "3600000", "unclean.leader.election.enable": "true"}
    assert z.ConfigEntityZNode.encode({}) == b'{"version":1,"config":{}}'
    assert z.ConfigEntityZNode.decode(b"") == {} and z.ConfigEntityZNode.decode(None) == {}


def test_controller_json():
    """CTL-3 layout: the ephemeral /controller and the plain-integer /controller_epoch."""
    data = z.ControllerZNode.encode(2, 1600000000000)
    assert data == b'{"version":1,"brokerid":2,"timestamp":"1600000000000"}'
    assert z.ControllerZNode.decode(data) == 2
    assert z.ControllerZNode.decode(b'{"version":2,"brokerid":3,"timestamp":"1","kraftControllerEpoch":-1}') == 3
    assert z.ControllerEpochZNode.encode(0) == b"0"
    assert z.ControllerEpochZNode.encode(17) == b"17"
    assert z.ControllerEpochZNode.decode(b"17") == 17


def test_cluster_id_json():
    assert z.ClusterIdZNode.encode("Sz4NlbGgSo-cXStvHnqMkA") == b'{"version":"1","id":"Sz4NlbGgSo-cXStvHnqMkA"}'
    assert z.ClusterIdZNode.decode(b'{"version":"1","id":"abc"}') == "abc"
    assert z.new_cluster_id(TOPIC_ID) == "Sz4NlbGgSo-cXStvHnqMkA"
    fresh = z.new_cluster_id()
    assert len(fresh) == 22 and z.uuid_from_base64(fresh).version == 4


def test_isr_change_notification_json():
    data = z.IsrChangeNotificationSequenceZNode.encode([("b", 1), ("a", 0), ("a", 0)])
    assert data == b'{"version":1,"partitions":[{"topic":"a","partition":0},{"topic":"b","partition":1}]}'
    assert z.IsrChangeNotificationSequenceZNode.decode(data) == (("a", 0), ("b", 1))
    assert z.IsrChangeNotificationZNode.encode([("a", 0)]) == z.IsrChangeNotificationSequenceZNode.encode([("a", 0)])


def test_preferred_replica_election_json():
    data = z.PreferredReplicaElectionZNode.encode({("t", 1), ("t", 0)})
    assert data == b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"t","partition":1}]}'
    assert z.PreferredReplicaElectionZNode.decode(data) == (("t", 0), ("t", 1))
    assert z.DeleteTopicsTopicZNode.encode() == b""


# -- malformed data


@pytest.mark.parametrize("decode,data,path", [
    (lambda d: z.BrokerIdZNode.decode(d, 4), b"{not json", "/brokers/ids/4"),
    (lambda d: z.BrokerIdZNode.decode(d, 4), b'{"version":4}', "/brokers/ids/4"),
    (lambda d: z.TopicZNode.decode(d, "t"), b'{"version":2,"partitions":{"0":"x"}}', "/brokers/topics/t"),
    (lambda d: z.TopicZNode.decode(d, "t"), b'{"version":9,"partitions":{}}', "/brokers/topics/t"),
    (lambda d: z.TopicZNode.decode(d), b'[]', "/brokers/topics/<topic>"),
    (lambda d: z.TopicZNode.decode(d, "t"), b'{"version":3,"partitions":{},"topic_id":"nope"}', "/brokers/topics/t"),
    (lambda d: z.TopicPartitionStateZNode.decode(d, topic="t", partition=0), b'{"leader":1}',
     "/brokers/topics/t/partitions/0/state"),
    (lambda d: z.TopicPartitionStateZNode.decode(d), b'{"version":1,"leader":"1","leader_epoch":0,"isr":[],'
                                                     b'"controller_epoch":1}', "/state"),
    (lambda d: z.ConfigEntityZNode.decode(d, "topics", "t"), b'{"config":[1]}', "/config/topics/t"),
    (z.ControllerZNode.decode, b'{"version":1}', "/controller"),
    (z.ControllerEpochZNode.decode, b"one", "/controller_epoch"),
    (z.ControllerEpochZNode.decode, b"", "/controller_epoch"),
    (z.ClusterIdZNode.decode, b"\xff\xfe", "/cluster/id"),
    (z.IsrChangeNotificationSequenceZNode.decode, b'{"version":1,"partitions":[{"topic":1,"partition":0}]}',
     "/isr_change_notification/isr_change_"),
    (z.PreferredReplicaElectionZNode.decode, b'{"version":1}', "/admin/preferred_replica_election"),
])
def test_malformed_data_raises_value_error_naming_the_path(decode, data, path):
    with pytest.raises(ValueError) as info:
        decode(data)
    assert path in str(info.value)
    assert len(str(info.value).splitlines()) == 1


# -- store values


def test_store_ops_are_frozen_values():
    ops = [Create("/a", b"x", ephemeral=True), SetData("/a", b"y", 3), Delete("/a", recursive=True),
           CheckVersion("/a", 0), GetData("/a"), GetChildren("/")]
    assert ops == [Create("/a", b"x", True), SetData("/a", b"y", 3), Delete("/a", -1, True),
                   CheckVersion("/a", 0), GetData("/a"), GetChildren("/")]
    assert len(set(ops)) == 6
    with pytest.raises(AttributeError):
        ops[0].path = "/b"  # type: ignore[misc]
    assert OpResult(ZkError.NONE).ok and not OpResult(ZkError.BAD_VERSION).ok
    assert OpResult(ZkError.NONE) == OpResult(ZkError.NONE, None, -1, (), None, 0)


def test_split_multi_keeps_each_run_within_the_limit_and_the_order():
    from strandline.coordination import zk_layout
    from strandline.coordination.metadata import LeaderAndIsr
    from strandline.coordination.store import CheckVersion

    ops = [zk_layout.update_partition_state("t", i, LeaderAndIsr(2, 1, (2, 3), 5, i)) for i in range(1000)]
    fence = [CheckVersion("/controller_epoch", 4)]
    runs = zk_layout.split_multi(ops, fence, "/chroot", limit=20_000)
    assert [op for run in runs for op in run] == ops and len(runs) > 1
    assert all(zk_layout.multi_size([*fence, *run], "/chroot") <= 20_000 for run in runs)
    assert zk_layout.multi_size([*fence, *runs[0], runs[1][0]], "/chroot") > 20_000     # each run is full
    assert zk_layout.split_multi(ops[:3], fence) == [ops[:3]]
