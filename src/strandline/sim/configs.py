"""The explorer's configurations (:mod:`strandline.sim.explore`): what each promises to keep.

``safe`` is SPEC SAFE-1 (acks=all, min.insync.replicas=2, no unclean election, leader-epoch
truncation) and must never lose an acknowledged write (``compact`` on a compacted topic, ``txn``
with transactions); ``acks1``, ``unclean`` and ``legacy`` are
the loss cases LOSS-1/LOSS-3, LOSS-2 and EPO-4 and must lose some. A module of its own so that the
command line names them without loading the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass


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
