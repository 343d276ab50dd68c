"""The share coordinator on the wire (KIP-932): InitializeShareGroupState, ReadShareGroupState,
WriteShareGroupState and DeleteShareGroupState, which partition leaders send the broker leading the
share-partition's ``__share_group_state`` partition (:mod:`strandline.group.share.coordinator`),
and ReadShareGroupStateSummary, which group coordinators send to describe a share group's offsets.

Brokers send them, so they need CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED on
every partition otherwise), as in Kafka; UNSUPPORTED_VERSION unless ``group.share.enable``. Each
partition named is answered on its own, once its change is in the ISR.
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.core.wire import Handler, response
from strandline.group.share.coordinator import ShareCoordinator, ShareState, delivery_complete_count
from strandline.group.share.partition import StateBatch
from strandline.group.share.records import ShareStateKey
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security.acl import AclOperation
from strandline.security.authorizer import AclAuthorizer

#: one partition's answer: ``finish(entry, now_ms)``
Finish = Callable[[dict[str, Any], int], list[Effect]]


class ShareStateApis:
    def __init__(self, config: Any, authorizer: AclAuthorizer, coordinator: ShareCoordinator) -> None:
        self.config = config
        self.authorizer = authorizer
        self.coordinator = coordinator

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.INITIALIZE_SHARE_GROUP_STATE: self._initialize, ApiKey.READ_SHARE_GROUP_STATE: self._read,
                ApiKey.WRITE_SHARE_GROUP_STATE: self._write, ApiKey.DELETE_SHARE_GROUP_STATE: self._delete,
                ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: self._read_summary}

    def _initialize(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def one(key: ShareStateKey, p: Any, finish: Finish, at_ms: int) -> list[Effect]:
            return self.coordinator.initialize(key, p.state_epoch, p.start_offset,
                                               lambda e, m, t: finish(_code(e, m), t), at_ms)
        return self._each(conn_id, header, request, one, now_ms)

    def _read(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def one(key: ShareStateKey, p: Any, finish: Finish, at_ms: int) -> list[Effect]:
            def read(error: ErrorCode, message: str | None, state: ShareState | None, t: int) -> list[Effect]:
                entry = {**_code(error, message), **_UNREAD}
                if state is not None:
                    entry.update(state_epoch=state.state_epoch, start_offset=state.start_offset,
                                 state_batches=[_batch_fields(b) for b in state.batches])
                return finish(entry, t)
            return self.coordinator.read(key, p.leader_epoch, read, at_ms)
        return self._each(conn_id, header, request, one, now_ms, _UNREAD)

    def _read_summary(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        """The committed state's start offset, epochs and (v1) how many offsets from it were
        delivered for good; start offset -1 for a share-partition never initialized."""
        def one(key: ShareStateKey, p: Any, finish: Finish, at_ms: int) -> list[Effect]:
            error, state = self.coordinator.read_summary(key)
            if error is not None:
                return finish(_code(*error), at_ms)
            entry = {**_code(ErrorCode.none, None), **_NO_SUMMARY}
            if state is not None:
                entry.update(state_epoch=state.state_epoch, leader_epoch=state.leader_epoch,
                             start_offset=state.start_offset, delivery_complete_count=delivery_complete_count(state))
            return finish(entry, at_ms)
        return self._each(conn_id, header, request, one, now_ms, _NO_SUMMARY)

    def _write(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def one(key: ShareStateKey, p: Any, finish: Finish, at_ms: int) -> list[Effect]:
            batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in p.state_batches]
            return self.coordinator.write(key, p.state_epoch, p.leader_epoch, p.start_offset, batches,
                                          lambda e, m, t: finish(_code(e, m), t), at_ms)
        return self._each(conn_id, header, request, one, now_ms)

    def _delete(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def one(key: ShareStateKey, p: Any, finish: Finish, at_ms: int) -> list[Effect]:
            return self.coordinator.delete(key, lambda e, m, t: finish(_code(e, m), t), at_ms)
        return self._each(conn_id, header, request, one, now_ms)

    def _each(self, conn_id: int, header: RequestHeader, request: Any,
              one: Callable[[ShareStateKey, Any, Finish, int], list[Effect]], now_ms: int,
              unanswered: dict[str, Any] | None = None) -> list[Effect]:
        """Run ``one`` for every partition the request names; answer once every one has finished."""
        refused = None
        if not self.config["group.share.enable"]:
            refused = ErrorCode.unsupported_version
        elif not self.authorizer.allows_cluster(conn_id, AclOperation.CLUSTER_ACTION):
            refused = ErrorCode.cluster_authorization_failed
        results: list[dict[str, Any]] = []
        waiting = [sum(len(t.partitions) for t in request.topics)]
        answered: list[bool] = [False]

        def finish_when_done(at_ms: int) -> list[Effect]:
            if waiting[0] > 0 or answered[0]:
                return []
            answered[0] = True
            return [response(conn_id, header, {"results": results})]

        effects: list[Effect] = []
        for t in request.topics:
            parts: list[dict[str, Any]] = []
            results.append({"topic_id": t.topic_id, "partitions": parts})
            for p in t.partitions:
                def finish(entry: dict[str, Any], at_ms: int, parts: list[dict[str, Any]] = parts,
                           index: int = p.partition) -> list[Effect]:
                    parts.append({"partition": index, **(unanswered or {}), **entry})
                    waiting[0] -= 1
                    return finish_when_done(at_ms)
                if refused is not None or t.topic_id is None:
                    effects += finish(_code(refused or ErrorCode.invalid_request, None), now_ms)
                else:
                    effects += one(ShareStateKey(request.group_id, t.topic_id, p.partition), p, finish, now_ms)
        return effects + finish_when_done(now_ms)


#: a ReadShareGroupState answer's fields for a partition with no state to give
_UNREAD: dict[str, Any] = {"state_epoch": 0, "start_offset": -1, "state_batches": []}
#: a ReadShareGroupStateSummary answer's fields for a partition with no state to give
_NO_SUMMARY: dict[str, Any] = {"state_epoch": 0, "leader_epoch": -1, "start_offset": -1,
                               "delivery_complete_count": -1}


def _code(error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"error_code": error, "error_message": message}


def _batch_fields(b: StateBatch) -> dict[str, int]:
    return {"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": int(b.state),
            "delivery_count": b.delivery_count}
