"""The partition Log: appends (leader and follower), rolls, reads, time lookups, truncation,
retention, flushing."""

from __future__ import annotations

import pytest

from strandline.log.config import LogConfig
from strandline.log.log import Log, OffsetOutOfOrder
from strandline.log.segment import CorruptRecordError
from strandline.protocol.records import crc_ok, iter_batches, read_header
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import make_batch

BATCH = len(make_batch([b"x" * 100]))   # one 100-byte record: 175 bytes


def open_log(disk, root, **cfg) -> Log:
    config = LogConfig(**{"segment_bytes": 10 * BATCH, "index_interval_bytes": 2 * BATCH, **cfg})
    return Log.open(disk, f"{root}/t-0", "t", 0, config, needs_recovery=False, now_ms=0)


def fill(log: Log, n: int, *, epoch: int = 0, ts: int = 1000, records: int = 1, now: int | None = None) -> None:
    for i in range(n):
        log.append_as_leader(make_batch([b"x" * 100] * records, timestamp_ms=ts + i), epoch,
                             ts + i if now is None else now)


def offsets(data: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_batches(data)]


def test_leader_append_stamps_offsets_and_epoch_in_place(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    records = make_batch([b"a", b"b", b"c"]) + make_batch([b"d"])
    info = log.append_as_leader(records, 7, now_ms=5)
    assert info.first_offset == 0 and info.last_offset == 3 and info.num_batches == 2
    assert info.valid_bytes == len(records)
    first, second = read_header(records, 0), read_header(records, read_header(records, 0).size)
    assert (first.base_offset, first.partition_leader_epoch) == (0, 7)
    assert (second.base_offset, second.partition_leader_epoch) == (3, 7)
    assert crc_ok(records, 0, first)                      # the CRC does not cover offset or epoch
    assert log.read(0, 1 << 20) == bytes(records)
    assert log.log_end_offset == 4
    assert log.leader_epoch_cache.epoch_entries() == [(7, 0)]
    info = log.append_as_leader(make_batch([b"e"] * 5), 7, now_ms=6)
    assert (info.first_offset, info.last_offset) == (4, 8)
    assert log.leader_epoch_cache.epoch_entries() == [(7, 0)]
    log.append_as_leader(make_batch([b"f"]), 9, now_ms=7)
    assert log.leader_epoch_cache.epoch_entries() == [(7, 0), (9, 9)]


def test_append_rejects_partial_batches(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(make_batch([b"a"]) + b"\x00\x00", 0, 0)
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    info = log.append_as_leader(bytearray(), 0, 0)
    assert info.num_batches == 0 and log.log_end_offset == 0


def test_append_and_read_across_size_rolls(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    fill(log, 55)
    assert log.log_end_offset == 55
    assert [s.base_offset for s in log.segments] == [0, 10, 20, 30, 40, 50]
    assert all(s.size <= 10 * BATCH for s in log.segments)
    assert disk.listdir(f"{root}/t-0") == sorted(
        [f"{b:020d}{ext}" for b in (0, 10, 20, 30, 40, 50) for ext in (".log", ".index", ".timeindex")]
        + [f"{b:020d}.snapshot" for b in (10, 20, 30, 40, 50)]      # producer state at each roll
        + ["leader-epoch-checkpoint"])
    assert offsets(log.read(0, 1 << 20)) == list(range(55))          # crosses segment boundaries
    assert offsets(log.read(8, 5 * BATCH)) == [8, 9, 10, 11, 12]
    assert offsets(log.read(8, 5 * BATCH + 10)) == [8, 9, 10, 11, 12]
    assert offsets(log.read(19, 1)) == [19]                            # min one batch
    assert log.read(19, 1, min_one_batch=False) == b""
    assert offsets(log.read(5, 1 << 20, max_offset=23)) == list(range(5, 23))
    assert log.read(23, 1 << 20, max_offset=23) == b""
    assert log.read(55, 1 << 20) == b""
    with pytest.raises(ValueError):
        log.read(56, 100)
    assert log.recovery_point == 50                                  # rolled segments were flushed


def test_reads_in_small_steps_see_every_batch_once(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, segment_bytes=7 * BATCH + 3)
    for i in range(40):
        log.append_as_leader(make_batch([b"y" * (10 + 37 * (i % 5))] * (1 + i % 4)), 0, i)
    seen, offset = [], 0
    while offset < log.log_end_offset:
        data = log.read(offset, 400)
        hs = [h for _, h in iter_batches(data)]
        assert hs and hs[0].base_offset <= offset <= hs[0].last_offset
        seen += [h.base_offset for h in hs]
        offset = hs[-1].next_offset
    assert seen == offsets(log.read(0, 1 << 30))


def test_roll_by_time_since_first_append(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, segment_bytes=1 << 30, segment_ms=1000)
    fill(log, 3, now=10_000)
    fill(log, 1, now=10_900)
    fill(log, 1, now=11_000)                 # 1000 ms since the first append: not yet (Kafka: "> segment.ms")
    assert len(log.segments) == 1
    fill(log, 1, now=11_001)
    assert [s.base_offset for s in log.segments] == [0, 5]
    fill(log, 1, now=11_500)
    fill(log, 1, now=12_002)
    assert [s.base_offset for s in log.segments] == [0, 5, 7]


def test_roll_when_the_index_is_full(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, segment_bytes=1 << 30, index_interval_bytes=0, segment_index_bytes=8 * 4)
    fill(log, 12)
    assert len(log.segments) > 1
    assert all(len(s.offset_index) <= 4 for s in log.segments)
    assert offsets(log.read(0, 1 << 20)) == list(range(12))


def test_follower_append_keeps_offsets_and_epochs(disk_root):
    disk, root = disk_root
    leader = open_log(disk, root)
    fill(leader, 5, epoch=1)
    fill(leader, 5, epoch=3)
    data = leader.read(0, 1 << 20)
    follower = Log.open(disk, f"{root}/t-1", "t", 1, leader.config, needs_recovery=False)
    info = follower.append_as_follower(data[:3 * BATCH])
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 2, 3)
    with pytest.raises(OffsetOutOfOrder):
        follower.append_as_follower(data[2 * BATCH:])                 # overlap
    bad = bytearray(data[3 * BATCH:])
    bad[100] ^= 1
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bytes(bad))
    follower.append_as_follower(memoryview(data)[3 * BATCH:])
    assert follower.read(0, 1 << 20) == data
    assert follower.log_end_offset == 10
    assert follower.leader_epoch_cache.epoch_entries() == [(1, 0), (3, 5)]
    assert [s.base_offset for s in follower.segments] == [0]  # rolled once the segment is full: not yet


def test_iter_batch_headers(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    fill(log, 25, records=2)
    assert [h.base_offset for h in log.iter_batch_headers(0)] == list(range(0, 50, 2))
    assert [h.base_offset for h in log.iter_batch_headers(31)] == list(range(30, 50, 2))
    assert list(log.iter_batch_headers(50)) == []


def test_find_offset_by_timestamp_across_segments(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    fill(log, 45, ts=5000, records=2)
    assert log.find_offset_by_timestamp(0) == (0, 5000)
    assert log.find_offset_by_timestamp(5000) == (0, 5000)
    assert log.find_offset_by_timestamp(5017) == (34, 5017)
    assert log.find_offset_by_timestamp(5044) == (88, 5044)
    assert log.find_offset_by_timestamp(5045) is None
    # after a reopen, inactive segments know their max timestamp from the time index
    expected = [max(h.max_timestamp for h in s.iter_headers()) for s in log.segments]
    assert [s.max_timestamp for s in log.segments] == expected and len(expected) > 3
    log.close()
    again = open_log(disk, root)
    assert again.recovery_stats["batches_scanned"] == 0
    assert [s.max_timestamp for s in again.segments] == expected
    assert again.find_offset_by_timestamp(5017) == (34, 5017)


def test_truncate_to(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    fill(log, 20, epoch=1)
    fill(log, 20, epoch=2)
    log.flush()
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (2, 20)]
    assert not log.truncate_to(40) and not log.truncate_to(41)
    assert log.truncate_to(25)
    assert log.log_end_offset == 25 and log.recovery_point == 25
    assert [s.base_offset for s in log.segments] == [0, 10, 20]
    assert offsets(log.read(0, 1 << 20)) == list(range(25))
    assert log.truncate_to(15)
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0)]
    assert [s.base_offset for s in log.segments] == [0, 10]
    fill(log, 3, epoch=3)
    assert log.log_end_offset == 18
    assert log.leader_epoch_cache.epoch_entries() == [(1, 0), (3, 15)]
    assert offsets(log.read(10, 1 << 20)) == list(range(10, 18))
    assert log.truncate_to(10)
    assert [s.base_offset for s in log.segments] == [0, 10] and log.segments[-1].size == 0
    assert log.log_end_offset == 10


def test_truncate_inside_a_batch_removes_the_whole_batch(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    fill(log, 4, records=5)
    assert log.truncate_to(12)
    assert log.log_end_offset == 10
    assert offsets(log.read(0, 1 << 20)) == [0, 5]


def test_truncate_fully_and_start_at(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    fill(log, 25, epoch=4)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (100, 100, 100)
    assert [s.base_offset for s in log.segments] == [100]
    assert log.leader_epoch_cache.epoch_entries() == []
    fill(log, 2, epoch=5)
    assert offsets(log.read(100, 1 << 20)) == [100, 101]
    with pytest.raises(ValueError):
        log.read(99, 100)
    assert log.truncate_to(50)                           # below the log start: start again there
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)


def test_retention_by_time_moves_the_log_start_offset(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, retention_ms=1000)
    fill(log, 10, epoch=1, ts=1000)
    fill(log, 25, epoch=2, ts=5000)          # segments: [0,10) ts<=1009, [10,20) ts<=5009, [20,30), [30,35)
    assert log.delete_old_segments(now_ms=2009) == 0
    assert log.delete_old_segments(now_ms=2010) == 1
    assert log.log_start_offset == 10 and [s.base_offset for s in log.segments] == [10, 20, 30]
    assert log.leader_epoch_cache.epoch_entries() == [(2, 10)]
    with pytest.raises(ValueError):
        log.read(9, 100)
    assert offsets(log.read(10, 1 << 20)) == list(range(10, 35))
    assert log.delete_old_segments(now_ms=10**9, high_watermark=25) == 1   # not past the high watermark
    assert log.delete_old_segments(now_ms=10**9) == 1                       # never the active segment
    assert [s.base_offset for s in log.segments] == [30] and log.log_start_offset == 30
    assert log.find_offset_by_timestamp(0) == (30, 5020)


def test_retention_by_size(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, retention_bytes=25 * BATCH, retention_ms=-1)
    fill(log, 55)                             # 6 segments, 55 batches
    assert log.delete_old_segments(now_ms=10**12) == 3
    assert log.size_in_bytes <= 25 * BATCH and log.log_start_offset == 30
    assert log.delete_old_segments(now_ms=10**12) == 0
    log.update_config(LogConfig(segment_bytes=10 * BATCH, retention_bytes=0, retention_ms=-1))
    assert log.delete_old_segments(now_ms=0) == 2
    assert log.log_start_offset == 50 and len(log.segments) == 1


def test_log_start_offset_advance_then_retention(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, retention_ms=-1)
    fill(log, 35)
    assert log.maybe_increment_log_start_offset(23)
    assert not log.maybe_increment_log_start_offset(5)
    assert log.delete_old_segments(now_ms=0) == 2
    assert log.log_start_offset == 23 and log.segments[0].base_offset == 20
    assert offsets(log.read(23, 1 << 20))[0] == 23


def test_flush_policies():
    disk = MemoryDisk()
    log = Log.open(disk, "/d/t-0", "t", 0, LogConfig(flush_messages=5, flush_ms=1000), now_ms=0)
    path = log.active_segment.log_path
    fill(log, 4, now=10)
    assert disk.unflushed_bytes(path) == 4 * BATCH and log.recovery_point == 0
    assert not log.maybe_flush(500)
    fill(log, 1, now=20)                             # flush.messages reached: flushed on append
    assert disk.unflushed_bytes(path) == 0 and log.recovery_point == 5
    fill(log, 1, now=30)
    assert not log.maybe_flush(1019)
    assert log.maybe_flush(1020)                     # flush.ms since the last flush (at 20 ms)
    assert disk.unflushed_bytes(path) == 0 and log.recovery_point == 6
    assert not log.maybe_flush(5000)                 # nothing new
    fill(log, 1, now=6000)
    log.flush()
    assert log.recovery_point == 7


def test_delete_removes_the_directory(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    fill(log, 12)
    log.delete()
    assert not disk.exists(f"{root}/t-0")


def _records_of(log: Log) -> list[tuple[int, int, int, int]]:
    """(batch base offset, batch max timestamp, record offset, record timestamp) of every record."""
    from strandline.protocol.records import iter_records

    data = log.read(0, 1 << 30)
    return [(h.base_offset, h.max_timestamp, r.offset, r.timestamp)
            for pos, h in iter_batches(data) for r in iter_records(data, pos, h)]


@pytest.mark.parametrize("seed", range(12))
def test_time_lookups_answer_records_as_a_scan_of_every_record_does(disk_root, seed):
    """find_offset_by_timestamp: the first record from the log start with timestamp >= the target;
    find_max_timestamp: the first record holding the largest timestamp of the batches below a
    bound (Kafka's offsetOfMaxTimestamp). Several segments, reopened (their maxima then come from
    the time index), a log start offset inside a batch."""
    import random

    disk, root = disk_root
    rng = random.Random(seed)
    log = open_log(disk, root)
    for _ in range(60):
        n = rng.randrange(1, 5)
        log.append_as_leader(make_batch([b"x" * 30] * n, timestamps=[rng.randrange(1000, 1040) for _ in range(n)],
                                        compression=rng.choice((0, 1))), 0, 0)
    log.close()
    log = open_log(disk, root)
    assert len(log.segments) > 3
    records = _records_of(log)
    log.maybe_increment_log_start_offset(rng.randrange(1, 20))
    start = log.log_start_offset
    for target in range(995, 1045):
        expected = next(((o, t) for _, _, o, t in records if o >= start and t >= target), None)
        assert log.find_offset_by_timestamp(target) == expected, target
    batches: dict[int, tuple[int, list]] = {}
    for base, max_ts, offset, ts in records:
        batches.setdefault(base, (max_ts, []))[1].append((offset, ts))
    for below in (1, start + 1, log.log_end_offset // 2, log.log_end_offset):
        candidates = [(base, max_ts, recs) for base, (max_ts, recs) in sorted(batches.items())
                      if base < below and recs[-1][0] >= start]
        if not candidates:
            assert log.find_max_timestamp(below) is None
            continue
        top = max(max_ts for _, max_ts, _ in candidates)
        _, _, recs = next(c for c in candidates if c[1] == top)
        assert log.find_max_timestamp(below) == (next(o for o, t in recs if t == top), top), below


def test_follower_append_steps_over_a_gap_as_kafka_does(disk_root):
    """A compacted leader's log has gaps: a follower's first batch may start above its log end offset."""
    disk, root = disk_root
    leader = open_log(disk, root)
    fill(leader, 5, epoch=1)
    data = leader.read(0, 1 << 20)
    follower = Log.open(disk, f"{root}/t-1", "t", 1, leader.config, needs_recovery=False)
    follower.append_as_follower(data[:2 * BATCH])
    info = follower.append_as_follower(data[4 * BATCH:])
    assert (info.first_offset, follower.log_end_offset) == (4, 5)
    assert offsets(follower.read(0, 1 << 20)) == [0, 1, 4]
