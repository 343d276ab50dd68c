"""Power loss, log recovery and the LogManager's clean-shutdown protocol (CKP-1..3, DUR-1, EPO-1)."""

from __future__ import annotations

import random

import pytest

from strandline.log import checkpoint
from strandline.log.config import LogConfig
from strandline.log.log import Log
from strandline.log.manager import LogManager
from strandline.protocol.records import crc_ok, iter_batches
from strandline.runtime.disk import OsDisk
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import make_batch

BATCH = len(make_batch([b"x" * 100]))
CONFIG = LogConfig(segment_bytes=10 * BATCH, index_interval_bytes=2 * BATCH)
DIR = "/data/t-0"


def fill(log: Log, n: int, *, epoch: int = 0, ts: int = 1000) -> None:
    for i in range(n):
        log.append_as_leader(make_batch([b"x" * 100], timestamp_ms=ts + i), epoch, ts + i)


def new_log(n: int, *, epoch: int = 0, flushed: bool = False) -> tuple[MemoryDisk, Log]:
    """A new log of t-0 on a memory disk, with ``n`` batches of 100 bytes in leader ``epoch``
    (timestamps 1000 on), ``flushed`` or not past the last roll."""
    disk = MemoryDisk()
    log = Log.open(disk, DIR, "t", 0, CONFIG)
    fill(log, n, epoch=epoch)
    if flushed:
        log.flush()
    return disk, log


def offsets(data: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_batches(data)]


def reopen(disk, log: Log, *, recovery_point: int, log_start_offset: int = 0, needs_recovery: bool = True) -> Log:
    return Log.open(disk, log.dir, log.topic, log.partition, log.config, recovery_point=recovery_point,
                    log_start_offset=log_start_offset, needs_recovery=needs_recovery)


def all_crcs_ok(disk, log: Log) -> bool:
    for segment in log.segments:
        raw = disk.read_file(segment.log_path)
        if not all(crc_ok(raw, p, h) for p, h in iter_batches(raw)):
            return False
        if sum(h.size for _, h in iter_batches(raw)) != len(raw):
            return False
    return True


def test_dur_1_power_loss_keeps_exactly_what_was_flushed():
    """DUR-1, CKP-3: no fsync per write; a power loss drops the unflushed tail, recovery keeps the
    rest (rolled segments were flushed at the roll, like Kafka)."""
    disk, log = new_log(25)
    assert log.recovery_point == 20                      # the roll at 20 flushed [0, 20)
    fill(log, 1)
    log.flush()
    assert log.recovery_point == 26
    fill(log, 3)                                         # never flushed
    disk.crash()
    log = reopen(disk, log, recovery_point=26)
    assert log.log_end_offset == 26
    assert offsets(log.read(0, 1 << 20)) == list(range(26))
    assert log.recovery_stats["segments_recovered"] == 1          # only the segment holding the recovery point
    assert log.recovery_stats["batches_scanned"] == 6
    assert log.recovery_point == 26
    fill(log, 2)
    assert offsets(log.read(24, 1 << 20)) == [24, 25, 26, 27]


def test_ckp_3_a_torn_batch_at_the_tail_is_cut():
    """CKP-3: half a batch reached the disk before the power went: recovery truncates it."""
    disk, log = new_log(5, flushed=True)
    fill(log, 1)
    path = log.active_segment.log_path
    disk.files[path].flushed = disk.file_size(path) - 40   # the disk got all but 40 bytes of it
    disk.crash()
    log = reopen(disk, log, recovery_point=5)
    assert log.log_end_offset == 5
    assert log.recovery_stats["bytes_truncated"] == BATCH - 40
    assert disk.file_size(path) == 5 * BATCH and all_crcs_ok(disk, log)


