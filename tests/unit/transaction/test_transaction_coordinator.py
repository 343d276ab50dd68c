"""The transaction coordinator's state machine (Kafka's TransactionCoordinator) and the records of
``__transaction_state``, with the log and the markers faked: appends and markers complete when the
test says so."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.core.config import BrokerConfig
from strandline.protocol.records import iter_batches, iter_records, read_header
from strandline.transaction import records as rec
from strandline.transaction.coordinator import TransactionCoordinator
from strandline.transaction.records import TransactionState as S

TX = "tx-1"


class Fakes:
    def __init__(self) -> None:
        self.log: list[tuple[int, bytes, bytes | None]] = []     # what was written, in order
        self.pending_writes: list = []
        self.markers: list = []
        self.next_pid = 1000
        config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "zk:1"})
        self.later: list = []
        self.c = TransactionCoordinator(config, self.append, self.new_pid, self.send_markers,
                                        lambda due, action: self.later.append((due, action)) or [])
        self.c.load_partition(self.c.partition_of(TX), 5, [], 0)
        self.answers: list = []

    def append(self, index, records, done, now_ms):
        self.pending_writes.append((index, records, done))
        return []

    def write(self, error=ErrorCode.none, now_ms=1):
        """Complete the oldest write in flight."""
        index, records, done = self.pending_writes.pop(0)
        if error is ErrorCode.none:
            self.log.extend((index, k, v) for k, v in records)
        return done(error, now_ms)

    def new_pid(self, callback, now_ms):
        self.next_pid += 1
        return callback(self.next_pid, now_ms)

    def send_markers(self, partitions, producer_id, epoch, commit, coordinator_epoch, done, current, now_ms,
                     transaction_version=0):
        self.markers.append((sorted(partitions), producer_id, epoch, commit, coordinator_epoch, done))
        self.current = current
        return []

    def respond(self, *args):
        self.answers.append(args)
        return []

    def init(self, timeout=60000):
        self.c.init_producer_id(TX, timeout, self.respond, 1)
        self.write()
        return self.answers.pop()

    def state(self) -> rec.TransactionMetadata:
        return self.c.transactions[TX]

    def ongoing(self) -> None:
        """Producer 1001 (epoch 0) initialized, its transaction ongoing on t-0 (written)."""
        self.init()
        self.c.add_partitions(TX, 1001, 0, {("t", 0)}, self.respond, 2)
        self.write()

    def prepared(self, commit: bool) -> None:
        """That transaction's PrepareCommit (or PrepareAbort) written: its markers go out."""
        self.ongoing()
        self.c.end_transaction(TX, 1001, 0, commit, self.respond, 3)
        self.write()


def test_init_producer_id_gives_a_new_id_then_bumps_its_epoch_fencing_the_older_instance():
    f = Fakes()
    assert f.init() == (ErrorCode.none, 1001, 0)
    assert f.init() == (ErrorCode.none, 1001, 1)
    f.c.add_partitions(TX, 1001, 0, {("t", 0)}, f.respond, 2)       # the first instance, now a zombie
    assert f.answers.pop() == (ErrorCode.producer_fenced,)
    f.c.add_partitions(TX, 999, 1, {("t", 0)}, f.respond, 2)
    assert f.answers.pop() == (ErrorCode.invalid_producer_id_mapping,)


