"""Replica assignment follows Kafka's assignReplicasToBrokers (ASG-1, ASG-2, ASG-3)."""

import pytest

from strandline.controller.assignment import InvalidReplicationFactor, assign_replicas


def test_asg_2_first_round_is_i_plus_j_mod_n():
    result = assign_replicas([0, 1, 2, 3, 4], 5, 3, start_index=0, replica_shift=0)
    assert result == {p: [p % 5, (p + 1) % 5, (p + 2) % 5] for p in range(5)}


def test_asg_2_shift_grows_every_n_partitions():
    result = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0)
    assert result[5] == [0, 2, 3]  # the example in Kafka's AdminUtils documentation


def test_asg_2_leaders_spread_round_robin_from_start_index():
    result = assign_replicas([1, 2, 3], 6, 2, start_index=2, replica_shift=1)
    assert [r[0] for r in result.values()] == [3, 1, 2, 3, 1, 2]
    assert all(len(set(r)) == 2 for r in result.values())


def test_asg_1_replication_factor_above_brokers_is_refused():
    with pytest.raises(InvalidReplicationFactor, match="larger than available brokers: 2"):
        assign_replicas([1, 2], 3, 3, 0, 0)


def test_asg_3_rack_aware_puts_replicas_on_distinct_racks():
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    result = assign_replicas(list(racks), 12, 3, start_index=1, replica_shift=2, racks=racks)
    for replicas in result.values():
        assert len({racks[b] for b in replicas}) == 3
        assert len(set(replicas)) == 3
