"""Reading a log: whole stored batches across its segments, and the aborted transactions a
read_committed fetch reports. Functions of the log's segments (``first``: the index of the one
holding the offset the read starts at); the timestamp lookups are in ``log.time_lookup``."""

from __future__ import annotations

from strandline.log.disk import FileRegion
from strandline.log.producer_state import AbortedTxn
from strandline.log.segment import LogSegment


def read_batches(segments: list[LogSegment], first: int, offset: int, max_bytes: int, max_offset: int | None,
                 min_one_batch: bool, regions: bool) -> bytes | FileRegion:
    """Whole stored batches from the one containing ``offset``, across segments (``Log.read``)."""
    parts: list[bytes | FileRegion] = []
    remaining = max_bytes
    for i in range(first, len(segments)):
        # only the active segment's tail may be a region: a read that goes on into the next
        # segment is whole (a region would end the answer there, short of a large min_bytes)
        data, exhausted = segments[i].read(offset, remaining, max_offset, min_one_batch and not parts,
                                           regions=regions and i == len(segments) - 1)
        if data:
            parts.append(data)
            remaining -= len(data)
        if not exhausted or remaining <= 0:
            break
    if len(parts) == 1:
        return parts[0]
    return b"".join([p.read() if isinstance(p, FileRegion) else p for p in parts])


def aborted_txns(segments: list[LogSegment], first: int, start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions a read_committed fetch of ``[start, end)`` reports
    (``Log.collect_aborted_txns``)."""
    found = []
    for segment in segments[first:]:
        for txn in segment.txn_index.entries:
            if txn.last_offset >= start and txn.first_offset < end:
                found.append(txn)
            if txn.last_stable_offset >= end:
                return found
    return found
