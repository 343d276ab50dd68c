"""The real disk behind the log's Disk interface."""

from __future__ import annotations

import os
import shutil


class OsFile:
    __slots__ = ("fd", "_size", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self.fd).st_size

    def append(self, data) -> int:
        position = self._size
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self.fd, view[written:], position + written)
        self._size += written
        return position

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def size(self) -> int:
        return self._size

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self._size = size

    def flush(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def fileno(self) -> int | None:
        return self.fd


class OsDisk:
    def open(self, path: str) -> OsFile:
        return OsFile(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        os.remove(path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_file_atomic(self, path: str, data: bytes) -> None:
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def file_size(self, path: str) -> int:
        return os.path.getsize(path)
