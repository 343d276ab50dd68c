"""Unclean recovery (KIP-966's second part): a partition whose ISR and ELR are both empty.

With eligible leader replicas, a partition whose every eligible replica came back from an unclean
shutdown (a crash, a power loss, a lost disk) is left with an empty ISR and ELR and no leader; its
last known ELR names the replicas that were eligible once. ``unclean.recovery.strategy`` (broker
or topic key) says what the controller does then:

- ``Balanced`` (the default): it waits until every replica is registered again, asks each for
  its log (GetReplicaLogInfo: the leader epoch of its last batch and its log end offset) and,
  once each answered, elects the one with the newest epoch, then the longest log (ties: the
  first in replica order), as the only member of the ISR. A replica that wrote in a later epoch
  holds what every earlier leader committed before it took over; among those, the longest log
  holds the most. A replica that does not answer leaves the partition offline until the next
  try. (KIP-966's Balanced waits for the last known ELR only; see :func:`recovery_candidates`.)
- ``Aggressive``: the same question, and the election among those that answer, as soon as one
  does, whoever is back.
- ``None``: the partition waits offline for an operator's unclean election.

``unclean.leader.election.enable=true`` comes first: the offline rule then elects any live replica
at once, as before. A recovery is an unclean election: counted and logged as one, with what each
replica answered. Each try re-reads the partition's state znode and writes the new state with
compare-and-set (:meth:`PartitionElections.elect` with :class:`RecoveryDecision`), so a partition
that found a leader meanwhile is left alone. A try that cannot elect is made again
:data:`RECOVERY_RETRY_MS` later while the partition still needs it and this controller is in
office; a broker change tries again at once (its elections read the partition).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core import api_version
from strandline.core.effects import Effect, LogLine
from strandline.controller.context import Awaiting, ControllerContext
from strandline.controller.elections import Key, PartitionElections
from strandline.controller.office import Office
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import LeaderAndIsr
from strandline.protocol import control

#: how long after a try that could not elect the next one is made
RECOVERY_RETRY_MS = 1000

#: ``local_log_info(topic, index)``: (last written leader epoch, log end offset) of the
#: controller's own broker's replica, None when it hosts none
LocalLogInfo = Callable[[str, int], "tuple[int, int] | None"]


def recovery_candidates(strategy: str, replicas: tuple[int, ...], state: LeaderAndIsr, live: set[int],
                        shutting_down: set[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The replicas to ask about a partition in ``state`` (every live one, in replica order) and
    those whose answers the election needs (Balanced: every replica; Aggressive: none but one
    answer), or None when no recovery may start now: the partition has a leader, an ISR or an ELR;
    the strategy is None; Balanced and a replica is not live; no replica is live. Brokers in
    controlled shutdown are not asked.

    Balanced waits for every replica, not only the last known ELR as KIP-966 words it: a replica
    that left the ISR while the ISR still held the minimum is in no ELR, and it can be the only
    one left with what was committed, when the members that stayed had lost power and were not
    yet known to be back from it (a controlled shutdown moved leadership to them meanwhile)."""
    if state.leader >= 0 or state.isr or state.elr or strategy == "None":
        return None
    up = live - shutting_down
    asked = tuple(r for r in replicas if r in up)
    required: tuple[int, ...] = ()
    if strategy == "Balanced":
        if len(asked) < len(replicas):
            return None
        required = asked
    return (asked, required) if asked else None


def choose_recovered_leader(asked: tuple[int, ...], required: tuple[int, ...],
                            answers: dict[int, tuple[int, int] | None]) -> int | None:
    """The replica to elect from ``answers`` (each asked replica's (last written leader epoch, log
    end offset), None when it did not answer): the newest epoch, then the longest log, then the
    first asked (replica order); None unless every ``required`` replica and at least one answered.
    Replicas whose last batches carry the same epoch copied them from that epoch's leader, so the
    longest holds the others' logs; one that wrote under a later epoch holds what the leaders
    before committed. Any replica may be the best: one that left the ISR while it still held the
    minimum is in no ELR, and may have kept what the eligible ones lost to a power loss."""
    if any(answers.get(r) is None for r in required):
        return None
    known: list[tuple[int, int, int, int]] = []      # (epoch, end offset, -position, replica)
    for position, replica in enumerate(asked):
        info = answers.get(replica)
        if info is not None:
            known.append((info[0], info[1], -position, replica))
    return max(known)[3] if known else None


