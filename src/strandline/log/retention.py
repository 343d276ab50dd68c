"""Retention of a log (Kafka's ``deleteOldSegments``): deleting its oldest segments.

A segment goes once the next one starts at or below the log start offset, and, when the cleanup
policy has ``delete``, once it is older than ``retention.ms`` or the log without it still holds
``retention.bytes`` or more, oldest first. The active segment always stays, and so does a
segment holding data at or above the high watermark. Deleting segments moves the log start
offset up to the first one left, and drops the producer snapshots below it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strandline.log.segment import LogSegment

if TYPE_CHECKING:
    from strandline.log.log import Log


def delete_old_segments(log: Log, now_ms: int, high_watermark: int | None) -> int:
    """The segments retention deletes from ``log`` now; returns how many."""
    deleted = log.delete_oldest_segments(_prefix(log, lambda s: False, high_watermark, below_start=True))
    if not log.config.deletes:         # cleanup.policy=compact: only the log start offset deletes
        return deleted
    if log.config.retention_ms >= 0:
        retention_ms = log.config.retention_ms
        deleted += log.delete_oldest_segments(
            _prefix(log, lambda s: now_ms - s.max_timestamp > retention_ms, high_watermark))
    if log.config.retention_bytes >= 0:
        excess = log.size_in_bytes - log.config.retention_bytes

        def over(segment: LogSegment) -> bool:
            nonlocal excess
            if excess - segment.size >= 0:
                excess -= segment.size
                return True
            return False
        deleted += log.delete_oldest_segments(_prefix(log, over, high_watermark))
    return deleted


def _prefix(log: Log, predicate, high_watermark: int | None, below_start: bool = False) -> int:
    """How many of the oldest segments go: those ``predicate`` holds for (or, ``below_start``, that
    end at or below the log start offset), never the active one nor one with data at or above the
    high watermark."""
    upper = log.log_end_offset if high_watermark is None else min(high_watermark, log.log_end_offset)
    count = 0
    segments = log.segments
    while count < len(segments) - 1:
        next_base = segments[count + 1].base_offset
        if next_base > upper:
            break
        if below_start:
            if next_base > log.log_start_offset:
                break
        elif not predicate(segments[count]):
            break
        count += 1
    return count
