"""The real disk behind the log's ``Disk`` interface (``strandline.log.disk``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import queue
import shutil
import threading
from collections import OrderedDict
from typing import Callable

_REOPEN_FLAGS = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
_OPEN_FLAGS = _REOPEN_FLAGS | os.O_CREAT
_CLOSED = -2  # OsFile._fd once close() was called: a use is a bug, not a reopen

#: With this environment variable set to a path, the broker records there how much of each file it
#: opened or fsynced is durable: what a machine keeps across a power loss. ``strandline lab``
#: powers a broker off by SIGKILL, then cuts every file back to its recorded size
#: (:func:`apply_power_loss`): what only the page cache held is gone, as after a real power loss.
FLUSH_LEDGER_ENV = "STRANDLINE_FLUSH_LEDGER"


def _read_ledger(path: str) -> dict[str, int]:
    durable: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                size, _, name = line.rstrip("\n").partition("\t")
                if name:
                    durable[name] = int(size)
    except FileNotFoundError:
        pass
    return durable


class FlushLedger:
    """Lines ``<size>\t<path>``, appended (not fsynced: it is read by the lab after a SIGKILL, on a
    machine that did not lose power); the last line of a path wins.

    A file's durable size is what it held when first seen (opened while the ledger is empty for it:
    it survived the last power loss), raised by each fsync to the size then, and lowered by a
    truncation. Reopening a file after a plain crash keeps the size its earlier life recorded:
    bytes only the page cache held stay undurable until an fsync."""

    def __init__(self, path: str) -> None:
        self.sizes = _read_ledger(path)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)

    def _record(self, path: str, size: int) -> None:
        self.sizes[path] = size
        os.write(self.fd, f"{size}\t{path}\n".encode())

    def opened(self, path: str, size: int) -> None:
        path = os.path.abspath(path)
        if path not in self.sizes:
            self._record(path, size)

    def durable(self, path: str, size: int) -> None:
        self._record(os.path.abspath(path), size)

    def truncated(self, path: str, size: int) -> None:
        path = os.path.abspath(path)
        if self.sizes.get(path, size + 1) > size:
            self._record(path, size)


_ledger: FlushLedger | None = None


def flush_ledger() -> FlushLedger | None:
    global _ledger
    if _ledger is None and os.environ.get(FLUSH_LEDGER_ENV):
        _ledger = FlushLedger(os.environ[FLUSH_LEDGER_ENV])
    return _ledger


def apply_power_loss(ledger_path: str) -> dict[str, tuple[int, int]]:
    """Cut every file the ledger names back to its durable size (a file created and never fsynced
    to nothing); returns ``path -> (size before, size after)`` for the files cut."""
    durable = _read_ledger(ledger_path)
    cut = {}
    for path, size in durable.items():
        try:
            before = os.path.getsize(path)
        except OSError:
            continue
        if before > size:
            os.truncate(path, size)
            cut[path] = (before, size)
    os.remove(ledger_path)
    return cut


def default_max_open_files() -> int:
    """How many log files a broker keeps open at once: half its open-file limit (the soft
    ``RLIMIT_NOFILE``), leaving the other half to sockets, checkpoints and libraries."""
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 512
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 65536
    return max(16, soft // 2)


#: A log segment's blocks are reserved ahead of its appends by as much as it holds, from
#: ``MIN_RESERVE_BYTES`` to ``MAX_RESERVE_BYTES`` (:class:`Preallocator`).
MIN_RESERVE_BYTES = 64 * 1024
MAX_RESERVE_BYTES = 4 * 1024 * 1024
_FALLOC_FL_KEEP_SIZE = 1

log = logging.getLogger("strandline.broker")


def _libc_fallocate() -> Callable[[int, int, int, int], int] | None:
    """libc's ``fallocate(fd, mode, offset, len)``, or None where there is none (not Linux/glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fallocate: Callable[[int, int, int, int], int] = libc.fallocate
    except (OSError, AttributeError):
        return None
    libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong)
    libc.fallocate.restype = ctypes.c_int
    return fallocate


#: a reservation for the preallocator's thread: (file, its reserve epoch, offset, length), or (an event
#: to set once every earlier one is done, 0, 0, 0)
_Job = tuple["OsFile | threading.Event", int, int, int]


