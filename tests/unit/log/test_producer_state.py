"""Idempotent producer state: duplicates answered with original offsets, gaps and stale epochs refused (PRO-1)."""

from kio.schema.errors import ErrorCode

from strandline.log.producer_state import ProducerStateManager
from strandline.protocol.records import BatchHeader


def header(pid=7, epoch=0, seq=0, count=5, base_offset=0):
    return BatchHeader(base_offset, 100, 0, 2, 0, 0, count - 1, 0, 0, pid, epoch, seq, count)


def test_pro_1_in_order_batches_append():
    s = ProducerStateManager()
    assert s.check(header(seq=0)).error is ErrorCode.none
    s.update(header(seq=0), 0, 1)
    assert s.check(header(seq=5)).error is ErrorCode.none and s.check(header(seq=5)).duplicate is None


def test_pro_1_retried_batch_is_a_duplicate_with_its_original_offsets():
    s = ProducerStateManager()
    for i in range(3):
        s.update(header(seq=5 * i), 100 + 5 * i, 1)
    dup = s.check(header(seq=5)).duplicate
    assert dup is not None and (dup.first_offset, dup.last_offset) == (105, 109)


def test_pro_1_only_the_last_five_batches_are_remembered():
    s = ProducerStateManager()
    for i in range(7):
        s.update(header(seq=5 * i), 5 * i, 1)
    assert s.check(header(seq=0)).error is ErrorCode.out_of_order_sequence_number
    assert s.check(header(seq=10)).duplicate is not None


def test_pro_1_sequence_gap_is_out_of_order():
    s = ProducerStateManager()
    s.update(header(seq=0), 0, 1)
    assert s.check(header(seq=7)).error is ErrorCode.out_of_order_sequence_number


def test_pro_1_stale_epoch_is_fenced_and_new_epoch_restarts_at_zero():
    s = ProducerStateManager()
    s.update(header(epoch=3, seq=0), 0, 1)
    assert s.check(header(epoch=2, seq=5)).error is ErrorCode.invalid_producer_epoch
    assert s.check(header(epoch=4, seq=3)).error is ErrorCode.out_of_order_sequence_number
    assert s.check(header(epoch=4, seq=0)).error is ErrorCode.none


def test_sequence_numbers_wrap():
    s = ProducerStateManager()
    s.update(header(seq=2**31 - 5, count=5), 0, 1)
    assert s.check(header(seq=0)).error is ErrorCode.none


def test_a_snapshot_keeps_each_producers_last_batch_epoch_and_open_transaction():
    s = ProducerStateManager()
    s.update(header(seq=0, base_offset=0), 0, 1)
    s.update(header(seq=5, base_offset=10), 10, 2)
    txn = header(pid=9, epoch=2, seq=0, base_offset=20)._replace(attributes=0x10)
    s.update(txn, 20, 3)
    loaded = ProducerStateManager()
    loaded.load(s.snapshot())
    assert loaded.check(header(seq=5)).duplicate.first_offset == 10       # the last batch is kept
    assert loaded.check(header(seq=0)).error is ErrorCode.out_of_order_sequence_number
    assert loaded.check(header(seq=10)).error is ErrorCode.none
    assert loaded.producers[9].epoch == 2 and loaded.ongoing == {9: 20}
    assert loaded.last_stable_offset(100) == 20


def test_a_transactional_batch_the_cleaner_emptied_opens_no_transaction():
    """Its marker may have been removed by a later cleaning: it must not hold the last stable offset."""
    s = ProducerStateManager()
    s.update(header(pid=9, seq=0, count=1)._replace(attributes=0x10, records_count=0), 0, 1)
    assert s.ongoing == {} and s.last_stable_offset(5) == 5
    s.update(header(pid=9, seq=1, count=1, base_offset=3)._replace(attributes=0x10), 3, 1)
    assert s.ongoing == {9: 3} and s.last_stable_offset(5) == 3


