"""Creating topics, the controller's side (SPEC ASG-1..ASG-3; Kafka's
AdminZkClient.createTopic with the controller's onNewPartitionCreation).

A topic is planned against the live brokers (name, partition count, replication factor, configs,
the size of its znodes), written in one fenced ZooKeeper transaction with every partition's first
state, then announced to the brokers. Deleting: :mod:`strandline.controller.deletion`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from kio.schema.errors import ErrorCode

from strandline.core.config_key import ConfigError
from strandline.core.topic_keys import parse_topic_configs
from strandline.core.effects import Effect, LogLine
from strandline.controller.assignment import InvalidReplicationFactor, assign_replicas, check_replication_factor
from strandline.controller.office import Office
from strandline.controller.context import Awaiting, ControllerContext, TopicCreated
from strandline.coordination import zk_layout, znodes
from strandline.coordination.metadata import TopicMetadata, topic_name_error
from strandline.coordination.znodes import LeaderAndIsr
from strandline.coordination.store import Create, GetData, OpResult, SetData, TransactionOp, ZkError

READ_BACK_RETRY_MS = 1000       # read a topic again while ZooKeeper cannot answer
_MARKED_FOR_DELETION = "Topic '{}' is marked for deletion."


class TopicChanges:
    def __init__(self, office: Office) -> None:
        self.office = office

    def plan(self, ctx: ControllerContext, name: str, num_partitions: int, replication_factor: int,
             manual: dict[int, tuple[int, ...]], raw_configs: dict[str, str | None]
             ) -> TopicMetadata | tuple[ErrorCode, str]:
        """The topic to create, or why it cannot be. -1 partitions or replication factor: the
        broker's defaults; ``manual``: an explicit assignment."""
        config = self.office.config
        invalid = topic_name_error(name)
        if invalid:
            return ErrorCode.invalid_topic_exception, invalid
        if name in ctx.topics or name in ctx.creating:
            return ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
        if name in ctx.deleting:
            return ErrorCode.topic_already_exists, _MARKED_FOR_DELETION.format(name)
        try:
            configs = parse_topic_configs(raw_configs)
        except ConfigError as exc:
            return ErrorCode.invalid_config, str(exc)
        live = ctx.live_broker_ids()
        if manual:
            if num_partitions != -1 or replication_factor != -1:
                return ErrorCode.invalid_request, "Both replica assignments and partitions/replication factor were set"
            if sorted(manual) != list(range(len(manual))):
                return ErrorCode.invalid_replica_assignment, "Partitions must be numbered 0..n-1"
            sizes = {len(r) for r in manual.values()}
            if len(sizes) != 1 or any(len(set(r)) != len(r) for r in manual.values()):
                return ErrorCode.invalid_replica_assignment, "Every partition needs the same number of distinct replicas"
            unknown = sorted({b for r in manual.values() for b in r} - set(live))
            if unknown:
                return ErrorCode.invalid_replica_assignment, f"Unknown broker(s) {unknown} in replica assignment"
            num_partitions, replication_factor = len(manual), len(manual[0])
        else:
            if num_partitions == -1:
                num_partitions = config["num.partitions"]
            if replication_factor == -1:
                replication_factor = config["default.replication.factor"]
            if num_partitions <= 0:
                return ErrorCode.invalid_partitions, f"Number of partitions must be larger than 0, got {num_partitions}"
            if not live:
                return ErrorCode.broker_not_available, "No live brokers"
        try:
            check_replication_factor(replication_factor, len(live))
        except InvalidReplicationFactor as exc:
            return ErrorCode.invalid_replication_factor, str(exc)
        # checked before planning: the work grows with the partitions, and the znodes must fit
        limit = zk_layout.max_partitions(TopicMetadata(name, uuid.UUID(int=0), {}, {}, configs), replication_factor,
                                         live, ctx.epoch, self.office.fenced(ctx, []),
                                         zk_layout.chroot(config["zookeeper.connect"]))
        if num_partitions > limit:
            return ErrorCode.invalid_partitions, (
                f"Number of partitions {num_partitions} is above the limit of {limit} for topic '{name}' with "
                f"replication factor {replication_factor}: its znodes must fit in one ZooKeeper request of at "
                f"most {zk_layout.JUTE_MAXBUFFER} bytes (jute.maxbuffer)")
        if manual:
            assignment = {p: tuple(r) for p, r in manual.items()}
        else:
            n = len(live)
            racks = {b: ctx.live_brokers[b].rack for b in live}
            rng = self.office.rng
            raw = assign_replicas(live, num_partitions, replication_factor,
                                  rng.randrange(n), rng.randrange(n), racks=racks)
            assignment = {p: tuple(r) for p, r in raw.items()}
        return TopicMetadata(name, self.office.new_uuid(), assignment, {}, configs)

    def create(self, ctx: ControllerContext, plan: TopicMetadata, done: TopicCreated, now_ms: int) -> list[Effect]:
        """Write the topic's znodes in one transaction, then announce its partitions."""
        office = self.office
        live = set(ctx.live_broker_ids())
        for index, replicas in plan.assignment.items():
            alive = tuple(r for r in replicas if r in live)
            leader = alive[0] if alive else -1
            plan.states[index] = LeaderAndIsr(leader, 0, alive, ctx.epoch, 0)
        ctx.creating[plan.name] = [done]
        ops = office.fenced(ctx, zk_layout.create_topic_ops(plan, ctx.epoch))
        return [office.outbox.zk(ops, AwaitingTopicCreated(ctx, plan.name, plan, self), transaction=True)]

    def _on_created(self, wait: AwaitingTopicCreated, results: list[OpResult], when_ms: int) -> list[Effect]:
        ctx, plan = wait.ctx, wait.plan
        failed = next((r.error for r in results if r.error is not ZkError.NONE), None)
        if failed is ZkError.CONNECTION_LOSS:       # written or not: ZooKeeper's copy says which
            return self._read_topic(ctx, plan.name, when_ms, CreationReadBack(ctx, plan.name, plan, self))
        if failed is ZkError.NODE_EXISTS:           # the topic, or the record of its deletion
            record = znodes.DeleteTopicsTopicZNode.path(plan.name)     # the creation fails while it is there
            return [self.office.outbox.zk([GetData(record)], AwaitingDeletionRecordCheck(ctx, plan.name, plan, self))]
        return self._created(ctx, plan, failed, when_ms)

    def _created(self, ctx: ControllerContext, plan: TopicMetadata, failed: ZkError | None, when_ms: int,
                 marked: bool = False) -> list[Effect]:
        """The creation of ``plan`` ended (``failed`` None: written): answer whoever waits for it."""
        office = self.office
        waiters = ctx.creating.pop(plan.name, [])
        effects: list[Effect] = []
        if failed is not None:
            if failed is ZkError.NODE_EXISTS:
                error, message = ErrorCode.topic_already_exists, (
                    _MARKED_FOR_DELETION.format(plan.name) if marked else f"Topic '{plan.name}' already exists.")
            elif failed is ZkError.BAD_VERSION:
                error, message = ErrorCode.not_controller, "This broker is no longer the controller"
            else:
                error, message = ErrorCode.unknown_server_error, f"ZooKeeper error {failed.name}"
            effects.append(LogLine("warning", f"Creating topic {plan.name} failed: {message}"))
        else:
            ctx.topics[plan.name] = plan
            if office.in_office(ctx):
                parts = [(plan, index) for index in sorted(plan.assignment)]
                effects.extend(office.channel.send_partition_states(ctx, parts, None, True, when_ms))
            effects.append(LogLine("info", f"Created topic {plan.name} with {plan.num_partitions} partition(s), "
                                       f"assignment {dict(plan.assignment)}"))
            error, message = ErrorCode.none, None
        for waiter in waiters:
            effects.extend(waiter(error, message, when_ms))
        return effects

    def add_partitions(self, ctx: ControllerContext, name: str, count: int,
                       manual: list[tuple[int, ...]] | None, validate_only: bool,
                       done: Callable[[ErrorCode, str | None, int], list[Effect]], now_ms: int) -> list[Effect]:
        """CreatePartitions (Kafka's createPartitions with the controller's onNewPartitionCreation):
        grow ``name`` to ``count`` partitions, placed as a new topic's would continue from
        partition 0's first replica, or as ``manual`` says; the topic znode and the new
        partitions' states are written in one fenced transaction, then announced. It waits its
        turn among the writes of the topic's znode (a move's), and is planned from the
        assignment the one before it left."""
        return ctx.queue_topic_write(name, AddPartitions(ctx, name, count, manual, validate_only, done, self), now_ms)

    def _add_partitions(self, ctx: ControllerContext, name: str, count: int,
                        manual: list[tuple[int, ...]] | None, validate_only: bool,
                        done: Callable[[ErrorCode, str | None, int], list[Effect]], now_ms: int) -> list[Effect]:
        topic = ctx.topics.get(name)
        if not self.office.in_office(ctx):
            return done(ErrorCode.not_controller, "This broker is no longer the controller", now_ms)
        if topic is None or name in ctx.creating:
            return done(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.", now_ms)
        added = self._plan_added(ctx, topic, count, manual)
        if isinstance(added, tuple):
            return done(added[0], added[1], now_ms)
        live = ctx.live_broker_ids()
        states = {}
        for index, replicas in added.items():
            alive = tuple(r for r in replicas if r in live)
            states[index] = LeaderAndIsr(alive[0] if alive else -1, 0, alive, ctx.epoch, 0)
        assignment = {**topic.assignment, **added}
        ops: list[TransactionOp] = [SetData(znodes.TopicZNode.path(name),
                                            znodes.TopicZNode.encode(assignment, topic.topic_id))]
        for index in sorted(added):
            ops.append(Create(znodes.TopicPartitionZNode.path(name, index)))
            ops.append(Create(znodes.TopicPartitionStateZNode.path(name, index),
                              znodes.TopicPartitionStateZNode.encode(states[index])))
        ops = self.office.fenced(ctx, ops)
        root = zk_layout.chroot(self.office.config["zookeeper.connect"])
        size = zk_layout.multi_size(ops, root)
        old = topic.num_partitions
        if size > zk_layout.JUTE_MAXBUFFER:
            return done(ErrorCode.invalid_partitions, f"Adding {count - old} partitions to topic '{name}' needs more "
                                                      f"than one ZooKeeper request of {zk_layout.JUTE_MAXBUFFER} "
                                                      f"bytes (jute.maxbuffer); add fewer at a time", now_ms)
        if validate_only:
            return done(ErrorCode.none, None, now_ms)
        wait = AwaitingPartitionsAdded(ctx, name, added, states, done, self)
        return [self.office.outbox.zk(ops, wait, transaction=True)]

    def _plan_added(self, ctx: ControllerContext, topic: TopicMetadata, count: int,  # noqa: C901  (the checks in Kafka's order)
                    manual: list[tuple[int, ...]] | None) -> dict[int, tuple[int, ...]] | tuple[ErrorCode, str]:
        """The replicas of the partitions that grow ``topic`` to ``count``, or why it cannot grow."""
        name = topic.name
        if any(k[0] == name for k in ctx.reassigning):
            return ErrorCode.reassignment_in_progress, f"A partition reassignment is in progress for the topic '{name}'."
        old = topic.num_partitions
        if count < old:
            return ErrorCode.invalid_partitions, f"Topic currently has {old} partitions, which is higher than " \
                                                 f"the requested {count}."
        if count == old:
            return ErrorCode.invalid_partitions, f"Topic already has {old} partitions."
        live = ctx.live_broker_ids()
        rf = len(topic.assignment[0]) if topic.assignment else 1
        if live:
            # checked before planning, as a creation's: the work grows with the partitions, and the
            # znodes must fit (a topic that could be created with ``count`` partitions can grow to it)
            limit = zk_layout.max_partitions(topic, max(rf, 1), live, ctx.epoch, self.office.fenced(ctx, []),
                                             zk_layout.chroot(self.office.config["zookeeper.connect"]))
            if count > limit:
                return ErrorCode.invalid_partitions, (
                    f"Number of partitions {count} is above the limit of {limit} for topic '{name}' with "
                    f"replication factor {rf}: its znodes must fit in one ZooKeeper request of at most "
                    f"{zk_layout.JUTE_MAXBUFFER} bytes (jute.maxbuffer)")
        if manual is None:
            try:
                check_replication_factor(rf, len(live))
            except InvalidReplicationFactor as exc:
                return ErrorCode.invalid_replication_factor, str(exc)
            first = topic.assignment[0][0] if topic.assignment else live[0]
            start = max(0, next((i for i, b in enumerate(live) if b >= first), 0))
            raw = assign_replicas(live, count - old, rf, start, start, start_partition=old,
                                  racks={b: ctx.live_brokers[b].rack for b in live})
            return {p: tuple(r) for p, r in raw.items()}
        unknown = sorted({b for r in manual for b in r} - set(live))
        if unknown:
            return ErrorCode.invalid_replica_assignment, \
                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
        if len(manual) != count - old:
            return ErrorCode.invalid_replica_assignment, \
                f"Increasing the number of partitions by {count - old} but {len(manual)} assignments provided."
        for replicas in manual:
            if len(set(replicas)) != len(replicas):
                return ErrorCode.invalid_replica_assignment, \
                    f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, replicas))}."
            if len(replicas) != rf:
                return ErrorCode.invalid_replica_assignment, \
                    f"Inconsistent replication factor between partitions, partition 0 has {rf} while the new " \
                    f"partitions have {len(replicas)}."
        return {old + i: tuple(r) for i, r in enumerate(manual)}

    def _on_partitions_added(self, wait: AwaitingPartitionsAdded, results: list[OpResult],
                             when_ms: int) -> list[Effect]:
        done = wait.then
        failed = next((r for r in results if r.error is not ZkError.NONE), None)
        if failed is None:
            return self._partitions_applied(wait, when_ms)
        if failed.error is ZkError.CONNECTION_LOSS:       # written or not: ZooKeeper's copy says which
            return self._read_topic(wait.ctx, wait.name, when_ms, partial(self._partitions_read_back, wait))
        if failed.error is ZkError.BAD_VERSION:
            return done(ErrorCode.not_controller, "This broker is no longer the controller", when_ms)
        return done(ErrorCode.unknown_server_error, f"ZooKeeper error {failed.error.name}", when_ms)

    def _partitions_read_back(self, wait: AwaitingPartitionsAdded, res: OpResult | None, when_ms: int) -> list[Effect]:
        if res is None:
            return wait.then(ErrorCode.not_controller, "This broker is no longer the controller", when_ms)
        if res.error is ZkError.NONE:
            written = znodes.TopicZNode.decode(res.data).partitions
            if all(tuple(written.get(p, ())) == r for p, r in wait.added.items()):
                return self._partitions_applied(wait, when_ms)
        return wait.then(ErrorCode.unknown_server_error, "ZooKeeper error CONNECTION_LOSS", when_ms)

    def _partitions_applied(self, wait: AwaitingPartitionsAdded, when_ms: int) -> list[Effect]:
        ctx, name, added, office = wait.ctx, wait.name, wait.added, self.office
        current = ctx.topics.get(name)
        effects: list[Effect] = [LogLine("info", f"Added partitions {sorted(added)} to topic {name}: {added}")]
        if current is not None:
            current.assignment.update(added)
            current.states.update(wait.states)
            if office.in_office(ctx):
                parts = [(current, index) for index in sorted(added)]
                effects.extend(office.channel.send_partition_states(ctx, parts, None, True, when_ms))
        return effects + wait.then(ErrorCode.none, None, when_ms)

    def _read_topic(self, ctx: ControllerContext, name: str, now_ms: int,
                    then: Callable[[OpResult | None, int], list[Effect]]) -> list[Effect]:
        """Read topic ``name``'s znode until ZooKeeper answers, then ``then(result, now_ms)``
        (``result`` None once this broker is no longer the controller)."""
        return [self.office.outbox.zk([GetData(znodes.TopicZNode.path(name))], AwaitingTopicZNode(ctx, name, then, self))]

    def _on_topic_read(self, wait: AwaitingTopicZNode, results: list[OpResult], when_ms: int) -> list[Effect]:
        [res] = results
        if not self.office.in_office(wait.ctx):
            return wait.then(None, when_ms)
        if res.error not in (ZkError.NONE, ZkError.NO_NODE):
            return self.office.outbox.after(when_ms + READ_BACK_RETRY_MS,
                                            RetryTopicZNode(wait.ctx, wait.name, wait.then, self))
        return wait.then(res, when_ms)


