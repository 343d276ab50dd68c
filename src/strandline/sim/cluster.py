"""A deterministic cluster: broker cores on in-memory disks, an in-memory network and ZooKeeper,
and a test clock. No threads, sockets or sleeps; the same seed gives the same run.

It does what the asyncio shell does for a real broker (connections answered one request at a
time, outgoing broker channels with a request timeout, ZooKeeper calls, timers, the watches on
``/brokers/ids``, ``/controller`` and ``/isr_change_notification``), so scenarios of the seed
documents can be played step by step, and the explorer (:mod:`strandline.sim.explore`) can throw
random faults at it:

- the network: every message takes ``latency_ms`` (plus up to ``jitter_ms``, first in first out per
  link); a link between two brokers can be cut in one direction or both (what crosses a cut link
  waits, as TCP retransmits, until it heals or the connection is closed), or slowed down;
- ZooKeeper: a broker's link to it can be cut (its requests fail with CONNECTION_LOSS after a while
  and may still be applied when the link heals; its session expires after
  ``zookeeper.session.timeout.ms``); requests can be made flaky (the reply is lost after the write
  was applied, the write is never applied, or it is applied after the client gave up on it);
- brokers: SIGSTOP (:meth:`pause`), SIGKILL or power loss (:meth:`crash`), a clean stop
  (:meth:`shutdown`), a restart (:meth:`start`), and clock steps (each broker reads its own clock).
"""

from __future__ import annotations

import collections
import functools
import heapq
import random
import uuid
from typing import Any, Callable, Iterable, Sequence

from strandline.broker.broker import Broker
from strandline.coordination.cluster_state import read_cluster_state
from strandline.core.config import BrokerConfig
from strandline.core.effects import (BrokerSend, Close, Effect, FlushFiles, LogLine, ReadClusterState, Send,
                                       SetLoggerLevel, WriteCheckpoint, ZkRequest)
from strandline.coordination import zk_layout
from strandline.coordination import znodes
from strandline.coordination.store import Create, GetData, Op, OpResult, ZkError
from strandline.coordination.znodes import LeaderAndIsr
from strandline.log.disk import FileRegion
from strandline.log.manager import LogManager
from strandline.protocol import api
from strandline.replication.partition import Partition
from strandline.sim.disk import MemoryDisk
from strandline.sim.network import Channel, ChannelKey, SimNetwork
from strandline.sim.node import STALE, SimBroker
from strandline.sim.scheduler import Scheduler
from strandline.sim.zk_clients import SimZkClients
from strandline.sim.zookeeper import MemoryZooKeeper

START_MS = 1_700_000_000_000
LOG_DIR = "/data/logs"
#: How long after a roll its segment's fsync completes (the shell's worker thread)
ROLL_FLUSH_DELAY_MS = 20


def _flushed(effect: FlushFiles, core: Broker, now_ms: int) -> list[Effect]:
    disk = core.logs.disk
    for path in effect.paths:
        if disk.exists(path):           # a deleted file: nothing left to make durable
            disk.open(path).flush()
    return core.on_files_flushed(effect.token, now_ms)


