"""``LogManager``: every partition log in the broker's log dirs, checkpoints, clean shutdown."""

from __future__ import annotations

import os.path

from strandline.log import checkpoint
from strandline.log.config import LogConfig
from strandline.log.disk import Disk
from strandline.log.log import Log

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
RECOVERY_POINTS = "recovery-point-offset-checkpoint"
LOG_START_OFFSETS = "log-start-offset-checkpoint"
HIGH_WATERMARKS = "replication-offset-checkpoint"


def parse_dir_name(name: str) -> tuple[str, int] | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class LogManager:
    def __init__(self, disk: Disk, log_dirs: list[str], default_config: LogConfig) -> None:
        self.disk = disk
        self.log_dirs = list(log_dirs)
        self.default_config = default_config
        self.logs: dict[tuple[str, int], Log] = {}
        self.dir_of: dict[tuple[str, int], str] = {}
        self.recovered_uncleanly = False
        self.recovery_stats = {"logs": 0, "segments_recovered": 0, "batches_scanned": 0, "bytes_truncated": 0}

    def startup(self, now_ms: int, topic_configs: dict[str, LogConfig] | None = None) -> None:
        topic_configs = topic_configs or {}
        for log_dir in self.log_dirs:
            self.disk.makedirs(log_dir)
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN)
            clean = self.disk.exists(marker)
            if not clean:
                self.recovered_uncleanly = True
            recovery = checkpoint.read_offsets(self.disk, os.path.join(log_dir, RECOVERY_POINTS))
            starts = checkpoint.read_offsets(self.disk, os.path.join(log_dir, LOG_START_OFFSETS))
            for name in self.disk.listdir(log_dir):
                key = parse_dir_name(name)
                path = os.path.join(log_dir, name)
                if key is None or name.startswith("."):
                    continue
                config = topic_configs.get(key[0], self.default_config)
                log = Log.open(self.disk, path, key[0], key[1], config, recovery_point=recovery.get(key, 0),
                               log_start_offset=starts.get(key, 0), needs_recovery=not clean, now_ms=now_ms)
                self.logs[key] = log
                self.dir_of[key] = log_dir
                self.recovery_stats["logs"] += 1
                for stat in ("segments_recovered", "batches_scanned", "bytes_truncated"):
                    self.recovery_stats[stat] += log.recovery_stats[stat]
            if clean:
                self.disk.remove(marker)

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig, now_ms: int) -> Log:
        key = (topic, partition)
        log = self.logs.get(key)
        if log is not None:
            if log.config != config:
                log.update_config(config)
            return log
        counts = {d: 0 for d in self.log_dirs}
        for d in self.dir_of.values():
            counts[d] += 1
        log_dir = min(self.log_dirs, key=lambda d: counts[d])
        log = Log.open(self.disk, os.path.join(log_dir, f"{topic}-{partition}"), topic, partition, config,
                       needs_recovery=False, now_ms=now_ms)
        self.logs[key] = log
        self.dir_of[key] = log_dir
        return log

    def delete_log(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        log = self.logs.pop(key, None)
        self.dir_of.pop(key, None)
        if log is not None:
            log.delete()

    def _by_dir(self, values: dict[tuple[str, int], int]) -> dict[str, dict[tuple[str, int], int]]:
        result: dict[str, dict[tuple[str, int], int]] = {d: {} for d in self.log_dirs}
        for key, value in values.items():
            log_dir = self.dir_of.get(key)
            if log_dir is not None:
                result[log_dir][key] = value
        return result

    def checkpoint_recovery_points(self) -> None:
        points = {k: log.recovery_point for k, log in self.logs.items()}
        for log_dir, entries in self._by_dir(points).items():
            checkpoint.write_offsets(self.disk, os.path.join(log_dir, RECOVERY_POINTS), entries)

    def checkpoint_log_start_offsets(self) -> None:
        starts = {k: log.log_start_offset for k, log in self.logs.items()}
        for log_dir, entries in self._by_dir(starts).items():
            checkpoint.write_offsets(self.disk, os.path.join(log_dir, LOG_START_OFFSETS), entries)

    def write_high_watermarks(self, high_watermarks: dict[tuple[str, int], int]) -> None:
        for log_dir, entries in self._by_dir(high_watermarks).items():
            checkpoint.write_offsets(self.disk, os.path.join(log_dir, HIGH_WATERMARKS), entries)

    def read_high_watermarks(self) -> dict[tuple[str, int], int]:
        result: dict[tuple[str, int], int] = {}
        for log_dir in self.log_dirs:
            result.update(checkpoint.read_offsets(self.disk, os.path.join(log_dir, HIGH_WATERMARKS)))
        return result

    def flush_dirty(self, now_ms: int) -> int:
        return sum(1 for log in self.logs.values() if log.maybe_flush(now_ms))

    def cleanup(self, now_ms: int) -> int:
        return sum(log.delete_old_segments(now_ms) for log in self.logs.values())

    def shutdown(self) -> None:
        for log in self.logs.values():
            log.flush()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        for log in self.logs.values():
            log.close()
        for log_dir in self.log_dirs:
            self.disk.write_file_atomic(os.path.join(log_dir, CLEAN_SHUTDOWN), b"")
