"""The share coordinator (KIP-932): share-partition state kept in ``__share_group_state``.

A share-partition's leader keeps its in-flight records in memory
(:class:`strandline.group.share.partition.SharePartition`); the share coordinator keeps them
durably, so that a new leader starts where the last one was. The state of ``(group, topic id,
partition)`` lives in the ``__share_group_state`` partition Kafka maps it to (the Java hash of
``group:topicId:partition``, :func:`partition_of`), and the broker leading that partition is its
coordinator. Requests come from partition leaders (Kafka's persister), as Kafka 4.2's RPCs:

- InitializeShareGroupState: a share-partition's first state, a start offset and no batches;
- ReadShareGroupState: the state, for a leader taking the share-partition; a leader epoch above the
  one recorded is recorded, so that writes of an older leader are fenced (FENCED_LEADER_EPOCH);
- WriteShareGroupState: a new start offset (unless -1) and batches that replace the offsets they
  cover; a write of an older state epoch gets FENCED_STATE_EPOCH, of an uninitialized
  share-partition INVALID_REQUEST;
- DeleteShareGroupState: a tombstone; ReadShareGroupStateSummary: the start offset alone.

Every change is appended as a whole ShareSnapshot record, acks=all, and answered once the
partition's ISR has it. It is applied here when appended, so that the next request for the key is
checked against it (two leaders' requests racing: the newer one's read fences the older one's
write even before either is in the ISR), as Kafka's coordinator runtime applies an operation's
records at once and answers at their commit. A read that changes nothing is answered from a
committed state: if the key's last change is appended but not committed (its append timed out,
and the ISR has not caught up yet), the answer waits until the partition's high watermark passes
it, as Kafka's runtime holds a read behind the writes pending before it; a leader handing out
records from a state that a coordinator failover then loses would start its successor past them.
An append refused at once puts the key back to the state before it; one that fails after it was
appended, other than by a timeout, to its last committed state. A broker that becomes the partition's leader replays its log (the last record of
each key wins, a tombstone removes it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Callable, Iterable
from uuid import UUID

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.group.records import partition_for
from strandline.protocol.frames import ProtocolError
from strandline.group.share import records as rec
from strandline.group.share.partition import RecordState, StateBatch
from strandline.group.share.records import ShareStateKey
from strandline.uuids import uuid_to_base64

#: ``append(index, [(key, value or None)], done(error, now_ms), now_ms)``: acks=all to the partition
Append = Callable[[int, list[tuple[bytes, bytes | None]], Callable[[ErrorCode, int], list[Effect]], int], list[Effect]]
#: ``partitions_of(topic id)``: how many partitions the topic has (None: no such topic)
PartitionsOf = Callable[[UUID], "int | None"]
#: ``log_end(index)``: where this leader's log of the ``__share_group_state`` partition ends
LogEnd = Callable[[int], int]
#: ``wait_committed(index, offset, timeout_ms, done(error, when_ms), now_ms)``: ``done(NONE)`` once
#: the partition's high watermark reaches ``offset``
WaitCommitted = Callable[[int, int, int, Callable[[ErrorCode, int], list[Effect]], int], list[Effect]]
#: ``done(error, message, state or None, now_ms)``
ReadDone = Callable[[ErrorCode, "str | None", "ShareState | None", int], list[Effect]]
Done = Callable[[ErrorCode, "str | None", int], list[Effect]]

NO_EPOCH = -1
#: the most offsets a write's batches may cover: a share-partition has at most
#: ``group.share.partition.max.record.locks`` (10000 at most) in flight; a state beyond this is not one
MAX_STATE_OFFSETS = 100_000
_PERSISTED_STATES = frozenset({0, 2, 4})       # available, acknowledged, archived


@dataclass(frozen=True, slots=True)
class ShareState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    snapshot_epoch: int = 0
    create_timestamp: int = 0


def partition_of(key: ShareStateKey, partitions: int) -> int:
    """Kafka's ``Utils.abs(SharePartitionKey.asCoordinatorKey().hashCode()) % partitions``."""
    return partition_for(f"{key.group_id}:{uuid_to_base64(key.topic_id)}:{key.partition}", partitions)


