"""The controller's APIs in the older versions a Kafka 2.8 broker serves: LeaderAndIsr v0-v4,
StopReplica v0-v2, UpdateMetadata v0-v6 (ControlledShutdown v0-v2: test_protocol_control.py).

Frames are laid out by hand from Kafka 2.8.2's ``common/message/*Request.json``. A version that
carries the broker epoch (LeaderAndIsr v2+, StopReplica v1+, UpdateMetadata v5+) is fenced as the
newest and applied; the versions before it are refused with STALE_BROKER_EPOCH (CTL-4, CTL-9)."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from strandline.core.effects import Send
from strandline.protocol import control
from strandline.security.acl import AccessControlEntry, AclOperation, AclPermissionType, PatternType
from strandline.security.acl import ResourcePattern, ResourceType
from tests.unit.broker.test_broker_core import Harness

EPOCH = 0x100000042              # the Harness broker's registration (the czxid of /brokers/ids/1)


def s16(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def ints(*values: int) -> bytes:
    return struct.pack(f">i{len(values)}i", len(values), *values)


def compact(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()


def header(api_key: int, version: int, flexible: bool = False) -> bytes:
    return struct.pack(">hhi", api_key, version, 5) + s16("c") + (b"\0" if flexible else b"")


def registered() -> Harness:
    h = Harness()
    h.run(h.broker.on_registered(EPOCH, h.now))
    assert h.create("s").error_code == ErrorCode.none
    return h


def send(h: Harness, frame: bytes, conn: int = 7) -> dict:
    api_key, version = struct.unpack_from(">hh", frame)
    effects = h.broker.handle_request(conn, frame, h.now)
    [answer] = [e for e in effects if isinstance(e, Send)]
    h.run([e for e in effects if not isinstance(e, Send)])
    data = b"".join(bytes(b) for b in answer.buffers)
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    return control.decode_response(api_key, data[4:], version)


# -- the layouts --------------------------------------------------------------------------------

def test_leader_and_isr_v0_to_v4_follow_kafkas_layouts():
    """v0: partitions ungrouped with their topic's name; v1 adds is_new; v2 the broker epoch and
    partitions grouped by topic; v3 the replicas being added and removed; v4 is v3 flexible."""
    state = struct.pack(">iiii", 0, 7, 1, 3) + ints(1) + struct.pack(">i", 5) + ints(1, 2)
    leaders = struct.pack(">ii", 1, 1) + s16("h") + struct.pack(">i", 9092)
    partition = {"partition_index": 0, "controller_epoch": 7, "leader": 1, "leader_epoch": 3, "isr": [1],
                 "zk_version": 5, "replicas": [1, 2]}
    live = [{"broker_id": 1, "host_name": "h", "port": 9092}]
    frames = {
        0: header(4, 0) + struct.pack(">ii", 1, 7) + struct.pack(">i", 1) + s16("t") + state + leaders,
        1: header(4, 1) + struct.pack(">ii", 1, 7) + struct.pack(">i", 1) + s16("t") + state + b"\1" + leaders,
        2: header(4, 2) + struct.pack(">iiq", 1, 7, 9) + struct.pack(">i", 1) + s16("t") + struct.pack(">i", 1)
        + state + b"\0" + leaders,
        3: header(4, 3) + struct.pack(">iiq", 1, 7, 9) + struct.pack(">i", 1) + s16("t") + struct.pack(">i", 1)
        + state + ints(2) + ints() + b"\0" + leaders,
        4: header(4, 4, True) + struct.pack(">iiq", 1, 7, 9) + b"\2" + compact("t") + b"\2"
        + struct.pack(">iiii", 0, 7, 1, 3) + b"\2" + struct.pack(">i", 1) + struct.pack(">i", 5)
        + b"\3" + struct.pack(">ii", 1, 2) + b"\2" + struct.pack(">i", 2) + b"\1" + b"\0" + b"\0" + b"\0"
        + b"\2" + struct.pack(">i", 1) + compact("h") + struct.pack(">i", 9092) + b"\0" + b"\0",
    }
    bodies = {
        0: {"controller_id": 1, "controller_epoch": 7, "ungrouped_partition_states": [{"topic_name": "t", **partition}],
            "live_leaders": live},
        1: {"controller_id": 1, "controller_epoch": 7,
            "ungrouped_partition_states": [{"topic_name": "t", **partition, "is_new": True}], "live_leaders": live},
        2: {"controller_id": 1, "controller_epoch": 7, "broker_epoch": 9, "topic_states": [
            {"topic_name": "t", "partition_states": [{**partition, "is_new": False}]}], "live_leaders": live},
    }
    bodies[3] = bodies[4] = {**bodies[2], "topic_states": [{"topic_name": "t", "partition_states": [
        {**partition, "adding_replicas": [2], "removing_replicas": [], "is_new": False}]}]}
    for version, frame in frames.items():
        assert control.decode_request(frame) == (4, version, 5, "c", bodies[version]), version
        assert control.encode_request(4, 5, "c", bodies[version], version) == frame
    # the answers of v0-v4: each partition with its topic's name (v4 flexible)
    answer = {"error_code": 0, "partition_errors": [{"topic_name": "t", "partition_index": 0, "error_code": 11}]}
    assert control.encode_response(4, 5, answer, 3) == struct.pack(">ihi", 5, 0, 1) + s16("t") + struct.pack(">ih", 0, 11)
    assert control.encode_response(4, 5, answer, 4) == (struct.pack(">i", 5) + b"\0" + struct.pack(">h", 0) + b"\2"
                                                         + compact("t") + struct.pack(">ih", 0, 11) + b"\0" + b"\0")


def test_stop_replica_v0_to_v2_and_update_metadata_v0_to_v6_follow_kafkas_layouts():
    assert control.decode_request(header(5, 0) + struct.pack(">ii?i", 1, 7, True, 1) + s16("t") + struct.pack(">i", 2)
                                  )[4] == {"controller_id": 1, "controller_epoch": 7, "delete_partitions": True,
                                           "ungrouped_partitions": [{"topic_name": "t", "partition_index": 2}]}
    v1 = {"controller_id": 1, "controller_epoch": 7, "broker_epoch": 9, "delete_partitions": False,
          "topics": [{"name": "t", "partition_indexes": [0, 2]}]}
    assert control.decode_request(header(5, 1) + struct.pack(">iiq?i", 1, 7, 9, False, 1) + s16("t") + ints(0, 2)
                                  )[4] == v1
    assert control.decode_request(header(5, 2, True) + struct.pack(">iiq?", 1, 7, 9, False) + b"\2" + compact("t")
                                  + b"\3" + struct.pack(">ii", 0, 2) + b"\0" + b"\0")[4] == v1
    state = struct.pack(">iiii", 0, 7, 1, 3) + ints(1) + struct.pack(">i", 5) + ints(1)
    partition = {"partition_index": 0, "controller_epoch": 7, "leader": 1, "leader_epoch": 3, "isr": [1],
                 "zk_version": 5, "replicas": [1]}
    endpoint = struct.pack(">i", 9092) + s16("h")
    brokers = {0: struct.pack(">ii", 1, 1) + s16("h") + struct.pack(">i", 9092),
               1: struct.pack(">iii", 1, 1, 1) + endpoint + struct.pack(">h", 0),
               2: struct.pack(">iii", 1, 1, 1) + endpoint + struct.pack(">h", 0) + s16("r"),
               3: struct.pack(">iii", 1, 1, 1) + endpoint + s16("PLAINTEXT") + struct.pack(">h", 0) + s16("r")}
    brokers[4] = brokers[3]
    live = {0: [{"id": 1, "v0_host": "h", "v0_port": 9092}],
            1: [{"id": 1, "endpoints": [{"port": 9092, "host": "h", "security_protocol": 0}]}],
            2: [{"id": 1, "endpoints": [{"port": 9092, "host": "h", "security_protocol": 0}], "rack": "r"}],
            3: [{"id": 1, "endpoints": [{"port": 9092, "host": "h", "listener": "PLAINTEXT", "security_protocol": 0}],
                 "rack": "r"}]}
    live[4] = live[3]
    for version in range(5):
        frame = header(6, version) + struct.pack(">iii", 1, 7, 1) + s16("t") + state + \
            (ints(2) if version == 4 else b"") + brokers[version]
        offline = {"offline_replicas": [2]} if version == 4 else {}
        assert control.decode_request(frame)[4] == {
            "controller_id": 1, "controller_epoch": 7,
            "ungrouped_partition_states": [{"topic_name": "t", **partition, **offline}],
            "live_brokers": live[version]}, version
    v5 = header(6, 5) + struct.pack(">iiqi", 1, 7, 9, 1) + s16("t") + struct.pack(">i", 1) + state + ints(2) + \
        brokers[3]
    assert control.decode_request(v5)[4] == {
        "controller_id": 1, "controller_epoch": 7, "broker_epoch": 9,
        "topic_states": [{"topic_name": "t", "partition_states": [{**partition, "offline_replicas": [2]}]}],
        "live_brokers": live[3]}
    assert control.encode_response(6, 5, {"error_code": 77}, 5) == struct.pack(">ih", 5, 77)
    assert control.encode_response(6, 5, {"error_code": 77}, 6) == struct.pack(">ibhb", 5, 0, 77, 0)


# -- through the broker -------------------------------------------------------------------------

def leader_and_isr(version: int, leader_epoch: int, broker_epoch: int = EPOCH, controller_epoch: int = 1) -> bytes:
    body = {"controller_id": 1, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
            "live_leaders": [{"broker_id": 1, "host_name": "127.0.0.1", "port": 9092}]}
    partition = {"partition_index": 0, "controller_epoch": controller_epoch, "leader": 1,
                 "leader_epoch": leader_epoch, "isr": [1], "zk_version": leader_epoch, "replicas": [1],
                 "adding_replicas": [], "removing_replicas": [], "is_new": False}
    if version <= 1:
        body["ungrouped_partition_states"] = [{"topic_name": "s", **partition}]
    else:
        body["topic_states"] = [{"topic_name": "s", "partition_states": [partition]}]
    return control.encode_request(4, 3, "c", body, version)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_leader_and_isr_v2_to_v4_from_the_registered_controller_is_applied(version):
    """Fenced as v5 (the broker's registration epoch, the controller's epoch and id), then applied
    as v5 without a topic id; answered in the request's version, each partition named."""
    h = registered()
    epoch = h.broker.partitions[("s", 0)].leader_epoch
    controller_epoch = h.broker.controller_epoch
    answer = send(h, leader_and_isr(version, epoch + 1, EPOCH - 1, controller_epoch))
    assert answer == {"error_code": ErrorCode.stale_broker_epoch, "partition_errors": []}
    assert h.broker.partitions[("s", 0)].leader_epoch == epoch
    answer = send(h, leader_and_isr(version, epoch + 1, EPOCH, controller_epoch - 1))
    assert answer["error_code"] == ErrorCode.stale_controller_epoch
    answer = send(h, leader_and_isr(version, epoch + 1, EPOCH, controller_epoch))
    assert answer == {"error_code": 0, "partition_errors": [{"topic_name": "s", "partition_index": 0,
                                                             "error_code": 0}]}
    partition = h.broker.partitions[("s", 0)]
    assert (partition.leader_epoch, partition.is_leader) == (epoch + 1, True)
    # the same epoch again: the partition's error, as v5
    answer = send(h, leader_and_isr(version, epoch + 1, EPOCH, controller_epoch))
    assert answer["partition_errors"][0]["error_code"] == ErrorCode.stale_controller_epoch


