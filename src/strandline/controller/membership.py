"""Brokers coming and going, on the controller (SPEC CTL-2, CTL-6, CTL-7; Kafka's
onBrokerStartup, onBrokerFailure and the broker modification handler).

A broker gone is dead (new leaders, out of the ISRs); one registered again with a new epoch
(czxid) *bounced*: dead, then new, as in Kafka, so it never resumes a leadership with a log that
may have lost its tail. New brokers learn their partitions' state (after any election), all the
membership. What follows an election is a named continuation (:class:`ElectBounced`,
:class:`AnnounceToNewBrokers`) that the election's waits show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strandline.core import api_version
from strandline.core.effects import Effect, LogLine
from strandline.controller.context import ControllerContext
from strandline.controller.deletion import TopicDeletions
from strandline.controller.elections import PartitionElections
from strandline.controller.office import Office
from strandline.controller.unclean_shutdown import mark_handled, unclean_registrations
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import BrokerInfo

Key = tuple[str, int]


class BrokerMembership:
    def __init__(self, office: Office, elections: PartitionElections, deletions: TopicDeletions) -> None:
        self.office = office
        self.elections = elections
        self.deletions = deletions

    def on_brokers_changed(self, brokers: dict[int, BrokerInfo], epochs: dict[int, int], now_ms: int,
                           listing: int | None = None) -> list[Effect]:
        """The children of ``/brokers/ids`` changed, or a registration (a broker modification).
        ``listing`` numbers the reads of the live brokers in the order they were made (None: no
        order known): one older than what the controller already applied is stale and ignored."""
        ctx = self.office.ctx
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
        channel, elections = self.office.channel, self.elections
        if not new and not gone:
            return modified + (channel.send_partition_states(ctx, [], None, False, now_ms) if modified else [])
        # eligible leader replicas (KIP-966): a broker back from an unclean shutdown leaves every
        # ISR and ELR, as a dead one, before it may lead anything again
        unclean = unclean_registrations(ctx, new) if api_version.elr_enabled(self.office.config) else set()
        ctx.unclean_shutdown |= unclean
        dead = gone | bounced | unclean
        effects: list[Effect] = [LogLine("warning" if dead else "info", f"Live brokers now {sorted(brokers)} (new "
                             f"{sorted(new - bounced)}, restarted {sorted(bounced)}, gone {sorted(gone)})"
                             + (f"; back from an unclean shutdown, out of every ISR and ELR: {sorted(unclean)}"
                                if unclean else ""),
                             "broker_gone" if dead else "broker_joined")]
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
        announce = AnnounceToNewBrokers(ctx, new, affected, before, self, unclean)
        elected = ElectBounced(ctx, bounced, affected, gone, announce, self)
        # a broker back may hold replicas of a topic deleted while it was gone: it hears of that deletion
        # now, whose record waits for it (controller.deletion)
        if new:
            effects.extend(self.deletions.resume(ctx, now_ms))
        return effects + elections.elect(ctx, [(t.name, i) for t, i in affected], dead, now_ms, elected)


@dataclass(eq=False)
class AnnounceToNewBrokers:
    """After the elections of a broker change: the ``new`` brokers learn the partitions that an
    election did not just announce to them."""

    ctx: ControllerContext = field(repr=False)
    new: set[int]
    affected: list[tuple[TopicMetadata, int]] = field(repr=False)
    before: dict[Key, int] = field(repr=False)     # their leader epochs before the elections
    membership: BrokerMembership = field(repr=False)
    #: brokers back from an unclean shutdown, out of the ISRs and ELRs now (KIP-966)
    unclean: set[int] = field(default_factory=set)

    def __call__(self, when_ms: int) -> list[Effect]:
        ctx, membership = self.ctx, self.membership
        ctx.unclean_shutdown -= self.unclean
        if not membership.office.in_office(ctx):
            return []
        marked = mark_handled(membership.office, ctx, self.unclean) if self.unclean else []
        unchanged = [(t, i) for t, i in self.affected
                     if (t.name, i) in self.before and t.states.get(i) is not None
                     and t.states[i].leader_epoch == self.before[(t.name, i)]]
        new = self.new
        return marked + (membership.office.channel.send_partition_states(
            ctx, membership.elections.not_electing(ctx, unchanged, new), new, False, when_ms,
            metadata_to=new) if new else [])


@dataclass(eq=False)
class ElectBounced:
    """After the elections of a broker change: a ``bounced`` broker was handled as dead; now it is
    new, and may lead what went offline (CTL-7); then :class:`AnnounceToNewBrokers`."""

    ctx: ControllerContext = field(repr=False)
    bounced: set[int]
    affected: list[tuple[TopicMetadata, int]] = field(repr=False)
    gone: set[int] = field(repr=False)
    then: AnnounceToNewBrokers
    membership: BrokerMembership = field(repr=False)

    def __call__(self, when_ms: int) -> list[Effect]:
        ctx, membership = self.ctx, self.membership
        if not membership.office.in_office(ctx):
            return []
        offline = [(t.name, i) for t, i in self.affected
                   if t.states.get(i) is not None and t.states[i].leader < 0 and self.bounced & set(t.assignment[i])]
        if offline:
            return membership.elections.elect(ctx, offline, self.gone, when_ms, self.then)
        return self.then(when_ms)