def describe_answer(info: tuple[int, int] | None) -> str:
    return "no answer" if info is None else f"epoch {info[0]}, end offset {info[1]}"


class UncleanRecovery:
    """The unclean recoveries of one controller; every call names the term (``ctx``) it acts for."""

    def __init__(self, office: Office, elections: PartitionElections, local_log_info: LocalLogInfo) -> None:
        self.office = office
        self.elections = elections
        self.local_log_info = local_log_info

    def strategy(self, topic: TopicMetadata) -> str:
        return str(self.office.config.topic_value(topic.configs, "unclean.recovery.strategy"))

    def leaderless(self, ctx: ControllerContext, states: list[tuple[Key, LeaderAndIsr]], now_ms: int) -> list[Effect]:
        """States just read or written: a partition that needs a recovery, and may have one now,
        gets a try (unless one is in flight)."""
        config = self.office.config
        if not api_version.elr_enabled(config) or not self.office.in_office(ctx):
            return []
        trying = ctx.recovering
        effects: list[Effect] = []
        for key, state in states:
            topic = ctx.topics.get(key[0])
            if key in trying or topic is None or key[1] not in topic.assignment \
                    or config.topic_value(topic.configs, "unclean.leader.election.enable"):
                continue
            strategy = self.strategy(topic)
            candidates = recovery_candidates(strategy, topic.assignment[key[1]], state, set(ctx.live_brokers),
                                             ctx.shutting_down)
            if candidates is None:
                continue
            trying.add(key)
            effects.extend(self._ask(ctx, key, topic, strategy, *candidates, now_ms))
        return effects

    def _ask(self, ctx: ControllerContext, key: Key, topic: TopicMetadata, strategy: str, asked: tuple[int, ...],
             required: tuple[int, ...], now_ms: int) -> list[Effect]:
        """Ask each of ``asked`` for its log (its own broker directly)."""
        attempt = RecoveryTry(ctx, key, topic.topic_id, strategy, asked, required, {}, self,
                              {r: ctx.broker_epochs.get(r, -1) for r in asked})
        effects: list[Effect] = []
        body = {"topic_partitions": [{"topic_id": topic.topic_id, "partitions": [key[1]]}]}
        client_id = f"strandline-controller-{self.office.broker_id}"
        for broker_id in asked:
            if broker_id == self.office.broker_id:
                effects.extend(attempt.answered(broker_id, self.local_log_info(*key), now_ms))
                continue
            effects.extend(self.office.outbox.send(
                ctx.live_brokers.get(broker_id), "controller",
                lambda cid: control.encode_request(control.GET_REPLICA_LOG_INFO, cid, client_id, body),
                AwaitingReplicaLogInfo(ctx, broker_id, key, attempt), now_ms))
        return effects

    def _decide(self, attempt: RecoveryTry, now_ms: int) -> list[Effect]:
        """Every asked replica answered (or did not, in time): elect, or try again later."""
        ctx, key = attempt.ctx, attempt.key
        if not self.office.in_office(ctx):
            return []
        said = ", ".join(f"{r}: {describe_answer(attempt.answers.get(r))}" for r in attempt.asked)
        chosen = choose_recovered_leader(attempt.asked, attempt.required, attempt.answers)
        if chosen is None:
            return [LogLine("warning", f"Unclean recovery ({attempt.strategy}) of {key[0]}-{key[1]} cannot elect "
                                       f"yet ({said}); trying again in {RECOVERY_RETRY_MS} ms")] \
                + self.office.outbox.after(now_ms + RECOVERY_RETRY_MS, RetryRecovery(ctx, key, self))
        line = LogLine("warning", f"Unclean recovery ({attempt.strategy}) of {key[0]}-{key[1]}: electing broker "
                                  f"{chosen}, the newest and longest log of its live replicas ({said})")
        decide = RecoveryDecision(ctx, chosen, attempt.epochs[chosen])
        return [line] + self.elections.elect(ctx, [key], set(), now_ms, RecoveryDone(ctx, key, self), decide)

    def _done(self, ctx: ControllerContext, key: Key, now_ms: int) -> list[Effect]:
        """A try ended (its election wrote a state, or found nothing to change)."""
        ctx.recovering.discard(key)
        if not self.office.in_office(ctx):
            return []
        topic = ctx.topics.get(key[0])
        state = topic.states.get(key[1]) if topic is not None else None
        # still leaderless (the chosen replica went meanwhile): the next try
        return self.leaderless(ctx, [(key, state)], now_ms) if state is not None else []

    def _retry(self, ctx: ControllerContext, key: Key, now_ms: int) -> list[Effect]:
        """The timer after a try that could not elect: read the partition again (its election
        settles it, and :meth:`leaderless` sees whether it still needs a recovery)."""
        ctx.recovering.discard(key)
        if not self.office.in_office(ctx) or key[0] not in ctx.topics:
            return []
        return self.elections.elect(ctx, [key], set(), now_ms)


