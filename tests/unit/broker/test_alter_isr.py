"""AlterIsr v0 (KIP-497) on the controller, as a Kafka 2.8.2 controller in ZooKeeper mode serves
it (``KafkaApis.handleAlterIsrRequest``, ``KafkaController.processAlterIsr``): the fencing, the
answers per partition, and the write of an accepted ISR to the partition's state znode (ISR-5)."""

from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from strandline.core.effects import Send
from strandline.security.acl import AccessControlEntry, AclOperation, AclPermissionType, PatternType
from strandline.security.acl import ResourcePattern, ResourceType
from tests.unit.broker.test_broker_core import Harness

EPOCH = 0x1000000a2


def registered() -> Harness:
    """Broker 1, the controller, registered with EPOCH (its /brokers/ids znode's czxid)."""
    h = Harness()
    h.run(h.broker.on_registered(EPOCH, h.now))
    h.broker.controller.ctx.broker_epochs = {1: EPOCH}      # as the controller reads it from ZooKeeper
    assert h.create("t", 2).error_code == ErrorCode.none
    return h


def alter(h: Harness, broker_id: int, epoch: int, *partitions: tuple[str, int, int, list[int]]):
    return h.call(56, 0, {"broker_id": broker_id, "broker_epoch": epoch, "topics": [
        {"name": t, "partitions": [{"partition_index": p, "leader_epoch": le, "new_isr": isr, "current_isr_version": 0}]}
        for t, p, le, isr in partitions]})


def answers(body) -> list[tuple]:
    return [(t.name, p.partition_index, p.error_code, p.leader_id, p.leader_epoch, tuple(p.isr), p.current_isr_version)
            for t in body.topics for p in t.partitions]


def test_a_request_without_a_registered_brokers_epoch_is_stale():
    """What a client's AlterIsr gets: an unknown broker, the unknown epoch -1 or another epoch."""
    h = registered()
    for broker_id, epoch in ((1, -1), (1, EPOCH + 1), (1, 0), (99, EPOCH)):
        body = alter(h, broker_id, epoch, ("t", 0, 0, [1]))
        assert (body.error_code, body.topics) == (ErrorCode.stale_broker_epoch, ()), (broker_id, epoch)


def alter_at(h: Harness, version: int, leader_epoch: int, isr: list[int], broker_id: int = 1):
    return h.call(56, 0, {"broker_id": broker_id, "broker_epoch": EPOCH, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "leader_epoch": leader_epoch, "new_isr": isr,
                                      "current_isr_version": version}]}]})


def znode_state(h: Harness, index: int = 0):
    from strandline.coordination import znodes as zn
    from strandline.coordination.store import GetData
    [res] = h.zk.execute([GetData(zn.TopicPartitionStateZNode.path("t", index))])
    return zn.TopicPartitionStateZNode.decode(res.data, res.version)


def test_a_registered_brokers_request_is_answered_per_partition_and_an_accepted_isr_is_written():
    """ISR-5 with AlterIsr: the controller writes the ISR it accepts, with compare-and-set on the
    version the leader named, and answers the state written with its new version."""
    h = registered()
    body = alter(h, 1, EPOCH, ("t", 0, 0, [1]), ("t", 1, 0, [1, 2]), ("nope", 0, 0, [1]), ("t", 9, 0, [1]))
    assert body.error_code == ErrorCode.none
    assert answers(body) == [
        ("t", 0, ErrorCode.none, 1, 0, (1,), 0),              # already the state proposed: the state
        ("t", 1, ErrorCode.none, 1, 0, (1, 2), 1),            # written: its new version
        ("t", 9, ErrorCode.unknown_topic_or_partition, 0, 0, (), 0),   # grouped by topic, as Kafka
        ("nope", 0, ErrorCode.unknown_topic_or_partition, 0, 0, (), 0)]
    written = h.broker.controller.ctx.topics["t"].states[1]
    assert (written.leader, written.isr, written.zk_version) == (1, (1, 2), 1)
    assert (znode_state(h, 1).isr, znode_state(h, 1).zk_version) == ((1, 2), 1)
    assert znode_state(h, 0).zk_version == 0                 # the one already in place was not written


