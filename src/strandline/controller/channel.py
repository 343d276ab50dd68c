"""The controller's requests to brokers (Kafka's ControllerChannelManager and
ControllerBrokerRequestBatch; SPEC CTL-1, CTL-4, CTL-5).

Every broker, the controller's own included, learns what the controller decided only from
LeaderAndIsr (become leader or follower of a partition), UpdateMetadata (the cluster as clients
should see it) and StopReplica. They go batched, one request per broker; the controller's own
share goes through the same handling as a request that came over the network. A request that got
no answer is sent again while the broker is alive and this controller still in office, addressed
to the broker's registration it was first sent to (KIP-380: a broker that registered again since
refuses it with STALE_BROKER_EPOCH). A request the broker refused as a whole with
STALE_BROKER_EPOCH or STALE_CONTROLLER_EPOCH is sent again too while that registration is the
broker's current one and this controller is in office: the broker refuses requests from anyone but
the controller it read in ``/controller``, to its registration as it knows it, and it may learn of
a new controller, or of its own new registration, a moment after the controller spoke to it.

A retry names only the partitions no later request to that broker named since: it may arrive
after a later request (the first try's answer was lost, not the try itself), and Kafka's broker
hears a controller's requests in the order it sent them (one in flight per broker, its
RequestSendThread). A LeaderAndIsr sent again after the StopReplica (delete) of a move that took
the replica away made the broker a replica again, in an old epoch, with an empty log.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from kio.schema.errors import ErrorCode

from strandline.core.listeners import SECURITY_PROTOCOL_IDS
from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.controller.context import Awaiting, ControllerContext
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import LeaderAndIsr
from strandline.protocol import control

LEADER_DURING_DELETE = -2       # UpdateMetadata's leader for a partition being deleted (Kafka)
CONTROL_RETRY_MS = 500          # resend a control request after a failed connection

#: ``deliver(api_key, body, topics, now_ms)``: hand a control request to this broker's own replica
#: manager, with the topics it names as the controller knows them (they need not be read back from
#: ZooKeeper, where the controller may just have written them).
LocalDelivery = Callable[[int, dict[str, Any], "dict[str, TopicMetadata]", int], list[Effect]]


class ControllerChannel:
    def __init__(self, broker_id: int, outbox: Outbox, deliver_locally: LocalDelivery,
                 in_office: Callable[[ControllerContext], bool]) -> None:
        self.broker_id = broker_id
        self.outbox = outbox
        self.deliver_locally = deliver_locally
        self.in_office = in_office
        #: (broker, what, topic, partition) -> the number of the latest request naming the partition
        #: to that broker; ``what`` is the replica's role (LeaderAndIsr, StopReplica) or the metadata
        self.latest: dict[tuple[int, str, str, int], int] = {}
        self.requests_sent = 0

    # ------------------------------------------------------------------ request bodies

    def header(self, ctx: ControllerContext) -> dict[str, Any]:
        return {"controller_id": self.broker_id, "controller_epoch": ctx.epoch, "broker_epoch": -1}

    def leader_and_isr_body(self, ctx: ControllerContext, parts: list[tuple[TopicMetadata, int]],
                            is_new: bool) -> dict[str, Any]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        ids: dict[str, uuid.UUID] = {}
        leaders: set[int] = set()
        for topic, index in parts:
            state = topic.states[index]
            leaders.add(state.leader)
            ids[topic.name] = topic.topic_id
            by_topic.setdefault(topic.name, []).append({
                "partition_index": index, "controller_epoch": state.controller_epoch,
                "leader": state.leader, "leader_epoch": state.leader_epoch, "isr": list(state.isr),
                "zk_version": state.zk_version, "replicas": list(topic.assignment[index]),
                "adding_replicas": list(topic.adding.get(index, ())),
                "removing_replicas": list(topic.removing.get(index, ())), "is_new": is_new})
        brokers = ctx.live_brokers
        live_leaders = [{"broker_id": b, "host_name": brokers[b].host, "port": brokers[b].port}
                        for b in sorted(leaders) if b in brokers]
        return {**self.header(ctx), "type": 0,
                "topic_states": [{"topic_name": n, "topic_id": ids[n], "partition_states": p}
                                 for n, p in by_topic.items()],
                "live_leaders": live_leaders}

    def stop_replica_body(self, ctx: ControllerContext, parts: list[tuple[str, int]], delete: bool,
                          deleting_topic: bool = False) -> dict[str, Any]:
        """StopReplica v3 for ``parts``, each with the leader epoch the controller knows (KIP-570),
        or -2 for a topic being deleted."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        ids: dict[str, uuid.UUID | None] = {}
        for name, index in parts:
            topic = ctx.topics.get(name)
            state = topic.states.get(index) if topic is not None else None
            ids[name] = topic.topic_id if topic is not None else None
            epoch = control.EPOCH_DURING_DELETE if deleting_topic else state.leader_epoch if state is not None else -1
            by_topic.setdefault(name, []).append(
                {"partition_index": index, "leader_epoch": epoch, "delete_partition": delete})
        # the topic id is not sent (StopReplica has none): a retry checks it (_resend)
        return {**self.header(ctx), "topic_states": [{"topic_name": n, "topic_id": ids[n], "partition_states": p}
                                                     for n, p in by_topic.items()]}

    def update_metadata_body(self, ctx: ControllerContext, parts: list[tuple[TopicMetadata, int]],
                             deleted: Sequence[tuple[str, int]] = ()) -> dict[str, Any]:
        brokers = ctx.live_brokers
        by_topic: dict[str, list[dict[str, Any]]] = {}
        ids = {name: ctx.topics[name].topic_id if name in ctx.topics else uuid.UUID(int=0) for name, _ in deleted}
        for topic, index in parts:
            ids[topic.name] = topic.topic_id
            state = topic.states.get(index) or LeaderAndIsr(-1, -1, ())
            replicas = list(topic.assignment[index])
            by_topic.setdefault(topic.name, []).append({
                "partition_index": index, "controller_epoch": state.controller_epoch, "leader": state.leader,
                "leader_epoch": state.leader_epoch, "isr": list(state.isr), "zk_version": state.zk_version,
                "replicas": replicas, "offline_replicas": [r for r in replicas if r not in brokers]})
        for name, index in deleted:
            by_topic.setdefault(name, []).append({
                "partition_index": index, "controller_epoch": ctx.epoch,
                "leader": LEADER_DURING_DELETE, "leader_epoch": 0, "isr": [], "zk_version": 0,
                "replicas": [], "offline_replicas": []})
        return {**self.header(ctx),
                "topic_states": [{"topic_name": n, "topic_id": ids[n], "partition_states": p}
                                 for n, p in by_topic.items()],
                "live_brokers": self._live_brokers(ctx)}

    @staticmethod
    def _live_brokers(ctx: ControllerContext) -> list[dict[str, Any]]:
        return [{"id": b.id, "endpoints": [
                    {"port": port, "host": host, "listener": name, "security_protocol": SECURITY_PROTOCOL_IDS[proto]}
                    for name, host, port, proto in (b.endpoints or (("PLAINTEXT", b.host, b.port, "PLAINTEXT"),))],
                 "rack": b.rack}
                for b in ctx.live_brokers.values()]

    # ------------------------------------------------------------------ sending

    def send_partition_states(self, ctx: ControllerContext, parts: list[tuple[TopicMetadata, int]],
                              to_brokers: set[int] | None, is_new: bool, now_ms: int,
                              metadata_to: set[int] | None = None) -> list[Effect]:
        """LeaderAndIsr for ``parts`` to their live replicas (only those in ``to_brokers`` when
        given), then UpdateMetadata for them to every live broker (or ``metadata_to``)."""
        live = set(ctx.live_brokers)
        per_broker: dict[int, list[tuple[TopicMetadata, int]]] = {}
        for topic, index in parts:
            if index not in topic.states:
                continue
            for replica in topic.assignment[index]:
                if replica in live and (to_brokers is None or replica in to_brokers):
                    per_broker.setdefault(replica, []).append((topic, index))
        effects: list[Effect] = []
        # others first, so that a local follower's first fetch finds its leader informed; all
        # LeaderAndIsr before any UpdateMetadata, so that leaders serve before clients hear of them
        for broker_id in sorted(per_broker, key=lambda b: b == self.broker_id):
            effects.extend(self.send(ctx, broker_id, control.LEADER_AND_ISR,
                                     self.leader_and_isr_body(ctx, per_broker[broker_id], is_new), now_ms))
        body = self.update_metadata_body(ctx, parts)
        for broker_id in sorted(live if metadata_to is None else metadata_to & live):
            effects.extend(self.send(ctx, broker_id, control.UPDATE_METADATA, body, now_ms))
        return effects

    @staticmethod
    def _partition_keys(broker_id: int, api_key: int, body: dict[str, Any]) -> list[tuple[int, str, str, int]]:
        what = "metadata" if api_key == control.UPDATE_METADATA else "replica"
        return [(broker_id, what, ts["topic_name"], ps["partition_index"])
                for ts in body.get("topic_states", ()) for ps in ts["partition_states"]]

    def _resend(self, ctx: ControllerContext, broker_id: int, api_key: int, body: dict[str, Any], now_ms: int,
                done: Callable[[int], list[Effect]] | None, refusals: int, number: int) -> list[Effect]:
        """Send again request ``number``, which got no answer (or was refused as a whole,
        ``refusals`` times so far), without what a later request to the broker named, and without
        what no longer holds: what a topic's
        deletion said of a topic made again since under that name, and what it said of a topic
        since deleted or made again (another topic id). Sent late, after the newer topic's
        LeaderAndIsr, such a StopReplica would delete the newer topic's replica (StopReplica names
        no topic id), an UpdateMetadata would drop it from the broker's metadata. An UpdateMetadata
        names the brokers alive now: the broker may have taken a later one meanwhile, whose brokers
        it must not replace by older ones."""
        def deletion(ps: dict[str, Any]) -> bool:
            return ps.get("leader_epoch") == control.EPOCH_DURING_DELETE if api_key == control.STOP_REPLICA \
                else ps.get("leader") == LEADER_DURING_DELETE
        what = "metadata" if api_key == control.UPDATE_METADATA else "replica"
        topic_states = []
        for ts in body.get("topic_states", ()):
            current = ctx.topics.get(ts["topic_name"])
            named = ts.get("topic_id")
            same = current is not None and (named is None or not named.int or current.topic_id == named)
            kept = [ps for ps in ts["partition_states"] if (current is None if deletion(ps) else same)
                    and self.latest.get((broker_id, what, ts["topic_name"], ps["partition_index"])) == number]
            if kept:
                topic_states.append({**ts, "partition_states": kept})
        if api_key in (control.STOP_REPLICA, control.LEADER_AND_ISR) and not topic_states:
            return done(now_ms) if done is not None else []
        again = {**body, "topic_states": topic_states} if "topic_states" in body else dict(body)
        if api_key == control.UPDATE_METADATA:
            again["live_brokers"] = self._live_brokers(ctx)
        return self._send(ctx, broker_id, api_key, again, now_ms, done, refusals, number)

    def send(self, ctx: ControllerContext, broker_id: int, api_key: int, body: dict[str, Any], now_ms: int,
             done: Callable[[int], list[Effect]] | None = None) -> list[Effect]:
        """Send a control request, or hand it to this broker's own replica manager. ``done(now_ms)``
        (if given) once the broker answered, or is no longer live, while this controller is in office."""
        self.requests_sent += 1
        number = self.requests_sent
        if broker_id != self.broker_id:
            for key in self._partition_keys(broker_id, api_key, body):
                self.latest[key] = number
        return self._send(ctx, broker_id, api_key, body, now_ms, done, 0, number)

    def _send(self, ctx: ControllerContext, broker_id: int, api_key: int, body: dict[str, Any], now_ms: int,
              done: Callable[[int], list[Effect]] | None, refusals: int, number: int) -> list[Effect]:
        if broker_id == self.broker_id:
            named = {ts["topic_name"] for ts in body.get("topic_states", ())}
            effects = self.deliver_locally(api_key, body, {n: ctx.topics[n] for n in named if n in ctx.topics}, now_ms)
            return effects + (done(now_ms) if done is not None else [])
        # KIP-380: addressed to the broker's registration the controller knows; a later life of
        # that broker refuses it (a retry must not reach a broker that restarted meanwhile)
        if body["broker_epoch"] < 0:       # a retry keeps the registration it was first addressed to
            body = {**body, "broker_epoch": ctx.broker_epochs.get(broker_id, -1)}

        client_id = f"strandline-controller-{self.broker_id}"
        return self.outbox.send(ctx.live_brokers.get(broker_id), "controller",
                                lambda cid: control.encode_request(api_key, cid, client_id, body),
                                AwaitingControlResponse(ctx, broker_id, api_key, body, done, refusals, number, self),
                                now_ms)

    def _on_response(self, wait: AwaitingControlResponse, frame: bytes | None, when_ms: int) -> list[Effect]:
        ctx, broker_id, api_key, body, done = wait.ctx, wait.broker_id, wait.api_key, wait.body, wait.then
        again = self.in_office(ctx) and broker_id in ctx.live_brokers
        if frame is None and again:
            return self.outbox.after(when_ms + CONTROL_RETRY_MS, RetryControlRequest(
                ctx, broker_id, api_key, body, done, wait.refusals, wait.number, self))
        refused = self._refused(api_key, frame) if frame is not None else None
        if refused is not None and again and ctx.broker_epochs.get(broker_id) == body["broker_epoch"]:
            # not yet known there as the controller, or as the registration it addressed: again
            said = [] if wait.refusals else [
                LogLine("info", f"Broker {broker_id} refused {control.NAMES[api_key]} with "
                                f"{refused.name.upper()}; sending it again until it takes it")]
            return said + self.outbox.after(when_ms + CONTROL_RETRY_MS, RetryControlRequest(
                ctx, broker_id, api_key, body, done, wait.refusals + 1, wait.number, self))
        effects = self._answered(broker_id, api_key, frame) if frame is not None else []
        return effects + (done(when_ms) if done is not None and self.in_office(ctx) else [])

    @staticmethod
    def _refused(api_key: int, frame: bytes) -> ErrorCode | None:
        """The error a broker refused a whole request with, when it is one a retry may get past."""
        try:
            code = control.decode_response(api_key, frame)["error_code"]
        except Exception:
            return None
        if code in (ErrorCode.stale_broker_epoch, ErrorCode.stale_controller_epoch):
            return ErrorCode(code)
        return None

    @staticmethod
    def _answered(broker_id: int, api_key: int, frame: bytes) -> list[Effect]:
        """What an answer to a control request says (logged when it names errors)."""
        try:
            answer = control.decode_response(api_key, frame)
        except Exception as exc:
            return [LogLine("warning", f"Bad {control.NAMES[api_key]} response from broker {broker_id}: {exc}")]
        errors = [e for e in answer.get("partition_errors", ()) if e["error_code"]] + [
            e for t in answer.get("topics", ()) for e in t["partition_errors"] if e["error_code"]]
        if answer["error_code"] or errors:
            # a broker that already has a state answers STALE_CONTROLLER_EPOCH for it, and a
            # broker that restarted since the request was addressed STALE_BROKER_EPOCH: routine
            routine = answer["error_code"] == ErrorCode.stale_broker_epoch or not answer["error_code"] and all(
                e["error_code"] == ErrorCode.stale_controller_epoch for e in errors)
            return [LogLine("info" if routine else "warning",
                        f"Broker {broker_id} answered {control.NAMES[api_key]} with error {answer['error_code']} "
                        f"{errors[:5]}{' (states it already had)' if routine else ''}")]
        return []


@dataclass(eq=False, repr=False)
class _ControlRequest(Awaiting):
    broker_id: int
    api_key: int = field(repr=False)
    body: dict[str, Any] = field(repr=False)
    then: Callable[[int], list[Effect]] | None
    refusals: int                       # times refused as a whole so far
    number: int                         # the request's number (a retry leaves out what later ones named)
    channel: ControllerChannel = field(repr=False)
    request: str = field(init=False)    # the request's name

    def __post_init__(self) -> None:
        self.request = control.NAMES[self.api_key]


@dataclass(eq=False, repr=False)
class AwaitingControlResponse(_ControlRequest):
    """A control request sent to ``broker_id``: its answer (None: no answer in time), then
    ``then(now_ms)``."""

    def __call__(self, frame: bytes | None, now_ms: int) -> list[Effect]:
        return self.channel._on_response(self, frame, now_ms)


@dataclass(eq=False, repr=False)
class RetryControlRequest(_ControlRequest):
    """The timer after which a control request that got no answer, or was refused, goes again."""

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.channel._resend(self.ctx, self.broker_id, self.api_key, self.body, now_ms, self.then,
                                    self.refusals, self.number)
