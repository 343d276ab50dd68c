"""Eligible leader replicas (KIP-966, ``eligible.leader.replicas.enable``; ELR-1) in the simulator:
each rule of the controller and of the leader, and LOSS-6 played with ELR on and off.

LOSS-6: the followers stall, the ISR shrinks to the leader alone, and the leader loses power
(nothing was flushed). Without ELR it comes back empty, is the only broker that may lead cleanly,
and every acknowledged write is lost (``test_replication_faults_sim``). With ELR the followers
that left the ISR below min.insync.replicas stay eligible, and the leader, back from an unclean
shutdown, is not: an eligible follower leads with the data, or the partition waits offline.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.coordination import znodes
from strandline.coordination.store import GetData
from strandline.sim.cluster import SimCluster
from tests.sim.test_replication_faults_sim import stall
from tests.sim.test_replication_sim import LAG_MS, create, produce, produce_request, values_on

ELR = {"eligible.leader.replicas.enable": "true"}


def cluster(elr: bool = True, **overrides: str) -> tuple[SimCluster, list[str]]:
    """Four brokers (1 is the controller), and the list the controller's log lines go to. The
    automatic preferred-leader election is off: it would move leadership back to broker 2, the
    preferred replica, once it is in the ISR again, and these tests follow who leads after ELR."""
    c = SimCluster((1, 2, 3, 4), **{"replica.lag.time.max.ms": str(LAG_MS), "auto.leader.rebalance.enable": "false",
                                    **(ELR if elr else {}), **overrides})
    lines: list[str] = []
    c.on_log = lambda broker, level, message: lines.append(message) if broker == c.controller_id else None
    return c, lines


def shrunk_to_leader(c: SimCluster, topic: str, min_isr: int = 2) -> list[bytes]:
    """Topic ``topic`` on 2, 3, 4 (leader 2), three writes acknowledged with acks=all, then the
    followers stall and the ISR shrinks to the leader: returns the acknowledged values."""
    create(c, topic, [2, 3, 4], min_isr=min_isr)
    acked = [v for v in (b"m1", b"m2", b"m3") if produce(c, 2, topic, [v]).error_code == ErrorCode.none]
    assert len(acked) == 3 and values_on(c, 3, topic) == acked
    stall(c, 2, topic, 3, 4)
    assert c.state(topic).isr == (2,)
    return acked


def registration(c: SimCluster, broker: int) -> bytes:
    [res] = c.tool_zk([GetData(znodes.BrokerIdZNode.path(broker))])
    assert res.data is not None
    return res.data


def test_elr_off_keeps_the_znodes_kafkas():
    """ELR off (the default): the state znode and the registration carry no ELR field."""
    c, _ = cluster(elr=False)
    shrunk_to_leader(c, "o")
    [res] = c.tool_zk([GetData(znodes.TopicPartitionStateZNode.path("o", 0))])
    assert b"eligible_leader_replicas" not in res.data and b"last_known_elr" not in res.data
    assert b"clean_shutdown" not in registration(c, 3)
    assert c.state("o").elr == ()


def test_elr_followers_leaving_an_isr_below_min_isr_join_the_elr_and_the_hw_stops():
    """The leader proposes ISR [2] (AlterIsr), below min.insync.replicas 2: the followers removed
    join the ELR, written beside the ISR. The leader's high watermark no longer moves, not even for
    an acks=1 write, which a smaller ISR would otherwise commit alone."""
    c, _ = cluster()
    shrunk_to_leader(c, "e")
    state = c.state("e")
    assert (state.isr, state.elr, state.last_known_elr) == ((2,), (3, 4), ())
    [res] = c.tool_zk([GetData(znodes.TopicPartitionStateZNode.path("e", 0))])
    assert b'"eligible_leader_replicas":[3,4]' in res.data
    leader = c.partition(2, "e")
    assert leader.high_watermark == 3 and leader.log_end_offset == 4      # "during-stall", acks=1
    produce_request(c, 2, "e", [b"acks1"], acks=1, client="one")
    c.advance(500)
    assert leader.log_end_offset == 5 and leader.high_watermark == 3


def test_elr_off_an_isr_below_min_isr_still_commits_acks_1_writes():
    """The rule above is ELR's: without it, the leader alone moves the high watermark."""
    c, _ = cluster(elr=False)
    shrunk_to_leader(c, "h")
    assert c.partition(2, "h").high_watermark == c.partition(2, "h").log_end_offset == 4


