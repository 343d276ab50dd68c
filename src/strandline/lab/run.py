"""What a scenario's faults work with: the cluster, the network, the workload, the sampled views
and the clock (:class:`Run`), and the lab's shortened timeouts.

Timeouts are shortened so a run takes seconds, not minutes (``zookeeper.session.timeout.ms`` 4 s
instead of 18 s, ``replica.lag.time.max.ms`` 2 s instead of 30 s); every other key keeps Kafka's
default. The values used are written to the run's ``run.json``.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, TypedDict

from strandline.errors import StrandlineError
from strandline.lab.cluster import LabCluster
from strandline.lab.network import LabNetwork
from strandline.lab.replicas import ReplicaView, Sampler
from strandline.load.history import Workload
from strandline.load.transactions import TxnWorkload

SESSION_MS = 4000
LAG_MS = 2000
LAB_BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": str(SESSION_MS),
    "replica.lag.time.max.ms": str(LAG_MS),
    "replica.socket.timeout.ms": "3000",
    "controller.socket.timeout.ms": "3000",
    "controlled.shutdown.retry.backoff.ms": "500",
    "replica.high.watermark.checkpoint.interval.ms": "200",   # the sampler reads followers' HW there
}


class LabError(StrandlineError):
    """A run that could not be carried out as written (the cut did not take effect, a wait timed out)."""




class Fault(TypedDict):
    """One fault of a run, as run.json records it."""

    label: str
    start_ms: float
    end_ms: float | None
    brokers: list[int]

class Run:
    """What a scenario's ``drive`` works with: the cluster, the network, the workload, the clock."""

    def __init__(self, cluster: LabCluster, network: LabNetwork | None, workload: Workload | TxnWorkload,
                 sampler: Sampler, topic: str, rng: random.Random) -> None:
        self.cluster = cluster
        self._network = network
        self.workload = workload
        self.sampler = sampler
        self.topic = topic
        self.rng = rng
        self.faults: list[Fault] = []
        self.notes: list[str] = []
        self.measured: dict[str, Any] = {}     # what the faults measured, for the verdict (run.json)

    @property
    def has_network(self) -> bool:
        """Whether the brokers run in network namespaces, where a fault can cut links."""
        return self._network is not None

    @property
    def network(self) -> LabNetwork:
        """The brokers' network namespaces, where a fault cuts links (only a run as root has them)."""
        if self._network is None:
            raise LabError("this run has no network namespaces to cut (they need root)")
        return self._network

    # -- the clock and waiting ------------------------------------------------------------------------

    @staticmethod
    def now_ms() -> float:
        return time.time() * 1000.0

    def wait_for(self, what: str, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise LabError(f"{what}: not seen within {timeout_s:.0f} s")
            time.sleep(0.1)

    def hold(self, seconds: float) -> None:
        """Let the workload run for ``seconds`` with the current faults in place."""
        time.sleep(seconds)

    def begin(self, label: str, brokers: list[int]) -> Fault:
        fault: Fault = {"label": label, "start_ms": self.now_ms(), "end_ms": None, "brokers": brokers}
        self.faults.append(fault)
        return fault

    def end(self, fault: Fault) -> None:
        fault["end_ms"] = self.now_ms()

    # -- what the brokers say ------------------------------------------------------------------------

    def view(self, broker: int, partition: int = 0) -> ReplicaView | None:
        return self.sampler.latest().get((broker, partition))

    def seen(self, broker: int, partition: int = 0) -> ReplicaView:
        """The broker's latest view, or one that knows nothing (no leader, controller or offsets)
        until it has answered: a condition on it holds only once the broker said so."""
        return self.view(broker, partition) or ReplicaView(0.0, broker, partition, "unknown")

    def leader(self, partition: int = 0, among: list[int] | None = None) -> int:
        """The leader most live brokers report (-1 if none)."""
        votes: dict[int, int] = {}
        for b in among or list(self.cluster.brokers):
            v = self.view(b, partition)
            if v is not None and v.state == "up" and v.leader >= 0:
                votes[v.leader] = votes.get(v.leader, 0) + 1
        return max(votes, key=lambda b: votes[b]) if votes else -1

    def isr(self, broker: int, partition: int = 0) -> set[int]:
        v = self.view(broker, partition)
        return {int(x) for x in v.isr.split(",") if x} if v is not None and v.isr else set()

    def controller(self) -> int:
        votes: dict[int, int] = {}
        for b in self.cluster.brokers:
            v = self.view(b)
            if v is not None and v.state == "up" and v.controller >= 0:
                votes[v.controller] = votes.get(v.controller, 0) + 1
        return max(votes, key=lambda b: votes[b]) if votes else -1

    def others(self, *brokers: int) -> list[int]:
        return [b for b in self.cluster.brokers if b not in brokers]

    def wait_isr(self, leader: int, want: set[int], timeout_s: float = 30.0, partition: int = 0) -> None:
        """Until ``leader`` reports exactly ``want`` as the ISR (the check that a fault took effect)."""
        self.wait_for(f"ISR {sorted(want)} on broker {leader}",
                      lambda: self.isr(leader, partition) == want and self.seen(leader, partition).leader == leader,
                      timeout_s)

    def wait_new_leader(self, old: int, timeout_s: float = 30.0, partition: int = 0) -> int:
        """Until a broker other than ``old`` leads the partition, as it says itself; that broker."""
        found: list[int] = []

        def elected() -> bool:
            views = self.sampler.latest()
            found[:] = [b for b in self.others(old) if (v := views.get((b, partition))) is not None
                        and v.state == "up" and v.leader == b]
            return bool(found)
        self.wait_for(f"a leader other than broker {old}", elected, timeout_s)
        return found[0]

    def wait_acks(self, count: int = 1, timeout_s: float = 30.0) -> None:
        """Until the workload has ``count`` more acknowledgements (writes go on)."""
        since = self.now_ms()
        self.wait_for(f"{count} new acknowledged writes", lambda: self.workload.acked_since(since) >= count, timeout_s)