def test_ckp_3_corruption_in_the_middle_cuts_there_and_drops_later_segments():
    """CKP-3: a bad CRC ends the log at the last valid batch; all later segments are deleted;
    everything before is kept."""
    disk, log = new_log(20, epoch=1)
    fill(log, 25, epoch=2)
    log.flush()
    segment = log.segments[1]
    raw = disk.read_file(segment.log_path)
    position = [p for p, _ in iter_batches(raw)][3]
    disk.corrupt(segment.log_path, position + 80, b"\xde\xad")
    log.close()
    log = reopen(disk, log, recovery_point=0)
    assert log.log_end_offset == 13
    assert [s.base_offset for s in log.segments] == [0, 10]
    assert sorted(n for n in disk.listdir(DIR) if n.endswith(".log")) == [
        "00000000000000000000.log", "00000000000000000010.log"]
    assert offsets(log.read(0, 1 << 20)) == list(range(13))
    assert log.recovery_stats == {"segments_recovered": 2, "batches_scanned": 13,
                                  "bytes_truncated": 7 * BATCH, "segments_deleted": 3, "indexes_rebuilt": 0,
                                  "producer_batches_replayed": 3, "gaps_truncated": 0}   # replayed from the snapshot at 10
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0)]       # epoch 2 began at 20: gone
    assert all_crcs_ok(disk, log)
    fill(log, 2, epoch=3)
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (3, 13)]


def test_ckp_3_recovery_starts_at_the_recovery_point():
    """CKP-3: segments wholly below the recovery point are not scanned."""
    disk, log = new_log(45, flushed=True)
    raw = disk.read_file(log.segments[0].log_path)
    disk.corrupt(log.segments[0].log_path, 100, bytes([raw[100] ^ 0xFF]))   # below the recovery point
    log.close()
    log = reopen(disk, log, recovery_point=45)
    assert log.log_end_offset == 45
    assert log.recovery_stats["segments_recovered"] == 1 and log.recovery_stats["batches_scanned"] == 5
    log.close()
    log = reopen(disk, log, recovery_point=15)
    assert log.recovery_stats["segments_recovered"] == 4 and log.recovery_stats["batches_scanned"] == 35
    log.close()
    log = reopen(disk, log, recovery_point=0)             # now the scan reaches the corrupt batch
    assert log.log_end_offset == 0 and [s.base_offset for s in log.segments] == [0]


def test_epo_1_epoch_cache_is_truncated_to_the_recovered_log():
    """EPO-1: on load the cache is cut to the recovered log end offset (what a crash left)."""
    disk, log = new_log(5, epoch=1, flushed=True)
    fill(log, 3, epoch=2)
    log.leader_epoch_cache.assign(3, log.log_end_offset)         # became leader again, no write yet
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 5), (3, 8)]
    disk.crash()
    log = reopen(disk, log, recovery_point=5)
    assert log.log_end_offset == 5
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0)]
    assert checkpoint.read_epochs(disk, f"{DIR}/leader-epoch-checkpoint") == [(1, 0)]


def test_epo_1_a_new_epoch_is_written_by_the_next_flush_and_a_crash_before_it_relearns_it():
    """EPO-1: becoming leader (or copying a new epoch) costs no fsync at once; the log's next flush
    writes the checkpoint before its recovery point moves, and a crash before that flush finds the
    epoch again in whatever batches survived above the recovery point."""
    disk, log = new_log(5, epoch=1, flushed=True)
    path = f"{DIR}/leader-epoch-checkpoint"
    assert checkpoint.read_epochs(disk, path) == [(1, 0)]
    syncs = disk.flush_count
    log.leader_epoch_cache.assign(2, log.log_end_offset)          # became leader in epoch 2
    fill(log, 3, epoch=2)
    log.truncate_to(7)
    assert disk.flush_count == syncs                               # no fsync on the request path
    assert checkpoint.read_epochs(disk, path) == [(1, 0)]

    # the operating system wrote the segment back, the checkpoint never was: recovery relearns it
    for segment in log.segments:
        segment.flush()
    disk.crash()
    log = reopen(disk, log, recovery_point=5)
    assert log.log_end_offset == 7
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 5)]

    log.leader_epoch_cache.assign(3, log.log_end_offset)
    fill(log, 2, epoch=3)
    log.flush()                                                    # the checkpoint first, then the recovery point
    assert checkpoint.read_epochs(disk, path) == [(1, 0), (2, 5), (3, 7)]
    disk.crash()
    log = reopen(disk, log, recovery_point=log.recovery_point, needs_recovery=False)
    assert log.log_end_offset == 9 and log.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 5), (3, 7)]


