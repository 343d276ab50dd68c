"""The explorer's configurations (:mod:`strandline.sim.explore`): what each promises to keep.

``safe`` is SPEC SAFE-1 (acks=all, min.insync.replicas=2, no unclean election, leader-epoch
truncation) and must never lose an acknowledged write; ``acks1``, ``unclean`` and ``legacy`` are
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

    @property
    def compacted(self) -> bool:
        return "compact" in dict(self.topic).get("cleanup.policy", "")


CONFIGS = {
    "safe": ExploreConfig("safe", {"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                                   "replication.truncation": "leader-epoch"}, frozenset({-1}), False, "random"),
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
}
