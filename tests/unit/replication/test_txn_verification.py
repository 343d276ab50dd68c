"""KIP-890 part 1 on the leader: a transactional batch that would open its producer's
transaction on a partition is held until the transaction coordinator confirms the partition is
in that transaction (``transaction.partition.verification.enable``), and appended only under the
guard its verification started with. The coordinator is played by the test
(``ReplicaManager.verify_transaction``); the AddPartitionsToTxn v4 answer's reading is tested
beside it."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.group.records import build_batch
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.transaction.verification import unverified
from tests.unit.broker.test_broker_core import Harness

PID, EPOCH = 4000, 3


class Coordinator:
    """Stands in for the transaction coordinator: records each question, answers when told."""

    def __init__(self) -> None:
        self.asked: list[tuple] = []
        self.adds: list[bool] = []          # whether each question asked to add (transactions v2)

    def verify(self, transactional_id, producer_id, producer_epoch, partitions, done, now_ms, add=False):
        self.asked.append((transactional_id, producer_id, producer_epoch, list(partitions), done))
        self.adds.append(add)
        return []


def leader(**overrides) -> tuple[Harness, Coordinator]:
    h = Harness(**overrides)
    assert h.create("v").error_code == ErrorCode.none
    coordinator = Coordinator()
    h.broker.replica_manager.verify_transaction = coordinator.verify
    return h, coordinator


def produce(h: Harness, seq: int, conn: int = 1, transactional: bool = True) -> None:
    batch = build_batch([(b"k", b"v%d" % seq)], h.now, PID, EPOCH, seq, transactional=transactional)
    body = h.produce_body("v", batch, acks=1)
    body["transactional_id"] = "tx"
    h.request(0, 7, body, conn)


def answer(h: Harness, conn: int = 1):
    return h.response(0, 7, conn).responses[0].partition_responses[0]


def log_end(h: Harness) -> int:
    return h.broker.partitions[("v", 0)].log.log_end_offset


def test_the_first_batch_of_a_transaction_waits_for_the_coordinator_then_appends():
    h, coordinator = leader()
    produce(h, 0)
    assert not h.sent.get(1) and log_end(h) == 0                    # held, nothing appended
    [(tid, pid, epoch, partitions, done)] = coordinator.asked
    assert (tid, pid, epoch, partitions) == ("tx", PID, EPOCH, [("v", 0)])
    h.run(done({}, h.now))                                          # confirmed
    assert answer(h).error_code == ErrorCode.none and log_end(h) == 1
    produce(h, 1)                                                   # its transaction is open here: no question
    assert answer(h).error_code == ErrorCode.none and log_end(h) == 2 and len(coordinator.asked) == 1


def test_a_partition_not_in_the_transaction_is_refused_and_coordinator_trouble_is_retriable():
    h, coordinator = leader()
    produce(h, 0)
    h.run(coordinator.asked.pop()[-1]({("v", 0): ErrorCode.invalid_txn_state}, h.now))
    assert answer(h).error_code == ErrorCode.invalid_txn_state and log_end(h) == 0
    for error, seen in [(ErrorCode.not_coordinator, ErrorCode.not_enough_replicas),
                        (ErrorCode.concurrent_transactions, ErrorCode.not_enough_replicas),
                        (ErrorCode.network_exception, ErrorCode.not_enough_replicas),
                        (ErrorCode.invalid_producer_epoch, ErrorCode.invalid_producer_epoch)]:
        produce(h, 0)
        h.run(coordinator.asked.pop()[-1]({("v", 0): error}, h.now))
        assert answer(h).error_code == seen and log_end(h) == 0, error


def test_a_confirmation_that_comes_after_the_transactions_marker_appends_nothing():
    """The race KIP-890's guard closes: the leader asked while the transaction was ongoing (the
    coordinator confirms), but its abort marker reached the partition before the answer. The
    batch would open a transaction no marker ends; the guard the marker cleared refuses it."""
    h, coordinator = leader()
    produce(h, 0)
    done = coordinator.asked.pop()[-1]
    marked = []
    h.run(h.broker.replica_manager.writes.write_marker("v", 0, PID, EPOCH, False, 0,
                                                       lambda e, t: marked.append(e) or [], h.now))
    assert marked == [ErrorCode.none] and log_end(h) == 1
    h.run(done({}, h.now))
    assert answer(h).error_code == ErrorCode.invalid_txn_state and log_end(h) == 1
    partition = h.broker.partitions[("v", 0)]
    assert partition.last_stable_offset() == partition.high_watermark


def test_a_newer_verification_supersedes_an_older_one():
    """Two produce requests of the producer each start their transaction's first batch (a retry):
    they share the guard; once one appended, the transaction is open and the other, answered
    later, appends as a batch of an open transaction (its sequence then decides)."""
    h, coordinator = leader()
    produce(h, 0, conn=1)
    produce(h, 0, conn=2)
    assert len(coordinator.asked) == 2
    second, first = coordinator.asked.pop()[-1], coordinator.asked.pop()[-1]
    h.run(first({}, h.now))
    assert answer(h, 1).error_code == ErrorCode.none and log_end(h) == 1
    h.run(second({}, h.now))
    assert answer(h, 2).error_code == ErrorCode.none and log_end(h) == 1      # a duplicate: its first offsets


def test_without_verification_the_batch_appends_at_once():
    h, coordinator = leader(**{"transaction.partition.verification.enable": "false"})
    produce(h, 0)
    assert answer(h).error_code == ErrorCode.none and log_end(h) == 1 and not coordinator.asked


def test_idempotent_batches_are_not_verified():
    h, coordinator = leader()
    produce(h, 0, transactional=False)
    assert answer(h).error_code == ErrorCode.none and log_end(h) == 1 and not coordinator.asked


def _v4_answer(body: dict) -> bytes:
    frame = api.encode_response(RequestHeader(ApiKey.ADD_PARTITIONS_TO_TXN, 4, 7, None), body)
    return frame[4:]


def test_the_coordinators_answer_is_read_as_kafkas_manager_reads_it():
    parts = [("v", 0), ("v", 1)]
    ok = {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": [
        {"transactional_id": "tx", "topic_results": [{"name": "v", "results_by_partition": [
            {"partition_index": 0, "partition_error_code": ErrorCode.none},
            {"partition_index": 1, "partition_error_code": ErrorCode.producer_fenced}]}]}]}
    assert unverified(_v4_answer(ok), "tx", parts) == {("v", 1): ErrorCode.invalid_producer_epoch}
    denied = {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "results_by_transaction": []}
    assert unverified(_v4_answer(denied), "tx", parts) == {p: ErrorCode.invalid_txn_state for p in parts}
    assert unverified(None, "tx", parts) == {p: ErrorCode.network_exception for p in parts}


def _v4(h: Harness, verify_only: bool, partitions=(0,), conn: int = 1):
    body = {"transactions": [{"transactional_id": "tx", "producer_id": PID, "producer_epoch": EPOCH,
                              "verify_only": verify_only, "topics": [{"name": "v", "partitions": list(partitions)}]}]}
    answer = h.call(24, 4, body, conn=conn)
    return answer.error_code, {(t.name, p.partition_index): p.partition_error_code
                               for r in answer.results_by_transaction for t in r.topic_results
                               for p in t.results_by_partition}


def test_add_partitions_to_txn_v4_on_the_wire():
    """The coordinator's side as the router serves it: each transaction answered alone, an
    unknown partition failing its transaction (the others not attempted), NOT_COORDINATOR from a
    broker that does not coordinate the id, for a question and for an addition alike."""
    h, _ = leader()
    assert _v4(h, True) == (ErrorCode.none, {("v", 0): ErrorCode.not_coordinator})
    assert _v4(h, False) == (ErrorCode.none, {("v", 0): ErrorCode.not_coordinator})
    assert _v4(h, True, (0, 5)) == (ErrorCode.none, {("v", 0): ErrorCode.operation_not_attempted,
                                                      ("v", 5): ErrorCode.unknown_topic_or_partition})


def test_add_partitions_to_txn_v4_needs_cluster_action():
    from strandline.security.acl import (AccessControlEntry, AclOperation, AclPermissionType, PatternType,
                                         ResourcePattern, ResourceType)
    h, _ = leader(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                     "allow.everyone.if.no.acl.found": "true"})
    h.broker.connection_opened(1, "127.0.0.1")
    h.broker.authorizer.load({ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL): frozenset(
        {AccessControlEntry("User:ANONYMOUS", "*", AclOperation.CLUSTER_ACTION, AclPermissionType.DENY)})})
    assert _v4(h, True) == (ErrorCode.cluster_authorization_failed, {})


# -- transactions v2 (KIP-890 part 2): the leader adds the partition for a Produce v12


def produce_v(h: Harness, version: int, seq: int = 0, conn: int = 1) -> None:
    batch = build_batch([(b"k", b"v%d" % seq)], h.now, PID, EPOCH, seq, transactional=True)
    body = h.produce_body("v", batch, acks=1)
    body["transactional_id"] = "tx"
    h.request(0, version, body, conn)


def answer_v(h: Harness, version: int, conn: int = 1):
    return h.response(0, version, conn).responses[0].partition_responses[0]


def test_a_produce_v12_has_the_coordinator_add_the_partition_even_without_verification():
    """A client of transactions v2 sends no AddPartitionsToTxn: the leader asks the coordinator to
    add the partition (AddPartitionsToTxn v5, not verify_only) before it appends the transaction's
    first batch there, whether transaction.partition.verification.enable is on or not."""
    for verification in ("true", "false"):
        h, coordinator = leader(**{"transaction.partition.verification.enable": verification})
        produce_v(h, 12)
        assert not h.sent.get(1) and log_end(h) == 0, verification      # held while it is added
        assert coordinator.adds == [True] and coordinator.asked[0][:4] == ("tx", PID, EPOCH, [("v", 0)])
        h.run(coordinator.asked.pop()[-1]({}, h.now))
        assert answer_v(h, 12).error_code == ErrorCode.none and log_end(h) == 1
        produce_v(h, 12, seq=1)                                          # open here now: nothing to add
        assert answer_v(h, 12).error_code == ErrorCode.none and log_end(h) == 2 and len(coordinator.adds) == 1


def test_older_produce_versions_and_transaction_version_1_are_verified_as_before():
    h, coordinator = leader()
    produce_v(h, 11)
    assert coordinator.adds == [False]
    h, coordinator = leader(**{"transaction.version": "1"})
    produce_v(h, 12)
    assert coordinator.adds == [False]
    h.run(coordinator.asked.pop()[-1]({("v", 0): ErrorCode.invalid_txn_state}, h.now))
    assert answer_v(h, 12).error_code == ErrorCode.invalid_txn_state


def test_a_produce_v12_refused_gets_the_errors_of_transactions_v2():
    """As Kafka 4.x answers a Produce v12: TRANSACTION_ABORTABLE where older clients get
    INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS as it is (older: NOT_ENOUGH_REPLICAS)."""
    h, coordinator = leader()
    for error, seen in [(ErrorCode.invalid_txn_state, ErrorCode.transaction_abortable),
                        (ErrorCode.concurrent_transactions, ErrorCode.concurrent_transactions),
                        (ErrorCode.not_coordinator, ErrorCode.not_enough_replicas),
                        (ErrorCode.invalid_producer_epoch, ErrorCode.invalid_producer_epoch)]:
        produce_v(h, 12)
        h.run(coordinator.asked.pop()[-1]({("v", 0): error}, h.now))
        assert answer_v(h, 12).error_code == seen and log_end(h) == 0, error
