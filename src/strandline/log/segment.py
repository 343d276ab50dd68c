"""One log segment: ``<20-digit base offset>.log`` with its ``.index`` and ``.timeindex``."""

from __future__ import annotations

import os.path
import struct

from strandline.log.disk import Disk
from strandline.log.index import OffsetIndex, TimeIndex
from strandline.protocol.records import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, crc_ok, read_header

_PREFIX = struct.Struct(">qi")
SCAN_CHUNK = 8 << 20


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    def __init__(self, disk: Disk, directory: str, base_offset: int, index_interval_bytes: int) -> None:
        self.disk = disk
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = os.path.join(directory, file_name(base_offset, ".log"))
        self.file = disk.open(self.log_path)
        self.index = OffsetIndex(disk, os.path.join(directory, file_name(base_offset, ".index")), base_offset)
        self.time_index = TimeIndex(disk, os.path.join(directory, file_name(base_offset, ".timeindex")),
                                    base_offset)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self.created_ms: int | None = None
        self.bytes_since_last_index_entry = 0
        self.unflushed = False

    @property
    def size(self) -> int:
        return self.file.size()

    # -- loading and recovery -----------------------------------------------------------------

    def load(self) -> bool:
        """Load without a full scan (after a clean shutdown); False if the indexes need rebuilding."""
        size = self.size
        ok = self.index.load(size) and self.time_index.load()
        if not ok:
            return False
        _, pos = self.index.lookup(1 << 62)
        max_ts = self.time_index.last_timestamp
        max_ts_offset = self.time_index.offsets[-1] if self.time_index.offsets else -1
        for _, header in self._headers_from(pos):
            self.next_offset = header.next_offset
            if header.max_timestamp > max_ts:
                max_ts, max_ts_offset = header.max_timestamp, header.last_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        if size:
            first = read_header(self.file.read(0, HEADER_SIZE), 0)
            self.first_batch_timestamp = first.max_timestamp
        return True

    def _headers_from(self, pos: int):
        size = self.size
        while pos + HEADER_SIZE <= size:
            header = read_header(self.file.read(pos, HEADER_SIZE), 0)
            if pos + header.size > size or header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return
            yield pos, header
            pos += header.size

    def recover(self, max_message_bytes: int) -> tuple[int, int, list[BatchHeader]]:
        """Re-validate every batch (size, magic, CRC), rebuild the indexes, truncate a bad tail.

        Returns (batches scanned, bytes truncated, headers of the valid batches).
        """
        self.index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index_entry = 0
        self.first_batch_timestamp = None
        size = self.size
        pos = 0
        valid_end = 0
        headers: list[BatchHeader] = []
        buf = b""
        buf_start = 0
        while pos < size:
            # make sure buf covers at least the header at pos
            if pos + HEADER_SIZE > buf_start + len(buf):
                buf = self.file.read(pos, max(SCAN_CHUNK, HEADER_SIZE))
                buf_start = pos
            rel = pos - buf_start
            if len(buf) - rel < HEADER_SIZE:
                break
            header = read_header(buf, rel)
            batch_size = header.size
            if (header.magic != 2 or header.batch_length < HEADER_SIZE - LOG_OVERHEAD
                    or header.base_offset < self.next_offset or pos + batch_size > size
                    or batch_size > max(max_message_bytes, 1 << 20) * 16):
                break
            if rel + batch_size > len(buf):
                buf = self.file.read(pos, max(SCAN_CHUNK, batch_size))
                buf_start = pos
                rel = 0
                if len(buf) < batch_size:
                    break
            if not crc_ok(buf, rel, header):
                break
            self._track(header, pos, batch_size)
            headers.append(header)
            pos += batch_size
            valid_end = pos
        truncated = size - valid_end
        if truncated:
            self.file.truncate(valid_end)
        return len(headers), truncated, headers

    # -- appends and reads ----------------------------------------------------------------------

    def _track(self, header: BatchHeader, position: int, size: int) -> None:
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.index.append(header.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size
        self.next_offset = header.next_offset

    def append(self, records, headers: list[BatchHeader], now_ms: int) -> int:
        """Write whole batches (one file append) and index them; returns the start position."""
        position = self.file.append(records)
        if self.created_ms is None:
            self.created_ms = now_ms
        pos = position
        for header in headers:
            self._track(header, pos, header.size)
            pos += header.size
        self.unflushed = True
        return position

    def translate_offset(self, offset: int) -> int | None:
        """File position of the batch that contains ``offset`` (or the first one after it)."""
        _, pos = self.index.lookup(offset)
        for p, header in self._headers_from(pos):
            if header.next_offset > offset:
                return p
        return None

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None,
             min_one_batch: bool) -> tuple[bytes, bool]:
        """Whole batches from the one containing ``start_offset``, bounded by bytes and offset.

        Returns the bytes and whether they reach the end of this segment.
        """
        pos = self.translate_offset(start_offset)
        size = self.size
        if pos is None:
            return b"", True
        available = size - pos
        want = min(available, max(max_bytes, 0))
        if min_one_batch:
            first = _PREFIX.unpack(self.file.read(pos, LOG_OVERHEAD))[1] + LOG_OVERHEAD
            want = max(want, min(first, available))
        if want <= 0:
            return b"", False
        data = self.file.read(pos, want)
        end = 0
        length = len(data)
        while end + LOG_OVERHEAD <= length:
            base, batch_length = _PREFIX.unpack_from(data, end)
            if max_offset is not None and base >= max_offset:
                break
            nxt = end + LOG_OVERHEAD + batch_length
            if nxt > length:
                break
            end = nxt
        reached_end = pos + end == size
        if end == length:
            return data, reached_end
        return data[:end], reached_end

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch whose max timestamp >= ``timestamp``."""
        if self.max_timestamp < timestamp:
            return None
        start = self.index.lookup(self.time_index.lookup(timestamp))[1]
        for _, header in self._headers_from(start):
            if header.max_timestamp >= timestamp:
                return header.base_offset, header.max_timestamp
        return None

    def truncate_to(self, offset: int) -> int:
        """Drop batches at and above ``offset``; returns bytes removed."""
        pos = self.translate_offset(offset)
        if pos is None:
            return 0
        # keep a batch that straddles `offset` only if it starts below it: truncate at batch starts
        header = read_header(self.file.read(pos, HEADER_SIZE), 0)
        if header.base_offset < offset:
            pos += header.size
        removed = self.size - pos
        self.index.truncate_to_position(pos)
        self.file.truncate(pos)
        self.time_index.truncate_to(offset)
        # recompute next offset and timestamps of what is left
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        _, start = self.index.lookup(1 << 62)
        if self.time_index.timestamps:
            self.max_timestamp = self.time_index.timestamps[-1]
            self.offset_of_max_timestamp = self.time_index.offsets[-1]
        for _, h in self._headers_from(start):
            self.next_offset = h.next_offset
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
        if pos == 0:
            self.first_batch_timestamp = None
        self.bytes_since_last_index_entry = 0
        return removed

    def flush(self) -> None:
        if self.unflushed:
            self.file.flush()
            self.index.flush()
            self.time_index.flush()
            self.unflushed = False

    def close(self) -> None:
        self.file.close()
        self.index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index.path, self.time_index.path):
            if self.disk.exists(path):
                self.disk.remove(path)
