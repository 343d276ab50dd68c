"""The shell's writes that fsync, each on a worker thread so that the event loop never waits for
a disk: checkpoint files (``WriteCheckpoint``) and rolled segments (``FlushFiles``)."""

from __future__ import annotations

import asyncio
import collections
import os
from typing import Any, Callable, Coroutine, Sequence

from strandline.core.effects import FlushFiles
from strandline.log.disk import Disk
from strandline.runtime.disk import flush_ledger, fsync_directory

#: ``spawn(what, coroutine)``: run it as a task of the shell, which stops the broker if it raises
Spawn = Callable[[str, Coroutine[Any, Any, None]], None]

class CheckpointWriter:
    """Writes checkpoint files (``WriteCheckpoint``) on a worker thread, one at a time and in order,
    so that their fsyncs never hold up the event loop. A write still waiting gives way to a newer
    one of the same path; ``drained`` waits until everything given has been written."""

    def __init__(self, disk: Callable[[], Disk], spawn: Spawn) -> None:
        self.disk = disk                      # the broker's Disk, asked for when a write starts
        self.spawn = spawn
        self.waiting: dict[str, bytes] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    def write(self, path: str, content: bytes) -> None:
        self.waiting[path] = content          # a newer content takes a waiting older one's place
        if self._idle.is_set():
            self._idle.clear()
            self.spawn("writing a checkpoint file", self._run())

    async def _run(self) -> None:
        try:
            while self.waiting:
                path = next(iter(self.waiting))
                content = self.waiting.pop(path)
                await asyncio.to_thread(self.disk().write_file_atomic, path, content)
        finally:
            self._idle.set()

    async def drained(self) -> None:
        await self._idle.wait()


def fsync_paths(paths: Sequence[str]) -> list[tuple[str, int]]:
    """Open and fsync each file of ``paths`` that still exists; returns ``(path, size)`` of those.

    A file deleted meanwhile (retention, a truncation) has nothing to keep, but its directory is
    fsynced, so that the deletion is durable before the recovery point passes the file: otherwise a
    power loss could bring back a segment that was never flushed, below where recovery looks. Any
    other error is raised (the broker stops)."""
    done = []
    deleted_from: set[str] = set()
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            deleted_from.add(os.path.dirname(path))
            continue
        try:
            os.fsync(fd)
            done.append((path, os.fstat(fd).st_size))
        finally:
            os.close(fd)
    for directory in sorted(deleted_from):
        try:
            fsync_directory(directory)
        except FileNotFoundError:
            pass                            # the whole log was deleted (its directory goes too)
    return done


class SegmentFlusher:
    """Makes rolled segments durable (``FlushFiles``) on a worker thread, one flush at a time and in
    order, then tells the core, so that a roll's fsync (a second for a gigabyte segment on a busy
    disk) never holds up the event loop. The worker opens each file by its path when its turn comes
    (the log may have closed its descriptor meanwhile): one deleted by then is skipped, and
    its directory fsynced."""

    def __init__(self, spawn: Spawn, flushed: Callable[[int], None]) -> None:
        self.spawn = spawn
        self.flushed = flushed                # on the loop, with the token of each flush done
        self.waiting: collections.deque[tuple[int, Sequence[str]]] = collections.deque()
        self._idle = asyncio.Event()
        self._idle.set()

    def flush(self, effect: FlushFiles) -> None:
        self.waiting.append((effect.token, effect.paths))
        if self._idle.is_set():
            self._idle.clear()
            self.spawn("flushing a rolled log segment", self._run())

    async def _run(self) -> None:
        try:
            while self.waiting:
                token, paths = self.waiting.popleft()
                flushed = await asyncio.to_thread(fsync_paths, paths)
                ledger = flush_ledger()
                if ledger is not None:
                    for path, size in flushed:
                        ledger.durable(path, size)
                self.flushed(token)
        finally:
            self._idle.set()

    async def drained(self) -> None:
        await self._idle.wait()
