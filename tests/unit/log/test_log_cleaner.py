"""Log compaction (issue 16): the cleaning pass, the swap and its crash safety, the cleaner's
scheduling and checkpoint. Every test runs on the simulator's disk and (``disk_root``) the real one
where the file system matters."""

from __future__ import annotations

import random

import pytest

from strandline.log import checkpoint
from strandline.log.cleaner import CLEANER_CHECKPOINT, LogCleaner
from strandline.log.cleaning import Cleaning, CleaningAborted
from strandline.log.config import LogConfig
from strandline.log.log import Log
from strandline.log.manager import LogManager
from strandline.protocol.records import iter_batches, iter_records
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import keyed_batch

T0 = 1_700_000_000_000
COMPACT = dict(cleanup_policy=("compact",), segment_bytes=2000, index_interval_bytes=300,
               delete_retention_ms=60_000)


def open_log(disk, root, **cfg) -> Log:
    return Log.open(disk, f"{root}/t-0", "t", 0, LogConfig(**{**COMPACT, **cfg}), needs_recovery=False, now_ms=T0)


def write(log: Log, items, ts: int = T0, **kw) -> None:
    log.append_as_leader(keyed_batch(items, timestamp_ms=ts, **kw), 0, ts)


def records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    data = log.read(log.log_start_offset, 1 << 30)
    return [(r.offset, r.key, r.value) for pos, h in iter_batches(data) for r in iter_records(data, pos, h)]


def clean(log: Log, now_ms: int = T0, first_dirty: int = 0, end: int | None = None) -> Cleaning:
    cleaning = Cleaning(log, first_dirty, log.active_segment.base_offset if end is None else end, now_ms, 1 << 20)
    for _ in cleaning.run():
        pass
    return cleaning


def latest(expected: list[tuple[int, bytes | None, bytes | None]], below: int) -> list:
    """What compaction must keep of ``expected`` below ``below``: the newest record of each key, in
    offset order, then everything from ``below`` on."""
    newest = {}
    for offset, key, _value in expected:
        if offset < below:
            newest[key] = offset
    return [r for r in expected if r[0] >= below or newest[r[1]] == r[0]]


def test_many_updates_to_few_keys_leave_the_newest_value_of_each(disk_root):
    """Deliverable 1: after a pass, one value per key remains below the first uncleanable offset,
    the newest, at its own offset; the active segment is never touched."""
    disk, root = disk_root
    log = open_log(disk, root)
    rng = random.Random(7)
    expected = []
    for i in range(300):
        key = f"k{rng.randrange(5)}".encode()
        write(log, [(key, f"v{i}".encode())])
        expected.append((i, key, f"v{i}".encode()))
    assert len(log.segments) > 5
    end = log.active_segment.base_offset
    before = log.size_in_bytes
    cleaning = clean(log)
    assert records(log) == latest(expected, end)
    kept_below = [r for r in records(log) if r[0] < end]
    assert len({k for _, k, _ in kept_below}) == len(kept_below) <= 5
    assert cleaning.stats.records_removed == 300 - len(records(log))
    assert log.size_in_bytes < before / 3
    assert log.log_end_offset == 300 and log.active_segment.base_offset == end
    reopened = Log.open(disk, f"{root}/t-0", "t", 0, log.config, needs_recovery=True, now_ms=T0)
    assert records(reopened) == records(log)


def test_partly_kept_compressed_batches_keep_their_offsets_and_codec(disk_root):
    disk, root = disk_root
    log = open_log(disk, root)
    write(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], compression=1)
    write(log, [(b"a", b"2"), (b"d", b"2")], compression=1)
    log.roll()
    write(log, [(b"x", b"x")])
    clean(log)
    data = log.read(0, 1 << 20)
    headers = [h for _, h in iter_batches(data)]
    assert [(h.base_offset, h.last_offset_delta, h.records_count, h.compression) for h in headers[:2]] == [
        (0, 2, 2, 1), (3, 1, 2, 1)]
    assert records(log) == [(1, b"b", b"1"), (2, b"c", b"1"), (3, b"a", b"2"), (4, b"d", b"2"), (5, b"x", b"x")]


