"""Checkpoint files (CKP-1, CKP-2) and the leader epoch cache (EPO-1)."""

from __future__ import annotations

import pytest

from strandline.log import checkpoint
from strandline.log.epoch import LeaderEpochCache
from strandline.sim.disk import MemoryDisk


def test_ckp_1_offset_checkpoint_format_and_round_trip(disk_root):
    """CKP-1, CKP-2: Kafka's text format "0 / count / topic partition offset", written atomically."""
    disk, root = disk_root
    path = f"{root}/replication-offset-checkpoint"
    offsets = {("my-topic", 1): 98, ("my-topic", 0): 1234, ("__consumer_offsets", 7): 0}
    checkpoint.write_offsets(disk, path, offsets)
    assert disk.read_file(path) == b"0\n3\n__consumer_offsets 7 0\nmy-topic 0 1234\nmy-topic 1 98\n"
    assert checkpoint.read_offsets(disk, path) == offsets
    assert disk.listdir(root) == ["replication-offset-checkpoint"]
    checkpoint.write_offsets(disk, path, {})
    assert disk.read_file(path) == b"0\n0\n"
    assert checkpoint.read_offsets(disk, path) == {}
    assert checkpoint.read_offsets(disk, f"{root}/missing") == {}


def test_ckp_1_reads_whitespace_separated_entries(disk_root):
    disk, root = disk_root
    disk.write_file_atomic(f"{root}/cp", b"0\n2\nt   0\t5\nt 1 6\n\n")
    assert checkpoint.read_offsets(disk, f"{root}/cp") == {("t", 0): 5, ("t", 1): 6}


@pytest.mark.parametrize("content, reason", [
    (b"", "missing version"),
    (b"1\n0\n", "version"),
    (b"0\n", "missing version or count"),
    (b"0\nx\n", "entry count"),
    (b"0\n2\nt 0 5\n", "expected 2 entries, found 1"),
    (b"0\n1\nt 0 5\nt 1 6\n", "expected 1 entries, found 2"),
    (b"0\n1\nt 0\n", "3 fields"),
    (b"0\n1\nt zero 5\n", "bad number"),
    (b"0\n1\nt 0 5x\n", "bad number"),
    (b"\xff\xfe\n", "UTF-8"),
])
def test_ckp_1_corrupt_offset_checkpoint_is_a_clear_error(disk_root, content, reason):
    """CKP-1: a malformed checkpoint raises ValueError naming the file (Kafka: IOException)."""
    disk, root = disk_root
    path = f"{root}/recovery-point-offset-checkpoint"
    disk.write_file_atomic(path, content)
    with pytest.raises(ValueError, match=reason) as info:
        checkpoint.read_offsets(disk, path)
    assert path in str(info.value)


def test_epoch_checkpoint_format_and_errors(disk_root):
    disk, root = disk_root
    path = f"{root}/leader-epoch-checkpoint"
    checkpoint.write_epochs(disk, path, [(0, 0), (3, 1542)])
    assert disk.read_file(path) == b"0\n2\n0 0\n3 1542\n"
    assert checkpoint.read_epochs(disk, path) == [(0, 0), (3, 1542)]
    assert checkpoint.read_epochs(disk, f"{root}/none") == []
    disk.write_file_atomic(path, b"0\n2\n0 0\n")
    with pytest.raises(ValueError, match="leader-epoch-checkpoint"):
        checkpoint.read_epochs(disk, path)
    disk.write_file_atomic(path, b"0\n1\n0 0 0\n")
    with pytest.raises(ValueError, match="2 fields"):
        checkpoint.read_epochs(disk, path)


def test_epo_1_assign_appends_only_new_epochs_or_lower_offsets(disk_root):
    """EPO-1: LeaderEpochFileCache.assign semantics, persisted to leader-epoch-checkpoint."""
    disk, root = disk_root
    cache = LeaderEpochCache(disk, root)
    assert cache.latest_epoch == -1 and cache.epoch_entries() == []
    assert cache.assign(0, 0)
    # every change waits for the log's next flush (Log.flush writes it)...
    assert cache.unwritten and not disk.exists(f"{root}/leader-epoch-checkpoint")
    cache.write()
    assert not cache.unwritten
    assert LeaderEpochCache(disk, root).epoch_entries() == [(0, 0)]
    assert not cache.assign(0, 5)          # same epoch, later offset: no change
    assert not cache.unwritten
    assert cache.assign(2, 10)
    assert cache.assign(4, 30)
    assert not cache.assign(-1, 40)        # undefined epochs are ignored
    assert cache.epoch_entries() == [(0, 0), (2, 10), (4, 30)]
    assert cache.unwritten and LeaderEpochCache(disk, root).epoch_entries() == [(0, 0)]
    cache.write()
    assert disk.read_file(f"{root}/leader-epoch-checkpoint") == b"0\n3\n0 0\n2 10\n4 30\n"
    assert cache.assign(4, 25)             # same epoch at a lower offset: moves its start back
    assert cache.epoch_entries() == [(0, 0), (2, 10), (4, 25)]
    assert cache.assign(3, 20)             # lower epoch: drops every entry with epoch >= 3
    assert cache.epoch_entries() == [(0, 0), (2, 10), (3, 20)]
    assert cache.assign(5, 5)              # start offset below others: drops entries starting >= 5
    assert cache.epoch_entries() == [(0, 0), (5, 5)]
    cache.write()
    assert LeaderEpochCache(disk, root).epoch_entries() == [(0, 0), (5, 5)]


def test_epo_1_end_offset_for():
    """EPO-1: OffsetsForLeaderEpoch answers (KIP-101/KIP-279 semantics)."""
    cache = LeaderEpochCache(MemoryDisk(), "/p")
    assert cache.end_offset_for(0, 10) == (-1, -1)          # empty cache
    cache.assign(2, 10)
    cache.assign(4, 30)
    cache.assign(7, 50)
    assert cache.end_offset_for(-1, 99) == (-1, -1)          # UNDEFINED_EPOCH
    assert cache.end_offset_for(7, 99) == (7, 99)            # latest: the log end offset
    assert cache.end_offset_for(5, 99) == (4, 50)            # largest <= 5, start of first > 5
    assert cache.end_offset_for(4, 99) == (4, 50)
    assert cache.end_offset_for(3, 99) == (2, 30)
    assert cache.end_offset_for(2, 99) == (2, 30)
    assert cache.end_offset_for(1, 99) == (1, 10)            # below the earliest: (requested, earliest start)
    assert cache.end_offset_for(8, 99) == (-1, -1)           # above the latest


def test_epo_1_truncation_from_end_and_start():
    disk = MemoryDisk()
    cache = LeaderEpochCache(disk, "/p")
    for epoch, start in [(1, 0), (2, 10), (3, 20), (4, 30)]:
        cache.assign(epoch, start)
    cache.write()
    assert not cache.truncate_from_end(31)
    assert cache.truncate_from_end(20)
    assert cache.epoch_entries() == [(1, 0), (2, 10)]
    assert cache.truncate_from_start(15)
    assert cache.epoch_entries() == [(2, 15)]
    assert not cache.truncate_from_start(15)
    assert not cache.truncate_from_start(5)
    cache.assign(3, 40)
    assert cache.truncate_from_start(40)
    assert cache.epoch_entries() == [(3, 40)]
    cache.write()
    assert LeaderEpochCache(disk, "/p").epoch_entries() == [(3, 40)]
    assert cache.epoch_for_offset(39) == -1 and cache.epoch_for_offset(41) == 3
    cache.clear()
    cache.write()
    assert LeaderEpochCache(disk, "/p").epoch_entries() == []
