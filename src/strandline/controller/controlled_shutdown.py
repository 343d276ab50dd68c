"""Controlled shutdown (SPEC CTL-9; Kafka's KafkaController.doControlledShutdown): the controller
moves a stopping broker's leaderships to other ISR members, then stops its other replicas and
takes it out of their ISRs, and answers with the partitions it still leads."""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

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

    def could_move_later(t: TopicMetadata, i: int) -> bool:
        """Retrying helps only if another replica is up (it may yet catch up)."""
        up = set(ctx.live_brokers) - ctx.shutting_down
        return any(r != broker_id and r in up for r in t.assignment[i])

    # as Kafka's doControlledShutdown: first new leaders for the partitions it leads; then it stops
    # fetching those it follows and leaves their ISRs (stopped first, so that no leader takes it
    # back in), so that its leaderships move without waiting for the rest
    led = [k for k in keys if ctx.topics[k[0]].states[k[1]].leader == broker_id]
    followed = [k for k in keys if ctx.topics[k[0]].states[k[1]].leader != broker_id]
    stopped: set[Key] = set()

    def stop_replicas(parts: list[Key], when_ms: int) -> list[Effect]:
        stopped.update(parts)
        body = office.channel.stop_replica_body(ctx, parts, False)
        if broker_epoch >= 0:
            body["broker_epoch"] = broker_epoch
        return office.channel.send(ctx, broker_id, control.STOP_REPLICA, body, when_ms)

    def shrink(when_ms: int) -> list[Effect]:
        if not office.in_office(ctx):
            return done(when_ms)
        effects = stop_replicas(followed, when_ms) if followed else []
        return effects + elections.elect(ctx, followed, {broker_id}, when_ms, done)

    def done(when_ms: int) -> list[Effect]:
        if not office.in_office(ctx):          # deposed meanwhile: the broker asks the new one
            return respond({"error_code": ErrorCode.stale_controller_epoch, "remaining_partitions": []})
        remaining = [{"topic_name": t.name, "partition_index": i} for t, i in ctx.all_partitions()
                     if i in t.states and t.states[i].leader == broker_id and len(t.assignment[i]) > 1
                     and could_move_later(t, i)]
        # it stops fetching the rest too (those whose leadership moved away from it)
        stop = [(t.name, i) for t, i in ctx.all_partitions()
                if broker_id in t.assignment[i] and t.states.get(i) and t.states[i].leader != broker_id
                and (t.name, i) not in stopped]
        effects: list[Effect] = [LogLine("info", f"Controlled shutdown of broker {broker_id}: {len(keys)} partition(s) "
                                     f"moved or shrunk, {len(remaining)} remaining",
                                         event="controlled_shutdown")]
        if stop:
            effects.extend(stop_replicas(stop, when_ms))
        return effects + respond({"error_code": ErrorCode.none, "remaining_partitions": remaining})

    return elections.elect(ctx, led, {broker_id}, now_ms, shrink)