def test_a_batch_losing_every_record_vanishes_unless_it_ends_the_group_or_a_producer(disk_root):
    """The group's last batch and a producer's last batch stay as empty batches (Kafka's
    writeEmptyHeader), so the cleaned segment ends where the old ones ended and idempotent
    producers are still known after a restart; so does the first batch of a leader epoch."""
    disk, root = disk_root
    log = open_log(disk, root, segment_bytes=1 << 20)
    write(log, [(b"a", b"1")])                   # 0: superseded; it starts leader epoch 0: kept empty
    write(log, [(b"a", b"2")], producer_id=9, producer_epoch=0, base_sequence=0)   # 1: producer 9's last: empty
    write(log, [(b"b", b"1")])                   # 2: superseded, vanishes
    write(log, [(b"a", b"3")])                   # 3: superseded, vanishes
    write(log, [(b"b", b"2")])                   # 4: kept, the newest b
    write(log, [(b"a", b"4")])                   # 5: kept, the newest a and the group's last batch
    log.roll()
    write(log, [(b"a", b"5"), (b"b", b"3")])                     # active: 6, 7
    clean(log, end=6)
    # the map covers [0, 6): a=5 and b=4 are newest there
    headers = [h for _, h in iter_batches(log.read(0, 1 << 20))]
    assert [(h.base_offset, h.records_count, h.producer_id) for h in headers] == [
        (0, 0, -1), (1, 0, 9), (4, 1, -1), (5, 1, -1), (6, 2, -1)]
    assert log.segments[0].next_offset == 6


def test_the_first_batch_of_each_leader_epoch_stays_as_an_empty_batch(disk_root):
    """Unlike Kafka's cleaner, a batch that starts a leader epoch stays (empty) when it loses every
    record, so that a follower fetching across the cleaned log learns each epoch's true start.
    Without it the follower learnt a later start, answered OffsetsForLeaderEpoch with it once
    leader, and a returning replica kept records of an older epoch, never committed, below its
    high watermark (seeds 21, 41 and 114 of `sim explore --config compact`)."""
    disk, root = disk_root
    log = open_log(disk, root, segment_bytes=1 << 20)
    for epoch, value in ((0, b"1"), (0, b"2"), (3, b"3"), (3, b"4"), (3, b"5")):    # offsets 0-4
        log.append_as_leader(keyed_batch([(b"a", value)], timestamp_ms=T0), epoch, T0)
    log.roll()
    log.append_as_leader(keyed_batch([(b"b", b"1")], timestamp_ms=T0), 3, T0)            # active: 5
    assert log.leader_epoch_cache.entries == [(0, 0), (3, 2)]
    clean(log, end=5)
    headers = [h for _, h in iter_batches(log.read(0, 1 << 20))]
    assert [(h.base_offset, h.records_count, h.partition_leader_epoch) for h in headers] == [
        (0, 0, 0), (2, 0, 3), (4, 1, 3), (5, 1, 3)]
    follower = Log.open(disk, f"{root}/f-0", "f", 0, LogConfig(**COMPACT), needs_recovery=False, now_ms=T0)
    follower.append_as_follower(log.read(0, 1 << 20), T0)
    assert follower.leader_epoch_cache.entries == [(0, 0), (3, 2)]
    assert records(follower) == [(4, b"a", b"5"), (5, b"b", b"1")]


