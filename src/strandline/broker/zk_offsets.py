"""OffsetCommit v0 and OffsetFetch v0: a group's offsets kept in ZooKeeper, as Kafka 2.8 keeps them.

Kafka 2.8's ``KafkaApis`` stores the offsets of an OffsetCommit v0 in
``/consumers/<group>/offsets/<topic>/<partition>`` (``zkClient.setOrCreateConsumerOffset``: the
offset in decimal, without metadata) and answers OffsetFetch v0 from there
(``zkClient.getConsumerOffset``), on any broker, without the group coordinator; v1+ go to the
coordinator and ``__consumer_offsets``. The two stores are apart: an offset committed with v0 is
not seen by v1+, nor the other way round.

Errors as Kafka answers them: a group the client may not READ (commit) or DESCRIBE (fetch) is
GROUP_AUTHORIZATION_FAILED, a topic TOPIC_AUTHORIZATION_FAILED, a partition the cluster does not
have UNKNOWN_TOPIC_OR_PARTITION, and so is (with offset -1) a partition without an offset in
ZooKeeper (Kafka's ``OffsetFetchResponse.UNKNOWN_PARTITION``), metadata longer than
``offset.metadata.max.bytes`` OFFSET_METADATA_TOO_LARGE, and a ZooKeeper failure (or a group name
ZooKeeper refuses in a path) UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.coordination.metadata import MetadataCache
from strandline.coordination.store import Create, GetData, Op, OpResult, SetData, ZkError
from strandline.coordination.znodes import ConsumerOffsetZNode
from strandline.core.outbox import Outbox
from strandline.core.wire import response
from strandline.protocol.header import RequestHeader
from strandline.security.acl import AclOperation, ResourceType
from strandline.security.authorizer import AclAuthorizer
from strandline.core.effects import Effect
from strandline.core.config import BrokerConfig


def zk_path_ok(path: str) -> bool:
    """ZooKeeper's ``PathUtils.validatePath``: absolute, no empty, ``.`` or ``..`` node names, no
    trailing slash, none of the characters it refuses."""
    if not path.startswith("/") or path.endswith("/"):
        return False
    for name in path[1:].split("/"):
        if name in ("", ".", ".."):
            return False
        for ch in name:
            c = ord(ch)
            if c == 0 or 0x01 <= c <= 0x1F or 0x7F <= c <= 0x9F or 0xD800 <= c <= 0xF8FF or 0xFFF0 <= c <= 0xFFFF:
                return False
    return True


class ZkOffsets:
    def __init__(self, config: BrokerConfig, metadata: MetadataCache, outbox: Outbox, authorizer: AclAuthorizer) -> None:
        self.config = config
        self.metadata = metadata
        self.outbox = outbox
        self.authorizer = authorizer

    def _known(self, topic: str, partition: int) -> bool:
        t = self.metadata.topics.get(topic)
        return t is not None and partition in t.assignment

    # -- OffsetCommit v0

    def commit(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        group = request.group_id
        results: dict[tuple[str, int], ErrorCode] = {}
        writes: dict[tuple[str, int], tuple[str, bytes]] = {}
        group_allowed = self.authorizer.allows(conn_id, AclOperation.READ, ResourceType.GROUP, group)
        limit = self.config["offset.metadata.max.bytes"]
        for t in request.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                path = ConsumerOffsetZNode.path(group, t.name, p.partition_index)
                if not group_allowed:
                    results[tp] = ErrorCode.group_authorization_failed
                elif not self.authorizer.allows_topic(conn_id, AclOperation.READ, t.name):
                    results[tp] = ErrorCode.topic_authorization_failed
                elif not self._known(*tp):
                    results[tp] = ErrorCode.unknown_topic_or_partition
                elif p.committed_metadata is not None and len(p.committed_metadata) > limit:
                    results[tp] = ErrorCode.offset_metadata_too_large
                elif not zk_path_ok(path):
                    results[tp] = ErrorCode.unknown_server_error
                else:
                    writes[tp] = (path, ConsumerOffsetZNode.encode(p.committed_offset))

        def respond() -> list[Effect]:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (name, index), code in results.items():
                by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
            return [response(conn_id, header, {
                "throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})]

        if not writes:
            return respond()

        def run(tps: list[tuple[str, int]], op_for: Callable[[str, bytes], Op],
                retry: Callable[[list[tuple[str, int]]], list[Effect]] | None) -> list[Effect]:
            def on_results(outcomes: list[OpResult], when_ms: int) -> list[Effect]:
                again = []
                for tp, outcome in zip(tps, outcomes):
                    if outcome.ok:
                        results[tp] = ErrorCode.none
                    elif retry is not None and outcome.error in (ZkError.NO_NODE, ZkError.NODE_EXISTS):
                        again.append(tp)
                    else:
                        results[tp] = ErrorCode.unknown_server_error
                return retry(again) if again and retry is not None else respond()
            return [self.outbox.zk([op_for(*writes[tp]) for tp in tps], on_results)]

        # set the offset; where the znode is missing, create it (and its parents); where it was
        # created meanwhile, set it once more
        def set_again(tps: list[tuple[str, int]]) -> list[Effect]:
            return run(tps, lambda path, data: SetData(path, data), None)

        def create(tps: list[tuple[str, int]]) -> list[Effect]:
            return run(tps, lambda path, data: Create(path, data, make_parents=True), set_again)

        return run(list(writes), lambda path, data: SetData(path, data), create)

    # -- OffsetFetch v0

    def fetch(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        group = request.group_id
        wanted = [(t.name, int(i)) for t in request.topics for i in t.partition_indexes]
        answers: dict[tuple[str, int], dict[str, Any]] = {}
        reads: list[tuple[tuple[str, int], str]] = []

        def answer(tp: tuple[str, int], offset: int, error: ErrorCode) -> None:
            answers[tp] = {"partition_index": tp[1], "committed_offset": offset, "metadata": "", "error_code": error}

        group_allowed = self.authorizer.allows(conn_id, AclOperation.DESCRIBE, ResourceType.GROUP, group)
        for tp in wanted:
            path = ConsumerOffsetZNode.path(group, *tp)
            if not group_allowed:
                answer(tp, -1, ErrorCode.group_authorization_failed)
            elif not self.authorizer.allows_topic(conn_id, AclOperation.DESCRIBE, tp[0]):
                answer(tp, -1, ErrorCode.topic_authorization_failed)
            elif not self._known(*tp):
                answer(tp, -1, ErrorCode.unknown_topic_or_partition)
            elif not zk_path_ok(path):
                answer(tp, -1, ErrorCode.unknown_server_error)
            else:
                reads.append((tp, path))

        def respond() -> list[Effect]:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp in wanted:
                if tp in answers:
                    by_topic.setdefault(tp[0], []).append(answers.pop(tp))
            return [response(conn_id, header, {
                "throttle_time": 0, "error_code": ErrorCode.none,
                "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})]

        if not reads:
            return respond()

        def on_read(outcomes: list[OpResult], when_ms: int) -> list[Effect]:
            for (tp, path), outcome in zip(reads, outcomes):
                if outcome.error is ZkError.NO_NODE:
                    answer(tp, -1, ErrorCode.unknown_topic_or_partition)
                elif not outcome.ok:
                    answer(tp, -1, ErrorCode.unknown_server_error)
                else:
                    try:
                        answer(tp, ConsumerOffsetZNode.decode(outcome.data, path), ErrorCode.none)
                    except ValueError:
                        answer(tp, -1, ErrorCode.unknown_server_error)
            return respond()

        return [self.outbox.zk([GetData(path) for _, path in reads], on_read)]
