"""Opening a partition's log directory (Kafka's ``LogLoader``): the segments ``Log.open`` starts with,
and the producer state it rebuilds.

Recovery on open (``needs_recovery``, reference/kafka_replication.md §5.3): every segment from
the one containing the recovery point on is re-read with CRC checks (``LogSegment.recover``);
the first one found torn or corrupt is cut at its last valid batch and all later segments are
deleted, as are the segments after one that ends short of where a roll noted it ended (a tail a
power loss took from a segment whose successor's batches reached the disk). Without recovery nothing is scanned: only the tail of the active segment, from its last
index entry, is read to find the log end offset.

Before that, a log cleaner's interrupted swap is completed: a ``<base>.log.swap`` file replaces the
segments it covers (``log.swap``), and other leftovers (``.cleaned``, ``.deleted``, ``.tmp``)
are deleted.

The producer state is rebuilt on open, and after a truncation, from the latest good snapshot at or
below the log end offset and the batches after it (Kafka's ``rebuildProducerState``). Once the
high watermark is known, ``restore_unreplicated_transactions`` puts back the transactions decided
by a marker above it that the snapshot does not keep, which hold the last stable offset until the
high watermark passes them.
"""

from __future__ import annotations

import posixpath
from bisect import bisect_right
from itertools import takewhile
from typing import Callable, Iterator, NamedTuple, Protocol

from strandline.log.config import LogConfig
from strandline.log.disk import Disk
from strandline.log.epoch import LeaderEpochCache
from strandline.log.producer_snapshots import ProducerSnapshots
from strandline.log.producer_state import ProducerStateManager, snapshot_offset
from strandline.log.segment import INDEX_SUFFIX, LOG_SUFFIX, ROLLED_SUFFIX, TIME_INDEX_SUFFIX, LogSegment
from strandline.log.swap import SWAP_LOG_SUFFIX, complete_swap
from strandline.log.txn_index import TXN_INDEX_SUFFIX
from strandline.protocol.markers import CONTROL_BIT
from strandline.protocol.records import BatchHeader

CLEAN_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """``("my-topic", 3)`` from ``"my-topic-3"``; None for names that are not partition dirs."""
    topic, sep, index = name.rpartition("-")
    if not sep or not topic or not index.isdigit():
        return None
    return topic, int(index)


class LoadedSegments(NamedTuple):
    """What ``load_segments`` found (and recovered) in a log directory."""
    segments: list[LogSegment]
    leader_epoch_cache: LeaderEpochCache
    log_start_offset: int
    snapshot_offsets: list[int]         # of the producer snapshot files found
    stats: dict[str, int]               # the log's ``recovery_stats``
    found_files: bool                   # False: the directory was new (or empty)


def new_recovery_stats() -> dict[str, int]:
    return {"segments_recovered": 0, "batches_scanned": 0, "bytes_truncated": 0,
            "segments_deleted": 0, "indexes_rebuilt": 0, "producer_batches_replayed": 0, "gaps_truncated": 0}


