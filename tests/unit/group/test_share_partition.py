"""A share group's state of one partition (KIP-932): records handed out under locks, acknowledged
one by one, released, redelivered with rising delivery counts, archived at the limit; the start
offset moving past what is done with; the state batches a share coordinator persists."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.group.share.partition import (
    AcknowledgeType as Ack,
    AcquiredRange,
    RecordState,
    SharePartition,
    StateBatch,
)

LOCK = 30_000


def test_records_are_handed_out_once_each_under_a_lock_and_the_start_moves_past_the_accepted():
    sp = SharePartition(100)
    assert sp.next_fetch_offset() == 100
    assert sp.acquire("a", 100, 109, 500, 0) == [AcquiredRange(100, 109, 1)]
    assert sp.next_fetch_offset() == 110 and sp.end_offset == 110
    assert sp.acquire("b", 110, 114, 500, 0) == [AcquiredRange(110, 114, 1)]
    assert sp.acknowledge("a", [(100, 104, [Ack.ACCEPT])]) is ErrorCode.none
    assert sp.start_offset == 105                        # 100..104 are done with
    assert sp.acknowledge("a", [(107, 109, [Ack.ACCEPT])]) is ErrorCode.none
    assert sp.start_offset == 105                        # 105 and 106 still held
    assert sp.acknowledge("a", [(105, 106, [Ack.ACCEPT])]) is ErrorCode.none
    assert sp.start_offset == 110 and sp.in_flight() == 5


def test_only_the_holder_acknowledges_and_a_refused_acknowledgement_changes_nothing():
    sp = SharePartition(0)
    sp.acquire("a", 0, 4, 500, 0)
    sp.acquire("b", 5, 9, 500, 0)
    assert sp.acknowledge("b", [(0, 0, [Ack.ACCEPT])]) is ErrorCode.invalid_record_state
    # all or none: 5 is b's, 4 is not
    assert sp.acknowledge("b", [(5, 5, [Ack.ACCEPT]), (4, 4, [Ack.ACCEPT])]) is ErrorCode.invalid_record_state
    assert sp.records[5].state is RecordState.ACQUIRED
    assert sp.acknowledge("a", [(3, 4, [Ack.ACCEPT, 9])]) is ErrorCode.invalid_request
    assert sp.acknowledge("a", [(3, 4, [Ack.ACCEPT, Ack.ACCEPT, Ack.ACCEPT])]) is ErrorCode.invalid_request
    assert sp.acknowledge("a", [(12, 12, [Ack.ACCEPT])]) is ErrorCode.invalid_record_state   # never handed out
    assert sp.acknowledge("a", [(0, 4, [Ack.ACCEPT])]) is ErrorCode.none
    assert sp.acknowledge("a", [(0, 0, [Ack.ACCEPT])]) is ErrorCode.invalid_record_state     # done with already


def test_released_and_expired_records_are_delivered_again_and_archived_at_the_delivery_limit():
    sp = SharePartition(0, delivery_count_limit=3)
    assert sp.acquire("a", 0, 2, 500, 0) == [AcquiredRange(0, 2, 1)]
    assert sp.acknowledge("a", [(0, 2, [Ack.ACCEPT, Ack.RELEASE, Ack.RELEASE])]) is ErrorCode.none
    assert sp.start_offset == 1 and sp.next_fetch_offset() == 1
    assert sp.acquire("b", 1, 2, 500, 10) == [AcquiredRange(1, 2, 2)]   # the second delivery
    assert sp.next_deadline_ms() == 10 + LOCK
    assert sp.expire_locks(10 + LOCK - 1) == 0
    assert sp.expire_locks(10 + LOCK) == 2                               # b crashed holding them
    assert [sp.records[o].state for o in (1, 2)] == [RecordState.AVAILABLE] * 2
    assert sp.acquire("c", 1, 2, 500, 40_000) == [AcquiredRange(1, 2, 3)]
    assert sp.release_member("c") == 2                                   # the third delivery was the last
    assert sp.start_offset == 3 and sp.in_flight() == 0 and sp.records == {}


def test_reject_and_gaps_archive_and_each_offset_may_have_its_own_type():
    sp = SharePartition(0)
    sp.acquire("a", 0, 5, 500, 0)
    assert sp.acknowledge("a", [(0, 5, [Ack.ACCEPT, Ack.GAP, Ack.REJECT, Ack.RELEASE, Ack.ACCEPT, Ack.GAP])]) \
        is ErrorCode.none
    assert sp.start_offset == 3 and [sp.records[o].state for o in range(3, 6)] == \
        [RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED]
    assert sp.acquire("a", 3, 5, 500, 0) == [AcquiredRange(3, 3, 2)]   # only the released one again


def test_new_records_wait_while_the_in_flight_limit_is_reached_released_ones_do_not():
    sp = SharePartition(0, max_in_flight=4)
    assert sp.acquire("a", 0, 9, 500, 0) == [AcquiredRange(0, 3, 1)]
    assert not sp.can_acquire() and sp.acquire("b", 4, 9, 500, 0) == []
    sp.acknowledge("a", [(1, 1, [Ack.RELEASE])])
    assert sp.can_acquire() and sp.next_fetch_offset() == 1
    assert sp.acquire("b", 1, 9, 500, 0) == [AcquiredRange(1, 1, 2)]
    sp.acknowledge("a", [(0, 0, [Ack.ACCEPT])])
    assert sp.acquire("b", 4, 9, 500, 0) == [AcquiredRange(4, 4, 1)]    # one slot freed at the front


def test_max_records_bounds_a_fetch_and_a_read_past_the_end_hands_out_nothing():
    sp = SharePartition(0)
    assert sp.acquire("a", 0, 99, 10, 0) == [AcquiredRange(0, 9, 1)]
    assert sp.acquire("a", 12, 20, 10, 0) == []       # 10 and 11 were not read
    assert sp.end_offset == 10


def test_the_log_start_moving_drops_what_lies_below_it():
    sp = SharePartition(0)
    sp.acquire("a", 0, 9, 500, 0)
    sp.move_start(6)
    assert sp.start_offset == 6 and sorted(sp.records) == [6, 7, 8, 9]
    assert sp.acknowledge("a", [(5, 5, [Ack.ACCEPT])]) is ErrorCode.invalid_record_state
    sp.move_start(20)
    assert (sp.start_offset, sp.end_offset, sp.records) == (20, 20, {})
    assert sp.acquire("a", 20, 21, 500, 0) == [AcquiredRange(20, 21, 1)]


def test_the_persisted_state_restores_the_partition_with_its_locks_released():
    sp = SharePartition(0, delivery_count_limit=5)
    sp.acquire("a", 0, 7, 500, 0)
    sp.acknowledge("a", [(0, 1, [Ack.ACCEPT]), (3, 3, [Ack.RELEASE]), (4, 4, [Ack.REJECT])])
    sp.acquire("b", 3, 3, 500, 0)
    batches = sp.state_batches()
    assert batches == [StateBatch(2, 2, RecordState.AVAILABLE, 1), StateBatch(3, 3, RecordState.AVAILABLE, 2),
                       StateBatch(4, 4, RecordState.ARCHIVED, 1), StateBatch(5, 7, RecordState.AVAILABLE, 1)]
    again = SharePartition.restore(sp.start_offset, batches)
    assert (again.start_offset, again.end_offset) == (2, 8)
    assert again.next_fetch_offset() == 2
    assert again.acquire("c", 2, 7, 500, 0) == [AcquiredRange(2, 2, 2), AcquiredRange(3, 3, 3),
                                                 AcquiredRange(5, 7, 2)]
    assert SharePartition.restore(3, [StateBatch(1, 4, RecordState.ARCHIVED, 1)]).start_offset == 5


def test_a_pending_acknowledgement_takes_effect_when_persisted_and_is_dropped_when_not():
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("a", 0, 3, 500, 0)
    assert sp.acknowledge("a", [(0, 1, [Ack.ACCEPT, Ack.RELEASE])], pending=1) is ErrorCode.none
    assert sp.acknowledge("a", [(0, 0, [Ack.ACCEPT])], pending=2) is ErrorCode.invalid_record_state  # once
    # written as acknowledged and released, still held by a (no lock expires under a pending one)
    assert sp.persisted() == (1, [StateBatch(1, 3, RecordState.AVAILABLE, 1)])
    assert sp.records[0].state is RecordState.ACQUIRED and sp.start_offset == 0
    assert sp.expire_locks(LOCK) == 2 and sp.records[0].state is RecordState.ACQUIRED     # 2 and 3 expired
    assert sp.release_member("a") == 0
    sp.commit(1)
    assert sp.start_offset == 1 and sp.next_fetch_offset() == 1
    # a second acknowledgement whose write fails: its records go back to being acquired
    sp.acquire("b", 1, 3, 500, LOCK)
    assert sp.acknowledge("b", [(1, 3, [Ack.ACCEPT])], pending=2) is ErrorCode.none
    assert sp.abort(2) == 3
    assert sp.records[1].state is RecordState.ACQUIRED and sp.start_offset == 1
    assert sp.expire_locks(2 * LOCK) == 3          # delivered twice (the limit): archived
    assert sp.start_offset == 4


def test_a_record_held_at_its_last_delivery_when_its_leader_changed_is_restored_archived():
    """Written as available with its deliveries (a lock does not survive a leader change); one
    that had used every delivery the limit allows is not handed out again by the next leader."""
    sp = SharePartition(0, delivery_count_limit=2)
    sp.acquire("a", 0, 1, 500, 0)
    sp.expire_locks(LOCK)
    sp.acquire("a", 0, 1, 500, LOCK)                  # both at their second (last) delivery
    sp.acknowledge("a", [(1, 1, [Ack.ACCEPT])])
    start, batches = sp.persisted()
    assert (start, batches) == (0, [StateBatch(0, 0, RecordState.AVAILABLE, 2), StateBatch(1, 1, RecordState.ACKNOWLEDGED, 2)])
    again = SharePartition.restore(start, batches, delivery_count_limit=2)
    assert again.start_offset == 2 and again.next_fetch_offset() == 2
