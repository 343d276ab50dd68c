"""A roll's flush of the segment it leaves happens away from the caller (Kafka's scheduled
``flush-log`` after a roll): the broker's event loop never waits for a gigabyte segment's fsync.
The recovery point passes the old segment only once its flush is reported done, and a roll the
recovery-point checkpoint on disk may already be past stays synchronous."""

from __future__ import annotations

from strandline.log.config import LogConfig
from strandline.log.manager import LogManager
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import make_batch

BATCH = len(make_batch([b"x" * 100]))
CONFIG = LogConfig(segment_bytes=5 * BATCH, index_interval_bytes=BATCH)


def started(disk: MemoryDisk) -> LogManager:
    logs = LogManager(disk, ["/data/logs"], CONFIG)
    logs.startup(0)
    logs.flush_rolls_later()
    return logs


def flush_paths(disk: MemoryDisk, flush) -> None:
    for path in flush.paths:
        if disk.exists(path):
            disk.open(path).flush()


def fill(log, n: int, epoch: int = 0) -> None:
    for i in range(n):
        log.append_as_leader(make_batch([b"x" * 100], timestamp_ms=1000 + i), epoch, 1000 + i)


def test_a_roll_leaves_its_segment_unflushed_until_the_flush_it_asked_for_is_done():
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 7)                                # 5 batches fill the first segment, the 6th rolls
    old = log.segments[0]
    assert [s.base_offset for s in log.segments] == [0, 5]
    assert disk.unflushed_bytes(old.log_path) == 5 * BATCH   # the roll did not fsync it
    assert log.recovery_point == 0
    [flush] = logs.take_roll_flushes()
    assert logs.take_roll_flushes() == []
    assert flush.offset == 5 and old.log_path in flush.paths

    flush_paths(disk, flush)                    # what the shell's worker thread does
    logs.roll_flushed(flush.token)
    assert log.recovery_point == 5
    assert not old.dirty and disk.unflushed_bytes(old.log_path) == 0
    logs.roll_flushed(flush.token)              # reported twice: nothing more happens
    assert log.recovery_point == 5


def test_a_log_cut_below_the_roll_before_its_flush_is_done_keeps_its_recovery_point():
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 6)
    [flush] = logs.take_roll_flushes()
    log.truncate_to(2)                          # a follower cut its log (the old segment with it)
    fill(log, 4, epoch=1)                       # new batches at 2..5, not flushed by anyone
    flush_paths(disk, flush)
    logs.roll_flushed(flush.token)
    assert log.recovery_point == 0              # offsets 2..5 now are not what was flushed


def test_the_roll_flush_also_makes_the_rolls_producer_snapshot_durable():
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 6)
    [flush] = logs.take_roll_flushes()
    snapshot = f"{log.dir}/00000000000000000005.snapshot"
    assert flush.paths[-1] == snapshot
    assert disk.unflushed_bytes(snapshot) > 0   # written, not fsynced by the roll
    flush_paths(disk, flush)
    logs.roll_flushed(flush.token)
    assert log.recovery_point == 5


def test_a_roll_at_or_below_the_highest_recovery_point_flushes_at_once():
    """After a truncation below a recovery point the checkpoint file may still hold, recovery would
    start beyond the old segment: the roll makes it durable first. (So does a roll with everything
    flushed already, as with a flush on every acknowledgement.)"""
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 5)
    log.flush()
    fill(log, 1)                                # rolls at 5 = the recovery point
    assert logs.take_roll_flushes() == [] and log.recovery_point == 5
    assert disk.unflushed_bytes(f"{log.dir}/00000000000000000005.snapshot") == 0
    fill(log, 6)                                # 6..11, rolls at 10
    assert len(logs.take_roll_flushes()) == 1   # above the recovery point: later
    log.flush()
    log.truncate_to(7)                          # a follower cut its log; the checkpoint may say 12
    assert log.recovery_point == 7 and log.highest_recovery_point == 12
    fill(log, 4, epoch=1)                       # rolls at 10 again: at once
    assert logs.take_roll_flushes() == []
    assert disk.unflushed_bytes(log.segments[1].log_path) == 0


def test_a_power_loss_before_the_roll_flush_skips_the_torn_snapshot_and_replays():
    """The roll's producer snapshot is lost with the power: the state comes from the log."""
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    for seq in range(6):                        # an idempotent producer's batches; the 6th rolls
        log.append_as_leader(make_batch([b"x" * 100], producer_id=7, producer_epoch=0, base_sequence=seq),
                             0, 1000 + seq)
    for segment in log.segments:                # the batches were written back, the snapshot not
        segment.flush()
    assert logs.take_roll_flushes()
    logs.checkpoint_recovery_points()
    disk.crash()
    again = LogManager(disk, ["/data/logs"], CONFIG)
    again.startup(0)
    log = again.get_log("t", 0)
    assert log.log_end_offset == 6
    assert log.producer_state.producers[7].last_seq == 5


def test_without_asynchronous_flushes_a_roll_flushes_at_once():
    disk = MemoryDisk()
    logs = LogManager(disk, ["/data/logs"], CONFIG)
    logs.startup(0)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 6)
    assert logs.take_roll_flushes() == []
    assert log.recovery_point == 5 and disk.unflushed_bytes(log.segments[0].log_path) == 0