def test_tombstones_stay_until_cleaned_once_and_older_than_delete_retention(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, segment_bytes=1 << 20)
    write(log, [(b"a", b"1"), (b"b", b"1")])
    write(log, [(b"a", None)])                                   # the tombstone of a
    log.roll()
    write(log, [(b"z", b"z")])
    cleaning = clean(log)
    assert records(log) == [(1, b"b", b"1"), (2, b"a", None), (3, b"z", b"z")]
    assert cleaning.tombstone_due_ms == T0 + 60_000
    clean(log, now_ms=T0 + 30_000, first_dirty=3, end=3)         # cleaned once, but too young
    assert (2, b"a", None) in records(log)
    cleaning = clean(log, now_ms=T0 + 60_001, first_dirty=3, end=3)
    assert records(log) == [(1, b"b", b"1"), (3, b"z", b"z")]
    assert cleaning.stats.tombstones_removed == 1


def test_a_truncation_during_a_pass_aborts_it_and_leaves_the_log_whole():
    disk = MemoryDisk(strict_dirs=True)
    disk.makedirs("/data")
    log = open_log(disk, "/data", segment_bytes=400)
    for i in range(100):
        write(log, [(f"k{i % 3}".encode(), b"v" * 40)])
    before = records(log)
    cleaning = Cleaning(log, 0, log.active_segment.base_offset, T0, 1 << 20)
    job = cleaning.run()
    next(job)
    log.truncate_to(90)
    with pytest.raises(CleaningAborted):
        for _ in job:
            pass
    cleaning.abort()
    assert records(log) == before[:90]
    assert not [n for n in disk.listdir("/data/t-0") if n.endswith(".cleaned")]


class CrashingDisk:
    """A MemoryDisk that fails at its ``crash_at``-th change (a write, an fsync, a rename, a
    removal), then loses every unflushed byte as a power loss would."""

    def __init__(self, inner: MemoryDisk, crash_at: int) -> None:
        self.inner = inner
        self.crash_at = crash_at
        self.changes = 0

    def step(self) -> None:
        self.changes += 1
        if self.changes == self.crash_at:
            raise SystemExit("crash")

    def open(self, path):
        return CrashingHandle(self, self.inner.open(path))

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name in ("remove", "rename", "fsync_dir", "write_file_atomic", "rmtree"):
            def changing(*args):
                self.step()
                return attr(*args)
            return changing
        return attr


class CrashingHandle:
    def __init__(self, disk: CrashingDisk, inner) -> None:
        self.disk = disk
        self.inner = inner

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name in ("append", "truncate", "flush"):
            def changing(*args):
                self.disk.step()
                return attr(*args)
            return changing
        return attr


@pytest.mark.parametrize("seed", range(6))
def test_a_crash_at_every_step_of_a_pass_recovers_each_swap_to_the_old_or_the_new_segments(seed):
    """Deliverable 2 (seeded crash points). A pass over a random log is interrupted at each of its
    disk changes in turn, and then the machine loses power.

    A pass swaps its groups of segments in one by one, in offset order. On open, each group holds
    exactly the records it held before the pass or exactly those the pass keeps: never a mix
    inside a group, never a lost record that was not superseded, and only a prefix of the groups
    is new."""
    rng = random.Random(seed)
    items = [(f"k{rng.randrange(1 + seed * 3)}".encode(), None if rng.random() < 0.1 else b"v%d" % i)
             for i in range(rng.randrange(60, 160))]
    compression = seed % 2
    segment_bytes = 300 + 100 * seed

    def build(disk) -> Log:
        disk.makedirs("/data")
        log = open_log(disk, "/data", segment_bytes=segment_bytes, delete_retention_ms=0)
        for i in range(0, len(items), 3):
            write(log, items[i:i + 3], ts=T0 + i, compression=compression)
        log.flush()
        return log

    reference = build(MemoryDisk(strict_dirs=True))
    old = records(reference)
    first_dirty = reference.segments[2].base_offset if seed % 3 == 0 else 0   # some passes drop tombstones
    clean(reference, now_ms=T0 + 10**6, first_dirty=first_dirty)
    new = records(reference)
    assert new != old
    units = [(s.base_offset, s.next_offset) for s in reference.segments]

    def part(recs, lo, hi):
        return [r for r in recs if lo <= r[0] < hi]

    crash_at, seen = 1, set()
    while True:
        inner = MemoryDisk(strict_dirs=True)
        config = build(inner).config
        disk = CrashingDisk(inner, 0)
        log = Log.open(disk, "/data/t-0", "t", 0, config, needs_recovery=True, now_ms=T0)
        disk.crash_at = disk.changes + crash_at
        try:
            clean(log, now_ms=T0 + 10**6, first_dirty=first_dirty)
        except SystemExit:
            inner.crash()
        else:
            break
        got = records(Log.open(inner, "/data/t-0", "t", 0, config, needs_recovery=True, now_ms=T0))
        assert [r for lo, hi in units for r in part(got, lo, hi)] == got, "records outside every group"
        states = []
        for lo, hi in units:
            mine, before, after = part(got, lo, hi), part(old, lo, hi), part(new, lo, hi)
            assert mine in (before, after), f"crash at change {crash_at}: a mix in [{lo}, {hi})"
            if before != after:
                states.append(mine == after)
        assert states == sorted(states, reverse=True), f"crash at change {crash_at}: swaps out of order"
        seen.add(sum(states))
        crash_at += 1
    assert crash_at > 10 and 0 in seen and len(seen) >= 2


