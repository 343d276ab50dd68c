"""An in-memory ``Disk`` for tests and the simulator, with power loss.

Every file remembers how many of its bytes were flushed (fsynced). ``crash()`` simulates a power
loss: each file is cut back to its flushed length, so whatever was written after the last
``flush()`` is gone (a file created and never flushed stays, empty). ``write_file_atomic`` is
durable when it returns, like the real one. Truncation is treated as durable at once (simple,
and it only ever removes data). ``corrupt()`` overwrites bytes in place for tests.
"""

from __future__ import annotations

import posixpath

from strandline.protocol.records import Buffer


def _norm(path: str) -> str:
    return posixpath.normpath(path)


class MemoryFile:
    """The data of one file; shared by every handle opened on it."""

    __slots__ = ("data", "flushed")

    def __init__(self) -> None:
        self.data = bytearray()
        self.flushed = 0


class MemoryHandle:
    __slots__ = ("disk", "file", "path", "closed")

    def __init__(self, disk: "MemoryDisk", file: MemoryFile, path: str) -> None:
        self.disk = disk
        self.file = file
        self.path = path
        self.closed = False

    def _check(self) -> None:
        if self.closed:
            raise ValueError(f"I/O on closed file {self.path}")

    def append(self, data: Buffer) -> int:
        self._check()
        position = len(self.file.data)
        self.file.data += data
        self.disk.bytes_written += len(self.file.data) - position
        return position

    def read(self, position: int, size: int) -> bytes:
        self._check()
        if size <= 0:
            return b""
        return bytes(self.file.data[position:position + size])

    def size(self) -> int:
        return len(self.file.data)

    def truncate(self, size: int) -> None:
        self._check()
        data = self.file.data
        if size < len(data):
            del data[size:]
        else:
            data.extend(bytes(size - len(data)))
        self.file.flushed = min(self.file.flushed, size)

    def trim(self) -> None:
        """Nothing is held beyond the end in memory."""

    def flush(self) -> None:
        self._check()
        self.file.flushed = len(self.file.data)
        self.disk.flush_count += 1

    def close(self) -> None:
        self.closed = True

    def fileno(self) -> int | None:
        return None

    def duplicate(self) -> int | None:
        return None

    def read_descriptor(self, fd: int, position: int, size: int) -> bytes:
        raise OSError("an in-memory file has no descriptors")

    def close_descriptor(self, fd: int) -> None:
        raise OSError("an in-memory file has no descriptors")

    def __repr__(self) -> str:
        return f"MemoryHandle({self.path!r}, size={len(self.file.data)}, flushed={self.file.flushed})"


class MemoryDisk:
    """Files in a dict, directories in a set; ``crash()`` drops unflushed bytes."""

    def __init__(self, *, strict_dirs: bool = False) -> None:
        """``strict_dirs``: opening a file in a directory nobody created fails, as on a real disk
        (otherwise missing parent directories are created silently)."""
        self.strict_dirs = strict_dirs
        self.files: dict[str, MemoryFile] = {}
        self.dirs: set[str] = {"/", "."}
        self.flush_count = 0
        self.bytes_written = 0

    # -- the Disk interface ------------------------------------------------------------------

    def open(self, path: str) -> MemoryHandle:
        path = _norm(path)
        parent = posixpath.dirname(path) or "."
        if parent not in self.dirs:
            if self.strict_dirs:
                raise FileNotFoundError(f"no such directory: {parent}")
            self.makedirs(parent)
        file = self.files.get(path)
        if file is None:
            file = self.files[path] = MemoryFile()
        return MemoryHandle(self, file, path)

    def exists(self, path: str) -> bool:
        path = _norm(path)
        return path in self.files or path in self.dirs

    def listdir(self, path: str) -> list[str]:
        path = _norm(path)
        if path not in self.dirs:
            raise FileNotFoundError(f"no such directory: {path}")
        names = {posixpath.basename(p) for p in self.files if posixpath.dirname(p) == path}
        names |= {posixpath.basename(d) for d in self.dirs if d != path and posixpath.dirname(d) == path}
        return sorted(names)

    def makedirs(self, path: str) -> None:
        path = _norm(path)
        while path not in self.dirs:
            self.dirs.add(path)
            path = posixpath.dirname(path) or "."

    def remove(self, path: str) -> None:
        path = _norm(path)
        if self.files.pop(path, None) is None:
            raise FileNotFoundError(f"no such file: {path}")

    def rename(self, src: str, dst: str) -> None:
        src, dst = _norm(src), _norm(dst)
        file = self.files.pop(src, None)
        if file is None:
            raise FileNotFoundError(f"no such file: {src}")
        self.files[dst] = file

    def rmtree(self, path: str) -> None:
        path = _norm(path)
        prefix = path.rstrip("/") + "/"
        for p in [p for p in self.files if p.startswith(prefix)]:
            del self.files[p]
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(prefix)}

    def _existing(self, path: str) -> MemoryFile:
        """The file at ``path``; FileNotFoundError if there is none."""
        path = _norm(path)
        file = self.files.get(path)
        if file is None:
            raise FileNotFoundError(f"no such file: {path}")
        return file

    def read_file(self, path: str) -> bytes:
        return bytes(self._existing(path).data)

    def write_file_atomic(self, path: str, data: bytes) -> None:
        tmp = _norm(path) + ".tmp"
        handle = self.open(tmp)
        handle.truncate(0)
        handle.append(data)
        handle.flush()
        handle.close()
        self.rename(tmp, path)
        self.fsync_dir(posixpath.dirname(_norm(path)))

    def fsync_dir(self, path: str) -> None:
        self.flush_count += 1

    def file_size(self, path: str) -> int:
        return len(self._existing(path).data)

    # -- faults ------------------------------------------------------------------------------

    def crash(self) -> None:
        """Power loss: every file loses the bytes written since its last flush()."""
        for file in self.files.values():
            del file.data[file.flushed:]

    def corrupt(self, path: str, position: int, data: bytes) -> None:
        """Overwrite ``data`` at ``position`` (the file keeps its length unless written past)."""
        file = self.files[_norm(path)]
        end = position + len(data)
        if end > len(file.data):
            file.data.extend(bytes(end - len(file.data)))
        file.data[position:end] = data

    def unflushed_bytes(self, path: str) -> int:
        file = self.files[_norm(path)]
        return len(file.data) - file.flushed
