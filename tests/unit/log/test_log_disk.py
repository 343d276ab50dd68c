"""The Disk interface: the real one (OsDisk) and the simulator's (MemoryDisk, with power loss)."""

from __future__ import annotations

import os

import pytest

from strandline.runtime.disk import OsDisk
from strandline.sim.disk import MemoryDisk


def test_append_read_size_truncate(disk_root):
    disk, root = disk_root
    f = disk.open(os.path.join(root, "a.log"))
    assert f.size() == 0
    assert f.append(b"hello") == 0
    assert f.append(bytearray(b" world")) == 5
    assert f.append(memoryview(b"!!")) == 11
    assert f.size() == 13
    assert f.read(0, 5) == b"hello"
    assert f.read(6, 100) == b"world!!"          # short read at the end
    assert f.read(13, 10) == b""
    f.truncate(5)
    assert f.size() == 5 and f.read(0, 100) == b"hello"
    assert f.append(b"X") == 5
    f.flush()
    f.close()
    again = disk.open(os.path.join(root, "a.log"))
    assert again.size() == 6 and again.read(0, 6) == b"helloX"
    again.close()
    assert disk.file_size(os.path.join(root, "a.log")) == 6


def test_directory_operations_and_atomic_write(disk_root):
    disk, root = disk_root
    sub = os.path.join(root, "x", "y")
    disk.makedirs(sub)
    disk.makedirs(sub)  # no error when it exists
    disk.write_file_atomic(os.path.join(sub, "cp"), b"0\n0\n")
    assert disk.read_file(os.path.join(sub, "cp")) == b"0\n0\n"
    disk.write_file_atomic(os.path.join(sub, "cp"), b"0\n1\nt 0 1\n")
    assert disk.read_file(os.path.join(sub, "cp")) == b"0\n1\nt 0 1\n"
    assert disk.listdir(sub) == ["cp"]                     # no .tmp left behind
    disk.open(os.path.join(sub, "b")).close()
    disk.rename(os.path.join(sub, "b"), os.path.join(sub, "c"))
    assert disk.listdir(sub) == ["c", "cp"]
    disk.remove(os.path.join(sub, "c"))
    assert not disk.exists(os.path.join(sub, "c"))
    assert disk.listdir(os.path.join(root, "x")) == ["y"]
    disk.fsync_dir(sub)
    disk.rmtree(os.path.join(root, "x"))
    assert not disk.exists(sub) and not disk.exists(os.path.join(root, "x"))


def test_fileno_is_real_only_for_os_files(tmp_path):
    f = OsDisk().open(str(tmp_path / "f"))
    assert isinstance(f.fileno(), int)
    f.close()
    m = MemoryDisk()
    assert m.open("/d/f").fileno() is None


def test_memory_disk_crash_loses_what_was_not_flushed():
    disk = MemoryDisk()
    f = disk.open("/d/seg.log")
    f.append(b"durable")
    f.flush()
    f.append(b"-volatile")
    g = disk.open("/d/never-flushed")
    g.append(b"gone")
    disk.write_file_atomic("/d/cp", b"checkpoint")
    assert disk.unflushed_bytes("/d/seg.log") == 9
    disk.crash()
    assert disk.read_file("/d/seg.log") == b"durable"
    assert disk.exists("/d/never-flushed") and disk.file_size("/d/never-flushed") == 0
    assert disk.read_file("/d/cp") == b"checkpoint"
    f.truncate(3)
    disk.crash()
    assert disk.read_file("/d/seg.log") == b"dur"


def test_memory_disk_corrupt_and_strict_dirs():
    disk = MemoryDisk(strict_dirs=True)
    with pytest.raises(FileNotFoundError):
        disk.open("/nowhere/f")
    disk.makedirs("/d")
    f = disk.open("/d/f")
    f.append(b"abcdef")
    disk.corrupt("/d/f", 2, b"XY")
    assert f.read(0, 6) == b"abXYef"
    f.close()
    with pytest.raises(ValueError):
        f.read(0, 1)