def test_a_proposal_made_against_an_older_version_is_refused_and_not_written():
    """INVALID_UPDATE_VERSION: the state's version is no longer the one the leader knows."""
    h = registered()
    assert answers(alter_at(h, 0, 0, [1, 2]))[0][2:] == (ErrorCode.none, 1, 0, (1, 2), 1)
    assert answers(alter_at(h, 0, 0, [1, 3]))[0][2] == ErrorCode.invalid_update_version
    assert (znode_state(h).isr, znode_state(h).zk_version) == ((1, 2), 1)
    # asked again after a lost answer: already in place, the state is the answer (nothing written)
    assert answers(alter_at(h, 0, 0, [1, 2]))[0][2:] == (ErrorCode.none, 1, 0, (1, 2), 1)
    assert znode_state(h).zk_version == 1


def test_a_proposal_of_a_broker_that_does_not_lead_is_fenced():
    """A broker that does not lead the partition in that epoch (a topic deleted and made again
    starts its epochs and versions again) is answered FENCED_LEADER_EPOCH, and nothing is written."""
    h = registered()
    h.broker.controller.ctx.broker_epochs[2] = EPOCH
    h.broker.controller.ctx.live_brokers[2] = h.broker.controller.ctx.live_brokers[1]
    assert answers(alter_at(h, 0, 0, [2], broker_id=2))[0][2] == ErrorCode.fenced_leader_epoch
    assert (znode_state(h).leader, znode_state(h).zk_version) == (1, 0)


def test_an_older_leader_epoch_is_fenced():
    h = registered()
    state = h.broker.controller.ctx.topics["t"].states[0]
    h.broker.controller.ctx.topics["t"].states[0] = type(state)(state.leader, 3, state.isr, state.controller_epoch,
                                                                 state.zk_version)
    assert answers(alter(h, 1, EPOCH, ("t", 0, 2, [1]))) == [("t", 0, ErrorCode.fenced_leader_epoch, 0, 0, (), 0)]


def test_a_broker_that_is_not_the_controller_answers_not_controller():
    h = registered()
    h.run(h.broker.controller.resign("a test"))
    body = alter(h, 1, EPOCH, ("t", 0, 0, [1]))
    assert (body.error_code, body.topics) == (ErrorCode.not_controller, ())


def test_cluster_action_is_required_first():
    h = Harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    h.broker.connection_opened(1, "127.0.0.1")
    h.broker.authorizer.load({ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL): frozenset(
        {AccessControlEntry("User:ANONYMOUS", "*", AclOperation.CLUSTER_ACTION, AclPermissionType.DENY)})})
    h.run(h.broker.controller.resign("a test"))      # the authorization is checked before the controller
    body = alter(h, 1, -1, ("t", 0, 0, [1]))
    assert (body.error_code, body.topics) == (ErrorCode.cluster_authorization_failed, ())


def test_alter_isr_v0_on_the_wire():
    """Kafka 2.8's AlterIsrRequest.json / AlterIsrResponse.json laid out by hand (flexible v0)."""
    h = registered()
    client = b"c"
    frame = (struct.pack(">hhih", 56, 0, 42, len(client)) + client + b"\0"
             + struct.pack(">iq", 1, EPOCH) + b"\2" + b"\2t" + b"\2"
             + struct.pack(">ii", 0, 0) + b"\2" + struct.pack(">i", 1) + struct.pack(">i", 0) + b"\0" + b"\0" + b"\0")
    [answer] = [e for e in h.broker.handle_request(5, frame, h.now) if isinstance(e, Send)]
    data = b"".join(bytes(b) for b in answer.buffers)
    body = (struct.pack(">ih", 0, 0) + b"\2" + b"\2t" + b"\2"
            + struct.pack(">ihii", 0, 0, 1, 0) + b"\2" + struct.pack(">i", 1) + struct.pack(">i", 0)
            + b"\0" + b"\0" + b"\0")
    assert data == struct.pack(">ii", len(body) + 5, 42) + b"\0" + body
