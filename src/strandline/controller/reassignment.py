"""Moving a partition's replicas (SPEC CTL-11; Kafka 2.8's onPartitionReassignment, KIP-455).

With the original replicas ORS and the target TRS, the partition is first assigned RS = TRS + ORS
(adding TRS - ORS, removing ORS - TRS, both written to the topic znode so that a new controller
resumes the move; a move that replaces one in progress also keeps that one's replicas until it
ends), and its replicas are told so in a new leader epoch: the new ones start
fetching. Once every target replica is in the ISR, the partition is assigned TRS; leadership moves
into TRS in a new leader epoch if its leader is leaving, the ISR keeps only target replicas, the
removed replicas stop and delete their logs, and the topic znode holds TRS alone. Cancelling goes
back to ORS at once, stopping the replicas that were being added.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.controller.elections import PartitionElections
from strandline.controller.office import Office
from strandline.controller.context import Awaiting, ControllerContext
from strandline.coordination import znodes
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import LeaderAndIsr
from strandline.coordination.store import Delete, GetData, OpResult, SetData, ZkError
from strandline.protocol import control

Key = tuple[str, int]
RETRY_MS = 1000
Outcome = tuple[ErrorCode, "str | None"]


def _distinct(replicas: Iterable[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(replicas))


class PartitionReassignments:
    def __init__(self, office: Office, elections: PartitionElections) -> None:
        self.office = office
        self.elections = elections

    # ------------------------------------------------------------------ requests

    def validate(self, ctx: ControllerContext, key: Key, target: tuple[int, ...] | None) -> Outcome | None:
        """Why a reassignment (None: a cancellation) of ``key`` is refused, or None."""
        topic = ctx.topics.get(key[0])
        if topic is None or key[1] not in topic.assignment:
            return ErrorCode.unknown_topic_or_partition, None
        if key in ctx.completing:
            return ErrorCode.reassignment_in_progress, "The partition's previous move is completing; try again."
        if target is None:
            if key not in ctx.reassigning:
                return ErrorCode.no_reassignment_in_progress, None
            return None
        if not target:
            return ErrorCode.invalid_replica_assignment, "The replica list cannot be empty."
        if len(set(target)) != len(target):
            return ErrorCode.invalid_replica_assignment, "The replica list must not contain duplicate broker ids."
        unknown = sorted(set(target) - set(ctx.live_brokers))
        if unknown:
            return ErrorCode.invalid_replica_assignment, \
                f"The proposed assignment contains brokers that are not alive: {unknown}."
        return None

    def alter(self, ctx: ControllerContext, wanted: list[tuple[Key, tuple[int, ...] | None]], now_ms: int,
              respond: Callable[[dict[Key, Outcome], int], list[Effect]]) -> list[Effect]:
        """AlterPartitionReassignments: start (or replace, or cancel) each move; answer once each has
        been written to ZooKeeper, not when it ends."""
        results: dict[Key, Outcome] = {}
        started: list[tuple[Key, tuple[int, ...] | None]] = []
        for key, target in wanted:
            refused = self.validate(ctx, key, target)
            if refused is not None:
                results[key] = refused
            else:
                started.append((key, target))
        answer = AlterAnswer(results, {key for key, _ in started}, respond)
        effects: list[Effect] = []
        for key, target in started:
            if target is None:
                effects.extend(self.cancel(ctx, key, now_ms, answer.done_for(key)))
            else:
                effects.extend(self.start(ctx, key, tuple(target), now_ms, answer.done_for(key)))
        answer.launched = True
        if not answer.pending and not answer.answered:
            answer.answered = True
            effects.extend(respond(results, now_ms))
        return effects

    def ongoing(self, ctx: ControllerContext, wanted: list[Key] | None
                ) -> dict[Key, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """ListPartitionReassignments: (replicas, adding, removing) of each move in progress."""
        found = {}
        for key in sorted(ctx.reassigning):
            if wanted is not None and key not in wanted:
                continue
            topic = ctx.topics[key[0]]
            found[key] = (topic.assignment[key[1]], topic.adding.get(key[1], ()), topic.removing.get(key[1], ()))
        return found

    # ------------------------------------------------------------------ phases

    def start(self, ctx: ControllerContext, key: Key, target: tuple[int, ...], now_ms: int,
              done: Callable[[ErrorCode, str | None, int], list[Effect]]) -> list[Effect]:
        """Phase one: assign RS = TRS + ORS, record what is added and removed, and tell RS in a new
        leader epoch."""
        topic = ctx.topics[key[0]]
        index = key[1]
        current = topic.assignment[index]
        origin = ctx.reassigning[key][1] if key in ctx.reassigning else current
        if target == current and key not in ctx.reassigning:
            return done(ErrorCode.none, None, now_ms)
        # a move that replaces another keeps that one's replicas until it ends (they may be in the
        # ISR, even lead): they are removed with the others once the targets are in the ISR
        replicas = _distinct(target + origin + current)
        adding = tuple(r for r in target if r not in origin)
        removing = tuple(r for r in replicas if r not in target)

        written = MoveStarted(ctx, key, target, origin, adding, removing, topic, done, self)
        return self._write_assignment(ctx, topic, index, replicas, adding, removing, now_ms, written, done)

    def _move_started(self, step: MoveStarted, when_ms: int) -> list[Effect]:
        ctx, key, done = step.ctx, step.key, step.then
        if ctx.topics.get(key[0]) is not step.topic:  # deleted meanwhile (perhaps made again)
            return done(ErrorCode.unknown_topic_or_partition, f"The topic '{key[0]}' was deleted", when_ms)
        ctx.reassigning[key] = (step.target, step.origin)
        effects: list[Effect] = [LogLine("info", f"Reassigning {key[0]}-{key[1]}: {list(step.origin)} -> "
                                     f"{list(step.target)} (adding {list(step.adding)}, removing {list(step.removing)})")]
        effects += self._new_epoch(ctx, key, when_ms, CompleteMove(ctx, key, self))
        return effects + done(ErrorCode.none, None, when_ms)

    def maybe_complete(self, ctx: ControllerContext, keys: list[Key], now_ms: int) -> list[Effect]:
        """Phase two for each of ``keys`` whose target replicas are all in the ISR."""
        effects: list[Effect] = []
        for key in keys:
            move = ctx.reassigning.get(key)
            topic = ctx.topics.get(key[0])
            if move is None or topic is None or key in ctx.completing:
                continue
            state = topic.states.get(key[1])
            if state is not None and set(move[0]) <= set(state.isr):
                effects.extend(self._finish(ctx, key, move[0], now_ms))
        return effects

    def cancel(self, ctx: ControllerContext, key: Key, now_ms: int,
               done: Callable[[ErrorCode, str | None, int], list[Effect]]) -> list[Effect]:
        """Back to the original replicas at once: the ones being added stop."""
        origin = ctx.reassigning[key][1]
        topic = ctx.topics[key[0]]
        state = topic.states.get(key[1])
        if state is None or not set(origin) & set(state.isr):
            return done(ErrorCode.invalid_replica_assignment, f"Cannot cancel: no original replica of {list(origin)} "
                                                              "is in the ISR; reassign the partition instead", now_ms)
        ctx.reassigning[key] = (origin, origin)
        return self._finish(ctx, key, origin, now_ms) + done(ErrorCode.none, None, now_ms)

    def resume(self, ctx: ControllerContext, now_ms: int, topics: list[TopicMetadata] | None = None) -> list[Effect]:
        """Take over the moves the topic znodes record that this controller does not follow yet:
        all of them for a new controller, or those of ``topics`` read again after a write whose
        outcome ZooKeeper did not tell."""
        keys = []
        for topic in ctx.topics.values() if topics is None else topics:
            for index in sorted(set(topic.adding) | set(topic.removing)):
                key = (topic.name, index)
                if key in ctx.completing:
                    continue
                replicas = topic.assignment.get(index, ())
                adding, removing = topic.adding.get(index, ()), topic.removing.get(index, ())
                target = tuple(r for r in replicas if r not in removing)
                origin = tuple(r for r in replicas if r not in adding)
                # a move followed already is left alone, unless ZooKeeper records another: one
                # that replaced it with a write whose answer was lost (its targets were never told)
                if key in ctx.reassigning and ctx.reassigning[key][0] == target:
                    continue
                ctx.reassigning[key] = (target, origin)
                keys.append(key)
        if not keys:
            return []
        # the replicas may never have heard of RS (the last controller may have died first): tell
        # them again in a new leader epoch, as phase one does, then look whether the move can end
        effects: list[Effect] = [LogLine("info", f"Resuming the reassignment of {len(keys)} partition(s)")]
        for key in keys:
            effects += self._new_epoch(ctx, key, now_ms, self._completer(ctx, key))
        return effects

    def _read_back(self, ctx: ControllerContext, name: str, now_ms: int) -> list[Effect]:
        """A topic znode write got no answer (it may have been applied): read the znode before the
        topic's next write (none may be made from a view without it) and follow whatever move it
        records."""
        return ctx.queue_topic_write(name, ReadTopicBack(ctx, name, self), now_ms, first=True)

    def _on_read_back(self, ctx: ControllerContext, name: str, results: list[OpResult], when_ms: int) -> list[Effect]:
        office = self.office
        [res] = results
        topic = ctx.topics.get(name)
        if not office.in_office(ctx) or topic is None:
            return ctx.topic_write_done(name, when_ms)
        if res.error is not ZkError.NONE:     # no answer again: read again, still in its turn
            return office.outbox.after(when_ms + RETRY_MS, ReadTopicBack(ctx, name, self))
        decoded = znodes.TopicZNode.decode(res.data, name)
        # a partition whose move is ending keeps the target its end narrowed it to: the znode may
        # not hold it yet (that write waits its turn behind this read), and the replicas the move
        # took out must not be told the partition's state again (nor join its ISR)
        topic.assignment.update({p: tuple(r) for p, r in decoded.partitions.items() if (name, p) not in ctx.completing})
        topic.adding = {p: tuple(r) for p, r in (decoded.adding_replicas or {}).items() if r}
        topic.removing = {p: tuple(r) for p, r in (decoded.removing_replicas or {}).items() if r}
        return self.resume(ctx, when_ms, [topic]) + ctx.topic_write_done(name, when_ms)

    # ------------------------------------------------------------------ /admin/reassign_partitions

    def on_node_changed(self, moves: dict[Key, tuple[int, ...]] | None, now_ms: int) -> list[Effect]:
        """``/admin/reassign_partitions`` was created or changed (None: it is gone)."""
        ctx = self.office.ctx
        if ctx is None or not ctx.ready or not self.office.in_office(ctx):
            return []          # a controller reads it when it takes office
        if moves is None:
            ctx.zk_requested = {}
            return []
        return self.on_requested(ctx, moves, now_ms)

    def read_requested(self, ctx: ControllerContext, now_ms: int) -> list[Effect]:
        """Read ``/admin/reassign_partitions`` (a new controller does) and start the moves it asks for."""
        return [self.office.outbox.zk([GetData(znodes.ReassignPartitionsZNode.path())],
                                      AwaitingReassignPartitionsZNode(ctx, self))]

    def _on_requested_read(self, ctx: ControllerContext, results: list[OpResult], when_ms: int) -> list[Effect]:
        [res] = results
        if not self.office.in_office(ctx) or res.error is ZkError.NO_NODE:
            return []
        if res.error is not ZkError.NONE:          # no answer: read it again
            return self.office.outbox.after(when_ms + RETRY_MS, RetryReassignPartitionsZNode(ctx, self))
        try:
            moves = znodes.ReassignPartitionsZNode.decode(res.data)
        except ValueError as exc:
            return [LogLine("warning", f"Ignoring {znodes.ReassignPartitionsZNode.path()}: {exc}")]
        return self.on_requested(ctx, moves, when_ms)

    def on_requested(self, ctx: ControllerContext, moves: dict[Key, tuple[int, ...]], now_ms: int) -> list[Effect]:
        """The moves ``/admin/reassign_partitions`` lists (older tools write it): each not yet under
        way starts; one refused, or already done, leaves the node; the node goes once it is empty."""
        ctx.zk_requested = dict(moves)
        wanted: list[tuple[Key, tuple[int, ...] | None]] = [
            (key, target) for key, target in moves.items()
            if key not in ctx.reassigning or ctx.reassigning[key][0] != target]
        if not wanted:
            return []

        return self.alter(ctx, wanted, now_ms, partial(self._requested_answered, ctx))

    def _requested_answered(self, ctx: ControllerContext, results: dict[Key, Outcome], when_ms: int) -> list[Effect]:
        """The moves /admin/reassign_partitions asked for were written, or refused."""
        finished = [key for key, (code, _) in results.items()
                    if code is not ErrorCode.none or key not in ctx.reassigning]
        logs = [LogLine("warning", f"/admin/reassign_partitions: {key[0]}-{key[1]} refused: {code.name}"
                               + (f" ({message})" if message else ""))
                for key, (code, message) in sorted(results.items()) if code is not ErrorCode.none]
        return logs + self.forget_requested(ctx, finished, when_ms)

    def _completer(self, ctx: ControllerContext, key: Key) -> Callable[[int], list[Effect]]:
        """``maybe_complete`` of ``key`` at a later time."""
        return CompleteMove(ctx, key, self)

    def forget_requested(self, ctx: ControllerContext, keys: list[Key], now_ms: int) -> list[Effect]:
        """Take ``keys`` out of ``/admin/reassign_partitions`` (delete it once empty)."""
        done = [key for key in keys if key in ctx.zk_requested]
        if not done or not self.office.in_office(ctx):
            return []
        for key in done:
            del ctx.zk_requested[key]
        path = znodes.ReassignPartitionsZNode.path()
        op: SetData | Delete
        if ctx.zk_requested:
            op = SetData(path, znodes.ReassignPartitionsZNode.encode(ctx.zk_requested))
        else:
            op = Delete(path)
        return [self.office.outbox.zk(self.office.fenced(ctx, [op]),
                                      ReassignPartitionsZNodeWritten(ctx, sorted(ctx.zk_requested)), transaction=True)]

    # ------------------------------------------------------------------ steps

    def _finish(self, ctx: ControllerContext, key: Key, target: tuple[int, ...], now_ms: int) -> list[Effect]:
        """Assign TRS, move leadership into it in a new epoch with an ISR of target replicas only,
        stop the others, then record TRS alone."""
        topic = ctx.topics[key[0]]
        index = key[1]
        before = topic.assignment[index]
        ctx.completing[key] = before
        topic.assignment[index] = target
        end = MoveEnd(ctx, key, target, before, topic, self)
        return self.elections.elect(ctx, [key], set(), now_ms, end.elected, end.decide)

    def _move_end_elected(self, end: MoveEnd, when_ms: int) -> list[Effect]:
        ctx, key, topic, index = end.ctx, end.key, end.topic, end.key[1]
        # written by this election: the state the controller holds is the last one it decided
        # (an election whose reads got no answer ends at once, its retry going on without us,
        # and the state held then may be one that ZooKeeper no longer has)
        state = topic.states.get(index)
        proposed = end.proposed
        written = state is not None and bool(proposed) and \
            (state.leader, state.leader_epoch, state.isr) == \
            (proposed[-1].leader, proposed[-1].leader_epoch, proposed[-1].isr)
        if end.blocked or not written:
            # no state within the targets was written (none could be, or ZooKeeper did not
            # answer and the election goes on without us): nothing is removed yet
            topic.assignment[index] = end.before
            ctx.completing.pop(key, None)
            why = f"no replica of {list(end.target)} is in the ISR" if end.blocked else \
                "its new state is not written yet"
            return [LogLine("warning", f"Reassignment of {key[0]}-{index} waits: {why}")] + \
                self._retry(ctx, key, when_ms)
        leaving = [r for r in end.before if r not in end.target]
        effects = self._stop_replicas(ctx, key, leaving, when_ms)
        return effects + self._write_assignment(ctx, topic, index, end.target, (), (), when_ms, end.recorded,
                                                end.failed)

    def _retry(self, ctx: ControllerContext, key: Key, now_ms: int) -> list[Effect]:
        """Look again at a move whose end was put off (its targets left the ISR meanwhile, or
        ZooKeeper did not answer)."""
        return self.office.outbox.after(now_ms + RETRY_MS, RetryCompletion(ctx, key, self))

    def _new_epoch(self, ctx: ControllerContext, key: Key, now_ms: int,
                   then: Callable[[int], list[Effect]]) -> list[Effect]:
        return self.elections.elect(ctx, [key], set(), now_ms, then, NewLeaderEpoch(ctx))

    def _stop_replicas(self, ctx: ControllerContext, key: Key, brokers: list[int], now_ms: int) -> list[Effect]:
        """StopReplica with deletion to the live brokers of ``brokers``: their replica is gone."""
        channel = self.office.channel
        effects: list[Effect] = []
        for broker_id in sorted(set(brokers)):
            if broker_id in ctx.live_brokers:
                effects.extend(channel.send(ctx, broker_id, control.STOP_REPLICA,
                                            channel.stop_replica_body(ctx, [key], True), now_ms))
        return effects

    def _write_assignment(self, ctx: ControllerContext, topic: TopicMetadata, index: int, replicas: tuple[int, ...],
                          adding: tuple[int, ...], removing: tuple[int, ...], now_ms: int,
                          then: Callable[[int], list[Effect]],
                          failed: Callable[[ErrorCode, str | None, int], list[Effect]]) -> list[Effect]:
        """Write the topic znode with ``index`` assigned ``replicas`` (and what is being added and
        removed), fenced by the controller epoch; then update the context. The writes of one topic
        go one at a time, each from the assignment then current, so that none undoes another."""
        write = WriteAssignment(ctx, topic.name, index, replicas, adding, removing, topic, then, failed, self)
        return ctx.queue_topic_write(topic.name, write, now_ms)

    def _write(self, w: WriteAssignment, at_ms: int) -> list[Effect]:
        office, ctx, name, topic, index, failed = self.office, w.ctx, w.name, w.topic, w.index, w.failed
        if not office.in_office(ctx):
            return failed(ErrorCode.not_controller, "This broker is no longer the controller", at_ms) + \
                ctx.topic_write_done(name, at_ms)
        if ctx.topics.get(name) is not topic:    # deleted while this write waited (perhaps made again)
            return failed(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' was deleted", at_ms) + \
                ctx.topic_write_done(name, at_ms)
        # a partition whose move is ending keeps the replicas recorded for it until that end
        # is written: its narrowed assignment is the controller's alone until then
        assignment = {p: ctx.completing.get((name, p), r) for p, r in topic.assignment.items()}
        assignment[index] = w.replicas
        adding_all = {p: r for p, r in topic.adding.items() if p != index}
        removing_all = {p: r for p, r in topic.removing.items() if p != index}
        if w.adding:
            adding_all[index] = w.adding
        if w.removing:
            removing_all[index] = w.removing
        data = znodes.TopicZNode.encode(assignment, topic.topic_id, adding_all, removing_all)
        ops = office.fenced(ctx, [SetData(znodes.TopicZNode.path(name), data)])
        return [office.outbox.zk(ops, AwaitingAssignmentWrite(ctx, name, index, w.replicas, adding_all, removing_all,
                                                              w, self), transaction=True)]

    def _on_assignment_written(self, wait: AwaitingAssignmentWrite, results: list[OpResult],
                               when_ms: int) -> list[Effect]:
        ctx, name, w = wait.ctx, wait.name, wait.write
        error = results[0].error
        if error is not ZkError.NONE:
            code = ErrorCode.not_controller if error is ZkError.BAD_VERSION else ErrorCode.unknown_server_error
            effects = w.failed(code, f"ZooKeeper error {error.name}", when_ms)
            if error is ZkError.CONNECTION_LOSS:
                effects += self._read_back(ctx, name, when_ms)
        else:
            w.topic.assignment[wait.index] = wait.replicas
            w.topic.adding, w.topic.removing = wait.adding_all, wait.removing_all
            effects = w.then(when_ms)
        return effects + ctx.topic_write_done(name, when_ms)


Done = Callable[[ErrorCode, "str | None", int], list[Effect]]


@dataclass(eq=False)
class AlterAnswer:
    """AlterPartitionReassignments' answer, once every move started (``launched``) was written or
    refused."""

    results: dict[Key, Outcome] = field(repr=False)
    pending: set[Key]
    respond: Callable[[dict[Key, Outcome], int], list[Effect]] = field(repr=False)
    answered: bool = False
    launched: bool = False

    def done_for(self, key: Key) -> Done:
        return partial(self.done, key)

    def done(self, key: Key, code: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
        self.results[key] = (code, message)
        self.pending.discard(key)
        if self.pending or self.answered or not self.launched:
            return []
        self.answered = True
        return self.respond(self.results, when_ms)


@dataclass(eq=False, repr=False)
class MoveStarted(Awaiting):
    """Phase one of moving ``key`` to ``target`` is written: the replicas hear of it in a new leader epoch."""

    key: Key
    target: tuple[int, ...]
    origin: tuple[int, ...] = field(repr=False)
    adding: tuple[int, ...] = field(repr=False)
    removing: tuple[int, ...] = field(repr=False)
    topic: TopicMetadata = field(repr=False)
    then: Done = field(repr=False)
    reassignments: PartitionReassignments = field(repr=False)

    def __call__(self, when_ms: int) -> list[Effect]:
        return self.reassignments._move_started(self, when_ms)


@dataclass(eq=False, repr=False)
class CompleteMove(Awaiting):
    """Look whether the move of ``key`` can end (its targets all in the ISR)."""

    key: Key
    reassignments: PartitionReassignments = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.reassignments.maybe_complete(self.ctx, [self.key], now_ms)


@dataclass(eq=False, repr=False)
class RetryCompletion(Awaiting):
    """The timer after which a move of ``key`` whose end was put off is looked at again."""

    key: Key
    reassignments: PartitionReassignments = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        reassignments = self.reassignments
        return reassignments.maybe_complete(self.ctx, [self.key], now_ms) \
            if reassignments.office.in_office(self.ctx) else []


@dataclass(eq=False)
class NewLeaderEpoch:
    """The election rule of a move's phase one: the same leader and ISR in a new leader epoch."""

    ctx: ControllerContext = field(repr=False)

    def __call__(self, t: TopicMetadata, i: int, current: LeaderAndIsr, live: set[int],
                 dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
        return dataclasses.replace(current, leader_epoch=current.leader_epoch + 1,
                                   controller_epoch=self.ctx.epoch), False


@dataclass(eq=False)
class MoveEnd:
    """Phase two of moving ``key`` to ``target``: the election into the targets (:meth:`decide`),
    then (:meth:`elected`) the write of the target replicas alone."""

    ctx: ControllerContext = field(repr=False)
    key: Key
    target: tuple[int, ...]
    before: tuple[int, ...] = field(repr=False)
    topic: TopicMetadata = field(repr=False)
    reassignments: PartitionReassignments = field(repr=False)
    blocked: list[bool] = field(default_factory=list, repr=False)
    proposed: list[LeaderAndIsr] = field(default_factory=list, repr=False)   # what it decided, each time it read

    def decide(self, t: TopicMetadata, i: int, current: LeaderAndIsr, live: set[int],
               dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
        isr = tuple(r for r in current.isr if r in self.target)
        if not isr:                 # no target replica holds what was acknowledged: wait
            self.blocked.append(True)
            return None
        eligible = [r for r in isr if r in live and r not in self.ctx.shutting_down]
        leader = current.leader if current.leader in isr and current.leader in live else \
            next(iter(eligible), -1)
        self.proposed.append(LeaderAndIsr(leader, current.leader_epoch + 1, isr, self.ctx.epoch,
                                          current.zk_version,
                                          tuple(r for r in current.elr if r in self.target and r not in isr),
                                          tuple(r for r in current.last_known_elr if r in self.target)))
        return self.proposed[-1], False

    def elected(self, when_ms: int) -> list[Effect]:
        return self.reassignments._move_end_elected(self, when_ms)

    def recorded(self, at_ms: int) -> list[Effect]:
        ctx, key = self.ctx, self.key
        ctx.completing.pop(key, None)
        if ctx.reassigning.get(key, (None,))[0] == self.target:
            ctx.reassigning.pop(key)
        return [LogLine("info", f"Reassignment of {key[0]}-{key[1]} done: replicas {list(self.target)}")] + \
            self.reassignments.forget_requested(ctx, [key], at_ms)

    def failed(self, code: ErrorCode, message: str | None, at_ms: int) -> list[Effect]:
        ctx, key = self.ctx, self.key
        ctx.completing.pop(key, None)
        return [LogLine("warning", f"Recording the reassignment of {key[0]}-{key[1]} failed: {message}")] + \
            self.reassignments._retry(ctx, key, at_ms)


@dataclass(eq=False, repr=False)
class WriteAssignment(Awaiting):
    """Topic ``name``'s znode to write with partition ``index`` assigned ``replicas``, in its turn
    among the writes of that znode; then ``then(now_ms)``."""

    name: str
    index: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...] = field(repr=False)
    removing: tuple[int, ...] = field(repr=False)
    topic: TopicMetadata = field(repr=False)
    then: Callable[[int], list[Effect]]
    failed: Done = field(repr=False)
    reassignments: PartitionReassignments = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.reassignments._write(self, now_ms)


@dataclass(eq=False, repr=False)
class AwaitingAssignmentWrite(Awaiting):
    """The fenced write of topic ``name``'s znode with partition ``index`` assigned ``replicas``."""

    name: str
    index: int
    replicas: tuple[int, ...]
    adding_all: dict[int, tuple[int, ...]] = field(repr=False)
    removing_all: dict[int, tuple[int, ...]] = field(repr=False)
    write: WriteAssignment = field(repr=False)
    reassignments: PartitionReassignments = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.reassignments._on_assignment_written(self, results, now_ms)


@dataclass(eq=False, repr=False)
class ReadTopicBack(Awaiting):
    """A write of topic ``name``'s znode got no answer: its read, first among the topic's next
    writes (or again, on a timer, when the read got no answer either)."""

    name: str
    reassignments: PartitionReassignments = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return [self.reassignments.office.outbox.zk([GetData(znodes.TopicZNode.path(self.name))],
                                                    AwaitingTopicReadBack(self.ctx, self.name, self.reassignments))]


@dataclass(eq=False, repr=False)
class AwaitingTopicReadBack(Awaiting):
    """The read of topic ``name``'s znode after a write that got no answer."""

    name: str
    reassignments: PartitionReassignments = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.reassignments._on_read_back(self.ctx, self.name, results, now_ms)


@dataclass(eq=False, repr=False)
class ReassignPartitionsZNodeWritten(Awaiting):
    """The fenced write of /admin/reassign_partitions with the moves ``remaining`` (none: its delete)."""

    remaining: list[Key]

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return []


@dataclass(eq=False, repr=False)
class AwaitingReassignPartitionsZNode(Awaiting):
    """The read of /admin/reassign_partitions by a controller that just took office."""

    reassignments: PartitionReassignments = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.reassignments._on_requested_read(self.ctx, results, now_ms)


@dataclass(eq=False, repr=False)
class RetryReassignPartitionsZNode(Awaiting):
    """The timer after which /admin/reassign_partitions, not answered, is read again."""

    reassignments: PartitionReassignments = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.reassignments.read_requested(self.ctx, now_ms)