Answer = Callable[[ErrorCode, "str | None", int], list[Effect]]


@dataclass(eq=False, repr=False)
class _Creation(Awaiting):
    name: str
    plan: TopicMetadata = field(repr=False)
    topics: TopicChanges = field(repr=False)


@dataclass(eq=False, repr=False)
class AwaitingTopicCreated(_Creation):
    """The fenced transaction creating topic ``name``'s znodes and its partitions' first states."""

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.topics._on_created(self, results, now_ms)


@dataclass(eq=False, repr=False)
class CreationReadBack(_Creation):
    """A creation ZooKeeper did not answer: topic ``name``'s znode read back says whether it was
    written, and by this creation (its topic id)."""

    def __call__(self, res: OpResult | None, when_ms: int) -> list[Effect]:
        ctx, plan, topics = self.ctx, self.plan, self.topics
        if res is None:
            return topics._created(ctx, plan, ZkError.BAD_VERSION, when_ms)
        if res.error is ZkError.NO_NODE:
            return topics._created(ctx, plan, ZkError.CONNECTION_LOSS, when_ms)   # not written: the client retries
        ours = znodes.TopicZNode.decode(res.data).topic_id == plan.topic_id
        return topics._created(ctx, plan, None if ours else ZkError.NODE_EXISTS, when_ms)


