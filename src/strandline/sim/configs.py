"""The explorer's configurations (:mod:`strandline.sim.explore`): what each promises to keep.

``safe`` is SPEC SAFE-1 (acks=all, min.insync.replicas=2, no unclean election, leader-epoch
truncation) and must never lose an acknowledged write (``compact`` on a compacted topic, ``txn``
with transactions); ``acks1``, ``unclean`` and ``legacy`` are
the loss cases LOSS-1/LOSS-3, LOSS-2 and EPO-4 and must lose some. Also the broker settings a seed
draws for itself when asked for ``mixed`` (the inter-broker protocol, eligible leader replicas, the
unclean recovery strategy). A module of its own so that the command line names them without loading
the simulator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from strandline.core.topic_keys import UNCLEAN_RECOVERY_STRATEGIES


@dataclass(frozen=True)
class ExploreConfig:
    name: str
    broker: dict[str, str]
    checked_acks: frozenset[int]
    """Acknowledgements the configuration promises to keep (the others may be lost)."""
    must_lose: bool
    power_loss: str = "never"
    """"never", "always", or "random": power loss is injected only where the run flushes on ack."""
    topic: tuple[tuple[str, str], ...] = ()
    """The topic's configs."""
    transactions: bool = False
    """Transactional producers on two topics and a read_committed consumer join the run
    (:mod:`strandline.sim.txn_workload`), judged by :mod:`strandline.sim.txn_checker`."""

    @property
    def compacted(self) -> bool:
        return "compact" in dict(self.topic).get("cleanup.policy", "")


CONFIGS = {
    # segments of 2 KiB roll every few dozen records: the rolls' flushes (made after the roll) meet
    # the faults too
    "safe": ExploreConfig("safe", {"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                                   "replication.truncation": "leader-epoch"}, frozenset({-1}), False, "random",
                          (("segment.bytes", "2048"),)),
    "acks1": ExploreConfig("acks1", {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"},
                           frozenset({1}), True, "never"),
    "unclean": ExploreConfig("unclean", {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"},
                             frozenset({-1}), True, "never"),
    "legacy": ExploreConfig("legacy", {"min.insync.replicas": "2", "replication.truncation": "high-watermark"},
                            frozenset({-1}), True, "never"),
    # SAFE-1 on a compacted topic: every replica's cleaner rewrites its log under the faults, small
    # segments roll often; what must survive is the newest acknowledged value of each key
    "compact": ExploreConfig("compact", {"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                                         "replication.truncation": "leader-epoch", "log.cleaner.backoff.ms": "200"},
                             frozenset({-1}), False, "random",
                             (("cleanup.policy", "compact"), ("segment.bytes", "1024"),
                              ("min.cleanable.dirty.ratio", "0.01"))),
    # SAFE-1 with transactions (KIP-98): transactional producers commit and abort across two
    # topics under the faults; committed transactions must be whole, aborted ones invisible to
    # read_committed readers, undecided ones all or nothing
    "txn": ExploreConfig("txn", {"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                                 "replication.truncation": "leader-epoch",
                                 "transaction.state.log.num.partitions": "4",
                                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"},
                         frozenset({-1}), False, "random", transactions=True),
}


def inter_broker_protocol_of(seed: int, isr_writes: str) -> str:
    """``inter.broker.protocol.version`` of ``seed``'s run: 2.8 (AlterIsr) or 2.6 (legacy) by name,
    or drawn for ``mixed`` from a random source of its own (the run's other draws do not depend on it)."""
    if isr_writes == "mixed":
        return random.Random(f"inter.broker.protocol.version-{seed}").choice(("2.6", "2.8"))
    return isr_writes


def eligible_leader_replicas_of(seed: int, elr: str) -> bool:
    """Whether ``seed``'s run has eligible leader replicas: ``on``, ``off``, or drawn for ``mixed``
    from a random source of its own (the run's other draws do not depend on it)."""
    if elr == "mixed":
        return random.Random(f"eligible.leader.replicas.enable-{seed}").random() < 0.5
    if elr not in ("on", "off"):
        raise ValueError(f"elr must be on, off or mixed, not {elr!r}")
    return elr == "on"


def unclean_recovery_of(seed: int, strategy: str) -> str:
    """``seed``'s unclean.recovery.strategy: the one named, or for ``mixed`` one drawn from a random
    source of its own (Balanced half the time, Aggressive and None a quarter each)."""
    if strategy == "mixed":
        return random.Random(f"unclean.recovery.strategy-{seed}").choice(("Balanced", "Balanced", "Aggressive", "None"))
    if strategy not in UNCLEAN_RECOVERY_STRATEGIES:
        raise ValueError(f"unclean recovery must be Balanced, Aggressive, None or mixed, not {strategy!r}")
    return strategy