def test_epo_1_an_entry_dropped_by_a_truncation_stays_dropped_after_a_power_loss():
    """A follower cut its epoch-3 records and copied the leader's epoch-2 ones at the same offsets:
    the dropped (3, 5) is written at once, since recovery learns only epochs above the latest one
    in the file and would keep a stale (3, 5)."""
    disk, log = new_log(5, epoch=1)
    fill(log, 5, epoch=3)
    log.flush()
    assert checkpoint.read_epochs(disk, f"{DIR}/leader-epoch-checkpoint") == [(1, 0), (3, 5)]
    log.truncate_to(5)
    fill(log, 3, epoch=2)
    for segment in log.segments:                # the OS wrote the batches back; no flush
        segment.flush()
    disk.crash()
    log = reopen(disk, log, recovery_point=5)
    assert log.log_end_offset == 8
    assert [log.epoch_for_offset(o) for o in range(8)] == [1] * 5 + [2] * 3


def test_recovery_relearns_epochs_when_the_checkpoint_is_lost():
    disk, log = new_log(12, epoch=1)
    fill(log, 12, epoch=4)
    log.close()
    disk.remove(f"{DIR}/leader-epoch-checkpoint")
    log = reopen(disk, log, recovery_point=0)
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (4, 12)]


def test_clean_open_scans_nothing_and_finds_the_same_end():
    disk, log = new_log(47, flushed=True)
    log.close()
    again = reopen(disk, log, recovery_point=47, needs_recovery=False)
    assert again.log_end_offset == 47
    assert again.recovery_stats["batches_scanned"] == 0 and again.recovery_stats["segments_recovered"] == 0
    assert again.active_segment.max_timestamp == 1046
    fill(again, 3, ts=2000)
    assert offsets(again.read(45, 1 << 20)) == [45, 46, 47, 48, 49]


def test_clean_open_with_garbage_after_the_last_batch_falls_back_to_recovery():
    disk, log = new_log(13, flushed=True)
    log.close()
    active = log.segments[-1].log_path
    disk.corrupt(active, disk.file_size(active), b"\x00" * 30)
    again = reopen(disk, log, recovery_point=13, needs_recovery=False)
    assert again.log_end_offset == 13 and again.recovery_stats["bytes_truncated"] == 30


def test_open_cleans_leftovers_and_handles_empty_dirs():
    disk = MemoryDisk()
    disk.makedirs(DIR)
    disk.write_file_atomic(f"{DIR}/leader-epoch-checkpoint.tmp", b"junk")
    disk.write_file_atomic(f"{DIR}/00000000000000000042.index", b"")
    log = Log.open(disk, DIR, "t", 0, CONFIG, log_start_offset=100)
    assert disk.listdir(DIR) == ["00000000000000000100.log"]    # its indexes come with their first entry
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    fill(log, 2)
    assert offsets(log.read(100, 1 << 20)) == [100, 101]


def test_a_log_start_offset_beyond_the_recovered_end_starts_afresh():
    disk, log = new_log(5, flushed=True)
    fill(log, 5)
    disk.crash()
    log = reopen(disk, log, recovery_point=5, log_start_offset=8)
    assert (log.log_start_offset, log.log_end_offset) == (8, 8)
    assert [s.base_offset for s in log.segments] == [8]


# -- LogManager --------------------------------------------------------------------------------

def manager_cycle(disk, dirs):
    manager = LogManager(disk, dirs, CONFIG)
    manager.startup(0)
    assert not manager.recovered_uncleanly and manager.logs == {}
    for p in range(4):
        fill(manager.get_or_create_log("my-topic", p, CONFIG, 0), 25 + p)
    fill(manager.get_or_create_log("other", 0, CONFIG, 0), 3)
    assert sorted(manager.dir_of.values()) == sorted([dirs[0]] * 3 + [dirs[1]] * 2)
    assert manager.get_or_create_log("my-topic", 0) is manager.get_log("my-topic", 0)
    hws = {key: log.log_end_offset - 1 for key, log in manager.logs.items()}
    manager.write_checkpoints(manager.high_watermark_checkpoints(hws))
    for d in dirs:
        in_dir = {k for k, v in manager.dir_of.items() if v == d}
        assert set(checkpoint.read_offsets(disk, f"{d}/replication-offset-checkpoint")) == in_dir
    assert manager.read_high_watermarks() == hws
    manager.shutdown()
    for d in dirs:
        assert disk.exists(f"{d}/.kafka_cleanshutdown")
        assert checkpoint.read_offsets(disk, f"{d}/recovery-point-offset-checkpoint") == {
            k: log.log_end_offset for k, log in manager.logs.items() if manager.dir_of[k] == d}
    return manager, hws


