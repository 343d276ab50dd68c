"""Eligible leader replicas (KIP-966): the controller's rules as pure functions, and where they
are stored (the partition state znode, a broker's registration)."""

from __future__ import annotations

import json

from strandline.controller.elections import ElrPolicy, elr_partition_election, offline_partition_election, populate_elr
from strandline.coordination import znodes
from strandline.coordination.znodes import LeaderAndIsr

REPLICAS = (1, 2, 3)


def test_populate_an_isr_at_min_isr_clears_the_elr_and_the_last_known_elr():
    current = LeaderAndIsr(1, 4, (1,), 0, 0, (2, 3), (4,))
    assert populate_elr(REPLICAS, current, (1, 2), ElrPolicy(2)) == ((), ())


def test_populate_the_members_leaving_an_isr_below_min_isr_join_the_elr_in_replica_order():
    current = LeaderAndIsr(1, 4, (3, 1, 2), 0, 0)
    assert populate_elr(REPLICAS, current, (1,), ElrPolicy(3)) == ((2, 3), ())
    # the ELR keeps its members, and a replica back in the ISR leaves it
    shrunk = LeaderAndIsr(1, 5, (1,), 0, 1, (2, 3))
    assert populate_elr(REPLICAS, shrunk, (1, 2), ElrPolicy(3)) == ((3,), ())


def test_populate_a_replica_back_from_an_unclean_shutdown_leaves_for_the_last_known_elr():
    current = LeaderAndIsr(-1, 4, (), 0, 0, (2, 3))
    assert populate_elr(REPLICAS, current, (), ElrPolicy(2, frozenset({2}))) == ((3,), (2,))
    assert populate_elr((1, 3), current, (), ElrPolicy(2)) == ((3,), ())       # assigned replicas only


def test_election_a_dead_leader_alone_in_its_isr_joins_the_elr_and_an_elr_member_leads_alone():
    current = LeaderAndIsr(1, 4, (1,), 0, 7, (2, 3))
    state, unclean = elr_partition_election(REPLICAS, current, {2, 3}, {1}, set(), False, 9, ElrPolicy(2))
    assert not unclean
    assert (state.leader, state.leader_epoch, state.isr, state.elr, state.controller_epoch, state.zk_version) == \
        (2, 5, (2,), (1, 3), 9, 7)


def test_election_none_eligible_alive_the_partition_waits_offline_with_an_empty_isr():
    current = LeaderAndIsr(1, 4, (1,), 0, 7, (2,))
    state, unclean = elr_partition_election(REPLICAS, current, {3}, {1}, set(), False, 9, ElrPolicy(2))
    assert (state.leader, state.isr, state.elr, unclean) == (-1, (), (1, 2), False)
    # nothing more changes while nobody eligible returns
    assert elr_partition_election(REPLICAS, state, {3}, set(), set(), False, 9, ElrPolicy(2)) is None


def test_election_the_elr_leads_only_when_the_isr_is_empty():
    current = LeaderAndIsr(-1, 4, (3,), 0, 7, (2,))      # 3 is in the ISR, not live: 2 may not lead
    assert elr_partition_election(REPLICAS, current, {2}, set(), set(), False, 9, ElrPolicy(2)) is None


def test_election_an_unclean_election_clears_the_elr():
    current = LeaderAndIsr(-1, 4, (), 0, 7, (1,), (2,))
    state, unclean = elr_partition_election(REPLICAS, current, {3}, set(), set(), True, 9, ElrPolicy(2))
    assert (state.leader, state.isr, state.elr, state.last_known_elr, unclean) == (3, (3,), (), (), True)


def test_election_a_broker_back_from_an_unclean_shutdown_cannot_lead_from_the_elr():
    current = LeaderAndIsr(-1, 4, (), 0, 7, (1, 2))
    policy = ElrPolicy(2, frozenset({1}))
    state, _ = elr_partition_election(REPLICAS, current, {1}, {1}, set(), False, 9, policy)
    assert (state.leader, state.isr, state.elr, state.last_known_elr) == (-1, (), (2,), (1,))


def test_election_without_elr_is_kafkas_zookeeper_rule():
    current = LeaderAndIsr(1, 4, (1,), 0, 7)
    state, _ = offline_partition_election(REPLICAS, current, {2, 3}, {1}, set(), False, 9)
    assert (state.leader, state.isr, state.elr) == (-1, (1,), ())


def test_state_znode_without_elr_is_kafkas_and_with_it_old_readers_see_the_same_fields():
    plain = LeaderAndIsr(1, 4, (1, 2), 3)
    assert json.loads(znodes.TopicPartitionStateZNode.encode(plain)) == \
        {"version": 1, "leader": 1, "leader_epoch": 4, "isr": [1, 2], "controller_epoch": 3}
    with_elr = LeaderAndIsr(-1, 5, (), 3, 0, (2, 3), (1,))
    data = znodes.TopicPartitionStateZNode.encode(with_elr)
    assert json.loads(data) == {"version": 1, "leader": -1, "leader_epoch": 5, "isr": [], "controller_epoch": 3,
                                "eligible_leader_replicas": [2, 3], "last_known_elr": [1]}
    assert znodes.TopicPartitionStateZNode.decode(data, 8) == LeaderAndIsr(-1, 5, (), 3, 8, (2, 3), (1,))
    assert znodes.TopicPartitionStateZNode.decode(znodes.TopicPartitionStateZNode.encode(plain)).elr == ()


def test_registration_says_whether_the_broker_shut_down_cleanly_only_when_asked():
    plain = znodes.BrokerIdZNode.encode(1, "h", 9092, None, 0)
    assert b"clean_shutdown" not in plain and znodes.BrokerIdZNode.decode(plain, 1).clean_shutdown is None
    for clean in (True, False):
        data = znodes.BrokerIdZNode.encode(1, "h", 9092, None, 0, clean_shutdown=clean)
        assert znodes.BrokerIdZNode.decode(data, 1).clean_shutdown is clean
