"""Unclean recovery (KIP-966's second part, ``unclean.recovery.strategy``; ELR-1) in the simulator.

Each scenario starts as LOSS-6 with eligible leader replicas: three acknowledged writes on brokers
2, 3 and 4, the ISR shrunk to the leader (2) with 3 and 4 in the ELR. Then every one of them
stops uncleanly, so that none is eligible when it comes back: the ISR and the ELR are empty and
the last known ELR names 2, 3 and 4. Broker 2 loses power (its unflushed log, the three writes,
is gone); 3 and 4 are SIGKILLed (their page cache keeps the writes).
"""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from strandline.protocol import control
from strandline.sim.cluster import SimCluster
from tests.sim.test_elr_sim import cluster, shrunk_to_leader
from tests.sim.test_replication_sim import create, produce, values_on


def everyone_down_uncleanly(c: SimCluster, topic: str) -> list[bytes]:
    acked = shrunk_to_leader(c, topic)
    c.resume(3)
    c.resume(4)
    c.crash(2, lose_unflushed=True)
    for b in (3, 4):
        c.crash(b, lose_unflushed=False)
    c.advance(1000)
    return acked


def test_balanced_waits_for_the_whole_last_known_elr_then_elects_the_longest_log():
    """Balanced (the default): with 2 and 3 back the partition stays offline (4, a replica, is
    not); once 4 is back the controller asks the three for their logs and elects 3, whose
    log is as new and as long as any (2 lost its own): every acknowledged write is kept, and 2
    follows and copies them back."""
    c, lines = cluster()
    acked = everyone_down_uncleanly(c, "b")
    c.start(2)
    c.start(3)
    c.advance(3000)
    state = c.state("b")     # 4 is not known to be unclean until it registers: eligible still
    assert (state.leader, state.isr, state.elr, state.last_known_elr) == (-1, (), (4,), (2, 3))
    assert not [line for line in lines if "Unclean recovery" in line]
    c.start(4)
    c.advance(3000)
    state = c.state("b")
    assert state.leader == 3 and state.elr == () and state.last_known_elr == ()
    [said] = [line for line in lines if "Unclean recovery (Balanced) of b-0" in line]
    assert "electing broker 3" in said and "2: epoch -1, end offset 0" in said, said
    assert "3: epoch 0, end offset 3" in said and "4: epoch 0, end offset 3" in said, said
    for b in (2, 3, 4):
        assert values_on(c, b, "b") == acked
    assert c.brokers[1].core.controller.elections.unclean_leader_elections == 1


@pytest.mark.parametrize("strategy", ["Aggressive", "Balanced"])
def test_aggressive_elects_among_the_replicas_back_where_balanced_waits_for_the_one_with_the_data(strategy):
    """2 and 4 lose power, 3 is SIGKILLed; 2 and 3 come back (unclean: out of the ELR), 3 is
    SIGKILLed again, then 4 comes back: the ISR and ELR are empty, and of the last known ELR only
    2 and 4 are live, both with the empty logs their power losses left. Aggressive asks them and
    elects 2 at once: the acknowledged writes are lost, and 3, back later, truncates to it (the
    price of electing before the others are back). Balanced waits for 3 and elects it: nothing
    is lost."""
    c, lines = cluster(**{"unclean.recovery.strategy": strategy})
    acked = shrunk_to_leader(c, "a")
    c.resume(3)
    c.resume(4)
    for b, power_loss in ((2, True), (3, False), (4, True)):
        c.crash(b, lose_unflushed=power_loss)
    c.advance(1000)
    c.start(2)
    c.start(3)
    c.advance(3000)
    c.crash(3, lose_unflushed=False)
    c.start(4)
    c.advance(3000)
    state = c.state("a")
    if strategy == "Aggressive":
        assert state.leader == 2 and 3 not in state.isr
        [said] = [line for line in lines if "Unclean recovery (Aggressive) of a-0" in line]
        assert "electing broker 2" in said and "4: epoch -1, end offset 0" in said, said
    else:
        assert (state.leader, state.isr, state.elr, state.last_known_elr) == (-1, (), (), (2, 3, 4))
    c.start(3)
    c.advance(3000)
    state = c.state("a")
    if strategy == "Aggressive":
        assert acked and values_on(c, 3, "a") == [] and values_on(c, 2, "a") == []
    else:
        assert state.leader == 3 and values_on(c, 3, "a") == acked and values_on(c, 2, "a") == acked


def test_none_leaves_the_partition_offline_with_every_replica_back():
    c, lines = cluster(**{"unclean.recovery.strategy": "None"})
    everyone_down_uncleanly(c, "n")
    for b in (2, 3, 4):
        c.start(b)
    c.advance(5000)
    state = c.state("n")
    assert (state.leader, state.isr, state.elr) == (-1, (), ())
    assert not [line for line in lines if "Unclean recovery" in line]


