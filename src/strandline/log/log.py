"""The log of one partition: a directory ``<log dir>/<topic>-<partition>`` of segments.

Kafka's ``Log`` without the locks: appends as leader (assigning offsets and stamping the leader epoch
into the batches in place) or as follower (keeping the leader's offsets), reads of whole stored
batches, rolling, retention, truncation, flushing and recovery. Time comes in as ``now_ms``
arguments; every file goes through a ``Disk``.

Opening a log (``log.loader``) completes a log cleaner's interrupted swap and recovers the
segments from the recovery point on (only the active segment's tail after a clean shutdown).

Producer state (``log.producer_state``: idempotence, transactions, the last stable offset) is kept
as the log appends, snapshotted (``<offset>.snapshot``) when a segment rolls and on close, and
loaded on open and truncation from a snapshot, replaying the batches after it (``log.loader`` says
which). Each abort marker adds an entry to its segment's ``.txnindex``. Producers idle past
``producer.id.expiration.ms`` are forgotten on open and by retention checks.
"""

from __future__ import annotations

import posixpath
import uuid
from bisect import bisect_right
from typing import Callable, Iterator

from strandline.errors import BrokenInvariant
from strandline.log import retention, swap, time_lookup
from strandline.log.appends import (  # noqa: F401  (AppendInfo, OffsetOutOfOrder, Records: part of this module's interface)
    AppendInfo, OffsetOutOfOrder, ProducerBatches, Records, addressable_parts, check_as_follower, number_as_leader,
    should_roll)
from strandline.log.config import LogConfig
from strandline.log.disk import Disk, FileRegion
from strandline.log.epoch import LeaderEpochCache
from strandline.log.loader import load_segments, new_recovery_stats, rebuild_producer_state
from strandline.log.partition_metadata import sync_topic_id
from strandline.log.reads import aborted_txns, read_batches
from strandline.log.producer_snapshots import ProducerSnapshots
from strandline.log.producer_state import AbortedTxn, ProducerStateManager
from strandline.log.segment import INT32_MAX, BatchInfo, LogSegment, rolled_path
from strandline.protocol.markers import CONTROL_BIT, read_marker
from strandline.protocol.records import BatchHeader

