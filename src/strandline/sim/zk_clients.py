"""The simulator's side of each broker's ZooKeeper client: requests, watches and sessions.

A request is applied in order per session and answered ``zk_latency_ms`` later, unless a fault
says otherwise: a broker cut from ZooKeeper gets CONNECTION_LOSS (its request may still be applied
when the link heals) and its session expires after ``zookeeper.session.timeout.ms``; a flaky link
loses the reply of an applied write, never applies the write, or applies it late. Watches on
``/brokers/ids``, ``/controller`` and ``/isr_change_notification`` reach each registered broker as
the shell's kazoo watches do. Part of :class:`strandline.sim.cluster.SimCluster`, whose clock,
brokers and ZooKeeper it uses.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Sequence

from strandline.broker.broker import Broker
from strandline.core.effects import Effect, ZkRequest
from strandline.coordination import znodes
from strandline.coordination.cluster_state import read_brokers, read_cluster_state
from strandline.coordination.store import Create, GetData, Op, OpResult, ZkError
from strandline.coordination.znodes import BrokerInfo

from strandline.sim.node import SimBroker
from strandline.sim.world import SimWorld

ISR_CHANGES = znodes.IsrChangeNotificationZNode.path()
CONTROLLER = znodes.ControllerZNode.path()
BROKER_IDS = znodes.BrokerIdsZNode.path()
CONFIG_CHANGES = znodes.ConfigEntityChangeNotificationZNode.path()
REASSIGN = znodes.ReassignPartitionsZNode.path()
FEATURE = znodes.FeatureZNode.path()
DELETE_TOPICS = znodes.DeleteTopicsZNode.path()


class SimZkClients:
    def __init__(self, sim: SimWorld) -> None:
        self.sim = sim
        self.cut_brokers: set[int] = set()                  # brokers that cannot reach ZooKeeper
        self.flaky: dict[int, float] = {}                   # broker -> chance a ZooKeeper request fails
        self.pending: dict[int, list[Callable[[], object]]] = collections.defaultdict(list)
        self.order: dict[int, int] = {}                     # session -> when its last request applies
        self.sessions = 0
        #: a broker bounced so fast that the controller's watch sees only its new registration
        self.brokers_watch_muted = False
        self.fault: Callable[[int, list[Op]], Any] | None = None
        """Tests: ``fault(broker_id, ops)`` may answer a fault for one request: "applied-reply-lost"
        (CONNECTION_LOSS although the write was applied), "not-applied", "applied-late" or
        ("reply-delayed", ms)."""

    def open_session(self, node: SimBroker) -> None:
        self.sessions += 1
        node.session = self.sessions
        node.session_expired = False

    def reachable(self, node: SimBroker) -> bool:
        return node.id not in self.cut_brokers and not node.paused

    def request(self, node: SimBroker, effect: ZkRequest) -> None:
        """A ZooKeeper request: applied in order per session (``zk_latency_ms`` after it is sent),
        its result back ``zk_latency_ms`` later; faults from :attr:`fault` or :attr:`flaky`."""
        token, incarnation, session = effect.token, node.incarnation, node.session
        ops: list[Op] = list(effect.ops)
        transaction = effect.transaction

        def reply(results: list[OpResult], delay_ms: int) -> None:
            self.sim.run_on(node.id, incarnation, delay_ms,
                         lambda core, t: core.on_zk_result(token, results, t))

        def lost() -> list[OpResult]:
            return [OpResult(ZkError.CONNECTION_LOSS)] * len(ops)

        def apply_now() -> list[OpResult]:
            if node.session != session or node.session_expired:
                return [OpResult(ZkError.SESSION_EXPIRED)] * len(ops)
            results = self.sim.zk.run(ops, transaction, session)
            self.notify_watches(ops)
            return results

        failure_delay = self.sim.rng.randint(1, self.sim.zk_failure_delay_ms) if self.sim.zk_failure_delay_ms else 0
        if not self.reachable(node):
            reply(lost(), failure_delay)
            if self.sim.rng.random() < 0.5:          # queued by the client: sent when the link heals
                self.pending[node.id].append(apply_now)
            return
        fault = self.fault(node.id, ops) if self.fault is not None else None
        chance = self.flaky.get(node.id, 0.0)
        if fault is None and chance and self.sim.rng.random() < chance:
            fault = self.sim.rng.choice(("applied-reply-lost", "not-applied", "applied-late"))
        delay = 0
        if isinstance(fault, tuple):
            fault, delay = fault
        # one session's requests are applied in the order they were sent
        apply_at = max(self.sim.now + self.sim.zk_latency_ms, self.order.get(session, 0))
        if fault == "applied-late":
            apply_at += delay or self.sim.rng.randint(1, 1000)
        self.order[session] = apply_at
        if fault == "not-applied":
            reply(lost(), failure_delay)
        elif fault in ("applied-reply-lost", "applied-late"):
            self._at_time(apply_at, apply_now)
            reply(lost(), max(failure_delay, apply_at - self.sim.now if fault == "applied-reply-lost" else 0))
        else:
            extra = delay if fault == "reply-delayed" else 0
            self._at_time(apply_at, lambda: reply(apply_now(), self.sim.zk_latency_ms + extra))

    def _at_time(self, when_ms: int, action: Callable[[], object]) -> None:
        if when_ms <= self.sim.now:
            action()
        else:
            self.sim.schedule_in(when_ms - self.sim.now, action)

    def notify_watches(self, ops: Sequence[Op]) -> None:
        paths = [op.path for op in ops if not isinstance(op, GetData) and hasattr(op, "path")]
        if any(p.startswith(ISR_CHANGES) for p in paths):
            self.isr_changes_notified()
        if any(p == CONTROLLER for p in paths):
            self.controller_changed()
        if any(p.startswith(BROKER_IDS + "/") for p in paths):
            self.brokers_changed()
        if any(p.startswith(CONFIG_CHANGES + "/") for p in paths):
            self.config_changes_notified()
        if REASSIGN in paths:
            self.reassign_partitions_changed()
        if any(p.startswith(DELETE_TOPICS + "/") for p in paths):
            self.delete_topics_changed()
        if FEATURE in paths:
            self.features_changed()

    def read_cluster_state(self, node: SimBroker, token: int) -> None:
        incarnation = node.incarnation

        def read() -> None:
            if not self.reachable(node) or node.incarnation != incarnation:
                self.sim.schedule_in(1000, read)          # the shell retries every second
                return
            _, topics = read_cluster_state(self.sim.zk)
            brokers, epochs, listing = self.live_brokers()
            self.sim.run_on(node.id, incarnation, self.sim.zk_latency_ms,
                         lambda core, t: core.on_zk_result(token, (brokers, topics, epochs, listing), t))
        read()

    def _watchers(self) -> list[SimBroker]:
        return [n for n in self.sim.brokers.values() if n.core is not None and not n.waiting_to_register]

    def brokers_changed(self) -> None:
        """What each shell's ``/brokers/ids`` watch reports (a broker out of reach hears it later)."""
        if self.brokers_watch_muted:
            return
        for node in self._watchers():
            self._watch_event(node, self.report_brokers)

    def controller_changed(self) -> None:
        """What each shell's ``/controller`` watch reports."""
        for node in self._watchers():
            def deliver(core: Broker, t: int) -> list[Effect]:
                [ctl] = self.sim.zk.execute([GetData(CONTROLLER)])
                current = znodes.ControllerZNode.decode(ctl.data) if ctl.error is ZkError.NONE else None
                return core.on_controller_changed(current, t)
            self._watch_event(node, deliver)

    def isr_changes_notified(self) -> None:
        """What each shell's ``/isr_change_notification`` watch reports."""
        for node in self._watchers():
            self._watch_event(node, lambda core, t: core.on_isr_change_notifications(
                list(self.sim.zk.children(ISR_CHANGES)), t))

    def reassign_partitions_changed(self) -> None:
        """What each shell's ``/admin/reassign_partitions`` watch reports."""
        for node in self._watchers():
            self._watch_event(node, lambda core, t: core.on_reassign_partitions_changed(
                self.sim.zk.nodes.get(REASSIGN, (None,))[0], t))

    def features_changed(self) -> None:
        """What each shell's ``/feature`` watch reports."""
        for node in self._watchers():
            self._watch_event(node, self.report_features)

    def report_features(self, core: Broker, now_ms: int) -> list[Effect]:
        data, version, _ = self.sim.zk.nodes.get(FEATURE, (None, -1, 0))
        return core.on_features_changed(data, version)

    def delete_topics_changed(self) -> None:
        """What each shell's ``/admin/delete_topics`` watch reports."""
        for node in self._watchers():
            self._watch_event(node, lambda core, t: core.on_delete_topics_changed(
                list(self.sim.zk.children(DELETE_TOPICS)), t))

    def config_changes_notified(self) -> None:
        """What each shell's ``/config/changes`` watch reports."""
        for node in self._watchers():
            self._watch_event(node, lambda core, t: core.on_config_changes(list(self.sim.zk.children(CONFIG_CHANGES)), t))

    def _watch_event(self, node: SimBroker, deliver: Callable[[Broker, int], list[Effect]]) -> None:
        incarnation, session = node.incarnation, node.session

        def arrive() -> None:
            if node.incarnation != incarnation or node.session != session or node.core is None:
                return
            if node.paused:
                node.held.append(arrive)
                return
            if not self.reachable(node):
                return            # it reads again when it reconnects (see regain_contact)
            self.sim.apply(node, deliver(node.core, self.sim.clock_of(node)))
        self.sim.schedule_in(self.sim.zk_latency_ms, arrive)

    # -- ZooKeeper sessions

    def lose_contact(self, node: SimBroker) -> None:
        if node.zk_lost_at is not None:
            return
        node.zk_lost_at = lost_at = self.sim.now
        session = node.session

        def expire() -> None:
            if node.zk_lost_at == lost_at and node.session == session and not node.session_expired:
                self.expire(node)
        self.sim.schedule_in(self.sim.session_timeout_ms, expire)

    def expire(self, node: SimBroker) -> None:
        node.session_expired = True
        self.pending.pop(node.id, None)
        self.expire_session(node.session)

    def expire_session(self, session: int) -> None:
        """ZooKeeper ends ``session``: its ephemeral nodes go and the watches fire."""
        gone = self.sim.zk.expire(session)
        if any(p.startswith(BROKER_IDS + "/") for p in gone):
            self.brokers_changed()
        if CONTROLLER in gone:
            self.controller_changed()

    def regain_contact(self, node: SimBroker) -> None:
        """The broker reaches ZooKeeper again: queued requests go out; after an expiry it learns the
        session is lost and registers again (kazoo's LOST, then CONNECTED); its watches read again."""
        if node.zk_lost_at is None or not self.reachable(node) or node.core is None:
            return
        node.zk_lost_at = None
        if node.waiting_to_register:
            return
        for apply_now in self.pending.pop(node.id, []):
            apply_now()
        if node.session_expired:
            self.new_session(node)
        else:
            self._watch_event(node, self.report_brokers)
            self._watch_event(node, lambda core, t: core.on_controller_changed(self.controller_id_or_none(), t))
            self._watch_event(node, lambda core, t: core.on_isr_change_notifications(
                list(self.sim.zk.children(ISR_CHANGES)), t))
            self._watch_event(node, lambda core, t: core.on_config_changes(
                list(self.sim.zk.children(CONFIG_CHANGES)), t))

    def new_session(self, node: SimBroker) -> None:
        self.open_session(node)
        self.sim.run_on(node.id, node.incarnation, 0, lambda core, t: core.on_session_lost(t))
        self.register(node)
        self.brokers_changed()
        self.controller_changed()

    def register(self, node: SimBroker) -> None:
        config = self.sim.broker_config(node.id)
        adv = config.advertised
        path = znodes.BrokerIdZNode.path(node.id)
        data = znodes.BrokerIdZNode.encode(node.id, adv.host, adv.port, config["broker.rack"], self.sim.now,
                                           clean_shutdown=node.core.registration_clean_shutdown()
                                           if node.core is not None else None)
        [created] = self.sim.zk.execute([Create(path, data, ephemeral=True)], node.session)
        if created.error is ZkError.NONE and node.core is not None:
            self.sim.apply(node, node.core.on_registered(self.sim.zk.czxid[path], self.sim.clock_of(node)))

    def own_registration(self, node: SimBroker) -> BrokerInfo | None:
        """What the broker reads of its own registration before a clean stop (None when it cannot
        reach ZooKeeper, or has no registration)."""
        if node.zk_lost_at is not None or not self.reachable(node) or node.session_expired:
            return None
        [res] = self.sim.zk.execute([GetData(znodes.BrokerIdZNode.path(node.id))], node.session)
        return znodes.BrokerIdZNode.decode(res.data, node.id) if res.error is ZkError.NONE else None

    def report_brokers(self, core: Broker, now_ms: int) -> list[Effect]:
        """What a shell's ``/brokers/ids`` watch hands its core: the live brokers read now."""
        brokers, epochs, listing = self.live_brokers()
        return core.on_brokers_changed(brokers, epochs, now_ms, listing)

    def live_brokers(self) -> tuple[dict[int, BrokerInfo], dict[int, int], int]:
        """(brokers, broker epochs, listing number): ZooKeeper's count of writes so far orders the
        listings as a shell's numbers do."""
        brokers = read_brokers(self.sim.zk)
        epochs = {b: self.sim.zk.czxid[znodes.BrokerIdZNode.path(b)] for b in brokers}
        return dict(brokers), epochs, self.sim.zk.changes

    def controller_id_or_none(self) -> int | None:
        [ctl] = self.sim.zk.execute([GetData(CONTROLLER)])
        return znodes.ControllerZNode.decode(ctl.data) if ctl.error is ZkError.NONE else None

    def cut(self, broker_id: int) -> None:
        """The broker's link to ZooKeeper is cut (both ways); other links stay."""
        node = self.sim.brokers[broker_id]
        self.cut_brokers.add(broker_id)
        if node.core is not None:
            self.lose_contact(node)

    def heal(self, broker_id: int) -> None:
        self.cut_brokers.discard(broker_id)
        node = self.sim.brokers[broker_id]
        if not node.paused:
            self.regain_contact(node)
