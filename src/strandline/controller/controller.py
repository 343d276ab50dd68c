"""``Controller``: the broker's controller role (Kafka's KafkaController; SPEC CTL-1..CTL-12).

Every broker runs for controller when ``/controller`` is free; the one that wins holds a
:class:`ControllerContext` read from ZooKeeper and decides: leaders and ISRs when brokers die,
come back or stop (controlled shutdown), preferred leaders, topic creation and deletion. It tells
the brokers through its :class:`ControllerChannel` and never writes ZooKeeper without the check of
``/controller_epoch``'s version it was elected with, so a deposed controller cannot write.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Sequence

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.controller.channel import LocalDelivery
from strandline.controller.context import ControllerContext, TopicCreated
from strandline.controller.controlled_shutdown import controlled_shutdown
from strandline.controller.deletion import TopicDeletions
from strandline.controller.office import Office
from strandline.controller.elections import PartitionElections, decide_within, offline_partition_election
from strandline.controller.reassignment import Outcome, PartitionReassignments
from strandline.controller.topics import TopicChanges
from strandline.coordination import zk_layout, znodes
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import LeaderAndIsr
from strandline.coordination.store import Delete, GetData, OpResult, TransactionOp, ZkError
from strandline.coordination.znodes import BrokerInfo
from strandline.protocol import control

CONTROLLER_RETRY_MS = 1000      # run for controller again after ZooKeeper failed to answer

Key = tuple[str, int]


class Controller:
    def __init__(self, config: Any, outbox: Outbox, *, rng: Any, new_uuid: Callable[[], uuid.UUID],
                 deliver_locally: LocalDelivery,
                 controller_seen: Callable[[int | None], None] = lambda controller_id: None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.outbox = outbox
        self.rng = rng
        self.new_uuid = new_uuid
        #: ``controller_seen(id)``: who the controller is, as this broker learned it (None: no
        #: longer this broker)
        self.controller_seen = controller_seen
        self._running = False            # an election (or reading the epoch won) is in flight
        self.office = Office(config, outbox, rng=rng, new_uuid=new_uuid, deliver_locally=deliver_locally,
                             resign=self.resign)
        self.channel = self.office.channel
        self.elections = PartitionElections(self.office)
        self.topics = TopicChanges(self.office)
        self.deletions = TopicDeletions(self.office)
        self.reassignments = PartitionReassignments(self.office, self.elections)
        self.elections.moves_settled = self.reassignments.maybe_complete

    @property
    def ctx(self) -> ControllerContext | None:
        """The current term, None when this broker is not the controller (held by its office)."""
        return self.office.ctx

    @ctx.setter
    def ctx(self, ctx: ControllerContext | None) -> None:
        self.office.ctx = ctx

    @property
    def is_active(self) -> bool:
        return self.ctx is not None

    @property
    def epoch(self) -> int | None:
        """The controller epoch this broker is in office for, None when it is not the controller."""
        return self.ctx.epoch if self.ctx is not None else None

    def in_office(self, ctx: ControllerContext) -> bool:
        """Whether ``ctx`` is the current term (the broker did not resign or take office again)."""
        return self.office.ctx is ctx

    # ------------------------------------------------------------------ electing the controller (CTL-1, CTL-3, NET-8)

    def on_controller_changed(self, controller_id: int | None, now_ms: int) -> list[Effect]:
        """``/controller`` changed: None when it is gone (every broker then runs for it). When it
        names this broker although no election answer said so (the answer was lost after ZooKeeper
        applied it), this broker takes office: nobody else will run while the node exists."""
        if controller_id is None:
            return self._run_for_controller(now_ms)
        if controller_id != self.broker_id:
            self.controller_seen(controller_id)
            if self.is_active:
                return self.resign(f"broker {controller_id} holds /controller")
        elif not self.is_active and not self._running:
            return self._take_office(now_ms)
        return []

    def on_session_lost(self, now_ms: int) -> list[Effect]:
        """The ZooKeeper session expired: a controller stops acting at once (NET-8)."""
        return self.resign("its ZooKeeper session expired") if self.is_active else []

    def resign(self, why: str) -> list[Effect]:
        self.ctx = None
        self.controller_seen(None)
        return [LogLine("warning", f"Broker {self.broker_id} is no longer the controller: {why}")]

    def _run_for_controller(self, now_ms: int) -> list[Effect]:
        """Kafka's election: create the ephemeral /controller and bump /controller_epoch in one
        transaction guarded by the epoch's version; the loser learns the winner from the watch.
        When ZooKeeper does not answer, run again after a while (an election applied without an
        answer shows up in the watch as this broker's own id)."""
        if self._running:
            return []
        self._running = True

        def failed(why: str, when_ms: int) -> list[Effect]:
            self._running = False
            return [LogLine("warning", f"Running for controller failed ({why}); trying again")] + \
                self.outbox.after(when_ms + CONTROLLER_RETRY_MS,
                                  lambda t: [] if self.is_active else self._run_for_controller(t))

        def on_epoch(results: list[OpResult], when_ms: int) -> list[Effect]:
            res = results[0]
            if res.error is ZkError.NO_NODE:
                epoch, version = 0, -1
            elif res.error is ZkError.NONE:
                epoch, version = znodes.ControllerEpochZNode.decode(res.data), res.version
            else:
                return failed(f"cannot read the controller epoch: {res.error.name}", when_ms)
            ops = zk_layout.controller_election_ops(self.broker_id, epoch + 1, version, when_ms)

            def on_elected(elected: list[OpResult], at_ms: int) -> list[Effect]:
                error = next((r.error for r in elected if r.error is not ZkError.NONE), None)
                if error in (ZkError.NODE_EXISTS, ZkError.BAD_VERSION):
                    self._running = False
                    return self._who_is_controller()     # someone won: perhaps this broker, earlier
                if error is not None:
                    return failed(error.name, at_ms)
                self._running = False
                return self.become_controller(epoch + 1, elected[1].version, "won the controller election")

            return [self.outbox.zk(ops, on_elected, transaction=True)]

        return [self.outbox.zk([GetData(znodes.ControllerEpochZNode.path())], on_epoch)]

    def _who_is_controller(self) -> list[Effect]:
        """Read /controller after an election this broker did not win by its own answer."""
        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            res = results[0]
            if self.is_active:
                return []
            if res.error is ZkError.NO_NODE:
                return self._run_for_controller(when_ms)
            if res.error is not ZkError.NONE:
                return self.outbox.after(when_ms + CONTROLLER_RETRY_MS,
                                         lambda t: [] if self.is_active else self._who_is_controller())
            return self.on_controller_changed(znodes.ControllerZNode.decode(res.data), when_ms)
        return [self.outbox.zk([GetData(znodes.ControllerZNode.path())], on_read)]

    def _take_office(self, now_ms: int) -> list[Effect]:
        """/controller names this broker: read the epoch it was elected in, then act as controller."""
        self._running = True

        def on_epoch(results: list[OpResult], when_ms: int) -> list[Effect]:
            self._running = False
            res = results[0]
            if self.is_active:
                return []
            if res.error is not ZkError.NONE:
                return [LogLine("warning", f"Cannot read the controller epoch: {res.error.name}; trying again")] + \
                    self.outbox.after(when_ms + CONTROLLER_RETRY_MS,
                                      lambda t: [] if self.is_active else self._take_office(t))
            return self.become_controller(znodes.ControllerEpochZNode.decode(res.data), res.version,
                                          "holds /controller (its election's answer was lost)")

        return [self.outbox.zk([GetData(znodes.ControllerEpochZNode.path())], on_epoch)]

    def become_controller(self, epoch: int, epoch_version: int | None, why: str) -> list[Effect]:
        """Take office in ``epoch``: read the cluster from ZooKeeper, then act (:meth:`_on_cluster_read`)."""
        ctx = self.ctx = ControllerContext(epoch, epoch_version)
        self.controller_seen(self.broker_id)
        read = self.outbox.read_cluster_state(lambda state, now_ms: self._on_cluster_read(ctx, state, now_ms))
        return [LogLine("info", f"Broker {self.broker_id} {why} (epoch {epoch})"), read]

    def _on_cluster_read(self, ctx: ControllerContext, state: tuple[Any, ...], now_ms: int) -> list[Effect]:
        """Kafka's onControllerFailover: start from ZooKeeper's view, tell every live broker the
        state of its partitions, then elect leaders for partitions whose leader is gone."""
        if not self.in_office(ctx):
            return []
        brokers, topics, epochs, ctx.brokers_listing = state
        ctx.live_brokers = dict(brokers)
        ctx.broker_epochs = dict(epochs)
        ctx.topics = dict(topics)
        effects: list[Effect] = [LogLine("info", f"Broker {self.broker_id} is the controller (epoch {ctx.epoch})")]
        effects += self.channel.send_partition_states(ctx, ctx.all_partitions(), None, False, now_ms)
        live = set(brokers)
        affected = [(t.name, i) for t, i in ctx.all_partitions()
                    if i in t.states and (t.states[i].leader not in live or not set(t.states[i].isr) <= live)]
        dead = {r for t, i in ctx.all_partitions() for r in t.assignment[i]} - live
        effects += self.elections.elect(ctx, affected, dead, now_ms)
        effects += self.reassignments.resume(ctx, now_ms)
        ctx.ready = True
        effects += self._read_reassign_partitions_node(ctx, now_ms) + self.deletions.resume(ctx, now_ms)
        pending, ctx.pending_brokers = ctx.pending_brokers, None
        if pending is not None:
            effects += self.on_brokers_changed(*pending[:2], now_ms, pending[2])
        return effects

    def fenced(self, ctx: ControllerContext, ops: Sequence[TransactionOp]) -> list[TransactionOp]:
        return self.office.fenced(ctx, ops)

    def check_still_controller(self, ctx: ControllerContext, then: Callable[[int], list[Effect]], now_ms: int,
                               given_up: Callable[[], object] = lambda: None) -> list[Effect]:
        return self.office.check_still_controller(ctx, then, now_ms, given_up)

    # ------------------------------------------------------------------ brokers coming and going (CTL-2, CTL-6, CTL-7)

    def on_brokers_changed(self, brokers: dict[int, BrokerInfo], epochs: dict[int, int], now_ms: int,
                           listing: int | None = None) -> list[Effect]:
        """The children of ``/brokers/ids`` changed, or a registration (a broker modification).
        ``listing`` numbers the reads of the live brokers in the order they were made (None: no
        order known): one older than what the controller already applied is stale and ignored.

        A broker gone is dead (new leaders, out of the ISRs); one registered again with a new epoch (czxid)
        *bounced*: dead, then new, as in Kafka, so it never resumes a leadership with a log that may have
        lost its tail. New brokers learn their partitions' state (after any election), all the membership."""
        ctx = self.ctx
        if ctx is None:
            return []
        if not ctx.ready:   # a new controller first loads the cluster from ZooKeeper (Kafka's controller
            # handles its failover event before any broker change); this change is handled right after
            ctx.hold_brokers(brokers, epochs, listing)
            return []
        if not ctx.newer_listing(listing):
            return []
        known, seen = ctx.live_brokers, ctx.broker_epochs
        bounced = {b for b in brokers if b in seen and seen[b] != epochs.get(b)}
        new = {b for b in brokers if b not in seen and b not in known} | bounced
        gone = set(known) - set(brokers)
        ctx.broker_epochs = dict(epochs)
        ctx.shutting_down -= gone | new
        modified = [LogLine("info", f"Updated broker metadata: {known[b]} -> {info}")
                    for b, info in sorted(brokers.items()) if known.get(b, info) != info]
        ctx.live_brokers = dict(brokers)
        if not new and not gone:
            return modified + (self.channel.send_partition_states(ctx, [], None, False, now_ms) if modified else [])
        dead = gone | bounced
        effects: list[Effect] = [LogLine("warning" if dead else "info", f"Live brokers now {sorted(brokers)} (new "
                             f"{sorted(new - bounced)}, restarted {sorted(bounced)}, gone {sorted(gone)})",
                             "broker_gone" if dead else "broker_joined")]
        channel, elections = self.channel, self.elections
        effects.extend(channel.send_partition_states(ctx, [], None, False, now_ms, metadata_to=set(brokers) - new))
        affected: list[tuple[TopicMetadata, int]] = []
        others: list[tuple[TopicMetadata, int]] = []
        for topic, index in ctx.all_partitions():
            state = topic.states.get(index)
            replicas = set(topic.assignment[index])
            if state is not None and (dead & replicas or (state.leader < 0 and new & replicas)):
                affected.append((topic, index))
            else:
                others.append((topic, index))
        effects.extend(channel.send_partition_states(ctx, elections.not_electing(ctx, others, new), new, False,
                                                     now_ms, metadata_to=new))
        before = {(t.name, i): t.states[i].leader_epoch for t, i in affected}

        def announce(when_ms: int) -> list[Effect]:
            if not self.in_office(ctx):
                return []
            # new brokers learn the partitions that an election did not just announce to them
            unchanged = [(t, i) for t, i in affected
                         if (t.name, i) in before and t.states.get(i) is not None
                         and t.states[i].leader_epoch == before[(t.name, i)]]
            return channel.send_partition_states(ctx, elections.not_electing(ctx, unchanged, new), new, False,
                                                 when_ms, metadata_to=new) if new else []

        def elected(when_ms: int) -> list[Effect]:
            if not self.in_office(ctx):
                return []
            # a bounced broker was handled as dead; now it is new: it may lead what went offline (CTL-7)
            offline = [(t.name, i) for t, i in affected
                       if t.states.get(i) is not None and t.states[i].leader < 0 and bounced & set(t.assignment[i])]
            if offline:
                return elections.elect(ctx, offline, gone, when_ms, announce)
            return announce(when_ms)

        # a broker back may hold replicas of a topic deleted while it was gone: it hears of that deletion
        # now, whose record waits for it (controller.deletion)
        if new:
            effects.extend(self.deletions.resume(ctx, now_ms))
        return effects + elections.elect(ctx, [(t.name, i) for t, i in affected], dead, now_ms, elected)

    def on_delete_topics_changed(self, children: list[str], now_ms: int) -> list[Effect]:
        """The children of ``/admin/delete_topics`` changed: a deletion recorded there that this
        controller is not carrying out is taken up."""
        ctx = self.ctx
        if ctx is None or not ctx.ready or not self.in_office(ctx) or not children:
            return []          # a controller reads them when it takes office
        return self.deletions.on_records_changed(ctx, children, now_ms)

    def on_isr_change_notifications(self, children: list[str], now_ms: int) -> list[Effect]:
        """ISR-6, the controller's side: leaders list partitions whose ISR they changed under
        ``/isr_change_notification``; the controller reads their state, tells every broker
        (UpdateMetadata) and deletes the notifications. A read ZooKeeper did not answer is made
        again (a notification is deleted only once read, its partitions' state only counts once
        read), as Kafka's ZooKeeper client resends a request until its session ends."""
        ctx = self.ctx
        if ctx is None or not children:
            return []
        paths = [f"{znodes.IsrChangeNotificationZNode.path()}/{child}" for child in children]

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            if not self.in_office(ctx):
                return []
            keys: set[Key] = set()
            read: list[str] = []
            unanswered: list[str] = []
            for child, path, res in zip(children, paths, results):
                if res.error is ZkError.NONE:
                    read.append(path)
                    try:
                        keys.update(znodes.IsrChangeNotificationSequenceZNode.decode(res.data, path))
                    except Exception:  # a malformed notification is dropped, as Kafka does
                        pass
                elif res.error is not ZkError.NO_NODE:
                    unanswered.append(child)
            effects: list[Effect] = [self.outbox.zk([Delete(path) for path in read], lambda r, t: [])] if read else []
            if unanswered:
                effects += self.outbox.after(when_ms + CONTROLLER_RETRY_MS,
                                             lambda t: self.on_isr_change_notifications(unanswered, t))
            return effects + self._read_partition_states(ctx, sorted(k for k in keys if k[0] in ctx.topics), when_ms)

        return [self.outbox.zk([GetData(p) for p in paths], on_read)]

    def _read_partition_states(self, ctx: ControllerContext, keys: list[Key], now_ms: int) -> list[Effect]:
        """Read the state znodes of ``keys``, tell every broker, and look whether a move can end;
        the reads ZooKeeper did not answer are made again."""
        if not keys:
            return []

        def on_states(states: list[OpResult], at_ms: int) -> list[Effect]:
            if not self.in_office(ctx):
                return []
            parts = []
            unanswered: list[Key] = []
            for (name, index), res in zip(keys, states):
                topic = ctx.topics.get(name)
                if topic is None or res.error is ZkError.NO_NODE:
                    continue
                if res.error is ZkError.NONE:
                    topic.states[index] = znodes.TopicPartitionStateZNode.decode(res.data, res.version)
                    parts.append((topic, index))
                else:
                    unanswered.append((name, index))
            out: list[Effect] = []
            if unanswered:
                out += self.outbox.after(at_ms + CONTROLLER_RETRY_MS,
                                         lambda t: self._read_partition_states(ctx, unanswered, t)
                                         if self.in_office(ctx) else [])
            if not parts:
                return out
            body = self.channel.update_metadata_body(ctx, parts)
            for broker_id in sorted(ctx.live_brokers):
                out.extend(self.channel.send(ctx, broker_id, control.UPDATE_METADATA, body, at_ms))
            return out + self.reassignments.maybe_complete(ctx, [(t.name, i) for t, i in parts], at_ms)

        reads = [GetData(znodes.TopicPartitionStateZNode.path(n, i)) for n, i in keys]
        return [self.outbox.zk(reads, on_states)]

    # ------------------------------------------------------------------ controlled shutdown (CTL-9)

    def on_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                               respond: Callable[[dict[str, Any]], list[Effect]],
                               now_ms: int) -> list[Effect]:
        """A broker asks to stop (:func:`~strandline.controller.controlled_shutdown.controlled_shutdown`)."""
        return controlled_shutdown(self.office, self.elections, broker_id, broker_epoch, respond, now_ms)

    # ------------------------------------------------------------------ preferred leaders (CTL-10, ASG-4)

    def elect_preferred_leaders(self, wanted: list[Key] | None, now_ms: int,
                                respond: Callable[[dict[Key, Outcome], int], list[Effect]]) -> list[Effect]:
        """ElectLeaders (preferred): move leadership back to each partition's first assigned
        replica where it is alive and in the ISR (``wanted`` None: every partition).
        ``respond(results, now_ms)`` gets an outcome per partition: ELECTION_NOT_NEEDED for one
        named that its preferred replica already leads, and for all partitions only those that it
        did not lead."""
        ctx = self.ctx
        if ctx is None:
            return respond({k: (ErrorCode.not_controller, None) for k in wanted or []}, now_ms)
        keys = wanted if wanted is not None else [(t.name, i) for t, i in ctx.all_partitions()]
        known = [k for k in keys if k[0] in ctx.topics and k[1] in ctx.topics[k[0]].assignment]
        already = {k for k in known
                   if (s := ctx.topics[k[0]].states.get(k[1])) is not None
                   and s.leader == ctx.topics[k[0]].assignment[k[1]][0]}

        def done(when_ms: int) -> list[Effect]:
            results = {}
            for k in keys:
                results[k] = (ErrorCode.election_not_needed, None) if k in already and wanted is not None \
                    else self._preferred_result(ctx, k)
            if wanted is None:
                results = {k: v for k, v in results.items() if k not in already}
            return respond(results, when_ms)

        return self.elections.elect(ctx, [k for k in known if k not in already], set(), now_ms, done,
                                    self.elections.preferred_rule(ctx))

    def elect_unclean_leaders(self, wanted: list[Key] | None, now_ms: int,
                              respond: Callable[[dict[Key, Outcome], int], list[Effect]]) -> list[Effect]:
        """ElectLeaders (unclean, KIP-460): a partition without a leader gets one, from its ISR if
        a member is alive, else from any live assigned replica, whatever the topic's
        unclean.leader.election.enable. A partition that has a leader: ELECTION_NOT_NEEDED
        (``wanted`` None: every partition without a leader)."""
        ctx = self.ctx
        if ctx is None:
            return respond({k: (ErrorCode.not_controller, None) for k in wanted or []}, now_ms)
        keys = wanted if wanted is not None else [(t.name, i) for t, i in ctx.all_partitions()
                                                  if t.states.get(i) is not None and t.states[i].leader < 0]
        known = [k for k in keys if k[0] in ctx.topics and k[1] in ctx.topics[k[0]].assignment]
        led = {k for k in known if (s := ctx.topics[k[0]].states.get(k[1])) is not None and s.leader >= 0}

        def decide(topic: TopicMetadata, index: int, current: LeaderAndIsr, live: set[int],
                   dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
            if current.leader >= 0:
                return None
            replicas = topic.assignment[index]
            return decide_within(replicas, current, ctx.epoch, lambda view: offline_partition_election(
                replicas, view, live, dead, ctx.shutting_down, True, ctx.epoch))

        def done(when_ms: int) -> list[Effect]:
            results: dict[Key, tuple[ErrorCode, str | None]] = {}
            for k in keys:
                topic = ctx.topics.get(k[0])
                state = topic.states.get(k[1]) if topic is not None else None
                if topic is None or k[1] not in topic.assignment:
                    results[k] = (ErrorCode.unknown_topic_or_partition, None)
                elif k in led:
                    results[k] = (ErrorCode.election_not_needed, None)
                elif state is not None and state.leader >= 0:
                    results[k] = (ErrorCode.none, None)
                else:
                    results[k] = (ErrorCode.eligible_leaders_not_available,
                                  f"No live replica of {list(topic.assignment[k[1]])} can lead")
            return respond(results, when_ms)

        return self.elections.elect(ctx, [k for k in known if k not in led], set(), now_ms, done, decide)

    def on_topic_config_changed(self, name: str, configs: dict[str, Any], now_ms: int) -> list[Effect]:
        """A topic's config changed (Kafka's TopicConfigHandler): the controller's copy follows, and
        a topic that now allows unclean leader election gets leaders for its offline partitions."""
        ctx = self.ctx
        topic = ctx.topics.get(name) if ctx is not None else None
        if topic is None:
            return []
        topic.configs = dict(configs)
        return self.elect_offline_if_unclean([topic], now_ms)

    def on_broker_config_changed(self, changed: set[str], now_ms: int) -> list[Effect]:
        """Dynamic broker configs changed: enabling unclean.leader.election.enable cluster-wide
        elects the offline partitions of topics without their own setting."""
        ctx = self.ctx
        if ctx is None or "unclean.leader.election.enable" not in changed:
            return []
        return self.elect_offline_if_unclean(list(ctx.topics.values()), now_ms)

    def elect_offline_if_unclean(self, topics: list[TopicMetadata], now_ms: int) -> list[Effect]:
        ctx = self.ctx
        if ctx is None or not ctx.ready or not self.in_office(ctx):
            return []
        keys = [(t.name, i) for t in topics
                if self.config.topic_value(t.configs, "unclean.leader.election.enable")
                for i, s in sorted(t.states.items()) if s.leader < 0]
        return self.elections.elect(ctx, keys, set(), now_ms) if keys else []

    @staticmethod
    def _preferred_result(ctx: ControllerContext, key: Key) -> tuple[ErrorCode, str | None]:
        topic = ctx.topics.get(key[0])
        if topic is None or key[1] not in topic.assignment:
            return ErrorCode.unknown_topic_or_partition, None
        state = topic.states.get(key[1])
        preferred = topic.assignment[key[1]][0]
        if state is not None and state.leader == preferred:
            return ErrorCode.none, None
        return ErrorCode.preferred_leader_not_available, \
            f"Preferred replica {preferred} is not alive or not in the ISR {list(state.isr) if state else []}"

    def check_leader_imbalance(self, now_ms: int) -> list[Effect]:
        """auto.leader.rebalance.enable: per broker, when more than
        leader.imbalance.per.broker.percentage of the partitions it prefers are led elsewhere,
        move them back."""
        ctx = self.ctx
        if ctx is None:
            return []
        limit = self.config["leader.imbalance.per.broker.percentage"]
        by_preferred: dict[int, list[Key]] = {}
        imbalanced: dict[int, int] = {}
        for topic, index in ctx.all_partitions():
            state = topic.states.get(index)
            if state is None:
                continue
            preferred = topic.assignment[index][0]
            by_preferred.setdefault(preferred, []).append((topic.name, index))
            if state.leader != preferred:
                imbalanced[preferred] = imbalanced.get(preferred, 0) + 1
        keys: list[Key] = []
        for broker, parts in by_preferred.items():
            if imbalanced.get(broker, 0) * 100 > limit * len(parts):
                keys += [k for k in parts if ctx.topics[k[0]].states[k[1]].leader != broker]
        if not keys:
            return []
        return [LogLine("info", f"Leader imbalance: electing preferred leaders for {len(keys)} partition(s)")] + \
            self.elections.elect(ctx, keys, set(), now_ms, None, self.elections.preferred_rule(ctx))

    # ------------------------------------------------------------------ topics (ASG-1..ASG-3)

    def plan_topic(self, name: str, num_partitions: int, replication_factor: int,
                   manual: dict[int, tuple[int, ...]], configs: dict[str, str | None]
                   ) -> TopicMetadata | tuple[ErrorCode, str]:
        """The topic CreateTopics would create, or why not (also NOT_CONTROLLER)."""
        if self.ctx is None:
            return ErrorCode.not_controller, "This broker is no longer the controller"
        return self.topics.plan(self.ctx, name, num_partitions, replication_factor, manual, configs)

    def create_topic(self, plan: TopicMetadata, done: TopicCreated, now_ms: int) -> list[Effect]:
        if self.ctx is None:
            return done(ErrorCode.not_controller, "This broker is no longer the controller", now_ms)
        return self.topics.create(self.ctx, plan, done, now_ms)

    def create_topic_if_absent(self, name: str, num_partitions: int, replication_factor: int,
                               configs: dict[str, str], done: TopicCreated, now_ms: int) -> list[Effect]:
        """Auto-creation: create the topic unless it exists; one being created answers when it is."""
        ctx = self.ctx
        if ctx is None:
            return done(ErrorCode.not_controller, "This broker is no longer the controller", now_ms)
        if name in ctx.topics:
            return done(ErrorCode.none, None, now_ms)
        if name in ctx.creating:
            ctx.creating[name].append(done)
            return []
        plan = self.topics.plan(ctx, name, num_partitions, replication_factor, {}, dict(configs))
        if isinstance(plan, tuple):
            return done(plan[0], plan[1], now_ms)
        return self.topics.create(ctx, plan, done, now_ms)

    def is_creating(self, name: str) -> bool:
        return self.ctx is not None and name in self.ctx.creating

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of a topic the controller knows, else None."""
        topic = self.ctx.topics.get(name) if self.ctx is not None else None
        return topic.topic_id if topic is not None else None

    def live_broker_count(self) -> int:
        return len(self.ctx.live_brokers) if self.ctx is not None else 0

    def add_partitions(self, name: str, count: int, manual: list[tuple[int, ...]] | None, validate_only: bool,
                       done: Callable[[ErrorCode, str | None, int], list[Effect]], now_ms: int) -> list[Effect]:
        if self.ctx is None:
            return done(ErrorCode.not_controller, "This broker is not the controller", now_ms)
        return self.topics.add_partitions(self.ctx, name, count, manual, validate_only, done, now_ms)

    # ------------------------------------------------------------------ reassignment (CTL-11)

    def alter_reassignments(self, wanted: list[tuple[Key, tuple[int, ...] | None]], now_ms: int,
                            respond: Callable[[dict[Key, Outcome], int], list[Effect]]) -> list[Effect]:
        ctx = self.ctx
        if ctx is None or not ctx.ready:
            return respond({k: (ErrorCode.not_controller, None) for k, _ in wanted}, now_ms)
        return self.reassignments.alter(ctx, wanted, now_ms, respond)

    def on_reassign_partitions_node(self, moves: dict[Key, tuple[int, ...]] | None, now_ms: int) -> list[Effect]:
        """``/admin/reassign_partitions`` was created or changed (None: it is gone)."""
        ctx = self.ctx
        if ctx is None or not ctx.ready or not self.in_office(ctx):
            return []          # a controller reads it when it takes office
        if moves is None:
            ctx.zk_requested = {}
            return []
        return self.reassignments.on_requested(ctx, moves, now_ms)

    def _read_reassign_partitions_node(self, ctx: ControllerContext, now_ms: int) -> list[Effect]:
        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            [res] = results
            if not self.in_office(ctx) or res.error is ZkError.NO_NODE:
                return []
            if res.error is not ZkError.NONE:          # no answer: read it again
                return self.outbox.after(when_ms + CONTROLLER_RETRY_MS,
                                         lambda t: self._read_reassign_partitions_node(ctx, t))
            try:
                moves = znodes.ReassignPartitionsZNode.decode(res.data)
            except ValueError as exc:
                return [LogLine("warning", f"Ignoring {znodes.ReassignPartitionsZNode.path()}: {exc}")]
            return self.reassignments.on_requested(ctx, moves, when_ms)

        return [self.outbox.zk([GetData(znodes.ReassignPartitionsZNode.path())], on_read)]

    def list_reassignments(self, wanted: list[Key] | None
                           ) -> dict[Key, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] | None:
        ctx = self.ctx
        return None if ctx is None else self.reassignments.ongoing(ctx, wanted)

    def delete_topic(self, name: str, done: Callable[[ErrorCode, str | None, int], list[Effect]],
                     now_ms: int) -> list[Effect]:
        if self.ctx is None:
            return done(ErrorCode.not_controller, "This broker is no longer the controller", now_ms)
        return self.deletions.delete(self.ctx, name, done, now_ms)
