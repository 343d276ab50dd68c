"""Idempotent-producer state of one partition (Kafka's ProducerStateManager, simplified).

For each producer id the partition remembers the producer epoch and the metadata of its last
five batches. A retried batch that matches one of them is answered with its original offsets
instead of being appended again; a gap in sequence numbers is OUT_OF_ORDER_SEQUENCE_NUMBER; a
batch from an older producer epoch is INVALID_PRODUCER_EPOCH. The state is rebuilt from batch
headers when a log is opened, so retries across a broker restart are still deduplicated.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from kio.schema.errors import ErrorCode

from strandline.protocol.records import BatchHeader

MAX_CACHED_BATCHES = 5
SEQ_MOD = 1 << 31
CONTROL_BIT = 0x20                   # a transaction marker: no sequence numbers


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    coordinator_epoch: int = -1          # of the last transaction marker

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    """Outcome of checking one batch: append it, answer a duplicate, or refuse it."""

    error: ErrorCode = ErrorCode.none
    duplicate: BatchMetadata | None = None


APPEND = SequenceCheck()


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> SequenceCheck:
        """Validate a batch from an idempotent producer before it is appended."""
        if header.producer_id < 0:
            return APPEND
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # Unknown producer (new, or its state aged out with the log): accept, as Kafka does.
            return APPEND
        if header.producer_epoch < entry.epoch:
            return SequenceCheck(ErrorCode.invalid_producer_epoch)
        if header.attributes & CONTROL_BIT or header.base_sequence < 0:
            return APPEND                   # a marker, or a coordinator's own write: no sequence
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                return SequenceCheck(ErrorCode.out_of_order_sequence_number)
            return APPEND
        for cached in entry.batches:
            if cached.first_seq == header.base_sequence and cached.last_seq == header.last_sequence:
                return SequenceCheck(duplicate=cached)
        expected = (entry.last_seq + 1) % SEQ_MOD
        if header.base_sequence != expected:
            return SequenceCheck(ErrorCode.out_of_order_sequence_number)
        return APPEND

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> ErrorCode:
        """A transaction marker from a coordinator: refused from an older producer epoch
        (INVALID_PRODUCER_EPOCH) or an older coordinator (TRANSACTION_COORDINATOR_FENCED)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return ErrorCode.none
        if producer_epoch < entry.epoch:
            return ErrorCode.invalid_producer_epoch
        if coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.transaction_coordinator_fenced
        return ErrorCode.none

    def update(self, header: BatchHeader, first_offset: int, timestamp: int, coordinator_epoch: int = -1) -> None:
        """Record a batch that was appended at ``first_offset`` (leader append or replay)."""
        if header.producer_id < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch != entry.epoch:
            # a new producer epoch: new sequences, but the coordinator epoch fence stays (Kafka)
            entry = ProducerEntry(header.producer_epoch, coordinator_epoch=entry.coordinator_epoch if entry else -1)
            self.producers[header.producer_id] = entry
        if header.attributes & CONTROL_BIT:
            entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
            return
        if header.base_sequence < 0:
            return
        entry.batches.append(BatchMetadata(
            header.base_sequence, header.last_sequence, first_offset,
            first_offset + header.last_offset_delta, timestamp,
        ))

    def rebuild(self, headers: Iterable[BatchHeader]) -> int:
        """Replay batch headers read back from the log; returns how many were seen."""
        count = 0
        for header in headers:
            count += 1
            if header.producer_id >= 0:
                self.update(header, header.base_offset, header.max_timestamp)
        return count

    def truncate(self) -> None:
        """Forget everything (after the log was truncated); rebuild from the log afterwards."""
        self.producers.clear()
