"""The controller's term of office: what its parts (elections, topic changes, deletions,
reassignments, controlled shutdown) share and nothing more.

A term is the :class:`ControllerContext` the broker read when it won ``/controller``; every part
names the term it acts for, and :meth:`Office.in_office` tells whether that term still runs (the
broker neither resigned nor took office again). Writes to ZooKeeper go through
:meth:`Office.fenced`, which checks ``/controller_epoch``'s version the term was elected with, so a
deposed controller cannot write (Kafka's zkVersion check, SPEC CTL-3).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from strandline.core.effects import Effect
from strandline.controller.channel import ControllerChannel, LocalDelivery
from strandline.controller.context import Awaiting, ControllerContext
from strandline.coordination import znodes
from strandline.coordination.store import CheckVersion, GetData, OpResult, TransactionOp, ZkError
from strandline.core.outbox import Outbox
from strandline.errors import BrokenInvariant


def _nothing() -> None:
    return None


class Office:
    def __init__(self, config: Any, outbox: Outbox, *, rng: Any, new_uuid: Callable[[], uuid.UUID],
                 deliver_locally: LocalDelivery, resign: Callable[[str], list[Effect]]) -> None:
        self.config = config
        self.broker_id: int = config.broker_id
        self.outbox = outbox
        self.rng = rng
        self.new_uuid = new_uuid
        #: ``resign(why)``: the broker leaves office (its effects)
        self.resign = resign
        #: the current term, None when this broker is not the controller
        self.ctx: ControllerContext | None = None
        self.channel = ControllerChannel(self.broker_id, outbox, deliver_locally, self.in_office)

    def in_office(self, ctx: ControllerContext) -> bool:
        """Whether ``ctx`` is the current term (the broker did not resign or take office again)."""
        return self.ctx is ctx

    def fenced(self, ctx: ControllerContext, ops: Sequence[TransactionOp]) -> list[TransactionOp]:
        """Controller writes carry a check of /controller_epoch's version: a controller that lost
        its office cannot write (Kafka's zkVersion check of the controller epoch, CTL-3)."""
        if not self.in_office(ctx):
            raise BrokenInvariant("a broker that is not the controller tried to write the controller's state")
        if ctx.epoch_version is None:      # a core driven by a test that does not track the epoch's znode
            return list(ops)
        return [CheckVersion(znodes.ControllerEpochZNode.path(), ctx.epoch_version)] + list(ops)

    def check_still_controller(self, ctx: ControllerContext, then: Callable[[int], list[Effect]], now_ms: int,
                               given_up: Callable[[], object] = _nothing) -> list[Effect]:
        """After a fenced write failed: resign if /controller_epoch moved on (``given_up()``),
        else go on."""
        wait = AwaitingEpochCheck(ctx, then, given_up, self)
        return [self.outbox.zk([GetData(znodes.ControllerEpochZNode.path())], wait)]

    def _on_epoch_checked(self, wait: AwaitingEpochCheck, results: list[OpResult], when_ms: int) -> list[Effect]:
        res, ctx = results[0], wait.ctx
        if not self.in_office(ctx):
            wait.given_up()
            return []
        if res.error is ZkError.NONE and res.version != ctx.epoch_version:
            wait.given_up()
            return self.resign(f"the controller epoch is now {znodes.ControllerEpochZNode.decode(res.data)}")
        return wait.then(when_ms)


@dataclass(eq=False, repr=False)
class AwaitingEpochCheck(Awaiting):
    """A fenced write failed: the read of /controller_epoch that tells whether the term still
    runs (``then``) or is over (``given_up``)."""

    then: Callable[[int], list[Effect]]
    given_up: Callable[[], object] = field(repr=False)
    office: Office = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.office._on_epoch_checked(self, results, now_ms)
