"""AlterIsr v0 (KIP-497) as a Kafka 2.8.2 controller in ZooKeeper mode fences it
(``KafkaApis.handleAlterIsrRequest``, ``KafkaController.processAlterIsr``), and what Strandline's
controller, which applies no ISR a leader proposes (its leaders write their ISR to ZooKeeper
themselves), answers a request that passes the fencing."""

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


def test_a_registered_brokers_request_is_answered_per_partition_without_applying_it():
    h = registered()
    before = dict(h.broker.controller.ctx.topics["t"].states)
    body = alter(h, 1, EPOCH, ("t", 0, 0, [1]), ("t", 1, 0, [1, 2]), ("nope", 0, 0, [1]), ("t", 9, 0, [1]))
    assert body.error_code == ErrorCode.none
    assert answers(body) == [
        ("t", 0, ErrorCode.none, 1, 0, (1,), 0),              # already the state proposed: the state
        ("t", 1, ErrorCode.invalid_update_version, 0, 0, (), 0),  # cannot be applied: read the state again
        ("t", 9, ErrorCode.unknown_topic_or_partition, 0, 0, (), 0),   # grouped by topic, as Kafka
        ("nope", 0, ErrorCode.unknown_topic_or_partition, 0, 0, (), 0)]
    assert h.broker.controller.ctx.topics["t"].states == before


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
