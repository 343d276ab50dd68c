"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionStateManager).

The broker leading partition ``abs(hash(transactional.id)) % 50`` of ``__transaction_state``
coordinates that id's transactions. Every state change is first written to that partition
(acks=all) and takes effect once written; a change in flight makes other requests for the id
answer CONCURRENT_TRANSACTIONS, which clients retry.

- InitProducerId gives the id a producer id (new, or the same with its epoch bumped, which fences
  an older producer instance). A transaction still ongoing is aborted first, with the epoch bumped
  so that its zombie cannot write any more.
- AddPartitionsToTxn and AddOffsetsToTxn add partitions: the transaction is then Ongoing.
- AddPartitionsToTxn v4 with ``verify_only`` (KIP-890, from a partition leader about to append a
  transaction's first batch) only asks whether partitions are in the producer's ongoing
  transaction: answered from the coordinator's state, nothing written.
- EndTxn writes PrepareCommit or PrepareAbort and answers; the coordinator then has the leader of
  every partition append a commit or abort marker (WriteTxnMarkers), and writes CompleteCommit or
  CompleteAbort once all have.
- A transaction open longer than its ``transaction.timeout.ms`` is aborted the same way.
- A broker that becomes leader of a ``__transaction_state`` partition replays it and completes
  every transaction it finds prepared.

Every change of a transaction's state goes through ``TransactionMetadata.transition_to``, which
checks Kafka's table of valid previous states (:mod:`strandline.transaction.metadata`).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.transaction import records as rec
from strandline.transaction.metadata import TransactionMetadata, TransactionState as S
from strandline.transaction.records import MAX_PRODUCER_EPOCH

#: ``append(index, records, done(error, now_ms), now_ms)``: write to a ``__transaction_state`` partition.
Append = Callable[[int, list[tuple[bytes, bytes | None]], Callable[[ErrorCode, int], list[Effect]], int], list[Effect]]
#: ``new_producer_id(callback(producer_id or -1, now_ms), now_ms)``
NewProducerId = Callable[[Callable[[int, int], list[Effect]], int], list[Effect]]
#: ``send_markers(partitions, producer_id, producer_epoch, commit, coordinator_epoch, done(now_ms), current(),
#: now_ms, transaction_version=...)``: ``current()`` says whether the markers are still this
#: coordinator's to write; ``transaction_version`` is the client's (2 for transactions v2)
SendMarkers = Callable[..., list[Effect]]
#: ``after(due_ms, action(now_ms))``: run ``action`` later (a retry)
After = Callable[[int, Callable[[int], list[Effect]]], list[Effect]]
RETRY_MS = 100

PREPARED = (S.PREPARE_COMMIT, S.PREPARE_ABORT)


class TransactionCoordinator:
    def __init__(self, config: Any, append: Append, new_producer_id: NewProducerId,
                 send_markers: SendMarkers, after: After) -> None:
        self.config = config
        self.after = after
        self.append = append
        self.new_producer_id = new_producer_id
        self.send_markers = send_markers
        self.partitions = config["transaction.state.log.num.partitions"]
        self.owned: dict[int, int] = {}              # partition -> coordinator epoch (its leader epoch)
        self.transactions: dict[str, TransactionMetadata] = {}
        self.pending: set[str] = set()               # ids with a state change being written

    # -- ownership

    def partition_of(self, transactional_id: str) -> int:
        return rec.partition_of(transactional_id, self.partitions)

    def coordinator_epoch(self, transactional_id: str) -> int | None:
        return self.owned.get(self.partition_of(transactional_id))

    def load_partition(self, index: int, coordinator_epoch: int, records: Any, now_ms: int) -> list[Effect]:
        """Become coordinator of a partition: replay it (the newest value of each id wins), then
        finish every transaction that was prepared."""
        loaded: dict[str, TransactionMetadata | None] = {}
        for _, key, value in records:
            if key is None:
                continue
            try:
                transactional_id = rec.decode_key(key)
                loaded[transactional_id] = None if value is None else rec.decode_value(transactional_id, value)
            except (ValueError, IndexError, struct.error) as exc:
                return [LogLine("warning",
                            f"Skipping an unreadable record of {rec.TRANSACTION_STATE_TOPIC}-{index}: {exc}")]
        self.owned[index] = coordinator_epoch
        effects: list[Effect] = []
        for transactional_id, m in loaded.items():
            if m is None:
                self.transactions.pop(transactional_id, None)
                continue
            self.transactions[transactional_id] = m
            if m.state in PREPARED:
                effects.extend(self._resume_prepared(m, coordinator_epoch, now_ms))
        if loaded:
            effects.append(LogLine("info", f"Coordinator of the transactions of {rec.TRANSACTION_STATE_TOPIC}-{index} "
                                       f"({len(loaded)} transactional id(s) loaded)"))
        return effects

    def _resume_prepared(self, m: TransactionMetadata, coordinator_epoch: int, now_ms: int) -> list[Effect]:
        """A transaction found prepared when loading: its Prepare record may be above the high
        watermark and vanish with the log's tail (the next coordinator would then see it ongoing
        and abort it after markers of a commit went out), so it is written again first, and its
        markers sent once that write is acknowledged."""
        index = self.partition_of(m.transactional_id)

        def rewritten(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is ErrorCode.none:
                return self._complete(again, m.state is S.PREPARE_COMMIT, when_ms)
            if self.owned.get(index) != coordinator_epoch or self.transactions.get(m.transactional_id) is not m:
                return []
            return self.after(when_ms + RETRY_MS, lambda t: self._resume_prepared(m, coordinator_epoch, t))

        again = dataclasses.replace(m, update_ms=now_ms)
        return self._write(again, rewritten, now_ms)

    def unload_partition(self, index: int) -> list[Effect]:
        self.owned.pop(index, None)
        for transactional_id in [t for t in self.transactions if self.partition_of(t) == index]:
            del self.transactions[transactional_id]
            self.pending.discard(transactional_id)
        return []

    # -- writing a state change

    def _write(self, new: TransactionMetadata, done: Callable[[ErrorCode, int], list[Effect]],
               now_ms: int) -> list[Effect]:
        """Write ``new`` and make it the id's state once the ISR has it; ``done(error, now_ms)``."""
        transactional_id = new.transactional_id
        index = self.partition_of(transactional_id)
        epoch = self.owned.get(index)
        self.pending.add(transactional_id)

        def written(error: ErrorCode, when_ms: int) -> list[Effect]:
            self.pending.discard(transactional_id)
            if self.owned.get(index) != epoch:      # no longer (or again) coordinator meanwhile
                return done(ErrorCode.not_coordinator, when_ms)
            if error is ErrorCode.none:
                self.transactions[transactional_id] = new
            return done(error, when_ms)

        return self.append(index, [rec.state_record(new)], written, now_ms)

    def _confirm(self, m: TransactionMetadata, respond: Callable[[ErrorCode], list[Effect]],
                 now_ms: int) -> list[Effect]:
        """Answer a request the id's state already satisfies (partitions added already, an end
        retried) only once that state is written again: what this coordinator knows may be lost
        yet (loaded from records above the high watermark) or stale (a deposed leader of the
        partition, cut off, that has not heard so); either way the write fails. Answered from
        memory, a transaction was acknowledged whose partitions no later coordinator knew, and a
        commit of the next transaction of the same producer epoch taken for a retry of this one:
        the new transaction's records never got a marker (sim explore --config txn, seeds 7, 39)."""
        return self._write(dataclasses.replace(m, update_ms=now_ms), lambda e, t: respond(_coordinator_error(e)),
                           now_ms)

    def _checked(self, transactional_id: str | None) -> ErrorCode | None:
        if not transactional_id:
            return ErrorCode.invalid_request
        if self.partition_of(transactional_id) not in self.owned:
            return ErrorCode.not_coordinator
        return None

    def _refused(self, m: TransactionMetadata | None, producer_id: int, producer_epoch: int) -> ErrorCode | None:
        """Kafka's checks of a client's producer id and epoch against the id's state."""
        if m is None or m.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if producer_epoch != m.producer_epoch:
            return ErrorCode.producer_fenced
        if m.transactional_id in self.pending or m.state in PREPARED or m.state is S.PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions
        return None

    # -- InitProducerId

    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         respond: Callable[[ErrorCode, int, int], list[Effect]], now_ms: int,
                         expected: tuple[int, int] = (-1, -1)) -> list[Effect]:
        """``expected``: the producer id and epoch a running producer re-initializes with (KIP-360,
        InitProducerId v3+); one that is not the current one (or its bump's retry) is a zombie:
        PRODUCER_FENCED, and the live producer keeps its epoch."""
        error = self._checked(transactional_id)
        if error is not None:
            return respond(error, -1, -1)
        if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
            return respond(ErrorCode.invalid_transaction_timeout, -1, -1)
        m = self.transactions.get(transactional_id)
        if m is None:
            def allocated(producer_id: int, when_ms: int) -> list[Effect]:
                if producer_id < 0:
                    return respond(ErrorCode.coordinator_not_available, -1, -1)
                if transactional_id not in self.transactions:
                    self.transactions[transactional_id] = TransactionMetadata(
                        transactional_id, producer_id, rec.NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY, set(), when_ms)
                return self.init_producer_id(transactional_id, timeout_ms, respond, when_ms)
            return self.new_producer_id(allocated, now_ms)
        if transactional_id in self.pending or m.state in PREPARED or m.state is S.PREPARE_EPOCH_FENCE:
            return respond(ErrorCode.concurrent_transactions, -1, -1)
        if expected[0] >= 0:
            if m.last_epoch >= 0 and (m.producer_id, m.last_epoch) == expected:
                return respond(ErrorCode.none, m.producer_id, m.producer_epoch)    # a retried bump
            if (m.producer_id, m.producer_epoch) != expected:
                return respond(ErrorCode.producer_fenced, -1, -1)
        if m.state is S.ONGOING:
            # a new instance of the producer: fence the old one and abort what it left open
            return self._fence_and_abort(m, now_ms) + respond(ErrorCode.concurrent_transactions, -1, -1)
        if m.producer_epoch + 1 >= MAX_PRODUCER_EPOCH:
            def renewed(producer_id: int, when_ms: int) -> list[Effect]:
                if producer_id < 0:
                    return respond(ErrorCode.coordinator_not_available, -1, -1)
                return self._write_empty(dataclasses.replace(m, producer_id=producer_id, producer_epoch=0,
                                                             last_epoch=-1),
                                         timeout_ms, respond, when_ms)
            return self.new_producer_id(renewed, now_ms)
        last = m.producer_epoch if expected[0] >= 0 else -1
        return self._write_empty(dataclasses.replace(m, producer_epoch=m.producer_epoch + 1, last_epoch=last),
                                 timeout_ms, respond, now_ms)

    def _write_empty(self, base: TransactionMetadata, timeout_ms: int,
                     respond: Callable[[ErrorCode, int, int], list[Effect]], now_ms: int) -> list[Effect]:
        new = base.transition_to(S.EMPTY, timeout_ms=timeout_ms, partitions=set(), update_ms=now_ms, start_ms=-1)

        def done(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is not ErrorCode.none:
                return respond(_coordinator_error(error), -1, -1)
            return respond(ErrorCode.none, new.producer_id, new.producer_epoch)

        return self._write(new, done, now_ms)

    # -- AddPartitionsToTxn, AddOffsetsToTxn

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: set[tuple[str, int]], respond: Callable[[ErrorCode], list[Effect]],
                       now_ms: int, tv2: bool = False) -> list[Effect]:
        """``tv2``: a partition leader adds the partitions for a client of transaction version 2
        (AddPartitionsToTxn v5 without ``verify_only``, KIP-890 part 2): the transaction is then
        one whose epoch is bumped twice when it is aborted for it (:meth:`_fence_and_abort`)."""
        error = self._checked(transactional_id)
        m = self.transactions.get(transactional_id) if error is None else None
        if error is None:
            error = self._refused(m, producer_id, producer_epoch)
        if error is not None:
            return respond(error)
        assert m is not None
        if m.state is S.ONGOING and partitions <= m.partitions and (m.tv2 or not tv2):
            return self._confirm(m, respond, now_ms)             # added already (a retry)
        new = m.transition_to(S.ONGOING, partitions=m.partitions | partitions, update_ms=now_ms,
                              start_ms=m.start_ms if m.state is S.ONGOING else now_ms, tv2=m.tv2 or tv2)
        return self._write(new, lambda e, t: respond(_coordinator_error(e)), now_ms)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: set[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4 ``verify_only`` (Kafka's ``handleVerifyPartitionsInTransaction``):
        each partition NONE when it is in the transaction this producer id and epoch have open,
        else INVALID_TXN_STATE; every partition the same error when the id is not this broker's
        (NOT_COORDINATOR), unknown or of another producer id (INVALID_PRODUCER_ID_MAPPING), of
        another epoch (PRODUCER_FENCED) or being decided (CONCURRENT_TRANSACTIONS). Nothing is
        written: a partition is in the state once its AddPartitionsToTxn was written, and leaves
        it when the transaction's end is. A state change being written is not waited for, as in
        Kafka: the leader's append re-checks against its own producer state."""
        error = self._checked(transactional_id)
        m = self.transactions.get(transactional_id) if error is None else None
        if error is None:
            if m is None or m.producer_id != producer_id:
                error = ErrorCode.invalid_producer_id_mapping
            elif m.producer_epoch != producer_epoch:
                error = ErrorCode.producer_fenced
            elif m.state in PREPARED:
                error = ErrorCode.concurrent_transactions
        if error is not None:
            return {tp: error for tp in partitions}
        assert m is not None
        return {tp: ErrorCode.none if m.state is S.ONGOING and tp in m.partitions else ErrorCode.invalid_txn_state
                for tp in partitions}

    # -- EndTxn

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                        respond: Callable[[ErrorCode], list[Effect]], now_ms: int) -> list[Effect]:
        error = self._checked(transactional_id)
        m = self.transactions.get(transactional_id) if error is None else None
        if error is None and (m is None or m.producer_id != producer_id):
            error = ErrorCode.invalid_producer_id_mapping
        elif error is None and m is not None and producer_epoch != m.producer_epoch:
            error = ErrorCode.producer_fenced
        elif error is None and transactional_id in self.pending:
            error = ErrorCode.concurrent_transactions
        if error is not None:
            return respond(error)
        assert m is not None
        wanted = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        preparing = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if m.state is wanted:
            return self._confirm(m, respond, now_ms)             # a retry of what was done
        if m.state is preparing:
            return respond(ErrorCode.concurrent_transactions)
        if m.state is not S.ONGOING:
            return respond(ErrorCode.invalid_txn_state)
        return self._prepare(m, commit, m.producer_epoch, lambda e, t: respond(_coordinator_error(e)), now_ms)

    def end_transaction_v2(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                           respond: Callable[[ErrorCode, int, int], list[Effect]], now_ms: int) -> list[Effect]:
        """EndTxn v5+, transaction version 2 (KIP-890 part 2, Kafka's ``endTransaction``): every
        commit and abort bumps the producer epoch. The markers carry the bumped epoch, and the
        answer, ``respond(error, producer id, producer epoch)``, gives the client those of its next
        transaction: the bumped epoch, or a new producer id at epoch 0 once the epochs ran out. A
        retry comes with the epoch before the bump (or the old producer id at the last epoch); an
        abort needs no ongoing transaction. As Kafka's table, where ``retry`` is such an epoch:

            state            abort retry   abort current   commit retry   commit current
            Empty            PRODUCER_FENCED  bumped       PRODUCER_FENCED  INVALID_TXN_STATE
            CompleteAbort    NONE          bumped          INVALID_TXN_STATE  INVALID_TXN_STATE
            CompleteCommit   INVALID_TXN_STATE  bumped     NONE           INVALID_TXN_STATE
        """
        error = self._checked(transactional_id)
        if error is not None:
            return respond(error, -1, -1)
        m = self.transactions.get(transactional_id)
        if m is None:
            return respond(ErrorCode.invalid_producer_id_mapping, -1, -1)
        retry_on_overflow = m.previous_producer_id == producer_id and m.producer_epoch == 0 and \
            producer_epoch == MAX_PRODUCER_EPOCH - 1
        retry_on_bump = m.producer_epoch == producer_epoch + 1
        if m.state in PREPARED:
            valid = retry_on_bump
        elif m.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid = retry_on_bump or retry_on_overflow or producer_epoch == m.producer_epoch
        else:
            valid = producer_epoch == m.producer_epoch
        if m.producer_id != producer_id and not retry_on_overflow:
            return respond(ErrorCode.invalid_producer_id_mapping, -1, -1)
        if not valid:
            return respond(ErrorCode.producer_fenced, -1, -1)
        if transactional_id in self.pending:
            return respond(ErrorCode.concurrent_transactions, -1, -1)
        retry = retry_on_bump or retry_on_overflow
        done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        if m.state is S.ONGOING or (not commit and not retry and m.state in (S.EMPTY, S.COMPLETE_ABORT,
                                                                             S.COMPLETE_COMMIT)):
            return self._prepare_v2(m, commit, respond, now_ms)
        if m.state is done and retry:                            # a retry of what was done
            return self._confirm(m, lambda e: respond(e, *((m.producer_id, m.producer_epoch)
                                                           if e is ErrorCode.none else (-1, -1))), now_ms)
        if m.state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            return respond(ErrorCode.concurrent_transactions, -1, -1)
        return respond(ErrorCode.invalid_txn_state, -1, -1)

    def _prepare_v2(self, m: TransactionMetadata, commit: bool, respond: Callable[[ErrorCode, int, int], list[Effect]],
                    now_ms: int) -> list[Effect]:
        """Write PrepareCommit or PrepareAbort with the producer epoch bumped (and, when that was
        its last epoch, the producer id the producer gets next), answer, then send the markers."""
        def prepare(next_producer_id: int, when_ms: int) -> list[Effect]:
            if self.transactions.get(m.transactional_id) is not m or m.transactional_id in self.pending:
                return respond(ErrorCode.concurrent_transactions, -1, -1)
            if exhausted and next_producer_id < 0:
                return respond(ErrorCode.coordinator_not_available, -1, -1)
            new = m.transition_to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, producer_epoch=m.producer_epoch + 1,
                                  last_epoch=m.producer_epoch, next_producer_id=next_producer_id, tv2=True,
                                  update_ms=when_ms, start_ms=m.start_ms if m.state is S.ONGOING else when_ms)

            def prepared(error: ErrorCode, at_ms: int) -> list[Effect]:
                if error is not ErrorCode.none:
                    return respond(_coordinator_error(error), -1, -1)
                if new.next_producer_id >= 0:
                    return respond(ErrorCode.none, new.next_producer_id, 0) + self._complete(new, commit, at_ms)
                return respond(ErrorCode.none, new.producer_id, new.producer_epoch) + self._complete(new, commit, at_ms)

            return self._write(new, prepared, when_ms)

        exhausted = m.producer_epoch + 1 >= MAX_PRODUCER_EPOCH
        if exhausted:
            return self.new_producer_id(prepare, now_ms)
        return prepare(-1, now_ms)

    def _prepare(self, m: TransactionMetadata, commit: bool, epoch: int,
                 answered: Callable[[ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        new = m.transition_to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, producer_epoch=epoch, update_ms=now_ms)

        def prepared(error: ErrorCode, when_ms: int) -> list[Effect]:
            effects = answered(error, when_ms)
            if error is ErrorCode.none:
                effects += self._complete(new, commit, when_ms)
            return effects

        return self._write(new, prepared, now_ms)

    def _fence_and_abort(self, m: TransactionMetadata, now_ms: int) -> list[Effect]:
        """Abort an ongoing transaction with the producer epoch bumped (a timeout, or a new instance
        of its producer): markers of the new epoch fence the old producer on every partition."""
        bump = 2 if m.tv2 else 1
        if m.producer_epoch + bump >= MAX_PRODUCER_EPOCH:
            epoch = m.producer_epoch                  # the next InitProducerId gives a new producer id
        else:
            # transaction version 2 (Kafka's fence, then the abort's own bump): the epoch the
            # client holds is then neither the current one nor the one before it, so its EndTxn is
            # PRODUCER_FENCED rather than taken for a retry of this abort
            epoch = m.producer_epoch + bump
        return self._prepare(m, False, epoch, lambda e, t: [], now_ms)

    def _complete(self, m: TransactionMetadata, commit: bool, now_ms: int) -> list[Effect]:
        """Have every partition's leader write the markers, then record the outcome."""
        epoch = self.owned.get(self.partition_of(m.transactional_id))
        if epoch is None:
            return []
        self.pending.add(m.transactional_id)

        def current() -> bool:
            return self.transactions.get(m.transactional_id) is m and \
                self.owned.get(self.partition_of(m.transactional_id)) == epoch

        def record_end(when_ms: int) -> list[Effect]:
            """Write CompleteCommit/CompleteAbort; again after a failed write (NOT_ENOUGH_REPLICAS, a
            timeout), as Kafka retries, until it is written or this broker is coordinator no more."""
            if not current():
                self.pending.discard(m.transactional_id)
                return []
            renewed: dict[str, Any] = {}
            if m.next_producer_id >= 0:         # transaction version 2, its epochs ran out
                renewed = {"producer_id": m.next_producer_id, "producer_epoch": 0,
                           "previous_producer_id": m.producer_id, "next_producer_id": -1}
            done = m.transition_to(S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, partitions=set(),
                                   update_ms=when_ms, **renewed)

            def written(error: ErrorCode, at_ms: int) -> list[Effect]:
                if error is ErrorCode.none or not current():
                    return []
                self.pending.add(m.transactional_id)
                return [LogLine("warning", f"Could not record the end of transaction {m.transactional_id} "
                                       f"({error.name}); trying again")] + \
                    self.after(at_ms + RETRY_MS, record_end)

            return self._write(done, written, when_ms)

        def marked(when_ms: int) -> list[Effect]:
            self.pending.discard(m.transactional_id)
            return record_end(when_ms)

        if not m.partitions:
            return marked(now_ms)
        return self.send_markers(set(m.partitions), m.producer_id, m.producer_epoch, commit, epoch, marked, current,
                                 now_ms, transaction_version=2 if m.tv2 else 0)

    # -- timeouts

    def abort_timed_out(self, now_ms: int) -> list[Effect]:
        """Abort every ongoing transaction older than its timeout (Kafka's periodic check)."""
        effects: list[Effect] = []
        for m in list(self.transactions.values()):
            if m.state is S.ONGOING and m.transactional_id not in self.pending and \
                    m.start_ms >= 0 and m.start_ms + m.timeout_ms < now_ms:
                effects.append(LogLine("info", f"Aborting transaction {m.transactional_id} (producer id {m.producer_id}), "
                                           f"open longer than its timeout of {m.timeout_ms} ms"))
                effects.extend(self._fence_and_abort(m, now_ms))
        return effects

    # -- describing (ListTransactions, DescribeTransactions)

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)


def _coordinator_error(error: ErrorCode) -> ErrorCode:
    """What a failed write of the transaction log tells the client (as Kafka maps it)."""
    if error in (ErrorCode.none, ErrorCode.not_coordinator, ErrorCode.concurrent_transactions):
        return error
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition):
        return ErrorCode.not_coordinator
    return ErrorCode.coordinator_not_available
