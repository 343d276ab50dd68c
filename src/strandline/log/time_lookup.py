"""Finding offsets by timestamp across a log's segments, from its log start offset (ListOffsets;
Kafka's ``fetchOffsetByTimestamp``). Each segment knows its largest timestamp and where it lies,
and searches its time index for the rest.
"""

from __future__ import annotations

from typing import Sequence

from strandline.log.segment import LogSegment, segment_index


def find_offset_by_timestamp(segments: Sequence[LogSegment], log_start_offset: int,
                             timestamp: int) -> tuple[int, int] | None:
    """See ``Log.find_offset_by_timestamp``."""
    for segment in segments[segment_index(segments, log_start_offset):]:
        if segment.max_timestamp >= timestamp:
            found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
            if found is not None:
                return found
    return None


def find_max_timestamp(segments: Sequence[LogSegment], log_start_offset: int,
                       below: int) -> tuple[int, int] | None:
    """See ``Log.find_max_timestamp``."""
    best: tuple[int, int, LogSegment] | None = None     # (timestamp, offset in its batch, segment)
    for segment in segments[segment_index(segments, log_start_offset):]:
        if segment.base_offset >= below:
            break
        if segment.base_offset >= log_start_offset and segment.next_offset <= below:
            found = (segment.max_timestamp, segment.offset_of_max_timestamp)
        else:
            found = (-1, -1)
            for h in segment.iter_headers(log_start_offset):
                if h.base_offset >= below:
                    break
                if h.max_timestamp > found[0]:
                    found = (h.max_timestamp, h.base_offset + h.last_offset_delta)
        if found[1] >= 0 and (best is None or found[0] > best[0]):
            best = (found[0], found[1], segment)
    if best is None:
        return None
    timestamp, offset, segment = best
    return segment.offset_of_timestamp(offset, timestamp), timestamp
