"""Delayed requests (Kafka's purgatory): acks=all produce and long-poll fetch.

A delayed operation watches some partitions; it is re-checked when one of them changes (an
append, a high-watermark move) and expires at its deadline. Completing it yields the response.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Container, Iterable


SWEEP_MS = 30_000


@dataclass(eq=False)
class DelayedOperation:
    conn_id: int
    deadline_ms: int
    keys: tuple[tuple[str, int], ...]
    try_complete: Callable[[int, bool], list | None]
    """Called with (now_ms, expired); returns the effects that answer the request, or None."""
    completed: bool = False


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

    def check_keys(self, keys: Iterable[tuple[str, int]], now_ms: int) -> list[Any]:
        keys = keys if isinstance(keys, list) else list(keys)
        if self.listener is not None and keys:
            self.listener(keys)
        effects: list[Any] = []
        if self.groups and keys:
            for watched, op in list(self.groups):
                if not op.completed and any(key in watched for key in keys):
                    done = op.try_complete(now_ms, False)
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
                    done = op.try_complete(now_ms, False)
                    if done is not None:
                        self._completed(op)
                        effects.extend(done)
            self._prune(key)
        return effects

    def expire(self, now_ms: int) -> list[Any]:
        effects: list[Any] = []
        expired = False
        heap = self.pending
        while heap and (heap[0][2].completed or heap[0][0] <= now_ms):
            op = heapq.heappop(heap)[2]
            if op.completed:
                continue
            self._completed(op)
            expired = True
            effects.extend(op.try_complete(now_ms, True) or ())
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
