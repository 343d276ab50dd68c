"""A log's producer snapshot files, ``<offset>.snapshot`` (Kafka's ProducerStateManager files).

Each holds the producer state as of its offset (every batch below it applied). The log writes one
when it rolls a segment and when it closes, loads the latest good one on open and replays only the
batches after it; a torn or corrupt one is deleted and an earlier one (or the log's start) used.
"""

from __future__ import annotations

import posixpath
from typing import Callable

from strandline.log.disk import Disk
from strandline.log.producer_state import SNAPSHOT_SUFFIX, CorruptSnapshotError, ProducerStateManager
from strandline.log.segment import file_prefix


class ProducerSnapshots:
    """The snapshot files of one log directory, by offset (ascending)."""

    def __init__(self, disk: Disk, directory: str, offsets: list[int] | None = None) -> None:
        self.disk = disk
        self.dir = directory
        self.offsets: list[int] = sorted(offsets or [])

    def path(self, offset: int) -> str:
        return posixpath.join(self.dir, file_prefix(offset) + SNAPSHOT_SUFFIX)

    def take(self, offset: int, content: bytes, sync: bool = False) -> str:
        """Write ``content`` as the snapshot at ``offset`` (``.tmp``, then renamed); fsynced when
        ``sync``; returns its path. A lost or torn snapshot only means a longer replay."""
        path = self.path(offset)
        tmp = path + ".tmp"
        handle = self.disk.open(tmp)
        if handle.size():
            handle.truncate(0)
        handle.append(content)
        if sync:
            handle.flush()
        handle.close()
        self.disk.rename(tmp, path)
        if offset not in self.offsets:
            self.offsets.append(offset)
            self.offsets.sort()
        return path

    def delete(self, keep: Callable[[int], bool]) -> None:
        """Delete every snapshot whose offset ``keep(offset)`` rejects."""
        for offset in [o for o in self.offsets if not keep(o)]:
            path = self.path(offset)
            if self.disk.exists(path):
                self.disk.remove(path)
            self.offsets.remove(offset)

    def load_latest(self, state: ProducerStateManager, at_most: int | None = None) -> int | None:
        """Load the latest good snapshot (at or below ``at_most`` when given) into ``state``
        (corrupt ones are deleted); its offset, or None without one (``state`` is then empty)."""
        state.clear()
        while True:
            offsets = [o for o in self.offsets if at_most is None or o <= at_most]
            if not offsets:
                return None
            offset = offsets[-1]
            try:
                state.load(self.disk.read_file(self.path(offset)))
                return offset
            except CorruptSnapshotError:
                self.delete(_other_than(offset))


def _other_than(bad: int) -> Callable[[int], bool]:
    return lambda offset: offset != bad
