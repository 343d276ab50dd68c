"""The seed documents' network partitions that cut single links (S0 scenarios 1, 2 and 7) and the
loss case of an isolated leader whose ISR had shrunk to itself (LOSS-4), in the simulator.

The simulator's links are directed: a cut link holds what crosses it, as TCP retransmits, until it
heals or the sender's request times out; ZooKeeper can be cut from one broker alone.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.sim.cluster import SimCluster
from tests.sim.test_replication_faults_sim import produce_many, stall
from tests.sim.test_replication_sim import LAG_MS, create, produce, values_on

FAST = {"replica.lag.time.max.ms": str(LAG_MS), "replica.socket.timeout.ms": "2000",
        "controller.socket.timeout.ms": "2000"}


def test_net_1_a_follower_cut_from_the_leader_leaves_the_isr_writes_go_on_and_it_rejoins_when_healed():
    c = SimCluster((1, 2, 3, 4), **FAST)
    create(c, "a", [2, 3, 4], min_isr=2)
    assert produce(c, 2, "a", [b"m1"]).error_code == ErrorCode.none
    c.cut_link(2, 4)
    c.cut_link(4, 2)
    acked = produce_many(c, 2, "a", [b"w%d" % i for i in range(5)], timeout_ms=3000, wait_ms=2 * LAG_MS)
    assert acked == [b"w%d" % i for i in range(5)]            # acknowledged once 4 left the ISR
    assert c.state("a").isr == (2, 3) and c.state("a").leader == 2
    assert not any(c.partition(b, "a").is_leader for b in (3, 4))   # no split brain
    c.heal_link(2, 4)
    c.heal_link(4, 2)
    c.advance(5000)
    assert set(c.state("a").isr) == {2, 3, 4}
    assert values_on(c, 4, "a") == values_on(c, 2, "a") == [b"m1"] + acked


def test_net_2_a_leader_cut_from_all_followers_shrinks_to_itself_and_min_isr_refuses_acks_all():
    c = SimCluster((1, 2, 3, 4), **FAST)
    create(c, "b", [2, 3, 4], min_isr=2)
    assert produce(c, 2, "b", [b"m1"]).error_code == ErrorCode.none
    c.partition_brokers([2], [3, 4])
    stuck = produce_many(c, 2, "b", [b"x"], timeout_ms=3000, wait_ms=2 * LAG_MS)
    assert stuck == []                                        # waited for the followers, then refused
    assert c.state("b").isr == (2,) and c.state("b").leader == 2
    assert produce(c, 2, "b", [b"y"]).error_code == ErrorCode.not_enough_replicas
    assert not any(c.partition(b, "b").is_leader for b in (3, 4))   # the controller kept leader 2
    c.heal(2)
    c.advance(5000)
    assert set(c.state("b").isr) == {2, 3, 4}
    assert produce(c, 2, "b", [b"m2"]).error_code == ErrorCode.none
    assert values_on(c, 3, "b")[0] == b"m1" and values_on(c, 3, "b")[-1] == b"m2"


def test_net_7_a_controller_cut_from_the_brokers_cannot_deliver_a_leader_change_and_nothing_acknowledged_is_lost():
    c = SimCluster((1, 2, 3, 4), **FAST)
    assert c.controller_id == 1
    create(c, "c", [2, 3, 4], min_isr=2)
    acked = [v for v in (b"m1", b"m2") if produce(c, 2, "c", [v]).error_code == ErrorCode.none]
    assert acked == [b"m1", b"m2"]                            # before any fault: both acknowledged
    c.partition_brokers([1], [2, 3, 4])
    c.crash(2)
    c.advance(100)
    assert c.state("c").leader == 3 and c.state("c").leader_epoch == 1     # decided in ZooKeeper...
    assert not c.partition(3, "c").is_leader                                # ...but not delivered
    assert produce(c, 3, "c", [b"refused"]).error_code == ErrorCode.not_leader_or_follower
    c.heal(1)
    c.advance(3000)
    assert c.partition(3, "c").is_leader
    assert produce(c, 3, "c", [b"m3"]).error_code == ErrorCode.none
    assert values_on(c, 3, "c") == values_on(c, 4, "c") == acked + [b"m3"]


def isolated_leader_with_an_isr_of_one(unclean: bool) -> tuple[SimCluster, list[bytes]]:
    """The followers stall and leave the ISR; the leader is isolated before they are back; with
    min.insync.replicas=1 it acknowledges acks=all writes alone, and its session expires."""
    c = SimCluster((1, 2, 3, 4), **{**FAST, "unclean.leader.election.enable": str(unclean).lower()})
    create(c, "z", [2, 3, 4], min_isr=1)
    assert produce(c, 2, "z", [b"m1"]).error_code == ErrorCode.none
    stall(c, 2, "z", 3, 4)
    assert c.state("z").isr == (2,)
    c.cut_off(2)
    c.resume(3)
    c.resume(4)
    acked = produce_many(c, 2, "z", [b"alone%d" % i for i in range(3)])
    assert acked == [b"alone%d" % i for i in range(3)]       # acks=all, acknowledged by the leader alone
    c.expire_session(2)
    c.advance(1000)
    return c, acked


def test_loss_4_an_isolated_leader_with_an_isr_of_itself_and_min_isr_1_loses_acks_all_writes_to_an_unclean_election():
    c, acked = isolated_leader_with_an_isr_of_one(unclean=True)
    assert c.state("z").leader in (3, 4)
    c.heal(2)
    c.advance(5000)
    survivors = values_on(c, c.state("z").leader, "z")
    assert values_on(c, 2, "z") == survivors
    assert [v for v in acked if v in survivors] == []         # every write it acknowledged alone is lost


def test_loss_4_without_unclean_election_the_partition_waits_offline_for_its_only_isr_member():
    c, acked = isolated_leader_with_an_isr_of_one(unclean=False)
    assert c.state("z").leader == -1
    c.heal(2)
    c.advance(5000)
    assert c.state("z").leader == 2
    assert values_on(c, 3, "z")[-3:] == acked


def test_list_offsets_from_the_debugging_replica_id_is_answered_by_followers_with_their_log_end():
    """Kafka's DEBUGGING_REPLICA_ID (-2): any replica answers ListOffsets, LATEST being its own log
    end offset (the lab samples every replica this way); consumers (-1) still get NOT_LEADER from
    a follower and the high watermark from the leader."""
    c = SimCluster((1, 2, 3), **FAST)
    create(c, "d", [1, 2, 3], min_isr=1)
    assert produce(c, 1, "d", [b"m1", b"m2"]).error_code == ErrorCode.none
    c.cut_link(1, 3)
    c.cut_link(3, 1)                                       # broker 3 stops at m2 but still answers
    assert produce(c, 1, "d", [b"m3"], acks=1).error_code == ErrorCode.none
    c.advance(200)

    def latest(broker: int, replica_id: int):
        body = {"replica_id": replica_id, "isolation_level": 0, "topics": [{"name": "d", "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
        return c.call(broker, 2, 5, body).topics[0].partitions[0]

    assert [(latest(b, -2).error_code, latest(b, -2).offset) for b in (1, 2, 3)] == \
        [(ErrorCode.none, 3), (ErrorCode.none, 3), (ErrorCode.none, 2)]
    assert latest(2, -1).error_code == ErrorCode.not_leader_or_follower
    assert latest(1, -1).offset == c.partition(1, "d").high_watermark == 2   # broker 3 is still in the ISR
