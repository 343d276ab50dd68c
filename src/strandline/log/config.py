"""Per-log settings (topic configs over the broker's ``log.*`` defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824          # log.segment.bytes / topic segment.bytes
    segment_ms: int = 604800000              # log.roll.ms / segment.ms
    segment_index_bytes: int = 10485760      # log.index.size.max.bytes / segment.index.bytes
    index_interval_bytes: int = 4096         # log.index.interval.bytes / index.interval.bytes
    retention_ms: int = 604800000            # log.retention.ms / retention.ms  (-1 = unlimited)
    retention_bytes: int = -1                # log.retention.bytes / retention.bytes (-1 = unlimited)
    max_message_bytes: int = 1048588         # message.max.bytes / max.message.bytes
    flush_messages: int = 9223372036854775807  # log.flush.interval.messages / flush.messages
    flush_ms: int = 9223372036854775807        # log.flush.interval.ms / flush.ms
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = 9223372036854775807  # log.message.timestamp.difference.max.ms
    cleanup_policy: tuple[str, ...] = ("delete",)  # log.cleanup.policy / cleanup.policy
    min_cleanable_ratio: float = 0.5         # log.cleaner.min.cleanable.ratio / min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0           # log.cleaner.min.compaction.lag.ms / min.compaction.lag.ms
    max_compaction_lag_ms: int = 9223372036854775807  # log.cleaner.max.compaction.lag.ms / max.compaction.lag.ms
    delete_retention_ms: int = 86400000      # log.cleaner.delete.retention.ms / delete.retention.ms
    producer_id_expiration_ms: int = 86400000  # producer.id.expiration.ms (broker only)

    @property
    def deletes(self) -> bool:
        """Whether retention deletes old segments (``delete`` in the cleanup policy)."""
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        """Whether the log cleaner compacts this log (``compact`` in the cleanup policy)."""
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How long the active segment may stay open: ``segment.ms``, and for a compacted log at most
        ``max.compaction.lag.ms`` so that the cleaner can reach every record in time (KIP-354)."""
        if self.compacts:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms
