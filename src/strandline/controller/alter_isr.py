"""AlterIsr v0 (KIP-497) on the controller: Kafka 2.8's ``KafkaController.processAlterIsr``.

A leader of inter-broker protocol 2.7 or later proposes its ISR changes here instead of writing
the partition state znode itself. The request is refused whole when this broker is not the
controller (NOT_CONTROLLER; also while a new controller still reads the cluster) or when the named
broker is not registered with that broker epoch (STALE_BROKER_EPOCH, what a forged or late
request gets). Each partition is then answered (the last proposal of a partition counts):

- UNKNOWN_TOPIC_OR_PARTITION for a partition the controller does not know;
- FENCED_LEADER_EPOCH for a leader epoch older than the controller's;
- the current state when it already is the one proposed (leader, leader epoch and ISR; a leader
  that asks again after a lost answer learns it was applied);
- FENCED_LEADER_EPOCH too when the proposer does not lead the partition. Kafka 2.8 has no such
  check, because a leader change always moves the leader epoch on; but a topic deleted and made
  again under the same name starts its epochs and versions again, and a late proposal of the old
  topic's leader must not land on the new topic;
- otherwise the new state (this broker as leader, the proposed epoch and ISR, the controller's
  epoch) is written with compare-and-set on the version the leader named (the partition epoch),
  in a transaction that checks ``/controller_epoch``: written, the answer is the state with its
  new version; a version that moved is INVALID_UPDATE_VERSION (the leader's view is stale: the
  LeaderAndIsr of whoever wrote tells it the truth). A write whose outcome ZooKeeper did not say
  is settled by reading the state back; a controller that lost its office answers
  UNKNOWN_SERVER_ERROR, which the leader retries.

Then every live broker is sent the partitions' states (UpdateMetadata), and a reassignment
waiting for its new replicas to join the ISR may end.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.controller.candidacy import CONTROLLER_RETRY_MS
from strandline.controller.context import Awaiting
from strandline.controller.elections import elr_policy, populate_elr
from strandline.controller.office import Office
from strandline.controller.reassignment import PartitionReassignments
from strandline.coordination import zk_layout, znodes
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.store import GetData, OpResult, ZkError
from strandline.coordination.znodes import LeaderAndIsr
from strandline.protocol import control

Key = tuple[str, int]
#: a partition's proposal: (leader epoch, new ISR, the state's version it was made against)
Proposal = tuple[int, tuple[int, ...], int]
#: ``respond(body, now_ms)``: the AlterIsr response body (fields as kio's, ``name`` per topic)
Respond = Callable[[dict[str, Any], int], list[Effect]]


def proposals_of(request: Any) -> dict[Key, Proposal]:
    """The proposals of a decoded AlterIsr v0 request, one per partition (the last named)."""
    return {(topic.name, p.partition_index): (p.leader_epoch, tuple(p.new_isr), p.current_isr_version)
            for topic in request.topics for p in topic.partitions}


def _top(error: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "topics": []}


def _same(a: LeaderAndIsr, b: LeaderAndIsr) -> bool:
    """Kafka's ``LeaderAndIsr.equalsIgnoreZk``: leader, leader epoch and ISR."""
    return (a.leader, a.leader_epoch, tuple(a.isr)) == (b.leader, b.leader_epoch, tuple(b.isr))


