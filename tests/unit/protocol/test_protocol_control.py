"""The controller's requests in Kafka 2.8/3.x layouts (LeaderAndIsr v5, UpdateMetadata v7, StopReplica
v3) and how a broker treats bad or stale ones (CTL-4)."""

from __future__ import annotations

import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode

from strandline.core.effects import Close, Send
from strandline.protocol import control
from strandline.protocol.frames import ProtocolError
from tests.unit.broker.test_broker_core import Harness

TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")
EPOCH = 0x100000042              # the Harness broker's registration (the czxid of /brokers/ids/1)
LEADER_AND_ISR = {
    "controller_id": 1, "controller_epoch": 7, "broker_epoch": 42, "type": 0,
    "topic_states": [{"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": [
        {"partition_index": 0, "controller_epoch": 7, "leader": 2, "leader_epoch": 3, "isr": [2, 1],
         "zk_version": 5, "replicas": [2, 1, 3], "adding_replicas": [3], "removing_replicas": [], "is_new": False}]}],
    "live_leaders": [{"broker_id": 2, "host_name": "127.0.0.1", "port": 9093}],
}


def test_leader_and_isr_v5_bytes_follow_kafkas_layout():
    """Flexible (KIP-482): the v2 request header, compact strings and arrays (length + 1 as an
    unsigned varint), an empty tagged-field section after each struct; the topic id (KIP-516)."""
    frame = control.encode_request(control.LEADER_AND_ISR, 99, "ctl", LEADER_AND_ISR)
    expected = (struct.pack(">hhih", 4, 5, 99, 3) + b"ctl" + b"\0"
                + struct.pack(">iiqb", 1, 7, 42, 0)
                + b"\2" + b"\2t" + TOPIC_ID.bytes
                + b"\2" + struct.pack(">iiii", 0, 7, 2, 3)
                + b"\3" + struct.pack(">ii", 2, 1) + struct.pack(">i", 5) + b"\4" + struct.pack(">iii", 2, 1, 3)
                + b"\2" + struct.pack(">i", 3) + b"\1" + b"\0" + b"\0" + b"\0"
                + b"\2" + struct.pack(">i", 2) + b"\x0a" + b"127.0.0.1" + struct.pack(">i", 9093) + b"\0"
                + b"\0")
    assert frame == expected
    assert control.decode_request(frame) == (4, 5, 99, "ctl", LEADER_AND_ISR)
    answer = {"error_code": 0, "topics": [{"topic_id": TOPIC_ID, "partition_errors": [
        {"partition_index": 0, "error_code": 11}]}]}
    response = control.encode_response(control.LEADER_AND_ISR, 99, answer)
    assert response == (struct.pack(">i", 99) + b"\0" + struct.pack(">h", 0) + b"\2" + TOPIC_ID.bytes
                        + b"\2" + struct.pack(">ih", 0, 11) + b"\0" + b"\0" + b"\0")
    assert control.decode_response(control.LEADER_AND_ISR, response) == answer


@pytest.mark.parametrize("api_key", [control.UPDATE_METADATA, control.STOP_REPLICA])
def test_other_control_requests_round_trip(api_key):
    body = {control.UPDATE_METADATA: {
        "controller_id": 1, "controller_epoch": 2, "broker_epoch": -1,
        "topic_states": [{"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": [
            {"partition_index": 1, "controller_epoch": 2, "leader": -2, "leader_epoch": 0, "isr": [],
             "zk_version": 0, "replicas": [], "offline_replicas": [3]}]}],
        "live_brokers": [{"id": 1, "endpoints": [{"port": 9092, "host": "h", "listener": "PLAINTEXT",
                                                  "security_protocol": 0}], "rack": None}]},
        control.STOP_REPLICA: {"controller_id": 1, "controller_epoch": 2, "broker_epoch": -1, "topic_states": [
            {"topic_name": "t", "partition_states": [{"partition_index": 0, "leader_epoch": 4, "delete_partition": True},
                                                     {"partition_index": 2, "leader_epoch": -2,
                                                      "delete_partition": False}]}]},
    }[api_key]
    frame = control.encode_request(api_key, 5, "c", body)
    assert control.decode_request(frame)[4] == body
    answer = {"error_code": 0} if api_key == control.UPDATE_METADATA else \
        {"error_code": 0, "partition_errors": [{"topic_name": "t", "partition_index": 0, "error_code": 11}]}
    assert control.decode_response(api_key, control.encode_response(api_key, 5, answer)) == answer


