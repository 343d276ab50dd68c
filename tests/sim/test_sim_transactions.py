"""Transactions under the explorer's random faults (sim explore --config txn): transactional
producers commit and abort across two topics while brokers die, pause and lose their links; a
read_committed consumer reads throughout. Committed transactions must be whole, aborted ones
invisible, undecided ones all or nothing; read_committed never passes an open transaction. The
checker can fail: a broker whose last stable offset ignores open transactions, and a consumer
that ignores the aborted transactions of a Fetch answer, are both caught."""

from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode

from strandline.controller.reassignment import PartitionReassignments
from strandline.log.log import Log
from strandline.replication.leader_writes import LeaderWrites
from strandline.replication.partition import Partition
from strandline.sim import txn_checker, txn_workload
from strandline.sim.cluster import SimCluster
from strandline.sim.explore import CONFIGS, Explorer, run_seed

NO_POWER_LOSS = dataclasses.replace(CONFIGS["txn"], power_loss="never")


@pytest.mark.parametrize("seed", [2, 6, 7, 10, 11, 20, 53])
def test_transactions_stay_atomic_under_random_faults(seed):
    """Seed 7 once caught a coordinator that acknowledged AddPartitionsToTxn from state it had
    loaded above the high watermark (lost at the next failover: a committed transaction hung on
    one partition); seeds 7, 11, 20 and 53 have transactions whose commit outcome stays unknown."""
    result = run_seed(seed, "txn")
    assert result.ok, f"seed {seed}: {result.all_violations}\n" + "\n".join(result.trace)
    assert result.transactions.get("committed", 0) > 0 and result.transactions.get("aborted", 0) > 0
    assert result.faults > 10


def _writes_over_an_ending_move(monkeypatch) -> list[tuple]:
    """Every topic znode write of a move made while another partition of that topic has its move
    ending (its assignment narrowed, the end not written yet) and ZooKeeper's ISR of it still names
    a replica the narrowing dropped: ``(topic, partition written, ending partition)``."""
    seen: list[tuple] = []
    real = PartitionReassignments._write_assignment

    def write_assignment(self, ctx, topic, index, replicas, *args):
        real_queue = ctx.queue_topic_write

        def queue(name, write, now_ms):
            def observed(at_ms):
                for (n, p), before in ctx.completing.items():
                    narrowed, state = topic.assignment.get(p), topic.states.get(p)
                    if n == name and p != index and narrowed != before and state is not None \
                            and not set(state.isr) <= set(narrowed):
                        seen.append((name, index, p))
                return write(at_ms)
            return real_queue(name, observed, now_ms)
        ctx.queue_topic_write = queue
        try:
            return real(self, ctx, topic, index, replicas, *args)
        finally:
            del ctx.queue_topic_write
    monkeypatch.setattr(PartitionReassignments, "_write_assignment", write_assignment)
    return seen


def test_ctl_11_a_move_written_while_another_partitions_move_ends_keeps_its_recorded_replicas(monkeypatch):
    """Seed 1340036 of ``sim explore --config txn --reassign`` once caught a partition's move
    writing the topic znode with the narrowed replicas of another partition whose end was not
    written yet: ZooKeeper's ISR then named a replica its assignment no longer had. The write now
    keeps that partition's recorded replicas until its end is written. The explorer has changed
    since and seed 1340036 no longer makes such a write; seed 1220013 does (partition 0's move
    written while partition 2's end narrowed [3, 2, 4, 1] to [3, 2, 4], its ISR still naming 1)."""
    over = _writes_over_an_ending_move(monkeypatch)
    result = run_seed(1220013, "txn", reassign=True, isr_writes="2.6")    # as found: leaders write ISRs
    assert result.ok, f"{result.all_violations}\n" + "\n".join(result.trace)
    assert over, "seed 1220013 no longer writes a move while another partition's move ends"


def _txn_call(c: SimCluster, broker: int, api_key: int, version: int, body: dict, within_ms: int = 1000):
    return c.call(broker, api_key, version, body, "txn-producer", within_ms)