@pytest.mark.parametrize("version", [0, 1])
def test_leader_and_isr_v0_v1_without_a_broker_epoch_are_refused(version):
    h = registered()
    epoch = h.broker.partitions[("s", 0)].leader_epoch
    answer = send(h, leader_and_isr(version, epoch + 1, controller_epoch=h.broker.controller_epoch))
    assert answer == {"error_code": ErrorCode.stale_broker_epoch, "partition_errors": []}
    assert h.broker.partitions[("s", 0)].leader_epoch == epoch


def stop_replica(version: int, broker_epoch: int, controller_epoch: int, delete: bool = True) -> bytes:
    body = {"controller_id": 1, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
            "delete_partitions": delete, "ungrouped_partitions": [{"topic_name": "s", "partition_index": 0}],
            "topics": [{"name": "s", "partition_indexes": [0]}]}
    return control.encode_request(5, 3, "c", body, version)


@pytest.mark.parametrize("version", [1, 2])
def test_stop_replica_v1_v2_from_the_registered_controller_stops_and_deletes(version):
    """No leader epoch before v3: the replica stops whatever its epoch (Kafka's NoEpoch)."""
    h = registered()
    ce = h.broker.controller_epoch
    assert send(h, stop_replica(version, EPOCH + 1, ce))["error_code"] == ErrorCode.stale_broker_epoch
    assert ("s", 0) in h.broker.logs.logs
    assert send(h, stop_replica(version, EPOCH, ce)) == {
        "error_code": 0, "partition_errors": [{"topic_name": "s", "partition_index": 0, "error_code": 0}]}
    assert ("s", 0) not in h.broker.partitions and ("s", 0) not in h.broker.logs.logs


