"""Transactions v2 (KIP-890 part 2) in the transaction coordinator: EndTxn v5 bumps the producer
epoch at every commit and abort, the markers carry the bumped epoch, and the answer gives the
client the producer id and epoch of its next transaction (Kafka's ``endTransaction`` for
transaction version 2, with its table of retries). The log and the markers are faked as in
test_transaction_coordinator.py."""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from strandline.transaction.records import MAX_PRODUCER_EPOCH, TransactionState as S
from tests.unit.transaction.test_transaction_coordinator import TX, Fakes


def ongoing_v2(f: Fakes, epoch: int = 0) -> None:
    """Producer 1001 at ``epoch``, its transaction ongoing on t-0, added by a leader for a client of
    transaction version 2 (AddPartitionsToTxn v5)."""
    f.c.add_partitions(TX, 1001, epoch, {("t", 0)}, f.respond, 2, tv2=True)
    f.write()
    assert f.answers.pop() == (ErrorCode.none,)


def end(f: Fakes, epoch: int, commit: bool, now_ms: int = 3, pid: int = 1001) -> tuple:
    f.c.end_transaction_v2(TX, pid, epoch, commit, f.respond, now_ms)
    if f.pending_writes:
        f.write()
    return f.answers.pop()


def finish_markers(f: Fakes) -> None:
    f.markers.pop()[5](4)
    f.write()


def test_each_commit_and_abort_bumps_the_epoch_and_the_markers_carry_it():
    f = Fakes()
    f.init()
    ongoing_v2(f, 0)
    assert end(f, 0, True) == (ErrorCode.none, 1001, 1)
    assert f.state().state is S.PREPARE_COMMIT and f.state().producer_epoch == 1
    [(partitions, pid, epoch, commit, _, _)] = f.markers
    assert (partitions, pid, epoch, commit) == ([("t", 0)], 1001, 1, True)
    finish_markers(f)
    assert (f.state().state, f.state().producer_epoch) == (S.COMPLETE_COMMIT, 1)
    ongoing_v2(f, 1)                                   # the next transaction, with the new epoch
    assert end(f, 1, False) == (ErrorCode.none, 1001, 2)
    assert f.markers[0][2:4] == (2, False)
    finish_markers(f)
    assert (f.state().state, f.state().producer_epoch) == (S.COMPLETE_ABORT, 2)


def test_retries_and_zombies_follow_kafkas_table():
    f = Fakes()
    f.init()
    ongoing_v2(f, 0)
    end(f, 0, True)
    assert end(f, 0, True) == (ErrorCode.concurrent_transactions, -1, -1)   # a retry while marking
    finish_markers(f)
    assert end(f, 0, True) == (ErrorCode.none, 1001, 1)      # a retry once done: the same answer
    assert end(f, 0, False) == (ErrorCode.invalid_txn_state, -1, -1)        # an abort retried: not what was done
    assert end(f, 1, True) == (ErrorCode.invalid_txn_state, -1, -1)         # commit with nothing open
    assert end(f, 5, True) == (ErrorCode.producer_fenced, -1, -1)
    assert end(f, 0, True, pid=77) == (ErrorCode.invalid_producer_id_mapping, -1, -1)
    ongoing_v2(f, 1)
    f.c.add_partitions(TX, 1001, 0, {("u", 0)}, f.respond, 5, tv2=True)      # a batch of the last transaction
    assert f.answers.pop() == (ErrorCode.producer_fenced,)
    assert end(f, 0, True) == (ErrorCode.producer_fenced, -1, -1)


def test_an_abort_needs_no_partition_and_bumps_the_epoch_all_the_same():
    f = Fakes()
    f.init()
    assert end(f, 0, True) == (ErrorCode.invalid_txn_state, -1, -1)         # commit from Empty
    assert end(f, 0, False) == (ErrorCode.none, 1001, 1)
    f.write()                                                         # no partition: no marker, complete
    assert not f.markers and f.state().state is S.COMPLETE_ABORT
    assert end(f, 0, False) == (ErrorCode.none, 1001, 1)                  # a retry
    assert end(f, 1, False) == (ErrorCode.none, 1001, 2)                  # another abort
    f.write()
    assert (f.state().state, f.state().producer_epoch) == (S.COMPLETE_ABORT, 2)


