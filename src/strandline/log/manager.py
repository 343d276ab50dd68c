"""All the logs of a broker, over one or more log dirs (Kafka's ``LogManager``).

Per log dir (reference/kafka_replication.md §5):

* ``.kafka_cleanshutdown`` — written last by a clean ``shutdown()``; at ``startup()`` its
  presence means "open every log without recovery"; it is deleted (durably) once the dir's logs
  are loaded (SPEC CKP-3, DUR-1). Empty, as Kafka's; or ``{"unclean_shutdown_unhandled":true}``
  when this life began after an unclean shutdown that no controller was seen to handle: the next
  life registers as back from an unclean shutdown too (:attr:`LogManager.had_clean_shutdown`).
* ``recovery-point-offset-checkpoint`` — where each log's recovery scan starts.
* ``log-start-offset-checkpoint`` — each log's start offset.
* ``replication-offset-checkpoint`` — high watermarks, written by the replica manager.

Partition directories are ``<topic>-<partition>`` (topics may contain ``-``).
"""

from __future__ import annotations

import json
import posixpath
import uuid
from typing import NamedTuple

from strandline.log import checkpoint
from strandline.log.partition_metadata import read_topic_id, write_topic_id
from strandline.log.config import LogConfig
from strandline.log.disk import Disk
from strandline.log.loader import parse_partition_dir_name, partition_dir_name
from strandline.log.log import Log
from strandline.log.segment import LogSegment

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"

TopicPartition = tuple[str, int]
#: the clean-shutdown marker of a life that began after an unclean shutdown no controller handled
UNHANDLED_MARKER = b'{"unclean_shutdown_unhandled":true}'


def _says_unhandled(marker: bytes) -> bool:
    """Whether a clean-shutdown marker's content keeps an unhandled unclean shutdown (an empty
    marker, Kafka's, does not)."""
    try:
        return bool(marker.strip()) and json.loads(marker).get("unclean_shutdown_unhandled") is True
    except (ValueError, AttributeError):
        return True         # unreadable: assume the worst, which costs one handling by the controller


class RollFlush(NamedTuple):
    """A rolled segment's files to fsync; then everything of ``log`` below ``offset`` is durable."""
    token: int
    log: Log
    offset: int
    segment: LogSegment
    truncations: int
    paths: tuple[str, ...]


