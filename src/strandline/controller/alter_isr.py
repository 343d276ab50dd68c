"""AlterIsr v0 (KIP-497) on the controller, as Kafka 2.8's ``KafkaController.processAlterIsr``
fences it; what a request that passes is answered.

A Strandline leader writes its partition's ISR to ZooKeeper itself (``/brokers/topics/<t>/
partitions/<p>/state``, with the state's version as the condition), as Kafka brokers did before
2.7 (``isr-change-notification``); the controller never applies an ISR a leader proposes. So the
controller fences an AlterIsr as Kafka does (the named broker must be registered with that epoch:
STALE_BROKER_EPOCH otherwise, which is what a client's forgery gets) and answers each partition
as ``processAlterIsr`` would before writing: UNKNOWN_TOPIC_OR_PARTITION for a partition it does
not know, FENCED_LEADER_EPOCH for an older leader epoch, the current state when it already is
the one proposed; any other proposal gets INVALID_UPDATE_VERSION, Kafka's answer when the
state's version in ZooKeeper is no longer the one the proposal was made against: the leader is
to read the state again (a difference kept until AlterPartition is served, docs/compatibility.md).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strandline.controller.context import ControllerContext


def alter_isr(ctx: ControllerContext | None, request: Any) -> dict[str, Any]:
    """The AlterIsr v0 response body for ``request`` (fields as kio's, ``name`` per topic)."""
    def top(error: ErrorCode) -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": error, "topics": []}

    if ctx is None:
        return top(ErrorCode.not_controller)
    broker_id, broker_epoch = request.broker_id, request.broker_epoch
    if broker_id not in ctx.live_brokers or ctx.broker_epochs.get(broker_id) != broker_epoch:
        return top(ErrorCode.stale_broker_epoch)
    answers: dict[str, dict[int, dict[str, Any]]] = {}          # one answer per partition, the last proposal's, as Kafka
    for topic in request.topics:
        for p in topic.partitions:
            answers.setdefault(topic.name, {})[p.partition_index] = _answer(ctx, broker_id, topic.name, p)
    return {"throttle_time": 0, "error_code": ErrorCode.none,
            "topics": [{"name": name, "partitions": list(ps.values())} for name, ps in answers.items()]}


def _answer(ctx: ControllerContext, broker_id: int, topic: str, p: Any) -> dict[str, Any]:
    def error(code: ErrorCode) -> dict[str, Any]:
        return {"partition_index": p.partition_index, "error_code": code, "leader_id": 0, "leader_epoch": 0,
                "isr": [], "current_isr_version": 0}

    meta = ctx.topics.get(topic)
    state = meta.states.get(p.partition_index) if meta is not None else None
    if state is None:
        return error(ErrorCode.unknown_topic_or_partition)
    if p.leader_epoch < state.leader_epoch:
        return error(ErrorCode.fenced_leader_epoch)
    if (broker_id, p.leader_epoch, tuple(p.new_isr)) == (state.leader, state.leader_epoch, tuple(state.isr)):
        return {"partition_index": p.partition_index, "error_code": ErrorCode.none, "leader_id": state.leader,
                "leader_epoch": state.leader_epoch, "isr": list(state.isr), "current_isr_version": state.zk_version}
    return error(ErrorCode.invalid_update_version)
