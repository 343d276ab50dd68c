"""Delayed requests (Kafka's purgatory): acks=all produce and long-poll fetch.

A delayed operation watches some partitions; it is re-checked when one of them changes (an
append, a high-watermark move) and expires at its deadline. Completing it yields the response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable


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
    by_key: dict[tuple[str, int], list[DelayedOperation]] = field(default_factory=dict)
    pending: list[DelayedOperation] = field(default_factory=list)

    def watch(self, op: DelayedOperation) -> None:
        self.pending.append(op)
        for key in op.keys:
            self.by_key.setdefault(key, []).append(op)

    def check_keys(self, keys: Iterable[tuple[str, int]], now_ms: int) -> list[Any]:
        effects: list[Any] = []
        for key in keys:
            ops = self.by_key.get(key)
            if not ops:
                continue
            for op in list(ops):
                if not op.completed:
                    done = op.try_complete(now_ms, False)
                    if done is not None:
                        op.completed = True
                        effects.extend(done)
            self._prune(key)
        return effects

    def expire(self, now_ms: int) -> list[Any]:
        effects: list[Any] = []
        for op in self.pending:
            if not op.completed and op.deadline_ms <= now_ms:
                op.completed = True
                effects.extend(op.try_complete(now_ms, True) or ())
        self._compact()
        return effects

    def cancel_connection(self, conn_id: int) -> None:
        for op in self.pending:
            if op.conn_id == conn_id:
                op.completed = True
        self._compact()

    def next_deadline(self) -> int | None:
        deadlines = [op.deadline_ms for op in self.pending if not op.completed]
        return min(deadlines) if deadlines else None

    def _prune(self, key: tuple[str, int]) -> None:
        ops = self.by_key.get(key)
        if ops is not None:
            ops[:] = [op for op in ops if not op.completed]
            if not ops:
                del self.by_key[key]

    def _compact(self) -> None:
        self.pending = [op for op in self.pending if not op.completed]
        for key in list(self.by_key):
            self._prune(key)

    def __len__(self) -> int:
        return sum(1 for op in self.pending if not op.completed)
