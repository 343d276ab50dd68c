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

    def trim(self) -> None:
        """Give back disk space held beyond the end for appends to come (no more are expected)."""

    def flush(self) -> None:
        """fsync: what was written so far survives a power loss."""

    def close(self) -> None: ...

    def fileno(self) -> int | None:
        """The OS file descriptor (for ``sendfile``), or None for an in-memory file."""

    def duplicate(self) -> int | None:
        """A descriptor of this file of the caller's own (a :class:`FileRegion`'s), which stays valid
        when the file is closed or deleted; None for an in-memory file."""

    def read_descriptor(self, fd: int, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` through a descriptor :meth:`duplicate` gave."""

    def close_descriptor(self, fd: int) -> None:
        """Release a descriptor :meth:`duplicate` gave."""


class FileRegion:
    """``size`` stored bytes of ``file`` from ``position``, standing for those bytes in a Fetch
    answer so the shell can hand them to the socket with ``sendfile`` (never read into Python).

    A log read gives one only where the bytes are whole batches up to the end of the active
    segment, the common case of a follower or consumer at the tail, and only from a file with a
    descriptor. The region holds a descriptor of its own (``fd``), released when the region is
    dropped: the answer stays sendable if, later in the same event, retention deletes the segment
    or the descriptor cache closes the file's own descriptor. ``len()`` is ``size``; ``bytes()``
    (or :meth:`read`) reads them for any other use."""

    __slots__ = ("file", "position", "size", "fd")

    def __init__(self, file: FileHandle, position: int, size: int, fd: int) -> None:
        self.file = file
        self.position = position
        self.size = size
        self.fd = fd

    def __len__(self) -> int:
        return self.size

    def read(self, skip: int = 0) -> bytes:
        """The region's bytes from ``skip`` on; an ``OSError`` if the file no longer holds them."""
        want = self.size - skip
        data = self.file.read_descriptor(self.fd, self.position + skip, want)
        if len(data) != want:
            raise OSError(f"{len(data)} of {want} bytes of a fetched region remain in {self.file!r}")
        return data

    def release(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            self.file.close_descriptor(fd)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:   # at interpreter exit, or a descriptor already gone: nothing to keep
            pass

    def __bytes__(self) -> bytes:
        return self.read()

    def __repr__(self) -> str:
        return f"FileRegion({self.file!r}, position={self.position}, size={self.size})"


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