def test_truncated_or_oversized_control_frames_are_refused():
    frame = control.encode_request(control.LEADER_AND_ISR, 1, "c", LEADER_AND_ISR)
    for bad in (frame[:-3], frame[:10] + struct.pack(">iiq", 1, 7, 1) + struct.pack(">i", 1 << 30)):
        with pytest.raises(ProtocolError):
            control.decode_request(bad)
    with pytest.raises(ProtocolError, match="version 6 is not supported"):
        control.decode_request(struct.pack(">hhih", 4, 6, 1, -1))


@pytest.mark.parametrize("api_key", sorted(control.SCHEMAS))
def test_trailing_bytes_after_a_control_request_are_ignored(api_key):
    """As for every other API: Kafka reads the body and ignores what follows it."""
    body = {control.LEADER_AND_ISR: LEADER_AND_ISR,
            control.UPDATE_METADATA: {"controller_id": 1, "controller_epoch": 2, "broker_epoch": 3,
                                      "topic_states": [], "live_brokers": []},
            control.STOP_REPLICA: {"controller_id": 1, "controller_epoch": 2, "broker_epoch": 3, "topic_states": []},
            control.CONTROLLED_SHUTDOWN: {"broker_id": 2, "broker_epoch": 9},
            control.GET_REPLICA_LOG_INFO: {"topic_partitions": [{"topic_id": uuid.UUID(int=3), "partitions": [0]}]},
            }[api_key]
    frame = control.encode_request(api_key, 5, "c", body)
    for extra in (b"\0", b"\1\2\3", b"\xff" * 40):
        assert control.decode_request(frame + extra) == control.decode_request(frame)


def test_a_broker_closes_a_connection_that_sends_a_malformed_control_request_and_keeps_serving():
    h = Harness()
    frame = control.encode_request(control.LEADER_AND_ISR, 1, "c", LEADER_AND_ISR)
    effects = h.broker.handle_request(7, frame[:-5], h.now)
    assert len(effects) == 1 and isinstance(effects[0], Close) and "malformed" in effects[0].reason
    assert h.create("still-serving").error_code == ErrorCode.none


def test_ctl_4_a_request_from_an_older_controller_epoch_is_refused():
    h = Harness()                                 # its controller epoch is 1
    h.run(h.broker.on_registered(EPOCH, h.now))   # its broker epoch is right: only the controller's is stale
    body = dict(LEADER_AND_ISR, controller_epoch=0, broker_epoch=EPOCH)
    effects = h.broker.handle_request(7, control.encode_request(control.LEADER_AND_ISR, 1, "c", body), h.now)
    [send] = [e for e in effects if isinstance(e, Send)]
    answer = control.decode_response(control.LEADER_AND_ISR, b"".join(bytes(b) for b in send.buffers)[4:])
    assert answer["error_code"] == ErrorCode.stale_controller_epoch
    assert ("t", 0) not in h.broker.partitions


def test_ctl_4_a_stop_replica_older_than_the_replicas_leader_epoch_is_fenced():
    """KIP-570: StopReplica v3 names each partition's leader epoch. A StopReplica (a move took the
    replica away) retried late, after a LeaderAndIsr of a newer epoch (the move brought it back),
    must not stop or delete the replica the controller counts on; the deletion of a topic (epoch
    -2) and a request of the current epoch or newer stop it."""
    h = Harness()
    h.run(h.broker.on_registered(EPOCH, h.now))
    assert h.create("s").error_code == ErrorCode.none
    topic_id = h.broker.metadata.topics["s"].topic_id
    epoch = h.broker.controller_epoch
    rm = h.broker.replica_manager

    def control_request(api_key, body):
        answers = []
        h.run(rm.handle_control(api_key, {"controller_id": 1, "controller_epoch": epoch, "broker_epoch": EPOCH,
                                          **body}, lambda answer: answers.append(answer) or [], h.now))
        return answers[0]

    def stop(leader_epoch, delete=True):
        return control_request(control.STOP_REPLICA, {"topic_states": [{"topic_name": "s", "partition_states": [
            {"partition_index": 0, "leader_epoch": leader_epoch, "delete_partition": delete}]}]})

    answer = control_request(control.LEADER_AND_ISR, {"type": 0, "live_leaders": [], "topic_states": [{
        "topic_name": "s", "topic_id": topic_id, "partition_states": [{
            "partition_index": 0, "controller_epoch": epoch, "leader": 1, "leader_epoch": 3, "isr": [1],
            "zk_version": 1, "replicas": [1], "adding_replicas": [], "removing_replicas": [], "is_new": False}]}]})
    assert answer["topics"][0]["partition_errors"][0]["error_code"] == ErrorCode.none
    assert h.broker.partitions[("s", 0)].leader_epoch == 3
    assert stop(2)["partition_errors"][0]["error_code"] == ErrorCode.fenced_leader_epoch
    assert h.broker.partitions[("s", 0)].is_leader and ("s", 0) in h.broker.logs.logs
    assert stop(3, delete=False)["partition_errors"][0]["error_code"] == ErrorCode.none
    assert ("s", 0) in h.broker.partitions and ("s", 0) in h.broker.logs.logs
    assert stop(-2)["partition_errors"][0]["error_code"] == ErrorCode.none      # the topic's deletion
    assert ("s", 0) not in h.broker.partitions and ("s", 0) not in h.broker.logs.logs


