"""Producer state kept by the log: ``.snapshot`` files and the ``.txnindex`` aborted-transaction
index, both in Kafka's formats (issue 17, deliverable 2), on a memory disk and a real one."""

from __future__ import annotations

import struct

import crc32c
from kio.schema.errors import ErrorCode

from strandline.log.config import LogConfig
from strandline.log.log import Log
from strandline.log.producer_state import ProducerStateManager
from strandline.protocol.markers import build_marker
from strandline.protocol.records import compute_crc, read_header
from tests.unit.batches import make_batch

BATCH = len(make_batch([b"x" * 100]))


def open_log(disk, root, *, clean: bool = True, **cfg) -> Log:
    config = LogConfig(**{"segment_bytes": 10 * BATCH, "index_interval_bytes": 2 * BATCH, **cfg})
    return Log.open(disk, f"{root}/t-0", "t", 0, config, needs_recovery=not clean, now_ms=0)


def batch(pid: int = -1, epoch: int = 0, seq: int = -1, *, transactional: bool = False, n: int = 1) -> bytearray:
    data = make_batch([b"x" * 100] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    if transactional:
        data[21:23] = (0x10).to_bytes(2, "big")
        data[17:21] = compute_crc(data, 0, len(data)).to_bytes(4, "big")
    return data


def files(disk, root, suffix: str) -> list[str]:
    return [n for n in disk.listdir(f"{root}/t-0") if n.endswith(suffix)]


def test_a_snapshot_is_kafkas_layout_with_a_crc32c_of_the_entries():
    s = ProducerStateManager()
    s.update(read_header(batch(7, 3, 10, n=4)), 100, 1234)
    data = s.snapshot()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1) and crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (7, 3, 13, 103, 3, read_header(batch()).max_timestamp, -1, -1)
    assert len(data) == 10 + 46


