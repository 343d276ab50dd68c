"""The requests about partitions' logs other than Produce and Fetch, each answered by this broker
for its own replicas: ListOffsets, OffsetForLeaderEpoch, DeleteRecords, DescribeLogDirs,
AlterReplicaLogDirs and DescribeProducers (Kafka's KafkaApis handles them beside Produce and Fetch).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.security.authorizer import AclAuthorizer
from strandline.core.wire import Handler, duration_ms, response
from strandline.coordination.metadata import MetadataCache
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.protocol.records import UndecodableRecordsError
from strandline.replication.replica_manager import ReplicaManager
from strandline.security.acl import AclOperation
from strandline.core.effects import Effect

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4            # KIP-405: without tiered storage, the log start offset
LATEST_TIERED_TIMESTAMP = -5             # KIP-1005 and KIP-1023 (-6): nothing is tiered, so no offset
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
CONSUMER_REPLICA_ID = -1
#: ListOffsets from a debugging tool: any replica answers, leader or follower (Kafka's
#: ``ListOffsetsRequest.DEBUGGING_REPLICA_ID``); LATEST is that replica's log end offset.
DEBUGGING_REPLICA_ID = -2


class LogApis:
    def __init__(self, metadata: MetadataCache, replicas: ReplicaManager, authorizer: AclAuthorizer) -> None:
        self.metadata = metadata
        self.replicas = replicas
        self.authorizer = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._offset_for_leader_epoch,
            ApiKey.DELETE_RECORDS: self._delete_records,
            ApiKey.DESCRIBE_LOG_DIRS: self._describe_log_dirs,
            ApiKey.DESCRIBE_PRODUCERS: self._describe_producers,
            ApiKey.ALTER_REPLICA_LOG_DIRS: self._alter_replica_log_dirs,
        }

    # -- DeleteRecords, DescribeLogDirs, DescribeProducers (each broker for its own replicas)

    def _delete_records(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        wanted = list({(t.name, p.partition_index): (t.name, p.partition_index, p.offset)
                       for t in request.topics for p in t.partitions}.values())
        denied = {name for name, _, _ in wanted if not self.authorizer.allows_topic(conn_id, AclOperation.DELETE, name)}

        def respond(results: dict[tuple[str, int], tuple[ErrorCode, int]]) -> list[Effect]:
            topics: dict[str, list[dict[str, Any]]] = {}
            for name, index, _ in wanted:
                code, low = (ErrorCode.topic_authorization_failed, -1) if name in denied else results[(name, index)]
                topics.setdefault(name, []).append({"partition_index": index, "low_watermark": low,
                                                    "error_code": code})
            return [response(conn_id, header, {"throttle_time": 0, "topics": [
                {"name": n, "partitions": ps} for n, ps in topics.items()]})]

        return self.replicas.log_admin.delete_records(conn_id, [w for w in wanted if w[0] not in denied],
                                                      duration_ms(request.timeout), respond, now_ms)

    def _describe_log_dirs(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        wanted = None if request.topics is None else \
            {t.topic: list(t.partitions) for t in request.topics}
        if not self.authorizer.allows_cluster(conn_id, AclOperation.DESCRIBE):
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                               "results": []})]
        return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none,
                                           "results": self.replicas.log_admin.describe_log_dirs(wanted)})]

    def _describe_producers(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        topics = []
        for t in request.topics:
            parts = []
            for index in t.partition_indexes:
                topic = self.metadata.topics.get(t.name)
                partition = self.replicas.partitions.get((t.name, index))
                entry = {"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
                         "active_producers": []}
                if not self.authorizer.allows_topic(conn_id, AclOperation.READ, t.name):
                    entry["error_code"] = ErrorCode.topic_authorization_failed
                elif topic is None or index not in topic.assignment:
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                elif partition is None:      # any replica answers from its own log, as Kafka's does
                    entry["error_code"] = ErrorCode.not_leader_or_follower
                else:
                    entry["active_producers"] = [
                        {"producer_id": pid, "producer_epoch": p.epoch, "last_sequence": p.last_seq,
                         "last_timestamp": p.batches[-1].timestamp if p.batches else -1,
                         "coordinator_epoch": p.coordinator_epoch,
                         "current_txn_start_offset": p.current_txn_first_offset}
                        for pid, p in sorted(partition.producer_state.producers.items())]
                parts.append(entry)
            topics.append({"name": t.name, "partitions": parts})
        return [response(conn_id, header, {"throttle_time": 0, "topics": topics})]

    def _alter_replica_log_dirs(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        results: dict[str, list[dict[str, Any]]] = {}
        allowed = self.authorizer.allows_cluster(conn_id, AclOperation.ALTER)
        for d in request.dirs:
            for t in d.topics:
                for index in t.partitions:
                    code = self.replicas.log_admin.check_log_dir_move(t.name, index, d.path) if allowed \
                        else ErrorCode.cluster_authorization_failed
                    results.setdefault(t.name, []).append({"partition_index": index, "error_code": code})
        return [response(conn_id, header, {"throttle_time": 0, "results": [
            {"topic_name": n, "partitions": ps} for n, ps in results.items()]})]

    # -- ListOffsets

    def _list_offsets(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        replica_id = request.replica_id
        if header.api_version == 0:
            return self._list_offsets_v0(conn_id, header, request, now_ms)
        named = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                if replica_id == DEBUGGING_REPLICA_ID:
                    partition = self.replicas.partitions.get((t.name, p.partition_index))
                    error = self.replicas.not_served(t.name, p.partition_index) if partition is None else None
                else:
                    partition, error = self.replicas.leader_partition(t.name, p.partition_index)
                entry = {"partition_index": p.partition_index, "error_code": ErrorCode.none,
                         "timestamp": -1, "offset": -1, "leader_epoch": -1}
                if not self.authorizer.allows_topic(conn_id, AclOperation.DESCRIBE, t.name):
                    entry["error_code"] = ErrorCode.topic_authorization_failed
                    parts.append(entry)
                    continue
                if named[(t.name, p.partition_index)] > 1:    # as Kafka 2.8: each is answered once
                    entry["error_code"] = ErrorCode.invalid_request
                    parts.append(entry)
                    continue
                if partition is None:
                    entry["error_code"] = error
                    parts.append(entry)
                    continue
                error = partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                if error is not ErrorCode.none:
                    entry["error_code"] = error
                    parts.append(entry)
                    continue
                log = partition.log
                limit = partition.high_watermark if replica_id == CONSUMER_REPLICA_ID else log.log_end_offset
                if replica_id == CONSUMER_REPLICA_ID and getattr(request, "isolation_level", 0) == 1:
                    limit = partition.last_stable_offset()      # read_committed: decided transactions only
                ts = p.timestamp
                if ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                    entry["offset"] = log.log_start_offset
                elif ts in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
                    pass
                elif ts == LATEST_TIMESTAMP:
                    entry["offset"] = limit
                else:
                    try:
                        found = (log.find_max_timestamp(limit) if ts == MAX_TIMESTAMP
                                 else log.find_offset_by_timestamp(ts))
                    except UndecodableRecordsError:
                        entry["error_code"] = ErrorCode.corrupt_message
                        parts.append(entry)
                        continue
                    if found is not None and found[0] < limit:
                        entry["offset"], entry["timestamp"] = found
                if entry["offset"] >= 0:
                    # Kafka: the current epoch for LATEST, else the epoch of the batch found
                    entry["leader_epoch"] = (partition.leader_epoch if ts == LATEST_TIMESTAMP
                                             else log.leader_epoch_cache.epoch_for_offset(entry["offset"]))
                parts.append(entry)
            topics.append({"name": t.name, "partitions": parts})
        return [response(conn_id, header, {"throttle_time": 0, "topics": topics})]

    def _list_offsets_v0(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        """ListOffsets v0: up to ``max_num_offsets`` offsets at or before ``timestamp``, newest
        first (``old_style_offsets``), as Kafka 2.8's ``handleListOffsetRequestV0``: the start of
        each segment (not below the log start offset) and, after a non-empty last segment, the log
        end offset stamped now; LATEST (-1) starts from the last of them, EARLIEST (-2) from the
        first, a time from the last whose segment was last written at or before it. Kafka dates a
        segment by its file's modification time; here it is the segment's largest record
        timestamp (its creation time while it holds none). Offsets above the high watermark are
        replaced by the high watermark, except for a debugging tool's request (replica -2)."""
        replica_id = request.replica_id
        topics = []
        for t in request.topics:
            parts = []
            allowed = self.authorizer.allows_topic(conn_id, AclOperation.DESCRIBE, t.name)
            for p in t.partitions:
                entry = {"partition_index": p.partition_index, "error_code": ErrorCode.none, "old_style_offsets": []}
                parts.append(entry)
                if not allowed:
                    entry["error_code"] = ErrorCode.topic_authorization_failed
                    continue
                if replica_id == CONSUMER_REPLICA_ID:
                    partition, error = self.replicas.leader_partition(t.name, p.partition_index)
                else:
                    partition = self.replicas.partitions.get((t.name, p.partition_index))
                    error = ErrorCode.none if partition is not None else self.replicas.not_served(t.name,
                                                                                                  p.partition_index)
                if partition is None:
                    entry["error_code"] = error
                    continue
                offsets = legacy_offsets_before(partition.log, p.timestamp, p.max_num_offsets, now_ms)
                if replica_id != DEBUGGING_REPLICA_ID:
                    hw = partition.high_watermark
                    if any(o > hw for o in offsets):
                        offsets = [hw] + [o for o in offsets if o <= hw]
                entry["old_style_offsets"] = offsets
            topics.append({"name": t.name, "partitions": parts})
        return [response(conn_id, header, {"topics": topics})]

    # -- OffsetForLeaderEpoch

    def _offset_for_leader_epoch(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        topics = []
        # Kafka's rule: CLUSTER_ACTION on the cluster (a follower), else DESCRIBE on the topic
        cluster_action = self.authorizer.allows_cluster(conn_id, AclOperation.CLUSTER_ACTION)
        for t in request.topics:
            parts = []
            allowed = cluster_action or self.authorizer.allows_topic(conn_id, AclOperation.DESCRIBE, t.topic)
            for p in t.partitions:
                partition, error = self.replicas.leader_partition(t.topic, p.partition)
                entry = {"error_code": ErrorCode.none, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
                if not allowed:
                    entry["error_code"] = ErrorCode.topic_authorization_failed
                elif partition is None:
                    entry["error_code"] = error
                else:
                    error = partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    if error is not ErrorCode.none:
                        entry["error_code"] = error
                    else:
                        epoch, end = partition.log.leader_epoch_cache.end_offset_for(
                            p.leader_epoch, partition.log.log_end_offset)
                        entry["leader_epoch"], entry["end_offset"] = epoch, end
                parts.append(entry)
            topics.append({"topic": t.topic, "partitions": parts})
        return [response(conn_id, header, {"throttle_time": 0, "topics": topics})]


def legacy_offsets_before(log: Any, timestamp: int, max_num_offsets: int, now_ms: int) -> list[int]:
    """Kafka 2.8's ``Log.legacyFetchOffsetsBefore`` (ListOffsets v0), newest offset first."""
    segments = list(log.segments)
    marks = [(max(s.base_offset, log.log_start_offset), s.max_timestamp if s.max_timestamp >= 0 else s.created_ms)
             for s in segments]
    if segments and segments[-1].size > 0:
        marks.append((log.log_end_offset, now_ms))
    if timestamp == LATEST_TIMESTAMP:
        start = len(marks) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:
        start = len(marks) - 1
        while start >= 0 and marks[start][1] > timestamp:
            start -= 1
    count = max(0, min(max_num_offsets, start + 1))
    return sorted((marks[start - j][0] for j in range(count)), reverse=True)
