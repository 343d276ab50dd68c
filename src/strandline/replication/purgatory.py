"""Delayed requests (Kafka's purgatory): acks=all produce and long-poll fetch.

A delayed operation watches some partitions; it is checked again when one of them changes (an
append, a high-watermark move) and expires at its deadline. As Kafka's ``DelayedOperation``, it
answers :meth:`~DelayedOperation.try_complete` (the effects that answer the request once it is
complete, else None) and :meth:`~DelayedOperation.on_expiration` (the answer at its deadline),
and both end in its ``on_complete``. :class:`DelayedProduce` (an acks=all write, Kafka's
``DelayedProduce``) and :class:`DelayedFetch` (a long-polling fetch, Kafka's ``DelayedFetch``)
are the two the replica manager parks; :class:`DelayedCall` is one given as a function (the
broker's own writes, DeleteRecords).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Container, Iterable, Mapping, NamedTuple, Protocol, Sequence

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.coordination.znodes import BrokerInfo
from strandline.replication.fetch_types import FetchedTopic, FetchPartitionRequest

if TYPE_CHECKING:
    from strandline.replication.fetch_session import ChangeJournal, FetchSession, SessionScan
    from strandline.replication.partition import Partition

Key = tuple[str, int]


SWEEP_MS = 30_000


class DelayedOperation:
    """A request that waits in a :class:`Purgatory`: for ``keys`` (the partitions it watches) to
    change, or until ``deadline_ms``; ``conn_id`` is the connection it answers (-1: none)."""

    __slots__ = ("conn_id", "deadline_ms", "keys", "completed")

    def __init__(self, conn_id: int, deadline_ms: int, keys: tuple[tuple[str, int], ...]) -> None:
        self.conn_id = conn_id
        self.deadline_ms = deadline_ms
        self.keys = keys
        self.completed = False

    def try_complete(self, now_ms: int) -> list[Effect] | None:
        """The effects that answer the request if it can complete now, else None."""
        raise NotImplementedError

    def on_expiration(self, now_ms: int) -> list[Effect]:
        """The deadline passed: the effects that answer the request as it stands."""
        raise NotImplementedError


class DelayedCall(DelayedOperation):
    """An operation given as one function ``check(now_ms, expired)``, which returns the effects
    that answer it, or None while it waits (never None when ``expired``)."""

    __slots__ = ("check",)

    def __init__(self, conn_id: int, deadline_ms: int, keys: tuple[tuple[str, int], ...],
                 check: Callable[[int, bool], list[Effect] | None]) -> None:
        super().__init__(conn_id, deadline_ms, keys)
        self.check = check

    def try_complete(self, now_ms: int) -> list[Effect] | None:
        return self.check(now_ms, False)

    def on_expiration(self, now_ms: int) -> list[Effect]:
        return self.check(now_ms, True) or []


@dataclass
class Purgatory:
    """The operations waiting, by the partitions they watch and by deadline (a heap, so the next
    deadline and the expired operations are found without scanning the rest). A completed
    operation leaves the heap when it reaches the top or at a compaction, and the watch list of a
    key when that key is next checked or watched, or in a sweep once such leftovers outnumber the
    keys (an idle fetch session's long poll watches thousands of partitions; pruning every one of
    them at each completion would cost more than the poll).

    An operation may instead watch every key of a container that it does not copy
    (:meth:`watch_all`: a fetch session's partitions, which may change while it waits): it is
    checked when any of them is, at a cost per check of the few such operations, not per key.
    ``listener``, when set, hears every key checked (the replica manager's change journal)."""

    by_key: dict[tuple[str, int], list[DelayedOperation]] = field(default_factory=dict)
    pending: list[tuple[int, int, DelayedOperation]] = field(default_factory=list)  # heap: deadline, seq, op
    _live: int = 0      # operations not completed
    _seq: int = 0
    _stale: int = 0     # watch entries of completed operations not removed yet
    _next_sweep_ms: int = 0
    groups: list[tuple[Container[tuple[str, int]], DelayedOperation]] = field(default_factory=list)
    listener: Callable[[list[tuple[str, int]]], None] | None = None

    def watch(self, op: DelayedOperation) -> None:
        heapq.heappush(self.pending, (op.deadline_ms, self._seq, op))
        self._seq += 1
        self._live += 1
        by_key = self.by_key
        for key in op.keys:
            ops = by_key.get(key)
            if ops is None:
                by_key[key] = [op]
                continue
            if ops[0].completed:
                kept = [o for o in ops if not o.completed]
                self._stale -= len(ops) - len(kept)
                ops[:] = kept
            ops.append(op)

    def watch_all(self, op: DelayedOperation, watched: Container[tuple[str, int]]) -> None:
        """Watch every key ``watched`` holds when one is checked (``op.keys`` is not used)."""
        heapq.heappush(self.pending, (op.deadline_ms, self._seq, op))
        self._seq += 1
        self._live += 1
        self.groups.append((watched, op))

    def check_keys(self, keys: Iterable[tuple[str, int]], now_ms: int) -> list[Effect]:
        keys = keys if isinstance(keys, list) else list(keys)
        if self.listener is not None and keys:
            self.listener(keys)
        effects: list[Effect] = []
        if self.groups and keys:
            for watched, op in list(self.groups):
                if not op.completed and any(key in watched for key in keys):
                    done = op.try_complete(now_ms)
                    if done is not None:
                        self._completed(op)
                        effects.extend(done)
            self.groups = [g for g in self.groups if not g[1].completed]
        for key in keys:
            ops = self.by_key.get(key)
            if not ops:
                continue
            for op in list(ops):
                if not op.completed:
                    done = op.try_complete(now_ms)
                    if done is not None:
                        self._completed(op)
                        effects.extend(done)
            self._prune(key)
        return effects

    def expire(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        expired = False
        heap = self.pending
        while heap and (heap[0][2].completed or heap[0][0] <= now_ms):
            op = heapq.heappop(heap)[2]
            if op.completed:
                continue
            self._completed(op)
            expired = True
            effects.extend(op.on_expiration(now_ms))
        if expired or len(heap) > 2 * self._live + 16:
            self._compact(now_ms)
        if expired and self.groups:
            self.groups = [g for g in self.groups if not g[1].completed]
        return effects

    def cancel_connection(self, conn_id: int) -> None:
        for _, _, op in self.pending:
            if op.conn_id == conn_id and not op.completed:
                self._completed(op)
        self._compact()
        self.groups = [g for g in self.groups if not g[1].completed]

    def next_deadline(self) -> int | None:
        heap = self.pending
        while heap and heap[0][2].completed:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _completed(self, op: DelayedOperation) -> None:
        op.completed = True
        self._live -= 1
        self._stale += len(op.keys)

    def _prune(self, key: tuple[str, int]) -> None:
        ops = self.by_key.get(key)
        if ops is not None:
            kept = [op for op in ops if not op.completed]
            self._stale -= len(ops) - len(kept)
            if kept:
                ops[:] = kept
            else:
                del self.by_key[key]

    def _compact(self, now_ms: int | None = None) -> None:
        """Drop completed operations; sweep every key's list once the leftovers outnumber the keys
        four times (amortized), or at most every ``SWEEP_MS`` (the keys nobody watches again)."""
        if len(self.pending) > self._live:
            self.pending = [entry for entry in self.pending if not entry[2].completed]
            heapq.heapify(self.pending)
        if self._stale > 4 * len(self.by_key) + 1024 or (
                self._stale and now_ms is not None and now_ms >= self._next_sweep_ms):
            for key in list(self.by_key):
                self._prune(key)
            self._stale = 0
            if now_ms is not None:
                self._next_sweep_ms = now_ms + SWEEP_MS

    def __len__(self) -> int:
        return self._live


# ---------------------------------------------------------------------- produce

class ProduceResult(NamedTuple):
    """One partition's answer to a Produce request, in the order the answer encodes it."""
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: Sequence[tuple[int, str]] = ()    # (batch index, message) of each record refused


class DelayedProduce(DelayedOperation):
    """An acks=all write waiting for replication (Kafka's ``DelayedProduce``): each partition in
    ``waiting`` (its offset the high watermark must reach) is decided by
    :meth:`Partition.check_enough_replicas_reach_offset`: NONE (ACK-1), or
    NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas meanwhile
    (ACK-2); NOT_LEADER_OR_FOLLOWER when leadership moved; REQUEST_TIMED_OUT for those still
    waiting at the deadline. ``respond(results)`` answers once every partition is decided."""

    __slots__ = ("waiting", "results", "partitions", "min_insync_replicas", "respond")

    def __init__(self, conn_id: int, deadline_ms: int, waiting: dict[tuple[str, int], int],
                 results: dict[Key, ProduceResult], partitions: dict[Key, Partition],
                 min_insync_replicas: Callable[[str], int],
                 respond: Callable[[dict[Key, ProduceResult]], list[Effect]]) -> None:
        super().__init__(conn_id, deadline_ms, tuple(waiting))
        self.waiting = waiting
        self.results = results
        self.partitions = partitions
        self.min_insync_replicas = min_insync_replicas
        self.respond = respond

    def _check(self) -> None:
        waiting, results = self.waiting, self.results
        for key, required in list(waiting.items()):
            partition = self.partitions.get(key)
            if partition is None:
                has_enough, error = False, ErrorCode.not_leader_or_follower
            else:
                has_enough, error = partition.check_enough_replicas_reach_offset(
                    required, self.min_insync_replicas(key[0]))
            if error is not ErrorCode.none:
                results[key] = results[key]._replace(error=error)
                del waiting[key]
            elif has_enough:
                del waiting[key]

    def try_complete(self, now_ms: int) -> list[Effect] | None:
        self._check()
        if self.waiting:
            return None
        return self.on_complete()

    def on_expiration(self, now_ms: int) -> list[Effect]:
        self._check()
        results = self.results
        for key in self.waiting:
            results[key] = results[key]._replace(error=ErrorCode.request_timed_out)
        return self.on_complete()

    def on_complete(self) -> list[Effect]:
        return self.respond(self.results)


# ---------------------------------------------------------------------- fetch

class FetchParams(NamedTuple):
    """What a Fetch asks, the same for each of its reads (Kafka's ``FetchParams``)."""
    replica_id: int         # a follower's broker id; -1 (or below) for a consumer
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: int          # 0 read_uncommitted, 1 read_committed
    from_any_replica: bool  # a consumer that a follower may serve (KIP-392)
    rack: str               # that consumer's rack ("" otherwise)
    brokers: Mapping[int, BrokerInfo]   # the brokers as the metadata named them when the Fetch came:
    #                                     a preferred read replica is one of them, in each of its reads


#: a partition a Fetch reads: its key, its topic's name, and what the Fetch asks of it
KeyedRequest = tuple[Key, str, FetchPartitionRequest]


class LogReadResult(NamedTuple):
    """One read of a Fetch's partitions: the answer's topics, the bytes read, whether it must be
    answered at once (an error, a preferred read replica), and the partitions read without error
    ((name, partition request) each: a follower's progress)."""
    topics: list[FetchedTopic]
    total: int
    urgent: bool
    served: list[tuple[str, FetchPartitionRequest]]


class LocalLogReader(Protocol):
    """What a :class:`DelayedFetch` needs of the replica manager."""

    journal: ChangeJournal
    state_changes: int

    def read_from_local_log(self, params: FetchParams, keyed: Iterable[KeyedRequest], at_ms: int, arrival: bool,
                            unquiet: list[Key] | None, session: FetchSession | None) -> LogReadResult: ...


class DelayedFetch(DelayedOperation):
    """A fetch that found less than ``min_bytes`` and waits for appends (Kafka's ``DelayedFetch``,
    REP-2): it reads again whenever one of its partitions changes, and completes once it has
    ``min_bytes`` or must answer at once, or at its deadline with what there is then.

    A session fetch (``session``) reads what was not quiet on arrival and what changed since (its
    ``scan``). One that expires untouched (no key checked, and no change no key announces since
    ``seen``) answers what it read on arrival (``arrived``): its partitions were quiet or
    answered then, and still are."""

    __slots__ = ("reader", "params", "wanted", "session", "scan", "seen", "arrived", "touched", "respond")

    def __init__(self, conn_id: int, deadline_ms: int, keys: tuple[tuple[str, int], ...], reader: LocalLogReader,
                 params: FetchParams, wanted: list[tuple[str, FetchPartitionRequest]], session: FetchSession | None,
                 scan: SessionScan | None, seen: int, arrived: list[FetchedTopic],
                 respond: Callable[[list[FetchedTopic]], list[Effect]]) -> None:
        super().__init__(conn_id, deadline_ms, keys)
        self.reader = reader
        self.params = params
        self.wanted = wanted
        self.session = session
        self.scan = scan
        self.seen = seen
        self.arrived = arrived
        self.touched = False
        self.respond = respond

    def _read(self, now_ms: int) -> LogReadResult:
        session = self.session
        if session is None:
            keyed: Iterable[KeyedRequest] = (((name, p.partition), name, p) for name, p in self.wanted)
        else:
            parts = session.partitions
            keyed = ((key, key[0], parts[key]) for key in session.keys_to_read(self.reader.journal, self.scan)
                     if key in parts)
        return self.reader.read_from_local_log(self.params, keyed, now_ms, False, None, session)

    def try_complete(self, now_ms: int) -> list[Effect] | None:
        self.touched = True
        read = self._read(now_ms)
        if read.total >= self.params.min_bytes or read.urgent:
            return self.on_complete(read.topics)
        return None

    def on_expiration(self, now_ms: int) -> list[Effect]:
        if self.session is not None and not self.touched and self.reader.state_changes == self.seen:
            return self.on_complete(self.arrived)
        self.touched = True
        return self.on_complete(self._read(now_ms).topics)

    def on_complete(self, topics: list[FetchedTopic]) -> list[Effect]:
        return self.respond(topics)