@pytest.mark.parametrize("kind", ["memory", "os"])
def test_ckp_2_clean_shutdown_then_restart_scans_nothing(kind, tmp_path):
    """CKP-2, CKP-3: shutdown flushes, checkpoints recovery points and writes .kafka_cleanshutdown;
    the next start opens every log without recovery (0 batches scanned) at the same LEO."""
    disk = MemoryDisk(strict_dirs=True) if kind == "memory" else OsDisk()
    root = "/data" if kind == "memory" else str(tmp_path)
    dirs = [f"{root}/a", f"{root}/b"]
    first, hws = manager_cycle(disk, dirs)
    if kind == "memory":
        disk.crash()                                    # nothing was left unflushed
    again = LogManager(disk, dirs, CONFIG)
    again.startup(1000)
    assert not again.recovered_uncleanly
    assert again.recovery_stats["batches_scanned"] == 0 and again.recovery_stats["logs_loaded"] == 5
    assert {k: log.log_end_offset for k, log in again.logs.items()} == \
        {k: log.log_end_offset for k, log in first.logs.items()}
    assert again.dir_of == first.dir_of
    assert again.read_high_watermarks() == hws
    for d in dirs:
        assert not disk.exists(f"{d}/.kafka_cleanshutdown")
    log = again.get_log("my-topic", 2)
    assert offsets(log.read(0, 1 << 20)) == list(range(27))
    again.shutdown()


def test_ckp_3_unclean_restart_recovers_from_the_checkpointed_recovery_points():
    disk = MemoryDisk()
    dirs = ["/data/a", "/data/b"]
    manager, _ = manager_cycle(disk, dirs)
    manager = LogManager(disk, dirs, CONFIG)
    manager.startup(0)
    fill(manager.get_log("my-topic", 0), 10)            # 25 -> 35, the roll at 30 flushes [0, 30)
    manager.checkpoint_recovery_points()
    fill(manager.get_log("my-topic", 0), 2)
    disk.crash()                                        # no clean shutdown
    after = LogManager(disk, dirs, CONFIG)
    after.startup(0)
    assert after.recovered_uncleanly
    assert after.recovery_stats["segments_recovered"] >= 5 and after.recovery_stats["batches_scanned"] > 0
    assert after.get_log("my-topic", 0).log_end_offset == 30
    assert after.get_log("my-topic", 3).log_end_offset == 28


def test_log_start_offsets_survive_restarts_and_deleted_logs_vanish():
    disk = MemoryDisk()
    config = LogConfig(segment_bytes=10 * BATCH, retention_bytes=10 * BATCH, retention_ms=-1)
    manager = LogManager(disk, ["/data/a"], config)
    manager.startup(0)
    log = manager.get_or_create_log("x-y-z", 3, config, 0)
    fill(log, 35)
    fill(manager.get_or_create_log("gone", 0, config, 0), 2)
    assert manager.cleanup(now_ms=0) == 2
    assert log.log_start_offset == 20
    assert log.maybe_increment_log_start_offset(22)
    manager.checkpoint_log_start_offsets()
    assert checkpoint.read_offsets(disk, "/data/a/log-start-offset-checkpoint") == {("x-y-z", 3): 22, ("gone", 0): 0}
    assert manager.delete_log("gone", 0) and not manager.delete_log("gone", 0)
    assert not disk.exists("/data/a/gone-0")
    manager.shutdown()
    assert checkpoint.read_offsets(disk, "/data/a/log-start-offset-checkpoint") == {("x-y-z", 3): 22}
    again = LogManager(disk, ["/data/a"], config)
    again.startup(0, {"x-y-z": LogConfig(segment_bytes=5 * BATCH)})
    log = again.get_log("x-y-z", 3)
    assert (log.log_start_offset, log.log_end_offset) == (22, 35)
    assert log.config.segment_bytes == 5 * BATCH
    assert set(again.logs) == {("x-y-z", 3)}


