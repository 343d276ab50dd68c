"""The small file interface every log file goes through (the real disk, or the simulator's).

``log/`` never touches the file system itself: a ``Disk`` is handed in. ``runtime.disk.OsDisk``
is the real one (``os.pwrite``/``os.pread``/``os.fsync``); ``sim.disk.MemoryDisk`` keeps files in
memory and can simulate a power loss (every byte written since a file's last ``flush()`` is
lost).
"""

from __future__ import annotations

from typing import Protocol


class FileHandle(Protocol):
    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the end of the file; returns the position it was written at."""

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (short at the end of the file)."""

    def size(self) -> int:
        """Current length in bytes (kept in memory: free to call)."""

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes."""

    def flush(self) -> None:
        """fsync: what was written so far survives a power loss."""

    def close(self) -> None: ...

    def fileno(self) -> int | None:
        """The OS file descriptor (for ``sendfile``), or None for an in-memory file."""


class Disk(Protocol):
    def open(self, path: str) -> FileHandle:
        """Open (creating if missing) for appends at the end and random reads."""

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]:
        """Names (not paths) in a directory, sorted."""

    def makedirs(self, path: str) -> None:
        """Create a directory and its parents; no error if it exists."""

    def remove(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace ``dst`` with ``src``."""

    def rmtree(self, path: str) -> None:
        """Remove a directory and everything in it (no error if missing)."""

    def read_file(self, path: str) -> bytes: ...

    def write_file_atomic(self, path: str, data: bytes) -> None:
        """Write ``path.tmp``, fsync it, rename it over ``path``, fsync the directory."""

    def fsync_dir(self, path: str) -> None:
        """Make creations, renames and removals in a directory durable."""

    def file_size(self, path: str) -> int: ...