def test_a_deletion_in_update_metadata_naming_another_topic_id_leaves_the_topic():
    """UpdateMetadata marks a deleted topic's partitions (leader -2) under the deleted topic's id;
    a broker that already knows a topic made again under that name keeps it."""
    h = Harness()
    h.run(h.broker.on_registered(EPOCH, h.now))
    assert h.create("s").error_code == ErrorCode.none
    epoch = h.broker.controller_epoch

    def deletion(topic_id):
        body = {"controller_id": 1, "controller_epoch": epoch, "broker_epoch": EPOCH, "live_brokers": [],
                "topic_states": [{"topic_name": "s", "topic_id": topic_id, "partition_states": [
                    {"partition_index": 0, "controller_epoch": epoch, "leader": -2, "leader_epoch": 0, "isr": [],
                     "zk_version": 0, "replicas": [], "offline_replicas": []}]}]}
        h.run(h.broker.replica_manager.handle_control(control.UPDATE_METADATA, body, lambda answer: [], h.now))

    deletion(uuid.UUID(int=7))
    assert "s" in h.broker.metadata.topics
    deletion(h.broker.metadata.topics["s"].topic_id)
    assert "s" not in h.broker.metadata.topics


def test_update_metadata_v7_stop_replica_v3_and_controlled_shutdown_v3_bytes_follow_kafkas_layouts():
    """Field order and encodings of Kafka's UpdateMetadataRequest v7, StopReplicaRequest v3 and
    ControlledShutdownRequest v3 (all flexible)."""
    update = {"controller_id": 1, "controller_epoch": 2, "broker_epoch": 3, "topic_states": [
        {"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": [
            {"partition_index": 0, "controller_epoch": 2, "leader": 1, "leader_epoch": 4, "isr": [1],
             "zk_version": 5, "replicas": [1], "offline_replicas": []}]}],
        "live_brokers": [{"id": 1, "endpoints": [{"port": 9092, "host": "h", "listener": "PLAINTEXT",
                                                  "security_protocol": 0}], "rack": None}]}
    assert control.encode_request(control.UPDATE_METADATA, 7, "c", update) == (
        struct.pack(">hhih", 6, 7, 7, 1) + b"c" + b"\0" + struct.pack(">iiq", 1, 2, 3)
        + b"\2" + b"\2t" + TOPIC_ID.bytes + b"\2" + struct.pack(">iiii", 0, 2, 1, 4) + b"\2" + struct.pack(">i", 1)
        + struct.pack(">i", 5) + b"\2" + struct.pack(">i", 1) + b"\1" + b"\0" + b"\0"
        + b"\2" + struct.pack(">i", 1) + b"\2" + struct.pack(">i", 9092) + b"\2h" + b"\x0aPLAINTEXT"
        + struct.pack(">h", 0) + b"\0" + b"\0" + b"\0" + b"\0")
    stop = {"controller_id": 1, "controller_epoch": 2, "broker_epoch": 3, "topic_states": [
        {"topic_name": "t", "partition_states": [{"partition_index": 0, "leader_epoch": 4, "delete_partition": True}]}]}
    assert control.encode_request(control.STOP_REPLICA, 7, "c", stop) == (
        struct.pack(">hhih", 5, 3, 7, 1) + b"c" + b"\0" + struct.pack(">iiq", 1, 2, 3)
        + b"\2" + b"\2t" + b"\2" + struct.pack(">ii?", 0, 4, True) + b"\0" + b"\0" + b"\0")
    shutdown = {"broker_id": 2, "broker_epoch": 9}
    assert control.encode_request(control.CONTROLLED_SHUTDOWN, 7, "c", shutdown) == (
        struct.pack(">hhih", 7, 3, 7, 1) + b"c" + b"\0" + struct.pack(">iq", 2, 9) + b"\0")
    answer = {"error_code": 0, "remaining_partitions": [{"topic_name": "t", "partition_index": 1}]}
    assert control.encode_response(control.CONTROLLED_SHUTDOWN, 7, answer) == (
        struct.pack(">i", 7) + b"\0" + struct.pack(">h", 0) + b"\2" + b"\2t" + struct.pack(">i", 1) + b"\0" + b"\0")


