"""A deterministic cluster: broker cores on in-memory disks, an in-memory network and ZooKeeper,
and a test clock. No threads, sockets or sleeps; the same seed gives the same run.

It does what the asyncio shell does for a real broker (connections answered one request at a
time, outgoing broker channels, ZooKeeper calls, timers, the ``/brokers/ids`` watch), so
scenarios of the seed documents can be played step by step: pause a broker (SIGSTOP), crash it
with or without losing what it had not flushed, restart it from its disk.
"""

from __future__ import annotations

import collections
import heapq
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from strandline.broker.broker import Broker
from strandline.broker.cluster_state import read_cluster_state
from strandline.broker.config import BrokerConfig
from strandline.broker.effects import BrokerSend, Close, Log, ReadClusterState, Send, ZkRequest
from strandline.controller import zk_layout
from strandline.coordination import znodes
from strandline.coordination.store import Create, GetData, OpResult, ZkError
from strandline.log.manager import LogManager
from strandline.protocol import api
from strandline.sim.disk import MemoryDisk
from strandline.sim.zookeeper import MemoryZooKeeper

START_MS = 1_700_000_000_000
LOG_DIR = "/data/logs"
ISR_CHANGES = znodes.IsrChangeNotificationZNode.path()
CONTROLLER = znodes.ControllerZNode.path()


@dataclass
class _Conn:
    peer: tuple                    # ("client", name) or ("broker", source id, channel)
    queue: collections.deque = field(default_factory=collections.deque)
    busy: bool = False
    tokens: collections.deque = field(default_factory=collections.deque)   # broker peers: requests asked


@dataclass
class SimBroker:
    id: int
    disk: MemoryDisk
    core: Broker | None = None
    session: int = 0
    incarnation: int = 0
    paused: bool = False
    cut_off: bool = False            # from ZooKeeper and the other brokers; clients still reach it
    held: list = field(default_factory=list)
    on_heal: list = field(default_factory=list)
    conns: dict[int, _Conn] = field(default_factory=dict)
    by_peer: dict[tuple, int] = field(default_factory=dict)
    next_conn: int = 1
    log: list[str] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.core is not None