class SimCluster:
    def __init__(self, broker_ids: Sequence[int] = (1, 2, 3), *, latency_ms: int = 0, seed: int = 1,
                 overrides: dict[str, dict[str, str]] | None = None, jitter_ms: int = 0,
                 zk_latency_ms: int = 0, zk_failure_delay_ms: int = 0, **config: str) -> None:
        self.zk = MemoryZooKeeper()
        self.scheduler = Scheduler(START_MS)
        self.zk.clock = lambda: self.scheduler.now
        self.latency_ms = latency_ms
        self.jitter_ms = jitter_ms
        self.zk_latency_ms = zk_latency_ms
        self.zk_failure_delay_ms = zk_failure_delay_ms
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = dict(config)
        self.overrides = overrides or {}
        self.brokers: dict[int, SimBroker] = {}
        self.inbox: dict[tuple[int, str], collections.deque[bytes]] = collections.defaultdict(collections.deque)
        self._correlation = 0
        self.net = SimNetwork(self)
        self.zk_clients = SimZkClients(self)
        self.after_event: Callable[[], None] | None = None   # the explorer's invariant checks
        self.touched: set[int] = set()                        # brokers an event reached since the last check
        self.on_log: Callable[[int, str, str], None] | None = None
        #: called with each broker's core as it starts (a checker's listeners register on it)
        self.on_core: Callable[[int, Broker], None] | None = None
        self.zk.execute([Create(znodes.ClusterIdZNode.path(), znodes.ClusterIdZNode.encode("sim-cluster"))])
        self.session_timeout_ms = self.broker_config(broker_ids[0] if broker_ids else 1).values[
            "zookeeper.session.timeout.ms"]
        for b in broker_ids:
            self.start(b)

    # ------------------------------------------------------------------ scheduling

    @property
    def now(self) -> int:
        """The simulated time (ms since the epoch)."""
        return self.scheduler.now

    @now.setter
    def now(self, ms: int) -> None:
        self.scheduler.now = ms

    def schedule_in(self, delay_ms: int, action: Callable[[], object]) -> None:
        """Run ``action()`` ``delay_ms`` from now (simulated time)."""
        self.scheduler.schedule_in(delay_ms, action)

    def schedule_at(self, when_ms: int, action: Callable[[], object]) -> None:
        self.scheduler.schedule_at(when_ms, action)

    def clock_of(self, node: SimBroker) -> int:
        """The time on a broker's own clock."""
        return self.scheduler.now + node.clock_offset_ms

    def run_on(self, broker_id: int, incarnation: int, delay_ms: int,
               action: Callable[[Broker, int], list[Effect]]) -> None:
        """Run ``action(core, now)`` on a broker later, unless it crashed meanwhile; held while paused."""
        self.schedule_in(delay_ms, functools.partial(self._run_on, broker_id, incarnation, action))

    def _run_on(self, broker_id: int, incarnation: int, action: Callable[[Broker, int], list[Effect]]) -> None:
        # (a method with its arguments bound: a closure holding itself would be a reference cycle)
        node = self.brokers.get(broker_id)
        if node is None or node.core is None or node.incarnation != incarnation:
            return
        if node.paused:
            node.held.append(functools.partial(self._run_on, broker_id, incarnation, action))
            return
        self.apply(node, action(node.core, self.clock_of(node)))

    def _to_broker(self, broker_id: int, incarnation: int, delay_ms: int,
                   action: Callable[[Broker], list[Effect]]) -> None:
        self.run_on(broker_id, incarnation, delay_ms, lambda core, _: action(core))

    def _event_done(self) -> None:
        if self.after_event is not None:
            self.after_event()

    def settle(self, max_events: int = 1_000_000) -> None:
        """Deliver everything due now, without moving the clock."""
        scheduler = self.scheduler
        queue = scheduler.queue
        heappop = heapq.heappop
        for _ in range(max_events):
            if not queue or queue[0][0] > scheduler.now:
                return
            heappop(queue)[2]()
            after_event = self.after_event
            if after_event is not None:
                after_event()
        raise RuntimeError("the simulation does not settle")

    def _next_deadline(self, node: SimBroker) -> int | None:
        """When the broker's next timer falls due, on the simulation's clock (cached until an event
        reaches the broker)."""
        deadline = node.deadline
        if deadline is STALE:
            core = node.core
            d = core.next_deadline_ms() if core is not None and not node.paused else None
            deadline = None if d is None else d - node.clock_offset_ms
            object.__setattr__(node, "deadline", deadline)    # (SimBroker.__setattr__ watches other fields)
        result: int | None = deadline
        return result

    def advance(self, ms: int) -> None:
        """Move the clock ``ms`` forward, delivering messages and firing timers as they fall due."""
        scheduler = self.scheduler
        queue = scheduler.queue
        next_deadline = self._next_deadline
        target = scheduler.now + ms
        while True:
            self.settle()
            now = scheduler.now
            nxt = queue[0][0] if queue else None
            for node in self.brokers.values():
                d = node.deadline
                if d is STALE:
                    d = next_deadline(node)
                if d is not None:
                    if d < now:
                        d = now
                    if nxt is None or d < nxt:
                        nxt = d
            if nxt is None or nxt > target:
                scheduler.now = target
                self.settle()
                return
            scheduler.now = now = nxt
            for node in list(self.brokers.values()):
                d = node.deadline
                if d is STALE:
                    d = next_deadline(node)
                if d is not None and d <= now:
                    assert node.core is not None        # only a running broker has a deadline
                    self.apply(node, node.core.tick(now + node.clock_offset_ms))
                    self._event_done()

    # ------------------------------------------------------------------ the network

    @property
    def cut(self) -> set[tuple[Any, Any]]:
        return self.net.cut

    @property
    def slow(self) -> dict[tuple[Any, Any], int]:
        return self.net.slow

    @property
    def channels(self) -> dict[ChannelKey, Channel]:
        return self.net.channels

    def cut_link(self, src: int, dst: int) -> None:
        """Messages from broker ``src`` to broker ``dst`` stop arriving (one direction)."""
        self.net.cut_link(src, dst)

    def heal_link(self, src: int, dst: int) -> None:
        self.net.heal_link(src, dst)

    def partition_brokers(self, group_a: Iterable[int], group_b: Iterable[int] | None = None) -> None:
        """Cut every link between ``group_a`` and ``group_b`` (default: every other broker), both ways."""
        self.net.partition_brokers(group_a, group_b)

    def heal_all_links(self) -> None:
        self.net.heal_all_links()

    # ------------------------------------------------------------------ effects (what the shell does)

    def apply(self, node: SimBroker, effects: list[Effect]) -> None:
        node.forget_deadline()
        self.touched.add(node.id)
        for effect in effects:
            # (the commonest first; each effect is of exactly one of these types)
            if isinstance(effect, Send):
                self.net.send(node, effect)
            elif isinstance(effect, BrokerSend):
                self.net.broker_send(node, effect)
            elif isinstance(effect, Close):
                self.net.close_server_conn(node, effect.conn_id)
            elif isinstance(effect, ZkRequest):
                self.zk_clients.request(node, effect)
            elif isinstance(effect, ReadClusterState):
                self.zk_clients.read_cluster_state(node, effect.token)
            elif isinstance(effect, WriteCheckpoint):
                node.disk.write_file_atomic(effect.path, effect.content)   # no thread to wait for here
            elif isinstance(effect, FlushFiles):
                # a worker thread's fsync, done a little later (a power loss before it loses the files'
                # unflushed bytes), then reported; a crash of the broker meanwhile drops both
                self.run_on(node.id, node.incarnation, ROLL_FLUSH_DELAY_MS,
                             functools.partial(_flushed, effect))
            elif isinstance(effect, SetLoggerLevel):
                pass                # the simulated brokers share this process's loggers: left alone
            elif isinstance(effect, LogLine):
                node.log.append(f"{effect.level} {effect.message}")
                if effect.event is not None:
                    node.events.append((effect.event, effect.partition))
                if self.on_log is not None:
                    self.on_log(node.id, effect.level, effect.message)
            else:
                raise TypeError(f"unknown effect {effect!r}")

    # ------------------------------------------------------------------ ZooKeeper

    @property
    def zk_cut(self) -> set[int]:
        """Brokers that cannot reach ZooKeeper."""
        return self.zk_clients.cut_brokers

    @property
    def zk_flaky(self) -> dict[int, float]:
        """Broker -> the chance that one of its ZooKeeper requests meets a fault."""
        return self.zk_clients.flaky

    @property
    def zk_fault(self) -> Callable[[int, list[Op]], Any] | None:
        """Tests: ``zk_fault(broker_id, ops)`` may answer a fault for one request: "applied-reply-lost"
        (CONNECTION_LOSS although the write was applied), "not-applied", "applied-late" or
        ("reply-delayed", ms)."""
        return self.zk_clients.fault

    @zk_fault.setter
    def zk_fault(self, fault: Callable[[int, list[Op]], Any] | None) -> None:
        self.zk_clients.fault = fault

    def cut_from_zookeeper(self, broker_id: int) -> None:
        """The broker's link to ZooKeeper is cut (both ways); other links stay."""
        self.zk_clients.cut(broker_id)

    def heal_zookeeper(self, broker_id: int) -> None:
        self.zk_clients.heal(broker_id)

    def tool_zk(self, ops: list[Op], transaction: bool = False) -> list[OpResult]:
        """Run ZooKeeper ``ops`` as an outside tool would (e.g. one writing
        ``/admin/reassign_partitions``); the brokers' watches see them."""
        results = self.zk.run(ops, transaction)
        self.zk_clients.notify_watches(ops)
        return results

    def controller_id_or_none(self) -> int | None:
        return self.zk_clients.controller_id_or_none()

    # ------------------------------------------------------------------ broker lifecycle

    def broker_config(self, broker_id: int) -> BrokerConfig:
        props = {"broker.id": str(broker_id), "zookeeper.connect": "sim:2181", "log.dirs": LOG_DIR,
                 "listeners": f"PLAINTEXT://127.0.0.1:{9091 + broker_id}"}
        props.update(self.config)
        props.update(self.overrides.get(str(broker_id), {}))
        return BrokerConfig.from_properties(props)

    def start(self, broker_id: int) -> SimBroker:
        """Start a broker from its disk. If its previous life's registration is still in ZooKeeper
        (a SIGKILL whose session has not expired yet), it waits for the expiry, as the shell does."""
        node = self.brokers.get(broker_id)
        if node is None:
            node = self.brokers[broker_id] = SimBroker(broker_id, MemoryDisk())
        assert node.core is None, f"broker {broker_id} is running"
        config = self.broker_config(broker_id)
        _, topics = read_cluster_state(self.zk)
        logs = LogManager(node.disk, [LOG_DIR], config.log_config())
        logs.startup(self.clock_of(node), {n: config.log_config(t.configs) for n, t in topics.items()})
        # a source of its own per life: a restarted broker draws other topic ids than its first life
        # did (the same sequence again gave a topic made by it now the id of one it made before)
        rng = random.Random(self.seed * 1000 + broker_id + (node.incarnation and 1_000_003 * node.incarnation))
        core = Broker(config, logs, rng=rng, new_uuid=lambda: uuid.UUID(int=rng.getrandbits(128)),
                      now_ms=self.clock_of(node))
        self.zk_clients.open_session(node)
        node.zk_lost_at = None
        node.incarnation += 1
        node.core = core
        if self.on_core is not None:
            self.on_core(broker_id, core)
        node.paused = False
        node.held.clear()
        node.conns.clear()
        node.by_peer.clear()
        node.waiting_to_register = False
        self.zk_clients.pending.pop(broker_id, None)
        if broker_id in self.zk_cut:
            self.zk_clients.lose_contact(node)
        self._finish_start(node)
        return node

    def _finish_start(self, node: SimBroker) -> None:
        [old] = self.zk.execute([GetData(znodes.BrokerIdZNode.path(node.id))])
        if old.error is ZkError.NONE or not self.zk_clients.reachable(node):
            node.waiting_to_register = True           # the old session's node is still there
            incarnation = node.incarnation

            def again() -> None:
                if node.incarnation == incarnation and node.core is not None:
                    self._finish_start(node)
            self.schedule_in(200, again)
            return
        node.waiting_to_register = False
        if node.session_expired:              # expired while it waited: the shell opens a new one
            self.zk_clients.open_session(node)
        self.zk_clients.register(node)
        controller_id, epoch, version = self._elect(node.id, node.session)
        brokers, topics = read_cluster_state(self.zk)
        assert node.core is not None            # started, or checked before a retry
        self.apply(node, node.core.load_metadata("sim-cluster", brokers, topics, controller_id, epoch,
                                                  self.clock_of(node), version))
        self.apply(node, self.zk_clients.report_features(node.core, self.clock_of(node)))
        self.zk_clients.brokers_changed()
        if controller_id == node.id:
            self.zk_clients.controller_changed()

    def _elect(self, broker_id: int, session: int) -> tuple[int, int, int | None]:
        [epoch_res] = self.zk.execute([GetData(znodes.ControllerEpochZNode.path())])
        epoch, version = (0, -1) if epoch_res.error is ZkError.NO_NODE else \
            (znodes.ControllerEpochZNode.decode(epoch_res.data), epoch_res.version)
        results = self.zk.transaction(zk_layout.controller_election_ops(broker_id, epoch + 1, version, self.now),
                                      session)
        if results[0].error is ZkError.NONE:
            return broker_id, epoch + 1, results[1].version
        [ctl] = self.zk.execute([GetData(znodes.ControllerZNode.path())])
        return znodes.ControllerZNode.decode(ctl.data), epoch, None

    def expire_session(self, broker_id: int) -> None:
        """The broker's ZooKeeper session expires now: its ephemeral nodes go; it hears of the loss
        and registers again once it can reach ZooKeeper."""
        node = self.brokers[broker_id]
        self.zk_clients.expire(node)
        if node.zk_lost_at is None and self.zk_clients.reachable(node):
            self.zk_clients.new_session(node)

    def cut_off(self, broker_id: int) -> None:
        """A network partition: the broker reaches neither ZooKeeper nor the other brokers, but
        clients still reach it (NET-4, NET-5)."""
        self.partition_brokers([broker_id])
        self.cut_from_zookeeper(broker_id)

    def heal(self, broker_id: int) -> None:
        for other in self.brokers:
            if other != broker_id:
                self.heal_link(broker_id, other)
                self.heal_link(other, broker_id)
        self.heal_zookeeper(broker_id)

    def crash(self, broker_id: int, *, lose_unflushed: bool = True, expire_at_once: bool = True) -> None:
        """SIGKILL (``lose_unflushed=False``: the OS keeps its page cache) or power loss (True).
        Its ZooKeeper session ends at once (``expire_at_once``, as if the session timeout had passed)
        or after ``zookeeper.session.timeout.ms``."""
        node = self.brokers[broker_id]
        node.core = None
        node.held.clear()
        if lose_unflushed:
            node.disk.crash()
        self.net.reset_broker(broker_id)
        node.conns.clear()
        node.by_peer.clear()
        self.zk_clients.pending.pop(broker_id, None)
        node.zk_lost_at = None
        if expire_at_once:
            self.zk_clients.expire(node)
        else:        # the process is gone: nothing renews its session, which ends after the timeout
            self.schedule_in(self.session_timeout_ms, functools.partial(self.zk_clients.expire_session, node.session))

    def bounce(self, broker_id: int, *, lose_unflushed: bool = True) -> None:
        """Crash and restart so fast that the controller's watch sees only the new registration
        (same broker id, new broker epoch)."""
        zkc = self.zk_clients
        zkc.brokers_watch_muted = True
        try:
            self.crash(broker_id, lose_unflushed=lose_unflushed)
        finally:
            zkc.brokers_watch_muted = False
        self.start(broker_id)

    def begin_controlled_shutdown(self, broker_id: int) -> None:
        """What SIGTERM starts: the broker asks the controller to move its leaderships away."""
        node = self.brokers[broker_id]
        assert node.core is not None
        self.apply(node, node.core.begin_controlled_shutdown(self.clock_of(node)))

    def shutdown(self, broker_id: int) -> None:
        """A clean stop: high watermarks checkpointed, logs flushed, the session closed."""
        node = self.brokers[broker_id]
        assert node.core is not None
        node.core.shutdown(self.zk_clients.own_registration(node))
        self.crash(broker_id, lose_unflushed=False)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: nothing reaches or leaves the broker and its timers stop until :meth:`resume`;
        ZooKeeper expires its session if that lasts longer than the session timeout."""
        node = self.brokers[broker_id]
        node.paused = True
        if node.core is not None:
            self.zk_clients.lose_contact(node)

    def resume(self, broker_id: int) -> None:
        node = self.brokers[broker_id]
        node.paused = False
        held, node.held = node.held, []
        for action in held:
            self.schedule_in(0, action)
        for conn_id in list(node.conns):
            self.net.pump(node, conn_id)
        self.zk_clients.regain_contact(node)

    def step_clock(self, broker_id: int, delta_ms: int) -> None:
        """The broker's wall clock jumps by ``delta_ms`` (NTP step, VM migration)."""
        self.brokers[broker_id].clock_offset_ms += delta_ms

    # ------------------------------------------------------------------ clients

    def client_send(self, broker_id: int, client: str, frame: bytes, on_answer: Callable[[bytes | None], None],
                    *, timeout_ms: int = 30000, expect_answer: bool = True) -> None:
        """A client's request (clients reach every running broker; links never cut them off)."""
        channel = self.net.channel(("client", client), broker_id, "client")
        correlation = int.from_bytes(frame[4:8], "big", signed=True)
        self.net.request(channel, correlation, frame, on_answer, timeout_ms, expect_answer)

    def next_correlation(self) -> int:
        self._correlation += 1
        return self._correlation

    def request(self, broker_id: int, api_key: int, version: int, body: Any, client: str = "client") -> None:
        frame = api.encode_request(api_key, version, self.next_correlation(), client, body)
        box = self.inbox[(broker_id, client)]

        def on_answer(response: bytes | None) -> None:
            if response is not None:
                box.append(response)
        self.client_send(broker_id, client, frame, on_answer, timeout_ms=1 << 40)

    def response(self, broker_id: int, api_key: int, version: int, client: str = "client") -> Any | None:
        box = self.inbox[(broker_id, client)]
        if not box:
            return None
        return api.decode_response(api_key, version, box.popleft())

    def call(self, broker_id: int, api_key: int, version: int, body: Any, client: str = "client",
             within_ms: int = 1000) -> Any:
        """Send a request and wait (in simulated time, at most ``within_ms``) for its answer."""
        self.request(broker_id, api_key, version, body, client)
        self.settle()
        waited = 0
        while not self.inbox[(broker_id, client)] and waited < within_ms:
            self.advance(1)
            waited += 1
        answer = self.response(broker_id, api_key, version, client)
        if answer is None:
            raise TimeoutError(f"no answer from broker {broker_id} within {within_ms} ms")
        return answer

    # ------------------------------------------------------------------ inspection

    @property
    def controller_id(self) -> int:
        current = self.controller_id_or_none()
        return -1 if current is None else current

    def partition(self, broker_id: int, topic: str, index: int = 0) -> Partition | None:
        node = self.brokers[broker_id]
        return node.core.partitions.get((topic, index)) if node.core is not None else None

    def log_bytes(self, broker_id: int, topic: str, index: int = 0) -> bytes:
        partition = self.partition(broker_id, topic, index)
        assert partition is not None, f"broker {broker_id} has no replica of {topic}-{index}"
        log = partition.log
        if not log.log_end_offset:
            return b""
        data = log.read(log.log_start_offset, 1 << 30, max_offset=log.log_end_offset)
        assert not isinstance(data, FileRegion)     # only a read with regions=True gives one
        return data

    def state(self, topic: str, index: int = 0) -> LeaderAndIsr:
        [res] = self.zk.execute([GetData(znodes.TopicPartitionStateZNode.path(topic, index))])
        return znodes.TopicPartitionStateZNode.decode(res.data, res.version)