def test_a_commit_is_prepared_then_marked_on_every_partition_then_completed_in_the_log():
    f = Fakes()
    f.init()
    f.c.add_partitions(TX, 1001, 0, {("t", 0), ("u", 2)}, f.respond, 2)
    assert f.state().state is S.EMPTY                               # not before the write is done
    f.write()
    assert f.answers.pop() == (ErrorCode.none,) and f.state().state is S.ONGOING
    f.c.end_transaction(TX, 1001, 0, True, f.respond, 3)
    f.c.add_partitions(TX, 1001, 0, {("v", 0)}, f.respond, 3)       # while the prepare is written
    assert f.answers.pop() == (ErrorCode.concurrent_transactions,)
    f.write()
    assert f.answers.pop() == (ErrorCode.none,) and f.state().state is S.PREPARE_COMMIT
    [(partitions, pid, epoch, commit, coordinator_epoch, marked)] = f.markers
    assert (partitions, pid, epoch, commit, coordinator_epoch) == ([("t", 0), ("u", 2)], 1001, 0, True, 5)
    f.c.end_transaction(TX, 1001, 0, True, f.respond, 4)           # a retry while markers are written
    assert f.answers.pop() == (ErrorCode.concurrent_transactions,)
    marked(5)
    f.write()
    assert f.state().state is S.COMPLETE_COMMIT and f.state().partitions == set()
    f.c.end_transaction(TX, 1001, 0, True, f.respond, 6)           # a retry once done: written again
    f.write()
    assert f.answers.pop() == (ErrorCode.none,)
    f.c.end_transaction(TX, 1001, 0, False, f.respond, 6)
    assert f.answers.pop() == (ErrorCode.invalid_txn_state,)
    states = [rec.decode_value(rec.decode_key(k), v).state for _, k, v in f.log]
    assert states == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.COMPLETE_COMMIT]


def test_a_new_instance_aborts_the_ongoing_transaction_with_a_bumped_epoch():
    f = Fakes()
    f.ongoing()
    f.answers.clear()
    f.c.init_producer_id(TX, 60000, f.respond, 3)
    assert f.answers.pop() == (ErrorCode.concurrent_transactions, -1, -1)
    f.write()
    assert f.state().state is S.PREPARE_ABORT and f.state().producer_epoch == 1
    [(_, _, epoch, commit, _, marked)] = f.markers
    assert (epoch, commit) == (1, False)                            # the zombie's epoch 0 is fenced
    marked(4)
    f.write()
    assert f.state().state is S.COMPLETE_ABORT
    assert f.init() == (ErrorCode.none, 1001, 2)


def test_a_transaction_open_beyond_its_timeout_is_aborted():
    f = Fakes()
    f.init(timeout=1000)
    f.c.add_partitions(TX, 1001, 0, {("t", 0)}, f.respond, 10)
    f.write(now_ms=10)
    assert f.c.abort_timed_out(900) == []
    f.c.abort_timed_out(1011)
    f.write()
    assert f.state().state is S.PREPARE_ABORT and f.markers[0][3] is False


def test_a_new_coordinator_replays_the_log_and_completes_a_prepared_commit():
    f = Fakes()
    f.prepared(commit=True)                                         # PrepareCommit written, then failover
    g = Fakes()
    g.c.unload_partition(g.c.partition_of(TX))
    g.c.load_partition(g.c.partition_of(TX), 6, [(i, k, v) for i, (_, k, v) in enumerate(f.log)], 10)
    assert g.state().state is S.PREPARE_COMMIT
    assert not g.markers             # the PrepareCommit may lie above the high watermark: written again first
    g.write()
    [(partitions, pid, epoch, commit, coordinator_epoch, marked)] = g.markers
    assert (partitions, pid, commit, coordinator_epoch) == ([("t", 0)], 1001, True, 6)
    marked(11)
    g.write()
    assert g.state().state is S.COMPLETE_COMMIT


