"""``Log``: the segmented log of one partition (``<log dir>/<topic>-<partition>/``)."""

from __future__ import annotations

import os.path
from typing import Iterator, NamedTuple

from strandline.log.config import LogConfig
from strandline.log.disk import Disk
from strandline.log.epoch import LeaderEpochCache
from strandline.log.segment import LogSegment
from strandline.protocol.records import BatchHeader, iter_batches, stamp

INT32_MAX = 2147483647


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_batches: int
    valid_bytes: int


class Log:
    def __init__(self, disk: Disk, directory: str, topic: str, partition: int, config: LogConfig) -> None:
        self.disk = disk
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[LogSegment] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.leader_epoch_cache = LeaderEpochCache(disk, directory)
        self.unflushed_messages = 0
        self.last_flush_ms = 0
        self.recovery_stats = {"segments_recovered": 0, "batches_scanned": 0, "bytes_truncated": 0}

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(cls, disk: Disk, directory: str, topic: str, partition: int, config: LogConfig, *,
             recovery_point: int = 0, log_start_offset: int = 0, needs_recovery: bool = True,
             now_ms: int = 0) -> "Log":
        disk.makedirs(directory)
        log = cls(disk, directory, topic, partition, config)
        log.last_flush_ms = now_ms
        bases = []
        for name in disk.listdir(directory):
            if name.endswith(".tmp"):
                disk.remove(os.path.join(directory, name))
            elif name.endswith(".log") and name[:-4].isdigit():
                bases.append(int(name[:-4]))
        for base in sorted(bases):
            log.segments.append(LogSegment(disk, directory, base, config.index_interval_bytes))
        # index files whose log file is gone
        for name in disk.listdir(directory):
            stem, _, ext = name.partition(".")
            if ext in ("index", "timeindex") and stem.isdigit() and int(stem) not in bases:
                disk.remove(os.path.join(directory, name))
        stats = log.recovery_stats
        corrupt_from = None
        for i, segment in enumerate(log.segments):
            must_scan = needs_recovery and (i == len(log.segments) - 1
                                            or log.segments[i + 1].base_offset > recovery_point)
            if not must_scan and segment.load():
                continue
            scanned, truncated, _ = segment.recover(config.max_message_bytes)
            stats["segments_recovered"] += 1
            stats["batches_scanned"] += scanned
            stats["bytes_truncated"] += truncated
            if truncated:
                corrupt_from = i + 1
                break
        if corrupt_from is not None:
            for segment in log.segments[corrupt_from:]:
                stats["bytes_truncated"] += segment.size
                segment.delete()
            del log.segments[corrupt_from:]
        # drop empty trailing segments except the first one, keeping offsets contiguous
        while len(log.segments) > 1 and log.segments[-1].size == 0 and \
                log.segments[-1].base_offset > log.segments[-2].next_offset:
            log.segments.pop().delete()
        if not log.segments:
            log.segments.append(LogSegment(disk, directory, log_start_offset, config.index_interval_bytes))
        log.log_start_offset = max(log_start_offset, log.segments[0].base_offset)
        log.recovery_point = min(max(recovery_point, log.log_start_offset), log.log_end_offset) \
            if not needs_recovery else log.log_end_offset
        log.leader_epoch_cache.truncate_from_end(log.log_end_offset)
        log.leader_epoch_cache.truncate_from_start(log.log_start_offset)
        return log

    # -- state -----------------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    # -- appends ---------------------------------------------------------------------------------

    def _maybe_roll(self, incoming_bytes: int, incoming_last_offset: int, max_timestamp: int, now_ms: int) -> None:
        seg = self.active_segment
        if seg.size == 0:
            return
        first_ts = seg.first_batch_timestamp if seg.first_batch_timestamp is not None else seg.created_ms
        too_old = first_ts is not None and max_timestamp - first_ts > self.config.segment_ms \
            if seg.first_batch_timestamp is not None else \
            (seg.created_ms is not None and now_ms - seg.created_ms > self.config.segment_ms)
        index_full = seg.index.entries * 8 >= self.config.segment_index_bytes
        if (seg.size + incoming_bytes > self.config.segment_bytes or too_old or index_full
                or incoming_last_offset - seg.base_offset > INT32_MAX):
            self.roll(now_ms)

    def maybe_roll_by_time(self, now_ms: int) -> bool:
        seg = self.active_segment
        if seg.size and seg.created_ms is not None and now_ms - seg.created_ms > self.config.segment_ms:
            self.roll(now_ms)
            return True
        return False

    def roll(self, now_ms: int) -> LogSegment:
        base = self.log_end_offset
        if self.active_segment.size == 0:
            return self.active_segment
        self.active_segment.flush()
        segment = LogSegment(self.disk, self.dir, base, self.config.index_interval_bytes)
        segment.created_ms = now_ms
        self.segments.append(segment)
        return segment

    def _append(self, records, headers: list[BatchHeader], now_ms: int) -> AppendInfo:
        size = len(records)
        first, last = headers[0].base_offset, headers[-1].last_offset
        max_ts, max_ts_offset = -1, -1
        for h in headers:
            if h.max_timestamp > max_ts:
                max_ts, max_ts_offset = h.max_timestamp, h.last_offset
        self._maybe_roll(size, last, max_ts, now_ms)
        self.active_segment.append(records, headers, now_ms)
        for h in headers:
            if h.partition_leader_epoch >= 0 and h.partition_leader_epoch != self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
        self.unflushed_messages += sum(h.records_count for h in headers)
        return AppendInfo(first, last, max_ts, max_ts_offset, len(headers), size)

    def append_as_leader(self, records: bytearray, leader_epoch: int, now_ms: int) -> AppendInfo:
        """Assign offsets from LEO and stamp the leader epoch into ``records`` (in place), then append."""
        offset = self.log_end_offset
        headers = []
        for pos, header in iter_batches(records):
            stamp(records, pos, offset, leader_epoch)
            headers.append(header._replace(base_offset=offset, partition_leader_epoch=leader_epoch))
            offset += header.last_offset_delta + 1
        if not headers:
            raise ValueError("append_as_leader needs at least one complete batch")
        return self._append(records, headers, now_ms)

    def append_as_follower(self, records, now_ms: int = 0) -> AppendInfo:
        headers = [h for _, h in iter_batches(records)]
        if not headers:
            raise ValueError("append_as_follower needs at least one complete batch")
        if headers[0].base_offset < self.log_end_offset:
            raise ValueError(f"follower append at {headers[0].base_offset} below LEO {self.log_end_offset}")
        return self._append(records, headers, now_ms)

    # -- reads -----------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True) -> bytes:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise ValueError(f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]")
        i = self._segment_index(offset)
        out: list[bytes] = []
        total = 0
        while i < len(self.segments):
            segment = self.segments[i]
            data, reached_end = segment.read(offset, max_bytes - total, max_offset, min_one_batch and total == 0)
            if data:
                out.append(data)
                total += len(data)
            if not reached_end or total >= max_bytes:
                break
            if max_offset is not None and segment.next_offset >= max_offset:
                break
            i += 1
            if i < len(self.segments):
                offset = self.segments[i].base_offset
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def iter_batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        i = self._segment_index(max(from_offset, self.log_start_offset))
        for segment in self.segments[i:]:
            pos = segment.translate_offset(from_offset) if segment is self.segments[i] else 0
            if pos is None:
                continue
            for _, header in segment._headers_from(pos):
                yield header

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        for segment in self.segments:
            found = segment.find_offset_by_timestamp(timestamp)
            if found is not None:
                return max(found[0], self.log_start_offset), found[1]
        return None

    # -- truncation, flushing, retention -------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        if offset >= self.log_end_offset:
            return False
        if offset <= self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
        self.active_segment.truncate_to(offset)
        self.leader_epoch_cache.truncate_from_end(offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        for segment in self.segments:
            segment.delete()
        self.segments = [LogSegment(self.disk, self.dir, offset, self.config.index_interval_bytes)]
        self.log_start_offset = offset
        self.recovery_point = offset
        self.leader_epoch_cache.truncate_from_end(offset)
        self.leader_epoch_cache.truncate_from_start(offset)

    def flush(self) -> None:
        for segment in self.segments:
            segment.flush()
        self.recovery_point = self.log_end_offset
        self.unflushed_messages = 0

    def maybe_flush(self, now_ms: int) -> bool:
        if self.unflushed_messages and (self.unflushed_messages >= self.config.flush_messages
                                        or now_ms - self.last_flush_ms >= self.config.flush_ms):
            self.flush()
            self.last_flush_ms = now_ms
            return True
        return False

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention by time and by size; never the active segment. Moves the log start offset."""
        deleted = 0
        cfg = self.config
        total = self.size_in_bytes
        while len(self.segments) > 1:
            seg = self.segments[0]
            expired = cfg.retention_ms >= 0 and seg.max_timestamp >= 0 and now_ms - seg.max_timestamp > cfg.retention_ms
            oversize = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
            if not (expired or oversize):
                break
            total -= seg.size
            self.segments.pop(0).delete()
            deleted += 1
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        return deleted

    def close(self) -> None:
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        self.close()
        self.disk.rmtree(self.dir)
