"""The explorer: random fault schedules against the production broker cores, in the simulator.

One seed drives everything (the faults, the clients, the network's jitter), so a failing seed
replays exactly. A run creates a topic, starts producers (acks 1 and all, idempotent and not) and a
consumer, and for ``duration_ms`` of simulated time a nemesis injects faults: SIGKILL, power loss
(only where the configuration says acknowledged data is flushed), clean stops, SIGSTOP pauses,
network partitions of every shape (broker to broker one way or both, broker to ZooKeeper only,
full isolation, the controller cut off), flaky ZooKeeper replies (lost after the write applied,
requests timing out, writes applied late), slow links and clock steps. The invariants of
:mod:`strandline.sim.checker` are checked after every event. Then every fault heals while the
producers go on writing: within ``converge_ms`` every ISR must be full again, and once the clients
stop every replica must be identical and every acknowledged record there.

Configurations (:data:`CONFIGS`): ``safe`` is SPEC SAFE-1 (acks=all, min.insync.replicas=2, no
unclean election, leader-epoch truncation) and must never lose an acknowledged write; ``acks1``,
``unclean`` and ``legacy`` are the loss cases LOSS-1/LOSS-3, LOSS-2 and EPO-4 and must lose some;
``compact`` is SAFE-1 on a compacted topic, whose replicas' log cleaners rewrite segments throughout
(the newest acknowledged value of each key must survive); ``txn`` is SAFE-1 with transactional
producers writing two topics and a read_committed consumer (:mod:`strandline.sim.txn_workload`),
whose history :mod:`strandline.sim.txn_checker` judges once every transaction has ended.
"""

from __future__ import annotations

import collections
import random
import time
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.coordination import znodes
from strandline.group.records import iter_records as iter_values
from strandline.group.offsets_topic import OFFSETS_TOPIC
from strandline.coordination.store import GetChildren, GetData, ZkError
from strandline.protocol.api import ApiKey
from strandline.core import api_version
from strandline.core.config import REPLICA_SELECTORS
from strandline.sim.admin_nemesis import AdminNemesis
from strandline.sim.checker import Invariants, Violation, read_whole
from strandline.sim.configs import CONFIGS, ExploreConfig  # noqa: F401  (part of this module's interface)
from strandline.sim.configs import eligible_leader_replicas_of, inter_broker_protocol_of, unclean_recovery_of
from strandline.sim.cluster import SimCluster
from strandline.sim.menu import FAULT_FAMILIES, FULL_MENU  # noqa: F401  (FULL_MENU: part of this module's interface)
from strandline.sim.nemesis import Nemesis, live_brokers
from strandline.sim.scratch import SCRATCH, ScratchTopic, exists
from strandline.sim.txn_checker import FinalRead, TxnChecker
from strandline.sim.txn_workload import TXN_TIMEOUT_MS, ReadCommittedConsumer, TxnHistory, TxnProducer
from strandline.sim.group_workload import BROKER_CONFIG as GROUP_BROKER_CONFIG, GroupWorkload
from strandline.sim.share_workload import BROKER_CONFIG as SHARE_BROKER_CONFIG, LeaderDeliveries, ShareWorkload
from strandline.group.share.state_topic import SHARE_STATE_TOPIC
from strandline.sim.workload import Consumer, Firehose, History, Producer, load_of

TOPIC = "events"
LEDGER = "ledger"             # the transactional configuration's second topic
TXN_PRODUCERS = 3
TXN_STATE = "__transaction_state"
SESSION_TIMEOUT_MS = 6000
LAG_TIME_MS = 3000


@dataclass
class RunResult:
    seed: int
    config: str
    violation: Violation | None
    trace: list[str]
    acked: int
    lost: int
    events: int
    faults: int
    simulated_ms: int
    wall_s: float
    all_violations: list[str] = field(default_factory=list)
    transactions: dict[str, int] = field(default_factory=dict)    # outcome -> count (config txn)
    #: what each broker waited for when the first violation was seen (:meth:`Explorer.pending_waits`)
    pending: list[str] = field(default_factory=list)
    #: with eligible leader replicas: the partitions left waiting offline, ISR and ELR empty
    waiting_offline: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.violation is None


RACK_AWARE = REPLICA_SELECTORS[0]


