"""The leader-epoch cache of one partition, persisted as ``leader-epoch-checkpoint`` (SPEC EPO-1).

Kafka's ``LeaderEpochFileCache`` semantics (reference/kafka_replication.md §4.2, §4.3):

* ``assign(e, off)`` changes the cache only if ``e`` differs from the latest epoch or ``off`` is
  below the latest start offset; it then first drops every entry with ``epoch >= e`` or
  ``start >= off`` (so epochs and start offsets stay strictly increasing) and appends.
* ``truncate_from_end(off)`` drops entries starting at or after ``off`` (log truncation).
* ``truncate_from_start(off)`` moves the earliest surviving entry's start up to ``off`` (log start
  offset advance).
* ``end_offset_for`` answers OffsetsForLeaderEpoch.

A new latest entry is written (atomically, fsynced) by the log's next flush, before its recovery
point moves (``Log.flush``, a roll's flush, a clean shutdown), not at once: recovery after a crash
re-reads the batches above the recovery point and assigns their epochs again, since each is above
the checkpoint's latest epoch. So becoming leader or follower of thousands of partitions costs no
fsync each on the event loop (Kafka fsyncs an assign on the spot, on one of its many request
threads). A change that drops entries is written at once: a stale higher entry left in the file
would survive a crash, as recovery only learns epochs above the latest one; the exception is a log
that never wrote its checkpoint, which writes it with its first flush (until then a restart
recovers the whole log). Moving the earliest entry up to the log start offset waits too:
``Log.open`` does it again.
"""

from __future__ import annotations

import posixpath

from strandline.log import checkpoint
from strandline.log.disk import Disk

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
UNDEFINED = UNDEFINED_EPOCH  # kept for callers that used the short name


class LeaderEpochCache:
    """Ordered ``(epoch, start offset)`` entries, both strictly increasing."""

    def __init__(self, disk: Disk, directory: str) -> None:
        self.disk = disk
        self.path = posixpath.join(directory, FILE_NAME)
        self.entries: list[tuple[int, int]] = checkpoint.read_epochs(disk, self.path)
        self.written = disk.exists(self.path)
        self.unwritten = False
        """Whether the entries changed since the checkpoint was last written: the log writes them
        before its recovery point next moves (see the module's docstring)."""

    def _flush(self, dropped: bool = False) -> None:
        """Write now if ``dropped`` (entries went) and the checkpoint exists; else later."""
        if dropped and self.written:
            self.write()
        else:
            self.unwritten = True

    def write(self) -> None:
        """Write the checkpoint atomically and durably."""
        checkpoint.write_epochs(self.disk, self.path, self.entries)
        self.written = True
        self.unwritten = False

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    @property
    def earliest_epoch(self) -> int:
        return self.entries[0][0] if self.entries else UNDEFINED_EPOCH

    def epoch_entries(self) -> list[tuple[int, int]]:
        return list(self.entries)

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed."""
        if epoch < 0 or start_offset < 0:
            return False
        if self.entries:
            last_epoch, last_start = self.entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return False
        kept = [(e, o) for e, o in self.entries if e < epoch and o < start_offset]
        dropped = len(kept) < len(self.entries)
        self.entries = kept
        self.entries.append((epoch, start_offset))
        self._flush(dropped)
        return True

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the entry covering ``offset`` (UNDEFINED below the first entry)."""
        epoch = UNDEFINED_EPOCH
        for e, start in self.entries:
            if start > offset:
                break
            epoch = e
        return epoch

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(largest epoch <= requested, start of the first epoch > requested)``.

        ``-1`` -> ``(-1, -1)``; the latest epoch -> ``(latest, log_end_offset)``; below the
        earliest known epoch -> ``(requested, earliest start)``; above the latest -> ``(-1, -1)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        previous = UNDEFINED_EPOCH
        for e, start in self.entries:
            if e > requested_epoch:
                if previous == UNDEFINED_EPOCH:
                    return requested_epoch, start
                return previous, start
            previous = e
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        if end_offset < 0 or not self.entries or self.entries[-1][1] < end_offset:
            return False
        self.entries = [(e, o) for e, o in self.entries if o < end_offset]
        self._flush(dropped=True)
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: the earliest surviving entry moves up to it."""
        earlier = [(e, o) for e, o in self.entries if o <= start_offset]
        if not earlier or (len(earlier) == 1 and earlier[0][1] == start_offset):
            return False
        kept = [(e, o) for e, o in self.entries if o > start_offset]
        self.entries = [(earlier[-1][0], start_offset)] + kept
        self._flush()
        return True

    def clear(self) -> None:
        """Forget every entry (the log was emptied and restarted elsewhere)."""
        dropped = bool(self.entries)
        self.entries = []
        self._flush(dropped)
