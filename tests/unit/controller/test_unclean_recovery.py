"""The rules of unclean recovery (KIP-966; ``controller.unclean_recovery``): whom to ask, whom
to elect, and GetReplicaLogInfo's encoding."""

from __future__ import annotations

import uuid

import pytest

from strandline.controller.unclean_recovery import choose_recovered_leader, recovery_candidates
from strandline.coordination.znodes import LeaderAndIsr
from strandline.protocol import control

EMPTY = LeaderAndIsr(-1, 5, (), 1, 3, (), (2, 3, 4))
REPLICAS = (2, 3, 4)


def test_balanced_asks_every_replica_once_all_are_live():
    assert recovery_candidates("Balanced", REPLICAS, EMPTY, {1, 2, 3}, set()) is None
    assert recovery_candidates("Balanced", REPLICAS, EMPTY, {1, 2, 3, 4}, set()) == ((2, 3, 4), (2, 3, 4))
    assert recovery_candidates("Balanced", REPLICAS, EMPTY, {1, 2, 3, 4}, {4}) is None   # shutting down
    # 2 left the ISR before the others lost power: it is in no ELR, and it is waited for
    narrow = LeaderAndIsr(-1, 5, (), 1, 3, (), (3, 4))
    assert recovery_candidates("Balanced", REPLICAS, narrow, {3, 4}, set()) is None
    assert recovery_candidates("Balanced", REPLICAS, narrow, {2, 3, 4}, set()) == ((2, 3, 4), (2, 3, 4))


def test_aggressive_asks_every_live_replica_and_needs_none_in_particular():
    assert recovery_candidates("Aggressive", REPLICAS, EMPTY, {1, 4}, set()) == ((4,), ())
    assert recovery_candidates("Aggressive", REPLICAS, EMPTY, {1}, set()) is None


@pytest.mark.parametrize("state", [
    LeaderAndIsr(3, 5, (3,), 1, 3),                       # a leader
    LeaderAndIsr(-1, 5, (3,), 1, 3),                      # an ISR (a clean election may come)
    LeaderAndIsr(-1, 5, (), 1, 3, (3,), (2, 4)),          # an ELR
])
def test_no_recovery_while_the_partition_has_a_leader_an_isr_or_an_elr(state):
    for strategy in ("Balanced", "Aggressive"):
        assert recovery_candidates(strategy, REPLICAS, state, {1, 2, 3, 4}, set()) is None


def test_none_never_recovers():
    assert recovery_candidates("None", REPLICAS, EMPTY, {1, 2, 3, 4}, set()) is None


def test_the_newest_epoch_wins_then_the_longest_log_then_replica_order():
    # 2 wrote in a later epoch than 3's longer log: 3's tail beyond 2's was never committed after
    assert choose_recovered_leader(REPLICAS, REPLICAS, {2: (6, 100), 3: (5, 180), 4: (6, 90)}) == 2
    assert choose_recovered_leader(REPLICAS, REPLICAS, {2: (6, 100), 3: (6, 120), 4: (6, 120)}) == 3
    assert choose_recovered_leader(REPLICAS, REPLICAS, {2: (-1, 0), 3: (-1, 0), 4: (-1, 0)}) == 2


def test_a_replica_outside_the_last_known_elr_may_hold_the_most():
    """2 left the ISR while it still held the minimum (no ELR of its); 3 and 4, eligible, lost
    their unflushed tails to a power loss: 2 is elected, with what they lost."""
    assert choose_recovered_leader(REPLICAS, (3, 4), {2: (0, 137), 3: (0, 91), 4: (0, 91)}) == 2


def test_the_required_answers_and_at_least_one():
    answers = {2: (6, 100), 3: None, 4: (6, 90)}
    assert choose_recovered_leader(REPLICAS, REPLICAS, answers) is None         # Balanced: 3 did not answer
    assert choose_recovered_leader(REPLICAS, (2, 4), answers) == 2
    assert choose_recovered_leader(REPLICAS, (), answers) == 2                  # Aggressive
    assert choose_recovered_leader(REPLICAS, (), {2: None, 3: None, 4: None}) is None


def test_get_replica_log_info_round_trips_in_kafkas_layout():
    topic_id = uuid.UUID(int=7)
    body = {"topic_partitions": [{"topic_id": topic_id, "partitions": [0, 3]}]}
    frame = control.encode_request(control.GET_REPLICA_LOG_INFO, 11, "c", body)
    # api key 93, version 0, correlation 11, client id "c", the (flexible) header's empty tags
    assert frame[:11] == bytes.fromhex("005d0000" "0000000b" "0001") + b"c" and frame[11] == 0
    assert control.decode_request(frame) == (93, 0, 11, "c", body)
    answer = {"throttle_time_ms": 0, "broker_epoch": 77, "truncated": False, "topic_partition_log_info_list": [
        {"topic_id": topic_id, "partition_log_info": [
            {"partition": 0, "last_written_leader_epoch": 4, "current_leader_epoch": 5, "log_end_offset": 181,
             "error_code": 0}]}]}
    assert control.decode_response(93, control.encode_response(93, 11, answer)) == answer
    refused = control.error_answer(93, 31, body)
    assert [p["error_code"] for t in refused["topic_partition_log_info_list"] for p in t["partition_log_info"]] \
        == [31, 31]


def test_a_replicas_last_written_epoch_is_its_last_batchs_not_an_epoch_it_began_without_writing():
    """What GetReplicaLogInfo answers: a replica made leader in epoch 5 at offset 3 that wrote
    nothing in it last wrote in epoch 4 (the simulator's seed 6563155: counted as 5, it outranked
    a replica holding more of epoch 4, committed)."""
    from types import SimpleNamespace

    from strandline.log.config import LogConfig
    from strandline.log.log import Log
    from strandline.replication.controller_requests import log_info
    from strandline.sim.disk import MemoryDisk
    from tests.unit.batches import make_batch

    log = Log.open(MemoryDisk(), "/data/t-0", "t", 0, LogConfig())
    replica = SimpleNamespace(log=log)
    assert log_info(replica) == (-1, 0)
    for i in range(3):
        log.append_as_leader(make_batch([b"v%d" % i]), 4, 1000 + i)
    assert log_info(replica) == (4, 3)
    log.leader_epoch_cache.assign(5, 3)         # became leader in epoch 5, wrote nothing yet
    assert log.leader_epoch_cache.latest_epoch == 5 and log_info(replica) == (4, 3)
    log.append_as_leader(make_batch([b"v3"]), 5, 1003)
    assert log_info(replica) == (5, 4)