class Explorer:
    def __init__(self, seed: int, config: ExploreConfig, *, brokers: int = 3, partitions: int = 3,
                 duration_ms: int = 60000, converge_ms: int = 30000, reassign: bool = False,
                 add_partitions: bool = False, recreate: bool = False, rack_reads: bool = False,
                 delete_records: bool = False, without: frozenset[str] | set[str] = frozenset(),
                 load: str = "heavy", isr_writes: str = "mixed", elr: str = "off", txn_v2: bool = False,
                 unclean_recovery: str = "Balanced", consumer_groups: bool = False,
                 share_groups: bool = False, classic_members: bool = False) -> None:
        self.seed = seed
        # with consumers of the consumer group protocol (KIP-848) in one group on the topic
        self.consumer_groups = consumer_groups = consumer_groups or classic_members
        self.classic_members = classic_members          # and consumers of the classic protocol in it
        # with consumers of a share group (KIP-932) on the topic
        self.share_groups = share_groups
        # the transactional producers use transactions v2 (KIP-890 part 2; the brokers' default
        # transaction.version 2 finalizes it)
        self.txn_v2 = txn_v2
        # who writes an ISR change: the controller (AlterIsr, inter.broker.protocol.version 2.8) or
        # its leader (2.6, the legacy mode); "mixed": drawn from the seed, half and half
        self.inter_broker_protocol = inter_broker_protocol_of(seed, isr_writes)
        # eligible leader replicas (KIP-966): "on", "off", or drawn for "mixed"; in effect only
        # where the controller writes ISRs (AlterIsr), so a 2.6 run has none (nor isr-power-loss)
        self.eligible_leader_replicas = eligible_leader_replicas_of(seed, elr) and \
            api_version.alter_isr_supported(self.inter_broker_protocol)
        # with eligible leader replicas, what the controller does with a partition whose ISR and ELR
        # are empty (KIP-966's unclean recovery); drawn from the seed for "mixed"
        self.unclean_recovery = unclean_recovery_of(seed, unclean_recovery)
        # how hard the clients write (drawn from the seed for "mixed")
        self.load = load_of(seed, load)
        # with DeleteRecords now and then: the records below may be gone (from the checks too)
        self.delete_records = delete_records
        # with racks: broker N in rack rN, and consumers in racks r2 and r3 read from the replica
        # there whenever the leader is elsewhere (KIP-392): a follower serves them below its HW
        self.rack_reads = rack_reads
        # with a second topic, written all along, that the nemesis deletes and creates again
        self.recreate = recreate
        # with added partitions: CreatePartitions now and then, racing the moves and the faults
        self.add_partitions = add_partitions
        # with reassignments: four brokers, three replicas each, moved about by the nemesis (CTL-11)
        self.reassign = reassign
        if reassign:
            brokers = max(brokers, 4)
        self.replication_factor = 3 if reassign else brokers
        self.config = config
        self.rng = random.Random(seed)
        self.partitions = partitions
        self.duration_ms = duration_ms
        self.converge_ms = converge_ms
        self.flush_on_ack = config.power_loss == "always" or (
            config.power_loss == "random" and self.rng.random() < 0.5)
        broker_config = {
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "replica.lag.time.max.ms": str(LAG_TIME_MS),
            "replica.socket.timeout.ms": "5000", "controller.socket.timeout.ms": "5000",
            "request.timeout.ms": "5000", "controlled.shutdown.retry.backoff.ms": "500",
            "leader.imbalance.check.interval.seconds": "10", "log.index.interval.bytes": "0",
            "log.flush.on.ack": "true" if self.flush_on_ack else "false",
            "inter.broker.protocol.version": self.inter_broker_protocol,
            **(GROUP_BROKER_CONFIG if consumer_groups else {}),
            **(SHARE_BROKER_CONFIG if share_groups else {}),
            **config.broker,
        }
        if self.eligible_leader_replicas:
            broker_config["eligible.leader.replicas.enable"] = "true"
            broker_config["unclean.recovery.strategy"] = self.unclean_recovery
        racks = {}
        if rack_reads:
            broker_config["replica.selector.class"] = RACK_AWARE
            racks = {str(b): {"broker.rack": f"r{b}"} for b in range(1, brokers + 1)}
        self.trace: collections.deque[str] = collections.deque(maxlen=40)
        # most runs on a LAN; some across zones far apart, where fetches take long round trips
        self.latency_ms = self.rng.choice((1, 1, 1, 1, 1, 1, 1, 10, 10, 10))
        self.sim = SimCluster(tuple(range(1, brokers + 1)), latency_ms=self.latency_ms,
                              jitter_ms=3 * self.latency_ms, seed=seed, zk_latency_ms=1, zk_failure_delay_ms=3000,
                              overrides=racks, **broker_config)
        self.sim.on_log = self._on_log
        # the share group's records as its leaders hand them out (from the brokers' start)
        self.share_deliveries = LeaderDeliveries(self.sim, TOPIC, lambda index: self.invariants.deleted_below(index)) \
            if share_groups else None
        self.scratch = ScratchTopic(self.sim, self.replication_factor, config.topic, self.note) if recreate else None
        self.admin = AdminNemesis(self.sim, TOPIC, partitions, self.replication_factor, self.note,
                                  lambda: len(self._assignment()[0]))
        self.history = History()
        self.invariants = Invariants(self.sim, TOPIC, partitions, checked_acks=config.checked_acks,
                                     no_duplicates=config.name in ("safe", "txn"), compacted=config.compacted)
        self.topics = [TOPIC]
        self.more_invariants: list[Invariants] = []     # of the other topics (config txn)
        self.txn_history: TxnHistory | None = None
        self.txn_checker: TxnChecker | None = None
        if config.transactions:
            self.topics.append(LEDGER)
            txn_partitions = int(config.broker["transaction.state.log.num.partitions"])
            for topic, count in ((LEDGER, partitions), (TXN_STATE, txn_partitions)):
                more = Invariants(self.sim, topic, count, checked_acks=config.checked_acks, no_duplicates=False,
                                  detail_prefix=topic)
                more.violations, more.broken = self.invariants.violations, self.invariants.broken
                self.more_invariants.append(more)
        if reassign:
            # the final check compares the assigned replicas only: a broker that was down when a
            # move took its replica away keeps a stray log, as in Kafka
            self.invariants.assigned_only = True
        unknown = set(without) - set(FAULT_FAMILIES)
        if unknown:
            raise ValueError(f"unknown fault families {sorted(unknown)} (known: {', '.join(FAULT_FAMILIES)})")
        admin_on = {"reassign": reassign, "add-partitions": add_partitions, "recreate": recreate,
                    "delete-records": delete_records}
        families = frozenset(FAULT_FAMILIES) - set(without) | {name for name, on in admin_on.items() if on}
        self.nemesis = Nemesis(self.sim, self.rng, self.note, families=families, partitions=partitions,
                               flush_on_ack=self.flush_on_ack, admin=self.admin, scratch=self.scratch,
                               records_deleted=self._records_deleted,
                               eligible_leader_replicas=self.eligible_leader_replicas)
        self.start_ms = self.sim.now
        self.producers: list[Producer | TxnProducer] = []
        self.consumers: list[Consumer | ReadCommittedConsumer] = []
        self.group: GroupWorkload | None = None
        self.share: ShareWorkload | None = None
        #: the internal topics whose replicas the final check compares (those the workloads write)
        self.internal_invariants: list[Invariants] = []
        internal = ([(OFFSETS_TOPIC, "offsets.topic.num.partitions")] if consumer_groups or share_groups else []) + \
            ([(SHARE_STATE_TOPIC, "share.coordinator.state.topic.num.partitions")] if share_groups else [])
        for topic, key in internal:
            more = Invariants(self.sim, topic, int(broker_config[key]), checked_acks=config.checked_acks,
                              no_duplicates=False, detail_prefix=topic)
            more.violations, more.broken = self.invariants.violations, self.invariants.broken
            self.more_invariants.append(more)
            self.internal_invariants.append(more)

    # ------------------------------------------------------------------ the run

    def run(self) -> RunResult:
        started = time.perf_counter()
        lost = 0
        waiting: set[int] = set()
        self.invariants.on_violation = self._on_violation
        for more in self.more_invariants:
            more.on_violation = self._on_violation
        try:
            self._setup()
            self.sim.after_event = self._after_event if self.more_invariants else self.invariants.after_event
            self._nemesis_step()
            self.sim.advance(self.duration_ms)
            self.nemesis.heal_everything()
            self._converge()
            if self.txn_checker is not None:
                final = self._end_transactions()
            self.sim.after_event = None
            waiting = self.waiting_offline()
            if waiting:
                self.note(f"waiting offline (ISR and ELR empty, KIP-966): partitions {sorted(waiting)}")
            lost = self.invariants.final_check(self.history, waiting)
            if self.scratch is not None:
                self.scratch.check(lambda topic: self._assignment(topic)[0], self._describe,
                                   lambda topic, index: self._waiting_offline(topic, index))
            if self.txn_checker is not None:
                self.more_invariants[0].final_check(History())
                self.txn_checker.final_check(final, {tp: self._leader_log(tp) for tp in final.views})
            if self.share is not None:
                self.share.drain(self.converge_ms)
            if self.group is not None:     # last: its members' final records are given the time to replicate
                self.group.settle(len(self._assignment()[0]), self.converge_ms)
            for internal in self.internal_invariants:
                if exists(self.sim, internal.topic):
                    internal.final_check(History())
        except Violation as exc:        # the cluster did not converge: nothing more to check
            self.invariants.violations.append(exc)
            self._on_violation(exc)
        violations = self.invariants.violations
        return RunResult(self.seed, self.config.name, violations[0] if violations else None,
                         self.first_trace or list(self.trace), len(self.history.acked), lost,
                         self.invariants.events, self.nemesis.count, self.sim.now - self.start_ms,
                         time.perf_counter() - started, [str(v) for v in violations],
                         self.txn_history.counts() if self.txn_history is not None else {},
                         self.first_pending or [], [f"{TOPIC}-{index}" for index in sorted(waiting)])

    def _after_event(self) -> None:
        """The invariants of every topic (each looks at the brokers the event reached)."""
        touched = self.sim.touched
        if touched:
            self.sim.touched = set()
        self.invariants.check(touched)
        for invariants in self.more_invariants:
            invariants.check(touched)

    first_trace: list[str] | None = None
    first_pending: list[str] | None = None

    def _on_violation(self, violation: Violation) -> None:
        self.note(f"VIOLATION {violation}")
        if self.first_trace is None:          # the events that led to the first violation
            self.first_trace = list(self.trace)
            self.first_pending = self.pending_waits()

    def pending_waits(self) -> list[str]:
        """What each running broker waits for now (its outbox's pending waits: the controller's are
        named, e.g. ``AwaitingLeaderAndIsrWrite(partitions=[...], ...)``), repeats counted."""
        lines: list[str] = []
        for broker_id, node in sorted(self.sim.brokers.items()):
            if node.core is None:
                continue
            counts = collections.Counter(node.core.outbox.pending())
            lines += [f"broker {broker_id}: {wait}" + (f" (x{n})" if n > 1 else "") for wait, n in counts.items()]
        return lines

    def note(self, line: str) -> None:
        self.trace.append(f"{(self.sim.now - self.start_ms) / 1000:9.3f} {line}")

    def _on_log(self, broker_id: int, level: str, message: str) -> None:
        self.note(f"broker {broker_id} {level}: {message}")

    def _setup(self) -> None:
        sim = self.sim
        topic_configs = dict(self.config.topic)
        if self.delete_records and self.config.compacted:
            topic_configs["cleanup.policy"] = "compact,delete"      # Kafka refuses DeleteRecords otherwise
        configs = [{"name": k, "value": v} for k, v in topic_configs.items()]
        body: dict[str, Any] = {
            "topics": [{"name": topic, "num_partitions": self.partitions, "replication_factor": self.replication_factor,
                        "assignments": [], "configs": configs} for topic in self.topics],
            "timeout": 1000, "validate_only": False}
        if self.scratch is not None:
            body["topics"].append(self.scratch.creatable())
        resp = sim.call(sim.controller_id, ApiKey.CREATE_TOPICS, 5, body, "admin")
        assert all(t.error_code == ErrorCode.none for t in resp.topics), resp
        sim.advance(100)
        if self.scratch is not None:
            self.scratch.start_writers(self.rng, self.load.scratch_interval_ms)
        if self.config.transactions:
            self._setup_transactions()
            return
        checked = self.config.checked_acks
        specs = [(-1, True), (-1, False), (1, False), (1, True)]
        if 1 in checked:
            specs = [(1, False), (1, True), (-1, True)]
        for n, (acks, idempotent) in enumerate(specs, 1):
            name = f"{'i' if idempotent else 'p'}{n}{'a' if acks == -1 else '1'}"
            producer = Producer(sim, self.history, name, TOPIC, self.partitions, random.Random(self.rng.random()),
                                acks=acks, idempotent=idempotent, keyed=self.config.compacted,
                                think_ms=self.load.think_ms)
            self.producers.append(producer)
        self.consumers.append(Consumer(sim, self.history, "c1", TOPIC, self.partitions,
                                       random.Random(self.rng.random()),
                                       on_record=lambda p, o, v: self.invariants.on_consumed(self.history, p, o, v),
                                       rack=self._rack("r2")))
        if self.rack_reads:
            self.consumers.append(Consumer(sim, self.history, "c2", TOPIC, self.partitions,
                                           random.Random(self.rng.random()),
                                           on_record=lambda p, o, v: self.invariants.on_consumed(self.history, p, o, v),
                                           rack="r3"))
        self.history.on_ack = self.invariants.on_ack
        for client in self.producers + self.consumers:
            client.start()
        self._start_group()

    def _start_group(self) -> None:
        """With ``consumer_groups`` or ``share_groups``: the groups' members, and their nemesis while
        the faults last."""
        if self.consumer_groups:
            self.group = GroupWorkload(self.sim, TOPIC, self.partitions, random.Random(self.rng.random()),
                                       self.invariants.fail, self.note, self.duration_ms,
                                       random.Random(f"classic-{self.seed}") if self.classic_members else None)
            self.group.start()
        if self.share_groups:
            assert self.share_deliveries is not None
            self.share = ShareWorkload(self.sim, TOPIC, self.partitions, random.Random(f"share-{self.seed}"),
                                       self.invariants.fail, self.note, self.duration_ms,
                                       lambda: len(self._assignment()[0]), self.share_deliveries)
            self.share.start()

    def _rack(self, rack: str) -> str:
        """A consumer's rack: ``rack`` with ``rack_reads``, else none (it reads from leaders)."""
        return rack if self.rack_reads else ""

    def _setup_transactions(self) -> None:
        """A plain idempotent acks=all producer and a plain consumer on the first topic, transactional
        producers on both topics, a read_committed consumer of both."""
        sim = self.sim
        self.txn_history = TxnHistory()
        self.txn_checker = TxnChecker(sim, self.txn_history, self.history, TOPIC, self.invariants.fail)
        topics = {t: self.partitions for t in self.topics}
        self.producers.append(Producer(sim, self.history, "i1a", TOPIC, self.partitions,
                                       random.Random(self.rng.random()), acks=-1, idempotent=True,
                                       think_ms=self.load.think_ms))
        for n in range(1, TXN_PRODUCERS + 1):
            self.producers.append(TxnProducer(sim, self.txn_history, f"t{n}", topics,
                                              random.Random(self.rng.random()), note=self.note,
                                              think_ms=self.load.txn_think_ms, tv2=self.txn_v2))
        self.consumers.append(Consumer(sim, self.history, "c1", TOPIC, self.partitions,
                                       random.Random(self.rng.random()),
                                       on_record=lambda p, o, v: self.invariants.on_consumed(self.history, p, o, v),
                                       rack=self._rack("r2")))
        self.consumers.append(ReadCommittedConsumer(sim, "rc1", topics, random.Random(self.rng.random()),
                                                    self.txn_checker.on_fetch, rack=self._rack("r3")))
        self.history.on_ack = self.invariants.on_ack
        for client in self.producers + self.consumers:
            client.start()
        self._start_group()

    def _end_transactions(self) -> FinalRead:
        """Once the producers stopped: every partition read again read_committed from its leader,
        waiting (a transaction timeout and more) for transactions left open to be aborted; then the
        replicas must agree again (markers were written meanwhile)."""
        sim = self.sim
        tps = [(t, p) for t in self.topics for p in range(self.partitions)]
        assert self.txn_checker is not None and self.txn_history is not None     # (_setup_transactions)
        final = self.txn_checker.read_all(tps, sim.now + TXN_TIMEOUT_MS + 30000)
        self.note(f"final read_committed read: {sum(len(v) for v in final.views.values())} records, "
                  f"transactions {self.txn_history.counts()}")
        deadline = sim.now + 30000
        while not self._quiescent():
            if sim.now >= deadline:
                raise Violation("the cluster converges", "replicas did not catch up within 30000 ms of the last "
                                "transaction markers: " + self._describe(), sim.now)
            sim.advance(100)
        return final

    def _leader_log(self, tp: tuple[str, int]) -> bytes:
        leader = self.sim.state(*tp).leader
        return self.sim.log_bytes(leader, *tp) if self.sim.partition(leader, *tp) is not None else b""

    # ------------------------------------------------------------------ the nemesis

    def _live(self) -> list[int]:
        return live_brokers(self.sim)

    def _nemesis_step(self) -> None:
        if self.sim.now - self.start_ms >= self.duration_ms:
            return
        self.nemesis.step()
        self.sim.schedule_in(int(self.rng.expovariate(1 / 1500)) + 50, self._nemesis_step)

    def _records_deleted(self, index: int, offset: int) -> None:
        """The nemesis asked for the records of ``TOPIC``-``index`` below ``offset`` to be deleted:
        the checks look only above it from now on (what the leader holds below it is committed:
        the nemesis asks below the high watermark)."""
        self.invariants.records_deleted(index, offset)
        if self.txn_checker is not None:
            leader = self.sim.state(TOPIC, index).leader
            partition = self.sim.partition(leader, TOPIC, index) if leader >= 0 else None
            log = partition.log if partition is not None else None
            below = read_whole(log, log.log_start_offset, offset, 1 << 30) \
                if log is not None and log.log_start_offset < min(offset, log.log_end_offset) else b""
            self.txn_checker.records_deleted((TOPIC, index), offset, {v for o, _, v in iter_values(below) if o < offset and v is not None})

    def _checked_topics(self) -> list[str]:
        """The topics the final checks look at: the scratch topic only if it exists then."""
        return self.topics + ([SCRATCH] if self.scratch is not None and exists(self.sim, SCRATCH) else [])

    def _check_partition_znodes(self) -> None:
        """Every partition with znodes of its own is in its topic's znode, and the other way round."""
        for topic in self._checked_topics():
            assignment, _ = self._assignment(topic)
            [res] = self.sim.zk.execute([GetChildren(znodes.TopicPartitionsZNode.path(topic))])
            found = {int(child) for child in res.children}
            if found != set(assignment):
                raise Violation("the topic znode lists every partition",
                                f"{topic}: the topic znode lists {sorted(assignment)}, the partition znodes are "
                                f"{sorted(found)}", self.sim.now)

    def _assignment(self, topic: str = TOPIC) -> tuple[dict[int, tuple[int, ...]], bool]:
        """The assignment ZooKeeper holds, and whether a reassignment is still recorded there."""
        [res] = self.sim.zk.execute([GetData(znodes.TopicZNode.path(topic))])
        decoded = znodes.TopicZNode.decode(res.data)
        return decoded.partitions, bool(decoded.adding_replicas or decoded.removing_replicas)

    # ------------------------------------------------------------------ convergence

    def _full_isr(self) -> bool:
        sim = self.sim
        live = self._live()
        if len(live) != len(sim.brokers):
            return False
        for topic in self._checked_topics():
            assignment, moving = self._assignment(topic)
            if moving and not (self.eligible_leader_replicas and
                               all(self._waiting_offline(topic, index) for index in self._moving(topic))):
                return False        # (a move of a partition waiting offline waits with it)
            for index in sorted(assignment):
                if self._waiting_offline(topic, index):
                    continue
                state = sim.state(topic, index)
                replicas = set(assignment[index])
                if state.leader < 0 or set(state.isr) != replicas:
                    return False
                for b in replicas:
                    p = sim.partition(b, topic, index)
                    if p is None or p.leader_epoch != state.leader_epoch:
                        return False
                leader = sim.partition(state.leader, topic, index)
                assert leader is not None           # ZooKeeper's leader is in its ISR (an invariant checked)
                if not leader.is_leader or set(leader.isr) != replicas:
                    return False
        return True

    def _moving(self, topic: str) -> set[int]:
        """The partitions of ``topic`` whose reassignment ZooKeeper still records."""
        [res] = self.sim.zk.execute([GetData(znodes.TopicZNode.path(topic))])
        decoded = znodes.TopicZNode.decode(res.data)
        return set(decoded.adding_replicas or {}) | set(decoded.removing_replicas or {})

    def _waiting_offline(self, topic: str, index: int) -> bool:
        """With eligible leader replicas and ``unclean.recovery.strategy=None``: the partition waits
        offline, its ISR and ELR empty (every replica that was eligible came back from an unclean
        shutdown), for an operator's unclean election, so no convergence is asked of it; the final
        check asks that every acknowledged write is still on one of its replicas (durable, only
        unavailable). With Balanced or Aggressive the controller recovers it once the brokers are
        back (controller.unclean_recovery), and it must converge as any other."""
        if not self.eligible_leader_replicas or self.unclean_recovery != "None":
            return False
        state = self.sim.state(topic, index)
        return state.leader < 0 and not state.isr and not state.elr

    def waiting_offline(self, topic: str = TOPIC) -> set[int]:
        """The partitions of ``topic`` that wait offline (:meth:`_waiting_offline`)."""
        assignment, _ = self._assignment(topic)
        return {index for index in assignment if self._waiting_offline(topic, index)}

    def _deletions(self) -> list[str]:
        """The topics whose deletion ZooKeeper still records (``/admin/delete_topics``): the
        controller has not heard from every broker that held a replica of them."""
        [res] = self.sim.zk.execute([GetChildren(znodes.DeleteTopicsZNode.path())])
        return sorted(res.children) if res.error is ZkError.NONE else []

    def _quiescent(self) -> bool:
        if not all(p.idle for p in self.producers):
            return False
        for topic in self._checked_topics():
            assignment, _ = self._assignment(topic)
            for index in sorted(assignment):
                if self._waiting_offline(topic, index):
                    continue
                ends = set()
                for b in assignment[index]:
                    p = self.sim.partition(b, topic, index)
                    if p is None or p.high_watermark != p.log_end_offset:
                        return False
                    ends.add(p.log_end_offset)
                if len(ends) != 1:
                    return False
        return True

    def _converge(self) -> None:
        """Every ISR must be full again within ``converge_ms`` while writes go on. Across far
        zones, partitions whose ISR is not full also get a firehose of acks=1 writes, as a busy
        cluster does, so that each fetch round trip of a follower out of the ISR sees new writes
        arrive (the leader's high watermark rule, KAFKA-4485, then decides whether it rejoins)."""
        sim = self.sim
        deadline = sim.now + self.converge_ms
        hoses = []
        if self.latency_ms >= 10:
            for index in range(self.partitions):
                if set(sim.state(TOPIC, index).isr) != set(sim.brokers):
                    hoses.append(Firehose(sim, self.history, f"f{index}1", TOPIC, index,
                                          random.Random(self.rng.random())))
                    hoses[-1].start()
        while not self._full_isr() or self._deletions():
            if sim.now >= deadline:
                if self._full_isr():
                    raise Violation("the cluster converges", f"the deletion of {self._deletions()} not done within "
                                    f"{self.converge_ms} ms of healing: " + self._describe(), sim.now)
                raise Violation("the cluster converges", f"no full ISR within {self.converge_ms} ms of healing: "
                                + self._describe(), sim.now)
            sim.advance(100)
        self.note("converged: every ISR is full")
        self._check_partition_znodes()
        for hose in hoses:
            hose.stopped = True
        if self.scratch is not None:
            self.scratch.stop_writers()
        for producer in self.producers:
            producer.stop()
        for consumer in self.consumers:
            consumer.stopped = True
        deadline = sim.now + 30000
        while not self._quiescent():
            if sim.now >= deadline:
                raise Violation("the cluster converges", "replicas did not catch up within 30000 ms once the "
                                "clients stopped: " + self._describe(), sim.now)
            sim.advance(100)

    def _describe(self) -> str:
        parts = []
        for topic in self._checked_topics():
            for index in sorted(self._assignment(topic)[0]):
                state = self.sim.state(topic, index)
                views = []
                for b in sorted(self.sim.brokers):
                    p = self.sim.partition(b, topic, index)
                    views.append(f"{b}:" + ("down" if p is None else
                                            f"{'L' if p.is_leader else 'F'}e{p.leader_epoch} leo{p.log_end_offset}"
                                            f" hw{p.high_watermark}" + (f" isr{list(p.isr)}" if p.is_leader else "")))
                name = f"p{index}" if topic == TOPIC else f"{topic}-{index}"
                parts.append(f"{name} zk(leader {state.leader} epoch {state.leader_epoch} isr {list(state.isr)}) "
                             + " ".join(views))
        return "; ".join(parts)


def run_seed(seed: int, config: str = "safe", **kwargs: Any) -> RunResult:
    """One run; ``reassign=True`` adds partition reassignments to the faults (four brokers)."""
    return Explorer(seed, CONFIGS[config], **kwargs).run()
