"""The storage engine on an in-memory disk: segments, indexes, checkpoints, recovery, retention."""

from __future__ import annotations

import pytest

from strandline.log import checkpoint
from strandline.log.config import LogConfig
from strandline.log.epoch import LeaderEpochCache
from strandline.log.log import Log
from strandline.log.manager import LogManager
from strandline.protocol.records import crc_ok, iter_batches
from strandline.runtime.disk import OsDisk
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import make_batch

DIR = "/logs/t-0"


def new_log(disk=None, **cfg):
    disk = disk or MemoryDisk()
    config = LogConfig(**{"segment_bytes": 2048, "index_interval_bytes": 256, **cfg})
    return disk, Log.open(disk, DIR, "t", 0, config, needs_recovery=False)


def fill(log, n, size=100, ts=1000, epoch=0):
    for i in range(n):
        log.append_as_leader(make_batch([bytes([i % 256]) * size], timestamp_ms=ts + i), epoch, ts + i)


def offsets_in(data):
    return [h.base_offset for _, h in iter_batches(data)]


def test_append_assigns_offsets_and_rolls_segments_by_size():
    _, log = new_log()
    fill(log, 50)
    assert log.log_end_offset == 50
    assert len(log.segments) > 3
    assert [s.base_offset for s in log.segments] == sorted(s.base_offset for s in log.segments)
    assert offsets_in(log.read(0, 1 << 20)) == list(range(50))


def test_read_bounds_whole_batches_bytes_and_max_offset():
    _, log = new_log()
    fill(log, 30)
    size = len(make_batch([b"x" * 100]))
    assert offsets_in(log.read(7, 3 * size)) == [7, 8, 9]
    assert offsets_in(log.read(7, 10)) == [7]                      # min one batch
    assert log.read(7, 10, min_one_batch=False) == b""
    assert offsets_in(log.read(25, 1 << 20, max_offset=28)) == [25, 26, 27]
    assert log.read(30, 1 << 20) == b""
    with pytest.raises(ValueError):
        log.read(31, 100)


def test_read_across_a_budget_cut_never_skips_a_batch():
    _, log = new_log(segment_bytes=700)
    fill(log, 20)
    seen = []
    offset = 0
    while offset < 20:
        data = log.read(offset, 350)
        got = offsets_in(data)
        assert got and got[0] == offset
        seen += got
        offset = got[-1] + 1
    assert seen == list(range(20))


def test_sparse_index_lookups_point_at_or_before_the_offset():
    _, log = new_log(segment_bytes=1 << 20)
    fill(log, 100)
    seg = log.segments[0]
    assert 0 < seg.index.entries < 100
    for offset in (0, 17, 55, 99):
        indexed, position = seg.index.lookup(offset)
        assert indexed <= offset
        assert offsets_in(seg.file.read(position, 200))[0] == indexed


def test_time_index_and_offset_by_timestamp():
    _, log = new_log()
    fill(log, 40, ts=5000)
    assert log.find_offset_by_timestamp(5017) == (17, 5017)
    assert log.find_offset_by_timestamp(0) == (0, 5000)
    assert log.find_offset_by_timestamp(99999) is None


def test_truncate_to_drops_later_batches_segments_and_epochs():
    _, log = new_log()
    fill(log, 20, epoch=1)
    fill(log, 20, epoch=2)
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 20)]
    assert log.truncate_to(15)
    assert log.log_end_offset == 15
    assert offsets_in(log.read(0, 1 << 20)) == list(range(15))
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0)]
    fill(log, 1, epoch=3)
    assert log.log_end_offset == 16


def test_retention_by_size_and_time_moves_the_log_start_offset():
    _, log = new_log(retention_bytes=4000, retention_ms=-1)
    fill(log, 60)
    before = len(log.segments)
    assert log.delete_old_segments(now_ms=10_000) > 0
    assert len(log.segments) < before and log.size_in_bytes <= 4000 + 2048
    assert log.log_start_offset == log.segments[0].base_offset > 0
    _, log = new_log(retention_ms=1000)
    fill(log, 60, ts=1000)
    assert log.delete_old_segments(now_ms=1000 + 60 + 500) == 0
    segments = len(log.segments)
    assert segments > 2
    # every segment is past retention.ms: all go but the active one (never deleted)
    assert log.delete_old_segments(now_ms=10_000) == segments - 1
    assert len(log.segments) == 1 and log.log_start_offset == log.segments[0].base_offset > 0