def test_what_the_state_already_says_is_acknowledged_only_once_written_again():
    """sim explore --config txn seeds 7 and 39: a coordinator acknowledged partitions added
    already, and a commit retried, from memory; its memory came from records above the high
    watermark (lost at the next failover) or it was a deposed leader that had not heard so. No
    later coordinator knew those partitions: the transaction's records there never got a marker,
    and the commit of the next transaction of the same epoch was taken for a retry. Now the state
    is written again, and the answer waits for that write."""
    f = Fakes()
    f.ongoing()
    assert f.answers.pop() == (ErrorCode.none,)
    f.c.add_partitions(TX, 1001, 0, {("t", 0)}, f.respond, 3)
    assert not f.answers and f.pending_writes
    f.write(ErrorCode.not_enough_replicas)                         # a deposed leader cannot write
    assert f.answers.pop() == (ErrorCode.coordinator_not_available,)
    f.c.add_partitions(TX, 1001, 0, {("t", 0)}, f.respond, 4)
    f.write()
    assert f.answers.pop() == (ErrorCode.none,) and f.state().partitions == {("t", 0)}
    f.c.end_transaction(TX, 1001, 0, True, f.respond, 5)
    f.write()                                                       # PrepareCommit
    f.answers.pop()
    f.markers.pop()[5](6)
    f.write()                                                       # CompleteCommit
    assert f.state().state is S.COMPLETE_COMMIT
    f.c.end_transaction(TX, 1001, 0, True, f.respond, 7)            # retried
    assert not f.answers
    f.write()
    assert f.answers.pop() == (ErrorCode.none,) and f.state().state is S.COMPLETE_COMMIT


def test_a_coordinator_that_lost_its_partition_answers_not_coordinator():
    f = Fakes()
    f.c.unload_partition(f.c.partition_of(TX))
    f.c.init_producer_id(TX, 60000, f.respond, 1)
    assert f.answers.pop() == (ErrorCode.not_coordinator, -1, -1)
    f.c.load_partition(f.c.partition_of(TX), 5, [], 0)
    f.c.init_producer_id(TX, 10**9, f.respond, 1)
    assert f.answers.pop() == (ErrorCode.invalid_transaction_timeout, -1, -1)


def test_transaction_log_records_and_markers_are_kafkas():
    m = rec.TransactionMetadata("tx", 5, 2, 60000, S.ONGOING, {("a", 1), ("a", 0)}, 10, 5)
    key, value = rec.state_record(m)
    assert key == b"\x00\x00\x00\x02tx"
    assert value == (b"\x00\x00" + (5).to_bytes(8, "big") + b"\x00\x02" + (60000).to_bytes(4, "big") + b"\x01"
                     + b"\x00\x00\x00\x01" + b"\x00\x01a" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00\x00\x00\x00\x01"
                     + (10).to_bytes(8, "big") + (5).to_bytes(8, "big"))
    assert rec.decode_value("tx", value) == m
    marker = rec.build_marker(5, 2, True, 7, 1000)
    header = read_header(marker, 0)
    assert header.attributes & 0x30 == 0x30 and header.producer_id == 5 and header.producer_epoch == 2
    [(pos, h)] = list(iter_batches(marker))
    [record] = list(iter_records(marker, pos, h))
    assert rec.marker_type(record.key) == rec.COMMIT_MARKER and record.value == b"\x00\x00\x00\x00\x00\x07"


def test_a_failed_write_of_the_outcome_is_retried_until_written():
    f = Fakes()
    f.prepared(commit=True)
    f.markers[0][5](4)
    f.write(ErrorCode.not_enough_replicas)                         # CompleteCommit not written
    assert f.state().state is S.PREPARE_COMMIT
    f.c.end_transaction(TX, 1001, 0, True, f.respond, 5)
    assert f.answers.pop() == (ErrorCode.concurrent_transactions,)
    [(due, again)] = f.later
    again(due)
    f.write()
    assert f.state().state is S.COMPLETE_COMMIT


def test_markers_are_no_longer_this_coordinators_once_it_lost_the_partition():
    f = Fakes()
    f.prepared(commit=False)
    assert f.current()
    f.c.unload_partition(f.c.partition_of(TX))
    assert not f.current()
    assert f.markers[0][5](4) == [] and not f.pending_writes       # nothing written by a former coordinator