def load_segments(disk: Disk, dir: str, config: LogConfig, *, recovery_point: int, log_start_offset: int,
                  needs_recovery: bool, now_ms: int) -> LoadedSegments:
    """Complete an interrupted swap, delete leftovers and indexes without a segment, open the
    segments and recover them (from the one holding ``recovery_point``, or only the active
    segment's tail without ``needs_recovery``); a log with no segment, or with nothing at or
    above ``log_start_offset``, starts with one empty segment there."""
    disk.makedirs(dir)
    names = disk.listdir(dir)
    bases = []
    swaps = []
    rolled: dict[int, int] = {}         # segment base -> where the segment before ended at the roll
    for name in names:
        if name.endswith(SWAP_LOG_SUFFIX) and name[:-len(SWAP_LOG_SUFFIX)].isdigit():
            swaps.append(int(name[:-len(SWAP_LOG_SUFFIX)]))
        elif name.endswith(CLEAN_SUFFIXES):
            disk.remove(posixpath.join(dir, name))
        elif name.endswith(LOG_SUFFIX) and name[:-len(LOG_SUFFIX)].isdigit():
            bases.append(int(name[:-len(LOG_SUFFIX)]))
        elif name.endswith(ROLLED_SUFFIX) and name[:-len(ROLLED_SUFFIX)].isdigit():
            path = posixpath.join(dir, name)
            try:
                rolled[int(name[:-len(ROLLED_SUFFIX)])] = int(disk.read_file(path))
            except ValueError:                  # torn: the roll it noted had not begun
                pass
            disk.remove(path)                   # what it says is used by this recovery or never
    for base in sorted(swaps):
        bases = complete_swap(disk, dir, base, config, bases, now_ms)
    if swaps:
        names = disk.listdir(dir)
    base_set = set(bases)
    txn_indexes = set()
    snapshots = []
    for name in names:  # indexes whose segment is gone
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            stem = name[:-len(suffix)]
            if name.endswith(suffix) and stem.isdigit():
                if int(stem) not in base_set:
                    disk.remove(posixpath.join(dir, name))
                elif suffix == TXN_INDEX_SUFFIX:
                    txn_indexes.add(int(stem))
        offset = snapshot_offset(name)
        if offset is not None:
            snapshots.append(offset)
    bases.sort()
    segments = [LogSegment.open(disk, dir, base, config, now_ms, txn_index=base in txn_indexes)
                for base in bases]
    cache = LeaderEpochCache(disk, dir)
    stats = new_recovery_stats()

    if segments and needs_recovery:
        _recover(disk, dir, segments, max(bisect_right(bases, recovery_point) - 1, 0), rolled, cache, stats)
    elif segments:
        active = segments[-1]
        truncated = active.load_tail()
        stats["bytes_truncated"] += truncated
        if truncated:
            stats["batches_scanned"] += active.recovered_batches
            stats["segments_recovered"] += 1
    for segment in segments:
        stats["indexes_rebuilt"] += segment.index_rebuilds

    if not segments:
        segments = [LogSegment.create(disk, dir, log_start_offset, config, now_ms)]
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    if segments[-1].next_offset < log_start_offset:
        # Everything left is below the log start offset (Kafka's recoverLog): start afresh.
        for segment in segments:
            segment.delete()
            stats["segments_deleted"] += 1
        segments = [LogSegment.create(disk, dir, log_start_offset, config, now_ms)]
    return LoadedSegments(segments, cache, log_start_offset, snapshots, stats, bool(names))


def _recover(disk: Disk, dir: str, segments: list[LogSegment], first: int, rolled: dict[int, int],
             cache: LeaderEpochCache, stats: dict[str, int]) -> None:
    """Recover ``segments`` from index ``first`` on (CRC checks, indexes, leader epochs), cutting
    the log at the first torn batch or lost tail (the segments after it are deleted)."""
    on_batch = _epoch_assigner(cache)
    for i in range(first, len(segments)):
        segment = segments[i]
        truncated = segment.recover(on_batch)
        segment.flush(force=True)
        stats["segments_recovered"] += 1
        stats["batches_scanned"] += segment.recovered_batches
        stats["bytes_truncated"] += truncated
        # The roll to the next segment left this one's fsync for later and noted where it
        # ended (``.rolled``); ending short of that now, it lost a tail while the next one's
        # batches reached the disk. Kafka keeps such a log, hole and all; here it ends there,
        # as after a torn batch, so that a follower fetches the lost offsets again instead of
        # serving a log that skips them. (A gap the log had before, a compacted past's, is
        # where the note says the segment ended: kept.)
        gap = i + 1 < len(segments) and rolled.get(segments[i + 1].base_offset, -1) > segment.next_offset
        if truncated or gap:
            stats["gaps_truncated"] += gap and not truncated
            for later in segments[i + 1:]:
                later.delete()
                stats["segments_deleted"] += 1
            del segments[i + 1:]
            break
    if stats["segments_recovered"]:
        disk.fsync_dir(dir)


class ReplayedLog(Protocol):
    """What rebuilding a producer state needs of a log (``strandline.log.log.Log`` has it)."""

    segments: list[LogSegment]
    snapshots: ProducerSnapshots
    producer_state: ProducerStateManager
    producer_state_start: int
    replayed_batches: int

    @property
    def log_end_offset(self) -> int: ...

    def iter_batch_headers(self, from_offset: int) -> Iterator[BatchHeader]: ...

    def segment_index(self, offset: int) -> int: ...

    def segment_of(self, offset: int) -> LogSegment: ...

    def marker_of(self, header: BatchHeader) -> tuple[int, int] | None: ...


