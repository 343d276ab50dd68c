"""Follower truncation by leader epoch (EPO-2, EPO-3) against the legacy high-watermark rule (EPO-4).

The two KIP-101 scenarios of seeds S2/S3 and KIP-279's fast leader changes, played on real
LeaderEpochCache objects: the leader answers OffsetsForLeaderEpoch from its cache, the follower
loops until truncation is complete."""

from __future__ import annotations

from strandline.log.epoch import LeaderEpochCache
from strandline.replication.truncation import after_offsets_for_leader_epoch, legacy_truncation_offset
from strandline.sim.disk import MemoryDisk


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache(MemoryDisk(), "/p")
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def truncate(follower: LeaderEpochCache, follower_leo: int, follower_hw: int,
             leader: LeaderEpochCache, leader_leo: int) -> tuple[int, int]:
    """Run the KIP-279 loop; returns (final LEO, requests sent)."""
    leo = follower_leo
    for requests in range(1, 20):
        asked = follower.latest_epoch
        epoch, end = leader.end_offset_for(asked, leader_leo)
        state = after_offsets_for_leader_epoch(epoch, end, follower, leo, follower_hw)
        leo = state.offset
        follower.truncate_from_end(leo)
        if state.done:
            return leo, requests
    raise AssertionError("truncation did not converge")


def test_epo_3_loss_scenario_a_restarted_follower_keeps_the_committed_m2():
    """S2/S3 scenario 1: leader B and follower A both hold m1, m2 (epoch 0); A's HW is 1 because
    the HW reaches followers one fetch later. A restarts. By epoch it keeps m2, so m2 survives B's
    death; by the legacy rule it cuts to HW 1 and m2, acknowledged with acks=all, is gone."""
    a = cache((0, 0))
    b = cache((0, 0))
    leo, _ = truncate(a, follower_leo=2, follower_hw=1, leader=b, leader_leo=2)
    assert leo == 2
    assert legacy_truncation_offset(high_watermark=1, log_end_offset=2) == 1   # EPO-4: m2 lost


def test_epo_3_divergence_scenario_replicas_converge_on_m1_m3():
    """S2/S3 scenario 2: both crash; the lagging replica B (only m1) returns first, becomes leader in
    epoch 1 and writes m3 at offset 1. A returns with m1, m2 (epoch 0). By epoch A cuts m2 and
    fetches m3: both end with m1, m3. The legacy rule keeps A's m2 at offset 1 for ever (its HW
    was 2), so the replicas diverge."""
    a = cache((0, 0))
    b = cache((0, 0), (1, 1))
    leo, requests = truncate(a, follower_leo=2, follower_hw=2, leader=b, leader_leo=2)
    assert leo == 1 and requests == 1
    assert legacy_truncation_offset(high_watermark=2, log_end_offset=2) == 2  # EPO-4: m2 kept, diverged


def test_epo_2_kip_279_fast_leader_changes_iterate_to_the_common_prefix():
    """The follower holds epochs the leader never saw: it walks back epoch by epoch."""
    follower = cache((0, 0), (2, 4), (3, 6))
    leader = cache((0, 0), (1, 3), (4, 7))
    leo, requests = truncate(follower, follower_leo=9, follower_hw=2, leader=leader, leader_leo=12)
    assert leo == 3 and requests == 2
    assert follower.epoch_entries() == [(0, 0)]


def test_epo_2_a_follower_never_cuts_to_its_high_watermark():
    follower = cache((0, 0), (1, 10))
    leader = cache((0, 0), (1, 10), (2, 15))
    leo, _ = truncate(follower, follower_leo=14, follower_hw=3, leader=leader, leader_leo=20)
    assert leo == 14                                 # all of epoch 1 is on the leader too


def test_epo_2_the_leader_ends_the_epoch_earlier():
    follower = cache((0, 0), (1, 10))
    leader = cache((0, 0), (1, 10), (2, 12))
    leo, _ = truncate(follower, follower_leo=16, follower_hw=11, leader=leader, leader_leo=20)
    assert leo == 12                                 # offsets 12..15 of epoch 1 never reached the leader


def test_epo_2_undefined_answers():
    follower = cache((0, 0))
    assert after_offsets_for_leader_epoch(-1, -1, follower, 5, 2) == (2, True)
    assert after_offsets_for_leader_epoch(-1, 4, follower, 5, 2) == (4, True)