def test_the_last_epoch_gives_a_new_producer_id():
    f = Fakes()
    f.init()
    f.c.transactions[TX] = dataclasses.replace(f.state(), producer_epoch=MAX_PRODUCER_EPOCH - 1)
    ongoing_v2(f, MAX_PRODUCER_EPOCH - 1)
    assert end(f, MAX_PRODUCER_EPOCH - 1, True) == (ErrorCode.none, 1002, 0)
    assert f.markers[0][1:3] == (1001, MAX_PRODUCER_EPOCH)          # the markers: the old id's last epoch
    finish_markers(f)
    assert (f.state().producer_id, f.state().producer_epoch, f.state().state) == (1002, 0, S.COMPLETE_COMMIT)
    assert end(f, MAX_PRODUCER_EPOCH - 1, True, pid=1001) == (ErrorCode.none, 1002, 0)     # retried


def test_a_transaction_of_version_2_aborted_for_it_is_fenced_past_a_retry():
    """A timed-out (or fenced) transaction of transaction version 2 is aborted with the epoch
    bumped twice, as Kafka's fence and then abort do: its client's EndTxn with the old epoch is
    then PRODUCER_FENCED, not taken for a retry of that abort."""
    f = Fakes()
    f.init(timeout=1000)
    ongoing_v2(f, 0)
    f.c.abort_timed_out(5000)
    f.write()
    assert f.markers[0][2:4] == (2, False)
    finish_markers(f)
    assert end(f, 0, False) == (ErrorCode.producer_fenced, -1, -1)


def test_a_transaction_of_version_1_is_aborted_for_it_with_one_bump_as_before():
    f = Fakes()
    f.init(timeout=1000)
    f.c.add_partitions(TX, 1001, 0, {("t", 0)}, f.respond, 2)
    f.write()
    f.c.abort_timed_out(5000)
    f.write()
    assert f.markers[0][2:4] == (1, False)


def test_a_v2_transaction_is_logged_as_value_v1_with_its_tagged_fields():
    """Kafka's TransactionLogValue v1 (flexible): compact arrays and strings, then tagged fields
    0 (previous producer id), 1 (next producer id), 2 (client transaction version), each written
    only when not its default. A transaction of transactions v1 stays value v0."""
    from strandline.transaction import records as rec
    m = rec.TransactionMetadata("tx", 5, 7, 60000, S.PREPARE_COMMIT, {("a", 1), ("a", 0)}, 10, 5,
                                next_producer_id=9, tv2=True)
    value = rec.encode_value(m)
    assert value == (b"\x00\x01" + (5).to_bytes(8, "big") + b"\x00\x07" + (60000).to_bytes(4, "big") + b"\x02"
                     + b"\x02" + b"\x02a" + b"\x03" + (0).to_bytes(4, "big") + (1).to_bytes(4, "big") + b"\x00"
                     + (10).to_bytes(8, "big") + (5).to_bytes(8, "big")
                     + b"\x02" + b"\x01\x08" + (9).to_bytes(8, "big") + b"\x02\x02\x00\x02")
    back = rec.decode_value("tx", value)
    assert back == m and (back.previous_producer_id, back.next_producer_id, back.tv2) == (-1, 9, True)
    assert rec.encode_value(dataclasses.replace(m, tv2=False, next_producer_id=-1))[:2] == b"\x00\x00"


def test_a_new_coordinator_completes_a_commit_that_ran_out_of_epochs_with_the_new_producer_id():
    f = Fakes()
    f.init()
    f.c.transactions[TX] = dataclasses.replace(f.state(), producer_epoch=MAX_PRODUCER_EPOCH - 1)
    ongoing_v2(f, MAX_PRODUCER_EPOCH - 1)
    assert end(f, MAX_PRODUCER_EPOCH - 1, True) == (ErrorCode.none, 1002, 0)   # PrepareCommit written
    g = Fakes()
    g.c.unload_partition(g.c.partition_of(TX))
    g.c.load_partition(g.c.partition_of(TX), 6, [(i, k, v) for i, (_, k, v) in enumerate(f.log)], 10)
    g.write()                                                     # the Prepare record written again
    g.markers.pop()[5](11)
    g.write()
    assert (g.state().producer_id, g.state().producer_epoch, g.state().state) == (1002, 0, S.COMPLETE_COMMIT)
    assert end(g, MAX_PRODUCER_EPOCH - 1, True, pid=1001) == (ErrorCode.none, 1002, 0)   # the client's retry