@dataclass(eq=False, repr=False)
class AwaitingDeletionRecordCheck(_Creation):
    """A creation found topic ``name`` there: the read of its deletion record says whether it is
    marked for deletion (the answer's message)."""

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.topics._created(self.ctx, self.plan, ZkError.NODE_EXISTS, now_ms,
                                    marked=results[0].error is ZkError.NONE)


@dataclass(eq=False, repr=False)
class AddPartitions(Awaiting):
    """CreatePartitions of topic ``name`` to ``count``, waiting its turn among the writes of the
    topic's znode; its answer lets the next one go."""

    name: str
    count: int
    manual: list[tuple[int, ...]] | None = field(repr=False)
    validate_only: bool
    then: Answer = field(repr=False)
    topics: TopicChanges = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.topics._add_partitions(self.ctx, self.name, self.count, self.manual, self.validate_only,
                                           self.answer, now_ms)

    def answer(self, code: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
        return self.then(code, message, when_ms) + self.ctx.topic_write_done(self.name, when_ms)


@dataclass(eq=False, repr=False)
class AwaitingPartitionsAdded(Awaiting):
    """The fenced transaction writing topic ``name``'s grown assignment and its new partitions."""

    name: str
    added: dict[int, tuple[int, ...]]
    states: dict[int, LeaderAndIsr] = field(repr=False)
    then: Answer = field(repr=False)
    topics: TopicChanges = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.topics._on_partitions_added(self, results, now_ms)


@dataclass(eq=False, repr=False)
class _TopicRead(Awaiting):
    name: str
    then: Callable[[OpResult | None, int], list[Effect]]
    topics: TopicChanges = field(repr=False)


@dataclass(eq=False, repr=False)
class AwaitingTopicZNode(_TopicRead):
    """The read of topic ``name``'s znode (after a write ZooKeeper did not answer); then ``then``."""

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.topics._on_topic_read(self, results, now_ms)


@dataclass(eq=False, repr=False)
class RetryTopicZNode(_TopicRead):
    """The timer after which topic ``name``'s znode is read again."""

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.topics._read_topic(self.ctx, self.name, now_ms, self.then)
