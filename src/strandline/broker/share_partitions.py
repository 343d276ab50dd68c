"""The share-partitions a broker leads (KIP-932), kept in step with the share coordinator.

A share group's state of a partition lives on the partition's leader
(:class:`strandline.group.share.partition.SharePartition`) and, durably, with the share coordinator
(:class:`strandline.group.share.persister.SharePersister`). When this broker first needs a
share-partition in a leader epoch it reads the state from the coordinator and hands nothing out
until it has it. A share-partition never seen starts where the group's ``share.auto.offset.reset``
says: the partition's high watermark (``latest``, Kafka's default), the log's start
(``earliest``), or the first record written within a duration before now (``by_duration``).

Every change (records handed out, acknowledged, released, their locks expiring, the log's start
moving) is written back, one write at a time per share-partition, each carrying the whole state.
An acknowledgement takes effect, and is answered, once the coordinator has it; until then its
records stay acquired by their member. A write that fails is tried again ``RETRY_BACKOFF_MS``
later with the state then; the acknowledgements it carried are not kept (their records stay
acquired by their members until their locks expire, then go out again) and are answered with the
error, as Kafka's leader rolls back an acknowledgement it could not persist. A write fenced by a
newer leader epoch drops the share-partition: another broker leads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, TypeAlias, Union
from uuid import UUID

from kio.schema.errors import ErrorCode

from strandline.broker.group_configs import GroupConfigs
from strandline.core.effects import Effect
from strandline.group.share.partition import SharePartition, StateBatch
from strandline.group.share.persister import SharePersister
from strandline.group.share.records import ShareStateKey
from strandline.protocol.records import UndecodableRecordsError
from strandline.replication.replica_manager import ReplicaManager

RETRY_BACKOFF_MS = 500
#: (group id, topic id, partition)
ShareKey = tuple[str, UUID, int]
#: ``done(errors of the share-partitions whose writes failed, now_ms)``
Written = Callable[[dict[ShareKey, ErrorCode], int], list[Effect]]


class Loading:
    """A share-partition whose state is still being read from the share coordinator."""

    def __repr__(self) -> str:
        return "LOADING"


LOADING = Loading()


@dataclass
class LedSharePartition:
    leader_epoch: int
    sp: SharePartition | None = None       # None until its state is read
    state_epoch: int = 0
    loading: bool = False
    version: int = 0                        # changes made
    written: int = 0                        # changes the coordinator has
    writing: bool = False
    retry_at_ms: int = -1                   # a failed read or write is tried again from then
    failed: tuple[int, ErrorCode] | None = None     # the last write that failed: its version, the error told
    waiters: list[tuple[int, Callable[[ErrorCode, int], list[Effect]]]] = field(default_factory=list)


#: a share-partition as led here and a version of its changes (None: not led here)
Version: TypeAlias = "tuple[LedSharePartition, int] | None"


class LedSharePartitions:
    def __init__(self, config: Any, replicas: ReplicaManager, persister: SharePersister,
                 topic_name: Callable[[UUID], "str | None"], group_configs: GroupConfigs) -> None:
        self.config = config
        self.group_configs = group_configs
        self.replicas = replicas
        self.persister = persister
        self.topic_name = topic_name
        self.partitions: dict[ShareKey, LedSharePartition] = {}
        self._pending_effects: list[Effect] = []

    def limits(self, group_id: str) -> dict[str, int]:
        return {"max_in_flight": self.config["group.share.partition.max.record.locks"],
                "delivery_count_limit": self.config["group.share.delivery.count.limit"],
                "lock_duration_ms": self.group_configs.value(group_id, "share.record.lock.duration.ms")}

    def start_offset(self, group_id: str, partition: Any, now_ms: int) -> int:
        """Where a share-partition never seen starts: the group's ``share.auto.offset.reset``."""
        reset = self.group_configs.offset_reset(group_id)
        hw = int(partition.high_watermark)
        if reset.strategy == "earliest":
            return min(int(partition.log.log_start_offset), hw)
        if reset.strategy == "by_duration":
            try:
                found = partition.log.find_offset_by_timestamp(now_ms - reset.duration_ms)
            except UndecodableRecordsError:
                found = None
            return min(int(found[0]), hw) if found is not None else hw
        return hw

    # ------------------------------------------------------------------ finding one

    def get(self, k: ShareKey, now_ms: int | None) -> Union[tuple[Any, SharePartition], ErrorCode, Loading]:
        """This broker's leadership of the partition and the group's state of it, LOADING while
        its state is read (a read is begun when ``now_ms`` is given), or the error."""
        name = self.topic_name(k[1])
        if name is None:
            return ErrorCode.unknown_topic_id
        partition = self.replicas.partitions.get((name, k[2]))
        if partition is None or not partition.is_leader or self._led_elsewhere(name, k[2], partition.leader_epoch):
            return ErrorCode.not_leader_or_follower
        led = self.partitions.get(k)
        if led is None or led.leader_epoch != partition.leader_epoch:
            if now_ms is None:
                return LOADING
            if led is not None:          # led again in a new epoch: what waited on the old one is answered
                self._pending_effects += self._drop(led, now_ms)
            # its state is read at the next tick (:meth:`next_deadline_ms` says it is due)
            led = self.partitions[k] = LedSharePartition(partition.leader_epoch, retry_at_ms=now_ms)
        if led.sp is None:
            return LOADING
        return partition, led.sp

    def _led_elsewhere(self, name: str, index: int, leader_epoch: int) -> bool:
        """Whether the metadata this broker was sent names a newer leader epoch than the one it
        leads in: a replica the controller could not reach when it moved the partition away
        (its StopReplica lost) still believes it leads, and must not hand records out."""
        topic = self.replicas.metadata.topics.get(name)
        state = topic.states.get(index) if topic is not None else None
        return state is not None and state.leader_epoch > leader_epoch

    def take_effects(self) -> list[Effect]:
        """The answers :meth:`get` gave when it replaced a share-partition of an older leader
        epoch (to the acknowledgements that waited on it): the caller sends them."""
        effects, self._pending_effects = self._pending_effects, []
        return effects

    # ------------------------------------------------------------------ changes

    def changed(self, k: ShareKey, now_ms: int) -> list[Effect]:
        """The share-partition changed: write it (after the write in flight, if one is)."""
        led = self.partitions.get(k)
        if led is None or led.sp is None:
            return []
        led.version += 1
        return self._write(k, led, now_ms)

    def acknowledge(self, k: ShareKey, member_id: str, batches: list[Any]) -> ErrorCode:
        """A member's acknowledgements, held pending until the next write (:meth:`changed`, which
        the caller makes when this answers NONE) persists them."""
        found = self.get(k, None)
        if isinstance(found, ErrorCode):
            return found
        if not isinstance(found, tuple):
            return ErrorCode.invalid_record_state           # LOADING: nothing of it is acquired yet
        return found[1].acknowledge(member_id, batches, pending=self.partitions[k].version + 1)

    def version(self, k: ShareKey) -> Version:
        """The share-partition and its changes so far: what a caller waits to see written."""
        led = self.partitions.get(k)
        return (led, led.version) if led is not None else None

    def when_written(self, keys: dict[ShareKey, Version], done: Written, now_ms: int) -> list[Effect]:
        """``done`` once each of ``keys`` is written up to the version given (its changes so far
        when :meth:`version` was asked), or failed to be: a write that failed before the wait
        began, or a share-partition no longer led here, counts as failed."""
        errors: dict[ShareKey, ErrorCode] = {}
        waiting = [0]

        def one_done(k: ShareKey) -> Callable[[ErrorCode, int], list[Effect]]:
            def finished(error: ErrorCode, at_ms: int) -> list[Effect]:
                if error is not ErrorCode.none:
                    errors[k] = error
                waiting[0] -= 1
                return done(errors, at_ms) if waiting[0] == 0 else []
            return finished

        for k, token in keys.items():
            if token is None:
                errors[k] = ErrorCode.not_leader_or_follower
                continue
            led, version = token
            if led.written >= version:
                continue
            if led.failed is not None and version <= led.failed[0]:
                errors[k] = led.failed[1]               # its write failed already: rolled back
            elif self.partitions.get(k) is not led and not led.writing:
                errors[k] = ErrorCode.not_leader_or_follower
            else:
                waiting[0] += 1
                led.waiters.append((version, one_done(k)))
        return done(errors, now_ms) if waiting[0] == 0 else []

    def release_member(self, group_id: str, member_id: str, now_ms: int) -> list[Effect]:
        """A share session closed: what its member holds here is released."""
        effects: list[Effect] = []
        for k, led in list(self.partitions.items()):
            if k[0] == group_id and led.sp is not None and led.sp.release_member(member_id):
                effects += self.changed(k, now_ms)
        return effects

    def next_deadline_ms(self) -> int | None:
        deadlines = [-1] if self._pending_effects else []       # answers to send: due now
        for led in self.partitions.values():
            if led.sp is not None and (d := led.sp.next_deadline_ms()) is not None:
                deadlines.append(d)
            if (led.sp is None and not led.loading) or (not led.writing and led.written < led.version):
                deadlines.append(led.retry_at_ms)
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = self.take_effects()
        for k, led in list(self.partitions.items()):
            if not led.loading and not led.writing and self._led(k, led) is None:
                del self.partitions[k]          # no longer led here (in that epoch)
                effects += self._drop(led, now_ms)
                continue
            if led.sp is None and not led.loading and now_ms >= led.retry_at_ms:
                effects += self._load(k, led, now_ms)
                continue
            if led.sp is not None and led.sp.expire_locks(now_ms):
                led.version += 1
            if led.sp is not None and led.written < led.version and now_ms >= led.retry_at_ms:
                effects += self._write(k, led, now_ms)
        return effects

    # ------------------------------------------------------------------ the coordinator

    def _load(self, k: ShareKey, led: LedSharePartition, now_ms: int) -> list[Effect]:
        led.loading = True
        key = ShareStateKey(*k)

        def failed(at_ms: int) -> list[Effect]:
            led.loading = False
            led.retry_at_ms = at_ms + RETRY_BACKOFF_MS
            return []

        def ready(sp: SharePartition, state_epoch: int, at_ms: int) -> list[Effect]:
            led.loading, led.sp, led.state_epoch = False, sp, state_epoch
            name = self.topic_name(k[1])
            return self.replicas.fetch_purgatory.check_keys([(name, k[2])], at_ms) if name is not None else []

        def read(error: ErrorCode, state_epoch: int, start: int, batches: list[StateBatch],
                 at_ms: int) -> list[Effect]:
            partition = self._led(k, led)
            if partition is None:
                led.loading = False             # no longer led: the next tick drops it
                return []
            if error is ErrorCode.none and start >= 0:
                sp = SharePartition.restore(start, batches, **self.limits(k[0]))
                sp.move_start(partition.log.log_start_offset)
                return ready(sp, state_epoch, at_ms)
            if error is not ErrorCode.invalid_request and not (error is ErrorCode.none and start < 0):
                return failed(at_ms)
            # never seen: it starts where the group's share.auto.offset.reset says
            start = self.start_offset(k[0], partition, at_ms)

            def initialized(error: ErrorCode, t: int) -> list[Effect]:
                if self._led(k, led) is None:
                    led.loading = False
                    return []
                if error is not ErrorCode.none:
                    return failed(t)
                return ready(SharePartition(start, **self.limits(k[0])), 0, t)
            return self.persister.initialize(key, 0, start, initialized, at_ms)

        return self.persister.read(key, led.leader_epoch, read, now_ms)

    def _write(self, k: ShareKey, led: LedSharePartition, now_ms: int) -> list[Effect]:
        if led.writing or led.sp is None or led.written >= led.version:
            return []
        led.writing = True
        target = led.version
        sp = led.sp

        def written(error: ErrorCode, at_ms: int) -> list[Effect]:
            led.writing = False
            if error in (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch):
                sp.abort(led.version)
                led.failed = (led.version, ErrorCode.not_leader_or_follower)
                if self.partitions.get(k) is led:
                    del self.partitions[k]          # another broker leads it now
                return self._answer(led, led.version, ErrorCode.not_leader_or_follower, at_ms)
            if error is not ErrorCode.none:
                sp.abort(target)                    # its acknowledgements are not kept
                led.failed = (target, _as_client_error(error))
                led.retry_at_ms = at_ms + RETRY_BACKOFF_MS
                return self._answer(led, target, _as_client_error(error), at_ms)
            sp.commit(target)
            led.written = max(led.written, target)
            effects = self._answer(led, target, ErrorCode.none, at_ms)
            if self.partitions.get(k) is led:
                effects += self._write(k, led, at_ms)
            else:                               # replaced or dropped while it was written
                effects += self._drop(led, at_ms)
            return effects
        start, batches = sp.persisted()
        return self.persister.write(ShareStateKey(*k), led.state_epoch, led.leader_epoch, start, batches, written,
                                    now_ms)

    def _drop(self, led: LedSharePartition, now_ms: int) -> list[Effect]:
        """``led`` is no longer this broker's (its leadership moved, or a new leader epoch began):
        what waits on it is answered NOT_LEADER_OR_FOLLOWER, but for a write in flight, whose own
        answer settles what it carries."""
        if led.writing:
            return []
        return self._answer(led, led.version, ErrorCode.not_leader_or_follower, now_ms)

    @staticmethod
    def _answer(led: LedSharePartition, upto: int, error: ErrorCode, now_ms: int) -> list[Effect]:
        due = [w for w in led.waiters if w[0] <= upto]
        led.waiters = [w for w in led.waiters if w[0] > upto]
        effects: list[Effect] = []
        for _, waiter in due:
            effects += waiter(error, now_ms)
        return effects

    def _led(self, k: ShareKey, led: LedSharePartition) -> Any | None:
        """The partition, if this broker still leads it in the epoch ``led`` began in."""
        if self.partitions.get(k) is not led:
            return None
        name = self.topic_name(k[1])
        partition = self.replicas.partitions.get((name, k[2])) if name is not None else None
        if partition is None or not partition.is_leader or partition.leader_epoch != led.leader_epoch:
            return None
        return partition


def _as_client_error(error: ErrorCode) -> ErrorCode:
    """A failed write as its share consumer is told it (Kafka's ``SharePartition`` mapping)."""
    if error in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                 ErrorCode.coordinator_load_in_progress, ErrorCode.network_exception):
        return ErrorCode.coordinator_not_available
    if error is ErrorCode.unknown_topic_or_partition:
        return error
    return ErrorCode.unknown_server_error