class AlterIsrs:
    def __init__(self, office: Office, reassignments: PartitionReassignments) -> None:
        self.office = office
        self.reassignments = reassignments
        # counts for the broker's metrics: ISRs written for leaders, and proposals refused
        self.isr_changes_written = 0
        self.proposals_refused = 0

    def alter_isr(self, broker_id: int, broker_epoch: int, proposals: dict[Key, Proposal], respond: Respond,
                  now_ms: int) -> list[Effect]:
        ctx = self.office.ctx
        if ctx is None or not ctx.ready:
            return respond(_top(ErrorCode.not_controller), now_ms)
        if broker_id not in ctx.live_brokers or ctx.broker_epochs.get(broker_id) != broker_epoch:
            return respond(_top(ErrorCode.stale_broker_epoch), now_ms)
        run = AlterIsrRun(ctx, broker_id, proposals, respond, self)
        effects: list[Effect] = []
        for key, (leader_epoch, isr, version) in proposals.items():
            topic = ctx.topics.get(key[0])
            current = topic.states.get(key[1]) if topic is not None and key[1] in topic.assignment else None
            if topic is None or current is None:
                run.answers[key] = ErrorCode.unknown_topic_or_partition
            elif leader_epoch < current.leader_epoch:
                run.answers[key] = ErrorCode.fenced_leader_epoch
            elif _same(LeaderAndIsr(broker_id, leader_epoch, isr), current):
                run.answers[key] = current
            elif broker_id != current.leader:
                run.answers[key] = ErrorCode.fenced_leader_epoch
            else:
                state = LeaderAndIsr(broker_id, leader_epoch, isr, ctx.epoch, version)
                policy = elr_policy(ctx, self.office.config, topic, key[1])
                if policy is not None:      # KIP-966: the ELR beside the ISR proposed
                    elr, last_known = populate_elr(topic.assignment[key[1]], current, isr, policy)
                    state = dataclasses.replace(state, elr=elr, last_known_elr=last_known)
                run.writing[key] = (topic, current, state)
        for key, (topic, current, state) in list(run.writing.items()):
            effects.append(self._write(run, key, topic, current, state))
        return effects + self._maybe_done(run, now_ms)

    def _write(self, run: AlterIsrRun, key: Key, topic: TopicMetadata, before: LeaderAndIsr,
               state: LeaderAndIsr) -> Effect:
        ops = self.office.fenced(run.ctx, [zk_layout.update_partition_state(key[0], key[1], state)])
        return self.office.outbox.zk(ops, AwaitingAlterIsrWrite(run.ctx, key, run, self), transaction=True)

    def _on_written(self, run: AlterIsrRun, key: Key, results: list[OpResult], now_ms: int) -> list[Effect]:
        if not self.office.in_office(run.ctx):
            return self._answer(run, key, ErrorCode.unknown_server_error, now_ms)
        _, _, state = run.writing[key]
        if results[-1].error is ZkError.NONE:
            return self._written(run, key, dataclasses.replace(state, zk_version=results[-1].version), now_ms)
        # the state's version moved, or the controller epoch did, or ZooKeeper did not say: read
        return self._read_back(run, key, now_ms)

    def _read_back(self, run: AlterIsrRun, key: Key, now_ms: int) -> list[Effect]:
        """A write failed or its outcome is unknown: the state and /controller_epoch decide."""
        reads = [GetData(znodes.TopicPartitionStateZNode.path(*key))]
        if run.ctx.epoch_version is not None:
            reads.append(GetData(znodes.ControllerEpochZNode.path()))
        return [self.office.outbox.zk(reads, AwaitingAlterIsrReadBack(run.ctx, key, run, self))]

    def _on_read_back(self, run: AlterIsrRun, key: Key, results: list[OpResult], now_ms: int) -> list[Effect]:
        office, ctx = self.office, run.ctx
        if not office.in_office(ctx):
            return self._answer(run, key, ErrorCode.unknown_server_error, now_ms)
        res = results[0]
        if len(results) > 1 and results[1].error is ZkError.NONE and results[1].version != ctx.epoch_version:
            # deposed (Kafka's ControllerMovedException): the leader asks the next controller
            epoch = znodes.ControllerEpochZNode.decode(results[1].data)
            return office.resign(f"the controller epoch is now {epoch}") + \
                self._answer(run, key, ErrorCode.unknown_server_error, now_ms)
        if res.error is ZkError.NO_NODE:
            return self._answer(run, key, ErrorCode.unknown_topic_or_partition, now_ms)
        if any(r.error is not ZkError.NONE for r in results):
            return office.outbox.after(now_ms + CONTROLLER_RETRY_MS, RetryAlterIsrReadBack(ctx, key, run, self))
        _, _, state = run.writing[key]
        held = znodes.TopicPartitionStateZNode.decode(res.data, res.version)
        if _same(held, state) and held.controller_epoch == state.controller_epoch \
                and held.zk_version == state.zk_version + 1:
            return self._written(run, key, held, now_ms)
        if held.zk_version == state.zk_version:      # not applied: the leader proposes it again
            return self._answer(run, key, ErrorCode.unknown_server_error, now_ms)
        return self._answer(run, key, ErrorCode.invalid_update_version, now_ms)

    def _written(self, run: AlterIsrRun, key: Key, state: LeaderAndIsr, now_ms: int) -> list[Effect]:
        topic, before, _ = run.writing[key]
        ctx = run.ctx
        if ctx.topics.get(key[0]) is topic:
            cached = topic.states.get(key[1])
            if cached is None or cached.zk_version < state.zk_version:
                topic.states[key[1]] = state
        self.isr_changes_written += 1
        shrunk = len(state.isr) < len(before.isr)
        elr = f", ELR {list(state.elr)}" if state.elr or before.elr else ""
        line = LogLine("info", f"ISR of {key[0]}-{key[1]} changed from {list(before.isr)} to {list(state.isr)}{elr} "
                               f"(leader {state.leader}, epoch {state.leader_epoch}, version {state.zk_version}) "
                               f"as its leader proposed (AlterIsr)",
                       "isr_shrink" if shrunk else "isr_expand" if len(state.isr) > len(before.isr) else None, key)
        return [line] + self._answer(run, key, state, now_ms)

    def _answer(self, run: AlterIsrRun, key: Key, answer: ErrorCode | LeaderAndIsr, now_ms: int) -> list[Effect]:
        if key in run.answers:
            return []
        run.answers[key] = answer
        return self._maybe_done(run, now_ms)

    def _maybe_done(self, run: AlterIsrRun, now_ms: int) -> list[Effect]:
        """Once every partition is answered: tell every live broker, answer, end what may end."""
        if run.done or len(run.answers) < len(run.proposals):
            return []
        run.done = True
        ctx, office = run.ctx, self.office
        effects: list[Effect] = []
        refused = [(k, a) for k, a in run.answers.items() if isinstance(a, ErrorCode)]
        self.proposals_refused += len(refused)
        if refused:
            effects.append(LogLine("info", f"AlterIsr of broker {run.broker_id} refused for " + ", ".join(
                f"{k[0]}-{k[1]} ({a.name.upper()})" for k, a in refused)))
        if office.in_office(ctx):
            parts = [(ctx.topics[k[0]], k[1]) for k in run.proposals
                     if k[0] in ctx.topics and k[1] in ctx.topics[k[0]].states]
            if parts:
                body = office.channel.update_metadata_body(ctx, parts)
                for broker_id in sorted(ctx.live_brokers):
                    effects.extend(office.channel.send(ctx, broker_id, control.UPDATE_METADATA, body, now_ms))
        effects.extend(run.respond(self._body(run), now_ms))
        if office.in_office(ctx):
            written = [k for k, a in run.answers.items() if isinstance(a, LeaderAndIsr) and k in ctx.reassigning]
            if written:
                effects.extend(self.reassignments.maybe_complete(ctx, written, now_ms))
        return effects

    @staticmethod
    def _body(run: AlterIsrRun) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (name, index) in run.proposals:          # grouped by topic, in the order asked
            answer = run.answers[(name, index)]
            if isinstance(answer, ErrorCode):
                entry = {"partition_index": index, "error_code": answer, "leader_id": 0, "leader_epoch": 0,
                         "isr": [], "current_isr_version": 0}
            else:
                entry = {"partition_index": index, "error_code": ErrorCode.none, "leader_id": answer.leader,
                         "leader_epoch": answer.leader_epoch, "isr": list(answer.isr),
                         "current_isr_version": answer.zk_version}
            topics.setdefault(name, []).append(entry)
        return {"throttle_time": 0, "error_code": ErrorCode.none,
                "topics": [{"name": name, "partitions": ps} for name, ps in topics.items()]}


