"""One compaction pass over one log (Kafka's ``Cleaner.doClean``), advanced in slices.

A pass covers the log from its first segment up to ``end``, the first uncleanable offset: never
the active segment, nothing at or above the high watermark, nothing younger than
``min.compaction.lag.ms``, and only whole segments.

1. **Offset map.** The dirty part (from the cleaner checkpoint to ``end``) is read and every keyed
   record's offset is kept by key: the newest offset of each key wins. The map holds at most
   ``map_capacity`` keys; when the next segment might not fit, ``end`` moves down to it.
2. **Rewrite.** The segments below ``end`` are grouped as Kafka groups them (at most
   ``segment.bytes`` and 2^31 offsets per group). Each group becomes one ``.cleaned`` file with
   the first segment's base offset, holding every record that is still the newest of its key, and
   every record without a key.
   - A batch that loses no record is copied as it is.
   - A batch that loses some keeps its header (base offset, last offset delta, timestamps,
     producer id, epoch and sequence) and its surviving records, re-compressed with its codec.
   - A batch that loses every record vanishes, except in three cases. It is kept empty, as Kafka
     keeps it, when it is the last batch of a producer id in the pass (so idempotent producers
     are still deduplicated after a restart). It is kept empty when it is the group's last
     batch, so that the cleaned segment ends at the same offset as the segments it replaces. And
     it is kept empty when it is the first batch of a leader epoch (it starts an entry of the
     leader epoch cache), which Kafka does not do: a follower that fetches across the cleaned
     log learns each epoch's start from that batch's base offset, and would otherwise learn a
     later offset (the next surviving batch). A leader answering OffsetsForLeaderEpoch from
     such a later start lets a returning replica keep records of an older epoch that were
     never committed, below its high watermark once it catches up (found by the explorer's
     ``compact`` configuration).
   - A tombstone (a null value) stays while it is still the newest of its key, until its segment
     has been cleaned once and its newest timestamp is older than ``delete.retention.ms``.
   - Transactions, as Kafka's cleaner treats them: a first look at the batch headers below
     ``end`` learns each transactional batch's outcome from the markers that follow it. Records
     of a committed transaction are compacted like any others; an aborted transaction's records
     go (they supersede nothing); a transaction whose marker is not below ``end`` yet is kept
     whole and supersedes nothing. A marker goes, as Kafka's does, once no batch of its
     transaction is left before it and its segment was cleaned before and is older than
     ``delete.retention.ms`` (so a reader had that long to see the marker with its records),
     unless it is its producer's last batch in the pass (it carries the producer's epoch). The
     transaction index entry of an abort marker that goes goes with it.
3. **Swap**, as Kafka does it. The ``.cleaned`` file is fsynced and renamed to
   ``<base>.log.swap`` (the commit point). Then the replaced segments' files are deleted, and the
   swap file is renamed to ``<base>.log``.

   A crash anywhere leaves either the old segments (a ``.cleaned`` file is deleted on open) or
   the new one. On open (``Log.open``), a ``.swap`` file replaces every segment whose base offset
   lies in the offset range it covers, which is exactly the replaced group because the cleaned
   segment ends where the group ended.

Offsets never change: compaction leaves gaps, which followers and consumers step over.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from strandline.log.segment import INT32_MAX, LOG_SUFFIX, LogSegment, file_prefix
from strandline.protocol.markers import COMMIT_MARKER
from strandline.protocol.records import (CONTROL_BIT, DECODE_ERRORS, HEADER_SIZE, BatchHeader, UndecodableRecordsError,
                                         iter_batches, read_header, rebuild, records_section,
                                         walk_records)

if TYPE_CHECKING:
    from strandline.log.log import Log

CLEANED_SUFFIX = ".cleaned"
READ_CHUNK = 1 << 20                 # bytes read from a segment at a time
#: the work a pass does between two yields, counted as the bytes it reads plus BATCH_WORK per batch:
#: a batch costs about as much as 1.25 KiB of reading (benchmarks/offsets_load.py: 6.5 us per batch
#: of one small offset commit; with 512 the estimate was half the real cost)
YIELD_WORK = 32 * 1024
BATCH_WORK = 1280


class CleaningAborted(Exception):
    """The log changed under a pass (truncated, segments deleted, closed): its work is dropped."""


@dataclass
class CleanerStats:
    """What one pass did (Kafka's ``CleanerStats``)."""
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    segments_replaced: int = 0
    map_entries: int = 0
    markers_removed: int = 0

TRANSACTIONAL_BIT = 0x10


def segment_batches(segment: LogSegment) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """``(position, header, bytes)`` of each whole batch of a sealed segment, read in large chunks."""
    handle = segment.log
    size = handle.size()
    pos = 0
    while pos < size:
        chunk = handle.read(pos, min(READ_CHUNK, size - pos))
        view = memoryview(chunk)
        used = 0
        for rel, header in iter_batches(chunk):
            yield pos + rel, header, view[rel:rel + header.size]
            used = rel + header.size
        if used == 0:
            if len(chunk) >= HEADER_SIZE:
                need = read_header(chunk, 0).size
                if need > len(chunk) and pos + need <= size:     # one batch larger than a chunk
                    chunk = handle.read(pos, need)
                    header = read_header(chunk, 0)
                    yield pos, header, memoryview(chunk)
                    pos += need
                    continue
            return                                                # a torn tail: recovery's business
        pos += used


RawRecord = tuple[int, int, int, bytes | None, bool]     # start, end, offset, key, value is null


def split_records(batch: bytes | bytearray | memoryview, header: BatchHeader
                  ) -> tuple[bytes | bytearray | memoryview, list[RawRecord]]:
    """The batch's records section (decompressed) and, per record, ``(start, end, offset,
    key, value is null)`` within it. Raises UndecodableRecordsError when it does not decode."""
    try:
        data, p, stop = records_section(batch, 0, header)
        base = header.base_offset
        return data, [(start, end, base + offset_delta, key, value_length < 0)
                      for start, end, _, offset_delta, key, _, value_length
                      in walk_records(data, p, stop, header.records_count)]
    except DECODE_ERRORS as exc:
        raise UndecodableRecordsError(f"records of the batch at offset {header.base_offset} do not decode: {exc}") \
            from None


def rebuilt_batch(batch: bytes | bytearray | memoryview, header: BatchHeader,
                  records: list[bytes | bytearray | memoryview]) -> bytearray:
    """The batch with only ``records`` (raw, in order), in its own codec. No record at all: an
    empty batch without codec, as Kafka's cleaner writes one."""
    return rebuild(batch, header, b"".join(records), header.compression if records else 0, len(records))


def group_segments(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments merged while their bytes fit ``max_bytes`` and their offsets 2^31
    (Kafka's ``groupSegmentsBySize``)."""
    groups: list[list[LogSegment]] = []
    for segment in segments:
        if groups:
            group = groups[-1]
            if (sum(s.size for s in group) + segment.size <= max_bytes
                    and segment.next_offset - 1 - group[0].base_offset <= INT32_MAX):
                group.append(segment)
                continue
        groups.append([segment])
    return groups


class Cleaning:
    """One pass over ``log`` below ``end``; :meth:`run` is a generator that yields the work done
    since its last yield (bytes read plus ``BATCH_WORK`` per batch, about ``YIELD_WORK`` each time),
    so the caller can spread it over many event-loop turns."""

    def __init__(self, log: "Log", first_dirty: int, end: int, now_ms: int, map_capacity: int) -> None:
        self.log = log
        self.first_dirty = first_dirty
        self.end = end
        self.now_ms = now_ms
        self.map_capacity = map_capacity
        self.stats = CleanerStats()
        self.offset_map: dict[bytes, int] = {}
        self.tombstone_due_ms: int | None = None   # when a tombstone kept by this pass may go
        self._truncations = log.truncations
        self._cleaned_files: list[str] = []
        self._epoch_starts = {start for _, start in log.leader_epoch_cache.entries}
        #: each transactional batch's outcome by base offset: True committed, False aborted
        #: (absent: its marker is not below ``end``, so it is kept whole)
        self._outcomes: dict[int, bool] = {}
        #: markers with no batch of their transaction before them (removable once old enough)
        self._bare_markers: set[int] = set()
        self._removed_markers: set[int] = set()

    # -- the pass ----------------------------------------------------------------------------

    def run(self) -> Iterator[int]:
        yield from self._transaction_outcomes()
        yield from self._build_offset_map()
        cleanable = [s for s in self.log.segments[:-1] if s.next_offset <= self.end]
        if not cleanable:
            return
        last_of_producer: dict[int, int] = {}
        yield from self._last_batch_of_producers(cleanable, last_of_producer)
        for group in group_segments(cleanable, self.log.config.segment_bytes):
            yield from self._clean_group(group, last_of_producer)

    def abort(self) -> None:
        """Drop the work of a pass that did not finish (its ``.cleaned`` files)."""
        for path in self._cleaned_files:
            if self.log.disk.exists(path):
                self.log.disk.remove(path)
        self._cleaned_files.clear()

    def check(self, segments: list[LogSegment]) -> None:
        """Raise CleaningAborted when the log is no longer the one this pass read."""
        log = self.log
        if log.closed or log.truncations != self._truncations:
            raise CleaningAborted(f"{log.topic}-{log.partition} was truncated or closed")
        live = {id(s) for s in log.segments}
        if any(id(s) not in live for s in segments):
            raise CleaningAborted(f"segments of {log.topic}-{log.partition} were deleted")

    # -- 0. transactions ---------------------------------------------------------------------

    def _transaction_outcomes(self) -> Iterator[int]:
        """Learn from the headers below ``end`` (and each marker's record) how every transactional
        batch there ended."""
        segments = [s for s in self.log.segments[:-1] if s.base_offset < self.end]
        open_batches: dict[int, list[int]] = {}         # producer id -> its transaction's batches so far
        for segment in segments:
            for n, header in enumerate(segment.iter_headers(), 1):
                if n % 256 == 0:
                    yield YIELD_WORK
                    self.check(segments)
                if header.base_offset >= self.end:
                    break
                if header.producer_id < 0 or not header.attributes & TRANSACTIONAL_BIT:
                    continue
                if header.attributes & CONTROL_BIT:
                    kind = self._marker(header)
                    batches = open_batches.pop(header.producer_id, ())
                    for base in batches:
                        if kind is not None:
                            self._outcomes[base] = kind == COMMIT_MARKER
                    if kind is not None and not batches:
                        self._bare_markers.add(header.base_offset)
                elif header.records_count:      # an emptied batch (kept for its offsets) is no data
                    open_batches.setdefault(header.producer_id, []).append(header.base_offset)

    def _marker(self, header: BatchHeader) -> int | None:
        marker = self.log.marker_of(header)
        return marker[0] if marker is not None else None

    def _status(self, header: BatchHeader) -> bool | None:
        """For a data batch: True to compact it as usual, False for an aborted transaction's,
        None to keep it whole (a transaction not decided below ``end``, or a marker)."""
        if header.attributes & CONTROL_BIT:
            return None
        if not header.attributes & TRANSACTIONAL_BIT:
            return True
        return self._outcomes.get(header.base_offset)

    # -- 1. the offset map -------------------------------------------------------------------

    def _build_offset_map(self) -> Iterator[int]:
        offset_map = self.offset_map
        dirty = [s for s in self.log.segments[:-1]
                 if s.next_offset > self.first_dirty and s.next_offset <= self.end]
        for n, segment in enumerate(dirty):
            if n and len(offset_map) + (segment.next_offset - segment.base_offset) > self.map_capacity:
                self.end = segment.base_offset              # the rest waits for the next pass
                break
            work = 0
            for _, header, batch in segment_batches(segment):
                self.stats.bytes_read += header.size
                work += header.size + BATCH_WORK
                if work >= YIELD_WORK:
                    yield work
                    self.check([segment])
                    work = 0
                if self._status(header) is not True or \
                        header.base_offset + header.last_offset_delta < self.first_dirty:
                    continue
                try:
                    _, records = split_records(batch, header)
                except UndecodableRecordsError:
                    continue                                 # kept whole in the rewrite
                for _, _, offset, key, _ in records:
                    if key is not None and offset >= self.first_dirty:
                        offset_map[key] = offset
            yield work
            self.check([segment])
        self.stats.map_entries = len(offset_map)

    def _last_batch_of_producers(self, segments: list[LogSegment], last: dict[int, int]) -> Iterator[int]:
        """Fill ``last`` with each producer id's last batch (base offset) in ``segments``, from
        the batch headers."""
        for segment in segments:
            for n, header in enumerate(segment.iter_headers(), 1):
                if header.producer_id >= 0:
                    last[header.producer_id] = header.base_offset
                if n % 256 == 0:
                    yield YIELD_WORK
                    self.check(segments)

    # -- 2. rewriting a group ----------------------------------------------------------------

    def _clean_group(self, group: list[LogSegment], last_of_producer: dict[int, int]) -> Iterator[int]:
        log = self.log
        disk = log.disk
        base = group[0].base_offset
        cleaned_path = posixpath.join(log.dir, file_prefix(base) + LOG_SUFFIX + CLEANED_SUFFIX)
        out = disk.open(cleaned_path)
        if out.size():
            out.truncate(0)
        self._cleaned_files.append(cleaned_path)
        changed = False
        pending = bytearray()
        work = 0
        retention = log.config.delete_retention_ms
        last_batch = self._last_batch(group)
        for segment in group:
            # tombstones go once their segment was cleaned before and is older than delete.retention.ms
            drop_tombstones = (segment.next_offset <= self.first_dirty
                               and segment.max_timestamp + retention < self.now_ms)
            due = segment.max_timestamp + retention
            for position, header, batch in segment_batches(segment):
                self.stats.bytes_read += header.size
                work += header.size + BATCH_WORK
                keep_empty = ((segment, position) == last_batch
                              or last_of_producer.get(header.producer_id) == header.base_offset
                              or header.base_offset in self._epoch_starts)
                kept, removed = self._filter(batch, header, drop_tombstones, keep_empty, due)
                if removed or kept is not batch:
                    changed = True
                if kept is not None:
                    pending += kept
                if len(pending) >= READ_CHUNK:
                    out.append(pending)
                    self.stats.bytes_written += len(pending)
                    pending = bytearray()
                if work >= YIELD_WORK:
                    yield work
                    self.check(group)
                    work = 0
        if pending:
            out.append(pending)
            self.stats.bytes_written += len(pending)
        yield work
        self.check(group)
        if not changed:
            out.close()
            disk.remove(cleaned_path)
            self._cleaned_files.remove(cleaned_path)
            return
        out.flush()
        out.close()
        log.replace_segments(group, cleaned_path, self.now_ms, removed_markers=self._removed_markers)
        self._cleaned_files.remove(cleaned_path)
        self.stats.segments_replaced += len(group)

    @staticmethod
    def _last_batch(group: list[LogSegment]) -> tuple[LogSegment, int] | None:
        """The segment and position of the group's last batch (found through the offset index)."""
        for segment in reversed(group):
            if segment.size:
                found = segment.translate_offset(segment.next_offset - 1)
                if found is not None:
                    return segment, found[0]
        return None

    def _filter(self, batch: memoryview, header: BatchHeader, drop_tombstones: bool,
                keep_empty: bool, tombstone_due_ms: int) -> tuple[memoryview | bytearray | None, int]:
        """The batch as it is kept (the same view when whole, None when it vanishes) and how many
        records it lost."""
        status = self._status(header)
        if header.attributes & CONTROL_BIT:
            if header.base_offset in self._bare_markers and not keep_empty:
                if drop_tombstones:
                    self.stats.markers_removed += 1
                    self._removed_markers.add(header.base_offset)
                    return None, 0
                if self.tombstone_due_ms is None or tombstone_due_ms < self.tombstone_due_ms:
                    self.tombstone_due_ms = tombstone_due_ms        # a later pass removes it
            return batch, 0
        if status is None or header.records_count == 0:
            return batch, 0
        if status is False:                                  # an aborted transaction's records go
            self.stats.records_read += header.records_count
            self.stats.records_removed += header.records_count
            return (rebuilt_batch(batch, header, []) if keep_empty else None), header.records_count
        try:
            data, records = split_records(batch, header)
        except UndecodableRecordsError:
            return batch, 0                                  # never drop what cannot be read
        self.stats.records_read += len(records)
        offset_map = self.offset_map
        kept = []
        for start, end, offset, key, null_value in records:
            if key is not None:
                if offset_map.get(key, offset) > offset:
                    continue                                 # a newer record of this key exists
                if null_value:
                    if drop_tombstones:
                        self.stats.tombstones_removed += 1
                        continue
                    if self.tombstone_due_ms is None or tombstone_due_ms < self.tombstone_due_ms:
                        self.tombstone_due_ms = tombstone_due_ms
            kept.append(data[start:end])
        removed = len(records) - len(kept)
        self.stats.records_removed += removed
        if not removed:
            return batch, 0
        if not kept and not keep_empty:
            return None, removed
        return rebuilt_batch(batch, header, kept), removed