def test_stop_replica_v0_without_a_broker_epoch_is_refused():
    h = registered()
    answer = send(h, stop_replica(0, EPOCH, h.broker.controller_epoch))
    assert answer == {"error_code": ErrorCode.stale_broker_epoch, "partition_errors": []}
    assert ("s", 0) in h.broker.partitions and ("s", 0) in h.broker.logs.logs


def update_metadata(version: int, broker_epoch: int, controller_epoch: int, leader_epoch: int) -> bytes:
    partition = {"partition_index": 0, "controller_epoch": controller_epoch, "leader": 2, "leader_epoch": leader_epoch,
                 "isr": [2], "zk_version": leader_epoch, "replicas": [1, 2], "offline_replicas": []}
    endpoint = {"port": 9099, "host": "other", "listener": "PLAINTEXT", "security_protocol": 0}
    body = {"controller_id": 1, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
            "ungrouped_partition_states": [{"topic_name": "s", **partition}],
            "topic_states": [{"topic_name": "s", "partition_states": [partition]}],
            "live_brokers": [{"id": 1, "v0_host": "127.0.0.1", "v0_port": 9092, "endpoints": [dict(endpoint, port=9092)],
                              "rack": None},
                             {"id": 2, "v0_host": "other", "v0_port": 9099, "endpoints": [endpoint], "rack": None}]}
    return control.encode_request(6, 3, "c", body, version)