def test_a_clean_close_writes_a_snapshot_at_the_log_end_and_a_reopen_reads_no_batch(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    for i in range(5):
        log.append_as_leader(batch(7, 0, i), 0, 0)
    log.close()
    assert files(disk, root, ".snapshot") == [f"{5:020d}.snapshot"]
    log = open_log(disk, root)
    assert log.replayed_batches == 0
    assert log.producer_state.check(read_header(batch(7, 0, 4))).duplicate.first_offset == 4
    assert log.producer_state.check(read_header(batch(7, 0, 9))).error is ErrorCode.out_of_order_sequence_number


def test_an_empty_log_writes_no_snapshot_and_any_other_reopens_without_a_scan(disk_root):
    disk, root = disk_root
    open_log(disk, root).close()
    assert files(disk, root, ".snapshot") == []                     # 10,000 new partitions: no files
    log = open_log(disk, root, segment_bytes=1 << 20)
    for _ in range(20):
        log.append_as_leader(batch(), 0, 0)
    log.close()
    assert files(disk, root, ".snapshot") == [f"{20:020d}.snapshot"]  # no producer, but a log to skip
    log = open_log(disk, root, segment_bytes=10 * BATCH)
    assert log.replayed_batches == 0
    for _ in range(15):                                              # rolls: snapshots at 20, 30
        log.append_as_leader(batch(), 0, 0)
    log.close()                                                      # and one at the end, 35
    assert files(disk, root, ".snapshot") == [f"{o:020d}.snapshot" for o in (20, 30, 35)]
    assert open_log(disk, root).replayed_batches == 0


def test_a_zombie_fenced_many_segments_back_stays_fenced_after_a_restart(disk_root):
    """The producer's last batch lies ten segments back: the rolls' snapshots carry its epoch
    (a state rebuilt from the last segments alone would have let the zombie write again)."""
    disk, root = disk_root
    log = open_log(disk, root)
    log.append_as_leader(batch(7, 5, 0), 0, 0)                        # epoch 5 fences epoch 4
    for _ in range(100):
        log.append_as_leader(batch(), 0, 0)
    assert len(log.segments) > 10
    log = open_log(disk, root, clean=False)                          # a crash: no close
    assert log.replayed_batches <= 10                                # from the last roll's snapshot
    assert log.producer_state.check(read_header(batch(7, 4, 1))).error is ErrorCode.invalid_producer_epoch


def test_after_a_crash_the_replay_starts_at_the_latest_snapshot_and_a_corrupt_one_is_skipped(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    for i in range(25):
        log.append_as_leader(batch(7, 0, i), 0, 0)
    assert [s.base_offset for s in log.segments] == [0, 10, 20]
    path = f"{root}/t-0/{20:020d}.snapshot"
    data = bytearray(disk.read_file(path))
    data[-1] ^= 0xFF
    disk.write_file_atomic(path, bytes(data))
    log = open_log(disk, root, clean=False)
    assert log.replayed_batches == 15                                # from the snapshot at 10
    assert not disk.exists(path)
    assert log.producer_state.check(read_header(batch(7, 0, 24))).duplicate.first_offset == 24


def test_an_abort_marker_writes_kafkas_txnindex_entry_and_a_reopen_reads_it_from_the_file(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, segment_bytes=1 << 20)
    log.append_as_leader(batch(), 0, 0)                                              # 0
    log.append_as_leader(batch(7, 0, 0, transactional=True), 0, 0)                   # 1: pid 7 opens
    log.append_as_leader(batch(8, 0, 0, transactional=True), 0, 0)                   # 2: pid 8 opens
    assert log.last_stable_offset(3) == 1
    log.append_as_leader(build_marker(7, 0, False, 3, 0), 0, 0)                      # 3: abort 7
    assert log.last_stable_offset(4) == 2                                            # 8 still open
    entry = disk.read_file(f"{root}/t-0/{0:020d}.txnindex")
    assert struct.unpack(">hqqqq", entry) == (0, 7, 1, 3, 2)         # version, pid, first, last, LSO
    log.append_as_leader(build_marker(8, 0, True, 3, 0), 0, 0)                       # 4: commit 8
    assert log.last_stable_offset(4) == 2                            # the commit is above the HW
    assert log.last_stable_offset(5) == 5
    assert log.producer_state.producers[7].coordinator_epoch == 3
    log.close()
    log = open_log(disk, root)
    assert log.replayed_batches == 0
    assert [tuple(t) for t in log.collect_aborted_txns(0, 5)] == [(7, 1, 3, 2)]
    assert log.collect_aborted_txns(4, 5) == []                      # its marker is before the fetch
    assert log.collect_aborted_txns(0, 1) == []                      # its data is after the fetch


def test_an_open_transaction_survives_a_restart_and_holds_the_last_stable_offset(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    log.append_as_leader(batch(), 0, 0)
    log.append_as_leader(batch(7, 0, 0, transactional=True), 0, 0)
    for _ in range(30):
        log.append_as_leader(batch(), 0, 0)
    for clean in (True, False):
        if clean:
            log.close()
        log = open_log(disk, root, clean=clean)
        assert log.last_stable_offset(log.log_end_offset) == 1, clean


def test_a_follower_keeps_producer_state_and_a_truncation_reloads_it(disk_root):
    """A follower's log tracks transactions as it appends (it may lead next); cutting off an abort
    marker drops its index entry and reopens the transaction."""
    disk, root = disk_root
    leader = open_log(disk, root + "/leader", segment_bytes=1 << 20)
    for data in (batch(), batch(7, 0, 0, transactional=True), batch(7, 0, 1, transactional=True),
                 build_marker(7, 0, False, 0, 0)):
        leader.append_as_leader(data, 0, 0)
    follower = open_log(disk, root + "/follower", segment_bytes=1 << 20)
    follower.append_as_follower(bytes(leader.read(0, 1 << 20)))
    assert [tuple(t) for t in follower.collect_aborted_txns(0, 4)] == [(7, 1, 3, 4)]
    follower.truncate_to(3)
    assert follower.collect_aborted_txns(0, 4) == []
    assert disk.read_file(f"{root}/follower/t-0/{0:020d}.txnindex") == b""
    assert follower.last_stable_offset(3) == 1
    follower.truncate_to(1)
    assert follower.last_stable_offset(1) == 1 and follower.producer_state.ongoing == {}


def test_retention_deletes_the_snapshots_of_deleted_segments(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, retention_bytes=15 * BATCH)
    for i in range(45):
        log.append_as_leader(batch(7, 0, i), 0, 0)
    assert len(files(disk, root, ".snapshot")) == 4
    log.delete_old_segments(0)
    first = log.segments[0].base_offset
    assert first > 0 and all(int(n[:20]) >= first for n in files(disk, root, ".snapshot"))
