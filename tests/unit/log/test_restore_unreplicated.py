"""The transactions decided by a marker above the high watermark, put back after a load of the
producer state (``log.loader.restore_unreplicated_transactions``), on random logs: after a clean
open, an open after a crash and a follower's truncation, at every high watermark, the state holds
what the log held when it was written continuously (open transactions, and each transaction whose
marker is at or above the high watermark with its first offset), and the last stable offset is
the same (KIP-98). The restore's window is made small so that its widening is exercised too."""

from __future__ import annotations

import copy
import random

import pytest

from strandline.log import loader
from strandline.log.config import LogConfig
from strandline.log.log import Log
from strandline.protocol.markers import build_marker
from strandline.replication.fetcher_manager import ReplicaFetcherManager
from strandline.replication.partition import Partition
from strandline.sim.disk import MemoryDisk
from tests.unit.log.test_producer_state_durability import T0, batch

DIR = "/data/t-0"
CONFIG = LogConfig(segment_bytes=700)           # a roll every few batches: snapshots between markers


def written(seed: int) -> tuple[MemoryDisk, Log, dict[int, tuple[dict, list]]]:
    """A random log of three transactional producers and plain batches; with the producer state
    (open transactions, decided ones) at each batch boundary."""
    rng = random.Random(seed)
    disk = MemoryDisk(strict_dirs=True)
    log = Log.open(disk, DIR, "t", 0, CONFIG, needs_recovery=False, now_ms=T0)
    epochs, seqs = {1: 0, 2: 0, 3: 0}, {1: 0, 2: 0, 3: 0}
    states = {0: ({}, [])}
    for _ in range(rng.randrange(10, 40)):
        pid, roll = rng.choice((1, 2, 3)), rng.random()
        if roll < 0.3:
            records = batch(n=rng.randrange(1, 4))
        elif roll < 0.65:
            n = rng.randrange(1, 4)
            records = batch(pid, epochs[pid], seqs[pid], transactional=True, n=n)
            seqs[pid] += n
        elif roll < 0.9:
            records = build_marker(pid, epochs[pid], rng.random() < 0.5, 0, T0)
        else:
            epochs[pid] += 1                   # a new producer epoch: its open transaction stays
            seqs[pid] = 0
            continue
        log.append_as_leader(records, 0, T0)
        state = log.producer_state
        states[log.log_end_offset] = (dict(state.ongoing), list(state.unreplicated))
    return disk, log, states


def expected_lso(state: tuple[dict, list], hw: int) -> int:
    ongoing, decided = state
    return min([hw, *ongoing.values(), *(first for marker, first in decided if marker >= hw)])


def check(log: Log, state: tuple[dict, list], hw: int, how: str) -> None:
    ongoing, decided = state
    got = log.producer_state
    assert got.ongoing == ongoing, f"{how}, HW {hw}: open transactions"
    assert [e for e in got.unreplicated if e[0] >= hw] == [e for e in decided if e[0] >= hw], \
        f"{how}, HW {hw}: transactions decided at or above the high watermark"
    assert log.last_stable_offset(hw) == expected_lso(state, hw), f"{how}, HW {hw}: last stable offset"


@pytest.mark.parametrize("window", [1, 3, loader.RESTORE_WINDOW])
@pytest.mark.parametrize("seed", range(12))
def test_the_restored_state_is_the_continuous_one_at_every_high_watermark(seed, window, monkeypatch):
    monkeypatch.setattr(loader, "RESTORE_WINDOW", window)
    disk, log, states = written(seed)
    leo = log.log_end_offset
    log.flush(leo)
    for hw in range(leo + 1):                  # a crash: no snapshot at the log end
        crashed = Log.open(copy.deepcopy(disk), DIR, "t", 0, CONFIG, needs_recovery=True, now_ms=T0)
        loader.restore_unreplicated_transactions(crashed, hw)
        check(crashed, states[leo], hw, "after a crash")
    log.close()
    for hw in range(leo + 1):
        opened = Log.open(disk, DIR, "t", 0, CONFIG, needs_recovery=False, now_ms=T0)
        loader.restore_unreplicated_transactions(opened, hw)
        check(opened, states[leo], hw, "after a clean shutdown")
    rng = random.Random(seed)
    cuts = [offset for offset in states if 0 < offset < leo]
    for _ in range(25 if cuts else 0):
        cut = rng.choice(cuts)
        hw = rng.randrange(cut + 1)
        follower = Log.open(copy.deepcopy(disk), DIR, "t", 0, CONFIG, needs_recovery=False, now_ms=T0)
        partition = Partition("t", 0, 1, follower, replica_lag_time_max_ms=30_000)
        partition.high_watermark = hw
        ReplicaFetcherManager.truncate(object.__new__(ReplicaFetcherManager), partition, cut, "diverged")
        assert follower.log_end_offset == cut
        check(follower, states[cut], hw, f"after a truncation to {cut}")
