"""A transactional id's state as the transaction coordinator keeps it (Kafka's ``TransactionMetadata``).

A :class:`TransactionMetadata` is a value: a change makes a new one, which the coordinator writes
to ``__transaction_state`` and adopts once written. Its state changes only through
:meth:`TransactionMetadata.transition_to`, which checks :data:`VALID_PREVIOUS_STATES` (Kafka's
``TransactionMetadata.validPreviousStates``, Kafka 4.x: a transaction of ``transaction.version`` 2 may
also be aborted from Empty, CompleteCommit and CompleteAbort, an abort with no partition) and raises
:class:`~strandline.errors.BrokenInvariant` on a transition the table does not allow, where Kafka's
``prepareTransitionTo`` throws. Writing the current state again (the coordinator does, before it
answers from or acts on a state it loaded or kept) is no transition: the state stays as it is.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from strandline.errors import BrokenInvariant


class TransactionState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids, as written in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(w.capitalize() for w in self.name.split("_"))


_S = TransactionState
#: the states a transaction may enter each state from (Kafka's ``TransactionState.validPreviousStates``;
#: PrepareAbort from Empty, CompleteCommit and CompleteAbort is KIP-890's abort of a transaction
#: version 2 client that added no partition)
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT,
                                 _S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id's state, as the coordinator keeps it and the log records it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    update_ms: int = -1
    start_ms: int = -1
    #: the epoch before a bump the producer asked for itself (KIP-360), so that a retry of that
    #: InitProducerId gets the same answer; -1 after a bump that fenced another instance. Not logged.
    last_epoch: int = field(default=-1, compare=False)
    #: transaction version 2 (KIP-890): the producer id this one replaced when its epochs ran out
    #: at an EndTxn, so that a retry of that EndTxn is known; -1 if none. Logged in value v1 (tag 0).
    previous_producer_id: int = field(default=-1, compare=False)
    #: transaction version 2: the producer id a prepared transaction's producer gets once it is
    #: complete, its epochs having run out; -1: it keeps its id. Logged in value v1 (tag 1).
    next_producer_id: int = field(default=-1, compare=False)
    #: whether the client of the transaction's last EndTxn spoke transaction version 2 (EndTxn
    #: v5+), or of a partition a leader added for one: the producer epoch is bumped at each commit or
    #: abort. Such a transaction is logged as value v1 (tag 2, the client transaction version 2).
    tv2: bool = field(default=False, compare=False)

    def transition_to(self, state: TransactionState, **changes: Any) -> TransactionMetadata:
        """This transaction moved to ``state``, with ``changes`` to its other fields; a transition
        :data:`VALID_PREVIOUS_STATES` does not allow is a broken invariant of the coordinator."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise BrokenInvariant(
                f"transactional id {self.transactional_id} (producer id {self.producer_id}, epoch "
                f"{self.producer_epoch}) cannot move from {self.state.kafka_name} to {state.kafka_name}: "
                f"{state.kafka_name} follows only "
                f"{', '.join(sorted(s.kafka_name for s in VALID_PREVIOUS_STATES[state]))}")
        return dataclasses.replace(self, state=state, **changes)
