"""Sparse offset and time indexes of one log segment (``<base>.index``, ``<base>.timeindex``).

Kafka's on-disk layouts, big-endian, with offsets relative to the segment's base offset:

* OffsetIndex: 8-byte entries ``int32 relative offset, int32 position``. An entry maps a batch's
  base offset to the file position where the batch starts; one is added each time more than
  ``index.interval.bytes`` of log were appended since the last one.
* TimeIndex: 12-byte entries ``int64 timestamp, int32 relative offset``: the largest timestamp
  seen so far and the (last) offset of the batch that carried it. Only increasing timestamps are
  added, like Kafka's ``TimeIndex.maybeAppend``.

Entries live in memory (``array`` + ``bisect``); new entries are buffered and appended to the
file through the ``Disk`` in one write per segment append (``write_pending``). Files hold exactly
``entries * entry size`` bytes: no preallocation and no mmap. ``load`` reads a file back with a
sanity check; when it fails the segment rebuilds the index from the log.
"""

from __future__ import annotations

import operator
import struct
from array import array
from bisect import bisect_left, bisect_right
from itertools import islice
from typing import Sequence

from strandline.log.disk import Disk, FileHandle

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1
_NATIVE_LITTLE_ENDIAN = struct.pack("=i", 1) == struct.pack("<i", 1)


class IndexOffsetOverflow(ValueError):
    """A relative offset or position does not fit in an int32 (the segment must roll)."""


def _strictly_increasing(values: Sequence[int]) -> bool:
    return all(map(operator.lt, values, islice(values, 1, None)))


def _non_decreasing(values: Sequence[int]) -> bool:
    return all(map(operator.le, values, islice(values, 1, None)))


class _IndexFile:
    """What both indexes share: a lazily opened handle and a pending write buffer on the file side;
    in memory, two parallel columns of entries, one of them the offsets relative to the base
    offset (``_relative``, never decreasing), by which the index is truncated."""

    entry_size = 0
    #: The attribute names of the two columns, in the order of an entry in the file.
    _columns: tuple[str, str] = ("", "")
    _relative: array[int]

    def __init__(self, disk: Disk, path: str, base_offset: int, max_index_size: int = 10485760) -> None:
        self.disk = disk
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._handle: FileHandle | None = None
        self._pending = bytearray()
        self._dirty = False  # written since the last flush
        self._clear()

    def _clear(self) -> None:
        """Empty both columns."""
        for name in self._columns:
            setattr(self, name, array("q"))

    def __len__(self) -> int:
        return len(self._relative)

    @property
    def is_full(self) -> bool:
        return len(self._relative) >= self.max_entries

    @property
    def entries(self) -> int:
        """How many entries the index holds."""
        return len(self._relative)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= ``offset``."""
        n = bisect_left(self._relative, offset - self.base_offset)
        if n < len(self._relative):
            for name in self._columns:
                del getattr(self, name)[n:]
        self._truncate_file(n)

    def reset(self) -> None:
        self.truncate_to(self.base_offset)

    def _read_entries(self) -> bytes | None:
        """The file's bytes, with both columns emptied; None if it does not hold whole entries."""
        data = self._read()
        self._clear()
        return None if len(data) % self.entry_size else data

    def _file(self) -> FileHandle:
        if self._handle is None:
            self._handle = self.disk.open(self.path)
        return self._handle

    def create_file(self) -> None:
        """Create the (empty) file now, so a segment always has its index files."""
        self._file()

    def write_pending(self) -> None:
        if self._pending:
            self._file().append(self._pending)
            self._pending = bytearray()
            self._dirty = True

    def _truncate_file(self, entries: int) -> None:
        self.write_pending()
        if entries == 0 and self._handle is None and not self.disk.exists(self.path):
            return                  # an index that never had an entry has no file to empty
        handle = self._file()
        if handle.size() != entries * self.entry_size:
            handle.truncate(entries * self.entry_size)
            self._dirty = True

    def _read(self) -> bytes:
        self.write_pending()
        if self._handle is not None:
            return self._handle.read(0, self._handle.size())
        if not self.disk.exists(self.path):
            return b""
        return self.disk.read_file(self.path)

    def flush(self, force: bool = False) -> None:
        self.write_pending()
        if force and self._handle is None and self.disk.exists(self.path):
            self._file()
        if (self._dirty or force) and self._handle is not None:
            self._handle.flush()
        self._dirty = False

    def unflushed(self) -> bool:
        """Whether the file was written since its last flush (pending entries written out first)."""
        self.write_pending()
        return self._dirty and self._handle is not None

    def mark_flushed(self) -> None:
        """An fsync of the file made elsewhere completed (nothing was written since)."""
        self._dirty = False

    def close(self) -> None:
        self.write_pending()
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def delete(self) -> None:
        self._pending = bytearray()
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self.disk.exists(self.path):
            self.disk.remove(self.path)

    def rename(self, path: str) -> None:
        self.close()
        if self.disk.exists(self.path):
            self.disk.rename(self.path, path)
        self.path = path


