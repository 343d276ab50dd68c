"""Transactional offsets (TxnOffsetCommit) against plain OffsetCommits of the same group and
partition, through the group coordinator's public methods.

Kafka keeps whichever commit was appended later to ``__consumer_offsets``: a transaction's commit
marker installs its pending offset only if the committed one is older in the log
(``GroupMetadata.completePendingTxnOffsetCommit``: ``currentOffsetOpt.forall(_.olderThan(...))``),
a plain commit whose write completes after a newer transactional offset was installed leaves it
(``onOffsetCommitAppend``), and a coordinator replaying the partition does the same
(``GroupMetadataManager.doLoadGroupsAndOffsets``). Issue 17.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.group.coordinator import GroupCoordinator

CONFIG = {"offsets.topic.num.partitions": 1, "offset.metadata.max.bytes": 4096,
          "offsets.retention.minutes": 10080}
GROUP, TP, PRODUCER = "g", ("in", 0), 7


class FakeOffsetsLog:
    """The offsets partition as the coordinator's ``append`` sees it: each append is numbered
    from the log end at once; ``done`` runs at once, or once :meth:`replicate` is called (an
    acks=all write waiting for the ISR) when ``hold`` is set."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes | None, bytes | None, int, int | None]] = []
        self.hold = False
        self.waiting: list = []

    def append(self, partition: int, records: list, done, now_ms: int, producer=None) -> list:
        base = len(self.records)
        pid = producer[0] if producer is not None else -1
        for key, value in records:
            self.records.append((len(self.records), key, value, pid, None))
        if self.hold:
            self.waiting.append(lambda: done(ErrorCode.none, now_ms, base))
            return []
        return done(ErrorCode.none, now_ms, base)

    def replicate(self) -> None:
        waiting, self.waiting = self.waiting, []
        for complete in waiting:
            complete()

    def marker(self, producer_id: int, commit: bool) -> None:
        """WriteTxnMarkers: the control record lands in the log (the broker then calls end_txn)."""
        self.records.append((len(self.records), None, None, producer_id, 1 if commit else 0))


def setup() -> tuple[GroupCoordinator, FakeOffsetsLog]:
    log = FakeOffsetsLog()
    coordinator = GroupCoordinator(CONFIG, log.append, lambda: "x")
    coordinator.load_partition(0, [], 0)
    return coordinator, log


def plain_commit(coordinator: GroupCoordinator, offset: int, now_ms: int = 1) -> None:
    answers: list = []
    coordinator.commit({"group_id": GROUP, "member_id": "", "generation_id": -1,
                        "offsets": [(TP[0], TP[1], offset, -1, "")]}, lambda r: answers.append(r) or [], now_ms)
    assert answers in ([], [{TP: ErrorCode.none}])


def txn_commit(coordinator: GroupCoordinator, offset: int, now_ms: int = 1) -> None:
    answers: list = []
    coordinator.txn_commit({"group_id": GROUP, "producer_id": PRODUCER, "producer_epoch": 0,
                            "offsets": [(TP[0], TP[1], offset, -1, "")]}, lambda r: answers.append(r) or [], now_ms)
    assert answers == [{TP: ErrorCode.none}]


def committed(coordinator: GroupCoordinator) -> int | None:
    error, offsets = coordinator.fetch_offsets(GROUP, [(TP[0], [TP[1]])])
    assert error is ErrorCode.none
    value = offsets[TP]
    return value.offset if value is not None else None


def replayed(log: FakeOffsetsLog) -> GroupCoordinator:
    """A new coordinator (after failover) loading the partition from the log."""
    fresh = GroupCoordinator(CONFIG, log.append, lambda: "x")
    fresh.load_partition(0, list(log.records), 2)
    return fresh


def test_a_plain_commit_appended_after_the_transactional_offset_wins_over_the_commit_marker():
    coordinator, log = setup()
    txn_commit(coordinator, 5)                   # the transaction's offset: log offset 0
    plain_commit(coordinator, 10)                # a newer plain commit: log offset 1
    assert committed(coordinator) == 10
    log.marker(PRODUCER, commit=True)
    coordinator.end_txn(0, PRODUCER, True)
    assert committed(coordinator) == 10          # the later append in the log is kept
    assert coordinator.pending_txn_partitions(GROUP) == set()
    assert committed(replayed(log)) == 10        # and a new coordinator replays the same


def test_a_transactional_offset_appended_after_the_plain_commit_is_installed_by_the_commit_marker():
    coordinator, log = setup()
    plain_commit(coordinator, 10)
    txn_commit(coordinator, 5)
    assert committed(coordinator) == 10          # pending until the marker
    log.marker(PRODUCER, commit=True)
    coordinator.end_txn(0, PRODUCER, True)
    assert committed(coordinator) == 5
    assert committed(replayed(log)) == 5


def test_an_aborted_transaction_leaves_the_plain_commit():
    coordinator, log = setup()
    plain_commit(coordinator, 10)
    txn_commit(coordinator, 5)
    log.marker(PRODUCER, commit=False)
    coordinator.end_txn(0, PRODUCER, False)
    assert committed(coordinator) == 10
    assert committed(replayed(log)) == 10


def test_a_plain_commit_completing_after_a_newer_transactional_offset_was_installed_leaves_it():
    coordinator, log = setup()
    log.hold = True
    plain_commit(coordinator, 3)                 # log offset 0, waiting for the ISR
    log.hold = False
    txn_commit(coordinator, 8)                   # log offset 1
    log.marker(PRODUCER, commit=True)
    coordinator.end_txn(0, PRODUCER, True)
    assert committed(coordinator) == 8
    log.replicate()                              # the older plain commit's write completes last
    assert committed(coordinator) == 8
    assert committed(replayed(log)) == 8
