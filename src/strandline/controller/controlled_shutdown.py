"""Controlled shutdown (SPEC CTL-9; Kafka's KafkaController.doControlledShutdown): the controller
moves a stopping broker's leaderships to other ISR members, then stops its other replicas and
takes it out of their ISRs, and answers with the partitions it still leads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.controller.context import ControllerContext
from strandline.controller.elections import PartitionElections
from strandline.controller.office import Office
from strandline.core.effects import Effect, LogLine
from strandline.coordination.metadata import TopicMetadata
from strandline.protocol import control

Key = tuple[str, int]


def controlled_shutdown(office: Office, elections: PartitionElections, broker_id: int, broker_epoch: int,
                        respond: Callable[[dict[str, Any]], list[Effect]],
                        now_ms: int) -> list[Effect]:
    """The controller moves a stopping broker's leaderships to other ISR members and takes it
    out of the ISRs it follows; it answers with the partitions it still leads (no other ISR
    member could take them). The request must name a live broker and its current registration
    (the czxid of its ``/brokers/ids`` znode, KIP-380): anything else is refused with
    STALE_BROKER_EPOCH, an earlier registration's request as in Kafka, and beyond Kafka one naming
    an unknown epoch (-1, as v0 and v1 do), a later one or a broker that is not registered, so that
    a client cannot move a broker's leaderships away. The StopReplica that ends a shutdown is
    addressed to the registration that asked, so that a broker restarted meanwhile refuses it."""
    ctx = office.ctx
    if ctx is None:     # Kafka's ControllerMovedException: STALE_CONTROLLER_EPOCH, "The controller moved"
        return respond({"error_code": ErrorCode.stale_controller_epoch, "remaining_partitions": []})
    if broker_id not in ctx.live_brokers or broker_epoch < 0 or broker_epoch != ctx.broker_epochs.get(broker_id):
        return respond({"error_code": ErrorCode.stale_broker_epoch, "remaining_partitions": []})
    ctx.shutting_down.add(broker_id)
    # as Kafka, partitions with a single replica are left alone
    keys = [(t.name, i) for t, i in ctx.all_partitions()
            if i in t.states and len(t.assignment[i]) > 1
            and (t.states[i].leader == broker_id or broker_id in t.states[i].isr)]

    # as Kafka's doControlledShutdown: first new leaders for the partitions it leads; then it stops
    # fetching those it follows and leaves their ISRs (stopped first, so that no leader takes it
    # back in), so that its leaderships move without waiting for the rest
    led = [k for k in keys if ctx.topics[k[0]].states[k[1]].leader == broker_id]
    followed = [k for k in keys if ctx.topics[k[0]].states[k[1]].leader != broker_id]
    shutdown = ControlledShutdown(ctx, broker_id, broker_epoch, keys, followed, respond, office, elections)
    return elections.elect(ctx, led, {broker_id}, now_ms, shutdown.shrink)


@dataclass(eq=False)
class ControlledShutdown:
    """One controlled shutdown of ``broker_id``: after the elections of the partitions it led
    (:meth:`shrink`), those of the partitions it ``followed``, then the answer (:meth:`done`)."""

    ctx: ControllerContext = field(repr=False)
    broker_id: int
    broker_epoch: int
    keys: list[Key] = field(repr=False)
    followed: list[Key] = field(repr=False)
    respond: Callable[[dict[str, Any]], list[Effect]] = field(repr=False)
    office: Office = field(repr=False)
    elections: PartitionElections = field(repr=False)
    stopped: set[Key] = field(default_factory=set, repr=False)

    def could_move_later(self, t: TopicMetadata, i: int) -> bool:
        """Retrying helps only if another replica is up (it may yet catch up)."""
        up = set(self.ctx.live_brokers) - self.ctx.shutting_down
        return any(r != self.broker_id and r in up for r in t.assignment[i])

    def stop_replicas(self, parts: list[Key], when_ms: int) -> list[Effect]:
        self.stopped.update(parts)
        body = self.office.channel.stop_replica_body(self.ctx, parts, False)
        if self.broker_epoch >= 0:
            body["broker_epoch"] = self.broker_epoch
        return self.office.channel.send(self.ctx, self.broker_id, control.STOP_REPLICA, body, when_ms)

    def shrink(self, when_ms: int) -> list[Effect]:
        if not self.office.in_office(self.ctx):
            return self.done(when_ms)
        effects = self.stop_replicas(self.followed, when_ms) if self.followed else []
        return effects + self.elections.elect(self.ctx, self.followed, {self.broker_id}, when_ms, self.done)

    def done(self, when_ms: int) -> list[Effect]:
        ctx, broker_id = self.ctx, self.broker_id
        if not self.office.in_office(ctx):          # deposed meanwhile: the broker asks the new one
            return self.respond({"error_code": ErrorCode.stale_controller_epoch, "remaining_partitions": []})
        remaining = [{"topic_name": t.name, "partition_index": i} for t, i in ctx.all_partitions()
                     if i in t.states and t.states[i].leader == broker_id and len(t.assignment[i]) > 1
                     and self.could_move_later(t, i)]
        # it stops fetching the rest too (those whose leadership moved away from it)
        stop = [(t.name, i) for t, i in ctx.all_partitions()
                if broker_id in t.assignment[i] and t.states.get(i) and t.states[i].leader != broker_id
                and (t.name, i) not in self.stopped]
        effects: list[Effect] = [LogLine("info", f"Controlled shutdown of broker {broker_id}: {len(self.keys)} "
                                                 f"partition(s) moved or shrunk, {len(remaining)} remaining",
                                         event="controlled_shutdown")]
        if stop:
            effects.extend(self.stop_replicas(stop, when_ms))
        return effects + self.respond({"error_code": ErrorCode.none, "remaining_partitions": remaining})