class Preallocator:
    """Reserves the disk blocks of log segments ahead of their appends, on a thread of its own.

    On ext4 (and other file systems that allocate blocks lazily), an append beyond the blocks a
    file has makes the kernel reserve new ones under the file's allocation lock, which writeback
    holds while it allocates the blocks of the data it is writing out. The kernel writes dirty data
    out once it is 30 s old (``vm.dirty_expire_centisecs``), hundreds of megabytes at a time under
    steady load, and meanwhile every append to that segment waited: in a minute at 10 MB/s,
    ``pwrite`` calls of the event loop took up to 340 ms, and every request of the broker waited
    with them. Appends into blocks reserved beforehand with ``fallocate(FALLOC_FL_KEEP_SIZE)`` take
    no such lock; the file's size, and so everything that reads it, stays what was written.
    ``fallocate`` holds the file's own lock while it allocates, so an append may wait for it: the
    reservations are small (``MAX_RESERVE_BYTES``), which keeps that wait short (16 MiB at a time
    kept appends waiting up to 36 ms, 64 MiB up to 88 ms; 4 MiB, 4 ms at most in two runs).

    The thread opens the file by its path and reserves only if it is still the same file (device
    and inode) and nothing cut or trimmed it since the reservation was asked for (the file's
    ``reserve_epoch``, checked under the file's ``reserve_lock``, which a cut holds too): it never
    writes a byte, and a reservation never lands on a file that took another's path or outlives a
    cut. A file system without ``fallocate`` is not asked again; any other refusal (a full disk:
    ``ENOSPC``) is counted (``failed``), the first few are logged, and the appends allocate as they
    go. ``/metrics`` shows the counters (``strandline_log_segment_preallocat*``)."""

    def __init__(self) -> None:
        self._fallocate = _libc_fallocate()
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._unsupported: set[int] = set()     # devices whose file system has no fallocate
        self.reserved = 0           # bytes reserved so far
        self.skipped = 0            # reservations no longer wanted: the file cut, trimmed, gone or replaced
        self.failed = 0             # reservations refused (fallocate's error) or failing unexpectedly
        self.errors: list[str] = []  # the first few failures, for the log and the tests

    @property
    def available(self) -> bool:
        return self._fallocate is not None

    @property
    def unsupported_devices(self) -> int:
        """Devices found to have a file system without ``fallocate`` (its segments reserve nothing)."""
        return len(self._unsupported)

    def reserve(self, file: "OsFile", offset: int, length: int) -> None:
        """Have ``length`` bytes from ``offset`` of ``file`` reserved, soon."""
        self._put((file, file.reserve_epoch, offset, length))

    def supports(self, device: int) -> bool:
        return device not in self._unsupported

    def drain(self, timeout: float) -> bool:
        """Wait until what was asked for so far is done (False: not within ``timeout`` seconds)."""
        done = threading.Event()
        self._put((done, 0, 0, 0))
        return done.wait(timeout)

    def _put(self, item: _Job) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="strandline-preallocator", daemon=True)
                    self._thread.start()
        self._queue.put(item)

    def _run(self) -> None:
        while True:
            file, epoch, offset, length = self._queue.get()
            if isinstance(file, threading.Event):
                file.set()
                continue
            try:
                failure = self._reserve(file, epoch, offset, length)
            except Exception as exc:        # never the end of the thread: the appends go on without
                failure = repr(exc)
            if failure is not None:
                self._fail(file, failure)

    def _fail(self, file: "OsFile", reason: str) -> None:
        self.failed += 1
        if len(self.errors) < 10:
            self.errors.append(f"{file.path}: {reason}")
            log.warning("Reserving blocks ahead of appends to %s failed: %s", file.path, reason)

    def _reserve(self, file: "OsFile", epoch: int, offset: int, length: int) -> str | None:
        """Reserve, unless the reservation is no longer wanted; why it failed, if it did."""
        device, inode = file.identity
        if device in self._unsupported:
            return None
        lock, fallocate = file.reserve_lock, self._fallocate
        if lock is None or fallocate is None:
            return None                     # a file (or a system) that takes no reservations
        with lock:
            if file.reserve_epoch != epoch:
                self.skipped += 1           # cut, trimmed or closed since: reserve nothing
                return None
            try:
                fd = os.open(file.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                self.skipped += 1           # deleted or renamed meanwhile
                return None
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != (device, inode):
                    self.skipped += 1       # another file took the path
                    return None
                if fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
                    self.reserved += length
                    return None
                code = ctypes.get_errno()
                if code in (errno.EOPNOTSUPP, errno.ENOSYS):
                    self._unsupported.add(device)   # not an error: this file system allocates as it goes
                    log.info("The file system of %s cannot reserve blocks ahead (fallocate); appends there "
                             "allocate as they go", file.path)
                    return None
                return f"fallocate: {os.strerror(code)} ({errno.errorcode.get(code, code)})"
            finally:
                os.close(fd)


#: The process's preallocator (its thread starts with the first reservation).
PREALLOCATOR = Preallocator()


class OpenFiles:
    """The descriptors of the files a disk has open, least recently used first.

    A broker holds three files per partition replica (``.log``, ``.index``, ``.timeindex``), and
    more once segments roll: with thousands of partitions that is more than the process may open.
    So a file is opened on first use and its descriptor is closed, least recently used first, when
    more than ``limit`` are open; the next use reopens it. Linux's ``fsync`` flushes a file's pages
    whichever descriptor wrote them, so closing one loses nothing."""

    __slots__ = ("limit", "_lru", "reopened", "evicted")

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._lru: OrderedDict[OsFile, None] = OrderedDict()
        self.reopened = 0   # descriptors opened again after an eviction
        self.evicted = 0    # descriptors closed to stay under the limit

    def __len__(self) -> int:
        return len(self._lru)

    def used(self, f: "OsFile") -> None:
        self._lru.move_to_end(f)

    def opened(self, f: "OsFile") -> None:
        lru = self._lru
        lru[f] = None
        while len(lru) > self.limit:
            oldest, _ = lru.popitem(last=False)
            oldest._close_fd()
            self.evicted += 1

    def closed(self, f: "OsFile") -> None:
        self._lru.pop(f, None)


class OsFile:
    """One file: appends with ``os.pwrite`` at the size kept in memory, reads with ``os.pread``.

    Its descriptor comes and goes with ``OpenFiles``: the path and the size are what it keeps.
    Given a :class:`Preallocator`, it has the blocks ahead of its appends reserved: as many as it
    holds, from ``MIN_RESERVE_BYTES`` to ``MAX_RESERVE_BYTES``, asked for again once the appends
    are halfway through them; :meth:`trim` gives back what was reserved beyond its end."""

    __slots__ = ("_fd", "_size", "_reserved", "_preallocator", "identity", "reserve_epoch", "reserve_lock",
                 "path", "_open_files", "__weakref__")

    def __init__(self, path: str, open_files: OpenFiles | None = None,
                 preallocator: Preallocator | None = None) -> None:
        self.path = path
        self._open_files = open_files if open_files is not None else OpenFiles(1 << 30)
        self._fd = -1
        st = os.fstat(self._open(_OPEN_FLAGS))
        self._size = st.st_size
        self.identity = (st.st_dev, st.st_ino)
        self._reserved = self._size           # where the blocks asked for end
        self.reserve_epoch = 0                # raised by a cut, a trim or the close: older requests are void
        self._preallocator = None
        self.reserve_lock = None
        if preallocator is not None and preallocator.available and preallocator.supports(st.st_dev):
            self._preallocator = preallocator
            self.reserve_lock = threading.Lock()
        if (ledger := flush_ledger()) is not None:
            ledger.opened(path, self._size)

    def _open(self, flags: int) -> int:
        self._fd = os.open(self.path, flags, 0o644)
        self._open_files.opened(self)
        return self._fd

    @property
    def fd(self) -> int:
        """The descriptor, opened again (never created again) if it was closed to stay under the limit."""
        fd = self._fd
        if fd >= 0:
            self._open_files.used(self)
            return fd
        if fd == _CLOSED:
            raise OSError(errno.EBADF, f"{self.path} is closed")
        self._open_files.reopened += 1
        return self._open(_REOPEN_FLAGS)

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:      # the descriptor is released whatever close reports (Linux)
                pass

    def append(self, data: bytes | bytearray | memoryview) -> int:
        position = self._size
        fd = self.fd
        written = os.pwrite(fd, data, position)  # one system call, no copy of the buffer
        total = len(data) if not isinstance(data, memoryview) else data.nbytes
        if written != total:  # a short write (disk full, signal): finish it, then report
            with memoryview(data) as view, view.cast("B") as flat:
                while written < total:
                    n = os.pwrite(fd, flat[written:], position + written)
                    if n <= 0:
                        raise OSError(f"short write to {self.path}")
                    written += n
        end = self._size = position + total
        if self._preallocator is not None:
            ahead = min(max(end, MIN_RESERVE_BYTES), MAX_RESERVE_BYTES)
            if end + ahead // 2 > self._reserved:
                start = max(end, self._reserved)
                self._reserved = end + ahead
                self._preallocator.reserve(self, start, self._reserved - start)
        return position

    def read(self, position: int, size: int) -> bytes:
        if size <= 0 or position >= self._size:
            return b""
        return os.pread(self.fd, min(size, self._size - position), position)

    def size(self) -> int:
        return self._size

    def truncate(self, size: int) -> None:
        if self.reserve_lock is None:
            os.ftruncate(self.fd, size)
        else:
            with self.reserve_lock:               # no reservation asked for before lands after the cut
                self.reserve_epoch += 1
                os.ftruncate(self.fd, size)       # which frees the blocks reserved beyond it too
        self._size = self._reserved = size
        if (ledger := flush_ledger()) is not None:
            ledger.truncated(self.path, size)

    def flush(self) -> None:
        os.fsync(self.fd)
        if (ledger := flush_ledger()) is not None:
            ledger.durable(self.path, self._size)

    def trim(self) -> None:
        """Give back the blocks reserved beyond the end (a segment the log rolled past, or one closed
        at shutdown); the next append reserves again."""
        if self.reserve_lock is None or self._fd == _CLOSED:
            return
        with self.reserve_lock:
            self.reserve_epoch += 1
            if self._reserved > self._size:
                fd = self.fd
                if os.fstat(fd).st_size == self._size:
                    os.ftruncate(fd, self._size)    # the same size: only the blocks beyond it go
            self._reserved = self._size

    def close(self) -> None:
        self.reserve_epoch += 1                    # nothing more to reserve in it
        self._open_files.closed(self)
        self._close_fd()
        self._fd = _CLOSED

    def fileno(self) -> int | None:
        return self.fd

    def duplicate(self) -> int | None:
        try:
            return os.dup(self.fd)
        except OSError:         # out of descriptors (EMFILE): the read is made as bytes instead
            return None

    def read_descriptor(self, fd: int, position: int, size: int) -> bytes:
        return os.pread(fd, size, position) if size > 0 else b""

    def close_descriptor(self, fd: int) -> None:
        os.close(fd)

    def __repr__(self) -> str:
        return f"OsFile({self.path!r}, size={self._size})"


def fsync_directory(path: str) -> None:
    """Make the entries of directory ``path`` (files created, renamed or deleted in it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class OsDisk:
    """The real disk. At most ``max_open_files`` of the files opened through it hold a descriptor at
    once (:class:`OpenFiles`); by default half the process's open-file limit."""

    def __init__(self, max_open_files: int | None = None, preallocator: Preallocator | None = None) -> None:
        self.open_files = OpenFiles(max_open_files if max_open_files is not None else default_max_open_files())
        self.preallocator = preallocator if preallocator is not None else PREALLOCATOR

    def open(self, path: str) -> OsFile:
        """A log segment (``.log``) has its blocks reserved ahead of its appends (:class:`Preallocator`)."""
        return OsFile(path, self.open_files, self.preallocator if path.endswith(".log") else None)

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
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        ledger = flush_ledger()
        if ledger is not None:
            # whichever file the name holds at a SIGKILL around the rename is durable whole (each
            # was fsynced before its rename): no power loss the lab plays may cut either
            ledger.durable(path, max(len(data), os.path.getsize(path) if os.path.exists(path) else 0))
        os.replace(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")
        if ledger is not None:
            ledger.durable(path, len(data))

    def fsync_dir(self, path: str) -> None:
        fsync_directory(path)

    def file_size(self, path: str) -> int:
        return os.path.getsize(path)


LOCK_FILE = ".lock"


class DirectoryLock:
    """An exclusive lock on ``<directory>/.lock``, as Kafka takes on each of its log dirs: held
    until :meth:`release` or the process ends, by one process only. The holder writes its pid in
    the file, so that whoever fails to take the lock can name it."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)
        self.path = os.path.join(self.directory, LOCK_FILE)
        self.fd = -1

    def acquire(self) -> bool:
        """Take the lock; False (and nothing held) when another process has it."""
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return True

    def holder(self) -> str:
        """``pid N`` of the process that holds the lock, as it wrote it."""
        try:
            with open(self.path) as f:
                pid = f.read().strip()
        except OSError:
            pid = ""
        return f"pid {pid}" if pid.isdigit() else "a process that did not say its pid"

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
