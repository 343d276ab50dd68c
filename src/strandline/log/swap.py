"""Swapping a log cleaner's output in for the segments it cleaned (Kafka's ``replaceSegments``),
and completing a swap that a crash interrupted when the log is opened again.

The cleaned file, fsynced, is renamed to ``<base>.log.swap``: that rename is the commit point.
Then the replaced segments' files are deleted and the swap file is renamed to ``<base>.log``. A
``.swap`` file found on open was whole when it got that name, so the swap is completed then: it
replaces every segment whose base offset lies in the offsets it covers.
"""

from __future__ import annotations

import posixpath

from strandline.log.config import LogConfig
from strandline.log.disk import Disk
from strandline.log.segment import LOG_SUFFIX, CorruptRecordError, LogSegment, file_prefix, segment_paths
from strandline.log.txn_index import TXN_INDEX_SUFFIX

SWAP_LOG_SUFFIX = LOG_SUFFIX + ".swap"


def swap_in(disk: Disk, dir: str, config: LogConfig, old: list[LogSegment], cleaned_path: str, now_ms: int,
            removed_markers: set[int] | None) -> LogSegment:
    """Put the fsynced ``cleaned_path`` in place of the consecutive segments ``old`` on disk; returns
    the new segment (see ``Log.replace_segments``)."""
    base = old[0].base_offset
    log_path = old[0].log_path
    swap_path = log_path + ".swap"
    aborted = [txn for segment in old for txn in segment.txn_index.entries
               if not removed_markers or txn.last_offset not in removed_markers]
    disk.rename(cleaned_path, swap_path)
    disk.fsync_dir(dir)
    for segment in old:
        segment.delete()
    disk.rename(swap_path, log_path)
    disk.fsync_dir(dir)
    new = LogSegment.open(disk, dir, base, config, now_ms, txn_index=False)
    new.txn_index.extend(aborted)
    new.txn_index.flush()
    return new


def complete_swap(disk: Disk, dir: str, base: int, config: LogConfig, bases: list[int], now_ms: int) -> list[int]:
    """Finish a cleaner's swap found on open: the ``<base>.log.swap`` file (fsynced before it got
    that name) replaces every segment whose base offset lies in the offsets it covers; returns
    the segment base offsets left."""
    swap_path = posixpath.join(dir, file_prefix(base) + SWAP_LOG_SUFFIX)
    swap = LogSegment(disk, dir, base, config, disk.open(swap_path), created_ms=now_ms, new=False)
    size = swap.log.size()
    next_offset, end = base, 0
    for pos, h in swap._iter_headers(0, check_crc=True):
        next_offset, end = h.base_offset + h.last_offset_delta + 1, pos + h.size
    swap.log.close()
    if end != size:
        raise CorruptRecordError(f"{swap_path} is not whole ({end} of {size} bytes are valid batches): "
                                 f"an interrupted log cleaning cannot be completed")
    replaced = [b for b in bases if base <= b < next_offset]
    for old in replaced + [base]:
        # the transaction index goes too: the entries of the cleaned range are of aborts whose
        # records the cleaner removed (nothing left to hide), and one whose marker it removed
        # would hide that producer's later records from read_committed readers
        for path in segment_paths(dir, old) + (posixpath.join(dir, file_prefix(old) + TXN_INDEX_SUFFIX),):
            if disk.exists(path):
                disk.remove(path)
    disk.rename(swap_path, segment_paths(dir, base)[0])
    disk.fsync_dir(dir)
    return sorted({b for b in bases if b not in replaced} | {base})