class ShareCoordinator:
    def __init__(self, num_partitions: int | Callable[[], int], append: Append, partitions_of: PartitionsOf,
                 log_end: LogEnd | None = None, wait_committed: WaitCommitted | None = None,
                 commit_timeout_ms: int = 30000) -> None:
        """``num_partitions``: how many partitions ``__share_group_state`` has (a function: the
        topic's own count once it exists, whatever the configuration says now). With ``log_end``
        and ``wait_committed``, an answer read from a state not yet committed waits until it is."""
        self._num_partitions = num_partitions
        self.append = append
        self.partitions_of = partitions_of
        self.log_end = log_end
        self.wait_committed = wait_committed
        self.commit_timeout_ms = commit_timeout_ms
        self.owned: set[int] = set()
        #: each key's state with every change appended (checked against), and as committed
        self.states: dict[ShareStateKey, ShareState] = {}
        self.committed: dict[ShareStateKey, ShareState] = {}
        #: keys whose state in ``states`` is appended but not known committed: where the log ended
        #: after its record (an append that timed out is in the log, and commits when the ISR has it)
        self.pending: dict[ShareStateKey, int] = {}

    @property
    def num_partitions(self) -> int:
        n = self._num_partitions
        return n() if callable(n) else n

    # ------------------------------------------------------------------ loading

    def load_partition(self, index: int, records: Iterable[tuple[int, bytes | None, bytes | None]]) -> None:
        """This broker leads ``__share_group_state`` partition ``index``: replay its records."""
        self.unload_partition(index)
        for _, key_bytes, value in records:
            if key_bytes is None:
                continue
            try:
                decoded = rec.decode_key(key_bytes)
                if decoded is None:
                    continue
                record_type, key = decoded
                snapshot = rec.decode_snapshot(value) if value is not None and record_type == rec.SNAPSHOT else None
                update = rec.decode_update(value) if value is not None and record_type == rec.UPDATE else None
            except (ValueError, struct.error, IndexError, UnicodeDecodeError, ProtocolError):
                continue            # a record this coordinator cannot read (not one it wrote): skipped
            if value is None:
                self.states.pop(key, None)
            elif snapshot is not None:
                s = snapshot
                self.states[key] = ShareState(s.state_epoch, s.leader_epoch, s.start_offset, s.batches,
                                              s.snapshot_epoch, s.create_timestamp)
            elif update is not None and key in self.states:
                u = update
                old = self.states[key]
                start = old.start_offset if u.start_offset == -1 else u.start_offset
                self.states[key] = replace(old, leader_epoch=u.leader_epoch, start_offset=start,
                                           batches=merge_batches(old.batches, u.batches, start))
        self.committed.update((k, v) for k, v in self.states.items() if partition_of(k, self.num_partitions) == index)
        self.owned.add(index)

    def unload_partition(self, index: int) -> None:
        self.owned.discard(index)
        for key in [k for k in self.states if partition_of(k, self.num_partitions) == index]:
            del self.states[key]
        for key in [k for k in self.committed if partition_of(k, self.num_partitions) == index]:
            del self.committed[key]
        for key in [k for k in self.pending if partition_of(k, self.num_partitions) == index]:
            del self.pending[key]

    def owns(self, key: ShareStateKey) -> bool:
        return partition_of(key, self.num_partitions) in self.owned

    # ------------------------------------------------------------------ the RPCs

    def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int, done: Done,
                   now_ms: int) -> list[Effect]:
        error = self._check(key)
        if error is not None:
            return done(*error, now_ms)
        old = self.states.get(key)
        if old is not None and old.state_epoch > state_epoch:
            return done(ErrorCode.fenced_state_epoch, None, now_ms)
        state = ShareState(state_epoch, NO_EPOCH if old is None else old.leader_epoch, start_offset, (),
                           0 if old is None else old.snapshot_epoch + 1, now_ms)
        return self._store(key, state, lambda e, t: done(e, None, t), now_ms)

    def read(self, key: ShareStateKey, leader_epoch: int, done: ReadDone, now_ms: int) -> list[Effect]:
        error = self._check(key)
        if error is not None:
            return done(error[0], error[1], None, now_ms)
        state = self.states.get(key)
        if state is None:
            return done(ErrorCode.invalid_request, "Read on uninitialized share partition.", None, now_ms)
        if leader_epoch != NO_EPOCH and state.leader_epoch > leader_epoch:
            return done(ErrorCode.fenced_leader_epoch, None, None, now_ms)
        if leader_epoch == NO_EPOCH or leader_epoch == state.leader_epoch:
            return self._when_committed(key, lambda e, t: done(e, None, state if e is ErrorCode.none else None, t),
                                        now_ms)
        newer = replace(state, leader_epoch=leader_epoch, snapshot_epoch=state.snapshot_epoch + 1)
        return self._store(key, newer, lambda e, t: done(e, None, newer if e is ErrorCode.none else None, t), now_ms)

    def read_summary(self, key: ShareStateKey) -> tuple[tuple[ErrorCode, str | None] | None, ShareState | None]:
        """ReadShareGroupStateSummary: the error, or the committed state (None: never initialized)."""
        error = self._check(key)
        if error is not None:
            return error, None
        return None, self.committed.get(key)

    def write(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: Iterable[StateBatch], done: Done, now_ms: int) -> list[Effect]:
        error = self._check(key)
        if error is not None:
            return done(*error, now_ms)
        state = self.states.get(key)
        if state is None:
            return done(ErrorCode.invalid_request, "Write on uninitialized share partition.", now_ms)
        if leader_epoch != NO_EPOCH and state.leader_epoch > leader_epoch:
            return done(ErrorCode.fenced_leader_epoch, None, now_ms)
        if state_epoch != NO_EPOCH and state.state_epoch > state_epoch:
            return done(ErrorCode.fenced_state_epoch, None, now_ms)
        batches = tuple(batches)
        malformed = invalid_batches(batches, start_offset)
        if malformed is not None:
            return done(ErrorCode.invalid_request, malformed, now_ms)
        start = state.start_offset if start_offset == -1 else start_offset
        newer = replace(state, leader_epoch=max(leader_epoch, state.leader_epoch), start_offset=start,
                        batches=merge_batches(state.batches, batches, start),
                        snapshot_epoch=state.snapshot_epoch + 1)
        return self._store(key, newer, lambda e, t: done(e, None, t), now_ms)

    def delete(self, key: ShareStateKey, done: Done, now_ms: int) -> list[Effect]:
        error = self._check(key, topic_must_exist=False)
        if error is not None:
            return done(*error, now_ms)
        if key not in self.states:
            return done(ErrorCode.none, None, now_ms)
        return self._store(key, None, lambda e, t: done(e, None, t), now_ms)

    # ------------------------------------------------------------------ internals

    def _check(self, key: ShareStateKey, topic_must_exist: bool = True) -> tuple[ErrorCode, str | None] | None:
        if key.partition < 0:
            return ErrorCode.invalid_request, "The partition id is negative."
        if len(key.group_id.encode()) > 32767:
            return ErrorCode.invalid_request, "The group id is too long."
        if not self.owns(key):
            return ErrorCode.not_coordinator, None
        if topic_must_exist:
            count = self.partitions_of(key.topic_id)
            if count is None or key.partition >= count:
                return ErrorCode.unknown_topic_or_partition, None
        return None

    def _store(self, key: ShareStateKey, state: ShareState | None, done: Callable[[ErrorCode, int], list[Effect]],
               now_ms: int) -> list[Effect]:
        """Append ``state`` (None: a tombstone) and apply it now; ``done`` once committed.

        An append refused at once (too few replicas in the ISR, not the leader) puts the key back
        to what it was: nothing was appended. One that fails once appended keeps it if it timed out
        (the record is in the log, and commits when the ISR catches up, as it does in Kafka), and
        otherwise puts it back to its last committed state."""
        value = None if state is None else rec.encode_snapshot(rec.ShareSnapshot(
            state.snapshot_epoch, state.state_epoch, state.leader_epoch, state.start_offset,
            state.create_timestamp, now_ms, state.batches))
        index = partition_of(key, self.num_partitions)
        previous = self.states.get(key)
        _put(self.states, key, state)
        appending = True
        refused = False

        def appended(error: ErrorCode, at_ms: int) -> list[Effect]:
            nonlocal refused
            if index in self.owned:
                if error is ErrorCode.none:
                    _put(self.committed, key, state)
                    if self.states.get(key) is state:
                        self.pending.pop(key, None)
                elif appending:
                    refused = True
                    if self.states.get(key) is state:
                        _put(self.states, key, previous)
                elif error is not ErrorCode.request_timed_out and self.states.get(key) is state:
                    _put(self.states, key, self.committed.get(key))
                    self.pending.pop(key, None)
            return done(_as_coordinator_error(error), at_ms)
        effects = self.append(index, [(rec.encode_key(key), value)], appended, now_ms)
        appending = False
        if (not refused and self.log_end is not None and index in self.owned
                and self.states.get(key) is state and self.committed.get(key) is not state):
            self.pending[key] = self.log_end(index)
        return effects

    def _when_committed(self, key: ShareStateKey, then: Callable[[ErrorCode, int], list[Effect]],
                        now_ms: int) -> list[Effect]:
        """``then(NONE)`` once the key's state is committed (at once if it is), as Kafka's
        coordinator runtime holds an answer read while writes are pending until they commit: a
        leader must not hand out records from a state a coordinator failover can still lose.
        COORDINATOR_NOT_AVAILABLE if not within the commit timeout, NOT_COORDINATOR if the
        partition's leadership moved."""
        required = self.pending.get(key)
        if required is None or self.wait_committed is None:
            return then(ErrorCode.none, now_ms)
        index = partition_of(key, self.num_partitions)

        def committed(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is ErrorCode.none and index in self.owned:
                self._committed_to(index, required)
            return then(_as_coordinator_error(error), when_ms)
        return self.wait_committed(index, required, self.commit_timeout_ms, committed, now_ms)

    def _committed_to(self, index: int, offset: int) -> None:
        """The partition's high watermark reached ``offset``: every state appended below it is committed."""
        for key, end in list(self.pending.items()):
            if end <= offset and partition_of(key, self.num_partitions) == index:
                _put(self.committed, key, self.states.get(key))
                del self.pending[key]


def _put(states: dict[ShareStateKey, ShareState], key: ShareStateKey, state: ShareState | None) -> None:
    if state is None:
        states.pop(key, None)
    else:
        states[key] = state


def _as_coordinator_error(error: ErrorCode) -> ErrorCode:
    """An append's error as the coordinator answers it (Kafka's coordinator runtime's mapping)."""
    if error in (ErrorCode.none, ErrorCode.not_coordinator):
        return error
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    return ErrorCode.coordinator_not_available


def delivery_complete_count(state: ShareState) -> int:
    """How many offsets from the start offset have been delivered for good (acknowledged or archived)."""
    return sum(b.last_offset - max(b.first_offset, state.start_offset) + 1 for b in state.batches
               if b.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED) and b.last_offset >= state.start_offset)