def test_a_truncation_below_a_checkpointed_recovery_point_then_a_power_loss_leaves_no_hole():
    """The periodic recovery-point checkpoint says 12; the log is cut to 5 and refilled past a roll
    at 8; the power goes: recovery starts at the stale 12, so the roll must have made 5..7 durable
    (or the log would skip them)."""
    disk = MemoryDisk()
    logs = LogManager(disk, ["/data/logs"], LogConfig(segment_bytes=8 * BATCH, index_interval_bytes=BATCH))
    logs.startup(0)
    logs.flush_rolls_later()
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 12)                               # rolls at 8
    log.flush()
    logs.checkpoint_recovery_points()           # the periodic task: 12
    log.truncate_to(5)                          # a follower cut its log (a new leader)
    fill(log, 6, epoch=1)                       # 5..10, rolls at 8 again
    disk.crash()
    again = LogManager(disk, ["/data/logs"], LogConfig(segment_bytes=8 * BATCH, index_interval_bytes=BATCH))
    again.startup(0)
    log = again.get_log("t", 0)
    offsets = [h.base_offset for h in log.iter_batch_headers(0)]
    assert offsets == list(range(log.log_end_offset)), (offsets, [s.base_offset for s in log.segments])


def test_a_follower_copying_a_compacted_past_keeps_its_durable_segments_after_a_power_loss():
    """A topic compacted once, now cleanup.policy=delete: the leader's log skips 5..7, and the
    follower's segments have the same gap; recovery keeps them."""
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)

    def copy(offsets):
        for o in offsets:
            log.append_as_follower(make_batch([b"x" * 100], timestamp_ms=1000 + o, base_offset=o, leader_epoch=0),
                                   1000 + o)

    copy(range(0, 5))
    log.flush()
    logs.checkpoint_recovery_points()           # 5
    copy(range(8, 13))
    assert [s.base_offset for s in log.segments] == [0, 8]
    for flush in logs.take_roll_flushes():
        flush_paths(disk, flush)
        logs.roll_flushed(flush.token)
    log.flush()
    disk.crash()                                # before the next periodic checkpoint
    again = LogManager(disk, ["/data/logs"], CONFIG)
    again.startup(0)
    log = again.get_log("t", 0)
    assert log.log_end_offset == 13, again.recovery_stats
    assert [h.base_offset for h in log.iter_batch_headers(0)] == [0, 1, 2, 3, 4, 8, 9, 10, 11, 12]


def test_a_log_created_again_rolls_at_once_below_the_recovery_point_its_name_had():
    """The topic is deleted and created again within a checkpoint interval: the checkpoint file still
    says 12 for t-0, so the new log's roll at 5 is made durable at once (recovery after a power loss
    would start at 12 and never check the segment below)."""
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 12)
    logs.take_roll_flushes()
    log.flush()
    logs.checkpoint_recovery_points()           # the periodic task: t-0 -> 12
    logs.delete_log("t", 0)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 7)                                # rolls at 5
    assert logs.take_roll_flushes() == [] and disk.unflushed_bytes(log.segments[0].log_path) == 0
    log.segments[1].flush()
    disk.crash()
    again = LogManager(disk, ["/data/logs"], CONFIG)
    again.startup(0)
    log = again.get_log("t", 0)
    offsets = [h.base_offset for h in log.iter_batch_headers(0)]
    assert offsets == list(range(log.log_end_offset)) and log.log_end_offset >= 5


def test_deleting_a_log_asks_for_the_checkpoints_at_once_so_a_log_created_again_keeps_its_data():
    """A log start of 10 (DeleteRecords) checkpointed, the topic deleted and created again, 3 records
    flushed, a crash: with the stale entry the log would be emptied and started at 10."""
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 12)
    log.maybe_increment_log_start_offset(10)
    logs.checkpoint_log_start_offsets()         # the periodic task: t-0 -> 10
    assert logs.take_checkpoints_due() == []
    logs.delete_log("t", 0)
    logs.write_checkpoints(logs.take_checkpoints_due())   # the broker hands them to its writer at once
    assert logs.take_checkpoints_due() == []
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 3)
    log.flush()
    disk.crash()
    again = LogManager(disk, ["/data/logs"], CONFIG)
    again.startup(0)
    assert again.get_log("t", 0).log_end_offset == 3


def test_a_power_loss_that_takes_a_rolled_segments_tail_but_not_the_next_ones_ends_the_log_there():
    """The roll at 5 left 0..4 to its asynchronous flush; the next segment's batches 5..6 were
    fsynced (a flush of that segment alone, as the page cache may write any file back first), and
    the power went before the roll's flush: 3 and 4 are gone. The log ends at 3, where the hole
    begins, instead of skipping from 2 to 5; the note of the roll is gone with the recovery."""
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 3)
    log.flush()                                 # 0..2 durable
    fill(log, 4)                                # 3..6; the 6th batch (offset 5) rolls
    assert [s.base_offset for s in log.segments] == [0, 5] and logs.take_roll_flushes()
    log.segments[-1].flush()
    disk.crash()
    again = LogManager(disk, ["/data/logs"], CONFIG)
    again.startup(0)
    log = again.get_log("t", 0)
    assert [h.base_offset for h in log.iter_batch_headers(0)] == [0, 1, 2]
    assert log.log_end_offset == 3 and again.recovery_stats["gaps_truncated"] == 1
    assert not [n for n in disk.listdir(log.dir) if n.endswith(".rolled")]
    fill(log, 1)                                # and it goes on from there
    assert log.log_end_offset == 4


def test_the_roll_flush_done_removes_its_note():
    disk = MemoryDisk()
    logs = started(disk)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    fill(log, 6)
    [note] = [n for n in disk.listdir(log.dir) if n.endswith(".rolled")]
    assert note == "00000000000000000005.rolled" and disk.read_file(f"{log.dir}/{note}") == b"5"
    [flush] = logs.take_roll_flushes()
    flush_paths(disk, flush)
    logs.roll_flushed(flush.token)
    assert not [n for n in disk.listdir(log.dir) if n.endswith(".rolled")]
