"""``Controller``: the broker's controller role (Kafka's KafkaController; SPEC CTL-1..CTL-12).

Every broker runs for controller when ``/controller`` is free (:mod:`~strandline.controller.candidacy`);
the one that wins holds a :class:`ControllerContext` read from ZooKeeper and decides: leaders and
ISRs when brokers die, come back or stop (:mod:`~strandline.controller.membership`, controlled
shutdown), preferred and unclean leaders asked for (:mod:`~strandline.controller.requested_elections`),
ISR changes (:mod:`~strandline.controller.isr_changes`), topic creation, deletion and reassignment.
It tells the brokers through its :class:`ControllerChannel` and never writes ZooKeeper without the
check of ``/controller_epoch``'s version it was elected with, so a deposed controller cannot write.
This class takes office and hands each event to the part that owns it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from kio.schema.errors import ErrorCode

from strandline.core import api_version
from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.controller.alter_isr import AlterIsrs, Proposal
from strandline.controller.candidacy import Candidacy
from strandline.controller.channel import LocalDelivery
from strandline.controller.context import Awaiting, ControllerContext, TopicCreated
from strandline.controller.controlled_shutdown import controlled_shutdown
from strandline.controller.deletion import TopicDeletions
from strandline.controller.isr_changes import IsrChanges
from strandline.controller.membership import BrokerMembership
from strandline.controller.office import Office
from strandline.controller.elections import PartitionElections
from strandline.controller.reassignment import Outcome, PartitionReassignments
from strandline.controller.requested_elections import RequestedElections
from strandline.controller.topics import TopicChanges
from strandline.controller.unclean_recovery import LocalLogInfo, UncleanRecovery
from strandline.controller.unclean_shutdown import mark_handled, unclean_registrations
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.store import TransactionOp
from strandline.coordination.znodes import BrokerInfo

Key = tuple[str, int]


class Controller:
    def __init__(self, config: Any, outbox: Outbox, *, rng: Any, new_uuid: Callable[[], uuid.UUID],
                 deliver_locally: LocalDelivery,
                 controller_seen: Callable[[int | None], None] = lambda controller_id: None,
                 local_log_info: LocalLogInfo = lambda topic, index: None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.outbox = outbox
        self.rng = rng
        self.new_uuid = new_uuid
        #: ``controller_seen(id)``: who the controller is, as this broker learned it (None: no
        #: longer this broker)
        self.controller_seen = controller_seen
        self.office = Office(config, outbox, rng=rng, new_uuid=new_uuid, deliver_locally=deliver_locally,
                             resign=self.resign)
        self.channel = self.office.channel
        self.candidacy = Candidacy(self.broker_id, outbox, lambda: self.is_active, self.become_controller,
                                   self.on_controller_changed)
        self.elections = PartitionElections(self.office)
        self.topics = TopicChanges(self.office)
        self.deletions = TopicDeletions(self.office)
        self.reassignments = PartitionReassignments(self.office, self.elections)
        self.elections.moves_settled = self.reassignments.maybe_complete
        self.recovery = UncleanRecovery(self.office, self.elections, local_log_info)
        self.elections.leaderless = self.recovery.leaderless
        self.membership = BrokerMembership(self.office, self.elections, self.deletions)
        self.isr_changes = IsrChanges(self.office, self.reassignments)
        self.alter_isrs = AlterIsrs(self.office, self.reassignments)
        self.requested_elections = RequestedElections(self.office, self.elections)

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
            return self.candidacy.run(now_ms)
        if controller_id != self.broker_id:
            self.controller_seen(controller_id)
            if self.is_active:
                return self.resign(f"broker {controller_id} holds /controller")
        elif not self.is_active and not self.candidacy.running:
            return self.candidacy.read_epoch_won(now_ms)
        return []

    def on_session_lost(self, now_ms: int) -> list[Effect]:
        """The ZooKeeper session expired: a controller stops acting at once (NET-8)."""
        return self.resign("its ZooKeeper session expired") if self.is_active else []

    def resign(self, why: str) -> list[Effect]:
        self.ctx = None
        self.controller_seen(None)
        return [LogLine("warning", f"Broker {self.broker_id} is no longer the controller: {why}")]

    def become_controller(self, epoch: int, epoch_version: int | None, why: str) -> list[Effect]:
        """Take office in ``epoch``: read the cluster from ZooKeeper, then act (:meth:`_on_cluster_read`)."""
        ctx = self.ctx = ControllerContext(epoch, epoch_version)
        self.controller_seen(self.broker_id)
        read = self.outbox.read_cluster_state(AwaitingClusterState(ctx, self))
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
        # eligible leader replicas (KIP-966): brokers registered after an unclean shutdown that no
        # controller handled leave every ISR and ELR first; their partitions are told afterwards
        unclean = unclean_registrations(ctx) if api_version.elr_enabled(self.config) else set()
        purged = [(t, i) for t, i in ctx.all_partitions() if i in t.states
                  and unclean & ({t.states[i].leader} | set(t.states[i].isr) | set(t.states[i].elr))]
        purged_keys = {(t.name, i) for t, i in purged}
        effects += self.channel.send_partition_states(
            ctx, [(t, i) for t, i in ctx.all_partitions() if (t.name, i) not in purged_keys], None, False, now_ms)
        live = set(brokers)
        affected = [(t.name, i) for t, i in ctx.all_partitions()
                    if i in t.states and (t.states[i].leader not in live or not set(t.states[i].isr) <= live
                                          or (t.name, i) in purged_keys)]
        dead = {r for t, i in ctx.all_partitions() for r in t.assignment[i]} - live
        done = None
        if unclean:
            effects.append(LogLine("warning" if purged else "info", f"Brokers registered after an unclean shutdown "
                                   f"(or a first start), out of every ISR and ELR: {sorted(unclean)}"))
            ctx.unclean_shutdown |= unclean
            done = UncleanShutdownsHandled(ctx, unclean, purged, self)
        effects += self.elections.elect(ctx, affected, dead | unclean, now_ms, done)
        effects += self.reassignments.resume(ctx, now_ms)
        ctx.ready = True
        self.requested_elections.schedule_leader_rebalance(ctx, now_ms)
        effects += self.reassignments.read_requested(ctx, now_ms) + self.deletions.resume(ctx, now_ms)
        pending, ctx.pending_brokers = ctx.pending_brokers, None
        if pending is not None:
            effects += self.on_brokers_changed(*pending[:2], now_ms, pending[2])
        return effects

    def _unclean_shutdowns_handled(self, ctx: ControllerContext, unclean: set[int],
                                   purged: list[tuple[TopicMetadata, int]], now_ms: int) -> list[Effect]:
        """The failover's elections took ``unclean`` out of every ISR and ELR: tell every broker
        the partitions that were held back, and mark the registrations handled."""
        ctx.unclean_shutdown -= unclean
        if not self.in_office(ctx):
            return []
        parts = [(t, i) for t, i in purged if ctx.topics.get(t.name) is t and i in t.states]
        return self.channel.send_partition_states(ctx, parts, None, False, now_ms) + \
            mark_handled(self.office, ctx, unclean)

    def fenced(self, ctx: ControllerContext, ops: Sequence[TransactionOp]) -> list[TransactionOp]:
        return self.office.fenced(ctx, ops)

    def check_still_controller(self, ctx: ControllerContext, then: Callable[[int], list[Effect]], now_ms: int,
                               given_up: Callable[[], object] = lambda: None) -> list[Effect]:
        return self.office.check_still_controller(ctx, then, now_ms, given_up)

    # ------------------------------------------------------------------ brokers, ISRs, leaders (CTL-2, CTL-6, CTL-7, ISR-6)

    def on_brokers_changed(self, brokers: dict[int, BrokerInfo], epochs: dict[int, int], now_ms: int,
                           listing: int | None = None) -> list[Effect]:
        """The live brokers changed (:meth:`BrokerMembership.on_brokers_changed`)."""
        return self.membership.on_brokers_changed(brokers, epochs, now_ms, listing)

    def on_delete_topics_changed(self, children: list[str], now_ms: int) -> list[Effect]:
        """The children of ``/admin/delete_topics`` changed: a deletion recorded there that this
        controller is not carrying out is taken up."""
        ctx = self.ctx
        if ctx is None or not ctx.ready or not self.in_office(ctx) or not children:
            return []          # a controller reads them when it takes office
        return self.deletions.on_records_changed(ctx, children, now_ms)

    def on_isr_change_notifications(self, children: list[str], now_ms: int) -> list[Effect]:
        """ISR-6, the controller's side (:mod:`~strandline.controller.isr_changes`)."""
        return self.isr_changes.on_notifications(children, now_ms)

    def alter_isr(self, broker_id: int, broker_epoch: int, proposals: dict[Key, Proposal],
                  respond: Callable[[dict[str, Any], int], list[Effect]], now_ms: int) -> list[Effect]:
        """A leader's ISR proposals (AlterIsr, KIP-497; :mod:`~strandline.controller.alter_isr`)."""
        return self.alter_isrs.alter_isr(broker_id, broker_epoch, proposals, respond, now_ms)

    def on_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                               respond: Callable[[dict[str, Any]], list[Effect]],
                               now_ms: int) -> list[Effect]:
        """A broker asks to stop (:func:`~strandline.controller.controlled_shutdown.controlled_shutdown`, CTL-9)."""
        return controlled_shutdown(self.office, self.elections, broker_id, broker_epoch, respond, now_ms)

    def elect_preferred_leaders(self, wanted: list[Key] | None, now_ms: int,
                                respond: Callable[[dict[Key, Outcome], int], list[Effect]]) -> list[Effect]:
        """ElectLeaders (preferred; :meth:`RequestedElections.elect_preferred_leaders`)."""
        return self.requested_elections.elect_preferred_leaders(wanted, now_ms, respond)

    def elect_unclean_leaders(self, wanted: list[Key] | None, now_ms: int,
                              respond: Callable[[dict[Key, Outcome], int], list[Effect]]) -> list[Effect]:
        """ElectLeaders (unclean, KIP-460; :meth:`RequestedElections.elect_unclean_leaders`)."""
        return self.requested_elections.elect_unclean_leaders(wanted, now_ms, respond)

    def on_topic_config_changed(self, name: str, configs: dict[str, Any], now_ms: int) -> list[Effect]:
        return self.requested_elections.on_topic_config_changed(name, configs, now_ms)

    def on_broker_config_changed(self, changed: set[str], now_ms: int) -> list[Effect]:
        return self.requested_elections.on_broker_config_changed(changed, now_ms)

    def elect_offline_if_unclean(self, topics: list[TopicMetadata], now_ms: int) -> list[Effect]:
        return self.requested_elections.elect_offline_if_unclean(topics, now_ms)

    # ------------------------------------------------------------------ time

    def next_deadline_ms(self) -> int | None:
        """The controller's own next timed task: the automatic preferred-leader check."""
        return self.requested_elections.next_deadline_ms()

    def tick(self, now_ms: int) -> list[Effect]:
        return self.requested_elections.tick(now_ms)

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
        return self.reassignments.on_node_changed(moves, now_ms)

    def list_reassignments(self, wanted: list[Key] | None
                           ) -> dict[Key, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] | None:
        ctx = self.ctx
        return None if ctx is None else self.reassignments.ongoing(ctx, wanted)

    def delete_topic(self, name: str, done: Callable[[ErrorCode, str | None, int], list[Effect]],
                     now_ms: int) -> list[Effect]:
        if self.ctx is None:
            return done(ErrorCode.not_controller, "This broker is no longer the controller", now_ms)
        return self.deletions.delete(self.ctx, name, done, now_ms)


@dataclass(eq=False, repr=False)
class AwaitingClusterState(Awaiting):
    """A broker that took office reads the cluster (brokers, topics, registrations) from ZooKeeper."""

    controller: Controller = field(repr=False)

    def __call__(self, state: tuple[Any, ...], now_ms: int) -> list[Effect]:
        return self.controller._on_cluster_read(self.ctx, state, now_ms)


@dataclass(eq=False)
class UncleanShutdownsHandled:
    """After a failover's elections: brokers back from an unclean shutdown are out of every ISR
    and ELR (:meth:`Controller._unclean_shutdowns_handled`)."""

    ctx: ControllerContext = field(repr=False)
    unclean: set[int]
    purged: list[tuple[TopicMetadata, int]] = field(repr=False)
    controller: Controller = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.controller._unclean_shutdowns_handled(self.ctx, self.unclean, self.purged, now_ms)