def invalid_batches(batches: tuple[StateBatch, ...], start_offset: int) -> str | None:
    """Why a write's batches are not a share-partition's state (None: they are)."""
    covered = 0
    for b in batches:
        if int(b.state) not in _PERSISTED_STATES:
            return f"Unknown delivery state {int(b.state)}."
        if b.first_offset < 0 or b.last_offset < b.first_offset or b.delivery_count < 0:
            return f"Invalid state batch {b.first_offset}-{b.last_offset} delivered {b.delivery_count} times."
        covered += b.last_offset - max(b.first_offset, start_offset) + 1
        if covered > MAX_STATE_OFFSETS:
            return f"The state batches cover more than {MAX_STATE_OFFSETS} offsets."
    return None


def merge_batches(old: tuple[StateBatch, ...], new: tuple[StateBatch, ...], start_offset: int) -> tuple[StateBatch, ...]:
    """``old`` with ``new`` replacing the offsets it covers, without what lies below ``start_offset``."""
    pieces: list[StateBatch] = []
    for b in old:
        runs = [(b.first_offset, b.last_offset)]
        for n in new:
            runs = [r for first, last in runs for r in _minus(first, last, n.first_offset, n.last_offset)]
        pieces += [StateBatch(first, last, b.state, b.delivery_count) for first, last in runs]
    pieces += new
    kept = []
    for b in sorted(pieces, key=lambda b: b.first_offset):
        if b.last_offset < start_offset:
            continue
        kept.append(b if b.first_offset >= start_offset else replace(b, first_offset=start_offset))
    return tuple(kept)


def _minus(first: int, last: int, cut_first: int, cut_last: int) -> list[tuple[int, int]]:
    if cut_last < first or cut_first > last:
        return [(first, last)]
    runs = []
    if cut_first > first:
        runs.append((first, cut_first - 1))
    if cut_last < last:
        runs.append((cut_last + 1, last))
    return runs
