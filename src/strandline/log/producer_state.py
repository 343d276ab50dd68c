"""Producer state of one partition's log (Kafka's ProducerStateManager).

Every replica keeps it, leader and follower alike, updated by each batch the log appends with a
producer id:

- **Idempotence.** For each producer id the log remembers the producer epoch and the metadata of
  its last five batches. A retried batch that matches one of them is answered with its original
  offsets instead of being appended again; a gap in sequence numbers is
  OUT_OF_ORDER_SEQUENCE_NUMBER; a batch from an older producer epoch is INVALID_PRODUCER_EPOCH.
- **Transactions (KIP-98).** A transactional data batch opens its producer's transaction at its
  offset, if none is open; a commit or abort marker closes it. The first offset of the oldest
  transaction not yet decided, or decided by a marker the high watermark has not passed yet, is
  the first unstable offset: the last stable offset is the lower of it and the high watermark.
  An abort becomes an :class:`AbortedTxn` for the transaction index (``log.txn_index``).
- **Transaction verification (KIP-890).** Before a leader appends a batch that would open a
  producer's transaction, it asks the transaction coordinator whether the partition is in that
  transaction. A :class:`VerificationGuard` per producer id marks such a question in flight; any
  transactional batch or marker appended for the producer clears it, so an answer that comes
  after a marker (or after another verified batch opened the transaction) no longer matches and
  its batch is refused. Guards are not part of snapshots: a replica that lost them asks again.
- **Snapshots.** The state is written to ``<offset>.snapshot`` files in Kafka's format (version 1:
  ``int16 version, uint32 CRC-32C of the rest, int32 count`` and per producer ``int64 producer
  id, int16 epoch, int32 last sequence, int64 last offset, int32 offset delta, int64 timestamp,
  int32 coordinator epoch, int64 first offset of its open transaction or -1``). A snapshot at
  offset N holds the state of the log below N; the log replays only the batches from N on.
  A snapshot keeps each producer's last batch, as Kafka's does.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c
from kio.schema.errors import ErrorCode

from strandline.protocol.markers import ABORT_MARKER, CONTROL_BIT, TRANSACTIONAL_BIT
from strandline.protocol.records import BatchHeader

MAX_CACHED_BATCHES = 5
SEQ_MOD = 1 << 31

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")          # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(ValueError):
    """A producer snapshot file failed its version, size or CRC check."""


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
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    coordinator_epoch: int = -1          # of the last transaction marker
    current_txn_first_offset: int = -1   # of its open transaction; -1: none open
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class AbortedTxn(NamedTuple):
    """One entry of a ``.txnindex``: an aborted transaction of ``producer_id`` from its first
    offset to its abort marker (``last_offset``), and the last stable offset once it was decided."""
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    """Outcome of checking one batch: append it, answer a duplicate, or refuse it."""

    error: ErrorCode = ErrorCode.none
    duplicate: BatchMetadata | None = None


APPEND = SequenceCheck()


class VerificationGuard:
    """A leader's question to the transaction coordinator in flight for one producer id on one
    partition (Kafka's ``VerificationGuard``): its batch may open a transaction only while the
    partition still holds this very guard (compared by identity)."""

    __slots__ = ("producer_id", "created_ms")

    def __init__(self, producer_id: int, created_ms: int) -> None:
        self.producer_id = producer_id
        self.created_ms = created_ms

    def __repr__(self) -> str:
        return f"VerificationGuard(producer id {self.producer_id}, since {self.created_ms} ms)"


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}                   # producer id -> first offset of its transaction
        #: decided transactions whose marker may still be above the high watermark:
        #: ``(marker offset, first offset)`` in marker order
        self.unreplicated: deque[tuple[int, int]] = deque()
        #: producer id -> the verification in flight of a batch that would open its transaction
        self.verifying: dict[int, VerificationGuard] = {}

    # -- the leader's checks -------------------------------------------------------------

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

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     transaction_version: int = 0) -> ErrorCode:
        """A transaction marker from a coordinator: refused from an older producer epoch
        (INVALID_PRODUCER_EPOCH) or an older coordinator (TRANSACTION_COORDINATOR_FENCED). A
        transactions v2 marker (``transaction_version`` 2, KIP-1228) carries the epoch its
        coordinator bumped at the end, above the transaction's: one of the current epoch is
        refused while a transaction of that epoch is open here (a late marker of the transaction
        before, which would end this one), and taken as a retry of the marker already written when
        none is (Kafka 4.2's KAFKA-19999)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return ErrorCode.none
        if producer_epoch < entry.epoch:
            return ErrorCode.invalid_producer_epoch
        if transaction_version >= 2 and producer_epoch == entry.epoch and entry.current_txn_first_offset >= 0:
            return ErrorCode.invalid_producer_epoch
        if coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.transaction_coordinator_fenced
        return ErrorCode.none

    # -- transaction verification (KIP-890) ------------------------------------------------

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether ``producer_id`` has a transaction open here of ``producer_epoch`` (Kafka's
        ``hasOngoingTransaction``): one of an older epoch does not count, its marker may be on its
        way (with transactions v2 every transaction has an epoch of its own, and the next one's
        first batch may come before the previous one's marker)."""
        entry = self.producers.get(producer_id)
        return producer_id in self.ongoing and entry is not None and entry.epoch == producer_epoch

    def maybe_start_verification(self, producer_id: int, producer_epoch: int,
                                 now_ms: int) -> VerificationGuard | None:
        """The guard a transactional batch of ``producer_id`` at ``producer_epoch`` must be
        appended under: None when its transaction is open here already (nothing to verify), else
        the guard in flight for it (a new one if none is)."""
        if self.has_ongoing_transaction(producer_id, producer_epoch):
            return None
        guard = self.verifying.get(producer_id)
        if guard is None:
            guard = self.verifying[producer_id] = VerificationGuard(producer_id, now_ms)
        return guard

    def verified(self, header: BatchHeader, guard: VerificationGuard | None) -> bool:
        """May this transactional data batch be appended with ``guard`` (Kafka's check in
        ``analyzeAndValidateProducerState``)? Yes when its producer's transaction is open here, or
        when ``guard`` is the one still in flight for it."""
        if header.attributes & CONTROL_BIT or not header.attributes & TRANSACTIONAL_BIT:
            return True
        if self.has_ongoing_transaction(header.producer_id, header.producer_epoch):
            return True
        return guard is not None and self.verifying.get(header.producer_id) is guard

    # -- appends ---------------------------------------------------------------------------

    def update(self, header: BatchHeader, first_offset: int, timestamp: int,
               marker: tuple[int, int] | None = None) -> AbortedTxn | None:
        """Record a batch appended at ``first_offset`` (any replica's append, or a replay).

        ``marker`` is ``(marker type, coordinator epoch)`` of a control batch; an abort returns the
        transaction index entry it makes."""
        pid = header.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch != entry.epoch:
            # a new producer epoch: new sequences, but the coordinator epoch fence and an open
            # transaction (aborted by the marker of the new epoch) stay, as in Kafka
            entry = ProducerEntry(header.producer_epoch,
                                  coordinator_epoch=entry.coordinator_epoch if entry else -1,
                                  current_txn_first_offset=entry.current_txn_first_offset if entry else -1)
            self.producers[pid] = entry
        entry.last_timestamp = header.max_timestamp
        if header.attributes & TRANSACTIONAL_BIT:
            # a marker ended the transaction, or a batch opened it: a verification in flight
            # no longer stands for what the partition holds (Kafka's clearVerificationStateEntry)
            self.verifying.pop(pid, None)
        if header.attributes & CONTROL_BIT:
            return self._complete(pid, entry, first_offset, marker)
        # a batch the cleaner emptied opens nothing: its transaction's marker may be gone
        if header.attributes & TRANSACTIONAL_BIT and entry.current_txn_first_offset < 0 and header.records_count:
            entry.current_txn_first_offset = first_offset
            self.ongoing[pid] = first_offset
        if header.base_sequence >= 0:
            entry.batches.append(BatchMetadata(
                header.base_sequence, header.last_sequence, first_offset,
                first_offset + header.last_offset_delta, timestamp))
        return None

    def _complete(self, pid: int, entry: ProducerEntry, offset: int,
                  marker: tuple[int, int] | None) -> AbortedTxn | None:
        if marker is None:
            return None                                 # another kind of control record
        kind, coordinator_epoch = marker
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        self.ongoing.pop(pid, None)
        if first < 0:
            # no data of it here (a partition added but not written to, or a marker written
            # twice): the transaction spans its marker only, as Kafka records it
            first = offset
        self.unreplicated.append((offset, first))
        if kind != ABORT_MARKER:
            return None
        return AbortedTxn(pid, first, offset, min(self.ongoing.values(), default=offset + 1))

    # -- the last stable offset ------------------------------------------------------------

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget decided transactions whose marker the high watermark passed."""
        unreplicated = self.unreplicated
        while unreplicated and unreplicated[0][0] < high_watermark:
            unreplicated.popleft()

    def last_stable_offset(self, high_watermark: int) -> int:
        """Below it every transaction is decided and its marker replicated (KIP-98)."""
        self.on_high_watermark_updated(high_watermark)
        lso = high_watermark
        if self.ongoing:
            lso = min(lso, min(self.ongoing.values()))
        if self.unreplicated:
            lso = min(lso, min(first for _, first in self.unreplicated))
        return lso

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The state in Kafka's producer snapshot format (each producer's last batch)."""
        body = bytearray(struct.pack(">i", len(self.producers)))
        for pid, entry in self.producers.items():
            last = entry.batches[-1] if entry.batches else None
            body += _SNAPSHOT_ENTRY.pack(
                pid, entry.epoch,
                last.last_seq if last else -1,
                last.last_offset if last else -1,
                last.last_seq - last.first_seq if last else 0,
                entry.last_timestamp,
                entry.coordinator_epoch, entry.current_txn_first_offset)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(bytes(body))) + bytes(body)

    def load(self, data: bytes) -> None:
        """Replace the state with a snapshot's (CorruptSnapshotError if it does not check)."""
        if len(data) < _SNAPSHOT_HEAD.size:
            raise CorruptSnapshotError(f"producer snapshot of {len(data)} bytes is too short")
        version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"producer snapshot version {version} is not {SNAPSHOT_VERSION}")
        if len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size or count < 0:
            raise CorruptSnapshotError(f"producer snapshot of {len(data)} bytes does not hold {count} entries")
        if crc32c.crc32c(data[6:]) != crc:
            raise CorruptSnapshotError("producer snapshot fails its CRC check")
        self.clear()
        for i in range(count):
            pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn_first = \
                _SNAPSHOT_ENTRY.unpack_from(data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size)
            entry = ProducerEntry(epoch, coordinator_epoch=coordinator_epoch,
                                  current_txn_first_offset=txn_first, last_timestamp=timestamp)
            if last_seq >= 0:
                entry.batches.append(BatchMetadata(last_seq - delta, last_seq, last_offset - delta,
                                                   last_offset, timestamp))
            self.producers[pid] = entry
            if txn_first >= 0:
                self.ongoing[pid] = txn_first

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers without an open transaction whose last batch is older than
        ``expiration_ms`` (Kafka's producer.id.expiration.ms); returns how many."""
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        for pid in [p for p, g in self.verifying.items() if now_ms - g.created_ms >= expiration_ms]:
            del self.verifying[pid]
        return len(expired)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verifying.clear()

    @property
    def empty(self) -> bool:
        return not self.producers


def snapshot_offset(name: str) -> int | None:
    """The offset of a ``<offset, 20 digits>.snapshot`` file name; None for other names."""
    if name.endswith(SNAPSHOT_SUFFIX):
        stem = name[:-len(SNAPSHOT_SUFFIX)]
        if stem.isdigit():
            return int(stem)
    return None