def test_an_abort_marker_without_data_in_the_partition_aborts_nothing_before_it():
    """A partition added to a transaction but never written to still gets its marker: the
    transaction begins at the marker, so a read_committed reader skips nothing of the producer's
    earlier, committed records (review finding: it used to start at the log start offset)."""
    from strandline.log.config import LogConfig
    from strandline.log.log import Log
    from strandline.protocol.markers import build_marker
    from strandline.sim.disk import MemoryDisk
    from tests.unit.batches import make_batch

    log = Log.open(MemoryDisk(), "/d/t-0", "t", 0, LogConfig(), needs_recovery=False, now_ms=0)
    committed = make_batch([b"c1", b"c2"], producer_id=5, producer_epoch=0, base_sequence=0)
    committed[21:23] = (0x10).to_bytes(2, "big")
    from strandline.protocol.records import compute_crc
    committed[17:21] = compute_crc(committed, 0, len(committed)).to_bytes(4, "big")
    log.append_as_leader(committed, 0, 0)                             # 0-1
    assert log.last_stable_offset(2) == 0                             # open
    log.append_as_leader(build_marker(5, 0, True, 0, 0), 0, 0)        # 2: commit
    assert log.last_stable_offset(2) == 0                             # its marker is not replicated yet
    log.append_as_leader(build_marker(5, 0, False, 0, 0), 0, 0)       # 3: abort, no data
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in log.collect_aborted_txns(0, 4)] == [(5, 3, 3)]
    assert log.last_stable_offset(4) == 4


def test_a_zombie_reinitializing_with_a_stale_epoch_is_fenced_and_the_live_producer_keeps_its_own():
    """KIP-360: InitProducerId v3+ carries the producer id and epoch the producer had."""
    f = Fakes()
    f.init()                                                        # epoch 0 (the zombie's)
    f.init()                                                        # epoch 1 (the live producer's)
    f.c.init_producer_id(TX, 60000, f.respond, 5, expected=(1001, 0))
    assert f.answers.pop() == (ErrorCode.producer_fenced, -1, -1) and f.state().producer_epoch == 1
    f.c.init_producer_id(TX, 60000, f.respond, 5, expected=(1001, 1))
    f.write()
    assert f.answers.pop() == (ErrorCode.none, 1001, 2)
    f.c.init_producer_id(TX, 60000, f.respond, 6, expected=(1001, 1))  # that bump again (a lost answer)
    assert f.answers.pop() == (ErrorCode.none, 1001, 2)