@dataclass(eq=False, repr=False)
class AlterIsrRun(Awaiting):
    """One AlterIsr request of broker ``broker_id`` being decided: the answers so far and the
    partitions being written ((topic, state before, state written))."""

    broker_id: int
    proposals: dict[Key, Proposal]
    respond: Respond = field(repr=False)
    owner: AlterIsrs = field(repr=False)
    answers: dict[Key, ErrorCode | LeaderAndIsr] = field(default_factory=dict, repr=False)
    writing: dict[Key, tuple[TopicMetadata, LeaderAndIsr, LeaderAndIsr]] = field(default_factory=dict, repr=False)
    done: bool = field(default=False, repr=False)


@dataclass(eq=False, repr=False)
class AwaitingAlterIsrWrite(Awaiting):
    """The fenced write of the ISR broker ``run.broker_id`` proposed for ``key``."""

    key: Key
    run: AlterIsrRun = field(repr=False)
    owner: AlterIsrs = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.owner._on_written(self.run, self.key, results, now_ms)


@dataclass(eq=False, repr=False)
class AwaitingAlterIsrReadBack(Awaiting):
    """The read of ``key``'s state after a write of it whose outcome ZooKeeper did not say."""

    key: Key
    run: AlterIsrRun = field(repr=False)
    owner: AlterIsrs = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.owner._on_read_back(self.run, self.key, results, now_ms)


@dataclass(eq=False, repr=False)
class RetryAlterIsrReadBack(Awaiting):
    """The timer after which ``key``'s state is read again (ZooKeeper did not answer)."""

    key: Key
    run: AlterIsrRun = field(repr=False)
    owner: AlterIsrs = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        if not self.owner.office.in_office(self.ctx):
            return self.owner._answer(self.run, self.key, ErrorCode.unknown_server_error, now_ms)
        return self.owner._read_back(self.run, self.key, now_ms)