@pytest.mark.parametrize("version", [5, 6])
def test_update_metadata_v5_v6_from_the_registered_controller_updates_the_cache(version):
    h = registered()
    ce = h.broker.controller_epoch
    assert send(h, update_metadata(version, EPOCH - 1, ce, 50)) == {"error_code": ErrorCode.stale_broker_epoch}
    assert 2 not in h.broker.metadata.brokers
    assert send(h, update_metadata(version, EPOCH, ce, 50)) == {"error_code": 0}
    assert (h.broker.metadata.brokers[2].host, h.broker.metadata.brokers[2].port) == ("other", 9099)
    state = h.broker.metadata.topics["s"].states[0]
    assert (state.leader, state.leader_epoch) == (2, 50)


@pytest.mark.parametrize("version", range(5))
def test_update_metadata_v0_to_v4_without_a_broker_epoch_are_refused(version):
    h = registered()
    assert send(h, update_metadata(version, EPOCH, h.broker.controller_epoch, 50)) == \
        {"error_code": ErrorCode.stale_broker_epoch}
    assert 2 not in h.broker.metadata.brokers
    assert h.broker.metadata.topics["s"].states[0].leader_epoch != 50


def test_cluster_action_is_required_before_the_broker_epoch():
    """As Kafka's KafkaApis: CLUSTER_AUTHORIZATION_FAILED first, whatever the version."""
    h = Harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    h.run(h.broker.on_registered(EPOCH, h.now))
    h.broker.connection_opened(7, "127.0.0.1")
    h.broker.authorizer.load({ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL): frozenset(
        {AccessControlEntry("User:ANONYMOUS", "*", AclOperation.CLUSTER_ACTION, AclPermissionType.DENY)})})
    for frame in (leader_and_isr(0, 5), leader_and_isr(3, 5), stop_replica(0, EPOCH, 1), stop_replica(2, EPOCH, 1),
                  update_metadata(0, EPOCH, 1, 5), update_metadata(6, EPOCH, 1, 5)):
        assert send(h, frame)["error_code"] == ErrorCode.cluster_authorization_failed


def test_the_newest_versions_are_what_strandlines_controller_sends():
    for api_key, (version, _, _) in control.SCHEMAS.items():
        assert struct.unpack_from(">h", control.encode_request(api_key, 1, "c", {
            control.LEADER_AND_ISR: {"controller_id": 1, "controller_epoch": 1, "broker_epoch": 1, "type": 0,
                                     "topic_states": [], "live_leaders": []},
            control.STOP_REPLICA: {"controller_id": 1, "controller_epoch": 1, "broker_epoch": 1, "topic_states": []},
            control.UPDATE_METADATA: {"controller_id": 1, "controller_epoch": 1, "broker_epoch": 1,
                                      "topic_states": [], "live_brokers": []},
            control.CONTROLLED_SHUTDOWN: {"broker_id": 1, "broker_epoch": 1},
            control.GET_REPLICA_LOG_INFO: {"topic_partitions": []}}[api_key]), 2)[0] == version
