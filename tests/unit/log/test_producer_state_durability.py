"""Producer state and the transaction index across crashes, power losses, upgrades, retention and
the cleaner's swap (issue 17). Each of these failed on the first version of ``.snapshot`` and
``.txnindex`` support (a review's findings)."""

from __future__ import annotations

import os


from strandline.log.cleaning import Cleaning
from strandline.log.config import LogConfig
from strandline.log.loader import restore_unreplicated_transactions
from strandline.log.log import Log
from strandline.log.manager import LogManager
from strandline.protocol.markers import build_marker
from strandline.protocol.records import compute_crc, read_header
from strandline.replication.fetcher_manager import ReplicaFetcherManager
from strandline.replication.partition import Partition
from strandline.sim.disk import MemoryDisk
from strandline.sim.txn_workload import read_committed_view
from tests.unit.batches import keyed_batch, make_batch

T0 = 1_700_000_000_000
COMPACT = dict(cleanup_policy=("compact",), segment_bytes=1 << 20, index_interval_bytes=300,
               delete_retention_ms=60_000)


def batch(pid: int = -1, epoch: int = 0, seq: int = -1, *, transactional: bool = False, n: int = 1,
          value: bytes = b"x" * 100) -> bytearray:
    data = make_batch([value] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    if transactional:
        data[21:23] = (0x10).to_bytes(2, "big")
        data[17:21] = compute_crc(data, 0, len(data)).to_bytes(4, "big")
    return data


def txn_keyed(items, pid: int, seq: int, epoch: int = 0) -> bytearray:
    data = keyed_batch(items, timestamp_ms=T0, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    data[21:23] = (0x10).to_bytes(2, "big")
    data[17:21] = compute_crc(data, 0, len(data)).to_bytes(4, "big")
    return data


def clean(log: Log, now_ms: int, first_dirty: int = 0) -> Cleaning:
    cleaning = Cleaning(log, first_dirty, log.active_segment.base_offset, now_ms, 1 << 20)
    for _ in cleaning.run():
        pass
    return cleaning


def started_log() -> tuple[MemoryDisk, LogConfig, LogManager, Log]:
    """A log manager on an empty in-memory disk, started, and its new log ``t-0``."""
    disk = MemoryDisk(strict_dirs=True)
    disk.makedirs("/data")
    config = LogConfig(segment_bytes=1 << 20)
    logs = LogManager(disk, ["/data"], config)
    logs.startup(0)
    return disk, config, logs, logs.get_or_create_log("t", 0, now_ms=0)


def committed_view(log: Log, start: int, lso: int):
    data = bytes(log.read(start, 1 << 24, max_offset=lso))
    aborted = [(t.producer_id, t.first_offset) for t in log.collect_aborted_txns(start, lso)]
    return read_committed_view(data, aborted, lso)


# -- 1. a clean shutdown's snapshot is never fsynced ------------------------------------------

def test_a_power_loss_right_after_a_clean_shutdown_keeps_open_transactions_and_producers():
    """LogManager.shutdown flushes the logs, then Log.close writes ``<LEO>.snapshot`` (not
    fsynced, log.py _take_snapshot), then the durable ``.kafka_cleanshutdown``. A power loss
    before the OS writes the snapshot back leaves a clean-shutdown marker and an empty snapshot:
    the open is 'clean', the snapshot fails its check and is deleted, and with no snapshot left a
    clean open replays nothing (the producer state's load on open: ``if clean: return``). The open
    transaction is forgotten: the last stable offset jumps over undecided records, and the
    idempotent producer's retry is appended a second time."""
    disk, config, logs, log = started_log()
    log.append_as_leader(batch(), 0, 0)                                  # 0
    log.append_as_leader(batch(7, 0, 0, transactional=True), 0, 0)       # 1: pid 7's transaction opens
    log.append_as_leader(batch(8, 0, 0), 0, 0)                           # 2: idempotent pid 8, seq 0
    assert log.last_stable_offset(3) == 1
    logs.shutdown()                                                      # clean: flush, close, marker
    disk.crash()                                                         # power loss right after
    logs = LogManager(disk, ["/data"], config)
    logs.startup(0)
    log = logs.get_log("t", 0)
    assert log.log_end_offset == 3                                       # the records are all there
    problems = []
    if log.producer_state.check(read_header(batch(8, 0, 0))).duplicate is None:
        problems.append("pid 8's retry of seq 0 would be appended a second time")
    if log.last_stable_offset(3) != 1:
        problems.append(f"LSO {log.last_stable_offset(3)}, not 1: read_committed readers get pid 7's "
                        f"undecided record")
    assert not problems, problems


# -- 2. the cleaner's swap does not carry the .txnindex ---------------------------------------

class KillAfterSwapRename:
    """A Disk whose process is SIGKILLed right after the cleaner's ``.cleaned -> .log.swap``
    rename (nothing is lost: every byte written is kept, as after a process kill)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def rename(self, src, dst):
        self.inner.rename(src, dst)
        if dst.endswith(".log.swap"):
            raise SystemExit("killed")

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _log_with_removable_abort_marker(disk, root):
    log = Log.open(disk, f"{root}/t-0", "t", 0, LogConfig(**COMPACT), needs_recovery=False, now_ms=T0)
    log.append_as_leader(txn_keyed([(b"a", b"aborted")], 5, 0), 0, T0)        # 0: aborted
    log.append_as_leader(build_marker(5, 0, False, 0, T0), 0, T0)            # 1: abort marker
    log.append_as_leader(txn_keyed([(b"b", b"committed")], 5, 1), 0, T0)      # 2: committed
    log.append_as_leader(build_marker(5, 0, True, 0, T0), 0, T0)             # 3: commit marker
    log.append_as_leader(keyed_batch([(b"c", b"plain")], timestamp_ms=T0), 0, T0)   # 4
    log.roll()
    log.append_as_leader(keyed_batch([(b"d", b"active")], timestamp_ms=T0), 0, T0)  # 5
    log.flush()
    clean(log, T0)                                     # pass 1: the aborted record 0 goes
    return log


def test_a_kill_in_the_cleaners_swap_leaves_no_txnindex_entry_of_a_removed_abort_marker():
    """Pass 2 removes the abort marker at 1 and (Log.replace_segments) filters its .txnindex entry,
    but the .txnindex is not part of the swap: the old segment's ``<base>.txnindex`` is deleted
    with the old segment and rewritten only after the ``.log.swap -> .log`` rename. Killed after
    the commit point, completing the swap on open (``log.swap.complete_swap``) kept the old ``00..0.txnindex`` (it removes only
    .log/.index/.timeindex), so the entry (pid 5, first 0, marker 1) stays while the marker is
    gone. A read_committed client then marks pid 5 aborted at offset 0 and never meets the abort
    marker that would clear it: the committed record at 2 is hidden."""
    inner = MemoryDisk(strict_dirs=True)
    inner.makedirs("/data")
    log = _log_with_removable_abort_marker(inner, "/data")
    view = committed_view(log, 0, 6)
    assert (2, b"committed") in view.records
    log.disk = KillAfterSwapRename(inner)
    for s in log.segments:
        s.disk = log.disk
    try:
        clean(log, T0 + 120_000, first_dirty=5)       # pass 2 would remove the marker at 1
    except SystemExit:
        pass
    log = Log.open(inner, "/data/t-0", "t", 0, LogConfig(**COMPACT), needs_recovery=True, now_ms=T0)
    markers = [h.base_offset for h in log.iter_batch_headers(0) if h.attributes & 0x20]
    assert markers == [3]                              # the swap completed: the abort marker is gone
    view = committed_view(log, 0, 6)
    aborted = [(t.producer_id, t.first_offset, t.last_offset) for t in log.collect_aborted_txns(0, 6)]
    assert (2, b"committed") in view.records, \
        f"the committed record at 2 is hidden from read_committed readers; aborted txns reported: {aborted}"


# -- 3. logs written before f194ff4 (no .snapshot, no .txnindex) ------------------------------

def test_a_log_from_before_snapshots_opened_clean_keeps_its_aborts_and_open_transactions(disk_root):
    """A log the previous version wrote and closed cleanly has no .snapshot and no .txnindex (that
    version scanned the log lazily: PartitionTransactions.catch_up). Opened clean, f194ff4 assumes
    'no producer was known' and replays nothing: the abort is no longer reported to read_committed
    fetches (its records become visible) and the open transaction no longer holds the LSO."""
    disk, root = disk_root
    config = LogConfig(segment_bytes=1 << 20)
    log = Log.open(disk, f"{root}/t-0", "t", 0, config, needs_recovery=False, now_ms=0)
    log.append_as_leader(batch(7, 0, 0, transactional=True, value=b"aborted"), 0, 0)    # 0
    log.append_as_leader(build_marker(7, 0, False, 0, 0), 0, 0)                        # 1: abort
    log.append_as_leader(batch(8, 0, 0, transactional=True, value=b"open"), 0, 0)       # 2: open
    log.flush()
    log.close()
    for name in disk.listdir(f"{root}/t-0"):               # what the previous version left
        if name.endswith((".snapshot", ".txnindex")):
            disk.remove(os.path.join(f"{root}/t-0", name))
    log = Log.open(disk, f"{root}/t-0", "t", 0, config, needs_recovery=False, now_ms=0)
    problems = []
    if log.last_stable_offset(3) != 2:
        problems.append(f"LSO {log.last_stable_offset(3)}, not 2: pid 8's open transaction is not known")
    view = committed_view(log, 0, 2)
    if any(value == b"aborted" for _, value in view.records):
        problems.append(f"read_committed sees the aborted record: {view.records}")
    assert not problems, problems


# -- 4. the last stable offset below the log start offset ------------------------------------

def test_the_last_stable_offset_is_never_below_the_log_start_offset(disk_root):
    """Kafka clamps the first unstable offset to the log start offset
    (UnifiedLog.maybeIncrementFirstUnstableOffset); here ListOffsets(LATEST, read_committed) and
    Fetch answer an LSO below the log start offset, an offset that is out of range."""
    disk, root = disk_root
    log = Log.open(disk, f"{root}/t-0", "t", 0, LogConfig(segment_bytes=1 << 20), needs_recovery=False, now_ms=0)
    log.append_as_leader(batch(7, 0, 0, transactional=True), 0, 0)       # 0: open transaction
    for _ in range(5):
        log.append_as_leader(batch(), 0, 0)
    log.maybe_increment_log_start_offset(4)                              # DeleteRecords
    assert log.last_stable_offset(6) >= log.log_start_offset


# -- 5. producers never expire ---------------------------------------------------------------

def test_producers_idle_past_producer_id_expiration_ms_are_forgotten(disk_root):
    """Kafka drops a producer without an open transaction producer.id.expiration.ms (1 day) after its
    last batch's timestamp: on open, and at the periodic retention check (LogManager.cleanup).
    Without it every producer id ever seen stayed in memory and in every snapshot."""
    disk, root = disk_root
    config = LogConfig(segment_bytes=20 * len(batch()), retention_bytes=0)
    log = Log.open(disk, f"{root}/t-0", "t", 0, config, needs_recovery=False, now_ms=0)
    for pid in range(1000):                                              # short-lived producers
        log.append_as_leader(batch(pid, 0, 0), 0, 0)
    for _ in range(100):
        log.append_as_leader(batch(), 0, 0)
    log.delete_old_segments(10**12)
    assert log.log_start_offset >= 1000                                  # their batches are gone
    log.append_as_leader(batch(5000, 0, 0, transactional=True, value=b"open"), 0, 0)    # stays: open
    day = 86_400_000
    log.close()
    log = Log.open(disk, f"{root}/t-0", "t", 0, config, needs_recovery=False, now_ms=T0 + day - 1)
    assert len(log.producer_state.producers) == 1001                     # not yet a day
    log.close()
    log = Log.open(disk, f"{root}/t-0", "t", 0, config, needs_recovery=False, now_ms=T0 + day)
    assert list(log.producer_state.producers) == [5000]
    log.append_as_leader(batch(6000, 0, 0), 0, 0)
    assert log.expire_producers(T0 + 2 * day) == 1 and list(log.producer_state.producers) == [5000]


# -- 6. no snapshot survives a power loss: recovery replays the whole log --------------------

def test_after_a_power_loss_recovery_replays_from_the_last_rolls_snapshot():
    """Snapshots are written at each roll but never fsynced (log.py _take_snapshot), so after a
    power loss every one of them is empty (MemoryDisk, and the lab's power-loss mode, which cuts
    each file to its fsynced size) and is deleted; recovery then replays every batch header of
    the log from its first segment. Before f194ff4 a rebuild read the last two segments; Kafka
    fsyncs a roll's snapshot before the recovery point passes it. The replay runs on the broker's
    one event loop, so a large log holds up start-up (and each truncation later, until a roll)."""
    disk = MemoryDisk(strict_dirs=True)
    disk.makedirs("/data")
    config = LogConfig(segment_bytes=10 * len(batch()))
    log = Log.open(disk, "/data/t-0", "t", 0, config, needs_recovery=False, now_ms=0)
    log.append_as_leader(batch(7, 0, 0), 0, 0)
    for _ in range(999):
        log.append_as_leader(batch(), 0, 0)
    log.flush()
    assert len(log.segments) == 100
    disk.crash()
    log = Log.open(disk, "/data/t-0", "t", 0, config, recovery_point=log.log_end_offset,
                   needs_recovery=True, now_ms=0)
    assert log.log_end_offset == 1000                    # every batch was flushed
    assert log.replayed_batches <= 20, f"{log.replayed_batches} batch headers replayed after a power loss"


# -- 7. a marker above the high watermark across a clean restart -------------------------------

def test_a_marker_above_the_high_watermark_holds_the_last_stable_offset_after_a_clean_restart():
    """KIP-98: a transaction is stable once its marker is below the high watermark. A clean
    shutdown's snapshot (at the log end offset) keeps producers and open transactions, not the
    transactions decided by a marker the high watermark has not passed: after a restart the last
    stable offset jumped over pid 2's aborted batch to the high watermark, and a read_committed
    answer showed it as decided (the explorer, seed 990028 of config txn: a restarted leader
    answered LSO 3 over an abort marker at 4, its HW 4). Reopened, with the high watermark known
    again, the state is replayed from a snapshot at or below it."""
    disk, config, logs, log = started_log()
    log.append_as_leader(batch(2, 0, 0, transactional=True), 0, 0)      # 0: pid 2's transaction
    log.append_as_leader(batch(), 0, 0)                                  # 1
    log.append_as_leader(build_marker(2, 0, False, 0, T0), 0, 0)        # 2: its abort marker
    log.append_as_leader(batch(), 0, 0)                                  # 3
    assert log.last_stable_offset(2) == 0                                # the marker is not below HW 2
    logs.shutdown()
    logs = LogManager(disk, ["/data"], config)
    logs.startup(0)
    log = logs.get_log("t", 0)
    assert not restore_unreplicated_transactions(log, 3)              # no marker at or above 3: nothing
    assert log.last_stable_offset(2) == 2                                 # (the state the snapshot gave)
    assert restore_unreplicated_transactions(log, 2)                  # the HW as checkpointed
    assert log.last_stable_offset(2) == 0
    assert log.last_stable_offset(3) == 3                                # the HW passed the marker
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in log.collect_aborted_txns(0, 4)] == [(2, 0, 2)]


def test_a_marker_above_the_high_watermark_holds_the_last_stable_offset_after_a_follower_truncates():
    """The same after a follower's truncation, which reloads the producer state from the latest
    snapshot at or below the new log end offset: a segment rolled after an abort marker the high
    watermark had not passed left a snapshot above it, and the reload from that snapshot forgot
    the marker's transaction (the last stable offset jumped to the high watermark)."""
    disk = MemoryDisk(strict_dirs=True)
    log = Log.open(disk, "/data/t-0", "t", 0, LogConfig(segment_bytes=1 << 20), needs_recovery=False, now_ms=T0)
    log.append_as_leader(batch(2, 0, 0, transactional=True), 0, T0)    # 0: pid 2's transaction
    log.append_as_leader(build_marker(2, 0, False, 0, T0), 0, T0)      # 1: its abort marker
    log.roll(now_ms=T0)                                                  # a snapshot at 2
    for _ in range(3):
        log.append_as_leader(batch(), 0, T0)                             # 2, 3, 4
    partition = Partition("t", 0, 1, log, replica_lag_time_max_ms=30_000)
    partition.high_watermark = 1                                         # the marker is not below it
    assert log.last_stable_offset(1) == 0
    ReplicaFetcherManager.truncate(object.__new__(ReplicaFetcherManager), partition, 3, "diverged")
    assert log.log_end_offset == 3 and partition.high_watermark == 1
    assert log.last_stable_offset(1) == 0


# -- 8. what the load replayed is not replayed again -------------------------------------------

def test_a_marker_the_load_replayed_above_the_high_watermark_is_not_replayed_again():
    """The restore looks only below where the load's replay began (``producer_state_start``): a
    marker at or above it is in the state already. A follower's truncation that reloads from a
    snapshot at or below the high watermark, with an abort marker above it, reads each batch once
    (it read them twice), and so does an open after a crash, which replays from the last roll's
    snapshot; the last stable offset holds at the transaction's first offset either way."""
    disk = MemoryDisk(strict_dirs=True)
    config = LogConfig(segment_bytes=1 << 20)
    log = Log.open(disk, "/data/t-0", "t", 0, config, needs_recovery=False, now_ms=T0)
    log.append_as_leader(batch(), 0, T0)                                 # 0
    log.roll(now_ms=T0)                                                  # a snapshot at 1
    log.append_as_leader(batch(2, 0, 0, transactional=True), 0, T0)    # 1: pid 2's transaction
    log.append_as_leader(build_marker(2, 0, False, 0, T0), 0, T0)      # 2: its abort marker
    for _ in range(3):
        log.append_as_leader(batch(), 0, T0)                             # 3, 4, 5
    partition = Partition("t", 0, 1, log, replica_lag_time_max_ms=30_000)
    partition.high_watermark = 2                                         # the marker is not below it
    before = log.replayed_batches
    ReplicaFetcherManager.truncate(object.__new__(ReplicaFetcherManager), partition, 4, "diverged")
    assert log.log_end_offset == 4 and log.producer_state_start == 1
    assert log.replayed_batches - before == 3                            # 1, 2 and 3, once
    assert log.last_stable_offset(2) == 1
    log.flush(log.log_end_offset)
    log = Log.open(disk, "/data/t-0", "t", 0, config, needs_recovery=True, now_ms=T0)   # no close: a crash
    assert log.producer_state_start == 1 and log.replayed_batches == 3
    assert not restore_unreplicated_transactions(log, 2)
    assert log.replayed_batches == 3 and log.last_stable_offset(2) == 1
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in log.collect_aborted_txns(0, 4)] == [(2, 1, 2)]
