"""Partition leader election (SPEC CTL-6, CTL-7, CTL-10; Kafka's PartitionStateMachine and
PartitionLeaderElectionAlgorithms).

The rules are pure functions of a partition's assignment, its current state and who is alive. The
:class:`PartitionElections` machinery applies them safely against ZooKeeper: read each state
znode, decide, write the new states with compare-and-set on the versions just read (fenced by the
controller epoch), tell the brokers, and sort out every way that can go wrong (a lost race, an
answer that never came, a write applied late, brokers coming or going meanwhile).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from strandline.core import api_version
from strandline.core.effects import Effect, LogLine, ZkRequest
from strandline.controller.channel import CONTROL_RETRY_MS
from strandline.controller.office import Office
from strandline.controller.context import Awaiting, ControllerContext
from strandline.coordination import zk_layout, znodes
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import LeaderAndIsr
from strandline.coordination.store import GetData, OpResult, TransactionOp, ZkError

Key = tuple[str, int]
#: ``decide(topic, index, current, live, dead)``: the next state and whether it is unclean, or None.
Decide = Callable[[TopicMetadata, int, LeaderAndIsr, set[int], set[int]], "tuple[LeaderAndIsr, bool] | None"]


@dataclass(frozen=True)
class ElrPolicy:
    """Eligible leader replicas (KIP-966) for one partition's change: its topic's
    min.insync.replicas, and the brokers back from an unclean shutdown, which lose their place
    in the ISR and the ELR."""

    min_isr: int
    unclean_shutdown: frozenset[int] = frozenset()


def populate_elr(replicas: tuple[int, ...], current: LeaderAndIsr, target_isr: tuple[int, ...],
                 policy: ElrPolicy) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ELR and last known ELR beside ``target_isr``, the ISR that replaces ``current.isr``
    (Kafka's ``PartitionChangeBuilder.maybePopulateTargetElr``). An ISR of at least
    min.insync.replicas clears both. Below it, every member of the ISR or ELR before that is not in
    the new ISR is eligible (the high watermark did not move past its log end since the ISR shrank
    below the minimum), unless it came back from an unclean shutdown; the last known ELR keeps the
    others that once were, those that lost their eligibility. In replica order, assigned replicas
    only."""
    if len(target_isr) >= policy.min_isr:
        return (), ()
    candidates = set(current.elr) | set(current.isr)
    elr = tuple(r for r in replicas if r in candidates and r not in target_isr
                and r not in policy.unclean_shutdown)
    known = candidates | set(current.last_known_elr)
    last_known = tuple(r for r in replicas if r in known and r not in target_isr and r not in elr)
    return elr, last_known


def elr_partition_election(replicas: tuple[int, ...], current: LeaderAndIsr, live: set[int], dead: set[int],
                           shutting_down: set[int], unclean_allowed: bool, controller_epoch: int,
                           policy: ElrPolicy) -> tuple[LeaderAndIsr, bool] | None:
    """:func:`offline_partition_election` with eligible leader replicas (KIP-966; Kafka's
    ``PartitionChangeBuilder.build`` with ``eligibleLeaderReplicasEnabled``): dead brokers and
    those back from an unclean shutdown leave the ISR, which may become empty; the ELR is
    updated (:func:`populate_elr`); a live leader in the ISR keeps leading; otherwise the first
    live ISR member in replica order leads, or, when the ISR is empty, the first live ELR member,
    whose ISR it then is alone; only then, with unclean.leader.election.enable, any live replica,
    which clears the ELR. With none the partition waits offline (leader -1) for an ISR or ELR
    member. A broker in controlled shutdown keeps what nobody else can take over."""
    up = live - shutting_down
    gone = dead | policy.unclean_shutdown
    target_isr = tuple(r for r in current.isr if r not in gone)
    elr, last_known = populate_elr(replicas, current, target_isr, policy)

    def acceptable(r: int) -> bool:
        return r in up and r not in dead

    unclean = False
    if current.leader >= 0 and current.leader in target_isr and acceptable(current.leader):
        leader, isr = current.leader, target_isr
    else:
        clean = [r for r in replicas if acceptable(r) and (r in target_isr or (not target_isr and r in elr))]
        if clean:
            leader, isr = clean[0], target_isr
            if leader in elr:                   # elected from the ELR: its ISR, alone
                isr, elr = (leader,), tuple(r for r in elr if r != leader)
        elif unclean_allowed and any(acceptable(r) for r in replicas):
            leader = next(r for r in replicas if acceptable(r))
            isr, elr, last_known, unclean = (leader,), (), (), True
        elif current.leader in shutting_down and current.leader in target_isr:
            # it keeps what nobody else can take over; the brokers gone, or back from an unclean
            # shutdown, still leave its ISR (keeping one there would let a later election pick it)
            leader, isr = current.leader, target_isr
        elif current.leader in shutting_down:
            return None
        else:
            leader, isr = -1, target_isr
    if (leader, isr, elr, last_known) == (current.leader, current.isr, current.elr, current.last_known_elr):
        return None
    return LeaderAndIsr(leader, current.leader_epoch + 1, isr, controller_epoch, current.zk_version,
                        elr, last_known), unclean


