"""The explorer's scratch topic (``sim explore --recreate``): a second topic, written all along,
that the nemesis deletes and creates again under the same name amid the faults.

At the end, if it exists, every replica must hold exactly its leader's log (none keeps records of
an earlier topic of that name); if it does not, no broker may still hold it.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

from strandline.coordination import znodes
from strandline.coordination.store import GetData
from strandline.protocol.api import ApiKey
from strandline.sim.checker import Violation
from strandline.sim.cluster import SimCluster
from strandline.sim.workload import Firehose, History

SCRATCH = "scratch"
SCRATCH_PARTITIONS = 2


def exists(sim: SimCluster, topic: str) -> bool:
    """Whether ZooKeeper holds the topic's znode."""
    [res] = sim.zk.execute([GetData(znodes.TopicZNode.path(topic))])
    return res.data is not None


class ScratchTopic:
    def __init__(self, sim: SimCluster, replication_factor: int, configs: Sequence[tuple[str, str]],
                 note: Callable[[str], None]) -> None:
        self.sim = sim
        self.replication_factor = replication_factor
        self.configs = [(k, v) for k, v in configs if k != "cleanup.policy"]   # never compacted: each
        # replica's cleaner would rewrite its log in its own time
        self.note = note
        self.writers: list[Firehose] = []
        self.requests = 0               # deletions and creations asked for

    def creatable(self) -> dict[str, Any]:
        """Its entry in a CreateTopics request."""
        return {"name": SCRATCH, "num_partitions": SCRATCH_PARTITIONS, "replication_factor": self.replication_factor,
                "assignments": [], "configs": [{"name": k, "value": v} for k, v in self.configs]}

    def start_writers(self, rng: random.Random, interval_ms: int = 100) -> None:
        """An acks=1 write to each partition every ``interval_ms``, whatever topic of that name exists then."""
        for index in range(SCRATCH_PARTITIONS):
            writer = Firehose(self.sim, History(), f"s{index}", SCRATCH, index, random.Random(rng.random()),
                              interval_ms=interval_ms)
            self.writers.append(writer)
            writer.start()

    def stop_writers(self) -> None:
        for writer in self.writers:
            writer.stopped = True

    def recreate(self) -> None:
        """Delete the topic, or create it again if it is gone; the answer is not awaited (a
        refusal, such as too few live brokers for its replicas, is part of the run)."""
        sim = self.sim
        controller = sim.controller_id
        if controller < 0 or sim.brokers[controller].core is None:
            return
        self.requests += 1
        if exists(sim, SCRATCH):
            self.note(f"nemesis: delete topic {SCRATCH}")
            sim.request(controller, ApiKey.DELETE_TOPICS, 4, {"topic_names": [SCRATCH], "timeout_ms": 30000}, "admin")
        else:
            self.note(f"nemesis: create topic {SCRATCH} again")
            sim.request(controller, ApiKey.CREATE_TOPICS, 5, {"topics": [self.creatable()], "timeout": 30000,
                                                              "validate_only": False}, "admin")

    def check(self, assignment: Callable[[str], dict[int, tuple[int, ...]]], describe: Callable[[], str],
              waiting: Callable[[str, int], bool] = lambda topic, index: False) -> None:
        """The final check (``assignment(topic)``: what ZooKeeper assigns); a partition that
        ``waiting(topic, index)`` says waits offline (eligible leader replicas) has no leader to
        agree with."""
        sim = self.sim
        if not exists(sim, SCRATCH):
            ghosts = sorted(b for b, node in sim.brokers.items() if node.core is not None and (
                SCRATCH in node.core.metadata.topics or any(k[0] == SCRATCH for k in node.core.partitions)))
            if ghosts:
                raise Violation("a deleted topic is gone", f"brokers {ghosts} still hold topic {SCRATCH}, "
                                "deleted in ZooKeeper", sim.now)
            return
        for index, replicas in sorted(assignment(SCRATCH).items()):
            if waiting(SCRATCH, index):
                continue
            leader = sim.state(SCRATCH, index).leader
            expected = sim.log_bytes(leader, SCRATCH, index)
            for broker in replicas:
                if sim.log_bytes(broker, SCRATCH, index) != expected:
                    raise Violation("the replicas of a topic made again agree",
                                    f"{SCRATCH}-{index} on broker {broker} differs from its leader {leader}'s "
                                    f"log: " + describe(), sim.now)