def test_ckp_1_checkpoint_format_round_trip_and_corruption():
    disk = MemoryDisk()
    checkpoint.write_offsets(disk, "/d/replication-offset-checkpoint", {("a-b", 3): 17, ("t", 0): 5})
    assert disk.read_file("/d/replication-offset-checkpoint") == b"0\n2\na-b 3 17\nt 0 5\n"
    assert checkpoint.read_offsets(disk, "/d/replication-offset-checkpoint") == {("a-b", 3): 17, ("t", 0): 5}
    disk.write_file_atomic("/d/bad", b"0\n3\nt 0 5\n")
    with pytest.raises(ValueError, match="/d/bad"):
        checkpoint.read_offsets(disk, "/d/bad")


def test_epo_1_leader_epoch_cache_rules_and_file():
    disk = MemoryDisk()
    cache = LeaderEpochCache(disk, "/p")
    cache.assign(0, 0)
    cache.assign(0, 5)          # same epoch, later offset: ignored
    cache.assign(2, 10)
    cache.assign(4, 30)
    assert cache.epoch_entries() == [(0, 0), (2, 10), (4, 30)]
    cache.write()               # what the log's next flush does
    assert disk.read_file("/p/leader-epoch-checkpoint") == b"0\n3\n0 0\n2 10\n4 30\n"
    assert cache.end_offset_for(4, 42) == (4, 42)
    assert cache.end_offset_for(3, 42) == (2, 30)
    assert cache.end_offset_for(1, 42) == (0, 10)
    assert cache.end_offset_for(-1, 42) == (-1, -1)
    cache.assign(3, 20)         # a lower epoch at a lower offset replaces what follows...
    assert cache.epoch_entries() == [(0, 0), (2, 10), (3, 20)]
    assert not cache.unwritten  # ...written at once, as it drops an entry
    assert LeaderEpochCache(disk, "/p").epoch_entries() == [(0, 0), (2, 10), (3, 20)]


def test_ckp_3_recovery_truncates_a_torn_tail_after_power_loss():
    """CKP-3, DUR-1: flushed data survives; the unflushed tail is lost and the log is consistent."""
    disk, log = new_log()
    fill(log, 20)
    log.flush()
    fill(log, 10)
    disk.crash()
    log = Log.open(disk, DIR, "t", 0, log.config, recovery_point=20, needs_recovery=True)
    # everything flushed survives (a segment roll also flushes, as Kafka's does); the rest is gone
    assert 20 <= log.log_end_offset < 30
    assert offsets_in(log.read(0, 1 << 20)) == list(range(log.log_end_offset))


def test_ckp_3_a_corrupt_batch_truncates_there_and_drops_later_segments():
    disk, log = new_log()
    fill(log, 40)
    seg = log.segments[1]
    data = disk.read_file(seg.log_path)
    positions = [p for p, _ in iter_batches(data)]
    disk.corrupt(seg.log_path, positions[2] + 70, b"\xff\xff")
    corrupt_offset = seg.base_offset + 2
    log = Log.open(disk, DIR, "t", 0, log.config, recovery_point=0, needs_recovery=True)
    assert log.log_end_offset == corrupt_offset
    assert log.segments[-1] is not None and len(log.segments) == 2
    assert log.recovery_stats["bytes_truncated"] > 0
    for seg in log.segments:
        raw = disk.read_file(seg.log_path)
        assert all(crc_ok(raw, p, h) for p, h in iter_batches(raw))


def test_ckp_2_clean_shutdown_skips_recovery_and_keeps_everything(tmp_path):
    """CKP-2: recovery points and the clean-shutdown marker; a clean start scans no batch."""
    disk = OsDisk()
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(disk, dirs, LogConfig(segment_bytes=4096))
    manager.startup(0)
    for p in range(4):
        fill(manager.get_or_create_log("topic-x", p, LogConfig(segment_bytes=4096), 0), 25)
    assert {manager.dir_of[("topic-x", p)] for p in range(4)} == set(dirs)
    manager.write_checkpoints(manager.high_watermark_checkpoints({("topic-x", p): 25 for p in range(4)}))
    manager.shutdown()
    assert (tmp_path / "a" / ".kafka_cleanshutdown").exists()
    again = LogManager(disk, dirs, LogConfig(segment_bytes=4096))
    again.startup(0)
    assert not again.recovered_uncleanly and again.recovery_stats["batches_scanned"] == 0
    assert {k: log.log_end_offset for k, log in again.logs.items()} == {("topic-x", p): 25 for p in range(4)}
    assert again.read_high_watermarks() == {("topic-x", p): 25 for p in range(4)}
    assert not (tmp_path / "a" / ".kafka_cleanshutdown").exists()
    # an unclean start (no marker) recovers from the recovery point
    third = LogManager(disk, dirs, LogConfig(segment_bytes=4096))
    third.startup(0)
    assert third.recovered_uncleanly
    assert {k: log.log_end_offset for k, log in third.logs.items()} == {("topic-x", p): 25 for p in range(4)}