def test_os_append_is_one_write_without_copy(tmp_path, monkeypatch):
    calls = []
    real = os.pwrite

    def spy(fd, data, offset):
        calls.append((type(data), offset))
        return real(fd, data, offset)

    f = OsDisk().open(str(tmp_path / "f"))
    monkeypatch.setattr(os, "pwrite", spy)
    buf = bytearray(b"x" * 100_000)
    f.append(buf)
    f.append(memoryview(buf)[:10])
    assert calls == [(bytearray, 0), (memoryview, 100_000)]
    assert f.size() == 100_010
    f.close()


def test_loss_5_the_flush_ledger_cuts_each_file_back_to_what_it_fsynced(tmp_path, monkeypatch):
    """The lab's power loss on the real disk: what was fsynced (or there at open) survives, what
    only the page cache held is dropped; a file never fsynced comes back empty."""
    from strandline.runtime import disk as runtime_disk

    ledger = tmp_path / "ledger"
    monkeypatch.setenv(runtime_disk.FLUSH_LEDGER_ENV, str(ledger))
    monkeypatch.setattr(runtime_disk, "_ledger", None)
    (tmp_path / "old.log").write_bytes(b"kept")
    d = OsDisk()
    old = d.open(str(tmp_path / "old.log"))
    old.append(b"+lost")
    synced = d.open(str(tmp_path / "synced.log"))
    synced.append(b"durable")
    synced.flush()
    synced.append(b"+lost")
    fresh = d.open(str(tmp_path / "fresh.log"))
    fresh.append(b"never fsynced")
    d.write_file_atomic(str(tmp_path / "checkpoint"), b"0\n1\n")
    cut_back = d.open(str(tmp_path / "cut.log"))
    cut_back.append(b"durable")
    cut_back.flush()
    cut_back.truncate(3)                          # a follower truncating...
    cut_back.append(b"-refetched")                # ...and fetching again, not fsynced
    for f in (old, synced, fresh, cut_back):
        f.close()
    # a plain crash and a restart (a new process, the same ledger) before the power loss: bytes
    # only the page cache held do not become durable by being there at the next open
    monkeypatch.setattr(runtime_disk, "_ledger", None)
    d.open(str(tmp_path / "fresh.log")).close()
    cut = runtime_disk.apply_power_loss(str(ledger))
    assert (tmp_path / "old.log").read_bytes() == b"kept"
    assert (tmp_path / "synced.log").read_bytes() == b"durable"
    assert (tmp_path / "fresh.log").read_bytes() == b""
    assert (tmp_path / "cut.log").read_bytes() == b"dur"
    assert (tmp_path / "checkpoint").read_bytes() == b"0\n1\n"
    assert sorted(os.path.basename(p) for p in cut) == ["cut.log", "fresh.log", "old.log", "synced.log"]
    assert not ledger.exists()


@pytest.mark.parametrize("killed", ["before the rename", "after the rename"])
def test_a_sigkill_around_an_atomic_writes_rename_leaves_a_whole_file_to_the_power_loss(tmp_path, monkeypatch, killed):
    """A checkpoint rewritten larger: whichever file the name holds when the process dies (the old
    or the new, each fsynced before its rename), the lab's power loss keeps it whole. (The ledger
    recorded the new size only after the rename: a SIGKILL in between cut the new file to the
    old size, and a broker stopped on a torn replication-offset-checkpoint, TXN trial 46.)"""
    from strandline.runtime import disk as runtime_disk

    ledger = tmp_path / "ledger"
    monkeypatch.setenv(runtime_disk.FLUSH_LEDGER_ENV, str(ledger))
    monkeypatch.setattr(runtime_disk, "_ledger", None)
    d = OsDisk()
    path = str(tmp_path / "replication-offset-checkpoint")
    d.write_file_atomic(path, b"0\n1\nlab 0 5\n")
    real_replace, real_fsync_dir = os.replace, d.fsync_dir

    class Killed(Exception):
        pass

    def dies(*args):
        if killed == "before the rename":
            raise Killed
        real_replace(*args)

    def dies_after(path):
        real_fsync_dir(path)
        raise Killed
    monkeypatch.setattr(runtime_disk.os, "replace", dies)
    if killed == "after the rename":
        monkeypatch.setattr(d, "fsync_dir", dies_after)
    with pytest.raises(Killed):
        d.write_file_atomic(path, b"0\n2\nlab 0 5\nlab 1 17\n")
    runtime_disk.apply_power_loss(str(ledger))
    expected = b"0\n1\nlab 0 5\n" if killed == "before the rename" else b"0\n2\nlab 0 5\nlab 1 17\n"
    assert (tmp_path / "replication-offset-checkpoint").read_bytes() == expected