def test_elr_a_replica_back_in_the_isr_leaves_the_elr_and_an_isr_at_min_isr_clears_it():
    """min.insync.replicas 3: ISR [2], ELR [3, 4]. Broker 3 catches up and rejoins the ISR: it
    leaves the ELR ([4] stays, the ISR still below 3); broker 4 rejoins: the ISR is at the minimum
    and the ELR is empty."""
    c, _ = cluster()
    shrunk_to_leader(c, "r", min_isr=3)
    assert c.state("r").elr == (3, 4)
    c.resume(3)
    c.advance(2000)
    assert (c.state("r").isr, c.state("r").elr) == ((2, 3), (4,))
    c.resume(4)
    c.advance(2000)
    assert (sorted(c.state("r").isr), c.state("r").elr) == ([2, 3, 4], ())


def test_elr_a_follower_in_controlled_shutdown_below_min_isr_joins_the_elr():
    """min.insync.replicas 3, ISR [2, 3, 4]: broker 4 stops (SIGTERM); the controller takes it out
    of the ISR, which is then below the minimum, so it joins the ELR."""
    c, _ = cluster()
    create(c, "s", [2, 3, 4], min_isr=3)
    assert produce(c, 2, "s", [b"m1"]).error_code == ErrorCode.none
    c.begin_controlled_shutdown(4)
    c.advance(2000)
    assert c.brokers[4].core.controlled_shutdown_done
    state = c.state("s")
    assert (state.leader, state.isr, state.elr) == (2, (2, 3), (4,))


def test_loss_6_with_elr_an_eligible_follower_leads_and_nothing_acknowledged_is_lost():
    """LOSS-6 with ELR: the leader loses power; the controller takes it out of the ISR (which
    empties) and elects the first live ELR member, 3, which holds every acknowledged write. The old
    leader comes back from an unclean shutdown: it is no longer eligible (last known ELR), follows,
    and catches up; once the ISR is back at min.insync.replicas the ELR is cleared."""
    c, lines = cluster()
    acked = shrunk_to_leader(c, "x")
    c.crash(2, lose_unflushed=True)
    c.resume(3)
    c.resume(4)
    c.advance(1000)
    state = c.state("x")
    assert state.leader == 3 and 2 not in state.isr            # (4 may have rejoined 3's ISR already)
    assert any("leader 3 in epoch" in line and "ISR [3], ELR [2, 4] (from the eligible leader replicas)" in line
               for line in lines)
    c.start(2)
    c.advance(100)
    assert b'"clean_shutdown":false' in registration(c, 2)
    c.advance(3000)
    state = c.state("x")
    assert state.leader == 3 and sorted(state.isr) == [2, 3, 4] and state.elr == ()
    for b in (2, 3, 4):
        assert values_on(c, b, "x")[:3] == acked
    assert produce(c, 3, "x", [b"m4"]).error_code == ErrorCode.none


def test_loss_6_with_elr_the_partition_waits_offline_for_an_eligible_replica():
    """LOSS-6 with ELR, the eligible followers down too (stopped cleanly): the leader loses power
    and comes back from an unclean shutdown. It may not lead: the partition waits offline, and the
    controller says for whom. The first eligible follower back leads with every acknowledged write."""
    c, lines = cluster()
    acked = shrunk_to_leader(c, "w")
    for b in (3, 4):
        c.resume(b)
        c.shutdown(b)
    c.crash(2, lose_unflushed=True)
    c.advance(1000)
    assert (c.state("w").leader, c.state("w").isr, c.state("w").elr) == (-1, (), (2, 3, 4))
    c.start(2)
    c.advance(3000)
    state = c.state("w")
    assert (state.leader, state.isr, state.elr, state.last_known_elr) == (-1, (), (3, 4), (2,))
    assert any("w-0 is offline: no live broker of its ISR [] or ELR [3, 4] can lead it" in line
               and "last known ELR): [2]" in line for line in lines)
    c.start(3)
    c.advance(3000)
    state = c.state("w")
    assert state.leader == 3 and 2 in state.isr
    assert values_on(c, 3, "w")[:3] == acked and values_on(c, 2, "w")[:3] == acked


