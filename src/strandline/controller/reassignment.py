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

from dataclasses import dataclass, field
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
        pending = {key for key, _ in started}
        answered = False

        def finisher(key: Key) -> Callable[[ErrorCode, str | None, int], list[Effect]]:
            def done(code: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
                nonlocal answered
                results[key] = (code, message)
                pending.discard(key)
                if pending or answered or not launched:
                    return []
                answered = True
                return respond(results, when_ms)
            return done

        launched = False
        effects: list[Effect] = []
        for key, target in started:
            if target is None:
                effects.extend(self.cancel(ctx, key, now_ms, finisher(key)))
            else:
                effects.extend(self.start(ctx, key, tuple(target), now_ms, finisher(key)))
        launched = True
        if not pending and not answered:
            answered = True
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

        def written(when_ms: int) -> list[Effect]:
            if ctx.topics.get(key[0]) is not topic:  # deleted meanwhile (perhaps made again)
                return done(ErrorCode.unknown_topic_or_partition, f"The topic '{key[0]}' was deleted", when_ms)
            ctx.reassigning[key] = (target, origin)
            effects: list[Effect] = [LogLine("info", f"Reassigning {key[0]}-{index}: {list(origin)} -> {list(target)} "
                                         f"(adding {list(adding)}, removing {list(removing)})")]
            effects += self._new_epoch(ctx, key, when_ms, lambda t: self.maybe_complete(ctx, [key], t))
            return effects + done(ErrorCode.none, None, when_ms)

        return self._write_assignment(ctx, topic, index, replicas, adding, removing, now_ms, written, done)

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
                if key in ctx.reassigning or key in ctx.completing:
                    continue
                replicas = topic.assignment.get(index, ())
                adding, removing = topic.adding.get(index, ()), topic.removing.get(index, ())
                target = tuple(r for r in replicas if r not in removing)
                origin = tuple(r for r in replicas if r not in adding)
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
        office = self.office

        def read(at_ms: int) -> list[Effect]:
            def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
                [res] = results
                topic = ctx.topics.get(name)
                if not office.in_office(ctx) or topic is None:
                    return ctx.topic_write_done(name, when_ms)
                if res.error is not ZkError.NONE:     # no answer again: read again, still in its turn
                    return office.outbox.after(when_ms + RETRY_MS, read)
                decoded = znodes.TopicZNode.decode(res.data, name)
                topic.assignment.update({p: tuple(r) for p, r in decoded.partitions.items()})
                topic.adding = {p: tuple(r) for p, r in (decoded.adding_replicas or {}).items() if r}
                topic.removing = {p: tuple(r) for p, r in (decoded.removing_replicas or {}).items() if r}
                return self.resume(ctx, when_ms, [topic]) + ctx.topic_write_done(name, when_ms)

            return [office.outbox.zk([GetData(znodes.TopicZNode.path(name))], on_read)]

        return ctx.queue_topic_write(name, read, now_ms, first=True)

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

        def respond(results: dict[Key, Outcome], when_ms: int) -> list[Effect]:
            finished = [key for key, (code, _) in results.items()
                        if code is not ErrorCode.none or key not in ctx.reassigning]
            logs = [LogLine("warning", f"/admin/reassign_partitions: {key[0]}-{key[1]} refused: {code.name}"
                                   + (f" ({message})" if message else ""))
                    for key, (code, message) in sorted(results.items()) if code is not ErrorCode.none]
            return logs + self.forget_requested(ctx, finished, when_ms)

        return self.alter(ctx, wanted, now_ms, respond)

    def _completer(self, ctx: ControllerContext, key: Key) -> Callable[[int], list[Effect]]:
        """``maybe_complete`` of ``key`` at a later time."""
        return lambda t: self.maybe_complete(ctx, [key], t)

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
        return [self.office.outbox.zk(self.office.fenced(ctx, [op]), lambda results, t: [],
                                          transaction=True)]

    # ------------------------------------------------------------------ steps

    def _finish(self, ctx: ControllerContext, key: Key, target: tuple[int, ...], now_ms: int) -> list[Effect]:
        """Assign TRS, move leadership into it in a new epoch with an ISR of target replicas only,
        stop the others, then record TRS alone."""
        topic = ctx.topics[key[0]]
        index = key[1]
        before = topic.assignment[index]
        leaving = [r for r in before if r not in target]
        ctx.completing[key] = before
        topic.assignment[index] = target
        blocked: list[bool] = []
        proposed: list[LeaderAndIsr] = []         # what this election decided, each time it read

        def decide(t: TopicMetadata, i: int, current: LeaderAndIsr, live: set[int],
                   dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
            isr = tuple(r for r in current.isr if r in target)
            if not isr:                 # no target replica holds what was acknowledged: wait
                blocked.append(True)
                return None
            eligible = [r for r in isr if r in live and r not in ctx.shutting_down]
            leader = current.leader if current.leader in isr and current.leader in live else \
                next(iter(eligible), -1)
            proposed.append(LeaderAndIsr(leader, current.leader_epoch + 1, isr, ctx.epoch, current.zk_version))
            return proposed[-1], False

        def elected(when_ms: int) -> list[Effect]:
            # written by this election: the state the controller holds is the last one it decided
            # (an election whose reads got no answer ends at once, its retry going on without us,
            # and the state held then may be one that ZooKeeper no longer has)
            state = topic.states.get(index)
            written = state is not None and bool(proposed) and \
                (state.leader, state.leader_epoch, state.isr) == \
                (proposed[-1].leader, proposed[-1].leader_epoch, proposed[-1].isr)
            if blocked or not written:
                # no state within the targets was written (none could be, or ZooKeeper did not
                # answer and the election goes on without us): nothing is removed yet
                topic.assignment[index] = before
                ctx.completing.pop(key, None)
                why = f"no replica of {list(target)} is in the ISR" if blocked else "its new state is not written yet"
                return [LogLine("warning", f"Reassignment of {key[0]}-{index} waits: {why}")] + \
                    self._retry(ctx, key, when_ms)

            def recorded(at_ms: int) -> list[Effect]:
                ctx.completing.pop(key, None)
                if ctx.reassigning.get(key, (None,))[0] == target:
                    ctx.reassigning.pop(key)
                return [LogLine("info", f"Reassignment of {key[0]}-{index} done: replicas {list(target)}")] + \
                    self.forget_requested(ctx, [key], at_ms)

            def failed(code: ErrorCode, message: str | None, at_ms: int) -> list[Effect]:
                ctx.completing.pop(key, None)
                return [LogLine("warning", f"Recording the reassignment of {key[0]}-{index} failed: {message}")] + \
                    self._retry(ctx, key, at_ms)

            effects = self._stop_replicas(ctx, key, leaving, when_ms)
            return effects + self._write_assignment(ctx, topic, index, target, (), (), when_ms, recorded, failed)

        return self.elections.elect(ctx, [key], set(), now_ms, elected, decide)

    def _retry(self, ctx: ControllerContext, key: Key, now_ms: int) -> list[Effect]:
        """Look again at a move whose end was put off (its targets left the ISR meanwhile, or
        ZooKeeper did not answer)."""
        office = self.office
        return office.outbox.after(now_ms + RETRY_MS, lambda t: self.maybe_complete(ctx, [key], t)
                                       if office.in_office(ctx) else [])

    def _new_epoch(self, ctx: ControllerContext, key: Key, now_ms: int,
                   then: Callable[[int], list[Effect]]) -> list[Effect]:
        def decide(t: TopicMetadata, i: int, current: LeaderAndIsr, live: set[int],
                   dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
            return LeaderAndIsr(current.leader, current.leader_epoch + 1, current.isr, ctx.epoch,
                                current.zk_version), False
        return self.elections.elect(ctx, [key], set(), now_ms, then, decide)

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
        name = topic.name
        office = self.office

        def write(at_ms: int) -> list[Effect]:
            if not office.in_office(ctx):
                return failed(ErrorCode.not_controller, "This broker is no longer the controller", at_ms) + \
                    ctx.topic_write_done(name, at_ms)
            if ctx.topics.get(name) is not topic:    # deleted while this write waited (perhaps made again)
                return failed(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' was deleted", at_ms) + \
                    ctx.topic_write_done(name, at_ms)
            # a partition whose move is ending keeps the replicas recorded for it until that end
            # is written: its narrowed assignment is the controller's alone until then
            assignment = {p: ctx.completing.get((name, p), r) for p, r in topic.assignment.items()}
            assignment[index] = replicas
            adding_all = {p: r for p, r in topic.adding.items() if p != index}
            removing_all = {p: r for p, r in topic.removing.items() if p != index}
            if adding:
                adding_all[index] = adding
            if removing:
                removing_all[index] = removing
            data = znodes.TopicZNode.encode(assignment, topic.topic_id, adding_all, removing_all)
            ops = office.fenced(ctx, [SetData(znodes.TopicZNode.path(name), data)])

            def on_result(results: list[OpResult], when_ms: int) -> list[Effect]:
                error = results[0].error
                if error is not ZkError.NONE:
                    code = ErrorCode.not_controller if error is ZkError.BAD_VERSION else ErrorCode.unknown_server_error
                    effects = failed(code, f"ZooKeeper error {error.name}", when_ms)
                    if error is ZkError.CONNECTION_LOSS:
                        effects += self._read_back(ctx, name, when_ms)
                else:
                    topic.assignment[index] = replicas
                    topic.adding, topic.removing = adding_all, removing_all
                    effects = then(when_ms)
                return effects + ctx.topic_write_done(name, when_ms)

            return [office.outbox.zk(ops, on_result, transaction=True)]

        return ctx.queue_topic_write(name, write, now_ms)


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