def test_read_committed_through_the_broker_core_stops_at_the_lso_and_reports_the_abort():
    """Produce (transactional), Fetch and ListOffsets read_committed, WriteTxnMarkers, as the
    broker core serves them; a read_uncommitted Fetch reports the same last stable offset."""
    from tests.unit.broker.test_broker_core import Harness
    from tests.unit.batches import make_batch
    from strandline.protocol.records import compute_crc

    # no transaction coordinator here to verify the batch with (KIP-890)
    h = Harness(**{"transaction.partition.verification.enable": "false"})
    h.create("t")
    plain = make_batch([b"p"])
    h.produce("t", plain)
    h.response(0, 7)
    txn = make_batch([b"x", b"y"], producer_id=7, producer_epoch=0, base_sequence=0)
    txn[21:23] = (0x10).to_bytes(2, "big")
    txn[17:21] = compute_crc(txn, 0, len(txn)).to_bytes(4, "big")
    h.call(0, 7, {"transactional_id": "tx", "acks": -1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": bytes(txn)}]}]})

    def fetch_committed(isolation_level: int = 1):
        body = h.fetch_body("t", 0)
        body["isolation_level"] = isolation_level
        return h.call(1, 11, body).responses[0].partitions[0]

    def latest_committed() -> int:
        body = {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
        return h.call(2, 7, body).topics[0].partitions[0].offset

    open_ = fetch_committed()
    assert (open_.high_watermark, open_.last_stable_offset) == (3, 1) and latest_committed() == 1
    # read_uncommitted gets the open transaction's records, and the same last stable offset
    # (Kafka reports the partition's, whatever the isolation level)
    uncommitted = fetch_committed(isolation_level=0)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (3, 1)
    marked = h.call(27, 1, {"markers": [{"producer_id": 7, "producer_epoch": 0, "transaction_result": False,
                                         "coordinator_epoch": 0, "topics": [{"name": "t", "partition_indexes": [0]}]}]})
    assert marked.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
    ended = fetch_committed()
    assert (ended.high_watermark, ended.last_stable_offset) == (4, 4) and latest_committed() == 4
    assert [(a.producer_id, a.first_offset) for a in ended.aborted_transactions] == [(7, 1)]
    stale = h.call(27, 1, {"markers": [{"producer_id": 7, "producer_epoch": 0, "transaction_result": True,
                                        "coordinator_epoch": -5, "topics": [{"name": "t", "partition_indexes": [0]}]}]})
    assert stale.markers[0].topics[0].partitions[0].error_code == ErrorCode.transaction_coordinator_fenced


def test_transactional_records_without_a_transactional_id_are_refused():
    from tests.unit.broker.test_broker_core import Harness
    from tests.unit.batches import make_batch
    from strandline.protocol.records import compute_crc

    h = Harness()
    h.create("t")
    txn = make_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=0)
    txn[21:23] = (0x10).to_bytes(2, "big")
    txn[17:21] = compute_crc(txn, 0, len(txn)).to_bytes(4, "big")
    h.produce("t", txn)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == \
        ErrorCode.transactional_id_authorization_failed


def test_verify_only_answers_from_the_state_without_writing():
    """AddPartitionsToTxn v4 ``verify_only`` (KIP-890): NONE for a partition of the ongoing
    transaction, INVALID_TXN_STATE for one not added; Kafka's errors for the wrong producer id or
    epoch, a transaction being decided, and an id of another coordinator. Nothing is written."""
    f = Fakes()
    f.init()
    assert f.c.verify_partitions(TX, 1001, 0, {("t", 0)}) == {("t", 0): ErrorCode.invalid_txn_state}   # Empty
    f.c.add_partitions(TX, 1001, 0, {("t", 0)}, f.respond, 2)
    assert f.c.verify_partitions(TX, 1001, 0, {("t", 0)}) == {("t", 0): ErrorCode.invalid_txn_state}   # not written yet
    f.write()
    written = len(f.log)
    assert f.c.verify_partitions(TX, 1001, 0, {("t", 0), ("t", 1)}) == {
        ("t", 0): ErrorCode.none, ("t", 1): ErrorCode.invalid_txn_state}
    assert f.c.verify_partitions(TX, 1001, 1, {("t", 0)}) == {("t", 0): ErrorCode.producer_fenced}
    assert f.c.verify_partitions(TX, 77, 0, {("t", 0)}) == {("t", 0): ErrorCode.invalid_producer_id_mapping}
    unknown = next(i for i in (f"tx-{n}" for n in range(2, 1000)) if f.c.partition_of(i) == f.c.partition_of(TX))
    assert f.c.verify_partitions(unknown, 1001, 0, {("t", 0)}) == {("t", 0): ErrorCode.invalid_producer_id_mapping}
    assert f.c.verify_partitions("", 1001, 0, {("t", 0)}) == {("t", 0): ErrorCode.invalid_request}
    assert len(f.log) == written and not f.pending_writes
    f.c.end_transaction(TX, 1001, 0, False, f.respond, 3)
    f.write()                                                       # PrepareAbort written: markers go out
    assert f.c.verify_partitions(TX, 1001, 0, {("t", 0)}) == {("t", 0): ErrorCode.concurrent_transactions}
    f.markers.pop()[-1](4)
    f.write()                                                       # CompleteAbort: the partition left it
    assert f.c.verify_partitions(TX, 1001, 0, {("t", 0)}) == {("t", 0): ErrorCode.invalid_txn_state}
    f.c.unload_partition(f.c.partition_of(TX))
    assert f.c.verify_partitions(TX, 1001, 0, {("t", 0)}) == {("t", 0): ErrorCode.not_coordinator}
