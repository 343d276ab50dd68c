"""One log segment: ``<base offset, 20 digits>.log`` with its ``.index``, ``.timeindex`` and
``.txnindex`` (aborted transactions, ``log.txn_index``).

The ``.log`` file is a plain concatenation of record batches (v2), exactly as they travel in
produce and fetch requests. The segment never decodes records: it reads 61-byte batch headers
(``protocol.records``) to find batch boundaries, offsets and timestamps, and checks CRC-32C only
when recovering.

Indexes are loaded lazily (on the first lookup or append) and rebuilt from the log when they
fail their sanity check. A new segment's index files are created with their first entry (after
``index.interval.bytes`` of log), not with the segment as Kafka does: a missing index of a segment
holding less than that is an empty one. ``recover()`` re-reads every batch from the start, checks size, magic
and CRC, rebuilds both indexes and cuts the file at the first bad or torn batch (Kafka's
``LogSegment.recover``).
"""

from __future__ import annotations

import posixpath
import struct
from bisect import bisect_right
from typing import Callable, Iterator, NamedTuple, Sequence

from strandline.log.config import LogConfig
from strandline.log.disk import Disk, FileHandle, FileRegion
from strandline.log.index import OffsetIndex, TimeIndex
from strandline.log.txn_index import TransactionIndex
from strandline.protocol.records import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, crc_ok, iter_records, read_header

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # batchLength of a batch with no records
INT32_MAX = 2**31 - 1
_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
#: The smallest read handed out as a :class:`FileRegion` (``sendfile``) rather than read bytes.
REGION_MIN_BYTES = 32 * 1024

SCAN_CHUNK = 1 << 20        # bytes read at a time when recovering (CRC checks need whole batches)
HEADER_CHUNK = 8192         # bytes read at a time when walking headers


class BatchInfo(NamedTuple):
    """What a segment needs to know about one batch it appends (positions relative to the buffer)."""
    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class CorruptRecordError(ValueError):
    """A batch failed its size, magic or CRC check."""


def segment_index(segments: Sequence["LogSegment"], offset: int) -> int:
    """Where in ``segments`` (oldest first) the segment holding ``offset`` is (the first one for an
    offset below it)."""
    return max(bisect_right(segments, offset, key=lambda s: s.base_offset) - 1, 0)


def file_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


#: ``<base>.rolled``: written (and fsynced) when a roll leaves its segment's fsync for later; it
#: holds where that previous segment ended. Recovery after a power loss compares: a previous
#: segment that ends short of it lost a tail while this one's batches reached the disk
ROLLED_SUFFIX = ".rolled"


def rolled_path(directory: str, base_offset: int) -> str:
    return posixpath.join(directory, file_prefix(base_offset)) + ROLLED_SUFFIX


def segment_paths(directory: str, base_offset: int) -> tuple[str, str, str]:
    prefix = posixpath.join(directory, file_prefix(base_offset))
    return prefix + LOG_SUFFIX, prefix + INDEX_SUFFIX, prefix + TIME_INDEX_SUFFIX