def test_os_disk_keeps_at_most_its_limit_of_descriptors_and_reopens_on_use(tmp_path):
    """Thousands of partitions hold more files than a process may open: OsDisk closes the least
    recently used descriptors beyond its limit and reopens a file on its next use."""
    d = OsDisk(max_open_files=3)
    files = [d.open(str(tmp_path / f"f{i}")) for i in range(5)]
    assert len(d.open_files) == 3
    assert sum(f._fd >= 0 for f in files) == 3
    assert files[0]._fd < 0 and files[1]._fd < 0      # the two oldest were closed
    for i, f in enumerate(files):
        f.append(b"data-%d" % i)
    for i, f in enumerate(files):
        assert f.read(0, 100) == b"data-%d" % i
        f.flush()
        f.truncate(4)
        assert f.read(0, 100) == b"data"
    assert len(d.open_files) == 3
    assert d.open_files.reopened >= 5 and d.open_files.evicted >= 5
    assert len(os.listdir(f"/proc/{os.getpid()}/fd")) >= 3
    for f in files:
        f.close()
    assert len(d.open_files) == 0


def test_os_file_is_never_recreated_after_close_or_removal(tmp_path):
    """A closed file refuses use (a bug, not a reopen), and a file removed while its descriptor was
    evicted is not silently created again empty."""
    d = OsDisk(max_open_files=1)
    a = d.open(str(tmp_path / "a"))
    a.append(b"x")
    a.close()
    with pytest.raises(OSError):
        a.read(0, 1)
    assert d.open(str(tmp_path / "a")).read(0, 1) == b"x"   # this open closed nothing it needs
    b = d.open(str(tmp_path / "b"))
    c = d.open(str(tmp_path / "c"))                          # evicts b's descriptor
    assert b._fd < 0
    os.remove(tmp_path / "b")
    with pytest.raises(FileNotFoundError):
        b.append(b"y")
    assert not (tmp_path / "b").exists()
    c.close()


def test_logs_of_many_partitions_work_under_a_small_descriptor_limit(tmp_path):
    """A LogManager of 50 partitions (150+ files) on a disk allowed 8 descriptors: appends, reads,
    rolls, flushes, a clean shutdown and a restart all work, and never more than 8 are open."""
    from strandline.log.config import LogConfig
    from strandline.log.manager import LogManager

    from tests.unit.batches import make_batch

    disk = OsDisk(max_open_files=8)
    config = LogConfig(segment_bytes=400)
    logs = LogManager(disk, [str(tmp_path)], config)
    logs.startup(now_ms=0)
    for round_ in range(6):
        for p in range(50):
            logs.get_or_create_log("t", p).append_as_leader(make_batch([b"v%d-%d" % (round_, p)] * 3), 0, 1000)
            assert len(disk.open_files) <= 8
    for p in range(50):
        log = logs.get_log("t", p)
        assert len(log.segments) > 1
        assert log.log_end_offset == 18
    logs.flush_dirty(now_ms=10_000)
    logs.shutdown()
    assert len(disk.open_files) == 0
    disk = OsDisk(max_open_files=8)
    logs = LogManager(disk, [str(tmp_path)], config)
    logs.startup(now_ms=20_000)
    for p in range(50):
        data = logs.get_log("t", p).read(0, 1 << 20)
        assert b"v5-%d" % p in bytes(data) and b"v0-%d" % p in bytes(data)
        assert len(disk.open_files) <= 8
    logs.shutdown()