def rebuild_producer_state(log: ReplayedLog) -> None:
    """From the latest good snapshot at or below the log end offset, then the batches after it;
    from the log's start without one."""
    first = log.segments[0].base_offset
    log.snapshots.delete(lambda o: first <= o <= log.log_end_offset)
    start = log.snapshots.load_latest(log.producer_state)
    log.producer_state_start = first if start is None else start
    _replay_producers(log, log.producer_state_start)


#: How far below the high watermark (in offsets) the restore first looks for each producer's
#: earlier marker; eight times as far each time one is not found, down to a snapshot
RESTORE_WINDOW = 1024


def restore_unreplicated_transactions(log: ReplayedLog, high_watermark: int) -> bool:
    """After the producer state was loaded from a snapshot (an open, a truncation), with the high
    watermark known: the transactions decided by a marker at or above it are unreplicated again,
    which keeps the last stable offset at their first offset until the high watermark passes the
    marker (KIP-98). A snapshot keeps producers and open transactions, not these; the markers the
    load replayed (from ``log.producer_state_start`` on) are in the state already. For a marker
    at or above the high watermark and below that start, its transaction's first offset is found
    by replaying, into a state of its own, the batches from a point where it is known: past an
    earlier marker of the same producer (looked for in a window below the high watermark that
    widens until each is found), else from the latest snapshot at or below the high watermark.
    It runs straight after the load, before anything prunes the state at a high watermark.
    True when it restored one."""
    first = log.segments[0].base_offset
    low, high = max(high_watermark, first), log.producer_state_start
    if low >= high:
        return False
    pids = {h.producer_id for h in _headers(log, low, high)
            if h.attributes & CONTROL_BIT and h.producer_id >= 0 and h.base_offset >= low}
    if not pids:
        return False
    floor = max([o for o in log.snapshots.offsets if o <= low], default=first)
    window = RESTORE_WINDOW
    while True:
        state = ProducerStateManager()
        start = low - window
        unresolved = set(pids)
        if start <= floor:
            # not below the first segment's base: a snapshot there holds what deleted segments
            # told (open transactions, producers), which no replay of the log can tell again
            loaded = log.snapshots.load_latest(state, at_most=low)
            start, unresolved = first if loaded is None else loaded, set()
        for header in _headers(log, max(start, first), high):
            if header.base_offset >= low and unresolved:
                break
            if header.producer_id < 0:
                continue
            marker = log.marker_of(header) if header.attributes & CONTROL_BIT else None
            if marker is not None and header.base_offset < low:
                unresolved.discard(header.producer_id)
            state.update(header, header.base_offset, header.max_timestamp, marker)
        if not unresolved:
            break
        window *= 8
    restored = [(marker, first_offset) for marker, first_offset in state.unreplicated if marker >= low]
    log.producer_state.unreplicated.extendleft(reversed(restored))
    return True


def _headers(log: ReplayedLog, start: int, end: int) -> Iterator[BatchHeader]:
    """Headers of the batches from the one containing ``start`` up to ``end``."""
    return takewhile(lambda h: h.base_offset < end, log.iter_batch_headers(start))


def _replay_producers(log: ReplayedLog, start: int) -> None:
    """Apply the batches from ``start`` to the log end to the producer state, rewriting the
    transaction index entries of the aborts among them."""
    rewritten = [s for s in log.segments[log.segment_index(start):] if s.txn_index.entries]
    for segment in rewritten:
        segment.txn_index.truncate_to(start)
    if start >= log.log_end_offset:
        return
    for header in log.iter_batch_headers(max(start, log.segments[0].base_offset)):
        log.replayed_batches += 1
        if header.producer_id < 0:
            continue
        marker = log.marker_of(header) if header.attributes & CONTROL_BIT else None
        aborted = log.producer_state.update(header, header.base_offset, header.max_timestamp, marker)
        if aborted is not None:
            segment = log.segment_of(aborted.last_offset)
            segment.txn_index.append(aborted)
            rewritten.append(segment)
    for segment in rewritten:
        segment.txn_index.flush()


def _epoch_assigner(cache: LeaderEpochCache) -> Callable[[BatchHeader], None]:
    """Recovery re-learns only epochs above the latest known one (Kafka's LogSegment.recover)."""
    def on_batch(header: BatchHeader) -> None:
        epoch = header.partition_leader_epoch
        if epoch >= 0 and epoch > cache.latest_epoch:
            cache.assign(epoch, header.base_offset)
    return on_batch