class SimCluster:
    def __init__(self, broker_ids=(1, 2, 3), *, latency_ms: int = 0, seed: int = 1,
                 overrides: dict[str, dict[str, str]] | None = None, **config: str) -> None:
        self.zk = MemoryZooKeeper()
        self.now = START_MS
        self.latency_ms = latency_ms
        self.seed = seed
        self.config = dict(config)
        self.overrides = overrides or {}
        self.events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self._sessions = 0
        self.brokers: dict[int, SimBroker] = {}
        self.inbox: dict[tuple[int, str], collections.deque] = collections.defaultdict(collections.deque)
        self._correlation = 0
        self.zk.execute([Create(znodes.ClusterIdZNode.path(), znodes.ClusterIdZNode.encode("sim-cluster"))])
        for b in broker_ids:
            self.start(b)

    # ------------------------------------------------------------------ scheduling

    def _schedule(self, delay_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self.events, (self.now + delay_ms, self._seq, action))

    def _to_broker(self, broker_id: int, incarnation: int, delay_ms: int, action: Callable[[Broker], list]) -> None:
        """Run ``action(core)`` on a broker later, unless it crashed meanwhile; held while paused."""
        def run() -> None:
            node = self.brokers.get(broker_id)
            if node is None or node.core is None or node.incarnation != incarnation:
                return
            if node.paused:
                node.held.append(run)
                return
            self._apply(node, action(node.core))
        self._schedule(delay_ms, run)

    def settle(self, max_events: int = 1_000_000) -> None:
        """Deliver everything due now, without moving the clock."""
        for _ in range(max_events):
            if not self.events or self.events[0][0] > self.now:
                return
            _, _, action = heapq.heappop(self.events)
            action()
        raise RuntimeError("the simulation does not settle")

    def advance(self, ms: int) -> None:
        """Move the clock ``ms`` forward, delivering messages and firing timers as they fall due."""
        target = self.now + ms
        while True:
            self.settle()
            due = [e[0] for e in self.events[:1]]
            for node in self.brokers.values():
                if node.core is not None and not node.paused:
                    d = node.core.next_deadline_ms()
                    if d is not None:
                        due.append(max(d, self.now))
            nxt = min(due) if due else None
            if nxt is None or nxt > target:
                self.now = target
                self.settle()
                return
            self.now = nxt
            for node in list(self.brokers.values()):
                if node.core is not None and not node.paused:
                    d = node.core.next_deadline_ms()
                    if d is not None and d <= self.now:
                        self._apply(node, node.core.tick(self.now))

    # ------------------------------------------------------------------ effects (what the shell does)

    def _apply(self, node: SimBroker, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self._send(node, effect)
            elif isinstance(effect, Close):
                self._close(node, effect.conn_id)
            elif isinstance(effect, ZkRequest):
                if node.cut_off:
                    results = [OpResult(ZkError.CONNECTION_LOSS)] * len(effect.ops)
                else:
                    results = self.zk.run(effect.ops, effect.transaction, node.session)
                token = effect.token
                self._to_broker(node.id, node.incarnation, 0,
                                lambda core, token=token, results=results: core.on_zk_result(token, results, self.now))
                if any(isinstance(op, Create) and op.path.startswith(ISR_CHANGES) for op in effect.ops):
                    self._isr_changes_notified()
                if any(isinstance(op, Create) and op.path == CONTROLLER for op in effect.ops):
                    self._controller_changed()
            elif isinstance(effect, ReadClusterState):
                brokers, topics = read_cluster_state(self.zk)
                epochs = {b: self.zk.czxid[znodes.BrokerIdZNode.path(b)] for b in brokers}
                token = effect.token
                self._to_broker(node.id, node.incarnation, 0,
                                lambda core, token=token, state=(brokers, topics, epochs):
                                core.on_zk_result(token, state, self.now))
            elif isinstance(effect, BrokerSend):
                self._broker_send(node, effect)
            elif isinstance(effect, Log):
                node.log.append(f"{effect.level} {effect.message}")
            else:
                raise TypeError(f"unknown effect {effect!r}")

    def _send(self, node: SimBroker, effect: Send) -> None:
        conn = node.conns.get(effect.conn_id)
        if conn is None:
            return
        data = b"".join(bytes(b) for b in effect.buffers)
        conn.busy = False
        if data:
            frame = data[4:]
            if conn.peer[0] == "client":
                key = (node.id, conn.peer[1])
                self._schedule(self.latency_ms, lambda: self.inbox[key].append(frame))
            else:
                source = self.brokers.get(conn.peer[1])
                token = conn.tokens.popleft()
                if source is not None and source.core is not None:
                    self._to_broker(source.id, source.incarnation, self.latency_ms,
                                    lambda core: core.on_broker_response(token, frame, self.now))
        self._pump(node, effect.conn_id)

    def _pump(self, node: SimBroker, conn_id: int) -> None:
        conn = node.conns.get(conn_id)
        while conn is not None and not conn.busy and conn.queue and node.core is not None and not node.paused:
            frame = conn.queue.popleft()
            conn.busy = True
            self._apply(node, node.core.handle_request(conn_id, frame, self.now))
            conn = node.conns.get(conn_id)

    def _conn(self, node: SimBroker, peer: tuple) -> int:
        conn_id = node.by_peer.get(peer)
        if conn_id is None:
            conn_id = node.next_conn
            node.next_conn += 1
            node.conns[conn_id] = _Conn(peer)
            node.by_peer[peer] = conn_id
        return conn_id

    def _close(self, node: SimBroker, conn_id: int) -> None:
        conn = node.conns.pop(conn_id, None)
        if conn is None:
            return
        node.by_peer.pop(conn.peer, None)
        if node.core is not None:
            node.core.connection_closed(conn_id)
        if conn.peer[0] == "broker":
            self._fail_tokens(conn.peer[1], conn.tokens)

    def _fail_tokens(self, source_id: int, tokens) -> None:
        source = self.brokers.get(source_id)
        if source is None or source.core is None:
            return
        for token in list(tokens):
            self._to_broker(source.id, source.incarnation, 0,
                            lambda core, token=token: core.on_broker_response(token, None, self.now))

    def _broker_send(self, node: SimBroker, effect: BrokerSend) -> None:
        target = self.brokers.get(effect.broker_id)
        token = effect.token
        if target is None or target.core is None or target.cut_off or node.cut_off:
            self._fail_tokens(node.id, [token])
            return
        peer = ("broker", node.id, effect.channel)
        incarnation = target.incarnation

        def deliver() -> None:
            if target.core is None or target.incarnation != incarnation or target.cut_off or node.cut_off:
                self._fail_tokens(node.id, [token])
                return
            if target.paused:
                target.held.append(deliver)
                return
            conn_id = self._conn(target, peer)
            conn = target.conns[conn_id]
            conn.queue.append(effect.frame)
            conn.tokens.append(token)
            self._pump(target, conn_id)

        self._schedule(self.latency_ms, deliver)

    # ------------------------------------------------------------------ broker lifecycle

    def broker_config(self, broker_id: int) -> BrokerConfig:
        props = {"broker.id": str(broker_id), "zookeeper.connect": "sim:2181", "log.dirs": LOG_DIR,
                 "listeners": f"PLAINTEXT://127.0.0.1:{9091 + broker_id}"}
        props.update(self.config)
        props.update(self.overrides.get(str(broker_id), {}))
        return BrokerConfig.from_properties(props)

    def start(self, broker_id: int) -> SimBroker:
        node = self.brokers.get(broker_id)
        if node is None:
            node = self.brokers[broker_id] = SimBroker(broker_id, MemoryDisk())
        assert node.core is None, f"broker {broker_id} is running"
        config = self.broker_config(broker_id)
        _, topics = read_cluster_state(self.zk)
        logs = LogManager(node.disk, [LOG_DIR], config.log_config())
        logs.startup(self.now, {n: config.log_config(t.configs) for n, t in topics.items()})
        rng = random.Random(self.seed * 1000 + broker_id)
        core = Broker(config, logs, rng=rng, new_uuid=lambda: uuid.UUID(int=rng.getrandbits(128)), now_ms=self.now)
        self._sessions += 1
        node.session = self._sessions
        node.incarnation += 1
        node.core = core
        node.paused = False
        node.held.clear()
        node.conns.clear()
        node.by_peer.clear()
        adv = config.advertised
        self.zk.execute([Create(znodes.BrokerIdZNode.path(broker_id),
                                znodes.BrokerIdZNode.encode(broker_id, adv.host, adv.port, None, self.now),
                                ephemeral=True)], node.session)
        controller_id, epoch, version = self._elect(broker_id, node.session)
        brokers, topics = read_cluster_state(self.zk)
        self._apply(node, core.load_metadata("sim-cluster", brokers, topics, controller_id, epoch, self.now,
                                             version))
        self._brokers_changed()
        return node

    def _elect(self, broker_id: int, session: int) -> tuple[int, int]:
        [epoch_res] = self.zk.execute([GetData(znodes.ControllerEpochZNode.path())])
        epoch, version = (0, -1) if epoch_res.error is ZkError.NO_NODE else \
            (znodes.ControllerEpochZNode.decode(epoch_res.data), epoch_res.version)
        results = self.zk.transaction(zk_layout.controller_election_ops(broker_id, epoch + 1, version, self.now),
                                      session)
        if results[0].error is ZkError.NONE:
            return broker_id, epoch + 1, results[1].version
        [ctl] = self.zk.execute([GetData(znodes.ControllerZNode.path())])
        return znodes.ControllerZNode.decode(ctl.data), epoch, None

    def _brokers_changed(self) -> None:
        """What each shell's ``/brokers/ids`` watch reports."""
        brokers, _ = read_cluster_state(self.zk)
        epochs = {b: self.zk.czxid[znodes.BrokerIdZNode.path(b)] for b in brokers}
        for node in self.brokers.values():
            if node.core is not None:
                self._to_broker(node.id, node.incarnation, 0,
                                lambda core: core.on_brokers_changed(dict(brokers), dict(epochs), self.now))

    def _controller_changed(self) -> None:
        """What each shell's ``/controller`` watch reports."""
        [ctl] = self.zk.execute([GetData(CONTROLLER)])
        current = znodes.ControllerZNode.decode(ctl.data) if ctl.error is ZkError.NONE else None
        for node in self.brokers.values():
            if node.core is not None:
                self._to_broker(node.id, node.incarnation, 0,
                                lambda core: core.on_controller_changed(current, self.now))

    def expire_session(self, broker_id: int) -> None:
        """The broker's ZooKeeper session expires while it runs: its ephemeral nodes go, it hears
        of the loss and registers again (once it can reach ZooKeeper, see :meth:`cut_off`)."""
        node = self.brokers[broker_id]
        gone = self.zk.expire(node.session)
        self._brokers_changed()
        if CONTROLLER in gone:
            self._controller_changed()

        def reconnect() -> None:
            self._sessions += 1
            node.session = self._sessions
            self._to_broker(node.id, node.incarnation, 0, lambda core: core.on_session_lost(self.now))
            adv = self.broker_config(broker_id).advertised
            self.zk.execute([Create(znodes.BrokerIdZNode.path(broker_id),
                                    znodes.BrokerIdZNode.encode(broker_id, adv.host, adv.port, None, self.now),
                                    ephemeral=True)], node.session)
            self._brokers_changed()
            self._controller_changed()

        if node.cut_off:
            node.on_heal.append(reconnect)
        else:
            reconnect()

    def cut_off(self, broker_id: int) -> None:
        """A network partition: the broker reaches neither ZooKeeper (its requests fail with
        CONNECTION_LOSS) nor the other brokers, but clients still reach it (NET-4)."""
        node = self.brokers[broker_id]
        node.cut_off = True
        for conn_id, conn in list(node.conns.items()):
            if conn.peer[0] == "broker":
                self._close(node, conn_id)
        for other in self.brokers.values():
            for conn_id, conn in list(other.conns.items()):
                if conn.peer[0] == "broker" and conn.peer[1] == broker_id:
                    self._close(other, conn_id)

    def heal(self, broker_id: int) -> None:
        node = self.brokers[broker_id]
        node.cut_off = False
        actions, node.on_heal = node.on_heal, []
        for action in actions:
            action()

    def _isr_changes_notified(self) -> None:
        """What each shell's ``/isr_change_notification`` watch reports."""
        children = self.zk.children(ISR_CHANGES)
        for node in self.brokers.values():
            if node.core is not None:
                self._to_broker(node.id, node.incarnation, 0,
                                lambda core: core.on_isr_change_notifications(list(children), self.now))

    def crash(self, broker_id: int, *, lose_unflushed: bool = True) -> None:
        """SIGKILL (``lose_unflushed=False``: the OS keeps its page cache) or power loss (True).
        Its ZooKeeper session ends at once (as if the session timeout had passed)."""
        node = self.brokers[broker_id]
        node.core = None
        node.held.clear()
        if lose_unflushed:
            node.disk.crash()
        for conn in node.conns.values():
            if conn.peer[0] == "broker":
                self._fail_tokens(conn.peer[1], conn.tokens)
        node.conns.clear()
        node.by_peer.clear()
        for other in self.brokers.values():
            for conn_id, conn in list(other.conns.items()):
                if conn.peer[0] == "broker" and conn.peer[1] == broker_id:
                    self._close(other, conn_id)
        gone = self.zk.expire(node.session)
        self._brokers_changed()
        if CONTROLLER in gone:
            self._controller_changed()

    def bounce(self, broker_id: int, *, lose_unflushed: bool = True) -> None:
        """Crash and restart so fast that the controller's watch sees only the new registration
        (same broker id, new broker epoch)."""
        notify, self._brokers_changed = self._brokers_changed, lambda: None
        try:
            self.crash(broker_id, lose_unflushed=lose_unflushed)
        finally:
            self._brokers_changed = notify
        self.start(broker_id)

    def shutdown(self, broker_id: int) -> None:
        """A clean stop: high watermarks checkpointed, logs flushed."""
        node = self.brokers[broker_id]
        assert node.core is not None
        node.core.shutdown()
        self.crash(broker_id, lose_unflushed=False)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: nothing reaches or leaves the broker and its timers stop until :meth:`resume`."""
        self.brokers[broker_id].paused = True

    def resume(self, broker_id: int) -> None:
        node = self.brokers[broker_id]
        node.paused = False
        held, node.held = node.held, []
        for action in held:
            self._schedule(0, action)
        for conn_id in list(node.conns):
            self._pump(node, conn_id)

    # ------------------------------------------------------------------ clients

    def request(self, broker_id: int, api_key: int, version: int, body: Any, client: str = "client") -> None:
        self._correlation += 1
        frame = api.encode_request(api_key, version, self._correlation, client, body)
        node = self.brokers[broker_id]

        def deliver() -> None:
            if node.core is None:
                return
            conn_id = self._conn(node, ("client", client))
            node.conns[conn_id].queue.append(frame)
            self._pump(node, conn_id)

        self._schedule(self.latency_ms, deliver)

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
        [ctl] = self.zk.execute([GetData(znodes.ControllerZNode.path())])
        return znodes.ControllerZNode.decode(ctl.data) if ctl.error is ZkError.NONE else -1

    def partition(self, broker_id: int, topic: str, index: int = 0):
        node = self.brokers[broker_id]
        return node.core.partitions.get((topic, index)) if node.core is not None else None

    def log_bytes(self, broker_id: int, topic: str, index: int = 0) -> bytes:
        partition = self.partition(broker_id, topic, index)
        log = partition.log
        return log.read(log.log_start_offset, 1 << 30, max_offset=log.log_end_offset) if log.log_end_offset else b""

    def state(self, topic: str, index: int = 0):
        [res] = self.zk.execute([GetData(znodes.TopicPartitionStateZNode.path(topic, index))])
        return znodes.TopicPartitionStateZNode.decode(res.data, res.version)