def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def unreserved(path: str, size: int) -> bool:
    """At most what ``size`` bytes take in whole blocks, and a block of the file's extent tree."""
    block = os.statvfs(path).f_frsize
    return allocated(path) <= -(-size // block) * block + 2 * block


@pytest.fixture
def pre(tmp_path):
    """A preallocator of its own, where ``tmp_path``'s file system really reserves blocks ahead."""
    from strandline.runtime.disk import MIN_RESERVE_BYTES, Preallocator

    pre = Preallocator()
    if not pre.available:
        pytest.skip("this libc has no fallocate")
    probe = OsDisk(preallocator=pre).open(str(tmp_path / "probe.log"))
    probe.append(b"x")
    assert pre.drain(10)
    if allocated(probe.path) < MIN_RESERVE_BYTES // 2:
        pytest.skip(f"the file system of {tmp_path} reserves no blocks ahead (fallocate with FALLOC_FL_KEEP_SIZE)")
    probe.close()
    pre.failed = pre.skipped = pre.reserved = 0
    return pre


def read_from_disk(path: str) -> bytes:
    """The file's bytes once on the disk, not from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)


def test_a_log_segments_blocks_are_reserved_ahead_of_its_appends_and_its_size_is_what_was_written(tmp_path, pre):
    """Appends to a segment go into blocks reserved beforehand (``fallocate`` keeping the size), so
    that they do not wait on the kernel's block allocation while writeback holds it; the file's
    size and bytes are exactly what was appended, and an index file gets no reservation."""
    from strandline.runtime.disk import MAX_RESERVE_BYTES, MIN_RESERVE_BYTES

    block = os.statvfs(tmp_path).f_frsize
    disk = OsDisk(preallocator=pre)
    log, index = (str(tmp_path / name) for name in ("00000000000000000000.log", "00000000000000000000.index"))
    f, g = disk.open(log), disk.open(index)
    chunks = [os.urandom(10_000) for _ in range(30)]
    for c in chunks:
        f.append(c)
        g.append(c[:16])
    assert pre.drain(10) and pre.failed == 0
    written = 300_000
    assert os.path.getsize(log) == f.size() == written
    assert read_from_disk(log) == b"".join(chunks)
    assert allocated(log) >= written + min(written, MAX_RESERVE_BYTES) // 2     # reserved beyond its end
    assert allocated(index) < 30 * 16 + block + MIN_RESERVE_BYTES // 2         # no reservation
    f.truncate(50_000)                                                          # frees what was reserved
    assert os.path.getsize(log) == 50_000 and unreserved(log, 50_000)
    f.append(b"x" * 100)
    assert pre.drain(10)
    assert allocated(log) >= 50_100 + MIN_RESERVE_BYTES // 2
    assert read_from_disk(log) == b"".join(chunks)[:50_000] + b"x" * 100


def test_a_rolled_segment_gives_its_reserved_blocks_back(tmp_path, pre):
    """Once the log rolls past a segment, no more appends come: what was reserved beyond its end
    is given back (as Kafka trims a preallocated segment), and the active one keeps reserving."""
    from strandline.log.config import LogConfig
    from strandline.log.log import Log
    from tests.unit.batches import make_batch

    log = Log.open(OsDisk(preallocator=pre), str(tmp_path / "t-0"), "t", 0, LogConfig(segment_bytes=200_000),
                   needs_recovery=False)
    for i in range(60):
        log.append_as_leader(make_batch([os.urandom(10_000)], timestamp_ms=1000 + i), 0, 1000 + i)
    assert pre.drain(10)
    assert len(log.segments) >= 3
    for segment in log.segments[:-1]:
        size = os.path.getsize(segment.log_path)
        assert 150_000 < size <= 200_000 + 11_000
        assert unreserved(segment.log_path, size), segment.log_path
    active = log.segments[-1].log_path
    assert not unreserved(active, os.path.getsize(active))
    log.close()
    assert unreserved(active, os.path.getsize(active))                  # closed: given back too


def test_a_reservation_asked_for_before_a_cut_or_for_a_replaced_file_is_not_made(tmp_path, pre):
    """The thread checks, under the file's lock, that nothing cut the file since the reservation
    was asked for, and that the path is still the same file: a reservation never outlives a cut
    or lands on another file (and so never holds space nothing will give back)."""
    from strandline.runtime.disk import MIN_RESERVE_BYTES

    disk = OsDisk(preallocator=pre)
    path = str(tmp_path / "00000000000000000000.log")
    f = disk.open(path)
    with f.reserve_lock:                     # the thread cannot reserve until the cut below
        f.append(os.urandom(3 << 20))        # asks for a reservation beyond 3 MiB
        epoch = f.reserve_epoch
    f.truncate(0)
    assert f.reserve_epoch == epoch + 1
    assert pre.drain(10) and pre.skipped == 1 and pre.reserved == 0 and pre.failed == 0
    assert os.path.getsize(path) == 0 and unreserved(path, 0)
    # the path taken by another file before the thread got to it
    g = disk.open(str(tmp_path / "00000000000000000001.log"))
    with g.reserve_lock:
        g.append(b"y" * 100)
        os.replace(path, g.path)             # another file now has g's path
    assert pre.drain(10) and pre.skipped == 2 and pre.reserved == 0 and pre.failed == 0
    assert unreserved(g.path, 100) and allocated(g.path) < MIN_RESERVE_BYTES // 2


def test_a_segment_gone_before_its_reservation_is_skipped(tmp_path, pre):
    f = OsDisk(preallocator=pre).open(str(tmp_path / "gone.log"))
    with f.reserve_lock:
        f.append(b"z" * 100)
        os.remove(f.path)
    assert pre.drain(10)
    assert pre.skipped == 1 and pre.reserved == 0 and pre.failed == 0 and not pre.errors and not os.path.exists(f.path)


def test_a_refused_reservation_is_counted_logged_and_shown_on_metrics_and_the_appends_go_on(tmp_path, pre, caplog):
    """A full disk refuses ``fallocate`` (ENOSPC): the refusal is counted apart from reservations
    merely skipped, logged with its reason, and on /metrics; the appends themselves carry on."""
    import ctypes
    import errno

    from prometheus_client import CollectorRegistry, generate_latest

    from strandline.runtime.monitoring import PreallocatorCollector

    def full_disk(fd, mode, offset, length):
        ctypes.set_errno(errno.ENOSPC)
        return -1

    pre._fallocate = full_disk
    f = OsDisk(preallocator=pre).open(str(tmp_path / "00000000000000000000.log"))
    with caplog.at_level("WARNING", logger="strandline"):
        f.append(b"a" * 1000)
        assert pre.drain(10)
    assert pre.failed == 1 and pre.skipped == 0 and pre.reserved == 0
    assert "No space left on device (ENOSPC)" in pre.errors[0]
    assert any("No space left on device" in r.getMessage() for r in caplog.records)
    f.append(b"b" * 1000)
    assert read_from_disk(f.path) == b"a" * 1000 + b"b" * 1000
    registry = CollectorRegistry()
    registry.register(PreallocatorCollector(pre))
    text = generate_latest(registry).decode()
    assert "strandline_log_segment_preallocation_failures_total 1.0" in text
    assert "strandline_log_segment_preallocated_bytes_total 0.0" in text


def test_a_file_system_without_fallocate_is_shown_on_metrics_and_not_asked_again(tmp_path, pre):
    """EOPNOTSUPP is no failure: that device's segments reserve nothing from then on, and /metrics
    tells such a broker apart from an idle one."""
    import ctypes
    import errno

    from prometheus_client import CollectorRegistry, generate_latest

    from strandline.runtime.monitoring import PreallocatorCollector

    calls = []

    def no_fallocate(fd, mode, offset, length):
        calls.append(offset)
        ctypes.set_errno(errno.EOPNOTSUPP)
        return -1

    pre._fallocate = no_fallocate
    disk = OsDisk(preallocator=pre)
    f = disk.open(str(tmp_path / "00000000000000000000.log"))
    f.append(b"a" * 1000)
    assert pre.drain(10)
    f.append(os.urandom(3 << 20))                       # would ask for more, on another file system
    g = disk.open(str(tmp_path / "00000000000000000001.log"))
    g.append(b"b" * 1000)
    assert pre.drain(10)
    assert len(calls) == 1 and pre.failed == 0 and pre.unsupported_devices == 1
    registry = CollectorRegistry()
    registry.register(PreallocatorCollector(pre))
    assert "strandline_log_segment_preallocation_unsupported_devices 1.0" in generate_latest(registry).decode()
