"""The small file interface every log file goes through (real disk, or the simulator's)."""

from __future__ import annotations

from typing import Protocol


class FileHandle(Protocol):
    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write at the end; returns the position written at."""

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (short at the end of the file)."""

    def size(self) -> int: ...

    def truncate(self, size: int) -> None: ...

    def flush(self) -> None:
        """fsync: what was written survives a power loss."""

    def close(self) -> None: ...

    def fileno(self) -> int | None: ...


class Disk(Protocol):
    def open(self, path: str) -> FileHandle:
        """Open (creating if missing) for appends and random reads."""

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def makedirs(self, path: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def rmtree(self, path: str) -> None: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file_atomic(self, path: str, data: bytes) -> None:
        """Write ``path.tmp``, fsync, rename over ``path``, fsync the directory."""

    def fsync_dir(self, path: str) -> None: ...

    def file_size(self, path: str) -> int: ...