def manager(disk, root, **cfg) -> LogManager:
    logs = LogManager(disk, [root], LogConfig(**{**COMPACT, **cfg}))
    logs.startup(T0)
    return logs


def test_the_cleaner_picks_a_dirty_log_and_keeps_its_checkpoint_in_kafkas_file(disk_root):
    disk, root = disk_root
    logs = manager(disk, root)
    log = logs.get_or_create_log("t", 0, now_ms=T0)
    other = logs.get_or_create_log("plain", 0, LogConfig(segment_bytes=2000), now_ms=T0)
    for i in range(200):
        write(log, [(f"k{i % 4}".encode(), b"v" * 20)])
        write(other, [(f"k{i % 4}".encode(), b"v" * 20)])
    cleaner = LogCleaner(logs, backoff_ms=1000)
    lines = []
    now = T0
    while not lines or cleaner.busy:
        lines += cleaner.tick(now, lambda key: logs.logs[key].log_end_offset)
        now += 1
    assert lines[0].startswith("Cleaned log t-0 offsets [0, ")
    end = log.active_segment.base_offset
    writes = cleaner.take_checkpoint_writes()           # the broker has its shell write them
    assert [path for path, _ in writes] == [f"{root}/{CLEANER_CHECKPOINT}"] and cleaner.take_checkpoint_writes() == []
    logs.write_checkpoints(writes)
    assert checkpoint.read_offsets(disk, f"{root}/{CLEANER_CHECKPOINT}") == {("t", 0): end}
    assert len(records(other)) == 200                       # cleanup.policy=delete: never compacted
    state = cleaner.log_state(("t", 0), log, log.log_end_offset)
    assert state["last_cleaned_offset"] == end and state["dirty_ratio"] == 0.0
    # nothing more is due until the dirty ratio reaches min.cleanable.dirty.ratio again
    assert cleaner.tick(now + 1000, lambda key: logs.logs[key].log_end_offset) == []
    assert not cleaner.busy


def test_the_high_watermark_and_min_compaction_lag_bound_what_is_cleaned(disk_root):
    disk, root = disk_root
    logs = manager(disk, root, min_compaction_lag_ms=50_000)
    log = logs.get_or_create_log("t", 0, now_ms=T0)
    for i in range(200):
        write(log, [(b"k", b"v" * 20)], ts=T0 + i * 1000)
    cleaner = LogCleaner(logs)
    # records younger than 50 s at T0 + 200 s: those after T0 + 150 s stay whole
    end = cleaner.first_uncleanable_offset(log, log.log_end_offset, T0 + 200_000)
    assert 0 < end <= 150
    assert all(s.max_timestamp <= T0 + 150_000 for s in log.segments if s.next_offset <= end)
    assert cleaner.first_uncleanable_offset(log, 40, T0 + 10**9) <= 40


