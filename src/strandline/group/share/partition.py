"""One share group's state of one partition (KIP-932's share-partition), kept by its leader.

The records from the share-partition start offset (SPSO, :attr:`SharePartition.start_offset`) up to
the end of what was ever handed out (:attr:`SharePartition.end_offset`, exclusive) are *in flight*;
each is in one state:

- ``ACQUIRED``: handed to one member by a ShareFetch, under a lock that expires
  ``group.share.record.lock.duration.ms`` later; only that member may acknowledge it;
- ``AVAILABLE``: released (by the member, by its lock expiring, by the member leaving): the next
  ShareFetch hands it out again, counting one more delivery;
- ``ACKNOWLEDGED``: accepted by the member that held it;
- ``ARCHIVED``: rejected, a gap in the log (no record at that offset), or released after
  ``group.share.delivery.count.limit`` deliveries: never handed out again.

The start offset moves past every acknowledged or archived record at its front, so what lies
below it is done with. New records are handed out only while fewer than
``group.share.partition.max.record.locks`` are in flight; released ones always are. Every offset
from the start to the end has its entry, gaps included (a compacted log's missing offsets are
handed out in the ranges and acknowledged as gaps), so the state is a run of entries with no hole.

:meth:`SharePartition.state_batches` is what the share coordinator persists (Kafka's
WriteShareGroupState batches: first and last offset, state, delivery count); a lock does not
survive a leader change, so an acquired record is written as available, with its deliveries.

An acknowledgement may be held *pending* until the share coordinator has it
(``acknowledge(..., pending=version)``): its records stay acquired by their member (no lock
expires, no release takes them) while the state written shows them as acknowledged; once the
write of that version succeeds :meth:`SharePartition.commit` applies it, and if it fails
:meth:`SharePartition.abort` drops it, the records then acquired as before (released when their
locks expire, delivered again), as Kafka's leader rolls back an acknowledgement it could not
persist.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

from kio.schema.errors import ErrorCode

#: Kafka's defaults: group.share.partition.max.record.locks, group.share.delivery.count.limit,
#: group.share.record.lock.duration.ms
DEFAULT_MAX_IN_FLIGHT = 2000
DEFAULT_DELIVERY_COUNT_LIMIT = 5
DEFAULT_LOCK_DURATION_MS = 30000


class RecordState(enum.IntEnum):
    """An in-flight record's state, with Kafka's numbers (persisted in the state batches)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """ShareFetch's and ShareAcknowledge's AcknowledgeTypes."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None       # the holder of an acquired record
    lock_deadline_ms: int = -1         # when an acquired record's lock expires
    pending: int | None = None         # an acknowledgement (its AcknowledgeType) waiting to be persisted
    pending_version: int = -1          # the write that persists it


@dataclass(frozen=True)
class AcquiredRange:
    """ShareFetch's AcquiredRecords: offsets handed to a member, each delivered ``delivery_count`` times."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class StateBatch:
    """A run of in-flight offsets in one state with one delivery count (WriteShareGroupState)."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


#: an acknowledgement batch: first offset, last offset, and one type for all of them or one per offset
AcknowledgementBatch = tuple[int, int, "list[int] | tuple[int, ...]"]


class SharePartition:
    """The in-flight records of one share group on one partition; see the module's docstring."""

    def __init__(self, start_offset: int, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT,
                 lock_duration_ms: int = DEFAULT_LOCK_DURATION_MS) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.records: dict[int, InFlight] = {}
        self.max_in_flight = max_in_flight
        self.delivery_count_limit = delivery_count_limit
        self.lock_duration_ms = lock_duration_ms

    # ------------------------------------------------------------------ handing out

    def next_fetch_offset(self) -> int:
        """Where the next ShareFetch reads: the first available record in flight, else the end."""
        for offset in range(self.start_offset, self.end_offset):
            if self.records[offset].state is RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def can_acquire(self) -> bool:
        """Whether a ShareFetch may hand anything out: a released record, or room for new ones."""
        return self.next_fetch_offset() < self.end_offset or self.in_flight() < self.max_in_flight

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def acquire(self, member_id: str, first_offset: int, last_offset: int, max_records: int,
                now_ms: int) -> list[AcquiredRange]:
        """Hand ``member_id`` what a read of the log from ``first_offset`` (at most the end offset;
        nothing is handed out otherwise) returned, up to its last batch's ``last_offset``: each available record in flight, then new ones while fewer than
        the maximum are in flight, ``max_records`` at most. Each is locked until ``now_ms`` plus
        the lock duration and counts one more delivery. The ranges handed out, in order."""
        acquired: list[AcquiredRange] = []
        deadline = now_ms + self.lock_duration_ms
        taken = 0
        offset = max(first_offset, self.start_offset)
        if offset > self.end_offset:
            # the offsets between were not read: none may be handed out past them (a log whose
            # start moved beyond the end says so first, :meth:`move_start`)
            return acquired
        while offset <= last_offset and taken < max_records:
            if offset < self.end_offset:
                record = self.records[offset]
                if record.state is not RecordState.AVAILABLE:
                    offset += 1
                    continue
                record.state, record.member_id, record.lock_deadline_ms = RecordState.ACQUIRED, member_id, deadline
                record.delivery_count += 1
            else:
                if self.in_flight() >= self.max_in_flight:
                    break
                record = InFlight(RecordState.ACQUIRED, 1, member_id, deadline)
                self.records[offset] = record
                self.end_offset = offset + 1
            _extend(acquired, offset, record.delivery_count)
            taken += 1
            offset += 1
        return acquired

    # ------------------------------------------------------------------ acknowledging

    def acknowledge(self, member_id: str, batches: Iterable[AcknowledgementBatch],
                    pending: int | None = None) -> ErrorCode:
        """Apply ``member_id``'s acknowledgements, all or none: INVALID_RECORD_STATE if any offset
        is not in flight or not acquired by it (or already acknowledged, pending), INVALID_REQUEST
        for a malformed batch. With ``pending``, they are held until :meth:`commit` of that
        version (or dropped by :meth:`abort`)."""
        changes: list[tuple[InFlight, int]] = []
        for first, last, types in batches:
            if last < first or not types or len(types) not in (1, last - first + 1):
                return ErrorCode.invalid_request
            if any(t not in _ACK_TYPES for t in types):
                return ErrorCode.invalid_request
            for offset in range(first, last + 1):
                record = self.records.get(offset)
                if record is None or record.state is not RecordState.ACQUIRED or record.member_id != member_id \
                        or record.pending is not None:
                    return ErrorCode.invalid_record_state
                changes.append((record, types[0] if len(types) == 1 else types[offset - first]))
        if pending is not None:
            for record, kind in changes:
                record.pending, record.pending_version = kind, pending
            return ErrorCode.none
        for record, kind in changes:
            self._apply(record, kind)
        self._advance()
        return ErrorCode.none

    def commit(self, version: int) -> None:
        """The write of ``version`` succeeded: the acknowledgements pending in it take effect."""
        for record in self.records.values():
            if record.pending is not None and record.pending_version <= version:
                kind = record.pending
                record.pending, record.pending_version = None, -1
                self._apply(record, kind)
        self._advance()

    def abort(self, version: int) -> int:
        """The write of ``version`` failed: the acknowledgements pending in it are dropped (their
        records stay acquired until their locks expire). How many records were."""
        dropped = 0
        for record in self.records.values():
            if record.pending is not None and record.pending_version <= version:
                record.pending, record.pending_version = None, -1
                dropped += 1
        return dropped

    def release_member(self, member_id: str) -> int:
        """``member_id`` left (its share session closed, or it left the group): what it holds is
        released. How many records were."""
        held = [r for r in self.records.values()
                if r.state is RecordState.ACQUIRED and r.member_id == member_id and r.pending is None]
        for record in held:
            self._release(record)
        self._advance()
        return len(held)

    def expire_locks(self, now_ms: int) -> int:
        """Release every record whose lock has expired by ``now_ms``; how many were."""
        expired = [r for r in self.records.values()
                   if r.state is RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms and r.pending is None]
        for record in expired:
            self._release(record)
        self._advance()
        return len(expired)

    def next_deadline_ms(self) -> int | None:
        """When the next lock expires (None: nothing is acquired)."""
        return min((r.lock_deadline_ms for r in self.records.values()
                    if r.state is RecordState.ACQUIRED and r.pending is None), default=None)

    def move_start(self, log_start_offset: int) -> None:
        """The log's start moved to ``log_start_offset`` (retention, DeleteRecords): what lies below
        is gone, in flight or not."""
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            del self.records[offset]
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)
        self._advance()

    # ------------------------------------------------------------------ persistence

    def state_batches(self) -> list[StateBatch]:
        """The in-flight records as runs of one state and delivery count (acquired as available)."""
        batches: list[StateBatch] = []
        for offset in range(self.start_offset, self.end_offset):
            record = self.records[offset]
            state = self._persisted_state(record)
            last = batches[-1] if batches else None
            if last is not None and last.last_offset == offset - 1 and \
                    (last.state, last.delivery_count) == (state, record.delivery_count):
                batches[-1] = StateBatch(last.first_offset, offset, state, record.delivery_count)
            else:
                batches.append(StateBatch(offset, offset, state, record.delivery_count))
        return batches

    def persisted(self) -> tuple[int, list[StateBatch]]:
        """The start offset and state batches to write: :meth:`state_batches` without the
        acknowledged and archived ones at the front (pending acknowledgements included), the
        start past them."""
        batches = self.state_batches()
        start = self.start_offset
        while batches and batches[0].state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            start = batches.pop(0).last_offset + 1
        return start, batches

    @classmethod
    def restore(cls, start_offset: int, batches: Iterable[StateBatch], **limits: int) -> "SharePartition":
        """The share-partition as persisted: ``start_offset`` and its state batches (those below the
        start are done with; an offset no batch names, below the last one's, is available and
        never delivered; an available one delivered as often as the limit allows, held when the
        last leader stopped, is archived)."""
        partition = cls(start_offset, **limits)
        for batch in batches:
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                state = RecordState.AVAILABLE if batch.state is RecordState.ACQUIRED else RecordState(batch.state)
                if state is RecordState.AVAILABLE and batch.delivery_count >= partition.delivery_count_limit:
                    state = RecordState.ARCHIVED      # held at its last delivery when its leader changed
                partition.records[offset] = InFlight(state, batch.delivery_count)
                partition.end_offset = max(partition.end_offset, offset + 1)
        for offset in range(start_offset, partition.end_offset):
            partition.records.setdefault(offset, InFlight(RecordState.AVAILABLE, 0))
        partition._advance()
        return partition

    # ------------------------------------------------------------------ internals

    def _persisted_state(self, record: InFlight) -> RecordState:
        """What is written of a record: its pending acknowledgement's outcome, or available if acquired."""
        if record.pending == AcknowledgeType.ACCEPT:
            return RecordState.ACKNOWLEDGED
        if record.pending == AcknowledgeType.RELEASE:
            return RecordState.ARCHIVED if record.delivery_count >= self.delivery_count_limit else RecordState.AVAILABLE
        if record.pending is not None:
            return RecordState.ARCHIVED
        return RecordState.AVAILABLE if record.state is RecordState.ACQUIRED else record.state

    def _apply(self, record: InFlight, kind: int) -> None:
        if kind == AcknowledgeType.ACCEPT:
            self._settle(record, RecordState.ACKNOWLEDGED)
        elif kind == AcknowledgeType.RELEASE:
            self._release(record)
        else:                                   # REJECT, or GAP: no record at the offset
            self._settle(record, RecordState.ARCHIVED)

    def _release(self, record: InFlight) -> None:
        """Back to available, or archived once delivered as often as the limit allows."""
        self._settle(record, RecordState.ARCHIVED if record.delivery_count >= self.delivery_count_limit
                     else RecordState.AVAILABLE)

    @staticmethod
    def _settle(record: InFlight, state: RecordState) -> None:
        record.state, record.member_id, record.lock_deadline_ms = state, None, -1

    def _advance(self) -> None:
        """Move the start past the acknowledged and archived records at the front."""
        while self.start_offset < self.end_offset and \
                self.records[self.start_offset].state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            del self.records[self.start_offset]
            self.start_offset += 1


_ACK_TYPES = frozenset(int(t) for t in AcknowledgeType)


def _extend(ranges: list[AcquiredRange], offset: int, delivery_count: int) -> None:
    """Add ``offset`` to the last range if it follows it with the same delivery count."""
    last = ranges[-1] if ranges else None
    if last is not None and last.last_offset == offset - 1 and last.delivery_count == delivery_count:
        ranges[-1] = AcquiredRange(last.first_offset, offset, delivery_count)
    else:
        ranges.append(AcquiredRange(offset, offset, delivery_count))