def test_loss_6_without_elr_the_leader_back_empty_leads_and_everything_is_lost():
    """The same schedule with ELR off: the leader, back empty, is the ISR and leads; the
    followers truncate to its empty log."""
    c, _ = cluster(elr=False)
    shrunk_to_leader(c, "z")
    for b in (3, 4):
        c.resume(b)
        c.shutdown(b)
    c.crash(2, lose_unflushed=True)
    c.advance(1000)
    c.start(2)
    c.advance(3000)
    assert c.state("z").leader == 2
    c.start(3)
    c.advance(3000)
    assert values_on(c, 2, "z") == [] and values_on(c, 3, "z") == []


def test_elr_the_minimum_is_at_most_the_replication_factor():
    """Kafka's effective minimum: a topic of one replica, min.insync.replicas 2, is not below its
    minimum with an ISR of one; its high watermark moves and acks=1 writes are read."""
    c, _ = cluster()
    create(c, "one", [2], min_isr=2)
    produce_request(c, 2, "one", [b"m1"], acks=1, client="one")
    c.advance(100)
    assert c.partition(2, "one").high_watermark == 1
    assert c.state("one").elr == ()


def test_elr_a_controller_taking_office_takes_out_a_broker_registered_after_an_unclean_shutdown():
    """The controller (1) dies and the leader alone in its ISR (2) loses power at once; broker 2
    comes back first, registers after an unclean shutdown and is elected controller itself, with
    nobody having seen it die: ZooKeeper still names it the leader, in the ISR. Taking office it
    takes itself out of the ISR and ELR before telling anyone the partition's state, so it never
    leads its empty log; a follower of the ELR does. Then it marks its registration handled."""
    c, _ = cluster()
    acked = shrunk_to_leader(c, "f")
    c.crash(1)
    c.crash(2, lose_unflushed=True)
    c.start(2)
    c.advance(100)
    assert c.controller_id == 2
    state = c.state("f")
    assert state.leader in (3, 4) and 2 not in state.isr + state.elr and state.last_known_elr == (2,)
    assert b'"unclean_shutdown_handled"' in registration(c, 2)
    for b in (3, 4):
        c.resume(b)
    c.advance(3000)
    leader = c.state("f").leader
    assert values_on(c, leader, "f")[:3] == acked and values_on(c, 2, "f")[:3] == acked


def test_elr_an_operators_unclean_election_ends_the_wait_and_clears_the_elr():
    """A partition waiting offline, its ISR and ELR empty (every eligible replica came back from an
    unclean shutdown) with ``unclean.recovery.strategy=None``: the operator's unclean election
    (ElectLeaders, KIP-460) elects a live replica, whose ISR it is alone, and clears the ELR and the
    last known ELR."""
    c, _ = cluster(**{"unclean.recovery.strategy": "None"})
    shrunk_to_leader(c, "u")
    c.resume(3)
    c.resume(4)
    for b in (2, 3, 4):
        c.crash(b, lose_unflushed=True)
    c.advance(1000)
    for b in (2, 3, 4):
        c.start(b)
    c.advance(3000)
    state = c.state("u")
    assert (state.leader, state.isr, state.elr, state.last_known_elr) == (-1, (), (), (2, 3, 4))
    body = {"election_type": 1, "timeout_ms": 30000, "topic_partitions": [{"topic": "u", "partitions": [0]}]}
    c.call(1, 43, 1, body)
    c.advance(1000)
    state = c.state("u")
    assert state.leader == 2 and state.elr == () and state.last_known_elr == ()