class LogManager:
    def __init__(self, disk: Disk, log_dirs: list[str], default_config: LogConfig) -> None:
        if not log_dirs:
            raise ValueError("LogManager needs at least one log dir")
        self.disk = disk
        self.log_dirs = list(log_dirs)
        self.default_config = default_config
        self.logs: dict[TopicPartition, Log] = {}
        self.dir_of: dict[TopicPartition, str] = {}
        self._logs_in_dir = {d: 0 for d in self.log_dirs}   # so that placing a new log is O(dirs)
        self.recovered_uncleanly = False
        #: every log dir held the clean-shutdown marker at startup, none of them saying that an
        #: earlier unclean shutdown is unhandled: no life since the controller last handled one lost
        #: anything (an empty dir, a first start or a lost disk, did)
        self.had_clean_shutdown = False
        self.recovery_stats: dict[str, int] = {}
        self.started = False
        self.shut_down = False
        self._defer_roll_flushes = False
        self.roll_flushes_due: list[RollFlush] = []         # asked for, not handed out yet
        self._roll_flushes: dict[int, RollFlush] = {}       # handed out (token -> flush), not done yet
        self._next_roll_flush = 0
        #: the highest recovery point of each partition a checkpoint file may hold (read at start-up
        #: or handed out to be written): a log created again starts with it as its highest
        self._checkpointed_recovery_points: dict[TopicPartition, int] = {}
        #: a log was deleted: its stale checkpoint entries should go at once (``take_checkpoints_due``)
        self.checkpoints_due = False

    # -- asynchronous roll flushes ----------------------------------------------------------

    def flush_rolls_later(self) -> None:
        """From now on a roll does not fsync the segment it leaves: the flush is asked for
        (:meth:`take_roll_flushes`) for someone to make away from the caller, who reports it done
        (:meth:`roll_flushed`) so that the log's recovery point moves (Kafka's scheduled
        ``flush-log`` task after a roll)."""
        self._defer_roll_flushes = True
        for log in self.logs.values():
            log.roll_listener = self._rolled

    def _rolled(self, log: Log, offset: int, segment: LogSegment, paths: list[str]) -> None:
        self._next_roll_flush += 1
        self.roll_flushes_due.append(RollFlush(self._next_roll_flush, log, offset, segment, log.truncations,
                                               tuple(paths)))

    def take_roll_flushes(self) -> list["RollFlush"]:
        """The roll flushes asked for since the last call; each is reported done by its token."""
        due, self.roll_flushes_due = self.roll_flushes_due, []
        for flush in due:
            self._roll_flushes[flush.token] = flush
        return due

    def roll_flushed(self, token: int) -> None:
        """The files of roll flush ``token`` are durable."""
        flush = self._roll_flushes.pop(token, None)
        if flush is not None:
            flush.log.roll_flushed(flush.offset, flush.segment, flush.truncations)

    # -- start and stop ----------------------------------------------------------------------

    def startup(self, now_ms: int, topic_configs: dict[str, LogConfig] | None = None) -> None:
        """Load every log in every log dir, recovering them unless the dir was shut down cleanly."""
        topic_configs = topic_configs or {}
        stats: dict[str, int] = {"logs_loaded": 0}
        all_clean = True
        for log_dir in self.log_dirs:
            self.disk.makedirs(log_dir)
            marker = posixpath.join(log_dir, CLEAN_SHUTDOWN_FILE)
            clean = self.disk.exists(marker)
            all_clean = all_clean and clean and not _says_unhandled(self.disk.read_file(marker))
            recovery_points = checkpoint.read_offsets(self.disk, posixpath.join(log_dir, RECOVERY_POINT_CHECKPOINT))
            start_offsets = checkpoint.read_offsets(self.disk, posixpath.join(log_dir, LOG_START_OFFSET_CHECKPOINT))
            for key, offset in recovery_points.items():
                if offset > self._checkpointed_recovery_points.get(key, -1):
                    self._checkpointed_recovery_points[key] = offset
            for name in self.disk.listdir(log_dir):
                parsed = parse_partition_dir_name(name)
                if parsed is None:
                    continue
                if parsed in self.logs:
                    raise ValueError(f"duplicate log directories for {name}: {self.dir_of[parsed]} and {log_dir}")
                topic, partition = parsed
                if not clean:
                    self.recovered_uncleanly = True
                log = Log.open(self.disk, posixpath.join(log_dir, name), topic, partition,
                               topic_configs.get(topic, self.default_config),
                               recovery_point=recovery_points.get(parsed, 0),
                               log_start_offset=start_offsets.get(parsed, 0),
                               needs_recovery=not clean, now_ms=now_ms)
                log.topic_id = read_topic_id(self.disk, log.dir)
                self.logs[parsed] = log
                self.dir_of[parsed] = log_dir
                self._logs_in_dir[log_dir] += 1
                stats["logs_loaded"] += 1
                for stat, value in log.recovery_stats.items():
                    stats[stat] = stats.get(stat, 0) + value
            if clean:
                self.disk.remove(marker)
                self.disk.fsync_dir(log_dir)
        self.recovery_stats = stats
        self.had_clean_shutdown = all_clean and bool(self.log_dirs)
        self.started = True

    def shutdown(self, unclean_shutdown_unhandled: bool = False) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown markers; these
        say ``unclean_shutdown_unhandled`` when this life's registration told of an unclean shutdown
        that no controller was seen to handle."""
        if self.shut_down:
            return
        self.shut_down = True
        for log in self.logs.values():
            log.flush(parent=False)
        self.sync_new_log_entries()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        for log in self.logs.values():
            log.close()
        for log_dir in self.log_dirs:
            self.disk.write_file_atomic(posixpath.join(log_dir, CLEAN_SHUTDOWN_FILE),
                                        UNHANDLED_MARKER if unclean_shutdown_unhandled else b"")
        self.started = False

    def sync_new_log_entries(self) -> None:
        """fsync, once each, the log dirs that hold a log directory whose entry is not durable yet
        (logs flushed with ``parent=False``): a thousand new logs cost one fsync, not a thousand."""
        unsynced = [log for log in self.logs.values() if log.parent_unsynced]
        for parent in sorted({posixpath.dirname(log.dir) for log in unsynced}):
            self.disk.fsync_dir(parent)
        for log in unsynced:
            log.parent_unsynced = False

    # -- logs --------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                          now_ms: int = 0) -> Log:
        """The partition's log; a new one goes to the log dir holding the fewest partitions."""
        key = (topic, partition)
        config = config or self.default_config
        log = self.logs.get(key)
        if log is not None:
            if log.config != config:
                log.update_config(config)
            return log
        log_dir = min(self.log_dirs, key=lambda d: self._logs_in_dir[d])
        self.disk.makedirs(log_dir)
        log = Log.open(self.disk, posixpath.join(log_dir, partition_dir_name(topic, partition)), topic,
                       partition, config, needs_recovery=False, now_ms=now_ms)
        log.topic_id = read_topic_id(self.disk, log.dir)
        if self._defer_roll_flushes:
            log.roll_listener = self._rolled
        log.highest_recovery_point = max(log.highest_recovery_point,
                                         self._checkpointed_recovery_points.get(key, 0))
        self.logs[key] = log
        self.dir_of[key] = log_dir
        self._logs_in_dir[log_dir] += 1
        return log

    def assign_topic_id(self, log: Log, topic_id: uuid.UUID) -> None:
        """Record the id of the topic ``log`` belongs to (``partition.metadata``)."""
        write_topic_id(self.disk, log.dir, topic_id)
        log.topic_id = topic_id
        log.topic_id_unsynced = True

    def delete_log(self, topic: str, partition: int) -> bool:
        key = (topic, partition)
        log = self.logs.pop(key, None)
        log_dir = self.dir_of.pop(key, None)
        if log is None:
            return False
        log.delete()
        self.checkpoints_due = True
        if log_dir is not None:
            self._logs_in_dir[log_dir] -= 1
            self.disk.fsync_dir(log_dir)
        return True

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        return self.dir_of.get((topic, partition))

    def _logs_in(self, log_dir: str) -> dict[TopicPartition, Log]:
        return {key: log for key, log in self.logs.items() if self.dir_of.get(key) == log_dir}

    # -- checkpoints -------------------------------------------------------------------------

    # Each ``*_checkpoints`` method returns ``(path, content)`` per log dir: the broker has its shell
    # write them off the event loop (``WriteCheckpoint``), as Kafka's scheduler thread does. A file
    # holds the values of its last write, up to one interval old, as with Kafka's.

    def recovery_point_checkpoints(self) -> list[tuple[str, bytes]]:
        remembered = self._checkpointed_recovery_points
        for key, log in self.logs.items():
            if log.recovery_point > remembered.get(key, -1):
                remembered[key] = log.recovery_point
        return [(posixpath.join(log_dir, RECOVERY_POINT_CHECKPOINT),
                 checkpoint.offsets_text({key: log.recovery_point for key, log in self._logs_in(log_dir).items()}))
                for log_dir in self.log_dirs]

    def take_checkpoints_due(self) -> list[tuple[str, bytes]]:
        """The recovery-point and log-start checkpoints, if a log was deleted since the last call:
        an entry left of the deleted log would be applied to a log created again under its name
        after a crash (a log start above its data empties it; a recovery point above its first
        segment skips its check). Kafka checkpoints the log dir when it deletes a log."""
        if not self.checkpoints_due:
            return []
        self.checkpoints_due = False
        return self.recovery_point_checkpoints() + self.log_start_offset_checkpoints()

    def log_start_offset_checkpoints(self) -> list[tuple[str, bytes]]:
        return [(posixpath.join(log_dir, LOG_START_OFFSET_CHECKPOINT),
                 checkpoint.offsets_text({key: log.log_start_offset for key, log in self._logs_in(log_dir).items()}))
                for log_dir in self.log_dirs]

    def high_watermark_checkpoints(self, high_watermarks: dict[TopicPartition, int]) -> list[tuple[str, bytes]]:
        """``replication-offset-checkpoint`` in each log dir, for the logs that dir holds."""
        return [(posixpath.join(log_dir, HIGH_WATERMARK_CHECKPOINT),
                 checkpoint.offsets_text({key: hw for key, hw in high_watermarks.items()
                                          if self.dir_of.get(key) == log_dir}))
                for log_dir in self.log_dirs]

    def write_checkpoints(self, files: list[tuple[str, bytes]]) -> None:
        """Write checkpoint files here and now (start-up and the clean shutdown)."""
        for path, content in files:
            self.disk.write_file_atomic(path, content)

    def checkpoint_recovery_points(self) -> None:
        self.write_checkpoints(self.recovery_point_checkpoints())

    def checkpoint_log_start_offsets(self) -> None:
        self.write_checkpoints(self.log_start_offset_checkpoints())

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = {}
        for log_dir in self.log_dirs:
            result.update(checkpoint.read_offsets(self.disk, posixpath.join(log_dir, HIGH_WATERMARK_CHECKPOINT)))
        return result

    # -- periodic work -----------------------------------------------------------------------

    def flush_dirty(self, now_ms: int) -> int:
        """``maybe_flush`` every log; returns how many flushed."""
        return sum(1 for log in list(self.logs.values()) if log.maybe_flush(now_ms))

    def cleanup(self, now_ms: int, high_watermarks: dict[TopicPartition, int] | None = None) -> int:
        """Retention on every log, and producers idle past producer.id.expiration.ms forgotten;
        returns the number of segments deleted."""
        deleted = 0
        for key, log in list(self.logs.items()):
            hw = high_watermarks.get(key) if high_watermarks is not None else None
            deleted += log.delete_old_segments(now_ms, hw)
            log.expire_producers(now_ms)
        return deleted