def offline_partition_election(replicas: tuple[int, ...], current: LeaderAndIsr, live: set[int], dead: set[int],
                               shutting_down: set[int], unclean_allowed: bool,
                               controller_epoch: int, elr: ElrPolicy | None = None) -> tuple[LeaderAndIsr, bool] | None:
    """The next state of a partition after brokers died or came back, and whether it was an
    unclean election; None when nothing changes. Kafka's rules: a live leader keeps leading and
    dead followers leave the ISR (never emptying it); a dead leader is replaced by the first
    live ISR member in replica order, else, only with unclean.leader.election.enable, by any
    live replica; with neither the partition goes offline (leader -1, the ISR kept). A broker
    in controlled shutdown counts as dead for leading, and keeps what nobody else can take over.
    With eligible leader replicas (``elr``), :func:`elr_partition_election`."""
    if elr is not None:
        return elr_partition_election(replicas, current, live, dead, shutting_down, unclean_allowed,
                                      controller_epoch, elr)
    epoch = current.leader_epoch + 1
    live = live - shutting_down
    if current.leader >= 0 and current.leader in live and current.leader not in dead:
        isr = tuple(r for r in current.isr if r not in dead) or current.isr
        if isr == current.isr:
            return None
        return LeaderAndIsr(current.leader, epoch, isr, controller_epoch, current.zk_version), False
    candidates = [r for r in replicas if r in live and r not in dead and r in current.isr]
    unclean = False
    if not candidates and unclean_allowed:
        candidates = [r for r in replicas if r in live and r not in dead]
        unclean = bool(candidates)
    if not candidates:
        if current.leader < 0 or current.leader in shutting_down:
            return None
        isr = tuple(r for r in current.isr if r != current.leader) or current.isr
        return LeaderAndIsr(-1, epoch, isr, controller_epoch, current.zk_version), False
    leader = candidates[0]
    isr = (leader,) if unclean else tuple(r for r in current.isr if r in live and r not in dead)
    return LeaderAndIsr(leader, epoch, isr, controller_epoch, current.zk_version), unclean


def preferred_replica_election(replicas: tuple[int, ...], current: LeaderAndIsr, live: set[int],
                               shutting_down: set[int], controller_epoch: int) -> tuple[LeaderAndIsr, bool] | None:
    """Leadership back to the first assigned replica, if it is alive, not stopping and in the ISR."""
    preferred = replicas[0]
    if current.leader == preferred or preferred not in live or preferred in shutting_down \
            or preferred not in current.isr:
        return None
    return dataclasses.replace(current, leader=preferred, leader_epoch=current.leader_epoch + 1,
                               controller_epoch=controller_epoch), False


