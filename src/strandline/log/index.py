"""Sparse offset and time indexes of a segment, in Kafka's file formats.

``<base>.index``: 8-byte entries (int32 offset relative to the segment's base, int32 file
position). ``<base>.timeindex``: 12-byte entries (int64 timestamp, int32 relative offset), with
strictly increasing timestamps. Entries are kept in memory for lookups and appended to the files.
"""

from __future__ import annotations

import bisect
import struct

from strandline.log.disk import Disk

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class OffsetIndex:
    ENTRY = _OFFSET_ENTRY.size

    def __init__(self, disk: Disk, path: str, base_offset: int) -> None:
        self.disk = disk
        self.path = path
        self.base_offset = base_offset
        self.offsets: list[int] = []
        self.positions: list[int] = []
        self.file = disk.open(path)

    def load(self, segment_size: int) -> bool:
        """Read the entries back; False (and empty) when the file is not a sane index."""
        size = self.file.size()
        data = self.file.read(0, size) if size else b""
        if size % self.ENTRY:
            self.reset()
            return False
        offsets, positions = [], []
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            offset = self.base_offset + rel
            if (offsets and (offset <= offsets[-1] or pos <= positions[-1])) or pos >= segment_size or rel < 0:
                self.reset()
                return False
            offsets.append(offset)
            positions.append(pos)
        self.offsets, self.positions = offsets, positions
        return True

    def append(self, offset: int, position: int) -> None:
        if self.offsets and offset <= self.offsets[-1]:
            return
        self.file.append(_OFFSET_ENTRY.pack(offset - self.base_offset, position))
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The greatest indexed (offset, position) at or below ``offset``, else (base, 0)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.offsets[i], self.positions[i]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        i = bisect.bisect_left(self.offsets, offset)
        if i < len(self.offsets):
            del self.offsets[i:], self.positions[i:]
            self.file.truncate(i * self.ENTRY)

    def truncate_to_position(self, position: int) -> None:
        i = bisect.bisect_left(self.positions, position)
        if i < len(self.positions):
            del self.offsets[i:], self.positions[i:]
            self.file.truncate(i * self.ENTRY)

    def reset(self) -> None:
        self.offsets, self.positions = [], []
        self.file.truncate(0)

    @property
    def entries(self) -> int:
        return len(self.offsets)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TimeIndex:
    ENTRY = _TIME_ENTRY.size

    def __init__(self, disk: Disk, path: str, base_offset: int) -> None:
        self.disk = disk
        self.path = path
        self.base_offset = base_offset
        self.timestamps: list[int] = []
        self.offsets: list[int] = []
        self.file = disk.open(path)

    def load(self) -> bool:
        size = self.file.size()
        if size % self.ENTRY:
            self.reset()
            return False
        data = self.file.read(0, size) if size else b""
        timestamps, offsets = [], []
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            if timestamps and (ts <= timestamps[-1] or self.base_offset + rel < offsets[-1]):
                self.reset()
                return False
            timestamps.append(ts)
            offsets.append(self.base_offset + rel)
        self.timestamps, self.offsets = timestamps, offsets
        return True

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.file.append(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))
        self.timestamps.append(timestamp)
        self.offsets.append(offset)

    def lookup(self, timestamp: int) -> int:
        """An offset at or before the first record with a timestamp >= ``timestamp``."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.offsets[i]

    def truncate_to(self, offset: int) -> None:
        keep = 0
        while keep < len(self.offsets) and self.offsets[keep] < offset:
            keep += 1
        if keep < len(self.offsets):
            del self.timestamps[keep:], self.offsets[keep:]
            self.file.truncate(keep * self.ENTRY)

    def reset(self) -> None:
        self.timestamps, self.offsets = [], []
        self.file.truncate(0)

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()