def test_flush_dirty_follows_each_logs_flush_settings():
    disk = MemoryDisk()
    manager = LogManager(disk, ["/data/a"], CONFIG)
    manager.startup(0)
    slow = manager.get_or_create_log("slow", 0, CONFIG, 0)
    fast = manager.get_or_create_log("fast", 0, LogConfig(flush_ms=100), 0)
    fill(slow, 3)
    fill(fast, 3)
    assert manager.flush_dirty(50) == 0
    assert manager.flush_dirty(100) == 1
    assert fast.recovery_point == 3 and slow.recovery_point == 0


@pytest.mark.parametrize("seed", range(8))
def test_random_crashes_never_lose_flushed_data_or_leave_corruption(seed):
    """DUR-1, CKP-3 under random appends, flushes, truncations and power losses."""
    rng = random.Random(seed)
    disk = MemoryDisk()
    config = LogConfig(segment_bytes=rng.choice([600, 2000, 10_000]), index_interval_bytes=rng.choice([0, 300, 4096]))
    manager = LogManager(disk, ["/data/a"], config)
    manager.startup(0)
    log = manager.get_or_create_log("t", 0, config, 0)
    written: dict[int, bytes] = {}     # base offset -> stored batch
    epoch = 0                          # a partition's leader epochs only grow
    for _ in range(12):
        for _ in range(rng.randrange(1, 30)):
            values = [bytes([rng.randrange(256)]) * rng.randrange(1, 300) for _ in range(rng.randrange(1, 4))]
            batch = make_batch(values, timestamp_ms=rng.randrange(10**6))
            epoch += rng.random() < 0.2
            info = log.append_as_leader(batch, epoch, 0)
            written[info.first_offset] = bytes(batch)
            if rng.random() < 0.1:
                log.flush()
            if rng.random() < 0.05:
                manager.checkpoint_recovery_points()
            if rng.random() < 0.03 and log.log_end_offset > log.log_start_offset:
                log.truncate_to(rng.randrange(log.log_start_offset, log.log_end_offset + 1))
                written = {o: b for o, b in written.items() if o < log.log_end_offset}
        durable = log.recovery_point          # everything below it was fsynced
        if rng.random() < 0.3:
            manager.shutdown()
            durable = log.log_end_offset
        else:
            disk.crash()
        manager = LogManager(disk, ["/data/a"], config)
        manager.startup(0)
        log = manager.get_log("t", 0)
        assert log.log_end_offset >= durable
        assert all_crcs_ok(disk, log)
        stored = {h.base_offset: bytes(log.read(h.base_offset, 1, min_one_batch=True))
                  for h in log.iter_batch_headers(0)}
        assert sorted(stored) == sorted(o for o in written if o < log.log_end_offset)
        for offset, data in stored.items():
            assert data == written[offset]
        written = {o: b for o, b in written.items() if o < log.log_end_offset}
        assert log.leader_epoch_cache.epoch_entries() == [] or \
            log.leader_epoch_cache.epoch_entries()[-1][1] < max(log.log_end_offset, 1)


def test_a_segment_too_small_for_an_index_entry_reopens_without_index_files_or_a_rebuild():
    """A new segment's index files come with their first entry: a clean restart of a log holding
    less than index.interval.bytes finds none, and takes that as empty indexes (no rebuild, no
    offset index created), as a broker of thousands of idle partitions does for each of them."""
    disk = MemoryDisk()
    log = Log.open(disk, DIR, "t", 0, CONFIG)
    fill(log, 2)                                           # 2 batches: not past index.interval.bytes
    log.flush()
    log.close()                                            # (its last timestamp goes to the time index)
    assert [n for n in disk.listdir(DIR) if n.endswith(".index")] == []
    again = reopen(disk, log, recovery_point=2, needs_recovery=False)
    assert again.log_end_offset == 2 and offsets(again.read(0, 1 << 20)) == [0, 1]
    assert sum(s.index_rebuilds for s in again.segments) == 0
    assert [n for n in disk.listdir(DIR) if n.endswith(".index")] == []
    fill(again, 3)                                         # past the interval: the index appears
    assert any(n.endswith(".index") for n in disk.listdir(DIR))
