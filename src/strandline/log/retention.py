"""Retention of a log (Kafka's ``deleteOldSegments``): which of its oldest segments go.

A segment goes once the next one starts at or below the log start offset, and, when the cleanup
policy has ``delete``, once it is older than ``retention.ms`` or the log without it still holds
``retention.bytes`` or more, oldest first. The active segment always stays, and so does a
segment holding data at or above the high watermark. The log deletes them (``Log.delete_old_segments``),
which moves its start offset up to the first one left and drops the producer snapshots below it.
"""

from __future__ import annotations

from typing import Callable, Sequence

from strandline.log.config import LogConfig
from strandline.log.segment import LogSegment


def segments_to_delete(segments: Sequence[LogSegment], config: LogConfig, log_start_offset: int,
                       log_end_offset: int, now_ms: int, high_watermark: int | None) -> int:
    """How many of the oldest ``segments`` retention deletes now."""
    upper = log_end_offset if high_watermark is None else min(high_watermark, log_end_offset)
    count = _prefix(segments, 0, upper, lambda s, next_base: next_base <= log_start_offset)
    if not config.deletes:             # cleanup.policy=compact: only the log start offset deletes
        return count
    if config.retention_ms >= 0:
        retention_ms = config.retention_ms
        count = _prefix(segments, count, upper, lambda s, _: now_ms - s.max_timestamp > retention_ms)
    if config.retention_bytes >= 0:
        excess = sum(s.size for s in segments[count:]) - config.retention_bytes

        def over(segment: LogSegment, _: int) -> bool:
            nonlocal excess
            if excess - segment.size >= 0:
                excess -= segment.size
                return True
            return False
        count = _prefix(segments, count, upper, over)
    return count


def _prefix(segments: Sequence[LogSegment], count: int, upper: int,
            goes: Callable[[LogSegment, int], bool]) -> int:
    """From the ``count`` oldest segments already going, how many go once the next ones that
    ``goes(segment, next segment's base offset)`` holds for are added; never the active one nor one
    with data at or above ``upper``."""
    while count < len(segments) - 1:
        next_base = segments[count + 1].base_offset
        if next_base > upper or not goes(segments[count], next_base):
            break
        count += 1
    return count