def within_assignment(replicas: tuple[int, ...], current: LeaderAndIsr) -> LeaderAndIsr:
    """The state as a rule must see it: just after a reassignment narrowed the replicas, the ISR
    may still name removed ones, and the leader may be one, which no new state may keep (CTL-11):
    a leader no longer assigned counts as gone."""
    if set(current.isr) <= set(replicas):
        return current
    kept = tuple(r for r in current.isr if r in replicas)
    if not kept:
        return current
    leader = current.leader if current.leader in kept else -1
    return dataclasses.replace(current, leader=leader, isr=kept)


def is_within(replicas: tuple[int, ...], state: LeaderAndIsr) -> bool:
    """Whether ``state`` names only assigned replicas (its ISR, and its leader if it has one)."""
    return set(state.isr) <= set(replicas) and (state.leader < 0 or state.leader in replicas)


def decide_within(replicas: tuple[int, ...], current: LeaderAndIsr, controller_epoch: int,
                  rule: Callable[[LeaderAndIsr], "tuple[LeaderAndIsr, bool] | None"]) -> tuple[LeaderAndIsr, bool] | None:
    """``rule`` applied to the state as :func:`within_assignment` shows it. Where the rule changes
    nothing but that view left out replicas no longer assigned, the view is the next state, in a
    new epoch: a state naming them is never kept, and so never sent with the narrowed replicas."""
    view = within_assignment(replicas, current)
    decided = rule(view)
    if decided is None and view is not current:
        return dataclasses.replace(view, leader_epoch=current.leader_epoch + 1, controller_epoch=controller_epoch,
                                   zk_version=current.zk_version,
                                   elr=tuple(r for r in view.elr if r in replicas),
                                   last_known_elr=tuple(r for r in view.last_known_elr if r in replicas)), False
    return decided


def elr_policy(ctx: ControllerContext, config: Any, topic: TopicMetadata, index: int) -> ElrPolicy | None:
    """The ELR policy of partition ``index`` of ``topic`` in term ``ctx``; None with eligible
    leader replicas off. Its minimum is Kafka's effective one: min.insync.replicas, or the
    replication factor if smaller."""
    if not api_version.elr_enabled(config):
        return None
    min_isr = min(int(config.topic_value(topic.configs, "min.insync.replicas")), len(topic.assignment[index]))
    return ElrPolicy(min_isr, frozenset(ctx.unclean_shutdown))


@dataclass(eq=False)
class OfflineRule:
    """The offline-partition rule of term ``ctx`` (:func:`offline_partition_election`), with each
    topic's unclean.leader.election.enable."""

    ctx: ControllerContext = field(repr=False)
    config: Any = field(repr=False)

    def __call__(self, topic: TopicMetadata, index: int, current: LeaderAndIsr, live: set[int],
                 dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
        ctx = self.ctx
        unclean = bool(self.config.topic_value(topic.configs, "unclean.leader.election.enable"))
        replicas = topic.assignment[index]
        elr = elr_policy(ctx, self.config, topic, index)
        return decide_within(replicas, current, ctx.epoch, lambda view: offline_partition_election(
            replicas, view, live, dead, ctx.shutting_down, unclean, ctx.epoch, elr))


@dataclass(eq=False)
class PreferredRule:
    """The preferred-replica rule of term ``ctx`` (:func:`preferred_replica_election`)."""

    ctx: ControllerContext = field(repr=False)
    config: Any = field(repr=False)

    def __call__(self, topic: TopicMetadata, index: int, current: LeaderAndIsr, live: set[int],
                 dead: set[int]) -> tuple[LeaderAndIsr, bool] | None:
        ctx = self.ctx
        replicas = topic.assignment[index]

        def rule(view: LeaderAndIsr) -> tuple[LeaderAndIsr, bool] | None:
            decided = preferred_replica_election(replicas, view, live, ctx.shutting_down, ctx.epoch)
            if decided is None and view.leader < 0 <= current.leader:
                # the leader is no longer assigned and the preferred replica cannot lead: the
                # next live ISR member does, as when a leader dies, rather than nobody
                return offline_partition_election(replicas, view, live, dead, ctx.shutting_down, False,
                                                  ctx.epoch, elr_policy(ctx, self.config, topic, index))
            return decided
        return decide_within(replicas, current, ctx.epoch, rule)


class PartitionElections:
    """Elections of one controller; every call names the term (``ctx``) it acts for."""

    def __init__(self, office: Office) -> None:
        self.office = office
        #: ``moves_settled(ctx, keys, now_ms)``: leaders and ISRs of ``keys`` were written; a
        #: reassignment of theirs may be complete (the controller wires its reassignments here)
        self.moves_settled: Callable[[ControllerContext, list[Key], int], list[Effect]] = lambda ctx, keys, now_ms: []
        #: ``leaderless(ctx, states, now_ms)``: states read or written, some perhaps with no leader,
        #: ISR or ELR (the controller wires its unclean recoveries here, KIP-966)
        self.leaderless: Callable[[ControllerContext, list[tuple[Key, LeaderAndIsr]], int], list[Effect]] = \
            lambda ctx, states, now_ms: []
        # Kafka's ControllerStats (their counts): leaders written, and those chosen outside the ISR
        self.leader_elections = 0
        self.unclean_leader_elections = 0

    def offline_rule(self, ctx: ControllerContext) -> Decide:
        return OfflineRule(ctx, self.office.config)

    def preferred_rule(self, ctx: ControllerContext) -> Decide:
        return PreferredRule(ctx, self.office.config)

    # ------------------------------------------------------------------ brokers owed a state

    def not_electing(self, ctx: ControllerContext, parts: list[tuple[TopicMetadata, int]],
                     brokers: set[int]) -> list[tuple[TopicMetadata, int]]:
        """Of ``parts`` about to be sent to ``brokers``, those not being elected; the others are
        owed to those brokers once their elections end (:meth:`elections_ended`)."""
        ready = []
        for topic, index in parts:
            if (topic.name, index) in ctx.electing:
                ctx.owed_states.setdefault((topic.name, index), set()).update(brokers)
            else:
                ready.append((topic, index))
        return ready

    def elections_ended(self, ctx: ControllerContext, keys: list[Key], now_ms: int,
                        announced: bool = False) -> list[Effect]:
        """Elections of ``keys`` ended: a partition no longer being elected is sent to the brokers
        that were not sent its old state meanwhile, unless the election ``announced`` its state to
        every broker (it wrote one, or found one decided on a retry)."""
        ctx.electing.subtract(keys)
        per_brokers: dict[frozenset[int], list[tuple[TopicMetadata, int]]] = {}
        for key in keys:
            if ctx.electing[key] > 0:
                continue
            del ctx.electing[key]
            brokers = ctx.owed_states.pop(key, None)
            topic = ctx.topics.get(key[0])        # (perhaps a topic made again since under that name)
            if brokers and topic is not None and key[1] in topic.assignment and self.office.in_office(ctx) \
                    and not announced:
                per_brokers.setdefault(frozenset(brokers), []).append((topic, key[1]))
        effects: list[Effect] = []
        for targets, parts in per_brokers.items():
            effects.extend(self.office.channel.send_partition_states(ctx, parts, set(targets), False, now_ms,
                                                                         metadata_to=set(targets)))
        return effects

    # ------------------------------------------------------------------ electing

    def elect(self, ctx: ControllerContext, keys: list[Key], dead: set[int], now_ms: int,
              done: Callable[[int], list[Effect]] | None = None, decide: Decide | None = None,
              retry: bool = False) -> list[Effect]:
        """Re-read the partitions' state znodes, elect, and write each new state with compare-and-set
        on the version just read; a partition whose write lost a race, or whose read or write got no
        answer, is read and elected again (``retry``). A retry announces what it finds already
        decided: it may be an earlier write of this controller applied after all. While a partition
        is being elected, new brokers are not sent its old state (:meth:`not_electing`).
        ``done(now_ms)`` runs once the states are written (or nothing needed writing). A broker of
        ``dead`` stays dead for retries even if it registered again meanwhile (its earlier life
        ended, and what it held may be gone); once written, a state that brokers coming or going
        made stale (offline although an ISR member is back, led by a broker now gone) is elected
        again. ``decide`` defaults to the offline-partition rule."""
        if not retry:
            ctx.electing.update(keys)
        if not keys:
            return done(now_ms) if done else []
        reads = [GetData(znodes.TopicPartitionStateZNode.path(t, i)) for t, i in keys]
        wait = AwaitingPartitionStateReads(ctx, keys, dead, done, decide, retry, self)
        return [self.office.outbox.zk(reads, wait)]

    def _revisit(self, ctx: ControllerContext, states: list[tuple[Key, LeaderAndIsr]], when_ms: int) -> list[Effect]:
        """Elect again the partitions whose state brokers coming or going made stale."""
        eligible = set(ctx.live_brokers) - ctx.shutting_down - ctx.unclean_shutdown
        stale = [key for key, state in states
                 if (state.leader < 0 and any(r in eligible for r in state.isr or state.elr))
                 or (state.leader >= 0 and state.leader not in ctx.live_brokers)]
        return self.elect(ctx, stale, set(), when_ms) if stale else []

    def _on_states_read(self, wait: AwaitingPartitionStateReads, results: list[OpResult],
                        when_ms: int) -> list[Effect]:
        """The states of an election were read: decide each, then write the new ones."""
        office, ctx, keys, done, decide = self.office, wait.ctx, wait.keys, wait.then, wait.decide
        if not office.in_office(ctx):   # deposed while reading: a write now would not be fenced
            self.elections_ended(ctx, keys, when_ms)
            return done(when_ms) if done else []
        rule = decide or self.offline_rule(ctx)
        live = set(ctx.live_brokers)
        planned: list[tuple[Key, LeaderAndIsr, LeaderAndIsr]] = []
        writes: list[TransactionOp] = []
        effects: list[Effect] = []
        settled: list[tuple[Key, LeaderAndIsr]] = []
        unread: list[Key] = []
        for key, res in zip(keys, results):
            topic = ctx.topics.get(key[0])
            if topic is not None and res.error not in (ZkError.NONE, ZkError.NO_NODE):
                unread.append(key)
                continue
            if topic is None or res.error is not ZkError.NONE:
                self.elections_ended(ctx, [key], when_ms)
                continue
            current = znodes.TopicPartitionStateZNode.decode(res.data, res.version)
            topic.states[key[1]] = current
            decided = rule(topic, key[1], current, live, wait.dead)
            if decided is None:
                settled.append((key, current))
                continue
            state, unclean = decided
            if unclean:
                effects.append(LogLine("warning", f"Unclean leader election for {key[0]}-{key[1]}: broker "
                                              f"{state.leader} was not in the ISR {list(current.isr)}; "
                                              f"records acknowledged by the old ISR may be lost"))
            planned.append((key, state, current))
            writes.append(zk_layout.update_partition_state(key[0], key[1], state))
        if wait.retry and settled:
            effects.extend(office.channel.send_partition_states(
                ctx, [(ctx.topics[k[0]], k[1]) for k, _ in settled], None, False, when_ms))
        effects.extend(self.elections_ended(ctx, [key for key, _ in settled], when_ms, announced=wait.retry))
        effects.extend(self._revisit(ctx, settled, when_ms))
        effects.extend(self.leaderless(ctx, settled, when_ms))
        # a move waiting for its targets to join the ISR looks at every state read (Kafka's
        # controller watches the state znode of each partition being moved)
        effects.extend(self.moves_settled(ctx, [key for key, _ in settled], when_ms))
        # one fenced transaction per run of states that fits ZooKeeper's request limit
        runs = zk_layout.split_multi(writes, office.fenced(ctx, []),
                                     zk_layout.chroot(office.config["zookeeper.connect"])) if writes else []
        # ``done`` waits for the partitions read again as well: what it does next (dropping the
        # unclean shutdown marks of brokers back, KIP-966) must not come before their states
        run_done = RunsWritten(len(runs) + bool(unread), done)
        if unread:       # ZooKeeper did not answer: read those again (and announce what was decided)
            effects.extend(office.outbox.after(when_ms + CONTROL_RETRY_MS,
                                               RetryElection(ctx, unread, wait.dead, run_done, decide, True, self)))
        if not writes:
            return effects if unread else effects + (done(when_ms) if done else [])
        start = 0
        for run in runs:
            effects.append(self._write_states(ctx, planned[start:start + len(run)], run, wait.dead, decide, run_done))
            start += len(run)
        return effects

    def _write_states(self, ctx: ControllerContext, planned: list[tuple[Key, LeaderAndIsr, LeaderAndIsr]],
                      writes: list[TransactionOp], dead: set[int], decide: Decide | None,
                      done: Callable[[int], list[Effect]]) -> ZkRequest:
        """Write the elected states of ``planned`` ((key, state, state before)) in one fenced
        transaction, then install and announce them (:meth:`_on_states_written`)."""
        fenced = self.office.fenced(ctx, writes)
        wait = AwaitingLeaderAndIsrWrite(ctx, [key for key, _, _ in planned], planned, len(fenced) - len(writes),
                                         dead, decide, done, self)
        return self.office.outbox.zk(fenced, wait, transaction=True)

    def _on_states_written(self, wait: AwaitingLeaderAndIsrWrite, written: list[OpResult],
                           at_ms: int) -> list[Effect]:
        """The answer to a write of elected states: install and announce them; a lost race is
        read and elected again."""
        office, ctx, written_keys, done = self.office, wait.ctx, wait.partitions, wait.then
        if not office.in_office(ctx):
            self.elections_ended(ctx, written_keys, at_ms)
            return done(at_ms)
        if written and written[0].error is not ZkError.NONE:
            # a state changed under us, or our epoch is no longer current: check, re-read, retry
            again = RetryElection(ctx, written_keys, wait.dead, done, wait.decide, False, self)
            if written[0].error is ZkError.BAD_VERSION:
                return office.check_still_controller(ctx, again, at_ms,
                                                     partial(self.elections_ended, ctx, written_keys, at_ms))
            return [LogLine("warning", f"Writing partition states failed: {written[0].error.name}")] + \
                office.outbox.after(at_ms + CONTROL_RETRY_MS, again)
        changed: list[tuple[TopicMetadata, int]] = []
        out: list[Effect] = []
        narrowed: list[Key] = []
        for (key, state, before), res in zip(wait.planned, written[wait.skip:]):
            topic = ctx.topics.get(key[0])
            if topic is not None:
                topic.states[key[1]] = dataclasses.replace(state, zk_version=res.version)
                if is_within(topic.assignment[key[1]], state):
                    changed.append((topic, key[1]))
                else:
                    # a reassignment narrowed the replicas while this state was written: it is
                    # elected again (by the offline rule, which writes the narrowed view), not
                    # sent as it is (CTL-11)
                    narrowed.append(key)
                out.append(self._written_line(key, state, before))
        out.extend(office.channel.send_partition_states(ctx, changed, None, False, at_ms))
        out.extend(self.elections_ended(ctx, [k for k in written_keys if k not in narrowed], at_ms,
                                        announced=True))
        kept = [(key, state) for key, state, _ in wait.planned if key not in narrowed]
        out.extend(self._revisit(ctx, kept, at_ms))
        out.extend(self.leaderless(ctx, kept, at_ms))
        if narrowed:
            out.extend(self.elect(ctx, narrowed, wait.dead, at_ms, None, None, True))
        out.extend(self.moves_settled(ctx, [k for k in written_keys if k not in narrowed], at_ms))
        return out + done(at_ms)

    def _written_line(self, key: Key, state: LeaderAndIsr, before: LeaderAndIsr) -> LogLine:
        """The log line of a state written (and the count of leaders elected, unclean ones apart)."""
        if state.leader < 0:
            eligible = f"ISR {list(state.isr)}" + (f" or ELR {list(state.elr)}" if state.elr or not state.isr else "")
            lost = f"; no longer eligible (last known ELR): {list(state.last_known_elr)}" \
                if state.last_known_elr else ""
            return LogLine("warning", f"{key[0]}-{key[1]} is offline: no live broker of its "
                                      f"{eligible} can lead it (epoch "
                                      f"{state.leader_epoch}){lost}", "offline", key)
        moved = state.leader != before.leader
        # counted once written: a lost race is decided (and written) again
        from_elr = moved and state.leader not in before.isr and state.leader in before.elr
        unclean = moved and state.leader not in before.isr and not from_elr
        self.leader_elections += moved
        self.unclean_leader_elections += unclean
        return LogLine("warning" if unclean else "info",
                       f"{key[0]}-{key[1]}: leader {state.leader} in epoch "
                       f"{state.leader_epoch}, ISR {list(state.isr)}"
                       + (f", ELR {list(state.elr)}" if state.elr else "")
                       + (" (unclean: outside the last ISR)" if unclean else "")
                       + (" (from the eligible leader replicas)" if from_elr else ""),
                       "unclean" if unclean else "leader" if moved else "isr_shrink"
                       if len(state.isr) < len(before.isr) else None, key)


@dataclass(eq=False, repr=False)
class AwaitingPartitionStateReads(Awaiting):
    """An election read the state znodes of ``keys``, to decide each with ``decide`` (None: the
    offline rule); then ``then(now_ms)``."""

    keys: list[Key]
    dead: set[int]
    then: Callable[[int], list[Effect]] | None
    decide: Decide | None
    retry: bool
    elections: PartitionElections = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.elections._on_states_read(self, results, now_ms)


@dataclass(eq=False, repr=False)
class AwaitingLeaderAndIsrWrite(Awaiting):
    """The fenced transaction writing the elected leaders and ISRs of ``partitions``
    (compare-and-set on the versions read); then ``then(now_ms)``."""

    partitions: list[Key]
    planned: list[tuple[Key, LeaderAndIsr, LeaderAndIsr]] = field(repr=False)
    skip: int = field(repr=False)          # the fence's operations before the writes
    dead: set[int] = field(repr=False)
    decide: Decide | None = field(repr=False)
    then: Callable[[int], list[Effect]]
    elections: PartitionElections = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.elections._on_states_written(self, results, now_ms)


@dataclass(eq=False, repr=False)
class RetryElection(Awaiting):
    """The timer (or the epoch check) after which the partitions ``keys`` are read and elected
    again; with ``unless_deposed`` their elections just end if the term is over by then."""

    keys: list[Key]
    dead: set[int]
    then: Callable[[int], list[Effect]] | None
    decide: Decide | None
    unless_deposed: bool
    elections: PartitionElections = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        elections, ctx = self.elections, self.ctx
        if self.unless_deposed and not elections.office.in_office(ctx):
            return elections.elections_ended(ctx, self.keys, now_ms)
        return elections.elect(ctx, self.keys, self.dead, now_ms, self.then, self.decide, True)


@dataclass(eq=False)
class RunsWritten:
    """``then(now_ms)`` once each of ``left`` transactions of one election has been answered."""

    left: int
    then: Callable[[int], list[Effect]] | None

    def __call__(self, now_ms: int) -> list[Effect]:
        self.left -= 1
        return (self.then(now_ms) if self.then else []) if self.left == 0 else []
