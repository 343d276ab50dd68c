"""What a leader knows of its partition's transactions: the last stable offset and the aborted
transactions a read_committed fetch returns (Kafka's ProducerStateManager and transaction index,
their reading side).

The state is built from the log itself, lazily: nothing is read until the first read_committed
fetch or ListOffsets of the partition, so a partition nobody reads read_committed costs nothing.
From then on each such read scans only the batches the high watermark passed since the last one.
Only batches below the high watermark are scanned: a transaction whose marker is not yet
replicated is still open, so the last stable offset never passes a transaction whose outcome a
new leader might not know.

- A transactional data batch opens its producer's transaction at its base offset, if none is open.
- A commit or abort marker (a control batch) closes it; an abort records ``(producer id, first
  offset, marker offset)``.
- The last stable offset is the lowest first offset of an open transaction, else the high watermark.

A read scans at most ``MAX_SCAN_BATCHES`` batch headers, so a long log never holds up the event
loop: until the scan has reached the high watermark, the last stable offset stays where the scan
is (a reader from the start reads on meanwhile; one at the end waits a few fetches).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from strandline.protocol.markers import ABORT_MARKER, CONTROL_BIT, TRANSACTIONAL_BIT, marker_type
from strandline.protocol.records import iter_batches, iter_records

MAX_SCAN_BATCHES = 20000


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int          # the abort marker's offset


def marker_kind(log: Any, base_offset: int, batch_length: int) -> int | None:
    """The type of a control batch's marker (0 abort, 1 commit), read from the log; None if unreadable."""
    data = log.read(base_offset, batch_length + 12, max_offset=base_offset + 1)
    for pos, header in iter_batches(data):
        for record in iter_records(data, pos, header):
            return marker_type(record.key)
    return None


@dataclass(slots=True)
class PartitionTransactions:
    scanned_to: int = -1                          # every batch below this offset is known; -1: nothing yet
    truncations: int = -1                         # the log's truncation count when the scan started
    ongoing: dict[int, int] = field(default_factory=dict)      # producer id -> first offset
    aborted: list[AbortedTxn] = field(default_factory=list)    # by marker offset

    def catch_up(self, log: Any, high_watermark: int) -> None:
        """Scan the batches below ``high_watermark`` not scanned yet (all of them after a truncation)."""
        if self.truncations != log.truncations or self.scanned_to < log.log_start_offset or \
                self.scanned_to > log.log_end_offset:
            self.scanned_to = log.log_start_offset
            self.truncations = log.truncations
            self.ongoing.clear()
            self.aborted.clear()
        if self.aborted and self.aborted[0].last_offset < log.log_start_offset:
            self.aborted = [a for a in self.aborted if a.last_offset >= log.log_start_offset]
        if self.scanned_to >= high_watermark:
            return
        budget = MAX_SCAN_BATCHES
        for header in log.iter_batch_headers(self.scanned_to):
            if header.base_offset >= high_watermark:
                break
            if budget == 0:
                return                          # the rest at the next read
            budget -= 1
            self.scanned_to = header.base_offset + header.last_offset_delta + 1
            if header.producer_id < 0 or not header.attributes & TRANSACTIONAL_BIT:
                continue
            if header.attributes & CONTROL_BIT:
                first = self.ongoing.pop(header.producer_id, None)
                kind = marker_kind(log, header.base_offset, header.batch_length)
                if kind == ABORT_MARKER:
                    # no data of it here (a partition added but not written to, or a marker written
                    # twice): the transaction starts at its marker, as Kafka records it
                    start = first if first is not None else header.base_offset
                    self.aborted.append(AbortedTxn(header.producer_id, start, header.base_offset))
            else:
                self.ongoing.setdefault(header.producer_id, header.base_offset)
        self.scanned_to = max(self.scanned_to, min(high_watermark, log.log_end_offset))

    def last_stable_offset(self, high_watermark: int) -> int:
        return min(min(self.ongoing.values(), default=high_watermark), high_watermark, self.scanned_to)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """The aborted transactions a fetch of ``[start, end)`` must report (KIP-98): those whose
        marker is at or after ``start`` and whose data begins before ``end``, as
        ``(producer id, first offset)``."""
        keys = [a.last_offset for a in self.aborted]
        found = []
        for txn in self.aborted[bisect_left(keys, start):]:
            if txn.first_offset < end:
                found.append((txn.producer_id, txn.first_offset))
        return found