class OffsetIndex(_IndexFile):
    """Sparse map from offsets to file positions; ``lookup`` gives the greatest entry <= offset."""

    entry_size = 8
    _columns = ("_relative", "_positions")
    _positions: array[int]

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(offset, position)`` of the last entry, or ``(base offset, 0)`` when empty."""
        if not self._relative:
            return self.base_offset, 0
        return self.base_offset + self._relative[-1], self._positions[-1]

    def entry_list(self) -> list[tuple[int, int]]:
        """Every ``(offset, position)`` entry."""
        return [(self.base_offset + r, p) for r, p in zip(self._relative, self._positions)]

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX or not 0 <= position <= _INT32_MAX:
            raise IndexOffsetOverflow(f"offset {offset} / position {position} do not fit index {self.path}")
        if self._relative and (relative <= self._relative[-1] or position <= self._positions[-1]):
            raise ValueError(f"index entry ({offset}, {position}) is not above the last one "
                             f"{self.last_entry} in {self.path}")
        self._relative.append(relative)
        self._positions.append(position)
        self._pending += _OFFSET_ENTRY.pack(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the greatest entry with offset <= ``offset``, else ``(base, 0)``."""
        i = bisect_right(self._relative, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative[i], self._positions[i]

    def load(self, segment_size: int) -> bool:
        """Read the file; False (and the index left empty) if it fails the sanity check."""
        data = self._read_entries()
        if data is None:
            return False
        raw = array("i")
        raw.frombytes(data)
        if _NATIVE_LITTLE_ENDIAN:
            raw.byteswap()
        relative, positions = raw[0::2], raw[1::2]
        if relative and (relative[0] < 0 or positions[0] < 0 or positions[-1] >= max(segment_size, 1)):
            return False
        if not (_strictly_increasing(relative) and _strictly_increasing(positions)):
            return False
        self._relative = array("q", relative)
        self._positions = array("q", positions)
        return True


class TimeIndex(_IndexFile):
    """Sparse map from increasing timestamps to offsets; ``lookup`` gives the greatest entry <= ts."""

    entry_size = 12
    _columns = ("_timestamps", "_relative")
    _timestamps: array[int]

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry, or None when empty."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._relative[-1]

    def entry_list(self) -> list[tuple[int, int]]:
        """Every ``(timestamp, offset)`` entry."""
        return [(t, self.base_offset + r) for t, r in zip(self._timestamps, self._relative)]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Add ``(timestamp, offset)`` if the timestamp is above the last entry's, or (an empty
        index) above NO_TIMESTAMP (-1): records without timestamps (message format v0, or a batch
        v2 sent without) make no entry, as in Kafka's ``TimeIndex.maybeAppend``."""
        if timestamp <= (self._timestamps[-1] if self._timestamps else NO_TIMESTAMP):
            return False
        if not skip_full_check and self.is_full:
            return False
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise IndexOffsetOverflow(f"offset {offset} does not fit time index {self.path}")
        if self._relative and relative < self._relative[-1]:
            raise ValueError(f"time index entry ({timestamp}, {offset}) goes back in offsets in {self.path}")
        self._timestamps.append(timestamp)
        self._relative.append(relative)
        self._pending += _TIME_ENTRY.pack(timestamp, relative)
        return True

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the greatest entry with timestamp <= ``timestamp``, else ``(-1, base)``."""
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._timestamps[i], self.base_offset + self._relative[i]

    def load(self) -> bool:
        """Read the file; False (and the index left empty) if it fails the sanity check."""
        data = self._read_entries()
        if data is None:
            return False
        timestamps = array("q")
        relative = array("q")
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            timestamps.append(ts)
            relative.append(rel)
        if relative and relative[0] < 0:
            return False
        if not (_strictly_increasing(timestamps) and _non_decreasing(relative)):
            return False
        self._timestamps = timestamps
        self._relative = relative
        return True