def _added(c: SimCluster, broker: int, body: dict, within_ms: int = 1000) -> ErrorCode:
    """AddPartitionsToTxn v1 of one partition: its error."""
    answer = _txn_call(c, broker, 24, 1, body, within_ms)
    return answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def test_a_deposed_coordinator_acknowledges_nothing_from_memory():
    """Seed 39 of the explorer (txn, without power loss) once caught a coordinator cut off from
    ZooKeeper and the other brokers, deposed without knowing it, acknowledging AddPartitionsToTxn
    from its stale state; the new coordinator took the commit for a retry of the producer's
    previous transaction (same epoch, CompleteCommit) and acknowledged it: no marker ever reached
    the partition. What the state already says is now acknowledged only once written again,
    which a deposed coordinator cannot. Played step by step: the coordinator is cut off, its
    session expires and another broker takes ``__transaction_state``; the producer, which still
    reaches the old coordinator, asks again for the partition it added, and is refused."""
    c = SimCluster((1, 2, 3, 4), **{"transaction.state.log.num.partitions": "1", "replica.lag.time.max.ms": "1000",
                                    "auto.leader.rebalance.enable": "false"})
    body = {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}],
            "timeout": 1000, "validate_only": False}
    assert c.call(c.controller_id, 19, 5, body).topics[0].error_code == ErrorCode.none
    c.settle()
    for _ in range(50):
        found = _txn_call(c, 1, 10, 3, {"key": "tx", "key_type": 1})
        if found.error_code == ErrorCode.none:
            break
        c.advance(100)
    assert found.error_code == ErrorCode.none, found
    old = found.node_id
    init = _txn_call(c, old, 22, 1, {"transactional_id": "tx", "transaction_timeout": 60000})
    assert init.error_code == ErrorCode.none, init
    add = {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": init.producer_id,
           "v3_and_below_producer_epoch": init.producer_epoch, "v3_and_below_topics": [{"name": "t", "partitions": [0]}]}
    assert _added(c, old, add) == ErrorCode.none
    c.cut_off(old)
    c.expire_session(old)
    c.advance(3000)
    new = c.state("__transaction_state").leader
    assert new not in (-1, old)
    again = _added(c, old, add, within_ms=40_000)           # the partition it holds already
    assert again != ErrorCode.none
    c.heal(old)
    c.advance(3000)
    assert _added(c, new, add) == ErrorCode.none


def test_power_loss_keeps_committed_transaction_markers(monkeypatch):
    """Seed 4 (and a third of the first 150 seeds) once caught a leader whose own appends
    (WriteTxnMarkers, ``__transaction_state``) were not flushed under ``log.flush.on.ack``: its
    followers copied a commit marker and the high watermark passed it, the leader lost power, came
    back without it and led again, the followers cut their committed copies, later records took the
    marker's offset, and the transaction stayed open on that partition for good. The leader now
    flushes its own appends; the run has a leader lose power while a log it leads was last flushed
    by that flush (with it left out, the run fails: replicas differ below the HW). Seed 1 since the
    leaders verify transactions with their coordinator (KIP-890), which changed seed 4's run."""
    own: list[bool] = []
    last_flush: dict[int, tuple[Log, bool]] = {}      # id(log) -> (log, whether of the broker's own append)
    cases: list[tuple] = []
    real_append, real_flush, real_crash = LeaderWrites.append_internal, Log.flush, SimCluster.crash

    def append_internal(self, *args, **kwargs):
        own.append(True)
        try:
            return real_append(self, *args, **kwargs)
        finally:
            own.pop()

    def flush(self, *args, **kwargs):
        last_flush[id(self)] = (self, bool(own))
        return real_flush(self, *args, **kwargs)

    def crash(self, broker_id, *, lose_unflushed=True, **kwargs):
        core = self.brokers[broker_id].core
        if lose_unflushed and core is not None:
            for key, log in core.logs.logs.items():
                flushed = last_flush.get(id(log))
                partition = core.partitions.get(key)
                if flushed is not None and flushed[0] is log and flushed[1] and partition is not None \
                        and partition.is_leader:
                    cases.append((broker_id, key))
        return real_crash(self, broker_id, lose_unflushed=lose_unflushed, **kwargs)
    monkeypatch.setattr(LeaderWrites, "append_internal", append_internal)
    monkeypatch.setattr(Log, "flush", flush)
    monkeypatch.setattr(SimCluster, "crash", crash)
    result = run_seed(1, "txn")
    assert result.ok, result.all_violations
    assert cases, "seed 1 no longer has a leader lose power after flushing its own append"


def test_a_transactional_seed_replays_exactly():
    runs = [run_seed(3, "txn", duration_ms=15000) for _ in range(2)]
    assert runs[0].events == runs[1].events and runs[0].transactions == runs[1].transactions
    assert runs[0].trace == runs[1].trace


def test_the_checker_catches_a_last_stable_offset_that_passes_open_transactions(monkeypatch):
    """read_committed reads up to the high watermark, open transactions and all."""
    monkeypatch.setattr(Partition, "last_stable_offset", lambda self: self.high_watermark)
    result = Explorer(2, NO_POWER_LOSS, duration_ms=15000).run()
    assert any(v.startswith("read_committed shows only committed transactions") for v in result.all_violations), \
        result.all_violations


def test_the_checker_catches_records_of_aborted_transactions(monkeypatch):
    """A reader that ignores the Fetch answer's aborted transactions shows aborted records."""
    monkeypatch.setattr(txn_workload, "_aborted", lambda answer: [])
    monkeypatch.setattr(txn_checker, "_aborted", lambda answer: [])
    result = Explorer(2, NO_POWER_LOSS, duration_ms=15000).run()
    assert any(v.startswith("aborted transactions stay invisible") for v in result.all_violations), \
        result.all_violations