def test_the_topic_key_overrides_the_brokers_strategy():
    """``unclean.recovery.strategy`` is a topic config too: None on the topic holds it offline
    where the brokers' Balanced would recover it."""
    c, _ = cluster()
    acked = everyone_down_uncleanly(c, "t")
    assert acked
    c.call(1, 44, 1, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "unclean.recovery.strategy", "config_operation": 0, "value": "None"}]}], "validate_only": False})
    for b in (2, 3, 4):
        c.start(b)
    c.advance(5000)
    assert c.state("t").leader == -1


def test_a_broker_answers_get_replica_log_info_whatever_its_role():
    """GetReplicaLogInfo v0 (API key 93): each replica's last written leader epoch, the epoch it
    knows and its log end offset, from a follower as from the leader; REPLICA_NOT_AVAILABLE where
    the broker has no replica, UNKNOWN_TOPIC_ID for an id it does not know."""
    c, _ = cluster()
    shrunk_to_leader(c, "g")
    c.resume(3)
    c.resume(4)
    c.advance(2000)
    topic_id = c.brokers[2].core.metadata.topics["g"].topic_id
    body = {"topic_partitions": [{"topic_id": topic_id, "partitions": [0, 7]},
                                 {"topic_id": uuid.UUID(int=5), "partitions": [0]}]}
    answers = {}
    for b in (1, 3):
        box: list[bytes] = []
        frame = control.encode_request(control.GET_REPLICA_LOG_INFO, c.next_correlation(), "test", body)
        c.client_send(b, "test", frame, lambda answer, box=box: box.append(answer) if answer else None,
                      timeout_ms=1 << 40)
        c.advance(50)
        [raw] = box
        answers[b] = control.decode_response(control.GET_REPLICA_LOG_INFO, raw)
    follower = answers[3]
    assert follower["broker_epoch"] == c.brokers[3].core.broker_epoch
    [g, unknown] = follower["topic_partition_log_info_list"]
    log = c.partition(3, "g").log
    assert log.log_end_offset > 0
    assert [(p["partition"], p["last_written_leader_epoch"], p["log_end_offset"], p["error_code"])
            for p in g["partition_log_info"]] == [(0, log.leader_epoch_cache.latest_epoch, log.log_end_offset,
                                                   ErrorCode.none), (7, -1, -1, ErrorCode.replica_not_available)]
    assert g["partition_log_info"][0]["current_leader_epoch"] == c.state("g").leader_epoch
    assert unknown["partition_log_info"][0]["error_code"] == ErrorCode.unknown_topic_id
    # broker 1 holds no replica of g
    assert answers[1]["topic_partition_log_info_list"][0]["partition_log_info"][0]["error_code"] \
        == ErrorCode.replica_not_available


def test_balanced_waits_for_a_replica_that_left_the_isr_while_the_others_had_lost_power():
    """The simulator's seed 6550154: 3 and 4 lose power (their ZooKeeper sessions live on) and
    start again, waiting for those sessions to end before they register; meanwhile 2, the leader,
    shuts down cleanly and the controller, still seeing 3 and 4, moves the leadership to them and
    takes 2 out of an ISR [3, 4] that holds the minimum: 2 is in no ELR. Once 3 and 4 register,
    back from an unclean shutdown, the ISR and ELR are empty and the last known ELR is [3, 4], with
    nothing of what was committed. Balanced waits for 2 as well, and elects it: nothing is lost."""
    c, lines = cluster()
    create(c, "w", [2, 3, 4], min_isr=2)
    acked = [v for v in (b"w1", b"w2", b"w3") if produce(c, 2, "w", [v]).error_code == ErrorCode.none]
    assert len(acked) == 3
    for b in (3, 4):
        c.crash(b, lose_unflushed=True, expire_at_once=False)
        c.start(b)
    c.begin_controlled_shutdown(2)
    c.advance(200)
    state = c.state("w")
    assert state.leader in (3, 4) and state.isr == (3, 4) and state.elr == ()
    c.shutdown(2)
    c.advance(30000)                            # 3 and 4 register, after an unclean shutdown
    state = c.state("w")
    assert (state.leader, state.isr, state.elr, state.last_known_elr) == (-1, (), (), (3, 4))
    assert not [line for line in lines if "Unclean recovery" in line]
    c.start(2)
    c.advance(3000)
    assert c.state("w").leader == 2
    [said] = [line for line in lines if "Unclean recovery (Balanced) of w-0" in line]
    assert "electing broker 2" in said and "2: epoch 0, end offset 3" in said, said
    for b in (2, 3, 4):
        assert values_on(c, b, "w") == acked
