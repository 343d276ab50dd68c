"""KIP-890 part 1 played step by step in the simulator: a hanging transaction, and the
verification that prevents it.

A transactional producer adds a partition to its transaction and sends the transaction's first
batch; the network holds that Produce (a link that retransmits, a slow path). The producer gives
up on it and aborts: the coordinator writes the abort and has the partition's leader append the
abort marker. Then the held Produce arrives. Without verification the leader sees a batch of a
producer with no transaction open on the partition, in sequence, and appends it: a transaction
opens that no coordinator knows (the id's transaction is CompleteAbort), so no marker and no
timeout ever ends it, and the partition's last stable offset stays at that batch for good:
read_committed consumers stop there. With ``transaction.partition.verification.enable`` the
leader first asks the coordinator (AddPartitionsToTxn v4, ``verify_only``), which answers that the
partition is in no ongoing transaction: the Produce fails with INVALID_TXN_STATE and nothing is
appended.

The producer aborts here with EndTxn, at the same producer epoch. A transaction the coordinator
aborts on timeout is fenced without verification: its abort marker carries the bumped epoch, and
the leader refuses the late batch's older epoch (INVALID_PRODUCER_EPOCH)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.group.records import build_batch
from strandline.sim.cluster import SimCluster
from strandline.sim.network import CLIENT
from strandline.transaction.metadata import TransactionState

TXN_TIMEOUT_MS = 10_000


def _cluster(verify: bool) -> tuple[SimCluster, int, int]:
    """Three brokers, ``__transaction_state`` of one partition, topic ``t`` (two partitions, both
    led by a broker that does not coordinate ``tx``): the cluster, the coordinator, the leader."""
    c = SimCluster((1, 2, 3), **{"transaction.state.log.num.partitions": "1",
                                 "transaction.partition.verification.enable": "true" if verify else "false",
                                 "auto.leader.rebalance.enable": "false"})
    for _ in range(50):
        found = c.call(1, 10, 3, {"key": "tx", "key_type": 1}, "txn-producer")
        if found.error_code == ErrorCode.none:
            break
        c.advance(100)
    assert found.error_code == ErrorCode.none, found
    coordinator = found.node_id
    leader = next(b for b in (1, 2, 3) if b != coordinator)
    replicas = [leader] + [b for b in (1, 2, 3) if b != leader]
    body = {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": -1, "configs": [],
                        "assignments": [{"partition_index": p, "broker_ids": replicas} for p in (0, 1)]}],
            "timeout": 1000, "validate_only": False}
    assert c.call(c.controller_id, 19, 5, body).topics[0].error_code == ErrorCode.none
    c.settle()
    c.advance(1000)
    assert c.partition(leader, "t").is_leader
    return c, coordinator, leader


def _ask_the_coordinator(c: SimCluster, coordinator: int, pid: int, epoch: int) -> None:
    """What a leader asks (AddPartitionsToTxn v4, verify_only): answered from the coordinator's
    state, t-0 in the transaction and t-1 not; nothing is added."""
    question = {"transactions": [{"transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
                                  "verify_only": True, "topics": [{"name": "t", "partitions": [0, 1]}]}]}
    verified = c.call(coordinator, 24, 4, question, "broker-like")
    assert verified.error_code == ErrorCode.none
    [result] = verified.results_by_transaction
    assert {p.partition_index: p.partition_error_code for p in result.topic_results[0].results_by_partition} == \
        {0: ErrorCode.none, 1: ErrorCode.invalid_txn_state}
    assert c.brokers[coordinator].core.transactions.describe("tx").partitions == {("t", 0)}


def _late_first_batch(verify: bool, timeout: bool = False):
    """The story of the module's docstring, up to the held Produce's answer: (cluster,
    coordinator, leader, the Produce's partition answer). ``timeout``: the coordinator aborts the
    transaction once its timeout passed, rather than the producer."""
    c, coordinator, leader = _cluster(verify)
    init = c.call(coordinator, 22, 1, {"transactional_id": "tx", "transaction_timeout": TXN_TIMEOUT_MS},
                  "txn-producer")
    assert init.error_code == ErrorCode.none, init
    pid, epoch = init.producer_id, init.producer_epoch
    add = {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
           "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "t", "partitions": [0]}]}
    added = c.call(coordinator, 24, 1, add, "txn-producer")
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none

    if verify:
        _ask_the_coordinator(c, coordinator, pid, epoch)
    batch = build_batch([(b"k", b"late")], c.now, pid, epoch, 0, transactional=True)
    produce = {"transactional_id": "tx", "acks": -1, "timeout": 30000,
               "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": bytes(batch)}]}]}
    c.net.cut.add((CLIENT, leader))                                 # the Produce is held on its way
    c.request(leader, 0, 3, produce, "late-producer")
    c.advance(500)
    if timeout:
        c.advance(TXN_TIMEOUT_MS + 12_000)          # the timeout, and the periodic check (every 10 s)
    else:
        end = {"transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch, "committed": False}
        assert c.call(coordinator, 26, 1, end, "txn-producer").error_code == ErrorCode.none
        c.advance(2000)
    partition = c.partition(leader, "t")
    assert partition.log.log_end_offset == 1                        # the abort marker only
    assert partition.last_stable_offset() == partition.high_watermark == 1
    assert c.brokers[coordinator].core.transactions.describe("tx").state is TransactionState.COMPLETE_ABORT
    c.net.heal_link(CLIENT, leader)                                 # the Produce arrives, late
    c.settle()
    waited = 0
    while not c.inbox[(leader, "late-producer")] and waited < 5000:
        c.advance(10)
        waited += 10
    answer = c.response(leader, 0, 3, "late-producer")
    assert answer is not None, "the late Produce was never answered"
    return c, coordinator, leader, answer.responses[0].partition_responses[0]


def test_without_verification_a_late_first_batch_opens_a_transaction_that_never_ends():
    c, coordinator, leader, answer = _late_first_batch(verify=False)
    assert answer.error_code == ErrorCode.none and answer.base_offset == 1
    normal = build_batch([(b"k", b"after")], c.now)
    c.call(leader, 0, 3, {"transactional_id": None, "acks": -1, "timeout": 30000,
                          "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": bytes(normal)}]}]},
           "other-producer")
    c.advance(3 * TXN_TIMEOUT_MS + 20_000)          # past the transaction timeout and its abort check, many times
    partition = c.partition(leader, "t")
    assert partition.high_watermark == 3
    assert partition.last_stable_offset() == 1, "the late batch's transaction should hang the partition"
    assert c.brokers[coordinator].core.transactions.describe("tx").state is TransactionState.COMPLETE_ABORT


def test_with_verification_the_late_first_batch_is_refused():
    c, coordinator, leader, answer = _late_first_batch(verify=True)
    assert answer.error_code == ErrorCode.invalid_txn_state
    c.advance(3 * TXN_TIMEOUT_MS)
    partition = c.partition(leader, "t")
    assert partition.log.log_end_offset == 1
    assert partition.last_stable_offset() == partition.high_watermark == 1


def test_a_late_batch_of_a_transaction_aborted_on_timeout_is_fenced_by_the_bumped_epoch():
    c, coordinator, leader, answer = _late_first_batch(verify=False, timeout=True)
    assert answer.error_code == ErrorCode.invalid_producer_epoch
    partition = c.partition(leader, "t")
    assert partition.log.log_end_offset == 1 and partition.last_stable_offset() == partition.high_watermark == 1
