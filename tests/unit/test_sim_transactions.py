"""Transactions under the explorer's random faults (sim explore --config txn): transactional
producers commit and abort across two topics while brokers die, pause and lose their links; a
read_committed consumer reads throughout. Committed transactions must be whole, aborted ones
invisible, undecided ones all or nothing; read_committed never passes an open transaction. The
checker can fail: a broker whose last stable offset ignores open transactions, and a consumer
that ignores the aborted transactions of a Fetch answer, are both caught."""

from __future__ import annotations

import dataclasses

import pytest

from strandline.replication.partition import Partition
from strandline.sim import txn_checker, txn_workload
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


@pytest.mark.parametrize("seed", [1220026, 1340036])
def test_ctl_11_an_election_written_while_a_move_completes_is_not_sent_with_the_new_replicas(seed):
    """Seed 1220026 of ``sim explore --config txn --reassign`` once caught a controller sending an
    ISR outside a partition's replicas: an election decided while a move was under way (ISR
    [3, 2, 4] of replicas [1, 4, 2, 3]) had its write answered late, after the move's end had
    narrowed the replicas to [1, 4, 2]; the state was sent as written, with the new replicas.
    Seed 1340036 caught another partition's move writing the topic znode with the narrowed
    replicas of a partition whose end was not written yet (ZooKeeper's ISR then named a replica
    its assignment no longer had)."""
    result = run_seed(seed, "txn", reassign=True)
    assert result.ok, f"{result.all_violations}\n" + "\n".join(result.trace)


def test_a_deposed_coordinator_acknowledges_nothing_from_memory():
    """Seed 39 without power loss once caught a coordinator cut off from ZooKeeper and the other
    brokers, deposed without knowing it, acknowledging AddPartitionsToTxn from its stale state; the
    new coordinator took the commit for a retry of the producer's previous transaction (same epoch,
    CompleteCommit) and acknowledged it: no marker ever reached the partition."""
    result = Explorer(39, NO_POWER_LOSS).run()
    assert result.ok, f"{result.all_violations}\n" + "\n".join(result.trace)


def test_power_loss_keeps_committed_transaction_markers():
    """Seed 4 (and a third of the first 150 seeds) once caught a leader whose own appends
    (WriteTxnMarkers, ``__transaction_state``) were not flushed under ``log.flush.on.ack``: its
    followers copied a commit marker and the high watermark passed it, the leader lost power, came
    back without it and led again, the followers cut their committed copies, later records took the
    marker's offset, and the transaction stayed open on that partition for good."""
    result = run_seed(4, "txn")
    assert result.ok, result.all_violations


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
