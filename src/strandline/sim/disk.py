"""An in-memory disk for tests and the simulator; ``crash()`` loses what was never flushed."""

from __future__ import annotations

import posixpath


class MemoryFile:
    def __init__(self, disk: "MemoryDisk", path: str) -> None:
        self.disk = disk
        self.path = path

    @property
    def _data(self) -> bytearray:
        return self.disk.files[self.path]

    def append(self, data) -> int:
        buf = self._data
        pos = len(buf)
        buf += data
        return pos

    def read(self, position: int, size: int) -> bytes:
        return bytes(self._data[position:position + size])

    def size(self) -> int:
        return len(self._data)

    def truncate(self, size: int) -> None:
        del self._data[size:]
        self.disk.flushed[self.path] = min(self.disk.flushed.get(self.path, 0), size)

    def flush(self) -> None:
        self.disk.flushed[self.path] = len(self._data)

    def close(self) -> None:
        pass

    def fileno(self) -> int | None:
        return None


class MemoryDisk:
    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        self.flushed: dict[str, int] = {}
        self.dirs: set[str] = {"/"}

    def open(self, path: str) -> MemoryFile:
        self.makedirs(posixpath.dirname(path))
        self.files.setdefault(path, bytearray())
        return MemoryFile(self, path)

    def exists(self, path: str) -> bool:
        return path in self.files or path.rstrip("/") in self.dirs

    def listdir(self, path: str) -> list[str]:
        path = path.rstrip("/")
        names = {p[len(path) + 1:].split("/")[0] for p in list(self.files) + list(self.dirs)
                 if p.startswith(path + "/")}
        return sorted(n for n in names if n)

    def makedirs(self, path: str) -> None:
        path = path.rstrip("/")
        while path and path not in self.dirs:
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def remove(self, path: str) -> None:
        del self.files[path]
        self.flushed.pop(path, None)

    def rename(self, src: str, dst: str) -> None:
        self.files[dst] = self.files.pop(src)
        self.flushed[dst] = self.flushed.pop(src, 0)

    def rmtree(self, path: str) -> None:
        prefix = path.rstrip("/") + "/"
        for p in [p for p in self.files if p.startswith(prefix)]:
            self.remove(p)
        self.dirs = {d for d in self.dirs if not (d == path.rstrip("/") or d.startswith(prefix))}

    def read_file(self, path: str) -> bytes:
        return bytes(self.files[path])

    def write_file_atomic(self, path: str, data: bytes) -> None:
        self.makedirs(posixpath.dirname(path))
        self.files[path] = bytearray(data)
        self.flushed[path] = len(data)

    def fsync_dir(self, path: str) -> None:
        pass

    def file_size(self, path: str) -> int:
        return len(self.files[path])

    def crash(self) -> None:
        """Power loss: every file keeps only the bytes it had flushed."""
        for path, data in self.files.items():
            del data[self.flushed.get(path, 0):]

    def corrupt(self, path: str, position: int, data: bytes) -> None:
        self.files[path][position:position + len(data)] = data
