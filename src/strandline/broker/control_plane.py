"""The controller's side of the broker core and the requests it sends (CTL-1, CTL-5).

The controller (the broker holding ``/controller``) decides; every broker, the controller
included, learns what was decided only from LeaderAndIsr (become leader or follower of a
partition), UpdateMetadata (the cluster as clients should see it) and StopReplica. The
controller sends them batched, one request per broker, and applies its own share locally through
the same code path. Brokers refuse requests from an older controller epoch (CTL-4).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.broker.effects import BrokerSend, Close, Log, ReadClusterState, Send
from strandline.coordination.metadata import TopicMetadata
from strandline.broker.config import ConfigError, parse_topic_configs
from strandline.coordination import zk_layout
from strandline.coordination import znodes
from strandline.coordination.store import CheckVersion, Delete, GetData, ZkError
from strandline.coordination.znodes import BrokerInfo
from strandline.protocol import control
from strandline.replication.partition import LeaderAndIsr, Partition

LEADER_DURING_DELETE = -2       # UpdateMetadata's leader for a partition being deleted (Kafka)
CONTROL_RETRY_MS = 500          # resend a control request after a failed connection
CONTROLLER_RETRY_MS = 1000      # run for controller again after ZooKeeper failed to answer
_TIMEOUT_KEYS = {"fetcher": "replica.socket.timeout.ms", "controller": "controller.socket.timeout.ms"}


class ControlPlane:
    """Mixin of :class:`strandline.broker.broker.Broker`: controller actions and control requests."""

    # attributes provided by Broker
    broker_id: int
    controller_epoch: int
    partitions: dict[tuple[str, int], Partition]

    @property
    def is_controller(self) -> bool:
        return self.active_controller  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ election (CTL-1, CTL-3, NET-8)

    def on_controller_changed(self, controller_id: int | None, now_ms: int) -> list:
        """``/controller`` changed: None when it is gone (every broker then runs for it). When it
        names this broker although no election answer said so (the answer was lost after ZooKeeper
        applied it), this broker takes office: nobody else will run while the node exists."""
        if controller_id is None:
            return self._run_for_controller(now_ms)
        if controller_id != self.broker_id:
            self.metadata.controller_id = controller_id  # type: ignore[attr-defined]
            if self.is_controller:
                return self._resign(f"broker {controller_id} holds /controller")
        elif not self.is_controller and not self._electing:  # type: ignore[attr-defined]
            return self._take_office(now_ms)
        return []

    def on_session_lost(self, now_ms: int) -> list:
        """The ZooKeeper session expired: a controller stops acting at once (NET-8)."""
        if self.is_controller:
            return self._resign("its ZooKeeper session expired")
        return []

    def _resign(self, why: str) -> list:
        self.active_controller = False  # type: ignore[attr-defined]
        self._controller_epoch_version = None  # type: ignore[attr-defined]
        if self.metadata.controller_id == self.broker_id:  # type: ignore[attr-defined]
            self.metadata.controller_id = -1  # type: ignore[attr-defined]
        return [Log("warning", f"Broker {self.broker_id} is no longer the controller: {why}")]

    def _run_for_controller(self, now_ms: int) -> list:
        """Kafka's election: create the ephemeral /controller and bump /controller_epoch in one
        transaction guarded by the epoch's version; the loser learns the winner from the watch.
        When ZooKeeper does not answer, run again after a while (an election applied without an
        answer shows up in the watch as this broker's own id)."""
        if self._electing:  # type: ignore[attr-defined]
            return []
        self._electing = True  # type: ignore[attr-defined]

        def failed(why: str, when_ms: int) -> list:
            self._electing = False  # type: ignore[attr-defined]
            return [Log("warning", f"Running for controller failed ({why}); trying again")] + \
                self._after(when_ms + CONTROLLER_RETRY_MS,  # type: ignore[attr-defined]
                            lambda t: [] if self.is_controller else self._run_for_controller(t))

        def on_epoch(results: list, when_ms: int) -> list:
            res = results[0]
            if res.error is ZkError.NO_NODE:
                epoch, version = 0, -1
            elif res.error is ZkError.NONE:
                epoch, version = znodes.ControllerEpochZNode.decode(res.data), res.version
            else:
                return failed(f"cannot read the controller epoch: {res.error.name}", when_ms)
            ops = zk_layout.controller_election_ops(self.broker_id, epoch + 1, version, when_ms)

            def on_elected(elected: list, at_ms: int) -> list:
                error = next((r.error for r in elected if r.error is not ZkError.NONE), None)
                if error in (ZkError.NODE_EXISTS, ZkError.BAD_VERSION):
                    self._electing = False  # type: ignore[attr-defined]
                    return self._who_is_controller()     # someone won: perhaps this broker, earlier
                if error is not None:
                    return failed(error.name, at_ms)
                self._electing = False  # type: ignore[attr-defined]
                return self._become_controller(epoch + 1, elected[1].version, "won the controller election")

            return [self._zk(ops, on_elected, transaction=True)]  # type: ignore[attr-defined]

        return [self._zk([GetData(znodes.ControllerEpochZNode.path())], on_epoch)]  # type: ignore[attr-defined]

    def _who_is_controller(self) -> list:
        """Read /controller after an election this broker did not win by its own answer."""
        def on_read(results: list, when_ms: int) -> list:
            res = results[0]
            if self.is_controller:
                return []
            if res.error is ZkError.NO_NODE:
                return self._run_for_controller(when_ms)
            if res.error is not ZkError.NONE:
                return self._after(when_ms + CONTROLLER_RETRY_MS,  # type: ignore[attr-defined]
                                   lambda t: [] if self.is_controller else self._who_is_controller())
            return self.on_controller_changed(znodes.ControllerZNode.decode(res.data), when_ms)
        return [self._zk([GetData(znodes.ControllerZNode.path())], on_read)]  # type: ignore[attr-defined]

    def _take_office(self, now_ms: int) -> list:
        """/controller names this broker: read the epoch it was elected in, then act as controller."""
        self._electing = True  # type: ignore[attr-defined]

        def on_epoch(results: list, when_ms: int) -> list:
            self._electing = False  # type: ignore[attr-defined]
            res = results[0]
            if self.is_controller:
                return []
            if res.error is not ZkError.NONE:
                return [Log("warning", f"Cannot read the controller epoch: {res.error.name}; trying again")] + \
                    self._after(when_ms + CONTROLLER_RETRY_MS,  # type: ignore[attr-defined]
                                lambda t: [] if self.is_controller else self._take_office(t))
            return self._become_controller(znodes.ControllerEpochZNode.decode(res.data), res.version,
                                           "holds /controller (its election's answer was lost)")

        return [self._zk([GetData(znodes.ControllerEpochZNode.path())], on_epoch)]  # type: ignore[attr-defined]

    def _become_controller(self, epoch: int, epoch_version: int, why: str) -> list:
        self._electing_partitions.clear()  # type: ignore[attr-defined]
        self._owed_states.clear()  # type: ignore[attr-defined]
        self.controller_epoch = epoch
        self._controller_epoch_version = epoch_version  # type: ignore[attr-defined]
        self.active_controller = True  # type: ignore[attr-defined]
        self._controller_ready = False  # type: ignore[attr-defined]
        self._pending_brokers = None  # type: ignore[attr-defined]
        self.metadata.controller_id = self.broker_id  # type: ignore[attr-defined]
        token = self._new_token()  # type: ignore[attr-defined]
        self._zk_callbacks[token] = self._on_controller_state  # type: ignore[attr-defined]
        return [Log("info", f"Broker {self.broker_id} {why} (epoch {epoch})"), ReadClusterState(token)]

    def _on_controller_state(self, state: tuple, now_ms: int) -> list:
        """Kafka's onControllerFailover: start from ZooKeeper's view, tell every live broker the
        state of its partitions, then elect leaders for partitions whose leader is gone."""
        if not self.is_controller:
            return []
        brokers, topics, epochs = state
        self.metadata.brokers = dict(brokers)  # type: ignore[attr-defined]
        self._broker_epochs = dict(epochs)  # type: ignore[attr-defined]
        for name, topic in topics.items():
            self.metadata.topics[name] = topic  # type: ignore[attr-defined]
        for name in [n for n in self.metadata.topics if n not in topics]:  # type: ignore[attr-defined]
            del self.metadata.topics[name]  # type: ignore[attr-defined]
        effects = self._on_became_controller(now_ms)
        live = set(brokers)
        affected = [(t.name, i) for t, i in self._all_partitions()
                    if i in t.states and (t.states[i].leader not in live or not set(t.states[i].isr) <= live)]
        dead = {r for t, i in self._all_partitions() for r in t.assignment[i]} - live
        effects += self._reelect(affected, dead, now_ms)
        self._controller_ready = True  # type: ignore[attr-defined]
        pending, self._pending_brokers = self._pending_brokers, None  # type: ignore[attr-defined]
        if pending is not None:
            effects += self.on_brokers_changed(pending[0], pending[1], now_ms)
        return effects

    def _fenced(self, ops: list) -> list:
        """Controller writes carry a check of /controller_epoch's version: a controller that lost
        its office cannot write (Kafka's zkVersion check of the controller epoch, CTL-3)."""
        if not self.is_controller:
            raise RuntimeError("a broker that is not the controller tried to write the controller's state")
        version = self._controller_epoch_version  # type: ignore[attr-defined]
        if version is None:             # a core driven by a test that does not track the epoch's znode
            return ops
        return [CheckVersion(znodes.ControllerEpochZNode.path(), version)] + list(ops)

    # ------------------------------------------------------------------ sending

    def _send_to_broker(self, broker_id: int, channel: str, frame_for: Callable[[int], bytes],
                        callback: Callable[[bytes | None, int], list], now_ms: int) -> list:
        """One request to another broker; ``frame_for(correlation_id)`` encodes it."""
        info = self.metadata.brokers.get(broker_id)  # type: ignore[attr-defined]
        if info is None:
            return callback(None, now_ms)
        token = self._new_token()  # type: ignore[attr-defined]
        self._broker_callbacks[token] = callback  # type: ignore[attr-defined]
        timeout_key = _TIMEOUT_KEYS.get(channel, "request.timeout.ms")
        return [BrokerSend(token, broker_id, info.host, info.port, channel, frame_for(token),
                           self.config[timeout_key])]  # type: ignore[attr-defined]

    def on_broker_response(self, token: int, frame: bytes | None, now_ms: int) -> list:
        """The answer to a :class:`BrokerSend` (None: the connection failed first)."""
        callback = self._broker_callbacks.pop(token, None)  # type: ignore[attr-defined]
        if callback is None:
            return []
        return callback(frame, now_ms)

    def _send_control(self, broker_id: int, api_key: int, body: dict, now_ms: int) -> list:
        """Send a control request, or apply it here when ``broker_id`` is this broker."""
        if broker_id == self.broker_id:
            effects, _ = self._apply_control(api_key, body, now_ms)
            return effects
        # KIP-380: addressed to the broker's registration the controller knows; a later life of
        # that broker refuses it (a retry must not reach a broker that restarted meanwhile)
        if body["broker_epoch"] < 0:       # a retry keeps the registration it was first addressed to
            body = {**body, "broker_epoch": self._broker_epochs.get(broker_id, -1)}  # type: ignore[attr-defined]
        controller_epoch = body["controller_epoch"]

        def on_response(frame: bytes | None, when_ms: int) -> list:
            if frame is None:
                if self.is_controller and self.controller_epoch == controller_epoch and \
                        broker_id in self.metadata.brokers:  # type: ignore[attr-defined]
                    return self._after(when_ms + CONTROL_RETRY_MS,  # type: ignore[attr-defined]
                                       lambda t: self._send_control(broker_id, api_key, body, t))
                return []
            try:
                answer = control.decode_response(api_key, frame)
            except Exception as exc:
                return [Log("warning", f"Bad {control.NAMES[api_key]} response from broker {broker_id}: {exc}")]
            errors = [e for e in answer.get("partition_errors", ()) if e["error_code"]]
            if answer["error_code"] or errors:
                # a broker that already has a state answers STALE_CONTROLLER_EPOCH for it, and a
                # broker that restarted since the request was addressed STALE_BROKER_EPOCH: routine
                routine = answer["error_code"] == ErrorCode.stale_broker_epoch or not answer["error_code"] and all(
                    e["error_code"] == ErrorCode.stale_controller_epoch for e in errors)
                return [Log("info" if routine else "warning",
                            f"Broker {broker_id} answered {control.NAMES[api_key]} with error {answer['error_code']} "
                            f"{errors[:5]}{' (states it already had)' if routine else ''}")]
            return []

        client_id = f"strandline-controller-{self.broker_id}"
        return self._send_to_broker(broker_id, "controller",
                                    lambda cid: control.encode_request(api_key, cid, client_id, body),
                                    on_response, now_ms)

    # ------------------------------------------------------------------ request bodies

    def _control_header(self) -> dict:
        return {"controller_id": self.broker_id, "controller_epoch": self.controller_epoch, "broker_epoch": -1}

    def _leader_and_isr_body(self, parts: list[tuple[TopicMetadata, int]], is_new: bool) -> dict:
        by_topic: dict[str, list] = {}
        leaders: set[int] = set()
        for topic, index in parts:
            state = topic.states[index]
            leaders.add(state.leader)
            by_topic.setdefault(topic.name, []).append({
                "partition_index": index, "controller_epoch": state.controller_epoch,
                "leader": state.leader, "leader_epoch": state.leader_epoch, "isr": list(state.isr),
                "zk_version": state.zk_version, "replicas": list(topic.assignment[index]), "is_new": is_new})
        brokers = self.metadata.brokers  # type: ignore[attr-defined]
        live_leaders = [{"broker_id": b, "host_name": brokers[b].host, "port": brokers[b].port}
                        for b in sorted(leaders) if b in brokers]
        return {**self._control_header(),
                "topic_states": [{"topic_name": n, "partition_states": p} for n, p in by_topic.items()],
                "live_leaders": live_leaders}

    def _update_metadata_body(self, parts: list[tuple[TopicMetadata, int]], deleted: list[tuple[str, int]] = ()
                              ) -> dict:
        brokers = self.metadata.brokers  # type: ignore[attr-defined]
        by_topic: dict[str, list] = {}
        for topic, index in parts:
            state = topic.states.get(index) or LeaderAndIsr(-1, -1, ())
            replicas = list(topic.assignment[index])
            by_topic.setdefault(topic.name, []).append({
                "partition_index": index, "controller_epoch": state.controller_epoch, "leader": state.leader,
                "leader_epoch": state.leader_epoch, "isr": list(state.isr), "zk_version": state.zk_version,
                "replicas": replicas, "offline_replicas": [r for r in replicas if r not in brokers]})
        for name, index in deleted:
            by_topic.setdefault(name, []).append({
                "partition_index": index, "controller_epoch": self.controller_epoch,
                "leader": LEADER_DURING_DELETE, "leader_epoch": 0, "isr": [], "zk_version": 0,
                "replicas": [], "offline_replicas": []})
        live = [{"id": b.id, "endpoints": [{"port": b.port, "host": b.host, "listener": "PLAINTEXT",
                                            "security_protocol": 0}], "rack": b.rack}
                for b in brokers.values()]
        return {**self._control_header(),
                "topic_states": [{"topic_name": n, "partition_states": p} for n, p in by_topic.items()],
                "live_brokers": live}

    # ------------------------------------------------------------------ controller actions

    def _all_partitions(self) -> list[tuple[TopicMetadata, int]]:
        return [(t, i) for t in self.metadata.topics.values() for i in sorted(t.assignment)]  # type: ignore

    def _send_partition_states(self, parts: list[tuple[TopicMetadata, int]], to_brokers: set[int] | None,
                               is_new: bool, now_ms: int, metadata_to: set[int] | None = None) -> list:
        """LeaderAndIsr for ``parts`` to their live replicas (only those in ``to_brokers`` when
        given), then UpdateMetadata for them to every live broker (or ``metadata_to``)."""
        live = set(self.metadata.brokers)  # type: ignore[attr-defined]
        per_broker: dict[int, list] = {}
        for topic, index in parts:
            if index not in topic.states:
                continue
            for replica in topic.assignment[index]:
                if replica in live and (to_brokers is None or replica in to_brokers):
                    per_broker.setdefault(replica, []).append((topic, index))
        effects: list = []
        # others first, so that a local follower's first fetch finds its leader informed; all
        # LeaderAndIsr before any UpdateMetadata, so that leaders serve before clients hear of them
        for broker_id in sorted(per_broker, key=lambda b: b == self.broker_id):
            effects.extend(self._send_control(broker_id, control.LEADER_AND_ISR,
                                              self._leader_and_isr_body(per_broker[broker_id], is_new), now_ms))
        body = self._update_metadata_body(parts)
        for broker_id in sorted(live if metadata_to is None else metadata_to & live):
            effects.extend(self._send_control(broker_id, control.UPDATE_METADATA, body, now_ms))
        return effects

    def _on_became_controller(self, now_ms: int) -> list:
        """Kafka's onControllerFailover: tell every live broker the state of all its partitions."""
        effects = [Log("info", f"Broker {self.broker_id} is the controller (epoch {self.controller_epoch})")]
        return effects + self._send_partition_states(self._all_partitions(), None, False, now_ms)

    def on_brokers_changed(self, brokers: dict[int, BrokerInfo], epochs: dict[int, int], now_ms: int) -> list:
        """The children of ``/brokers/ids`` changed (CTL-2, CTL-6, CTL-7).

        A broker that disappeared is dead: its partitions get new leaders and it leaves the ISRs.
        A broker that registered again with a new epoch (czxid) since we last looked *bounced*:
        it is handled as dead, then as new, as Kafka does, so that it never resumes a leadership
        with a log that may have lost its tail. New brokers learn the state of their partitions
        (after any election that concerns them) and every broker the new membership."""
        if not self.is_controller:
            self._broker_epochs = dict(epochs)  # type: ignore[attr-defined]
            return []
        if not self._controller_ready:  # type: ignore[attr-defined]
            # a new controller first loads the cluster from ZooKeeper (Kafka's controller handles
            # its failover event before any broker change); this change is handled right after
            self._pending_brokers = (dict(brokers), dict(epochs))  # type: ignore[attr-defined]
            return []
        known = self.metadata.brokers  # type: ignore[attr-defined]
        seen = self._broker_epochs  # type: ignore[attr-defined]
        bounced = {b for b in brokers if b in seen and seen[b] != epochs.get(b)}
        new = {b for b in brokers if b not in seen and b not in known} | bounced
        gone = set(known) - set(brokers)
        self._broker_epochs = dict(epochs)  # type: ignore[attr-defined]
        self._shutting_down -= gone | new  # type: ignore[attr-defined]
        if not new and not gone and all(known.get(b) == info for b, info in brokers.items()):
            return []
        self.metadata.brokers = dict(brokers)  # type: ignore[attr-defined]
        effects: list = [Log("info", f"Live brokers now {sorted(brokers)} (new {sorted(new - bounced)}, "
                                     f"restarted {sorted(bounced)}, gone {sorted(gone)})")]
        everyone = set(brokers)
        effects.extend(self._send_partition_states([], None, False, now_ms, metadata_to=everyone - new))
        dead = gone | bounced
        affected: list[tuple[TopicMetadata, int]] = []
        others: list[tuple[TopicMetadata, int]] = []
        for topic, index in self._all_partitions():
            state = topic.states.get(index)
            replicas = set(topic.assignment[index])
            if state is not None and (dead & replicas or (state.leader < 0 and new & replicas)):
                affected.append((topic, index))
            else:
                others.append((topic, index))
        effects.extend(self._send_partition_states(self._not_electing(others, new), new, False, now_ms,
                                                   metadata_to=new))
        before = {(t.name, i): t.states[i].leader_epoch for t, i in affected}

        def announce(when_ms: int) -> list:
            if not self.is_controller:
                return []
            # new brokers learn the partitions that an election did not just announce to them
            unchanged = [(t, i) for t, i in affected
                         if (t.name, i) in before and t.states.get(i) is not None
                         and t.states[i].leader_epoch == before[(t.name, i)]]
            return self._send_partition_states(self._not_electing(unchanged, new), new, False, when_ms,
                                               metadata_to=new) if new else []

        def elected(when_ms: int) -> list:
            if not self.is_controller:
                return []
            # a bounced broker was handled as dead; now it is new: it may lead what went offline (CTL-7)
            offline = [(t.name, i) for t, i in affected
                       if t.states.get(i) is not None and t.states[i].leader < 0 and bounced & set(t.assignment[i])]
            if offline:
                return self._reelect(offline, gone, when_ms, announce)
            return announce(when_ms)

        return effects + self._reelect([(t.name, i) for t, i in affected], dead, now_ms, elected)

    def on_isr_change_notifications(self, children: list[str], now_ms: int) -> list:
        """ISR-6, the controller's side: leaders list partitions whose ISR they changed under
        ``/isr_change_notification``; the controller reads their state, tells every broker
        (UpdateMetadata) and deletes the notifications."""
        if not self.is_controller or not children:
            return []
        paths = [f"{znodes.IsrChangeNotificationZNode.path()}/{child}" for child in children]

        def on_read(results: list, when_ms: int) -> list:
            keys: set[tuple[str, int]] = set()
            for path, res in zip(paths, results):
                if res.error is ZkError.NONE and res.data:
                    try:
                        keys.update(znodes.IsrChangeNotificationSequenceZNode.decode(res.data, path))
                    except Exception:  # a malformed notification is dropped, as Kafka does
                        pass
            ordered = sorted(k for k in keys if k[0] in self.metadata.topics)  # type: ignore[attr-defined]
            effects = [self._zk([Delete(path) for path in paths], lambda r, t: [])]  # type: ignore[attr-defined]
            if not ordered:
                return effects

            def on_states(states: list, at_ms: int) -> list:
                parts = []
                for (name, index), res in zip(ordered, states):
                    topic = self.metadata.topics.get(name)  # type: ignore[attr-defined]
                    if topic is not None and res.error is ZkError.NONE:
                        topic.states[index] = znodes.TopicPartitionStateZNode.decode(res.data, res.version)
                        parts.append((topic, index))
                body = self._update_metadata_body(parts)
                out: list = []
                for broker_id in sorted(self.metadata.brokers):  # type: ignore[attr-defined]
                    out.extend(self._send_control(broker_id, control.UPDATE_METADATA, body, at_ms))
                return out

            reads = [GetData(znodes.TopicPartitionStateZNode.path(n, i)) for n, i in ordered]
            return effects + [self._zk(reads, on_states)]  # type: ignore[attr-defined]

        return [self._zk([GetData(p) for p in paths], on_read)]  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ controlled shutdown (CTL-9)

    def _on_controlled_shutdown_request(self, broker_id: int, respond: Callable[[dict], list], now_ms: int) -> list:
        """The controller moves a stopping broker's leaderships to other ISR members and takes it
        out of the ISRs it follows; it answers with the partitions it still leads (no other ISR
        member could take them)."""
        if not self.is_controller:
            return respond({"error_code": ErrorCode.not_controller, "remaining_partitions": []})
        if broker_id not in self.metadata.brokers:  # type: ignore[attr-defined]
            return respond({"error_code": ErrorCode.broker_not_available, "remaining_partitions": []})
        self._shutting_down.add(broker_id)  # type: ignore[attr-defined]
        # as Kafka, partitions with a single replica are left alone
        keys = [(t.name, i) for t, i in self._all_partitions()
                if i in t.states and len(t.assignment[i]) > 1
                and (t.states[i].leader == broker_id or broker_id in t.states[i].isr)]

        def could_move_later(t: TopicMetadata, i: int) -> bool:
            """Retrying helps only if another replica is up (it may yet catch up)."""
            up = set(self.metadata.brokers) - self._shutting_down  # type: ignore[attr-defined]
            return any(r != broker_id and r in up for r in t.assignment[i])

        def done(when_ms: int) -> list:
            if not self.is_controller:          # deposed meanwhile: the broker asks the new one
                return respond({"error_code": ErrorCode.not_controller, "remaining_partitions": []})
            remaining = [{"topic_name": t.name, "partition_index": i} for t, i in self._all_partitions()
                         if i in t.states and t.states[i].leader == broker_id and len(t.assignment[i]) > 1
                         and could_move_later(t, i)]
            # it stops fetching, so that no leader lets it back into an ISR before it is gone
            stop: dict[str, list[int]] = {}
            for t, i in self._all_partitions():
                if broker_id in t.assignment[i] and t.states.get(i) and t.states[i].leader != broker_id:
                    stop.setdefault(t.name, []).append(i)
            effects: list = [Log("info", f"Controlled shutdown of broker {broker_id}: {len(keys)} partition(s) "
                                         f"moved or shrunk, {len(remaining)} remaining")]
            if stop:
                body = {**self._control_header(), "delete_partitions": False,
                        "topics": [{"name": n, "partition_indexes": p} for n, p in stop.items()]}
                effects.extend(self._send_control(broker_id, control.STOP_REPLICA, body, when_ms))
            return effects + respond({"error_code": ErrorCode.none, "remaining_partitions": remaining})

        return self._reelect(keys, {broker_id}, now_ms, done)

    def begin_controlled_shutdown(self, now_ms: int) -> list:
        """Ask the controller to move this broker's leaderships away before it stops; retried
        ``controlled.shutdown.max.retries`` times. ``controlled_shutdown_done`` turns True when
        the broker may stop."""
        cfg = self.config  # type: ignore[attr-defined]
        if not cfg["controlled.shutdown.enable"]:
            self.controlled_shutdown_done = True  # type: ignore[attr-defined]
            return []
        return self._controlled_shutdown_attempt(cfg["controlled.shutdown.max.retries"], now_ms)

    def _controlled_shutdown_attempt(self, retries_left: int, now_ms: int) -> list:
        cfg = self.config  # type: ignore[attr-defined]

        def on_answer(answer: dict | None, when_ms: int) -> list:
            if answer is not None and answer["error_code"] == ErrorCode.none and not answer["remaining_partitions"]:
                self.controlled_shutdown_done = True  # type: ignore[attr-defined]
                return [Log("info", "Controlled shutdown succeeded")]
            why = "no answer" if answer is None else \
                f"error {answer['error_code']}, {len(answer['remaining_partitions'])} partition(s) remaining"
            if retries_left <= 0:
                self.controlled_shutdown_done = True  # type: ignore[attr-defined]
                return [Log("warning", f"Controlled shutdown failed ({why}); stopping anyway")]
            return [Log("info", f"Controlled shutdown not complete ({why}); retrying")] + \
                self._after(when_ms + cfg["controlled.shutdown.retry.backoff.ms"],  # type: ignore[attr-defined]
                            lambda t: self._controlled_shutdown_attempt(retries_left - 1, t))

        body = {"broker_id": self.broker_id, "broker_epoch": self._broker_epochs.get(self.broker_id, -1)}  # type: ignore
        if self.is_controller:
            return self._on_controlled_shutdown_request(self.broker_id, lambda a: on_answer(a, now_ms), now_ms)
        controller = self.metadata.controller_id  # type: ignore[attr-defined]

        def on_response(frame: bytes | None, when_ms: int) -> list:
            answer = None
            if frame is not None:
                try:
                    answer = control.decode_response(control.CONTROLLED_SHUTDOWN, frame)
                except Exception:
                    answer = None
            return on_answer(answer, when_ms)

        client_id = f"strandline-broker-{self.broker_id}"
        return self._send_to_broker(
            controller, "controlled-shutdown",
            lambda cid: control.encode_request(control.CONTROLLED_SHUTDOWN, cid, client_id, body), on_response, now_ms)

    # ------------------------------------------------------------------ preferred leaders (CTL-10, ASG-4)

    def _preferred_choice(self, topic: TopicMetadata, index: int, current: LeaderAndIsr, live: set[int],
                          dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
        preferred = topic.assignment[index][0]
        if current.leader == preferred or preferred not in live or preferred in self._shutting_down \
                or preferred not in current.isr:  # type: ignore[attr-defined]
            return None
        return LeaderAndIsr(preferred, current.leader_epoch + 1, current.isr, self.controller_epoch,
                            current.zk_version), False

    def elect_preferred_leaders(self, keys: list[tuple[str, int]], now_ms: int,
                                done: Callable[[int], list] | None = None) -> list:
        """Move leadership back to each partition's first assigned replica where it is alive and
        in the ISR."""
        return self._reelect(keys, set(), now_ms, done, self._preferred_choice)

    def _preferred_result(self, key: tuple[str, int]) -> tuple[ErrorCode, str | None]:
        topic = self.metadata.topics.get(key[0])  # type: ignore[attr-defined]
        if topic is None or key[1] not in topic.assignment:
            return ErrorCode.unknown_topic_or_partition, None
        state = topic.states.get(key[1])
        preferred = topic.assignment[key[1]][0]
        if state is not None and state.leader == preferred:
            return ErrorCode.none, None
        return ErrorCode.preferred_leader_not_available, \
            f"Preferred replica {preferred} is not alive or not in the ISR {list(state.isr) if state else []}"

    def _leader_imbalance_check(self, now_ms: int) -> list:
        """auto.leader.rebalance.enable: per broker, when more than
        leader.imbalance.per.broker.percentage of the partitions it prefers are led elsewhere,
        move them back."""
        if not self.is_controller:
            return []
        limit = self.config["leader.imbalance.per.broker.percentage"]  # type: ignore[attr-defined]
        by_preferred: dict[int, list[tuple[str, int]]] = {}
        imbalanced: dict[int, int] = {}
        for topic, index in self._all_partitions():
            state = topic.states.get(index)
            if state is None:
                continue
            preferred = topic.assignment[index][0]
            by_preferred.setdefault(preferred, []).append((topic.name, index))
            if state.leader != preferred:
                imbalanced[preferred] = imbalanced.get(preferred, 0) + 1
        keys: list[tuple[str, int]] = []
        for broker, parts in by_preferred.items():
            if imbalanced.get(broker, 0) * 100 > limit * len(parts):
                keys += [k for k in parts if self.metadata.topics[k[0]].states[k[1]].leader != broker]  # type: ignore
        if not keys:
            return []
        return [Log("info", f"Leader imbalance: electing preferred leaders for {len(keys)} partition(s)")] + \
            self.elect_preferred_leaders(keys, now_ms)

    # ------------------------------------------------------------------ leader election (CTL-6, CTL-7)

    def _elect_partition(self, topic: TopicMetadata, index: int, current: LeaderAndIsr, live: set[int],
                         dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
        """The next state of a partition after brokers died or came back, and whether it was an
        unclean election; None when nothing changes. Kafka's rules: a live leader keeps leading and
        dead followers leave the ISR (never emptying it); a dead leader is replaced by the first
        live ISR member in replica order, else, only with unclean.leader.election.enable, by any
        live replica; with neither the partition goes offline (leader -1, the ISR kept)."""
        replicas = topic.assignment[index]
        epoch = current.leader_epoch + 1
        live = live - self._shutting_down  # type: ignore[attr-defined]
        if current.leader >= 0 and current.leader in live and current.leader not in dead:
            isr = tuple(r for r in current.isr if r not in dead) or current.isr
            if isr == current.isr:
                return None
            return LeaderAndIsr(current.leader, epoch, isr, self.controller_epoch, current.zk_version), False
        candidates = [r for r in replicas if r in live and r not in dead and r in current.isr]
        unclean = False
        if not candidates and self.config.topic_value(topic.configs,  # type: ignore[attr-defined]
                                                      "unclean.leader.election.enable"):
            candidates = [r for r in replicas if r in live and r not in dead]
            unclean = bool(candidates)
        if not candidates:
            if current.leader < 0 or current.leader in self._shutting_down:  # type: ignore[attr-defined]
                return None     # a broker shutting down keeps what nobody else can take over
            isr = tuple(r for r in current.isr if r != current.leader) or current.isr
            return LeaderAndIsr(-1, epoch, isr, self.controller_epoch, current.zk_version), False
        leader = candidates[0]
        isr = (leader,) if unclean else tuple(r for r in current.isr if r in live and r not in dead)
        return LeaderAndIsr(leader, epoch, isr, self.controller_epoch, current.zk_version), unclean

    def _not_electing(self, parts: list[tuple[TopicMetadata, int]], brokers: set[int]) -> list:
        """Of ``parts`` about to be sent to ``brokers``, those not being elected; the others are
        owed to those brokers once their elections end (:meth:`_elections_ended`)."""
        electing, owed = self._electing_partitions, self._owed_states  # type: ignore[attr-defined]
        ready = []
        for topic, index in parts:
            if (topic.name, index) in electing:
                owed.setdefault((topic.name, index), set()).update(brokers)
            else:
                ready.append((topic, index))
        return ready

    def _elections_ended(self, keys: list[tuple[str, int]], now_ms: int, announced: bool = False) -> list:
        """Elections of ``keys`` ended: a partition no longer being elected is sent to the brokers
        that were not sent its old state meanwhile, unless the election ``announced`` its state to
        every broker (it wrote one, or found one decided on a retry)."""
        electing, owed = self._electing_partitions, self._owed_states  # type: ignore[attr-defined]
        electing.subtract(keys)
        per_brokers: dict[frozenset, list] = {}
        for key in keys:
            if electing[key] > 0:
                continue
            del electing[key]
            brokers = owed.pop(key, None)
            topic = self.metadata.topics.get(key[0])  # type: ignore[attr-defined]
            if brokers and topic is not None and self.is_controller and not announced:
                per_brokers.setdefault(frozenset(brokers), []).append((topic, key[1]))
        effects: list = []
        for brokers, parts in per_brokers.items():
            effects.extend(self._send_partition_states(parts, set(brokers), False, now_ms,
                                                       metadata_to=set(brokers)))
        return effects

    def _reelect(self, keys: list[tuple[str, int]], dead: set[int], now_ms: int,
                 done: Callable[[int], list] | None = None, decide: Callable | None = None,
                 retry: bool = False) -> list:
        """Re-read the partitions' state znodes, elect, and write each new state with compare-and-set
        on the version just read; a partition whose write lost a race, or whose read or write got no
        answer, is read and elected again (``retry``). A retry announces what it finds already
        decided: it may be an earlier write of this controller applied after all. While a partition
        is being elected, new brokers are not sent its old state (:attr:`_electing_partitions`).
        ``done(now_ms)`` runs once the states are written (or nothing needed writing). A broker of
        ``dead`` stays dead for retries even if it registered again meanwhile (its earlier life
        ended, and what it held may be gone); once written, a state that brokers coming or going
        made stale (offline although an ISR member is back, led by a broker now gone) is elected
        again."""
        if not retry:
            self._electing_partitions.update(keys)  # type: ignore[attr-defined]
        if not keys:
            return done(now_ms) if done else []
        reads = [GetData(znodes.TopicPartitionStateZNode.path(t, i)) for t, i in keys]

        def revisit(states: list[tuple[tuple[str, int], LeaderAndIsr]], when_ms: int) -> list:
            live_now = self.metadata.brokers  # type: ignore[attr-defined]
            eligible = set(live_now) - self._shutting_down  # type: ignore[attr-defined]
            stale = [key for key, state in states
                     if (state.leader < 0 and any(r in eligible for r in state.isr))
                     or (state.leader >= 0 and state.leader not in live_now)]
            return self._reelect(stale, set(), when_ms) if stale else []

        def on_read(results: list, when_ms: int) -> list:
            if not self.is_controller:   # deposed while reading: a write now would not be fenced
                self._elections_ended(keys, when_ms)
                return done(when_ms) if done else []
            live = set(self.metadata.brokers)  # type: ignore[attr-defined]
            planned, writes, effects, settled, unread = [], [], [], [], []
            for key, res in zip(keys, results):
                topic = self.metadata.topics.get(key[0])  # type: ignore[attr-defined]
                if topic is not None and res.error not in (ZkError.NONE, ZkError.NO_NODE):
                    unread.append(key)
                    continue
                if topic is None or res.error is not ZkError.NONE:
                    self._elections_ended([key], when_ms)
                    continue
                current = znodes.TopicPartitionStateZNode.decode(res.data, res.version)
                topic.states[key[1]] = current
                decided = (decide or self._elect_partition)(topic, key[1], current, live, dead)
                if decided is None:
                    settled.append((key, current))
                    continue
                state, unclean = decided
                if unclean:
                    effects.append(Log("warning", f"Unclean leader election for {key[0]}-{key[1]}: broker "
                                                  f"{state.leader} was not in the ISR {list(current.isr)}; "
                                                  f"records acknowledged by the old ISR may be lost"))
                planned.append((key, state))
                writes.append(zk_layout.update_partition_state(key[0], key[1], state))
            if retry and settled:
                effects.extend(self._send_partition_states(
                    [(self.metadata.topics[k[0]], k[1]) for k, _ in settled], None, False, when_ms))  # type: ignore
            effects.extend(self._elections_ended([key for key, _ in settled], when_ms, announced=retry))
            effects.extend(revisit(settled, when_ms))
            if unread:       # ZooKeeper did not answer: read those again (and announce what was decided)
                effects.extend(self._after(when_ms + CONTROL_RETRY_MS,  # type: ignore[attr-defined]
                                           lambda t: self._reelect(unread, dead, t, None, decide, True)
                                           if self.is_controller else self._elections_ended(unread, t)))
            if not writes:
                return effects + (done(when_ms) if done else [])
            fenced = self._fenced(writes)
            skip = len(fenced) - len(writes)
            written_keys = [key for key, _ in planned]

            def on_written(written: list, at_ms: int) -> list:
                if not self.is_controller:
                    self._elections_ended(written_keys, at_ms)
                    return done(at_ms) if done else []
                if written and written[0].error is not ZkError.NONE:
                    # a state changed under us, or our epoch is no longer current: check, re-read, retry
                    if written[0].error is ZkError.BAD_VERSION:
                        return self._check_still_controller(
                            lambda t: self._reelect(written_keys, dead, t, done, decide, True), at_ms,
                            lambda: self._elections_ended(written_keys, at_ms))
                    return [Log("warning", f"Writing partition states failed: {written[0].error.name}")] + \
                        self._after(at_ms + CONTROL_RETRY_MS,  # type: ignore[attr-defined]
                                    lambda t: self._reelect(written_keys, dead, t, done, decide, True))
                changed, out = [], []
                for (key, state), res in zip(planned, written[skip:]):
                    topic = self.metadata.topics.get(key[0])  # type: ignore[attr-defined]
                    if topic is not None:
                        topic.states[key[1]] = dataclasses.replace(state, zk_version=res.version)
                        changed.append((topic, key[1]))
                        out.append(Log("info", f"{key[0]}-{key[1]}: leader {state.leader} in epoch "
                                               f"{state.leader_epoch}, ISR {list(state.isr)}"))
                out.extend(self._send_partition_states(changed, None, False, at_ms))
                out.extend(self._elections_ended(written_keys, at_ms, announced=True))
                out.extend(revisit(planned, at_ms))
                return out + (done(at_ms) if done else [])

            return effects + [self._zk(fenced, on_written, transaction=True)]  # type: ignore[attr-defined]

        return [self._zk(reads, on_read)]  # type: ignore[attr-defined]

    def _check_still_controller(self, then: Callable[[int], list], now_ms: int,
                                given_up: Callable[[], None] = lambda: None) -> list:
        """After a fenced write failed: resign if /controller_epoch moved on (``given_up()``),
        else go on."""
        def on_epoch(results: list, when_ms: int) -> list:
            res = results[0]
            if not self.is_controller:
                given_up()
                return []
            if res.error is ZkError.NONE and res.version != self._controller_epoch_version:  # type: ignore
                given_up()
                return self._resign(f"the controller epoch is now {znodes.ControllerEpochZNode.decode(res.data)}")
            return then(when_ms)
        return [self._zk([GetData(znodes.ControllerEpochZNode.path())], on_epoch)]  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ receiving

    def _control_request(self, conn_id: int, frame: bytes, now_ms: int) -> list:
        try:
            api_key, _, correlation_id, _, body = control.decode_request(frame)
        except Exception as exc:
            return [Close(conn_id, f"malformed control request: {exc}")]

        def respond(answer: dict) -> list:
            data = control.encode_response(api_key, correlation_id, answer)
            return [Send(conn_id, [len(data).to_bytes(4, "big"), data])]

        if api_key == control.CONTROLLED_SHUTDOWN:
            return self._on_controlled_shutdown_request(body["broker_id"], respond, now_ms)
        if body["controller_epoch"] < self.controller_epoch:
            return respond(self._control_error(api_key, body, ErrorCode.stale_controller_epoch))
        if 0 <= body["broker_epoch"] < self.broker_epoch:  # type: ignore[attr-defined]
            return respond(self._control_error(api_key, body, ErrorCode.stale_broker_epoch))
        missing = self._unknown_topics(api_key, body)
        if missing:
            self._loading_topics.update(missing)  # type: ignore[attr-defined]

            def loaded(when_ms: int) -> list:
                self._loading_topics.difference_update(missing)  # type: ignore[attr-defined]
                effects, answer = self._apply_control(api_key, body, when_ms)
                return effects + respond(answer)
            return self._load_topics(missing, loaded)
        effects, answer = self._apply_control(api_key, body, now_ms)
        return effects + respond(answer)

    @staticmethod
    def _control_error(api_key: int, body: dict, code: ErrorCode) -> dict:
        if api_key == control.UPDATE_METADATA:
            return {"error_code": code}
        return {"error_code": code, "partition_errors": []}

    def _unknown_topics(self, api_key: int, body: dict) -> list[str]:
        if api_key in (control.STOP_REPLICA, control.CONTROLLED_SHUTDOWN):
            return []
        topics = self.metadata.topics  # type: ignore[attr-defined]
        names = []
        for ts in body["topic_states"]:
            if ts["topic_name"] not in topics and any(p["leader"] != LEADER_DURING_DELETE
                                                      for p in ts["partition_states"]):
                names.append(ts["topic_name"])
        return names

    def _load_topics(self, names: list[str], then: Callable[[int], list]) -> list:
        """Read topics' assignment, id and configs from ZooKeeper into the metadata cache."""
        ops = []
        for name in names:
            ops += [GetData(znodes.TopicZNode.path(name)), GetData(znodes.ConfigEntityZNode.path("topics", name))]

        def on_result(results: list, when_ms: int) -> list:
            effects: list = []
            for i, name in enumerate(names):
                topic_res, config_res = results[2 * i], results[2 * i + 1]
                if topic_res.error is not ZkError.NONE or name in self.metadata.topics:  # type: ignore
                    continue
                assignment, topic_id = znodes.TopicZNode.decode(topic_res.data)
                configs: dict[str, Any] = {}
                if config_res.error is ZkError.NONE and config_res.data:
                    try:
                        configs = parse_topic_configs(znodes.ConfigEntityZNode.decode(config_res.data))
                    except ConfigError as exc:
                        effects.append(Log("warning", f"Ignoring bad config of topic {name}: {exc}"))
                self.metadata.topics[name] = TopicMetadata(  # type: ignore[attr-defined]
                    name, topic_id or uuid.UUID(int=0), {int(p): tuple(r) for p, r in assignment.items()},
                    {}, configs)
            return effects + then(when_ms)

        return [self._zk(ops, on_result)]  # type: ignore[attr-defined]

    def _apply_control(self, api_key: int, body: dict, now_ms: int) -> tuple[list, dict]:
        self._heard_from_controller = True  # type: ignore[attr-defined]
        if body["controller_epoch"] > self.controller_epoch or self.metadata.controller_id < 0:  # type: ignore
            self.controller_epoch = body["controller_epoch"]
            self.metadata.controller_id = body["controller_id"]  # type: ignore[attr-defined]
        if api_key == control.LEADER_AND_ISR:
            return self._apply_leader_and_isr(body, now_ms)
        if api_key == control.UPDATE_METADATA:
            return self._apply_update_metadata(body, now_ms), {"error_code": ErrorCode.none}
        return self._apply_stop_replica(body, now_ms)

    def _apply_leader_and_isr(self, body: dict, now_ms: int) -> tuple[list, dict]:
        effects: list = []
        errors: list[dict] = []
        changed: list[tuple[str, int]] = []
        for leader in body["live_leaders"]:
            if leader["broker_id"] not in self.metadata.brokers:  # type: ignore[attr-defined]
                self.metadata.brokers[leader["broker_id"]] = BrokerInfo(  # type: ignore[attr-defined]
                    leader["broker_id"], leader["host_name"], leader["port"])
        for ts in body["topic_states"]:
            name = ts["topic_name"]
            topic = self.metadata.topics.get(name)  # type: ignore[attr-defined]
            for ps in ts["partition_states"]:
                index = ps["partition_index"]
                replicas = tuple(ps["replicas"])
                code = ErrorCode.none
                if topic is None or self.broker_id not in replicas:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    partition = self._open_partition(topic, index, now_ms)  # type: ignore[attr-defined]
                    if ps["leader_epoch"] <= partition.leader_epoch:
                        code = ErrorCode.stale_controller_epoch
                    else:
                        state = LeaderAndIsr(ps["leader"], ps["leader_epoch"], tuple(ps["isr"]),
                                             ps["controller_epoch"], ps["zk_version"])
                        topic.assignment[index] = replicas
                        if state.leader == self.broker_id:
                            effects.extend(self._become_leader(partition, state, replicas, now_ms))  # type: ignore
                        else:
                            effects.extend(self._become_follower(partition, state, replicas, now_ms))  # type: ignore
                        changed.append((name, index))
                errors.append({"topic_name": name, "partition_index": index, "error_code": code})
        if changed:
            effects.extend(self.produce_purgatory.check_keys(changed, now_ms))  # type: ignore[attr-defined]
            effects.extend(self.fetch_purgatory.check_keys(changed, now_ms))  # type: ignore[attr-defined]
        effects.extend(self._maybe_send_fetches(now_ms))  # type: ignore[attr-defined]
        return effects, {"error_code": ErrorCode.none, "partition_errors": errors}

    def _apply_update_metadata(self, body: dict, now_ms: int) -> list:
        md = self.metadata  # type: ignore[attr-defined]
        brokers = {}
        for b in body["live_brokers"]:
            ep = b["endpoints"][0] if b["endpoints"] else {"host": "", "port": -1}
            brokers[b["id"]] = BrokerInfo(b["id"], ep["host"], ep["port"], b["rack"])
        md.brokers = brokers
        effects: list = []
        for ts in body["topic_states"]:
            name = ts["topic_name"]
            for ps in ts["partition_states"]:
                if ps["leader"] == LEADER_DURING_DELETE:
                    if md.topics.pop(name, None) is not None:
                        effects.append(Log("info", f"Topic {name} deleted from the metadata cache"))
                    break
                topic = md.topics.get(name)
                if topic is None:
                    continue
                index = ps["partition_index"]
                cached = topic.states.get(index)
                if cached is not None and (ps["leader_epoch"], ps["zk_version"]) < (cached.leader_epoch,
                                                                                     cached.zk_version):
                    continue        # older than what we know (a late or replayed UpdateMetadata)
                topic.assignment[index] = tuple(ps["replicas"])
                topic.states[index] = LeaderAndIsr(
                    ps["leader"], ps["leader_epoch"], tuple(ps["isr"]), ps["controller_epoch"], ps["zk_version"])
        return effects + self._maybe_send_fetches(now_ms)  # type: ignore[attr-defined]

    def _apply_stop_replica(self, body: dict, now_ms: int) -> tuple[list, dict]:
        effects: list = []
        errors = []
        keys = [(t["name"], i) for t in body["topics"] for i in t["partition_indexes"]]
        self._stop_fetching(keys)  # type: ignore[attr-defined]
        for key in keys:
            partition = self.partitions.get(key)
            if partition is not None and partition.is_leader:
                effects.extend(self._on_leadership(partition, False, now_ms))  # type: ignore[attr-defined]
            if partition is not None and body["delete_partitions"]:
                del self.partitions[key]
                self.logs.delete_log(*key)  # type: ignore[attr-defined]
                effects.append(Log("info", f"Deleted log of {key[0]}-{key[1]}"))
            errors.append({"topic_name": key[0], "partition_index": key[1], "error_code": ErrorCode.none})
        effects.extend(self.produce_purgatory.check_keys(keys, now_ms))  # type: ignore[attr-defined]
        effects.extend(self.fetch_purgatory.check_keys(keys, now_ms))  # type: ignore[attr-defined]
        return effects, {"error_code": ErrorCode.none, "partition_errors": errors}
