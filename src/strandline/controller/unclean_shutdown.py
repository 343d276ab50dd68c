"""Brokers back from an unclean shutdown (KIP-966's clean-shutdown check, in every mode).

A broker registers ``"clean_shutdown":false`` when its log dirs held no clean-shutdown marker at
startup, or one keeping an unclean shutdown that no controller was seen to handle: it may have
lost what it had not flushed, so the controller takes it out of every ISR (and, with eligible
leader replicas, every ELR) and moves its leaderships away before it may lead again
(:mod:`~strandline.controller.membership` when it registers, the controller's failover for
brokers registered while no controller was in office). Without eligible leader replicas a
broker that was alone in an ISR leads it again right after, as Kafka's KRaft controller lets a
fenced broker's last ISR membership stand. Once the partitions' new states are written, the
controller marks the registration handled: it adds ``"unclean_shutdown_handled":<broker epoch>``
(the czxid of the registration it handled), so that the next controller does not take the broker
out again, and so that the broker, reading it before a clean stop, leaves the unclean shutdown
behind (:meth:`strandline.broker.broker.Broker.unclean_shutdown_unhandled`). A mark that lands on
a later registration (the broker registered again between the read and the write) names another
epoch, and so marks nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from strandline.controller.context import Awaiting, ControllerContext
from strandline.controller.office import Office
from strandline.coordination import znodes
from strandline.coordination.store import GetData, OpResult, SetData, ZkError
from strandline.core.effects import Effect, LogLine


def unclean_registrations(ctx: ControllerContext, among: set[int] | None = None) -> set[int]:
    """The live brokers (of ``among``) whose registration says they come back from an unclean
    shutdown that no controller handled yet."""
    return {b for b, info in ctx.live_brokers.items() if (among is None or b in among)
            and info.clean_shutdown is False and info.unclean_shutdown_handled != ctx.broker_epochs.get(b)}


def mark_handled(office: Office, ctx: ControllerContext, brokers: set[int]) -> list[Effect]:
    """Mark the registrations of ``brokers`` handled, each as the controller knows it (its epoch)."""
    if not office.in_office(ctx):
        return []
    return [office.outbox.zk([GetData(znodes.BrokerIdZNode.path(b))],
                             AwaitingRegistrationRead(ctx, b, ctx.broker_epochs[b], office))
            for b in sorted(brokers) if b in ctx.broker_epochs]


@dataclass(eq=False, repr=False)
class AwaitingRegistrationRead(Awaiting):
    """The read of broker ``broker``'s registration, to mark its unclean shutdown handled."""

    broker: int
    broker_epoch: int
    office: Office = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        [res] = results
        if res.error is not ZkError.NONE or res.data is None or not self.office.in_office(self.ctx):
            return []
        registration = json.loads(res.data)
        if registration.get("clean_shutdown") is not False:
            return []
        registration["unclean_shutdown_handled"] = self.broker_epoch
        data = json.dumps(registration, separators=(",", ":")).encode()
        write = SetData(znodes.BrokerIdZNode.path(self.broker), data, res.version)
        return [self.office.outbox.zk([write], AwaitingRegistrationMarked(self.ctx, self.broker))]


@dataclass(eq=False, repr=False)
class AwaitingRegistrationMarked(Awaiting):
    """The compare-and-set marking broker ``broker``'s unclean shutdown handled."""

    broker: int

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        if results[0].error is ZkError.NONE:
            return [LogLine("info", f"Broker {self.broker}'s unclean shutdown is handled: it left every ISR "
                                    f"and ELR it was in, and its registration says so")]
        return []      # it registered again (its own value then), or ZooKeeper did not answer: a later
        # controller takes it out again, which loses nothing