def test_a_verification_guard_stands_until_a_transactional_batch_or_marker_of_its_producer():
    """KIP-890: a leader verifying a batch that would open a transaction holds a guard per
    producer; the batch appends only under that very guard. A marker (or a batch that opened the
    transaction) clears it, so a verification answered after them no longer counts."""
    from strandline.protocol.markers import ABORT_MARKER, CONTROL_BIT, TRANSACTIONAL_BIT
    txn = header(seq=0)._replace(attributes=TRANSACTIONAL_BIT)
    marker = header(seq=-1, count=1)._replace(attributes=TRANSACTIONAL_BIT | CONTROL_BIT)
    s = ProducerStateManager()
    guard = s.maybe_start_verification(7, 0, 100)
    assert guard is not None and s.maybe_start_verification(7, 0, 150) is guard      # one in flight per producer
    assert s.verified(txn, guard) and not s.verified(txn, None)
    assert s.verified(header(seq=0), None)                          # not transactional: nothing to verify
    s.update(marker, 0, 1, (ABORT_MARKER, 0))                       # the transaction ended meanwhile
    assert not s.verified(txn, guard)
    again = s.maybe_start_verification(7, 0, 200)
    assert again is not guard and not s.verified(txn, guard) and s.verified(txn, again)
    s.update(txn, 1, 1)                                             # opened the transaction
    assert s.maybe_start_verification(7, 0, 300) is None and s.verified(txn, None)  # open: nothing to verify
    assert not s.verifying
    s.maybe_start_verification(8, 0, 400)
    s.remove_expired(400 + 1000, 1000)                             # guards age out with producer.id.expiration.ms
    assert not s.verifying


def test_a_transaction_open_at_an_older_epoch_does_not_spare_the_next_epochs_batch_its_question():
    """Transactions v2 (KIP-890 part 2): each transaction has an epoch of its own, and the next
    transaction's first batch (epoch 1) may reach the leader before the previous one's marker
    (written with epoch 1 too). The open transaction of epoch 0 does not count for it (Kafka's
    ``hasOngoingTransaction``): the batch is verified (added) first, instead of joining the
    transaction whose commit marker is on its way. Sim explore --config txn with transactions v2,
    seed 10, saw that batch shown committed before its producer asked to commit."""
    from strandline.protocol.markers import TRANSACTIONAL_BIT
    s = ProducerStateManager()
    first = header(epoch=0, seq=0)._replace(attributes=TRANSACTIONAL_BIT)
    s.update(first, 0, 1)
    assert s.maybe_start_verification(7, 0, 100) is None                  # open at its epoch
    nxt = header(epoch=1, seq=0)._replace(attributes=TRANSACTIONAL_BIT)
    guard = s.maybe_start_verification(7, 1, 100)
    assert guard is not None and not s.verified(nxt, None) and s.verified(nxt, guard)


def test_a_transactions_v2_marker_of_the_current_epoch_ends_no_open_transaction():
    """KIP-1228 (WriteTxnMarkers v2): a transactions v2 marker carries the epoch the coordinator
    bumped at the end. Transaction A (epoch 0) ends with its marker at epoch 1; transaction B then
    opens at epoch 1. A late copy of A's marker (epoch 1) must not end B: refused as a v2 marker,
    though a v1 marker of that epoch is taken (the hole KIP-1228 closes). With no transaction
    open, a v2 marker of the current epoch is a retry of the one written, and is taken."""
    from strandline.protocol.markers import COMMIT_MARKER, CONTROL_BIT, TRANSACTIONAL_BIT
    s = ProducerStateManager()
    s.update(header(epoch=0, seq=0)._replace(attributes=TRANSACTIONAL_BIT), 0, 1)        # A opens
    assert s.check_marker(7, 1, 0, transaction_version=2) is ErrorCode.none
    s.update(header(epoch=1, seq=-1, count=1, base_offset=5)._replace(attributes=TRANSACTIONAL_BIT | CONTROL_BIT),
             5, 1, (COMMIT_MARKER, 0))                                                     # A's marker, epoch 1
    assert s.check_marker(7, 1, 0, transaction_version=2) is ErrorCode.none                # a retry: none open
    s.update(header(epoch=1, seq=0, base_offset=6)._replace(attributes=TRANSACTIONAL_BIT), 6, 1)  # B opens
    assert s.check_marker(7, 1, 0, transaction_version=2) is ErrorCode.invalid_producer_epoch
    assert s.check_marker(7, 1, 0, transaction_version=0) is ErrorCode.none
    assert s.check_marker(7, 2, 0, transaction_version=2) is ErrorCode.none                # B's own marker
    assert s.check_marker(7, 0, 0, transaction_version=2) is ErrorCode.invalid_producer_epoch
