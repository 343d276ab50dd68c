"""What the simulated cluster offers the parts that run inside it (its network and its ZooKeeper
clients): the clock, the machines, ZooKeeper, and the ways to act on a broker. The cluster
(:class:`strandline.sim.cluster.SimCluster`) is one; its parts know it only through this."""

from __future__ import annotations

import random
from typing import Callable, Protocol

from strandline.broker.broker import Broker
from strandline.core.config import BrokerConfig
from strandline.core.effects import Effect
from strandline.sim.node import SimBroker
from strandline.sim.zookeeper import MemoryZooKeeper


class SimWorld(Protocol):
    now: int
    rng: random.Random
    brokers: dict[int, SimBroker]
    zk: MemoryZooKeeper
    latency_ms: int
    jitter_ms: int
    zk_latency_ms: int
    zk_failure_delay_ms: int
    session_timeout_ms: int
    touched: set[int]

    def schedule_in(self, delay_ms: int, action: Callable[[], object]) -> None: ...

    def schedule_at(self, when_ms: int, action: Callable[[], object]) -> None: ...

    def clock_of(self, node: SimBroker) -> int: ...

    def run_on(self, broker_id: int, incarnation: int, delay_ms: int,
               action: Callable[[Broker, int], list[Effect]]) -> None: ...

    def apply(self, node: SimBroker, effects: list[Effect]) -> None: ...

    def broker_config(self, broker_id: int) -> BrokerConfig: ...