def test_controlled_shutdown_v0_to_v2_are_read_in_kafkas_layouts_and_answered_in_theirs():
    """Kafka's ControlledShutdownRequest v0 has the v0 request header (no client id), v1 the v1
    header, v2 adds the broker epoch (KIP-380); none is flexible, nor are their responses. They are
    read so that the controller can refuse them with an error code (v0 and v1 carry no epoch)."""
    frames = {0: struct.pack(">hhii", 7, 0, 5, 2),
              1: struct.pack(">hhih", 7, 1, 5, 1) + b"c" + struct.pack(">i", 2),
              2: struct.pack(">hhih", 7, 2, 5, 1) + b"c" + struct.pack(">iq", 2, 9)}
    bodies = {0: {"broker_id": 2}, 1: {"broker_id": 2}, 2: {"broker_id": 2, "broker_epoch": 9}}
    for version, frame in frames.items():
        assert control.encode_request(control.CONTROLLED_SHUTDOWN, 5, "c", bodies[version], version) == frame
        assert control.decode_request(frame) == (7, version, 5, None if version == 0 else "c", bodies[version])
        answer = {"error_code": 77, "remaining_partitions": [{"topic_name": "t", "partition_index": 1}]}
        response = control.encode_response(control.CONTROLLED_SHUTDOWN, 5, answer, version)
        assert response == struct.pack(">ihi", 5, 77, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
        assert control.decode_response(control.CONTROLLED_SHUTDOWN, response, version) == answer
    with pytest.raises(ProtocolError, match="version 4"):
        control.decode_request(struct.pack(">hhih", 7, 4, 5, -1))


def test_ctl_9_controlled_shutdown_without_the_brokers_current_epoch_is_refused():
    """The single-broker harness is its own controller: v0, v1 (no epoch), v2 and v3 naming -1 or
    another epoch are answered STALE_BROKER_EPOCH in their own version; the current one is taken."""
    h = Harness()
    h.run(h.broker.on_registered(EPOCH, h.now))
    h.broker.controller.ctx.broker_epochs[1] = EPOCH       # as the controller read /brokers/ids/1
    assert h.create("s").error_code == ErrorCode.none

    def shutdown(version, body):
        effects = h.broker.handle_request(7, control.encode_request(control.CONTROLLED_SHUTDOWN, 1, "c", body,
                                                                    version), h.now)
        [send] = [e for e in effects if isinstance(e, Send)]
        frame = b"".join(bytes(b) for b in send.buffers)[4:]
        return control.decode_response(control.CONTROLLED_SHUTDOWN, frame, version)["error_code"]

    for version, body in [(0, {"broker_id": 1}), (1, {"broker_id": 1}), (2, {"broker_id": 1, "broker_epoch": -1}),
                          (3, {"broker_id": 1, "broker_epoch": EPOCH - 1}), (3, {"broker_id": 1, "broker_epoch": -1}),
                          (3, {"broker_id": 2, "broker_epoch": EPOCH})]:
        assert shutdown(version, body) == ErrorCode.stale_broker_epoch, (version, body)
        assert not h.broker.controller.ctx.shutting_down
    assert shutdown(2, {"broker_id": 1, "broker_epoch": EPOCH}) == ErrorCode.none
    assert h.broker.controller.ctx.shutting_down == {1}
