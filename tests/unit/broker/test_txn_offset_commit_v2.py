"""TxnOffsetCommit v5 under ``transaction.version`` 2 (KIP-890 part 2): a client of transactions v2
sends no AddOffsetsToTxn, so the group coordinator's broker has the transaction coordinator add the
group's ``__consumer_offsets`` partition (AddPartitionsToTxn v5, played here by the test) before
it writes the offsets; v3 and transaction version 1 go on as before."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.group.offsets_topic import OFFSETS_TOPIC
from strandline.group.records import partition_for
from tests.unit.broker.test_broker_core import Harness


class Coordinator:
    def __init__(self) -> None:
        self.asked: list[tuple] = []

    def verify(self, transactional_id, producer_id, producer_epoch, partitions, done, now_ms, add=False):
        self.asked.append((transactional_id, producer_id, producer_epoch, list(partitions), add, done))
        return []


def commit_body(group: str = "g") -> dict:
    return {"transactional_id": "tx", "group_id": group, "producer_id": 4000, "producer_epoch": 3,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "v", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def harness(**overrides) -> tuple[Harness, Coordinator]:
    h = Harness(**overrides)
    assert h.create("v").error_code == ErrorCode.none
    coordinator = Coordinator()
    h.broker.apis.txn_apis.verifier = coordinator
    return h, coordinator


def test_a_txn_offset_commit_v5_adds_the_groups_partition_to_the_transaction_first():
    h, coordinator = harness(**{"offsets.topic.num.partitions": "1"})
    h.request(28, 5, commit_body(), 1)
    [(tid, pid, epoch, partitions, add, done)] = coordinator.asked
    assert (tid, pid, epoch, partitions, add) == ("tx", 4000, 3, [(OFFSETS_TOPIC, partition_for("g", 1))], True)
    assert not h.sent.get(1)                                             # nothing answered before it is added
    for error, seen in [(ErrorCode.invalid_txn_state, ErrorCode.transaction_abortable),
                        (ErrorCode.concurrent_transactions, ErrorCode.coordinator_not_available),
                        (ErrorCode.invalid_producer_epoch, ErrorCode.invalid_producer_epoch)]:
        h.request(28, 5, commit_body(), 2)
        h.run(coordinator.asked.pop()[-1]({(OFFSETS_TOPIC, 0): error}, h.now))
        assert h.response(28, 5, 2).topics[0].partitions[0].error_code == seen, error


def test_older_versions_and_transaction_version_1_do_not_add():
    h, coordinator = harness()
    h.request(28, 3, commit_body(), 1)
    assert not coordinator.asked
    h, coordinator = harness(**{"transaction.version": "1"})
    h.request(28, 5, commit_body(), 1)
    assert not coordinator.asked