class Log:
    def __init__(self, disk: Disk, dir: str, topic: str, partition: int, config: LogConfig,
                 segments: list[LogSegment], leader_epoch_cache: LeaderEpochCache, *,
                 log_start_offset: int, now_ms: int) -> None:
        self.disk = disk
        self.dir = dir
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[LogSegment] = segments
        self._bases = [s.base_offset for s in segments]
        self.leader_epoch_cache = leader_epoch_cache
        self.log_start_offset = log_start_offset
        self.log_end_offset = segments[-1].next_offset
        self._recovery_point = self.log_end_offset
        #: the highest recovery point it had or was opened with (the checkpoint may still say so)
        self.highest_recovery_point = self._recovery_point
        self.topic_id: uuid.UUID | None = None        # its topic's id (a uuid.UUID) once known: partition.metadata (KIP-516)
        self.topic_id_unsynced = False      # partition.metadata is written, durable with the next flush
        self.recovery_stats = new_recovery_stats()
        self._last_flush_ms = now_ms
        self._now_ms = now_ms
        self.closed = False
        self.parent_unsynced = False        # the log's own directory entry is not fsynced yet
        self.truncations = 0                # times the log was cut at its end (a cleaning pass restarts)
        self.lowest_truncation: int | None = None  # the lowest offset cut from since the cleaner last asked
        #: told ``(topic, partition)`` after the log end or log start offset moved (the replica
        #: manager's change journal: fetch sessions look only at partitions that changed)
        self.offsets_listener: Callable[[tuple[str, int]], None] | None = None
        #: handed ``(log, base offset, old segment, paths of its files and the roll's snapshot)`` at
        #: each roll, to fsync them away from the caller (LogManager's roll flushes); None: at once
        self.roll_listener: Callable[["Log", int, LogSegment, list[str]], None] | None = None
        self.producer_state = ProducerStateManager()
        self.snapshots = ProducerSnapshots(disk, dir)
        self.replayed_batches = 0               # batch headers read to load the producer state
        self.producer_state_start = 0           # where its replay began (loader.restore_unreplicated_transactions)

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls, disk: Disk, dir: str, topic: str, partition: int, config: LogConfig, *,
             recovery_point: int = 0, log_start_offset: int = 0, needs_recovery: bool = True,
             now_ms: int = 0) -> "Log":
        """Open the log in ``dir`` (created if missing), recovering it when ``needs_recovery``
        (see ``log.loader``), and load its producer state."""
        loaded = load_segments(disk, dir, config, recovery_point=recovery_point, log_start_offset=log_start_offset,
                               needs_recovery=needs_recovery, now_ms=now_ms)
        cache, stats = loaded.leader_epoch_cache, loaded.stats
        log = cls(disk, dir, topic, partition, config, loaded.segments, cache,
                  log_start_offset=loaded.log_start_offset, now_ms=now_ms)
        cache.truncate_from_end(log.log_end_offset)
        if log._epochs_cut_above_start():
            log.log_start_offset = cache.entries[0][1]
        cache.truncate_from_start(log.log_start_offset)
        log.recovery_stats = stats
        log.highest_recovery_point = max(log.highest_recovery_point, recovery_point)
        log.snapshots = ProducerSnapshots(disk, dir, loaded.snapshot_offsets)
        rebuild_producer_state(log)
        log.producer_state.remove_expired(now_ms, config.producer_id_expiration_ms)
        stats["producer_batches_replayed"] = log.replayed_batches
        if loaded.found_files:
            log._sync_dir_if_new()
        else:
            # a new, empty log: its directory entries become durable with its first flush (nothing in
            # it needs to survive a power loss before that): creating thousands of partitions costs no fsync each
            log.parent_unsynced = True
        return log

    def _epochs_cut_above_start(self) -> bool:
        """Whether the leader-epoch checkpoint records a move of the log start offset that the
        log-start-offset checkpoint (written every log.flush.start.offset.checkpoint.interval.ms)
        missed: its first epoch starts above the log start, and the batch just below that start
        belongs to that epoch or an earlier one. A move of the log start (DeleteRecords, or a
        follower taking its leader's) moves the first epoch's start up to it; an epoch appended
        after higher ones (never from a leader, whose epochs only grow) drops them and also starts
        above the log start, but the batch below it is of a higher epoch. The records below were
        deleted: served again, the offsets there would have no epoch, and a follower asking about
        an earlier epoch would be told it ends at the first epoch's start and keep its own records
        there, never committed."""
        entries = self.leader_epoch_cache.entries
        if not entries or entries[0][1] <= self.log_start_offset:
            return False
        first_epoch, first_start = entries[0]
        below = next(iter(self.iter_batch_headers(first_start - 1)), None)
        return below is not None and below.base_offset < first_start and below.partition_leader_epoch <= first_epoch

    # -- state -------------------------------------------------------------------------------

    @property
    def recovery_point(self) -> int:
        """Everything below it is durable (recovery after a crash starts from here)."""
        return self._recovery_point

    @recovery_point.setter
    def recovery_point(self, offset: int) -> None:
        self._recovery_point = offset
        if offset > self.highest_recovery_point:
            self.highest_recovery_point = offset

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def segment_index(self, offset: int) -> int:
        """Where in ``segments`` the segment holding ``offset`` is (the first one for an offset below it)."""
        return max(bisect_right(self._bases, offset) - 1, 0)

    def segment_of(self, offset: int) -> LogSegment:
        return self.segments[self.segment_index(offset)]

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self.segments = segments
        self._bases = [s.base_offset for s in segments]

    def _sync_dir_if_new(self, parent: bool = True) -> None:
        new = [s for s in self.segments if s.new]
        if self.topic_id_unsynced:              # with the records it holds (its entry: just below)
            sync_topic_id(self.disk, self.dir)
        if self.leader_epoch_cache.unwritten:
            # written to a temporary name and renamed, then the directory fsynced: that fsync
            # makes every entry of the directory durable, the new segments' and the topic id's too
            self.leader_epoch_cache.write()
        elif new or self.topic_id_unsynced:
            self.disk.fsync_dir(self.dir)
        self.topic_id_unsynced = False
        for s in new:
            s.new = False
        if self.parent_unsynced and parent:
            self.disk.fsync_dir(posixpath.dirname(self.dir))
            self.parent_unsynced = False

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.config = config

    # -- appends -----------------------------------------------------------------------------

    def append_as_leader(self, records: bytearray, leader_epoch: int, now_ms: int) -> AppendInfo:
        """Assign offsets from the log end offset and stamp ``leader_epoch`` into every batch.

        ``records`` holds one or more complete, already validated v2 batches; it is changed in
        place (base offset and partition leader epoch lie outside the CRC) and then written
        with a single append.
        """
        self._now_ms = now_ms
        batches, producers = number_as_leader(records, self.log_end_offset, leader_epoch, self.topic,
                                              self.partition)
        if not batches:
            return AppendInfo(self.log_end_offset, self.log_end_offset - 1, -1, -1, 0, 0)
        self.leader_epoch_cache.assign(leader_epoch, batches[0].base_offset)
        return self._append(records, batches, now_ms, producers)

    def append_as_follower(self, records: Records, now_ms: int | None = None) -> AppendInfo:
        """Append batches as the leader numbered them (first base offset >= log end offset: a
        compacted log has gaps).

        Each batch is checked (magic 2, CRC-32C); the leader epoch cache learns every batch's
        partition leader epoch. ``now_ms`` (optional) drives time-based rolling; without it the
        batches' own timestamps do, like Kafka's record-time based ``segment.ms``.
        """
        batches, producers, epochs = check_as_follower(records, self.log_end_offset, self.topic, self.partition)
        if not batches:
            return AppendInfo(self.log_end_offset, self.log_end_offset - 1, -1, -1, 0, 0)
        if now_ms is not None:
            self._now_ms = now_ms
        for epoch, start in epochs:
            self.leader_epoch_cache.assign(epoch, start)
        return self._append(records, batches, now_ms, producers)

    def _append(self, records: Records, batches: list[BatchInfo], now_ms: int | None,
                producers: ProducerBatches) -> AppendInfo:
        first, last = batches[0].base_offset, batches[-1].last_offset
        if last - first > INT32_MAX:
            return self._append_in_parts(records, batches, now_ms, producers)
        max_ts, max_off = -1, -1
        for b in batches:
            if b.max_timestamp > max_ts:
                max_ts, max_off = b.max_timestamp, b.last_offset
        segment = self.segments[-1]
        clock = now_ms if now_ms is not None else max_ts
        if should_roll(segment, self.config, len(records), last, clock):
            segment = self.roll(first, clock if now_ms is not None else self._now_ms)
        segment.append(records, batches, now_ms)
        self.log_end_offset = last + 1
        for pos, header, offset in producers:
            self._track_producer(records, pos, header, offset)
        self._offsets_changed()
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush(now_ms)
        return AppendInfo(first, last, max_ts, max_off, len(batches), len(records))

    def _append_in_parts(self, records: Records, batches: list[BatchInfo], now_ms: int | None,
                         producers: ProducerBatches) -> AppendInfo:
        """Batches more than 2**31 offsets apart (a compacted leader's gap, read across its
        segments in one Fetch answer) go in parts, each spanning at most what one segment's
        32-bit relative offsets address, so that each can start a segment of its own."""
        view = memoryview(records)
        parts: list[AppendInfo] = []
        for i, j in addressable_parts(batches):
            start, end = batches[i].position, batches[j - 1].position + batches[j - 1].size
            part = [b._replace(position=b.position - start) for b in batches[i:j]]
            owned = [(pos - start, h, offset) for pos, h, offset in producers if start <= pos < end]
            parts.append(self._append(view[start:end], part, now_ms, owned))
        latest = max(parts, key=lambda p: p.max_timestamp)
        return AppendInfo(parts[0].first_offset, parts[-1].last_offset, latest.max_timestamp,
                          latest.offset_of_max_timestamp, sum(p.num_batches for p in parts),
                          sum(p.valid_bytes for p in parts))

    def roll(self, new_base_offset: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset. The old one is flushed and the
        recovery point moves to the new base offset: here and now without a ``roll_listener``;
        with one, the listener is handed the old segment's files to fsync away from the caller (as
        Kafka schedules a rolled segment's flush on its scheduler thread: a gigabyte segment can
        take a second), and :meth:`roll_flushed` moves the recovery point once that is done.

        As with Kafka, a power loss before that flush can take the old segment's tail while the
        operating system had written some of the new segment's batches back: the log recovered
        then skips the lost offsets. Outside a flush on each acknowledgement (DUR-2), which makes
        every roll synchronous, a power loss loses acknowledged writes anyway (LOSS-5)."""
        base = self.log_end_offset if new_base_offset is None else new_base_offset
        now = self._now_ms if now_ms is None else now_ms
        old = self.segments[-1]
        if old.size == 0 and old.base_offset == base:
            return old
        # The roll stays synchronous at or below the highest recovery point this log had (or its
        # log manager checkpointed for the partition): after a truncation, or for a log deleted and
        # created again, the recovery-point checkpoint on disk may be above the new segment, and
        # recovery would not check the old one at all. (With a flush on each acknowledgement the
        # recovery point is the log end, so every roll is synchronous.)
        listener = self.roll_listener
        if base <= self.highest_recovery_point:
            listener = None
        if listener is not None:
            paths = old.seal()
            # where the segment left unflushed ends, durable before any batch of the next one can
            # be: a power loss that takes its tail but not theirs is then seen (loader)
            self.disk.write_file_atomic(rolled_path(self.dir, base), str(old.next_offset).encode())
            self.disk.fsync_dir(self.dir)
        else:
            old.on_become_inactive()
        segment = LogSegment.create(self.disk, self.dir, base, self.config, now)
        self._set_segments(self.segments + [segment])
        # fsynced before the recovery point passes it: here, or by the roll's flush (a torn one is
        # skipped on open, the state then replayed from an earlier one)
        snapshot = self._take_snapshot(base, sync=listener is None)
        if listener is None:
            self._flushed_to(base)
        else:
            listener(self, base, old, paths + [snapshot])
        return segment

    def roll_flushed(self, offset: int, segment: LogSegment, truncations: int) -> None:
        """The fsync of a rolled segment's files (below ``offset``) that the ``roll_listener`` was
        handed completed; ``truncations`` is what :attr:`truncations` was at the roll. Nothing moves
        if the log was closed or cut at its end since (what it holds below ``offset`` now may not be
        what was flushed)."""
        if self.closed or truncations != self.truncations:
            return                      # (a segment cut and written again is flushed by a later flush)
        if any(s is segment for s in self.segments):
            segment.sealed_flushed()
        self._flushed_to(offset)
        marker = rolled_path(self.dir, offset)
        if self.disk.exists(marker):        # the segment before is durable: nothing to compare now
            self.disk.remove(marker)

    def _flushed_to(self, offset: int) -> None:
        """Everything below ``offset`` is durable: make the directory entries and the leader-epoch
        checkpoint durable too, then move the recovery point."""
        self._sync_dir_if_new()
        if offset > self.recovery_point:
            self.recovery_point = offset

    # -- producer state ----------------------------------------------------------------------

    def _track_producer(self, records: Records, pos: int, header: BatchHeader, offset: int) -> None:
        marker = read_marker(records, pos, header) if header.attributes & CONTROL_BIT else None
        aborted = self.producer_state.update(header, offset, header.max_timestamp, marker)
        if aborted is not None:
            self.segment_of(aborted.last_offset).txn_index.append(aborted)

    def _take_snapshot(self, offset: int, sync: bool = False) -> str:
        """Write the producer state as of ``offset``; fsynced when ``sync`` (one above the log end
        offset after a crash is deleted on open)."""
        return self.snapshots.take(offset, self.producer_state.snapshot(), sync)

    def marker_of(self, header: BatchHeader) -> tuple[int, int] | None:
        """``(marker type, coordinator epoch)`` of the control batch ``header`` of this log (read
        from its segment, below the log start offset too); None for another control record."""
        data, _ = self.segment_of(header.base_offset).read(header.base_offset, header.size,
                                                           header.base_offset + 1)
        return read_marker(bytes(data), 0, header) if data else None

    def expire_producers(self, now_ms: int) -> int:
        """Forget producers idle longer than producer.id.expiration.ms (no open transaction)."""
        return self.producer_state.remove_expired(now_ms, self.config.producer_id_expiration_ms)

    def last_stable_offset(self, high_watermark: int) -> int:
        """Below it every transaction is decided and its marker below ``high_watermark`` (KIP-98);
        a transaction whose start was deleted holds it at the log start offset; never above
        ``high_watermark`` (Kafka's rule)."""
        return min(max(self.producer_state.last_stable_offset(high_watermark), self.log_start_offset),
                   high_watermark)

    def collect_aborted_txns(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of ``[start, end)`` reports (Kafka's
        collectAbortedTxns): those whose abort marker is at or after ``start`` and whose data
        begins before ``end``. The search stops at an abort decided with a last stable offset
        at or beyond ``end``: no later abort can have begun before it."""
        return aborted_txns(self.segments, self.segment_index(start), start, end)

    # -- reads -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True, regions: bool = False) -> bytes | FileRegion:
        """Whole stored batches from the one containing ``offset``, across segments.

        At most ``max_bytes`` in all (except one whole first batch when ``min_one_batch``), and
        only batches with base offset < ``max_offset`` when given. Empty at the log end offset.
        With ``regions`` (the Fetch path), a large read of the active segment's tail may be a
        :class:`FileRegion` for the shell to ``sendfile`` (see ``LogSegment.read``).
        """
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise ValueError(f"offset {offset} is outside {self.topic}-{self.partition}'s log "
                             f"[{self.log_start_offset}, {self.log_end_offset}]")
        if offset == self.log_end_offset:
            return b""
        return read_batches(self.segments, self.segment_index(offset), offset, max_bytes, max_offset,
                            min_one_batch, regions)

    def iter_batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches from the one containing ``from_offset`` to the end (61 bytes each)."""
        for segment in list(self.segments[self.segment_index(from_offset):]):
            yield from segment.iter_headers(from_offset)

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record from the log start offset whose timestamp is
        >= ``timestamp``. Raises UndecodableRecordsError if that batch's records do not decode."""
        return time_lookup.find_offset_by_timestamp(self.segments, self.log_start_offset, timestamp)

    def find_max_timestamp(self, below: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record holding the largest timestamp among the
        batches from the log start offset with base offset < ``below`` (Kafka's MAX_TIMESTAMP and
        offsetOfMaxTimestamp). Segments wholly in that range answer from what they keep, so only
        the first and the last are read. Raises UndecodableRecordsError as find_offset_by_timestamp."""
        return time_lookup.find_max_timestamp(self.segments, self.log_start_offset, below)

    def epoch_for_offset(self, offset: int) -> int:
        return self.leader_epoch_cache.epoch_for_offset(offset)

    # -- truncation --------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Drop every offset >= ``offset`` (and the batch containing it); returns whether anything changed."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.topic}-{self.partition} to negative offset {offset}")
        if offset >= self.log_end_offset:
            # nothing to drop, but an epoch that starts at the log end holds no record: a broker that
            # led it and appended nothing must forget it, or it would ask its new leader about it
            # forever (Kafka's Log.truncateTo does the same)
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        self._truncated(offset)
        keep = [s for s in self.segments if s.base_offset <= offset]
        for segment in self.segments[len(keep):]:
            segment.delete()
        self._set_segments(keep)
        active = self.segments[-1]
        active.truncate_to(offset)
        self.log_end_offset = active.next_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        rebuild_producer_state(self)
        self._offsets_changed()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (epoch cache cleared)."""
        self._truncated(offset)
        for segment in self.segments:
            segment.delete()
        self._set_segments([LogSegment.create(self.disk, self.dir, offset, self.config, self._now_ms)])
        self.leader_epoch_cache.clear()
        self._sync_dir_if_new()                 # the emptied epoch cache too, before the recovery point moves
        self.log_start_offset = self.log_end_offset = self.recovery_point = offset
        self.snapshots.delete(lambda o: False)
        self.producer_state.clear()
        self.producer_state_start = offset
        self._offsets_changed()

    def _offsets_changed(self) -> None:
        listener = self.offsets_listener
        if listener is not None:
            listener((self.topic, self.partition))

    def _truncated(self, offset: int) -> None:
        self.truncations += 1
        if self.lowest_truncation is None or offset < self.lowest_truncation:
            self.lowest_truncation = offset

    def take_lowest_truncation(self) -> int | None:
        """The lowest offset the log was cut from since the last call (the log cleaner's checkpoint
        must not claim offsets written again after a truncation), then forget it."""
        offset, self.lowest_truncation = self.lowest_truncation, None
        return offset

    # -- compaction --------------------------------------------------------------------------

    def replace_segments(self, old: list[LogSegment], cleaned_path: str, now_ms: int,
                         removed_markers: set[int] | None = None) -> LogSegment:
        """Swap a log cleaner's fsynced ``cleaned_path`` in for the consecutive segments ``old``
        (``log.swap``): rename it to ``<base>.log.swap`` (the commit point), delete the old
        segments' files, rename the swap file to ``<base>.log``. The new segment's transaction
        index holds the old ones' entries but those of the abort markers in ``removed_markers``."""
        first = self.segments.index(old[0])
        if self.segments[first:first + len(old)] != old or first + len(old) >= len(self.segments):
            raise BrokenInvariant(f"segments to replace are not consecutive inactive segments of {self!r}")
        new = swap.swap_in(self.disk, self.dir, self.config, old, cleaned_path, now_ms, removed_markers)
        self._set_segments(self.segments[:first] + [new] + self.segments[first + len(old):])
        return new

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up (DeleteRecords); segments below go at the next retention run."""
        if offset <= self.log_start_offset:
            return False
        if offset > self.log_end_offset:
            raise ValueError(f"log start offset {offset} beyond log end offset {self.log_end_offset}")
        self.log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        self._offsets_changed()
        return True

    # -- flushing ----------------------------------------------------------------------------

    def flush(self, now_ms: int | None = None, parent: bool = True) -> None:
        """fsync every segment with unflushed data; the recovery point becomes the log end offset.
        ``parent=False`` leaves a new log's own directory entry to the caller, who fsyncs the
        directory holding it (once for many logs) before it relies on the recovery point
        (:attr:`parent_unsynced` says whether it must)."""
        if self.closed:
            return
        for segment in self.segments:
            if segment.dirty:
                segment.flush()
        self._sync_dir_if_new(parent)
        self.recovery_point = self.log_end_offset
        if now_ms is not None:
            self._last_flush_ms = now_ms
            self._now_ms = now_ms

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush when flush.messages or flush.ms says so; returns whether it did."""
        self._now_ms = now_ms
        unflushed = self.log_end_offset - self.recovery_point
        if unflushed <= 0:
            return False
        if unflushed >= self.config.flush_messages or now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush(now_ms)
            return True
        return False

    # -- retention ---------------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Retention (``log.retention``): segments below the log start offset, and when the cleanup
        policy has ``delete`` those older than retention.ms or beyond retention.bytes, oldest first;
        never the active segment, nor (when given) one with data at or above ``high_watermark``."""
        self._now_ms = now_ms
        return self.delete_oldest_segments(retention.segments_to_delete(
            self.segments, self.config, self.log_start_offset, self.log_end_offset, now_ms, high_watermark))

    def delete_oldest_segments(self, count: int) -> int:
        """Delete the ``count`` oldest segments (never the active one) and their producer snapshots;
        the log start offset moves up to the first segment left. Returns ``count``."""
        if count <= 0:
            return 0
        if count >= len(self.segments):
            raise BrokenInvariant(f"cannot delete the active segment of {self!r}")
        for segment in self.segments[:count]:
            segment.delete()
        self._set_segments(self.segments[count:])
        first = self.segments[0].base_offset
        self.snapshots.delete(lambda o: o >= first)
        self.maybe_increment_log_start_offset(first)
        return count

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        if self.log_end_offset > self.segments[0].base_offset or not self.producer_state.empty:
            self._take_snapshot(self.log_end_offset)     # the next open replays nothing
        for segment in self.segments:
            segment.close()
        self.closed = True

    def delete(self) -> None:
        self.producer_state.clear()           # nothing to snapshot: the directory goes
        self.close()
        self.disk.rmtree(self.dir)

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")