def test_elr_a_leader_in_controlled_shutdown_still_drops_a_follower_back_from_an_unclean_shutdown():
    """The simulator's seed 6550023: the leader (2) is in a controlled shutdown nobody can take
    over from (3 is dead, in the ELR; 4 left earlier), and 3 comes back after a power loss. 3
    must leave the ELR even though the leader stays: kept there, it was elected from the ELR once
    2 stopped, with the empty log its power loss left. Now 2 is the only eligible one, and leads
    again with every acknowledged write when it is back."""
    c, _ = cluster()
    create(c, "b", [2, 3, 4], min_isr=2)
    acked = [v for v in (b"b1", b"b2", b"b3") if produce(c, 2, "b", [v]).error_code == ErrorCode.none]
    assert len(acked) == 3
    c.crash(4, lose_unflushed=False)
    c.advance(1000)
    c.crash(3, lose_unflushed=True)
    c.advance(1000)
    state = c.state("b")
    assert (state.leader, state.isr, state.elr) == (2, (2,), (3,)), state
    c.begin_controlled_shutdown(2)
    c.advance(200)
    assert c.state("b").leader == 2                     # nobody can take over
    c.cut_link(3, 2)                                    # 3 cannot copy the log back meanwhile
    c.start(3)
    c.advance(2000)
    state = c.state("b")
    assert (state.leader, state.isr, state.elr, state.last_known_elr) == (2, (2,), (), (3,)), state
    c.shutdown(2)
    c.advance(2000)
    assert c.state("b").leader == -1
    c.heal_link(3, 2)
    c.start(2)
    c.advance(3000)
    assert c.state("b").leader == 2 and values_on(c, 2, "b") == acked


def test_elr_an_unclean_return_is_applied_even_when_zookeeper_did_not_answer_the_first_read():
    """The simulator's seed 6550035: the election for a broker back from an unclean shutdown
    could not read a partition's state (ZooKeeper did not answer) and read it again later; the
    controller meanwhile took the broker's unclean mark off, so the later read decided without
    it and kept the broker in the ELR, from which it was elected with a log its power loss had
    emptied. The mark now lasts until every partition of that election is settled."""
    c, _ = cluster()
    shrunk_to_leader(c, "z")
    assert c.state("z").elr == (3, 4)
    c.crash(3, lose_unflushed=True)
    c.advance(1000)
    state_path = "/brokers/topics/z/partitions/0/state"
    failed = []

    def once(broker: int, ops: list) -> str | None:
        if broker == c.controller_id and not failed and any(getattr(op, "path", "") == state_path for op in ops):
            failed.append(ops)
            return "not-applied"
        return None
    c.zk_fault = once
    c.cut_link(3, 2)                                    # 3 cannot copy the log back meanwhile
    c.start(3)
    c.advance(3000)
    assert failed, "the fault did not fire"
    state = c.state("z")
    assert 3 not in state.elr and 3 in state.last_known_elr, state


def test_elr_an_unclean_shutdown_a_clean_stop_follows_is_still_handled():
    """The simulator's seeds 6564369 and 6564736: a follower of the ELR (3) loses power and comes
    back while the controller is cut from ZooKeeper, so no controller handles its unclean
    shutdown; then it stops cleanly. Its next registration must still say it came back from an
    unclean shutdown: saying ``"clean_shutdown":true`` hid the first one, and it stayed in the ELR
    with the log its power loss had cut, from which it was elected. The clean-shutdown marker
    keeps the unhandled unclean shutdown until a controller marks the registration handled."""
    c, _ = cluster()
    shrunk_to_leader(c, "h")
    assert c.state("h").elr == (3, 4)
    c.cut_from_zookeeper(1)
    c.crash(3, lose_unflushed=True)
    c.cut_link(3, 2)                                    # 3 cannot copy the log back meanwhile
    c.start(3)
    c.advance(500)
    assert b'"clean_shutdown":false' in registration(c, 3)
    assert b"unclean_shutdown_handled" not in registration(c, 3)
    c.shutdown(3)
    c.heal_zookeeper(1)
    c.advance(500)
    assert c.controller_id == 1
    c.start(3)
    c.advance(2000)
    assert b'"clean_shutdown":false' in registration(c, 3)
    assert b"unclean_shutdown_handled" in registration(c, 3)
    state = c.state("h")
    assert 3 not in state.elr + state.isr and 3 in state.last_known_elr, state
    # handled now: the next clean stop leaves it behind
    c.shutdown(3)
    c.start(3)
    c.advance(500)
    assert b'"clean_shutdown":true' in registration(c, 3)