def test_a_follower_batch_past_two_to_the_31_of_an_empty_segment_rolls_and_survives_a_restart():
    """A follower's first batch more than 2**31 offsets past its empty active segment's base (a
    compacted leader's log has such gaps) starts a segment of its own, as Kafka rolls when an
    offset would not fit the 32-bit relative offsets of the segment's indexes: before, it went into
    the empty segment, and the next roll failed (IndexOffsetOverflow), which stops a broker."""
    disk, log = new_log()
    far = 2**31 + 10
    log.append_as_follower(make_batch([b"a", b"b"], base_offset=far, leader_epoch=3))
    assert log.segments[-1].base_offset == far and log.log_end_offset == far + 2
    log.append_as_follower(make_batch([b"c"], base_offset=far + 2, leader_epoch=3))
    log.flush()
    disk.crash()
    log = Log.open(disk, DIR, "t", 0, log.config, recovery_point=0, needs_recovery=True)
    assert log.log_end_offset == far + 3
    assert offsets_in(log.read(far, 1 << 20)) == [far, far + 2]


def test_one_follower_append_spanning_more_than_two_to_the_31_offsets_is_split_across_segments():
    """A leader's read goes on into its next segment, so one Fetch answer can hold batches more
    than 2**31 offsets apart (a compacted log's gap): the follower appends them in parts, each
    part in a segment whose indexes can address it, and keeps every batch across a restart."""
    far = 2**31 + 10
    _, leader = new_log()
    leader.append_as_follower(make_batch([b"a", b"b"], base_offset=0, leader_epoch=3, timestamp_ms=1))
    leader.append_as_follower(make_batch([b"c"], base_offset=far, leader_epoch=3, timestamp_ms=2))
    disk, follower = new_log()
    info = follower.append_as_follower(bytearray(leader.read(0, 1 << 20)))        # one Fetch answer
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, far, 2)
    assert (info.max_timestamp, info.offset_of_max_timestamp) == (2, far)
    assert [s.base_offset for s in follower.segments] == [0, far]
    follower.append_as_follower(make_batch([b"d"], base_offset=far + 1, leader_epoch=3, timestamp_ms=3))
    follower.flush()
    disk.crash()
    follower = Log.open(disk, DIR, "t", 0, follower.config, recovery_point=0, needs_recovery=True)
    assert follower.log_end_offset == far + 2
    assert offsets_in(follower.read(0, 1 << 20)) == [0, far, far + 1]


def test_a_clean_stop_keeps_an_unhandled_unclean_shutdown_in_its_marker(tmp_path):
    """KIP-966's check: a life that began after an unclean shutdown no controller handled stops
    cleanly with a marker saying so; the next life opens its logs without recovery (they were
    flushed) but still registers as back from an unclean shutdown. A later clean stop with the
    shutdown handled writes Kafka's empty marker again."""
    disk = OsDisk()
    dirs = [str(tmp_path / "a")]
    first = LogManager(disk, dirs, LogConfig(segment_bytes=4096))
    first.startup(0)
    assert not first.had_clean_shutdown                    # a first start
    fill(first.get_or_create_log("t", 0, LogConfig(segment_bytes=4096), 0), 5)
    first.shutdown(unclean_shutdown_unhandled=True)
    second = LogManager(disk, dirs, LogConfig(segment_bytes=4096))
    second.startup(0)
    assert not second.had_clean_shutdown and second.recovery_stats["batches_scanned"] == 0
    second.shutdown()
    assert (tmp_path / "a" / ".kafka_cleanshutdown").read_bytes() == b""
    third = LogManager(disk, dirs, LogConfig(segment_bytes=4096))
    third.startup(0)
    assert third.had_clean_shutdown
