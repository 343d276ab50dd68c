"""Creating logs costs no fsync: their directory entries and first leader-epoch checkpoint become
durable at the log's first flush (so a topic of thousands of partitions is created without
thousands of fsyncs)."""

from __future__ import annotations

from strandline.log.config import LogConfig
from strandline.log.manager import LogManager
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import make_batch


class CountingDisk(MemoryDisk):
    def __init__(self) -> None:
        super().__init__()
        self.synced_dirs: list[str] = []

    def fsync_dir(self, path: str) -> None:
        self.synced_dirs.append(path)
        super().fsync_dir(path)


def test_new_logs_sync_their_directories_at_their_first_flush_not_when_created():
    disk = CountingDisk()
    logs = LogManager(disk, ["/data/logs"], LogConfig())
    logs.startup(0)
    disk.synced_dirs.clear()
    created = [logs.get_or_create_log("t", p, now_ms=0) for p in range(100)]
    assert disk.synced_dirs == []
    log = created[7]
    log.leader_epoch_cache.assign(0, 0)                                # becoming leader: no write yet
    assert not disk.exists("/data/logs/t-7/leader-epoch-checkpoint") and disk.synced_dirs == []
    log.append_as_leader(make_batch([b"v"]), 0, 0)
    log.flush()
    assert disk.exists("/data/logs/t-7/leader-epoch-checkpoint")
    # the checkpoint's rename fsyncs the log's directory, which makes its segments' entries durable
    # too: one fsync of it, then one of the directory holding it
    assert disk.synced_dirs == ["/data/logs/t-7", "/data/logs"]
    synced = list(disk.synced_dirs)
    log.append_as_leader(make_batch([b"w"]), 0, 0)
    log.flush()
    assert disk.synced_dirs == synced                                  # once only


def test_epo_1_a_new_log_killed_before_its_first_flush_finds_its_epochs_in_its_batches():
    """SIGKILL (the page cache survives) before the log was ever flushed: its leader-epoch
    checkpoint was never written, and recovery, which starts at offset 0, rebuilds it from the
    epochs stamped in the batches."""
    disk = CountingDisk()
    logs = LogManager(disk, ["/data/logs"], LogConfig())
    logs.startup(0)
    log = logs.get_or_create_log("t", 0, now_ms=0)
    log.leader_epoch_cache.assign(3, 0)
    log.append_as_leader(make_batch([b"a", b"b"]), 3, 0)
    log.leader_epoch_cache.assign(5, 2)
    log.append_as_leader(make_batch([b"c"]), 5, 0)
    again = LogManager(disk, ["/data/logs"], LogConfig())             # no clean shutdown: recovery
    again.startup(1)
    recovered = again.get_log("t", 0)
    assert recovered.log_end_offset == 3
    assert recovered.leader_epoch_cache.epoch_entries() == [(3, 0), (5, 2)]


def test_a_shutdown_fsyncs_the_log_dir_holding_many_new_logs_once():
    """A thousand logs created and written since the last flush: the clean shutdown fsyncs each
    one's directory once, and the log dir holding them once, not once per log."""
    disk = CountingDisk()
    logs = LogManager(disk, ["/data/logs"], LogConfig())
    logs.startup(0)
    disk.synced_dirs.clear()
    for p in range(100):
        log = logs.get_or_create_log("t", p, now_ms=0)
        log.leader_epoch_cache.assign(0, 0)
        log.append_as_leader(make_batch([b"v"]), 0, 0)
    logs.shutdown()
    assert disk.synced_dirs.count("/data/logs") == 1 + 3      # the new logs; 3 checkpoints and the marker
    assert sorted(d for d in disk.synced_dirs if d != "/data/logs") == sorted(f"/data/logs/t-{p}" for p in range(100))
    assert disk.synced_dirs.index("/data/logs") > max(disk.synced_dirs.index(f"/data/logs/t-{p}") for p in range(100))
    again = LogManager(disk, ["/data/logs"], LogConfig())
    again.startup(1)
    assert all(again.get_log("t", p).log_end_offset == 1 for p in range(100))
