"""A broker's log cleaner (Kafka's ``LogCleaner`` and ``LogCleanerManager``).

Every ``log.cleaner.backoff.ms`` the cleaner looks at each log whose cleanup policy has
``compact`` and picks the filthiest one that is due. A log is due when:

- its dirty ratio reaches ``min.cleanable.dirty.ratio``. The ratio is the bytes of the segments
  written since the last cleaning over the bytes of all cleanable segments;
- its oldest dirty segment began more than ``max.compaction.lag.ms`` ago;
- a tombstone kept by an earlier pass has outlived ``delete.retention.ms``.

It then runs one pass (``log.cleaning.Cleaning``) over that log, a slice of about
``SLICE_WORK`` at each call of :meth:`tick`, pausing between slices so that it takes about ``DUTY``
of the event loop, which serves clients meanwhile. Kafka
runs ``log.cleaner.threads`` threads. Here one cooperative cleaner stands for any number above
zero, and ``log.cleaner.threads=0``, like ``log.cleaner.enable=false``, turns cleaning off.
``log.cleaner.io.max.bytes.per.second`` spaces the slices.

The first uncleanable offset is the lowest of: the active segment's base offset, the high
watermark (no replica compacts what it may still have to truncate), and the base offset of the
first segment holding records newer than ``min.compaction.lag.ms``.

The cleaner's progress is the ``cleaner-offset-checkpoint`` of each log dir (Kafka's file and
format): per partition, the offset below which the log is clean. A truncation below it moves it
back.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict
from typing import Any, Callable, Iterator

from strandline.log import checkpoint
from strandline.log.cleaning import CleanerStats, Cleaning, CleaningAborted
from strandline.log.log import Log
from strandline.log.manager import LogManager, TopicPartition

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
SLICE_WORK = 32 * 1024          # work per slice of a pass (see log.cleaning.YIELD_WORK): about 0.16 ms
#: A busy cleaner takes about this share of the event loop (and of a core): after each slice it
#: pauses for what the slice's work cost (estimated at ``WORK_PER_MS``) times ``1 / DUTY - 1``.
#: The replicas of a topic that turns compacted all clean at once, and brokers often share machines.
DUTY = 0.1
WORK_PER_MS = 200 * 1024
#: bytes per offset-map entry in Kafka's SkimpyOffsetMap (a 16-byte MD5 and an 8-byte offset):
#: ``log.cleaner.dedupe.buffer.size`` gives the map's capacity in keys as in Kafka
MAP_ENTRY_BYTES = 24


class LogCleaner:
    def __init__(self, logs: LogManager, *, enabled: bool = True, backoff_ms: int = 15000,
                 io_max_bytes_per_second: float = float("inf"), dedupe_buffer_size: int = 134217728,
                 io_buffer_load_factor: float = 0.9) -> None:
        self.logs = logs
        self.configure(enabled, backoff_ms, io_max_bytes_per_second, dedupe_buffer_size, io_buffer_load_factor)
        self.checkpoints: dict[TopicPartition, int] = {}
        self._owners: dict[TopicPartition, Log] = {}        # the log each checkpoint entry is about
        self.tombstones_due_ms: dict[TopicPartition, int] = {}
        self.last_pass: dict[TopicPartition, dict[str, Any]] = {}     # per log: what its last pass did
        self.totals = CleanerStats()
        self.passes = 0
        self.aborted = 0
        self._loaded = False
        self._next_ms = 0
        self._now_ms = 0                # the time of the last tick (what status reports against)
        self._job: Iterator[int] | None = None
        self._cleaning: Cleaning | None = None
        self._key: TopicPartition | None = None
        self._started_ms = 0
        self.checkpoint_writes: dict[str, bytes] = {}   # path -> content, for the broker to write

    def configure(self, enabled: bool, backoff_ms: int, io_max_bytes_per_second: float, dedupe_buffer_size: int,
                  io_buffer_load_factor: float) -> None:
        """The ``log.cleaner.*`` settings (at start and on a dynamic broker config change)."""
        self.enabled = enabled
        self.backoff_ms = backoff_ms
        self.io_max_bytes_per_second = io_max_bytes_per_second
        self.map_capacity = max(1, int(dedupe_buffer_size * io_buffer_load_factor) // MAP_ENTRY_BYTES)

    # -- checkpoints -------------------------------------------------------------------------

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for log_dir in self.logs.log_dirs:
            path = posixpath.join(log_dir, CLEANER_CHECKPOINT)
            self.checkpoints.update(checkpoint.read_offsets(self.logs.disk, path))

    def _write_checkpoint(self, log_dir: str) -> None:
        """Queue the log dir's checkpoint for the broker to write (``take_checkpoint_writes``)."""
        entries = {key: offset for key, offset in self.checkpoints.items()
                   if self.logs.dir_of.get(key) == log_dir}
        self.checkpoint_writes[posixpath.join(log_dir, CLEANER_CHECKPOINT)] = checkpoint.offsets_text(entries)

    def take_checkpoint_writes(self) -> list[tuple[str, bytes]]:
        """The ``cleaner-offset-checkpoint`` files due since the last call: ``(path, content)``."""
        writes, self.checkpoint_writes = list(self.checkpoint_writes.items()), {}
        return writes

    def first_dirty_offset(self, key: TopicPartition, log: Log, *, peek: bool = False) -> int:
        """Where the log stops being clean: the checkpoint, moved back by truncations, within the
        log. ``peek``: only read (the truncation stays to be taken)."""
        self._load()
        if self._owners.get(key, log) is not log:        # the topic was deleted and created again
            if peek:
                return log.log_start_offset
            self.forget(key)
        offset = self.checkpoints.get(key, log.log_start_offset)
        if peek:
            truncated = log.lowest_truncation
        else:
            self._owners[key] = log
            truncated = log.take_lowest_truncation()
        if truncated is not None and truncated < offset:
            offset = truncated
            if not peek:
                self.checkpoints[key] = offset
        if offset < log.log_start_offset or offset > log.log_end_offset:
            offset = log.log_start_offset
        return offset

    # -- what is due -------------------------------------------------------------------------

    @staticmethod
    def first_uncleanable_offset(log: Log, high_watermark: int, now_ms: int) -> int:
        """Offsets from here on stay as they are: the end of the last whole inactive segment below the
        active segment, the high watermark and the segments younger than min.compaction.lag.ms."""
        limit = min(log.active_segment.base_offset, high_watermark)
        lag = log.config.min_compaction_lag_ms
        end = log.segments[0].base_offset
        for segment in log.segments[:-1]:
            if segment.next_offset > limit or (lag > 0 and segment.max_timestamp > now_ms - lag):
                break
            end = segment.next_offset
        return end

    def dirty_state(self, key: TopicPartition, log: Log, high_watermark: int, now_ms: int,
                    peek: bool = False) -> tuple[int, int, float, int]:
        """``(first dirty offset, first uncleanable offset, dirty ratio, dirty bytes)``."""
        first_dirty = self.first_dirty_offset(key, log, peek=peek)
        end = self.first_uncleanable_offset(log, high_watermark, now_ms)
        clean = dirty = 0
        for segment in log.segments[:-1]:
            if segment.next_offset > end:
                break
            if segment.next_offset <= first_dirty:
                clean += segment.size
            else:
                dirty += segment.size
        ratio = dirty / (clean + dirty) if clean + dirty else 0.0
        return first_dirty, end, ratio, dirty

    def _grab_filthiest(self, now_ms: int, high_watermark_of: Callable[[TopicPartition], int | None]
                        ) -> tuple[float, TopicPartition, Log, int, int] | None:
        best: tuple[float, TopicPartition, Log, int, int] | None = None
        for key, log in self.logs.logs.items():
            if not log.config.compacts or log.closed:
                continue
            hw = high_watermark_of(key)
            if hw is None:
                continue
            first_dirty, end, ratio, dirty = self.dirty_state(key, log, hw, now_ms)
            if end <= log.segments[0].base_offset:
                continue
            config = log.config
            due = dirty > 0 and ratio >= config.min_cleanable_ratio
            if not due and dirty > 0 and config.max_compaction_lag_ms < now_ms:
                oldest = next((s for s in log.segments if s.next_offset > first_dirty), None)
                started = oldest.rolling_base_ms if oldest is not None else None
                due = started is not None and now_ms - started > config.max_compaction_lag_ms
            tombstones = self.tombstones_due_ms.get(key)
            if not due and tombstones is not None and tombstones <= now_ms:
                due = True
            if due and (best is None or ratio > best[0]):
                best = (ratio, key, log, first_dirty, end)
        return best

    # -- running -----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._job is not None

    def next_deadline_ms(self) -> int | None:
        if not self.enabled:
            return None
        return self._next_ms

    def tick(self, now_ms: int, high_watermark_of: Callable[[TopicPartition], int | None]) -> list[str]:
        """Run one slice of the current pass, or start the next pass when one is due; returns
        lines for the broker's log."""
        self._now_ms = now_ms
        if not self.enabled or now_ms < self._next_ms:
            return []
        if self._job is None:
            picked = self._grab_filthiest(now_ms, high_watermark_of)
            if picked is None:
                self._next_ms = now_ms + self.backoff_ms
                return []
            _, self._key, log, first_dirty, end = picked
            self._cleaning = Cleaning(log, first_dirty, end, now_ms, self.map_capacity)
            self._job = self._cleaning.run()
            self._started_ms = now_ms
        done = 0
        try:
            while done < SLICE_WORK:
                done += next(self._job)
        except StopIteration:
            return self._finish(now_ms)
        except CleaningAborted as exc:
            return self._stop(now_ms, f"Log cleaning aborted: {exc}; it starts again later")
        self._next_ms = now_ms + max(1, round(done / WORK_PER_MS * (1 / DUTY - 1)))
        assert self._cleaning is not None                   # set and cleared with self._job
        if self.io_max_bytes_per_second < 1e300:           # Kafka's default, Double.MaxValue: no limit
            read = self._cleaning.stats.bytes_read
            self._next_ms = max(self._next_ms, self._started_ms + int(read * 1000 / self.io_max_bytes_per_second))
        return []

    def io_totals(self) -> tuple[int, int]:
        """Bytes read and bytes written so far, the pass under way included."""
        read, written = self.totals.bytes_read, self.totals.bytes_written
        if self._cleaning is not None:
            read += self._cleaning.stats.bytes_read
            written += self._cleaning.stats.bytes_written
        return read, written

    def _stop(self, now_ms: int, line: str) -> list[str]:
        if self._cleaning is not None:
            self._cleaning.abort()
            self.totals.bytes_read += self._cleaning.stats.bytes_read       # read all the same
            self.totals.bytes_written += self._cleaning.stats.bytes_written
        self.aborted += 1
        self._job = self._cleaning = self._key = None
        self._next_ms = now_ms + 1
        return [line]

    def _finish(self, now_ms: int) -> list[str]:
        cleaning, key = self._cleaning, self._key
        assert cleaning is not None and key is not None
        self._job = self._cleaning = self._key = None
        self._next_ms = now_ms + 1          # another log may be due at once
        self.checkpoints[key] = cleaning.end
        if cleaning.tombstone_due_ms is not None:
            self.tombstones_due_ms[key] = cleaning.tombstone_due_ms
        else:
            self.tombstones_due_ms.pop(key, None)
        log_dir = self.logs.dir_of.get(key)
        if log_dir is not None:
            self._write_checkpoint(log_dir)
        stats = cleaning.stats
        self.passes += 1
        for name, value in asdict(stats).items():
            if name != "map_entries":
                setattr(self.totals, name, getattr(self.totals, name) + value)
        self.last_pass[key] = {**asdict(stats), "first_dirty_offset": cleaning.first_dirty,
                               "end_offset": cleaning.end, "at_ms": now_ms}
        mb = 1024 * 1024
        return [f"Cleaned log {key[0]}-{key[1]} offsets [{cleaning.first_dirty}, {cleaning.end}) in "
                f"{now_ms - self._started_ms} ms: read {stats.bytes_read / mb:.1f} MB, wrote "
                f"{stats.bytes_written / mb:.1f} MB, removed {stats.records_removed} of {stats.records_read} records "
                f"({stats.tombstones_removed} tombstones), {stats.map_entries} keys in the offset map"]

    def forget(self, key: TopicPartition) -> None:
        """A deleted log: its checkpoint entry goes with the next write."""
        self.checkpoints.pop(key, None)
        self.tombstones_due_ms.pop(key, None)
        self.last_pass.pop(key, None)

    def log_state(self, key: TopicPartition, log: Log, high_watermark: int) -> dict[str, Any]:
        """The cleaner's view of one compacted log, for status and tools (it changes nothing)."""
        first_dirty, end, ratio, dirty = self.dirty_state(key, log, high_watermark, self._now_ms, peek=True)
        state: dict[str, Any] = {"last_cleaned_offset": first_dirty, "first_uncleanable_offset": end,
                 "dirty_ratio": round(ratio, 4), "dirty_bytes": dirty,
                 "cleaning": self._key == key}
        last = self.last_pass.get(key)
        if last is not None:
            state["last_pass"] = last
        return state
