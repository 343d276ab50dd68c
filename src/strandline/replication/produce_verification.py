"""A leader's side of transaction verification (KIP-890 part 1) and of transactions v2's implicit
adds (part 2: for a Produce v12 under ``transaction.version`` 2 the leader asks the coordinator to
add the partition, AddPartitionsToTxn v5, where the client sent no AddPartitionsToTxn).

Before a transactional batch opens its producer's transaction on a partition, the leader asks the
transaction coordinator whether the partition was added to that transaction (AddPartitionsToTxn v4
``verify_only``, through the :data:`VerifyTransaction` the broker wires in). This module finds the
partitions of a Produce request that need that question (:func:`verification_guards`) and turns the
coordinator's refusals into Produce answers (:func:`verification_error`). Pure."""

from __future__ import annotations

import struct
from typing import Callable, Iterable, Mapping, Protocol

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.log.producer_state import VerificationGuard
from strandline.protocol.markers import CONTROL_BIT, TRANSACTIONAL_BIT
from strandline.protocol.records import HEADER_SIZE, Buffer, read_header
from strandline.replication.partition import Partition
from strandline.replication.purgatory import ProduceResult

Key = tuple[str, int]


class VerifyTransaction(Protocol):
    """``verify(transactional id, producer id, producer epoch, partitions, done(errors, now_ms),
    now_ms, add)``: ask the coordinator whether the partitions are in the producer's transaction,
    or with ``add`` have them added to it."""

    def __call__(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[Key],
                 done: Callable[[dict[Key, ErrorCode], int], list[Effect]], now_ms: int,
                 add: bool = False) -> list[Effect]: ...


#: what the coordinator's answer to a verification means to a producer that cannot know those errors
#: from a Produce answer: retriable ones become NOT_ENOUGH_REPLICAS (as Kafka: a retry, no metadata refresh)
_UNVERIFIED_RETRIABLE = frozenset({ErrorCode.concurrent_transactions, ErrorCode.network_exception,
                                   ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                                   ErrorCode.not_coordinator})


def verification_guards(partitions: Mapping[Key, Partition], entries: Iterable[tuple[str, int, Buffer | None]],
                        now_ms: int) -> tuple[dict[Key, VerificationGuard], tuple[int, int]]:
    """The partitions of ``entries`` (topic, partition, records) whose transactional batch would
    open its producer's transaction, each with the guard its append needs (Kafka's
    ``partitionEntriesForVerification``), and that producer's id and epoch. A partition this broker
    does not lead, or whose records do not read as a transactional batch, is left to the append's
    own checks."""
    guards: dict[Key, VerificationGuard] = {}
    producer = (-1, -1)
    for topic, index, records in entries:
        partition = partitions.get((topic, index))
        if partition is None or not partition.is_leader or records is None or len(records) < HEADER_SIZE:
            continue
        try:
            header = read_header(records, 0)
        except (ValueError, struct.error):
            continue
        if header.magic != 2 or header.producer_id < 0 or not header.attributes & TRANSACTIONAL_BIT or \
                header.attributes & CONTROL_BIT:
            continue
        guard = partition.producer_state.maybe_start_verification(header.producer_id, header.producer_epoch,
                                                                   now_ms)
        if guard is not None:
            guards[(topic, index)] = guard
            producer = (header.producer_id, header.producer_epoch)
    return guards, producer


def verification_error(error: ErrorCode, tv2: bool = False) -> ProduceResult:
    """A Produce answer for a partition the coordinator did not confirm (Kafka's
    ``postVerificationCallback``): INVALID_TXN_STATE when the partition is not in the producer's
    transaction; the coordinator being unreachable, moving or busy deciding, NOT_ENOUGH_REPLICAS,
    which producers retry; its other errors (INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING)
    as they are. ``tv2``, a Produce v12 of transactions v2 (KIP-890 part 2), as Kafka 4.x answers
    it: TRANSACTION_ABORTABLE in place of INVALID_TXN_STATE (the client aborts and goes on), and
    CONCURRENT_TRANSACTIONS as it is (the client retries it; common while the previous
    transaction's markers are written)."""
    if error is ErrorCode.invalid_txn_state:
        return ProduceResult(ErrorCode.transaction_abortable if tv2 else error,
                             message="Partition was not added to the transaction")
    if tv2 and error is ErrorCode.concurrent_transactions:
        return ProduceResult(error)
    if error in _UNVERIFIED_RETRIABLE:
        return ProduceResult(ErrorCode.not_enough_replicas, message="Unable to verify the partition has been added "
                                                                    f"to the transaction. Underlying error: {error.name}")
    return ProduceResult(error)
