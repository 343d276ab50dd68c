"""ISR-5 with AlterIsr (KIP-497) against the mechanisms of two races the explorer found (seeds
4400037 and 4600247), played in both modes of ``inter.broker.protocol.version``.

In both races a leader that had not heard of its topic's deletion shrank its old ISR with a
compare-and-set on the partition state znode's version, and the write landed on the state of the
topic made again under the same name (its versions start at 0 again). The deletion now waits for
every broker that held a replica (test_topic_ids_sim.py); here an operator gives the deletion up
(removes its record by hand, as Kafka's advice for a stuck deletion goes), so the topic is made
again at once and the mechanism can play out: in the legacy mode (2.6) the old leader's write still
lands on the new topic; with AlterIsr (2.8) the leader writes no znode, the controller refuses a
proposal from a broker that does not lead the partition, and its answer is the only source.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from strandline.sim.cluster import SimCluster
from tests.sim.test_replication_sim import LAG_MS, create, produce, produce_request
from tests.sim.test_topic_ids_sim import delete, give_up_the_deletion


def cluster(ibp: str, **more: str) -> SimCluster:
    return SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": str(LAG_MS), "inter.broker.protocol.version": ibp,
                                    **more})


def made_again_on(c: SimCluster, broker: int) -> None:
    body = {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [broker]}], "configs": []}],
            "timeout": 1000, "validate_only": False}
    assert c.call(c.controller_id, 19, 5, body).topics[0].error_code == ErrorCode.none


def writers_of_state(c: SimCluster, record: list) -> None:
    """Record (broker, version) of every write of t-0's state znode from now on."""
    from strandline.coordination import znodes as zn
    from strandline.coordination.store import SetData

    path = zn.TopicPartitionStateZNode.path("t", 0)
    for broker_id, node in c.brokers.items():
        core = node.core
        zk = core.outbox

        def wrap(original, broker_id=broker_id):
            def zk_op(ops, callback, transaction=False):
                record.extend(broker_id for op in ops if isinstance(op, SetData) and op.path == path)
                return original(ops, callback, transaction=transaction)
            return zk_op
        zk.zk = wrap(zk.zk)


@pytest.mark.parametrize("ibp", ["2.6", "2.8"])
def test_isr_5_a_leader_cut_from_the_controller_through_its_topics_deletion_and_recreation(ibp):
    """Seed 4400037's mechanism: the controller cannot reach t-0's leader while t is deleted and
    made again; the old leader, its followers gone, shrinks the old ISR."""
    c = cluster(ibp)
    controller = c.controller_id
    leader, other = [b for b in (1, 2, 3) if b != controller][:2]
    create(c, "t", [leader, controller, other])
    assert produce(c, leader, "t", [b"old"]).error_code == ErrorCode.none
    writes: list[int] = []
    writers_of_state(c, writes)
    c.cut_link(controller, leader)              # the leader hears nothing of the deletion
    delete(c, "t")
    give_up_the_deletion(c, "t")
    made_again_on(c, other)
    assert produce(c, leader, "t", [b"late"], acks=1).error_code == ErrorCode.none
    c.advance(3 * LAG_MS)                       # the old leader shrinks its old ISR
    c.heal_link(controller, leader)
    c.advance(3 * LAG_MS)
    state = c.state("t")
    if ibp == "2.6":                            # the race: the old leader's write is on the new topic
        assert leader in writes
        assert (state.leader, tuple(state.isr)) == (leader, (leader,)), state
    else:                                       # only the controller writes; it refused the proposal
        assert leader not in writes and set(writes) <= {controller}
        assert (state.leader, tuple(state.isr)) == (other, (other,)), state
        assert produce(c, other, "t", [b"new"]).error_code == ErrorCode.none


def test_isr_5_a_leader_paused_past_its_session_through_its_topics_deletion_and_recreation():
    """Seed 4600247's mechanism with AlterIsr: t-0's leader is paused past its ZooKeeper session
    while t is deleted and made again; resumed, it proposes to shrink the old ISR (its followers
    had stopped fetching from it) with the broker epoch of its lost registration, then registers
    again: only the controller writes the state, and the new topic keeps its own."""
    c = cluster("2.8", **{"zookeeper.session.timeout.ms": "6000"})
    controller = c.controller_id
    leader, other = [b for b in (1, 2, 3) if b != controller][:2]
    create(c, "t", [leader, controller, other])
    assert produce(c, leader, "t", [b"old"]).error_code == ErrorCode.none
    writes: list[int] = []
    writers_of_state(c, writes)
    c.partition_brokers([leader])               # its followers stop hearing from it
    produce_request(c, leader, "t", [b"late"], acks=1)
    c.advance(10)
    c.pause(leader)
    c.heal_all_links()
    c.advance(8000)                             # its session expired: it is not live
    assert leader not in c.brokers[controller].core.controller.ctx.live_brokers
    delete(c, "t")
    c.advance(1000)
    give_up_the_deletion(c, "t")
    made_again_on(c, other)
    c.resume(leader)
    c.advance(3 * LAG_MS)
    state = c.state("t")
    assert leader not in writes and set(writes) <= {controller}
    assert (state.leader, tuple(state.isr)) == (other, (other,)), state


@pytest.mark.parametrize("ibp", ["2.8", "2.6"])
def test_isr_3_with_alter_isr_a_shrink_waits_for_a_live_controller(ibp):
    """ISR-3, ACK-1: the controller and a follower stop (SIGSTOP) together. In the legacy mode the
    leader writes the shrink itself and an acks=all write is acknowledged once the lag time is
    past; with AlterIsr only the controller can decide it, so the write waits until the stopped
    controller's session expires and its successor writes the shrink (Kafka 2.8 as well)."""
    c = SimCluster((1, 2, 3, 4), **{"replica.lag.time.max.ms": str(LAG_MS), "inter.broker.protocol.version": ibp})
    ctl = c.controller_id
    leader, other, follower = [b for b in (1, 2, 3, 4) if b != ctl]
    create(c, "n", [leader, other, follower], min_isr=2)
    assert produce(c, leader, "n", [b"m1"]).error_code == ErrorCode.none
    stopped_at = c.now
    c.pause(ctl)
    c.pause(follower)
    produce_request(c, leader, "n", [b"m2"], client="waits", timeout_ms=60000)
    answer = None
    while answer is None and c.now < stopped_at + 60000:
        c.advance(100)
        answer = c.response(leader, 0, 7, "waits")
    assert answer is not None and answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    waited_ms = c.now - stopped_at
    if ibp == "2.6":
        assert waited_ms <= 2 * LAG_MS
    else:
        assert c.session_timeout_ms <= waited_ms <= c.session_timeout_ms + 2 * LAG_MS
        assert c.controller_id != ctl
    assert c.state("n").isr == (leader, other)
