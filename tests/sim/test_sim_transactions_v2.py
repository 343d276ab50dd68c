"""Transactions v2 (KIP-890 part 2) under the explorer's random faults: the transactional
producers act as Kafka's 4.x client with ``transaction.version`` 2 (no AddPartitionsToTxn: each
Produce v12 has its leader add the partition; EndTxn v5, whose answer gives the bumped epoch of
the next transaction). The checker's invariants are those of transactions v1
(test_sim_transactions.py): committed transactions whole, aborted ones invisible, read_committed
never past an open transaction."""

from __future__ import annotations

from collections import defaultdict

import pytest

from strandline.sim.explore import CONFIGS, Explorer


@pytest.mark.parametrize("seed", [2, 7, 10, 20])
def test_transactions_v2_stay_atomic_under_random_faults(seed):
    """Seed 10 once showed a transaction's record committed before its producer asked to commit:
    its first batch on a partition (epoch 63) came before the previous transaction's commit marker
    (written with epoch 63 too) and joined that transaction, open there at epoch 62. The leader
    now counts an open transaction only at the batch's own epoch, and adds the partition first
    (the coordinator answers CONCURRENT_TRANSACTIONS until the markers are written)."""
    explorer = Explorer(seed, CONFIGS["txn"], txn_v2=True)
    result = explorer.run()
    assert result.ok, f"seed {seed}: {result.all_violations}\n" + "\n".join(result.trace)
    assert result.transactions.get("committed", 0) > 0 and result.transactions.get("aborted", 0) > 0
    assert result.faults > 10
    epochs: dict[tuple[str, int], list[int]] = defaultdict(list)
    for txn in explorer.txn_history.txns:
        epochs[(txn.transactional_id, txn.producer_id)].append(txn.producer_epoch)
    # each producer's transactions have epochs of their own, rising (a new instance: a new id or a higher epoch)
    assert all(e == sorted(set(e)) for e in epochs.values()), dict(epochs)
    assert max(len(e) for e in epochs.values()) > 10