def test_a_truncation_below_the_checkpoint_moves_it_back(disk_root):
    disk, root = disk_root
    logs = manager(disk, root)
    log = logs.get_or_create_log("t", 0, now_ms=T0)
    for i in range(100):
        write(log, [(f"k{i % 4}".encode(), b"v" * 20)])
    cleaner = LogCleaner(logs)
    cleaner.checkpoints[("t", 0)] = 80
    assert cleaner.first_dirty_offset(("t", 0), log) == 80
    log.truncate_to(50)
    assert cleaner.first_dirty_offset(("t", 0), log) == 50
    assert cleaner.checkpoints[("t", 0)] == 50


def test_max_compaction_lag_makes_a_log_due_below_the_dirty_ratio_and_rolls_the_active_segment(disk_root):
    """max.compaction.lag.ms: a log whose oldest dirty segment began longer ago is cleaned even
    below min.cleanable.dirty.ratio, and its active segment rolls after that long (KIP-354)."""
    disk, root = disk_root
    logs = manager(disk, root, min_cleanable_ratio=0.99, max_compaction_lag_ms=60_000)
    log = logs.get_or_create_log("t", 0, now_ms=T0)
    for i in range(100):
        write(log, [(b"k%d" % (i % 3), b"v" * 20)], ts=T0 + i)
    cleaner = LogCleaner(logs)
    cleaner.checkpoints[("t", 0)] = log.segments[-2].base_offset     # most of the log is clean already
    hw = {("t", 0): log.log_end_offset}
    assert cleaner.tick(T0 + 1000, hw.get) == [] and not cleaner.busy      # ratio below 0.99, lag not reached
    cleaner._next_ms = 0
    lines = []
    now = T0 + 61_000
    for _ in range(10_000):
        lines = cleaner.tick(now, hw.get)
        if lines:
            break
        now += 100
    assert lines and lines[0].startswith("Cleaned log t-0")
    segments = len(log.segments)
    write(log, [(b"k0", b"late")], ts=T0 + 200_000)                 # the active segment is over 60 s old
    assert len(log.segments) == segments + 1


def test_compact_and_delete_together_compact_and_apply_retention(disk_root):
    disk, root = disk_root
    log = open_log(disk, root, cleanup_policy=("compact", "delete"), retention_ms=100_000, segment_bytes=400)
    for i in range(60):
        write(log, [(b"k%d" % (i % 3), b"v%d" % i)], ts=T0 + i * 10_000)
    clean(log, now_ms=T0 + 600_000)
    end = log.active_segment.base_offset
    below = [key for offset, key, _ in records(log) if offset < end]
    assert len(below) == len(set(below)) <= 3                       # compacted
    deleted = log.delete_old_segments(T0 + 600_000)
    assert deleted > 0 and log.log_start_offset > 0                 # and retention.ms still deletes
    assert all(s.max_timestamp >= T0 + 500_000 for s in log.segments[:-1])


