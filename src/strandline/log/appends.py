"""Appending to a log, the part that looks at the batches: checking them and numbering them
(assigning offsets and stamping the leader epoch as leader, keeping the leader's as follower), the
split of an append whose offsets one segment cannot address, and when a segment rolls. The
:class:`~strandline.log.log.Log` writes what these find."""

from __future__ import annotations

from typing import NamedTuple

from strandline.log.config import LogConfig
from strandline.log.segment import INT32_MAX, BatchInfo, CorruptRecordError, LogSegment
from strandline.protocol.records import BatchHeader, crc_ok, iter_batches, stamp

#: Batches as they arrive in a produce or fetch answer.
Records = bytes | bytearray | memoryview
#: ``(position, header, offset)`` of each batch of an idempotent or transactional producer.
ProducerBatches = list[tuple[int, BatchHeader, int]]


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_batches: int
    valid_bytes: int


class OffsetOutOfOrder(ValueError):
    """A follower append does not start at the log end offset, or its offsets go backwards."""


def number_as_leader(records: bytearray, offset: int, leader_epoch: int, topic: str,
                     partition: int) -> tuple[list[BatchInfo], ProducerBatches]:
    """Assign offsets from ``offset`` and stamp ``leader_epoch`` into every batch of ``records``
    (in place: base offset and partition leader epoch lie outside the CRC) of ``topic``'s
    ``partition``."""
    batches: list[BatchInfo] = []
    producers: ProducerBatches = []
    end = 0
    for pos, h in iter_batches(records):
        stamp(records, pos, offset, leader_epoch)
        last = offset + h.last_offset_delta
        batches.append(BatchInfo(pos, h.batch_length + 12, offset, last, h.max_timestamp))
        if h.producer_id >= 0:
            producers.append((pos, h, offset))
        offset = last + 1
        end = pos + h.batch_length + 12
    _whole(records, end, topic, partition)
    return batches, producers


def check_as_follower(records: Records, expected: int, topic: str,
                      partition: int) -> tuple[list[BatchInfo], ProducerBatches, list[tuple[int, int]]]:
    """Check each batch of ``records`` (magic 2, CRC-32C, offsets from ``expected`` on: a gap is
    fine); the batches, the producers' and ``(leader epoch, start offset)`` of each run of one epoch."""
    batches: list[BatchInfo] = []
    producers: ProducerBatches = []
    epochs: list[tuple[int, int]] = []
    end = 0
    for pos, h in iter_batches(records):
        if h.magic != 2 or not crc_ok(records, pos, h):
            raise CorruptRecordError(f"corrupt batch at offset {h.base_offset} for {topic}-{partition}")
        if h.base_offset < expected:        # a gap is fine: a compacted leader's log has them
            raise OffsetOutOfOrder(f"follower append to {topic}-{partition} at offset {h.base_offset}, "
                                   f"expected {expected}")
        size = h.batch_length + 12
        batches.append(BatchInfo(pos, size, h.base_offset, h.base_offset + h.last_offset_delta,
                                 h.max_timestamp))
        if not epochs or epochs[-1][0] != h.partition_leader_epoch:
            epochs.append((h.partition_leader_epoch, h.base_offset))
        if h.producer_id >= 0:
            producers.append((pos, h, h.base_offset))
        expected = h.base_offset + h.last_offset_delta + 1
        end = pos + size
    _whole(records, end, topic, partition)
    return batches, producers, epochs


def _whole(records: Records, end: int, topic: str, partition: int) -> None:
    if end != len(records):
        raise CorruptRecordError(f"records for {topic}-{partition} end with {len(records) - end} bytes that are "
                                 f"not a whole batch")


def addressable_parts(batches: list[BatchInfo]) -> list[tuple[int, int]]:
    """``[i, j)`` ranges of ``batches``, each spanning at most what one segment's 32-bit relative
    offsets address (a compacted leader's gap, read across its segments in one Fetch answer, can
    put batches more than 2**31 offsets apart)."""
    parts = []
    i = 0
    while i < len(batches):
        j = i + 1
        while j < len(batches) and batches[j].last_offset - batches[i].base_offset <= INT32_MAX:
            j += 1
        parts.append((i, j))
        i = j
    return parts


def should_roll(segment: LogSegment, config: LogConfig, size: int, last_offset: int, now_ms: int) -> bool:
    """Whether an append of ``size`` bytes up to ``last_offset`` goes to a new segment: one that
    would not address it, one full (segment.bytes), one older than segment.ms, or full indexes."""
    if last_offset - segment.base_offset > INT32_MAX:
        return True     # even an empty segment: its indexes hold offsets relative to its base
    if segment.size == 0:
        return False
    if segment.size + size > config.segment_bytes:
        return True
    rolling_base = segment.rolling_base_ms
    if rolling_base is not None and now_ms - rolling_base > config.max_segment_ms:
        return True
    return segment.indexes_full
