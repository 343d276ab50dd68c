"""Deleting topics, the controller's side (Kafka's TopicDeletionManager, in ZooKeeper mode).

A deletion first records itself under ``/admin/delete_topics/<t>`` (the topic's id and partition
count), then removes the topic's znodes, then tells every live broker: StopReplica deleting the
partitions (leader epoch -2), UpdateMetadata marking them deleted. It removes its record once each
of those brokers has answered, or is gone, and every broker that held a replica of the topic has
answered, as Kafka waits for every replica: one that was not live hears of the deletion when it
registers again. Until then the topic is not made again (``zk_layout.create_topic_ops``). A
controller that takes office, or sees a broker return, resumes every deletion
recorded: one whose controller lost its office before the brokers heard of it would otherwise leave
them serving a topic ZooKeeper no longer has. A record without data is what Kafka's own tools write
to ask for a deletion: the topic it names is deleted.

The brokers are told of the topic's id (UpdateMetadata) and a StopReplica retried after a topic of
the same name was made again leaves that topic out (:meth:`ControllerChannel._resend`), so that a
late deletion never touches a newer topic; a broker down meanwhile deletes the logs at start-up.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.controller.office import Office
from strandline.controller.context import Awaiting, ControllerContext
from strandline.coordination import zk_layout, znodes
from strandline.coordination.store import Create, Delete, GetChildren, GetData, OpResult, SetData, ZkError
from strandline.protocol import control

RETRY_MS = 1000             # write or read again after ZooKeeper failed to answer
_RECORD = znodes.DeleteTopicsTopicZNode


class TopicDeletions:
    def __init__(self, office: Office) -> None:
        self.office = office

    def delete(self, ctx: ControllerContext, name: str, done: Callable[[ErrorCode, str | None, int], list[Effect]],
               now_ms: int) -> list[Effect]:
        """Record the deletion, remove the topic's znodes, drop it from the cluster and tell the
        brokers; ``done`` once the controller's own broker has dropped it (the others hear of it
        as their answers come)."""
        topic = ctx.topics.get(name)
        if topic is None:
            return done(ErrorCode.unknown_topic_or_partition, None, now_ms)
        if name in ctx.deleting:                # another request's deletion of it is under way
            ctx.deleting[name].append(done)
            return []
        ctx.deleting[name] = [done]
        topic_id, partitions = topic.topic_id, max(topic.assignment, default=-1) + 1
        replicas = tuple(sorted({b for r in topic.assignment.values() for b in r} |
                                {b for (t, _), moves in ctx.reassigning.items() if t == name
                                 for replica_set in moves for b in replica_set}))
        deletion = Deletion(ctx, name, topic_id, partitions, replicas, self)
        return self._record(ctx, name, _RECORD.encode(topic_id, partitions, replicas), deletion.recorded,
                            deletion.finish, now_ms)

    def resume(self, ctx: ControllerContext, now_ms: int, only: list[str] | None = None) -> list[Effect]:
        """On taking office, or when a broker returns: carry on every deletion recorded under
        ``/admin/delete_topics`` (``only`` those named)."""
        return [self.office.outbox.zk([GetChildren(znodes.DeleteTopicsZNode.path())],
                                      AwaitingDeletionRecords(ctx, only, self))]

    def _on_records_listed(self, ctx: ControllerContext, only: list[str] | None, results: list[OpResult],
                           when_ms: int) -> list[Effect]:
        office = self.office
        if not office.in_office(ctx):
            return []
        [res] = results
        if res.error is ZkError.NO_NODE or (res.error is ZkError.NONE and not res.children):
            return []
        if res.error is not ZkError.NONE:
            return office.outbox.after(when_ms + RETRY_MS, RetryResumeDeletions(ctx, only, self))
        children = [c for c in res.children if only is None or c in only]
        if not children:
            return []
        return [office.outbox.zk([GetData(_RECORD.path(n)) for n in children],
                                 AwaitingDeletionRecordReads(ctx, children, only, self))]

    def _on_records_read(self, wait: AwaitingDeletionRecordReads, records: list[OpResult],
                         at_ms: int) -> list[Effect]:
        office, ctx = self.office, wait.ctx
        if not office.in_office(ctx):
            return []
        if any(r.error not in (ZkError.NONE, ZkError.NO_NODE) for r in records):
            return office.outbox.after(at_ms + RETRY_MS, RetryResumeDeletions(ctx, wait.only, self))
        effects: list[Effect] = []
        for name, record in zip(wait.children, records):
            if record.error is ZkError.NONE:
                effects += self._resume_one(ctx, name, record.data, record.version, at_ms)
        return effects

    def on_records_changed(self, ctx: ControllerContext, children: list[str], now_ms: int) -> list[Effect]:
        """The children of ``/admin/delete_topics`` changed (Kafka's TopicDeletionHandler): a
        record that no deletion of this controller is carrying out (one Kafka's tools wrote, or
        one left by a controller that lost its office) is taken up at once."""
        if any(name not in ctx.deleting and name not in ctx.deletions_told for name in children):
            return self.resume(ctx, now_ms, only=[n for n in children
                                                  if n not in ctx.deleting and n not in ctx.deletions_told])
        return []

    def _resume_one(self, ctx: ControllerContext, name: str, data: bytes | None, version: int,
                    now_ms: int) -> list[Effect]:
        try:
            recorded = _RECORD.decode(data, name)
        except ValueError as exc:
            return [LogLine("warning", f"Ignoring the deletion of topic {name} recorded in ZooKeeper: {exc}")]
        topic = ctx.topics.get(name)
        if recorded is None or (topic is not None and topic.topic_id == recorded[0]):
            if topic is None:                       # a request for a topic that is not there (any more)
                return self._forget(ctx, name, version)
            return [LogLine("info", f"Resuming the deletion of topic {name}")] + \
                self.delete(ctx, name, _nobody_asked, now_ms)
        if topic is not None:                       # made again since: the deletion is long done
            return self._forget(ctx, name, version)
        topic_id, partitions, replicas = recorded
        return [LogLine("info", f"Telling the brokers again of the deletion of topic {name}")] + \
            self._tell_brokers(ctx, name, topic_id, partitions, replicas, version, now_ms)

    def _tell_brokers(self, ctx: ControllerContext, name: str, topic_id: uuid.UUID, partitions: int,
                      replicas: tuple[int, ...], version: int, now_ms: int) -> list[Effect]:
        """StopReplica deleting every partition, and UpdateMetadata marking them deleted, to every
        live broker (any may still hold the topic); forget the record once all have answered and
        every broker that held a replica has (as Kafka's deletion waits for every replica): one
        not live now hears of it when the controller sees it register again (:meth:`resume`).
        Until then the topic is not made again, so that such a broker, still leading the old
        partitions after a pause, cannot write their state over a new topic's."""
        channel = self.office.channel
        ctx.deletions_told.add(name)
        parts = [(name, i) for i in range(partitions)]
        stop = channel.stop_replica_body(ctx, parts, True, deleting_topic=True)
        metadata = channel.update_metadata_body(ctx, [], parts)
        for ts in metadata["topic_states"]:
            ts["topic_id"] = topic_id
        waiting = {(b, api) for b in set(ctx.live_brokers) | set(replicas)
                   for api in (control.STOP_REPLICA, control.UPDATE_METADATA)}
        effects: list[Effect] = []
        for broker_id in sorted(ctx.live_brokers, key=lambda b: b == channel.broker_id):
            for api_key, body in ((control.STOP_REPLICA, stop), (control.UPDATE_METADATA, metadata)):
                told = BrokerTold(ctx, name, broker_id, api_key, waiting, replicas, version, self)
                effects += channel.send(ctx, broker_id, api_key, body, now_ms, told)
        return effects

    # -- ZooKeeper

    def _record(self, ctx: ControllerContext, name: str, data: bytes, then: Callable[[int, int], list[Effect]],
                failed: Failed, now_ms: int, exists: bool = False) -> list[Effect]:
        """Write the deletion's record (over one left by an earlier deletion of that name)."""
        office = self.office
        if not office.in_office(ctx):       # a retry after this broker lost its office
            return failed(ErrorCode.not_controller, "This broker is no longer the controller", now_ms)
        op = SetData(_RECORD.path(name), data) if exists else Create(_RECORD.path(name), data, make_parents=True)
        ops = office.fenced(ctx, [op])
        return [office.outbox.zk(ops, AwaitingDeletionRecord(ctx, name, data, then, failed, exists, self),
                                 transaction=True)]

    def _on_recorded(self, wait: AwaitingDeletionRecord, results: list[OpResult], when_ms: int) -> list[Effect]:
        office, ctx, failed = self.office, wait.ctx, wait.failed
        if not office.in_office(ctx):
            return failed(ErrorCode.not_controller, "This broker is no longer the controller", when_ms)
        error = results[-1].error
        if error is ZkError.NONE:
            return wait.then(when_ms, results[-1].version)
        if error in (ZkError.NODE_EXISTS, ZkError.NO_NODE):
            return self._record(ctx, wait.name, wait.data, wait.then, failed, when_ms,
                                exists=error is ZkError.NODE_EXISTS)
        again = RetryDeletionRecord(ctx, wait.name, wait.data, wait.then, failed, wait.exists, self)
        if error is ZkError.BAD_VERSION:        # the controller epoch moved on: no longer in office
            return office.check_still_controller(
                ctx, again, when_ms,
                partial(failed, ErrorCode.not_controller, "This broker is no longer the controller", when_ms))
        return office.outbox.after(when_ms + RETRY_MS, again)

    def _remove_znodes(self, ctx: ControllerContext, name: str, then: Callable[[int], list[Effect]],
                       failed: Failed, now_ms: int) -> list[Effect]:
        """Delete the topic's znodes (again, until ZooKeeper answers: each delete may be repeated)."""
        if not self.office.in_office(ctx):           # a retry after this broker lost its office
            return failed(ErrorCode.not_controller, "This broker is no longer the controller", now_ms)
        return [self.office.outbox.zk(zk_layout.delete_topic_ops(name),
                                      AwaitingTopicZNodesRemoved(ctx, name, then, failed, self))]

    def _on_znodes_removed(self, wait: AwaitingTopicZNodesRemoved, results: list[OpResult],
                           when_ms: int) -> list[Effect]:
        if not self.office.in_office(wait.ctx):       # the next controller finishes it from the record
            return wait.failed(ErrorCode.not_controller, "This broker is no longer the controller", when_ms)
        if any(r.error not in (ZkError.NONE, ZkError.NO_NODE) for r in results):
            return self.office.outbox.after(when_ms + RETRY_MS, RemoveTopicZNodes(
                wait.ctx, wait.name, wait.then, wait.failed, self))
        return wait.then(when_ms)

    def _forget(self, ctx: ControllerContext, name: str, version: int) -> list[Effect]:
        """Delete the deletion's record, unless a later deletion of that name wrote it over since
        (that one forgets it in its turn); the topic may then be made again. Asked again while
        ZooKeeper does not answer: a record left behind would refuse the topic's creation until the
        next controller's office."""
        office = self.office
        if not office.in_office(ctx):
            return []
        return [office.outbox.zk(office.fenced(ctx, [Delete(_RECORD.path(name), version)]),
                                 AwaitingDeletionRecordRemoved(ctx, name, version, self), transaction=True)]

    def _on_forgotten(self, wait: AwaitingDeletionRecordRemoved, results: list[OpResult],
                      when_ms: int) -> list[Effect]:
        error = results[-1].error
        if error in (ZkError.NONE, ZkError.NO_NODE, ZkError.BAD_VERSION):
            wait.ctx.deletions_told.discard(wait.name)
            return []       # gone, written over by a later deletion, or this broker no longer in office
        return self.office.outbox.after(when_ms + RETRY_MS, RetryForgetDeletion(wait.ctx, wait.name, wait.version,
                                                                                self))


#: ``failed(error, message, now_ms)``: a deletion's step could not be taken.
Failed = Callable[[ErrorCode, "str | None", int], list[Effect]]


def _nobody_asked(error: ErrorCode, message: str | None, now_ms: int) -> list[Effect]:
    """The outcome of a deletion resumed from its record: no request waits for it."""
    return []


@dataclass(eq=False)
class Deletion:
    """One deletion of topic ``name``, from its record on: the steps after each write."""

    ctx: ControllerContext = field(repr=False)
    name: str
    topic_id: uuid.UUID = field(repr=False)
    partitions: int = field(repr=False)
    replicas: tuple[int, ...] = field(repr=False)
    deletions: TopicDeletions = field(repr=False)
    version: int = field(default=-1, repr=False)     # the record's, once written

    def finish(self, error: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
        """Answer every request waiting for the deletion."""
        effects: list[Effect] = []
        for waiting in self.ctx.deleting.pop(self.name, ()):
            effects += waiting(error, message, when_ms)
        return effects

    def recorded(self, when_ms: int, version: int) -> list[Effect]:
        """The record is written: remove the topic's znodes, in its turn among the writes of the
        topic's znode (a move's, a CreatePartitions)."""
        self.version = version
        return self.ctx.queue_topic_write(self.name, RemoveTopicZNodes(self.ctx, self.name, self.removed,
                                                                       self.failed, self.deletions), when_ms)

    def removed(self, at_ms: int) -> list[Effect]:
        ctx, name = self.ctx, self.name
        ctx.topics.pop(name, None)
        for key in [k for k in ctx.reassigning if k[0] == name]:
            del ctx.reassigning[key]
        effects = [LogLine("info", f"Deleted topic {name}")]
        return effects + self.deletions._tell_brokers(ctx, name, self.topic_id, self.partitions, self.replicas,
                                                      self.version, at_ms) + \
            self.finish(ErrorCode.none, None, at_ms) + ctx.topic_write_done(name, at_ms)

    def failed(self, error: ErrorCode, message: str | None, at_ms: int) -> list[Effect]:
        return self.finish(error, message, at_ms) + self.ctx.topic_write_done(self.name, at_ms)


@dataclass(eq=False, repr=False)
class AwaitingDeletionRecords(Awaiting):
    """The listing of /admin/delete_topics, to resume the deletions recorded (``only`` those)."""

    only: list[str] | None
    deletions: TopicDeletions = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.deletions._on_records_listed(self.ctx, self.only, results, now_ms)


@dataclass(eq=False, repr=False)
class RetryResumeDeletions(Awaiting):
    """The timer after which the deletions recorded are listed again (ZooKeeper did not answer)."""

    only: list[str] | None
    deletions: TopicDeletions = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        deletions = self.deletions
        return deletions.resume(self.ctx, now_ms, self.only) if deletions.office.in_office(self.ctx) else []


@dataclass(eq=False, repr=False)
class AwaitingDeletionRecordReads(Awaiting):
    """The reads of the deletion records of ``children``, to resume each."""

    children: list[str]
    only: list[str] | None = field(repr=False)
    deletions: TopicDeletions = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.deletions._on_records_read(self, results, now_ms)


@dataclass(eq=False, repr=False)
class _RecordWrite(Awaiting):
    name: str
    data: bytes = field(repr=False)
    then: Callable[[int, int], list[Effect]]
    failed: Failed = field(repr=False)
    exists: bool
    deletions: TopicDeletions = field(repr=False)


@dataclass(eq=False, repr=False)
class AwaitingDeletionRecord(_RecordWrite):
    """The fenced write of topic ``name``'s deletion record; then ``then(now_ms, version)``."""

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.deletions._on_recorded(self, results, now_ms)


@dataclass(eq=False, repr=False)
class RetryDeletionRecord(_RecordWrite):
    """The timer (or the epoch check) after which topic ``name``'s deletion record is written again."""

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.deletions._record(self.ctx, self.name, self.data, self.then, self.failed, now_ms, self.exists)


@dataclass(eq=False, repr=False)
class RemoveTopicZNodes(Awaiting):
    """Topic ``name``'s znodes to delete: a turn among the writes of the topic's znode, or the
    timer after which the deletes ZooKeeper did not answer are made again."""

    name: str
    then: Callable[[int], list[Effect]]
    failed: Failed = field(repr=False)
    deletions: TopicDeletions = field(repr=False)

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.deletions._remove_znodes(self.ctx, self.name, self.then, self.failed, now_ms)


@dataclass(eq=False, repr=False)
class AwaitingTopicZNodesRemoved(Awaiting):
    """The deletes of topic ``name``'s znodes; then ``then(now_ms)``."""

    name: str
    then: Callable[[int], list[Effect]]
    failed: Failed = field(repr=False)
    deletions: TopicDeletions = field(repr=False)

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.deletions._on_znodes_removed(self, results, now_ms)


@dataclass(eq=False, repr=False)
class BrokerTold(Awaiting):
    """Broker ``broker_id`` answered the StopReplica or UpdateMetadata of topic ``name``'s
    deletion (or is gone): once every broker ``waiting`` did, the record goes."""

    name: str
    broker_id: int
    api_key: int
    waiting: set[tuple[int, int]] = field(repr=False)
    replicas: tuple[int, ...] = field(repr=False)
    version: int = field(repr=False)
    deletions: TopicDeletions = field(repr=False)

    def __call__(self, when_ms: int) -> list[Effect]:
        if self.broker_id in self.replicas and self.broker_id not in self.ctx.live_brokers:
            return []           # it died before answering: told again when it is back
        self.waiting.discard((self.broker_id, self.api_key))
        return [] if self.waiting else self.deletions._forget(self.ctx, self.name, self.version)


@dataclass(eq=False, repr=False)
class _RecordDelete(Awaiting):
    name: str
    version: int
    deletions: TopicDeletions = field(repr=False)


@dataclass(eq=False, repr=False)
class AwaitingDeletionRecordRemoved(_RecordDelete):
    """The fenced delete of topic ``name``'s deletion record (at ``version``)."""

    def __call__(self, results: list[OpResult], now_ms: int) -> list[Effect]:
        return self.deletions._on_forgotten(self, results, now_ms)


@dataclass(eq=False, repr=False)
class RetryForgetDeletion(_RecordDelete):
    """The timer after which topic ``name``'s deletion record is deleted again."""

    def __call__(self, now_ms: int) -> list[Effect]:
        return self.deletions._forget(self.ctx, self.name, self.version)
