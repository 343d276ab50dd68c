"""The explorer's nemesis: the faults a run injects, one function per family of faults.

Every ``expovariate(1/1500)`` ms of simulated time (plus 50) the nemesis takes one step: it lists
the families that can act now (a network fault needs fewer than two at once, a process fault a
live broker and at most one down already, power loss a run that flushes on acknowledgement, an
admin family the run's menu), draws one fault kind among them by weight (:data:`FAMILIES`: each
family's share of a step is its weight over the weights of the families that can act), and calls
that family's function with the brokers and the duration drawn for the step:

- ``clock``: a broker's clock steps by up to 2 s (within 5 s of the truth);
- ``zookeeper``: a broker's ZooKeeper requests turn flaky (replies lost, writes lost or late);
- ``slow-links``: a link between two brokers slows down;
- ``network``: a link cut one way or both, a broker cut from ZooKeeper or from everyone, the
  controller cut from the brokers or from ZooKeeper;
- ``process``: SIGKILL, SIGSTOP for a while, SIGTERM (a controlled shutdown), a restart at once;
- ``power-loss``: SIGKILL losing what was not flushed (only where acknowledged data is flushed);
- ``isr-power-loss``: every ISR member of a partition but one loses power at once, flushed or not
  (only with eligible leader replicas, KIP-966, no broker down already and every ISR full);
- ``reassign``, ``add-partitions``, ``recreate``, ``delete-records``: an operator's requests
  (:mod:`strandline.sim.admin_nemesis`, :mod:`strandline.sim.scratch`).

A fault with a duration heals by itself; :meth:`Nemesis.heal_everything` heals the rest at the end.
The draws are made in a fixed order from the run's one ``random.Random``, so a seed replays exactly.
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass
from typing import AbstractSet, Callable

from strandline.coordination import znodes
from strandline.coordination.store import GetData, ZkError
from strandline.sim.admin_nemesis import AdminNemesis
from strandline.sim.cluster import SimCluster
from strandline.sim.menu import ADMIN_FAMILIES, FAULT_FAMILIES
from strandline.sim.scratch import ScratchTopic


@dataclass(frozen=True)
class Family:
    name: str
    kinds: tuple[tuple[str, int], ...]
    """The faults it draws from, each with its weight (its chance among the kinds of the step)."""
    admin: bool = False
    """An operator's request (switched on by the run's menu), not a fault of the machines."""


FAMILIES = (
    Family("clock", (("clock", 1),)),
    Family("zookeeper", (("flaky-zk", 1),)),
    Family("slow-links", (("slow-link", 1),)),
    Family("network", (("one-way", 1), ("both-ways", 1), ("zk-cut", 1), ("isolate", 2), ("controller-cut", 1))),
    Family("process", (("kill", 2), ("pause", 2), ("stop", 1), ("bounce", 1))),
    Family("power-loss", (("power-loss", 2),)),
    Family("isr-power-loss", (("isr-power-loss", 1),)),
    Family("reassign", (("reassign", 2),), admin=True),
    Family("add-partitions", (("add-partitions", 1),), admin=True),
    Family("recreate", (("recreate", 1),), admin=True),
    Family("delete-records", (("delete-records", 3),), admin=True),
)
assert tuple(f.name for f in FAMILIES if not f.admin) == FAULT_FAMILIES
assert tuple(f.name for f in FAMILIES if f.admin) == ADMIN_FAMILIES


@dataclass
class Fault:
    description: str
    heal: Callable[[], None]
    brokers: frozenset[int] = frozenset()
    network: bool = False
    healed: bool = False


def live_brokers(sim: SimCluster) -> list[int]:
    """The brokers running and registered."""
    return [b for b, n in sim.brokers.items() if n.core is not None and not n.waiting_to_register]


class Nemesis:
    def __init__(self, sim: SimCluster, rng: random.Random, note: Callable[[str], None], *,
                 families: frozenset[str], partitions: int, flush_on_ack: bool, admin: AdminNemesis,
                 scratch: ScratchTopic | None, records_deleted: Callable[[int, int], None],
                 eligible_leader_replicas: bool = False) -> None:
        self.sim = sim
        self.rng = rng
        self.note = note
        self.families = [f for f in FAMILIES if f.name in families]
        self.partitions = partitions
        self.flush_on_ack = flush_on_ack
        self.eligible_leader_replicas = eligible_leader_replicas
        self.admin = admin
        self.scratch = scratch
        self.records_deleted = records_deleted
        self.faults: list[Fault] = []
        self.count = 0
        self.drawn: collections.Counter[str] = collections.Counter()     # steps per family
        self.ticks: dict[str, Callable[[str, int, int, int], None]] = {
            "clock": self.tick_clock, "zookeeper": self.tick_zookeeper, "slow-links": self.tick_slow_link,
            "network": self.tick_network, "process": self.tick_process, "power-loss": self.tick_process,
            "isr-power-loss": self.tick_isr_power_loss,
            "reassign": self.tick_reassign, "add-partitions": self.tick_add_partitions,
            "recreate": self.tick_recreate, "delete-records": self.tick_delete_records}

    # ------------------------------------------------------------------ the step

    def down(self) -> set[int]:
        """The brokers a fault of the process family holds down."""
        return {b for f in self.faults if not f.healed for b in f.brokers}

    def _can_act(self, family: Family, down: set[int], candidates: list[int]) -> bool:
        if family.name == "network":
            return sum(1 for f in self.faults if f.network and not f.healed) < 2
        if family.name == "process":
            return bool(candidates) and len(down) < 2
        if family.name == "power-loss":
            return bool(candidates) and len(down) < 2 and self.flush_on_ack
        if family.name == "isr-power-loss":
            return self.eligible_leader_replicas and not down and self._full_isrs()
        return True

    def _full_isrs(self) -> bool:
        """Every broker is up and registered, and every replica of every partition of the topic
        holds what its leader committed: a power loss of every ISR member of one partition but one
        then leaves a copy of each partition's records. (Without that, power losses one after
        another, before the survivors of the first are copied again, lose what nothing flushed,
        ELR or not: LOSS-5 spread out in time.)"""
        sim, topic = self.sim, self.admin.topic
        if any(node.core is None or node.waiting_to_register for node in sim.brokers.values()):
            return False
        [res] = sim.zk.execute([GetData(znodes.TopicZNode.path(topic))])
        if res.error is not ZkError.NONE:
            return False
        for index, replicas in znodes.TopicZNode.decode(res.data).partitions.items():
            state = sim.state(topic, index)
            leader = sim.partition(state.leader, topic, index) if state.leader >= 0 else None
            if leader is None or not leader.is_leader or set(state.isr) != set(replicas):
                return False
            copies = [sim.partition(r, topic, index) for r in replicas]
            if any(p is None or p.log_end_offset < leader.high_watermark for p in copies):
                return False
        return True

    def step(self) -> None:
        """One step: draw a kind of fault among the families that can act, then the step's two
        brokers and duration, and hand them to the family's function."""
        rng, sim = self.rng, self.sim
        down = self.down()
        candidates = [b for b in live_brokers(sim) if b not in down]
        kinds: list[tuple[str, Family]] = []
        for family in self.families:
            if self._can_act(family, down, candidates):
                kinds += [(kind, family) for kind, weight in family.kinds for _ in range(weight)]
        if not kinds:
            return
        kind, family = rng.choice(kinds)
        a, b = rng.sample(sorted(sim.brokers), 2)
        duration = int(rng.choice((rng.uniform(100, 3000), rng.uniform(3000, 15000))))
        self.count += 1
        self.drawn[family.name] += 1
        self.ticks[family.name](kind, a, b, duration)

    # ------------------------------------------------------------------ one function per family

    def tick_clock(self, kind: str, a: int, b: int, duration: int) -> None:
        sim = self.sim
        target = self.rng.choice(sorted(sim.brokers))
        delta = self.rng.randint(-2000, 2000)
        if abs(sim.brokers[target].clock_offset_ms + delta) <= 5000:
            sim.step_clock(target, delta)
            self.note(f"nemesis: clock of broker {target} steps {delta:+d} ms")

    def tick_zookeeper(self, kind: str, a: int, b: int, duration: int) -> None:
        sim = self.sim
        target = self.rng.choice(sorted(sim.brokers))
        sim.zk_flaky[target] = 0.5
        self.fault(f"ZooKeeper requests of broker {target} flaky", duration, lambda: sim.zk_flaky.pop(target, None))

    def tick_slow_link(self, kind: str, a: int, b: int, duration: int) -> None:
        sim = self.sim
        extra = self.rng.randint(20, 200)
        sim.slow[(a, b)] = extra
        self.fault(f"link {a}->{b} slow (+{extra} ms)", duration, lambda: sim.slow.pop((a, b), None), network=True)

    def tick_network(self, kind: str, a: int, b: int, duration: int) -> None:
        sim, rng = self.sim, self.rng
        if kind == "one-way":
            sim.cut_link(a, b)
            self.fault(f"link {a}->{b} cut (one way)", duration, lambda: sim.heal_link(a, b), network=True)
        elif kind == "both-ways":
            sim.cut_link(a, b)
            sim.cut_link(b, a)

            def heal_both_ways() -> None:
                sim.heal_link(a, b)
                sim.heal_link(b, a)
            self.fault(f"link {a}<->{b} cut", duration, heal_both_ways, network=True)
        elif kind == "zk-cut":
            target = rng.choice(sorted(sim.brokers))
            sim.cut_from_zookeeper(target)
            self.fault(f"broker {target} cut from ZooKeeper", duration, lambda: sim.heal_zookeeper(target),
                       network=True)
        elif kind == "isolate":
            target = rng.choice(sorted(sim.brokers))
            sim.cut_off(target)
            self.fault(f"broker {target} isolated (ZooKeeper and brokers)", duration, lambda: sim.heal(target),
                       network=True)
        else:                                   # the controller cut off
            controller = sim.controller_id
            if controller < 0:
                return
            others = [x for x in sorted(sim.brokers) if x != controller]
            if rng.random() < 0.5:
                sim.partition_brokers([controller], others)

                def heal_controller() -> None:
                    for o in others:
                        sim.heal_link(controller, o)
                        sim.heal_link(o, controller)
                self.fault(f"controller {controller} cut from the other brokers", duration, heal_controller,
                           network=True)
            else:
                sim.cut_from_zookeeper(controller)
                self.fault(f"controller {controller} cut from ZooKeeper", duration,
                           lambda: sim.heal_zookeeper(controller), network=True)

    def tick_process(self, kind: str, a: int, b: int, duration: int) -> None:
        sim, rng = self.sim, self.rng
        down = self.down()
        target = rng.choice([x for x in live_brokers(sim) if x not in down])
        if kind == "pause":
            sim.pause(target)
            self.fault(f"broker {target} paused (SIGSTOP)", duration, lambda: sim.resume(target), brokers={target})
        elif kind == "bounce":
            sim.bounce(target, lose_unflushed=self.flush_on_ack and rng.random() < 0.5)
            self.note(f"nemesis: broker {target} restarted at once")
        elif kind == "stop":
            self.stop(target, duration)
        else:
            power = kind == "power-loss"
            sim.crash(target, lose_unflushed=power, expire_at_once=False)
            self.fault(f"broker {target} {'lost power' if power else 'killed (SIGKILL)'}", duration,
                       lambda: self.restart(target), brokers={target})

    def tick_isr_power_loss(self, kind: str, a: int, b: int, duration: int) -> None:
        """Every live member of a partition's ISR (as ZooKeeper holds it) but one, drawn, loses
        power at once; they come back after ``duration``. With eligible leader replicas nothing
        acknowledged may be lost (SAFE-1), flushed or not: the one kept holds it."""
        sim, rng = self.sim, self.rng
        index = rng.randrange(self.partitions)
        live = set(live_brokers(sim))
        isr = [r for r in sim.state(self.admin.topic, index).isr if r in live]
        if len(isr) < 2:
            self.note(f"nemesis: partition {index}'s ISR {isr} has no member to spare: no power loss")
            return
        kept = rng.choice(isr)
        victims = sorted(r for r in isr if r != kept)
        for victim in victims:
            sim.crash(victim, lose_unflushed=True, expire_at_once=False)

        def restart_all() -> None:
            for victim in victims:
                self.restart(victim)
        self.fault(f"brokers {victims} of partition {index}'s ISR {isr} lost power (broker {kept} kept)", duration,
                   restart_all, brokers=set(victims))

    def tick_reassign(self, kind: str, a: int, b: int, duration: int) -> None:
        self.admin.reassign(self.rng.randrange(self.partitions), self.rng)

    def tick_add_partitions(self, kind: str, a: int, b: int, duration: int) -> None:
        self.admin.add_partition()

    def tick_recreate(self, kind: str, a: int, b: int, duration: int) -> None:
        assert self.scratch is not None
        self.scratch.recreate()

    def tick_delete_records(self, kind: str, a: int, b: int, duration: int) -> None:
        index = self.rng.randrange(self.partitions)
        offset = self.admin.delete_records(index, self.rng)
        if offset is not None:
            self.records_deleted(index, offset)

    # ------------------------------------------------------------------ faults and their healing

    def fault(self, description: str, duration_ms: int, heal: Callable[[], object], *,
              brokers: AbstractSet[int] = frozenset(), network: bool = False) -> None:
        fault = Fault(description, lambda: None, frozenset(brokers), network)

        def do_heal() -> None:
            if not fault.healed:
                fault.healed = True
                heal()
                self.note(f"nemesis: healed: {description}")
        fault.heal = do_heal
        self.faults.append(fault)
        self.note(f"nemesis: {description} for {duration_ms} ms")
        self.sim.schedule_in(duration_ms, do_heal)

    def restart(self, broker_id: int) -> None:
        if self.sim.brokers[broker_id].core is None:
            self.sim.start(broker_id)

    def stop(self, broker_id: int, down_ms: int) -> None:
        """SIGTERM: a controlled shutdown (bounded), then a clean stop; back after ``down_ms``."""
        sim = self.sim
        node = sim.brokers[broker_id]
        incarnation = node.incarnation
        sim.begin_controlled_shutdown(broker_id)
        deadline = sim.now + 10000

        def poll() -> None:
            if node.incarnation != incarnation or node.core is None:
                return
            if node.core.controlled_shutdown_done or sim.now >= deadline:
                if node.paused:
                    sim.resume(broker_id)
                sim.shutdown(broker_id)
                self.fault(f"broker {broker_id} stopped (SIGTERM)", down_ms, lambda: self.restart(broker_id),
                           brokers={broker_id})
            else:
                sim.schedule_in(50, poll)
        self.note(f"nemesis: broker {broker_id} begins a controlled shutdown")
        poll()

    def heal_everything(self) -> None:
        self.note("nemesis: healing every fault")
        for fault in list(self.faults):
            fault.heal()
        sim = self.sim
        sim.heal_all_links()
        sim.zk_flaky.clear()
        for broker_id in sorted(sim.brokers):
            sim.heal_zookeeper(broker_id)
            node = sim.brokers[broker_id]
            if node.paused:
                sim.resume(broker_id)
            if node.core is None:
                sim.start(broker_id)