class LogSegment:
    def __init__(self, disk: Disk, directory: str, base_offset: int, config: LogConfig,
                 handle: FileHandle, *, created_ms: int, new: bool, txn_index: bool | None = None) -> None:
        self.disk = disk
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.log_path, index_path, time_index_path = segment_paths(directory, base_offset)
        self.log = handle
        self.offset_index = OffsetIndex(disk, index_path, base_offset, config.segment_index_bytes)
        self.time_index = TimeIndex(disk, time_index_path, base_offset, config.segment_index_bytes)
        self.txn_index = TransactionIndex(disk, directory, base_offset, exists=False if new else txn_index)
        self.created_ms = created_ms
        self.new = new                      # files created since the directory was last fsynced
        self._indexes_loaded = new
        self._next_offset: int | None = base_offset if new else None
        self._max_timestamp: int | None = -1 if new else None
        self._offset_of_max_timestamp = -1
        self._bytes_since_last_index_entry = 0
        self._first_append_ms: int | None = None
        self._dirty = False                 # log bytes written since the last flush
        self.index_rebuilds = 0             # times a bad index was rebuilt from the log
        self.recovered_batches = 0          # batches checked by the last recover()

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def create(cls, disk: Disk, directory: str, base_offset: int, config: LogConfig,
               now_ms: int) -> "LogSegment":
        """A new, empty segment (stale files with the same name are emptied)."""
        log_path, index_path, time_index_path = segment_paths(directory, base_offset)
        for path in (index_path, time_index_path, TransactionIndex(disk, directory, base_offset).path):
            if disk.exists(path):
                disk.remove(path)
        handle = disk.open(log_path)
        if handle.size():
            handle.truncate(0)
        # the index files appear with their first entry: a broker creating thousands of
        # partitions creates one file for each, not three
        return cls(disk, directory, base_offset, config, handle, created_ms=now_ms, new=True)

    @classmethod
    def open(cls, disk: Disk, directory: str, base_offset: int, config: LogConfig,
             now_ms: int = 0, txn_index: bool | None = None) -> "LogSegment":
        """An existing segment; indexes, next offset and max timestamp are loaded when needed
        (``txn_index``: whether its ``.txnindex`` exists, if known)."""
        log_path = segment_paths(directory, base_offset)[0]
        return cls(disk, directory, base_offset, config, disk.open(log_path), created_ms=now_ms, new=False,
                   txn_index=txn_index)

    def _ensure_indexes(self) -> None:
        if self._indexes_loaded:
            return
        self._indexes_loaded = True
        size = self.log.size()
        ok = self.offset_index.load(size)
        ok = self.time_index.load() and ok
        # a segment gets its index files with its first entry: missing ones are empty, unless the
        # segment holds enough log that it should have had an entry
        if size > self.config.index_interval_bytes and not self.disk.exists(self.offset_index.path):
            ok = False
        if not ok:
            self.rebuild_indexes()

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the batch headers (no CRC checks, nothing truncated)."""
        self.index_rebuilds += 1
        self._reindex(self._iter_headers(0, chunk=SCAN_CHUNK))

    def _reindex(self, batches: Iterator[tuple[int, BatchHeader]],
                 on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Reset the indexes and re-add entries for ``batches``; returns where the last one ends."""
        self._indexes_loaded = True
        self.offset_index.reset()
        self.time_index.reset()
        interval = self.config.index_interval_bytes
        since = 0
        max_ts, max_off = -1, -1
        end = 0
        next_offset = self.base_offset
        first_ts = None
        count = 0
        for pos, h in batches:
            last = h.base_offset + h.last_offset_delta
            if h.max_timestamp > max_ts:
                max_ts, max_off = h.max_timestamp, last
            if since > interval:
                self.offset_index.append(h.base_offset, pos)
                self.time_index.maybe_append(max_ts, max_off, skip_full_check=True)
                since = 0
            since += h.size
            end = pos + h.size
            next_offset = last + 1
            if first_ts is None:
                first_ts = h.max_timestamp
            count += 1
            if on_batch is not None:
                on_batch(h)
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self._next_offset = next_offset
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_off
        self._bytes_since_last_index_entry = since
        self.recovered_batches = count
        return end

    # -- walking batches ---------------------------------------------------------------------

    def _iter_headers(self, position: int, *, check_crc: bool = False,
                      chunk: int = HEADER_CHUNK) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each valid batch from ``position`` on; stops at the first bad one.

        A batch is valid when its length is possible, it lies wholly inside the file, its magic
        is 2, its offsets go forward and fit the segment (and its CRC-32C matches, if asked).
        """
        size = self.log.size()
        read = self.log.read
        pos = position
        buf = b""
        buf_start = pos
        buf_len = 0
        expected = self.base_offset
        highest = self.base_offset + INT32_MAX
        while pos + HEADER_SIZE <= size:
            rel = pos - buf_start
            if buf_len - rel < HEADER_SIZE:
                buf = read(pos, max(HEADER_SIZE, min(chunk, size - pos)))
                buf_start, rel, buf_len = pos, 0, len(buf)
                if buf_len < HEADER_SIZE:
                    return
            h = read_header(buf, rel)
            # base offset, batch length, magic, last offset delta: by index, the walk's hot path
            base, length, magic, delta = h[0], h[1], h[3], h[6]
            batch_size = LOG_OVERHEAD + length
            if (length < MIN_BATCH_LENGTH or pos + batch_size > size or magic != 2 or base < expected
                    or delta < 0 or base + delta > highest):
                return
            if check_crc:
                if buf_len - rel < batch_size:
                    buf = read(pos, max(batch_size, min(chunk, size - pos)))
                    buf_start, rel, buf_len = pos, 0, len(buf)
                    if buf_len < batch_size:
                        return
                if not crc_ok(buf, rel, h):
                    return
            yield pos, h
            expected = base + delta + 1
            pos += batch_size

    def iter_headers(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the batches from the one containing ``from_offset`` (or the first) to the end."""
        position = 0
        if from_offset is not None:
            self._ensure_indexes()
            position = self.offset_index.lookup(from_offset)[1]
        walk = self._iter_headers(position)
        if from_offset is not None:
            for _, h in walk:
                if h.base_offset + h.last_offset_delta >= from_offset:
                    yield h
                    break
        for _, h in walk:
            yield h

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        self._ensure_indexes()
        position = self.offset_index.lookup(offset)[1]
        for pos, h in self._iter_headers(position):
            if h.base_offset + h.last_offset_delta >= offset:
                return pos, h
        return None

    # -- state -------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size()

    @property
    def index(self) -> OffsetIndex:
        """The offset index, loaded (alias of ``offset_index``)."""
        self._ensure_indexes()
        return self.offset_index

    @property
    def file(self) -> FileHandle:
        """The ``.log`` file handle (alias of ``log``)."""
        return self.log

    @property
    def next_offset(self) -> int:
        """One past the last offset in this segment (the base offset when empty)."""
        if self._next_offset is None:
            self.load_tail()
        return self._next_offset  # type: ignore[return-value]  # load_tail() sets it

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp in the segment (-1 when empty)."""
        if self._max_timestamp is None:
            self._load_max_timestamp()
        return self._max_timestamp  # type: ignore[return-value]  # _load_max_timestamp() sets it

    @property
    def offset_of_max_timestamp(self) -> int:
        if self._max_timestamp is None:
            self._load_max_timestamp()
        return self._offset_of_max_timestamp

    @property
    def rolling_base_ms(self) -> int | None:
        """When the segment started, for time-based rolling; None while it is empty.

        The time of the first append in this process, else (a segment found on disk) the first
        batch's max timestamp like Kafka's ``rollingBasedTimestamp``, else the time it was opened.
        """
        if self.log.size() == 0:
            return None
        if self._first_append_ms is None:
            first = next(self._iter_headers(0), None)
            ts = first[1].max_timestamp if first is not None else -1
            self._first_append_ms = ts if ts >= 0 else self.created_ms
        return self._first_append_ms

    @property
    def indexes_full(self) -> bool:
        self._ensure_indexes()
        return self.offset_index.is_full or self.time_index.is_full

    @property
    def dirty(self) -> bool:
        return self._dirty

    def load_tail(self) -> int:
        """Find the next offset (and the tail's max timestamp) from the last index entry on.

        Used when a segment is opened without recovery. If the tail is not a clean run of valid
        batches to the end of the file, falls back to ``recover()``; returns the bytes it cut.
        """
        self._ensure_indexes()
        _, position = self.offset_index.last_entry
        last_time = self.time_index.last_entry
        max_ts, max_off = last_time if last_time is not None else (-1, -1)
        end = position
        next_offset = self.base_offset
        for pos, h in self._iter_headers(position):
            end = pos + h.size
            next_offset = h.base_offset + h.last_offset_delta + 1
            if h.max_timestamp > max_ts:
                max_ts, max_off = h.max_timestamp, next_offset - 1
        if end != self.log.size() or (position > 0 and end == position):
            return self.recover()
        self._next_offset = next_offset
        if self._max_timestamp is None or max_ts > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_off
        self._bytes_since_last_index_entry = end - position
        return 0

    def _load_max_timestamp(self) -> None:
        """From the time index's last entry (written when the segment became inactive or closed)."""
        self._ensure_indexes()
        last = self.time_index.last_entry
        if last is not None:
            self._max_timestamp, self._offset_of_max_timestamp = last
            return
        max_ts, max_off = -1, -1
        for _, h in self._iter_headers(0):
            if h.max_timestamp > max_ts:
                max_ts, max_off = h.max_timestamp, h.base_offset + h.last_offset_delta
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_off

    # -- writes ------------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, batches: list[BatchInfo], now_ms: int | None = None) -> int:
        """Write whole batches with one append; add index entries. Returns the file position."""
        self._ensure_indexes()
        if self._next_offset is None:
            self.load_tail()
        max_ts, max_off = self.max_timestamp, self._offset_of_max_timestamp
        start = self.log.append(records)
        if start == 0:
            self._first_append_ms = now_ms if now_ms is not None else (
                batches[0].max_timestamp if batches and batches[0].max_timestamp >= 0 else self.created_ms)
        interval = self.config.index_interval_bytes
        since = self._bytes_since_last_index_entry
        offset_index, time_index = self.offset_index, self.time_index
        for position, size, base_offset, last_offset, timestamp in batches:
            if timestamp > max_ts:
                max_ts, max_off = timestamp, last_offset
            if since > interval:
                offset_index.append(base_offset, start + position)
                time_index.maybe_append(max_ts, max_off)
                since = 0
            since += size
        offset_index.write_pending()
        time_index.write_pending()
        self._bytes_since_last_index_entry = since
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_off
        if batches:
            self._next_offset = batches[-1].last_offset + 1
        self._dirty = True
        return start

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Re-check every batch (size, magic, CRC-32C), rebuild the indexes, cut a bad tail.

        Returns the number of bytes truncated (0 when the whole file was valid).
        ``on_batch`` sees each valid header in order (the log re-assigns leader epochs with it).
        """
        end = self._reindex(self._iter_headers(0, check_crc=True, chunk=SCAN_CHUNK), on_batch)
        truncated = self.log.size() - end
        if truncated:
            self.log.truncate(end)
            self._dirty = True
        if end == 0:
            self._first_append_ms = None
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove the batch containing ``offset`` and everything after it; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        removed = self.log.size() - position
        self.log.truncate(position)
        self.offset_index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self._dirty = True
        if position == 0:
            self._next_offset = self.base_offset
            self._max_timestamp, self._offset_of_max_timestamp = -1, -1
            self._bytes_since_last_index_entry = 0
            self._first_append_ms = None
            return removed
        self._next_offset = header.base_offset
        # The max timestamp: the surviving time index entries cover everything up to the last
        # offset index entry; scan the (short) rest.
        last_time = self.time_index.last_entry
        max_ts, max_off = last_time if last_time is not None else (-1, -1)
        _, index_position = self.offset_index.last_entry
        for _pos, h in self._iter_headers(index_position):
            if h.max_timestamp > max_ts:
                max_ts, max_off = h.max_timestamp, h.base_offset + h.last_offset_delta
            self._next_offset = h.base_offset + h.last_offset_delta + 1
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_off
        self._bytes_since_last_index_entry = position - index_position
        return removed

    # -- reads -------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True, max_position: int | None = None,
             regions: bool = False) -> tuple[bytes | FileRegion, bool]:
        """Whole batches from the one containing ``start_offset``.

        At most ``max_bytes`` (but the first batch whole when ``min_one_batch``), only batches
        with base offset < ``max_offset`` and ending at or before ``max_position``. Returns
        ``(data, exhausted)``: ``exhausted`` is True when the read stopped at the end of this
        segment, so a caller may continue in the next one. With ``regions``, a read of at least
        ``REGION_MIN_BYTES`` to the end of the segment (whole batches by construction) is a
        :class:`FileRegion` (with a descriptor of its own) of a file that has descriptors, instead
        of bytes.
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return b"", True
        position, header = found
        size = self.log.size()
        end = size if max_position is None else min(size, max_position)
        if max_offset is not None and header.base_offset >= max_offset:
            return b"", False
        first = header.size
        if position + first > end:
            return b"", end >= size
        if first > max_bytes:
            if not min_one_batch:
                return b"", False
            want = first
        else:
            want = min(max_bytes, end - position)
        to_end = position + want == end == size and (max_offset is None or self.next_offset <= max_offset)
        if to_end and regions and want >= REGION_MIN_BYTES:
            fd = self.log.duplicate()
            if fd is not None:
                return FileRegion(self.log, position, want, fd), True
        data = self.log.read(position, want)
        if to_end:
            return data, True  # everything to the end of the segment: whole batches by construction
        cut = 0
        n = len(data)
        stopped = False
        unpack = _PREFIX.unpack_from
        while cut + LOG_OVERHEAD <= n:
            base, length = unpack(data, cut)
            if max_offset is not None and base >= max_offset:
                stopped = True
                break
            if cut + LOG_OVERHEAD + length > n:
                break
            cut += LOG_OVERHEAD + length
        exhausted = not stopped and position + cut >= size
        return (data if cut == n else data[:cut]), exhausted

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record from ``starting_offset`` on whose timestamp is
        >= ``timestamp`` (Kafka's ``LogSegment.findOffsetByTimestamp``: the time index points at a
        batch, the records of the first batch reaching the timestamp are decoded)."""
        self._ensure_indexes()
        _, offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(offset, starting_offset))[1]
        for pos, h in self._iter_headers(position):
            if h.max_timestamp >= timestamp and h.base_offset + h.last_offset_delta >= starting_offset:
                for record in iter_records(self.log.read(pos, h.size), 0, h):
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return record.offset, record.timestamp
        return None

    def offset_of_timestamp(self, offset: int, timestamp: int) -> int:
        """The offset of the first record holding ``timestamp`` in the batch containing ``offset``."""
        found = self.translate_offset(offset)
        if found is not None:
            position, h = found
            for record in iter_records(self.log.read(position, h.size), 0, h):
                if record.timestamp == timestamp:
                    return record.offset
        return offset

    # -- lifecycle ---------------------------------------------------------------------------

    def _append_final_time_entry(self) -> bool:
        if not self._indexes_loaded or self._max_timestamp is None or self._max_timestamp < 0:
            return False
        appended = self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp,
                                                skip_full_check=True)
        self.time_index.write_pending()
        return appended

    def flush(self, force: bool = False) -> None:
        """fsync the log (if written since the last flush, or ``force``), then its indexes."""
        if self._dirty or force:
            self.log.flush()
            self._dirty = False
        self.offset_index.flush(force)
        self.time_index.flush(force)
        self.txn_index.flush()

    def seal(self) -> list[str]:
        """The log rolled past this segment: record its max timestamp and write out the pending
        index entries; returns the paths of the files an fsync must make durable (the log's
        asynchronous roll flush, :meth:`sealed_flushed` once done)."""
        self._append_final_time_entry()
        self.log.trim()                 # no more appends: the blocks reserved beyond its end go back
        paths = [self.log_path] if self._dirty else []
        return paths + [index.path for index in (self.offset_index, self.time_index, self.txn_index)
                        if index.unflushed()]

    def sealed_flushed(self) -> None:
        """The fsync of what :meth:`seal` returned completed: the segment is clean; its index
        handles are released (a read opens them again)."""
        self._dirty = False
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.mark_flushed()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def on_become_inactive(self) -> None:
        """The log rolled past this segment: record its max timestamp, flush, free index handles."""
        self._append_final_time_entry()
        self.log.trim()
        self.flush()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def close(self) -> None:
        if self._append_final_time_entry():
            self.time_index.flush()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.log.trim()
        self.log.close()

    def delete(self) -> None:
        self.log.close()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        if self.disk.exists(self.log_path):
            self.disk.remove(self.log_path)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.log.size()})"
