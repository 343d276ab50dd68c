"""Leader elections asked for rather than forced by brokers coming and going (SPEC CTL-10, ASG-4;
KIP-460): ElectLeaders (preferred or unclean), the periodic leader-imbalance check
(auto.leader.rebalance.enable) and unclean.leader.election.enable turned on for a topic or the
cluster. Each runs through :class:`~strandline.controller.elections.PartitionElections`; an
ElectLeaders answer is a named continuation (:class:`AnswerPreferredElection`,
:class:`AnswerUncleanElection`) that the election's waits show."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.controller.context import ControllerContext
from strandline.controller.elections import PartitionElections, decide_within, elr_policy, offline_partition_election
from strandline.controller.office import Office
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import LeaderAndIsr

Key = tuple[str, int]
Outcome = tuple[ErrorCode, "str | None"]
Respond = Callable[[dict[Key, Outcome], int], list[Effect]]

#: how long after taking office a controller first checks the leaders' balance (Kafka's 5 s)
FIRST_REBALANCE_CHECK_DELAY_MS = 5_000


class RequestedElections:
    def __init__(self, office: Office, elections: PartitionElections) -> None:
        self.office = office
        self.elections = elections

    def elect_preferred_leaders(self, wanted: list[Key] | None, now_ms: int, respond: Respond) -> list[Effect]:
        """ElectLeaders (preferred): move leadership back to each partition's first assigned
        replica where it is alive and in the ISR (``wanted`` None: every partition).
        ``respond(results, now_ms)`` gets an outcome per partition: ELECTION_NOT_NEEDED for one
        named that its preferred replica already leads, and for all partitions only those that it
        did not lead."""
        ctx = self.office.ctx
        if ctx is None:
            return respond({k: (ErrorCode.not_controller, None) for k in wanted or []}, now_ms)
        keys = wanted if wanted is not None else [(t.name, i) for t, i in ctx.all_partitions()]
        known = [k for k in keys if k[0] in ctx.topics and k[1] in ctx.topics[k[0]].assignment]
        already = {k for k in known
                   if (s := ctx.topics[k[0]].states.get(k[1])) is not None
                   and s.leader == ctx.topics[k[0]].assignment[k[1]][0]}
        done = AnswerPreferredElection(ctx, keys, already, wanted is not None, respond)
        return self.elections.elect(ctx, [k for k in known if k not in already], set(), now_ms, done,
                                    self.elections.preferred_rule(ctx))

    def elect_unclean_leaders(self, wanted: list[Key] | None, now_ms: int, respond: Respond) -> list[Effect]:
        """ElectLeaders (unclean, KIP-460): a partition without a leader gets one, from its ISR if
        a member is alive, else from any live assigned replica, whatever the topic's
        unclean.leader.election.enable. A partition that has a leader: ELECTION_NOT_NEEDED
        (``wanted`` None: every partition without a leader)."""
        ctx = self.office.ctx
        if ctx is None:
            return respond({k: (ErrorCode.not_controller, None) for k in wanted or []}, now_ms)
        keys = wanted if wanted is not None else [(t.name, i) for t, i in ctx.all_partitions()
                                                  if t.states.get(i) is not None and t.states[i].leader < 0]
        known = [k for k in keys if k[0] in ctx.topics and k[1] in ctx.topics[k[0]].assignment]
        led = {k for k in known if (s := ctx.topics[k[0]].states.get(k[1])) is not None and s.leader >= 0}
        return self.elections.elect(ctx, [k for k in known if k not in led], set(), now_ms,
                                    AnswerUncleanElection(ctx, keys, led, respond),
                                    UncleanRule(ctx, self.office.config))

    def on_topic_config_changed(self, name: str, configs: dict[str, Any], now_ms: int) -> list[Effect]:
        """A topic's config changed (Kafka's TopicConfigHandler): the controller's copy follows, and
        a topic that now allows unclean leader election gets leaders for its offline partitions."""
        ctx = self.office.ctx
        topic = ctx.topics.get(name) if ctx is not None else None
        if topic is None:
            return []
        topic.configs = dict(configs)
        return self.elect_offline_if_unclean([topic], now_ms)

    def on_broker_config_changed(self, changed: set[str], now_ms: int) -> list[Effect]:
        """Dynamic broker configs changed: enabling unclean.leader.election.enable cluster-wide
        elects the offline partitions of topics without their own setting."""
        ctx = self.office.ctx
        if ctx is None or "unclean.leader.election.enable" not in changed:
            return []
        return self.elect_offline_if_unclean(list(ctx.topics.values()), now_ms)

    def elect_offline_if_unclean(self, topics: list[TopicMetadata], now_ms: int) -> list[Effect]:
        ctx = self.office.ctx
        if ctx is None or not ctx.ready or not self.office.in_office(ctx):
            return []
        keys = [(t.name, i) for t in topics
                if self.office.config.topic_value(t.configs, "unclean.leader.election.enable")
                for i, s in sorted(t.states.items()) if s.leader < 0]
        return self.elections.elect(ctx, keys, set(), now_ms) if keys else []

    def schedule_leader_rebalance(self, ctx: ControllerContext, now_ms: int) -> None:
        """A controller that has read the cluster checks the leaders' balance
        ``FIRST_REBALANCE_CHECK_DELAY_MS`` later, then every leader.imbalance.check.interval.seconds
        (Kafka's onControllerFailover schedules its auto-leader-rebalance task 5 s out)."""
        if self.office.config["auto.leader.rebalance.enable"]:
            ctx.leader_rebalance_due_ms = now_ms + FIRST_REBALANCE_CHECK_DELAY_MS

    def next_deadline_ms(self) -> int | None:
        ctx = self.office.ctx
        return ctx.leader_rebalance_due_ms if ctx is not None else None

    def tick(self, now_ms: int) -> list[Effect]:
        """Run the leader-imbalance check if it is due, and schedule the next one."""
        ctx = self.office.ctx
        if ctx is None or ctx.leader_rebalance_due_ms is None or ctx.leader_rebalance_due_ms > now_ms:
            return []
        ctx.leader_rebalance_due_ms = now_ms + self.office.config["leader.imbalance.check.interval.seconds"] * 1000
        return self.check_leader_imbalance(now_ms)

    def check_leader_imbalance(self, now_ms: int) -> list[Effect]:
        """auto.leader.rebalance.enable: per broker, when more than
        leader.imbalance.per.broker.percentage of the partitions it prefers are led elsewhere,
        move them back."""
        ctx = self.office.ctx
        if ctx is None or not ctx.ready:
            return []
        limit = self.office.config["leader.imbalance.per.broker.percentage"]
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


@dataclass(eq=False)
class UncleanRule:
    """ElectLeaders (unclean): a partition without a leader gets one from any live assigned
    replica if no ISR member is alive (with eligible leader replicas: from the ISR, then the ELR,
    then any live assigned replica); one with a leader is left alone."""

    ctx: ControllerContext = field(repr=False)
    config: Any = field(default=None, repr=False)

    def __call__(self, topic: TopicMetadata, index: int, current: LeaderAndIsr, live: set[int],
                 dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
        if current.leader >= 0:
            return None
        ctx, replicas = self.ctx, topic.assignment[index]
        elr = elr_policy(ctx, self.config, topic, index) if self.config is not None else None
        return decide_within(replicas, current, ctx.epoch, lambda view: offline_partition_election(
            replicas, view, live, dead, ctx.shutting_down, True, ctx.epoch, elr))


@dataclass(eq=False)
class AnswerPreferredElection:
    """Once a preferred-leader election of ``keys`` ended: the ElectLeaders answer."""

    ctx: ControllerContext = field(repr=False)
    keys: list[Key]
    already: set[Key] = field(repr=False)      # led by their preferred replica before
    named: bool = field(repr=False)            # the request named the partitions
    respond: Respond = field(repr=False)

    def __call__(self, when_ms: int) -> list[Effect]:
        results = {}
        for k in self.keys:
            results[k] = (ErrorCode.election_not_needed, None) if k in self.already and self.named \
                else _preferred_result(self.ctx, k)
        if not self.named:
            results = {k: v for k, v in results.items() if k not in self.already}
        return self.respond(results, when_ms)


@dataclass(eq=False)
class AnswerUncleanElection:
    """Once an unclean election of ``keys`` ended: the ElectLeaders answer."""

    ctx: ControllerContext = field(repr=False)
    keys: list[Key]
    led: set[Key] = field(repr=False)          # had a leader before
    respond: Respond = field(repr=False)

    def __call__(self, when_ms: int) -> list[Effect]:
        results: dict[Key, tuple[ErrorCode, str | None]] = {}
        for k in self.keys:
            topic = self.ctx.topics.get(k[0])
            state = topic.states.get(k[1]) if topic is not None else None
            if topic is None or k[1] not in topic.assignment:
                results[k] = (ErrorCode.unknown_topic_or_partition, None)
            elif k in self.led:
                results[k] = (ErrorCode.election_not_needed, None)
            elif state is not None and state.leader >= 0:
                results[k] = (ErrorCode.none, None)
            else:
                results[k] = (ErrorCode.eligible_leaders_not_available,
                              f"No live replica of {list(topic.assignment[k[1]])} can lead")
        return self.respond(results, when_ms)


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