def _txn_batch(items, producer_id: int, sequence: int):
    from strandline.protocol.records import compute_crc

    batch = keyed_batch(items, producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    batch[21:23] = (0x10).to_bytes(2, "big")
    batch[17:21] = compute_crc(batch, 0, len(batch)).to_bytes(4, "big")
    return batch


def test_transactions_are_compacted_by_their_outcome_and_markers_stay(disk_root):
    """As Kafka's cleaner: an aborted transaction's records go and hide nothing (a read_committed
    reader, or a group coordinator replaying sendOffsetsToTransaction's offsets, would lose the
    committed value); a committed one's are compacted like any; one not decided below the end of
    the pass is kept whole; markers stay."""
    from strandline.protocol.markers import build_marker

    disk, root = disk_root
    log = open_log(disk, root, segment_bytes=1 << 20)
    write(log, [(b"a", b"plain-1")])                                          # 0: superseded by 4
    log.append_as_leader(_txn_batch([(b"a", b"aborted")], 5, 0), 0, T0)       # 1: aborted: goes
    log.append_as_leader(build_marker(5, 0, False, 0, T0), 0, T0)            # 2: abort marker
    write(log, [(b"b", b"plain-1")])                                          # 3: superseded by 6
    log.append_as_leader(_txn_batch([(b"a", b"committed")], 7, 0), 0, T0)     # 4: committed
    log.append_as_leader(build_marker(7, 0, True, 0, T0), 0, T0)             # 5: commit marker
    log.append_as_leader(_txn_batch([(b"b", b"undecided")], 9, 0), 0, T0)     # 6: no marker yet
    log.roll()
    log.append_as_leader(build_marker(9, 0, True, 0, T0), 0, T0)             # 7: in the active segment
    clean(log)
    kept = records(log)
    assert [(o, k, v) for o, k, v in kept if k in (b"a", b"b")] == [
        (3, b"b", b"plain-1"), (4, b"a", b"committed"), (6, b"b", b"undecided")]
    markers = [h.base_offset for _, h in iter_batches(log.read(0, 1 << 20)) if h.attributes & 0x20]
    assert markers == [2, 5, 7]


def test_a_marker_goes_once_its_transaction_is_gone_and_delete_retention_passed(disk_root):
    """As Kafka's cleaner: the abort marker stays while its transaction's records are in the log;
    once a pass removed them, a later pass drops the marker (and its .txnindex entry) when its
    segment is older than delete.retention.ms. A commit marker whose records stay, and a
    producer's last marker, stay."""
    from strandline.protocol.markers import build_marker

    disk, root = disk_root
    log = open_log(disk, root, segment_bytes=1 << 20)
    log.append_as_leader(_txn_batch([(b"a", b"aborted")], 5, 0), 0, T0)       # 0: aborted
    log.append_as_leader(build_marker(5, 0, False, 0, T0), 0, T0)            # 1: abort marker
    log.append_as_leader(_txn_batch([(b"a", b"committed")], 5, 1), 0, T0)     # 2: committed
    log.append_as_leader(build_marker(5, 0, True, 0, T0), 0, T0)             # 3: commit marker
    write(log, [(b"c", b"plain")])                                            # 4
    log.roll()
    write(log, [(b"d", b"active")])                                           # 5

    def markers() -> list[int]:
        return [h.base_offset for _, h in iter_batches(log.read(0, 1 << 20)) if h.attributes & 0x20]

    clean(log)                                          # the aborted records go, the marker stays
    assert [o for o, _, _ in records(log)] == [1, 2, 3, 4, 5] and markers() == [1, 3]   # 0 went
    assert [(t.first_offset, t.last_offset) for t in log.collect_aborted_txns(0, 6)] == [(0, 1)]
    early = clean(log, now_ms=T0 + 1000, first_dirty=5)
    assert markers() == [1, 3] and early.tombstone_due_ms == T0 + 60_000       # too young yet
    late = clean(log, now_ms=T0 + 120_000, first_dirty=5)
    assert markers() == [3] and late.stats.markers_removed == 1
    assert log.collect_aborted_txns(0, 6) == []
    assert not disk.exists(f"{root}/t-0/{0:020d}.txnindex")
    copy = Log.open(disk, f"{root}/copy-0", "copy", 0, LogConfig(**COMPACT), needs_recovery=False, now_ms=T0)
    copy.append_as_follower(log.read(0, 1 << 20))       # a replica fetching the cleaned log
    assert copy.last_stable_offset(6) == 6              # the emptied batch 0 opens no transaction
