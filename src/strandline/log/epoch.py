"""The leader-epoch cache of one partition, persisted as ``leader-epoch-checkpoint`` (SPEC EPO-1)."""

from __future__ import annotations

import os.path

from strandline.log import checkpoint
from strandline.log.disk import Disk

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = -1


class LeaderEpochCache:
    """Ordered ``(epoch, start offset)`` entries, both strictly increasing (Kafka's semantics)."""

    def __init__(self, disk: Disk, directory: str) -> None:
        self.disk = disk
        self.path = os.path.join(directory, FILE_NAME)
        self.entries: list[tuple[int, int]] = checkpoint.read_epochs(disk, self.path)

    def _flush(self) -> None:
        checkpoint.write_epochs(self.disk, self.path, self.entries)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED

    def epoch_entries(self) -> list[tuple[int, int]]:
        return list(self.entries)

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed."""
        if epoch < 0:
            return False
        if self.entries:
            last_epoch, last_start = self.entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return False
        self.entries = [(e, o) for e, o in self.entries if e < epoch and o < start_offset]
        self.entries.append((epoch, start_offset))
        self._flush()
        return True

    def epoch_for_offset(self, offset: int) -> int:
        epoch = UNDEFINED
        for e, start in self.entries:
            if start <= offset:
                epoch = e
            else:
                break
        return epoch

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= requested, where the next epoch starts)."""
        if requested == UNDEFINED or not self.entries:
            return UNDEFINED, UNDEFINED
        if requested == self.latest_epoch:
            return requested, log_end_offset
        if requested < self.entries[0][0]:
            return requested, self.entries[0][1]
        found = UNDEFINED
        for i, (e, _) in enumerate(self.entries):
            if e > requested:
                return found, self.entries[i][1]
            found = e
        return UNDEFINED, UNDEFINED  # requested is above the latest epoch

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the earliest entry moves up to it."""
        kept = [(e, o) for e, o in self.entries if o > start_offset]
        earlier = [(e, o) for e, o in self.entries if o <= start_offset]
        if earlier:
            kept.insert(0, (earlier[-1][0], start_offset))
        if kept != self.entries:
            self.entries = kept
            self._flush()
