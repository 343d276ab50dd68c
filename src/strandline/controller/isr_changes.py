"""ISR changes a leader made, on the controller's side (SPEC ISR-6; Kafka's IsrChangeNotification
handling before AlterIsr).

Leaders list the partitions whose ISR they changed under ``/isr_change_notification``; the
controller reads those notifications, reads the partitions' state znodes, tells every broker
(UpdateMetadata), deletes the notifications and looks whether a reassignment can end. A read
ZooKeeper did not answer is made again (a notification is deleted only once read, its partitions'
state only counts once read), as Kafka's ZooKeeper client resends a request until its session ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strandline.core.effects import Effect
from strandline.controller.candidacy import CONTROLLER_RETRY_MS
from strandline.controller.context import Awaiting, ControllerContext
from strandline.controller.office import Office
from strandline.controller.reassignment import PartitionReassignments
from strandline.coordination import znodes
from strandline.coordination.store import Delete, GetData, OpResult, ZkError
from strandline.protocol import control

Key = tuple[str, int]


class IsrChanges:
    def __init__(self, office: Office, reassignments: PartitionReassignments) -> None:
        self.office = office
        self.reassignments = reassignments

    def on_notifications(self, children: list[str], now_ms: int) -> list[Effect]:
        """The children of ``/isr_change_notification`` changed (or some were not read yet)."""
        ctx = self.office.ctx
        if ctx is None or not children:
            return []
        paths = [f"{znodes.IsrChangeNotificationZNode.path()}/{child}" for child in children]
        return [self.office.outbox.zk([GetData(p) for p in paths], AwaitingIsrChangeNotifications(ctx, children, self))]

    def _on_notifications_read(self, wait: AwaitingIsrChangeNotifications, results: list[OpResult],
                               when_ms: int) -> list[Effect]:
        ctx, outbox = wait.ctx, self.office.outbox
        if not self.office.in_office(ctx):
            return []
        keys: set[Key] = set()
        read: list[str] = []
        unanswered: list[str] = []
        for child, res in zip(wait.children, results):
            path = f"{znodes.IsrChangeNotificationZNode.path()}/{child}"
            if res.error is ZkError.NONE:
                read.append(path)
                try:
                    keys.update(znodes.IsrChangeNotificationSequenceZNode.decode(res.data, path))
                except Exception:  # a malformed notification is dropped, as Kafka does
                    pass
            elif res.error is not ZkError.NO_NODE:
                unanswered.append(child)
        effects: list[Effect] = [outbox.zk([Delete(path) for path in read], NotificationsDeleted(ctx, read))] \
            if read else []
        if unanswered:
            effects += outbox.after(when_ms + CONTROLLER_RETRY_MS, RetryIsrChangeNotifications(unanswered, self))
        return effects + self.read_partition_states(ctx, sorted(k for k in keys if k[0] in ctx.topics), when_ms)

    def read_partition_states(self, ctx: ControllerContext, keys: list[Key], now_ms: int) -> list[Effect]:
        """Read the state znodes of ``keys``, tell every broker, and look whether a move can end;
        the reads ZooKeeper did not answer are made again."""
        if not keys:
            return []
        reads = [GetData(znodes.TopicPartitionStateZNode.path(n, i)) for n, i in keys]
        return [self.office.outbox.zk(reads, AwaitingPartitionStates(ctx, keys, self))]

    def _on_states(self, wait: AwaitingPartitionStates, states: list[OpResult], at_ms: int) -> list[Effect]:
        ctx, office = wait.ctx, self.office
        if not office.in_office(ctx):
            return []
        parts = []
        unanswered: list[Key] = []
        for (name, index), res in zip(wait.keys, states):
            topic = ctx.topics.get(name)
            if topic is None or res.error is ZkError.NO_NODE:
                continue
            if res.error is ZkError.NONE:
                topic.states[index] = znodes.TopicPartitionStateZNode.decode(res.data, res.version)
                parts.append((topic, index))
            else:
                unanswered.append((name, index))
        out: list[Effect] = []
        if unanswered:
            out += office.outbox.after(at_ms + CONTROLLER_RETRY_MS, RetryPartitionStates(ctx, unanswered, self))
        if not parts:
            return out
        body = office.channel.update_metadata_body(ctx, parts)
        for broker_id in sorted(ctx.live_brokers):
            out.extend(office.channel.send(ctx, broker_id, control.UPDATE_METADATA, body, at_ms))
        return out + self.reassignments.maybe_complete(ctx, [(t.name, i) for t, i in parts], at_ms)


@dataclass(eq=False, repr=False)
class AwaitingIsrChangeNotifications(Awaiting):
    """The reads of the ISR change notifications ``children``."""

    children: list[str]
    owner: IsrChanges = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.owner._on_notifications_read(self, results, now_ms)


@dataclass(eq=False, repr=False)
class NotificationsDeleted(Awaiting):
    """The deletion of the ISR change notifications read (nothing follows it)."""

    paths: list[str]

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return []


@dataclass(eq=False)
class RetryIsrChangeNotifications:
    """The timer after which the notifications ZooKeeper did not answer are read again (in the
    term current then)."""

    children: list[str]
    owner: IsrChanges = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.owner.on_notifications(self.children, now_ms)


@dataclass(eq=False, repr=False)
class AwaitingPartitionStates(Awaiting):
    """The reads of the state znodes of ``keys`` after their ISRs changed."""

    keys: list[Key]
    owner: IsrChanges = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.owner._on_states(self, results, now_ms)


@dataclass(eq=False, repr=False)
class RetryPartitionStates(Awaiting):
    """The timer after which the state znodes ZooKeeper did not answer are read again."""

    keys: list[Key]
    owner: IsrChanges = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.owner.read_partition_states(self.ctx, self.keys, now_ms) \
            if self.owner.office.in_office(self.ctx) else []