@dataclass(eq=False, repr=False)
class RecoveryTry(Awaiting):
    """One try of an unclean recovery of ``key``: the replicas ``asked`` and what each answered."""

    key: Key
    topic_id: Any = field(repr=False)
    strategy: str
    asked: tuple[int, ...]
    required: tuple[int, ...]          # those whose answers the election needs
    answers: dict[int, "tuple[int, int] | None"]
    recovery: UncleanRecovery = field(repr=False)
    #: each asked broker's registration when asked (its answer is of that life's log)
    epochs: dict[int, int] = field(default_factory=dict, repr=False)

    def answered(self, broker_id: int, info: tuple[int, int] | None, now_ms: int) -> list[Effect]:
        self.answers[broker_id] = info
        if len(self.answers) < len(self.asked):
            return []
        return self.recovery._decide(self, now_ms)


@dataclass(eq=False, repr=False)
class AwaitingReplicaLogInfo(Awaiting):
    """GetReplicaLogInfo sent to ``broker_id`` for ``key``: its answer (None: none in time)."""

    broker_id: int
    key: Key
    attempt: RecoveryTry = field(repr=False)

    def __call__(self, frame: bytes | None, now_ms: int) -> list[Effect]:
        return self.attempt.answered(self.broker_id, self._info(frame), now_ms)

    def _info(self, frame: bytes | None) -> tuple[int, int] | None:
        """(last written leader epoch, log end offset) from the answer, when it is the broker's
        registration the controller knows and names the partition without error."""
        if frame is None:
            return None
        try:
            answer = control.decode_response(control.GET_REPLICA_LOG_INFO, frame)
        except Exception:
            return None
        if answer["broker_epoch"] != self.ctx.broker_epochs.get(self.broker_id, answer["broker_epoch"]):
            return None         # a later life of the broker: asked again with the next try
        for topic in answer["topic_partition_log_info_list"]:
            for p in topic["partition_log_info"]:
                if topic["topic_id"] == self.attempt.topic_id and p["partition"] == self.key[1] \
                        and p["error_code"] == ErrorCode.none:
                    return p["last_written_leader_epoch"], p["log_end_offset"]
        return None


@dataclass(eq=False)
class RecoveryDecision:
    """The election rule of a recovery: ``chosen`` leads, alone in the ISR, if the partition still
    has no leader, ISR or ELR and ``chosen`` is still live in the registration it answered in
    (``broker_epoch``; one restarted since may hold less: the next try asks again)."""

    ctx: ControllerContext = field(repr=False)
    chosen: int
    broker_epoch: int

    def __call__(self, topic: TopicMetadata, index: int, current: LeaderAndIsr, live: set[int],
                 dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
        ctx, chosen = self.ctx, self.chosen
        if current.leader >= 0 or current.isr or current.elr or chosen not in topic.assignment[index]:
            return None
        if chosen not in live or chosen in dead or chosen in ctx.shutting_down \
                or ctx.broker_epochs.get(chosen, -1) != self.broker_epoch:
            return None
        return LeaderAndIsr(chosen, current.leader_epoch + 1, (chosen,), ctx.epoch, current.zk_version, (), ()), True


@dataclass(eq=False, repr=False)
class RecoveryDone(Awaiting):
    """A recovery's election ended."""

    key: Key
    recovery: UncleanRecovery = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.recovery._done(self.ctx, self.key, now_ms)


@dataclass(eq=False, repr=False)
class RetryRecovery(Awaiting):
    """The timer after a recovery's try that could not elect."""

    key: Key
    recovery: UncleanRecovery = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.recovery._retry(self.ctx, self.key, now_ms)
