"""``LogAdmin``: the admin operations on this broker's logs (Kafka keeps them in its
ReplicaManager): DeleteRecords with its purgatory (an answer waits until every live replica has
moved its log start offset), DescribeLogDirs, the AlterReplicaLogDirs check, and reading a whole
replica (what a coordinator loads its state from). Pure: it returns effects; time comes in as
``now_ms``."""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.coordination.metadata import MetadataCache
from strandline.log.disk import FileRegion
from strandline.log.manager import LogManager
from strandline.replication.partition import Partition
from strandline.replication.purgatory import DelayedCall, Purgatory


class LogAdmin:
    def __init__(self, partitions: dict[tuple[str, int], Partition], logs: LogManager,
                 metadata: MetadataCache, start_moved: Callable[[], None] = lambda: None) -> None:
        self.partitions = partitions     # the ReplicaManager's, shared
        self.logs = logs
        self.metadata = metadata
        self.start_moved = start_moved   # told when a leader's log start offset moved
        self.purgatory = Purgatory()     # DeleteRecords waiting on followers' log start offsets

    def read_log(self, topic: str, index: int) -> bytes:
        """Every record batch of this broker's replica of a partition (empty if it has none)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.log.log_end_offset:
            return b""
        log = partition.log
        data = log.read(log.log_start_offset, 1 << 40, max_offset=log.log_end_offset)
        assert not isinstance(data, FileRegion)     # only a read with regions=True gives one
        return data

    def delete_records(self, conn_id: int, wanted: list[tuple[str, int, int]], timeout_ms: int,
                       respond: Callable[[dict[tuple[str, int], tuple[ErrorCode, int]]], list[Effect]],
                       now_ms: int) -> list[Effect]:
        """DeleteRecords (Kafka's ReplicaManager.deleteRecords): on each partition this broker
        leads, move the log start offset up to the offset asked (-1: the high watermark; beyond it
        OFFSET_OUT_OF_RANGE; POLICY_VIOLATION without ``delete`` in its cleanup.policy), then wait until every live replica has moved its own (followers learn
        it from their fetches) or ``timeout_ms`` passes (REQUEST_TIMED_OUT). ``respond`` gets
        (error, low watermark) per partition."""
        results: dict[tuple[str, int], tuple[ErrorCode, int]] = {}
        targets: dict[tuple[str, int], int] = {}
        for name, index, offset in wanted:
            key = (name, index)
            topic = self.metadata.topics.get(name)
            partition = self.partitions.get(key)
            if topic is None or index not in topic.assignment:
                results[key] = (ErrorCode.unknown_topic_or_partition, -1)
            elif partition is None or not partition.is_leader:
                results[key] = (ErrorCode.not_leader_or_follower, -1)
            elif not partition.log.config.deletes:
                results[key] = (ErrorCode.policy_violation, -1)     # a compacted topic's (Kafka's rule)
            else:
                target = partition.high_watermark if offset == -1 else offset
                if target < 0 or target > partition.high_watermark:
                    results[key] = (ErrorCode.offset_out_of_range, -1)
                    continue
                partition.log.maybe_increment_log_start_offset(target)
                self.start_moved()
                targets[key] = target

        def try_complete(at_ms: int, expired: bool) -> list[Effect] | None:
            alive = set(self.metadata.brokers)
            for key, target in targets.items():
                if key in results:
                    continue
                partition = self.partitions.get(key)
                if partition is None or not partition.is_leader:
                    results[key] = (ErrorCode.not_leader_or_follower, -1)
                elif (low := partition.low_watermark(alive)) >= target:
                    results[key] = (ErrorCode.none, low)
                elif expired:
                    results[key] = (ErrorCode.request_timed_out, low)
            if len(results) < len(set(k for k in ((n, i) for n, i, _ in wanted))):
                return None
            return respond(results)

        done = try_complete(now_ms, False)
        if done is not None:
            return done
        self.purgatory.watch(DelayedCall(conn_id, now_ms + max(timeout_ms, 0), tuple(targets),
                                                             try_complete))
        return []

    def check_log_dir_move(self, name: str, index: int, path: str) -> ErrorCode:
        """AlterReplicaLogDirs for one replica: staying in its log dir is a no-op; a dir this
        broker does not have is LOG_DIR_NOT_FOUND; moving a replica to another of its log dirs is
        not done (KAFKA_STORAGE_ERROR, and nothing changes)."""
        if path not in self.logs.log_dirs:
            return ErrorCode.log_dir_not_found
        current = self.logs.dir_of.get((name, index))
        if current is None:
            return ErrorCode.replica_not_available
        return ErrorCode.none if current == path else ErrorCode.kafka_storage_error

    def describe_log_dirs(self, wanted: dict[str, list[int]] | None) -> list[dict[str, Any]]:
        """DescribeLogDirs: per log dir, the size of each replica's log and its offset lag (how far
        its log end offset is below the high watermark; Kafka's, for a current replica)."""
        per_dir: dict[str, dict[str, list[dict[str, Any]]]] = {d: {} for d in self.logs.log_dirs}
        for (name, index), log in sorted(self.logs.logs.items()):
            if wanted is not None and index not in wanted.get(name, ()):
                continue
            partition = self.partitions.get((name, index))
            hw = partition.high_watermark if partition is not None else log.log_end_offset
            per_dir.setdefault(self.logs.dir_of[(name, index)], {}).setdefault(name, []).append(
                {"partition_index": index, "partition_size": log.size_in_bytes,
                 "offset_lag": max(hw - log.log_end_offset, 0), "is_future_key": False})
        return [{"error_code": ErrorCode.none, "log_dir": d, "total_bytes": -1, "usable_bytes": -1,
                 "topics": [{"name": n, "partitions": ps} for n, ps in sorted(topics.items())]}
                for d, topics in per_dir.items()]

    # ------------------------------------------------------------------ purgatory upkeep

    def followers_fetched(self, keys: list[tuple[str, int]], now_ms: int) -> list[Effect]:
        """Followers fetched these partitions (their log start offsets may have moved)."""
        return self.purgatory.check_keys(keys, now_ms) if len(self.purgatory) else []

    def next_deadline(self) -> int | None:
        return self.purgatory.next_deadline()

    def expire(self, now_ms: int) -> list[Effect]:
        return self.purgatory.expire(now_ms)

    def connection_closed(self, conn_id: int) -> None:
        self.purgatory.cancel_connection(conn_id)
