"""Running for controller (SPEC CTL-1, CTL-3, NET-8; Kafka's KafkaController.elect).

Every broker runs when ``/controller`` is free: it reads ``/controller_epoch``, then creates the
ephemeral ``/controller`` and bumps the epoch in one transaction guarded by the epoch's version; the
loser learns the winner from the watch. A broker that finds ``/controller`` naming it although no
answer said it won (the answer was lost after ZooKeeper applied the election) reads the epoch it was
elected in and takes office. Where ZooKeeper does not answer, the broker tries again after a while.
Each of these waits is a named object (:class:`AwaitingEpochToRun`, :class:`AwaitingElection`, ...)
whose ``repr`` says what the broker waits for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.coordination import zk_layout, znodes
from strandline.coordination.store import GetData, OpResult, ZkError

CONTROLLER_RETRY_MS = 1000      # run for controller again after ZooKeeper failed to answer

#: ``take_office(epoch, epoch_version, why)``: the broker is the controller in ``epoch``.
TakeOffice = Callable[[int, "int | None", str], list[Effect]]
#: ``controller_changed(controller_id, now_ms)``: what ``/controller`` names now.
ControllerChanged = Callable[["int | None", int], list[Effect]]


class Candidacy:
    """One broker's runs for controller. ``is_active()``: whether it is the controller now."""

    def __init__(self, broker_id: int, outbox: Outbox, is_active: Callable[[], bool],
                 take_office: TakeOffice, controller_changed: ControllerChanged) -> None:
        self.broker_id = broker_id
        self.outbox = outbox
        self.is_active = is_active
        self.take_office = take_office
        self.controller_changed = controller_changed
        self.running = False            # an election (or reading the epoch won) is in flight

    def run(self, now_ms: int) -> list[Effect]:
        """Run for controller: read the epoch, then the election's transaction (:meth:`_on_epoch`)."""
        if self.running:
            return []
        self.running = True
        return [self.outbox.zk([GetData(znodes.ControllerEpochZNode.path())], AwaitingEpochToRun(self))]

    def _failed(self, why: str, when_ms: int) -> list[Effect]:
        self.running = False
        return [LogLine("warning", f"Running for controller failed ({why}); trying again")] + \
            self.outbox.after(when_ms + CONTROLLER_RETRY_MS, RetryCandidacy("run", self))

    def _on_epoch(self, results: list[OpResult], when_ms: int) -> list[Effect]:
        res = results[0]
        if res.error is ZkError.NO_NODE:
            epoch, version = 0, -1
        elif res.error is ZkError.NONE:
            epoch, version = znodes.ControllerEpochZNode.decode(res.data), res.version
        else:
            return self._failed(f"cannot read the controller epoch: {res.error.name}", when_ms)
        ops = zk_layout.controller_election_ops(self.broker_id, epoch + 1, version, when_ms)
        return [self.outbox.zk(ops, AwaitingElection(epoch + 1, self), transaction=True)]

    def _on_elected(self, wait: AwaitingElection, elected: list[OpResult], at_ms: int) -> list[Effect]:
        error = next((r.error for r in elected if r.error is not ZkError.NONE), None)
        if error in (ZkError.NODE_EXISTS, ZkError.BAD_VERSION):
            self.running = False
            return self.who_is_controller()     # someone won: perhaps this broker, earlier
        if error is not None:
            return self._failed(error.name, at_ms)
        self.running = False
        return self.take_office(wait.epoch, elected[1].version, "won the controller election")

    def who_is_controller(self) -> list[Effect]:
        """Read /controller after an election this broker did not win by its own answer."""
        return [self.outbox.zk([GetData(znodes.ControllerZNode.path())], AwaitingControllerZNode(self))]

    def _on_controller_read(self, results: list[OpResult], when_ms: int) -> list[Effect]:
        res = results[0]
        if self.is_active():
            return []
        if res.error is ZkError.NO_NODE:
            return self.run(when_ms)
        if res.error is not ZkError.NONE:
            return self.outbox.after(when_ms + CONTROLLER_RETRY_MS, RetryCandidacy("who_is_controller", self))
        return self.controller_changed(znodes.ControllerZNode.decode(res.data), when_ms)

    def read_epoch_won(self, now_ms: int) -> list[Effect]:
        """/controller names this broker: read the epoch it was elected in, then take office."""
        self.running = True
        return [self.outbox.zk([GetData(znodes.ControllerEpochZNode.path())], AwaitingEpochWon(self))]

    def _on_epoch_won(self, results: list[OpResult], when_ms: int) -> list[Effect]:
        self.running = False
        res = results[0]
        if self.is_active():
            return []
        if res.error is not ZkError.NONE:
            return [LogLine("warning", f"Cannot read the controller epoch: {res.error.name}; trying again")] + \
                self.outbox.after(when_ms + CONTROLLER_RETRY_MS, RetryCandidacy("read_epoch_won", self))
        return self.take_office(znodes.ControllerEpochZNode.decode(res.data), res.version,
                                "holds /controller (its election's answer was lost)")


@dataclass(eq=False)
class AwaitingEpochToRun:
    """Running for controller: the read of /controller_epoch the election's transaction bumps."""

    candidacy: Candidacy = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.candidacy._on_epoch(results, now_ms)


@dataclass(eq=False)
class AwaitingElection:
    """The transaction that creates /controller and sets /controller_epoch to ``epoch``."""

    epoch: int
    candidacy: Candidacy = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.candidacy._on_elected(self, results, now_ms)


@dataclass(eq=False)
class AwaitingControllerZNode:
    """The read of /controller after an election this broker did not win by its own answer."""

    candidacy: Candidacy = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.candidacy._on_controller_read(results, now_ms)


@dataclass(eq=False)
class AwaitingEpochWon:
    """/controller names this broker: the read of the epoch it was elected in."""

    candidacy: Candidacy = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.candidacy._on_epoch_won(results, now_ms)


@dataclass(eq=False)
class RetryCandidacy:
    """The timer after which a step ZooKeeper did not answer is taken again, unless the broker
    became the controller meanwhile."""

    step: Literal["run", "who_is_controller", "read_epoch_won"]
    candidacy: Candidacy = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        candidacy = self.candidacy
        if candidacy.is_active():
            return []
        if self.step == "run":
            return candidacy.run(now_ms)
        if self.step == "who_is_controller":
            return candidacy.who_is_controller()
        return candidacy.read_epoch_won(now_ms)
