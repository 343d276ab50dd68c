"""``__share_group_state`` as the share coordinator sees it: appending its records through the
replica manager, the topic's creation settings, and loading a partition when this broker leads it.

The topic is created on a partition leader's first need of a share coordinator, with
``share.coordinator.state.topic.num.partitions`` partitions and
``share.coordinator.state.topic.replication.factor`` replicas once that many brokers are alive.
The share coordinator writes every change as a whole snapshot of its share-partition, so the topic
is compacted (``cleanup.policy=compact``) and keeps the newest snapshot of each; Kafka writes
updates between snapshots and deletes the records below the oldest snapshot it still needs.
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.group.records import build_batch, iter_records
from strandline.group.share.coordinator import ShareCoordinator

SHARE_STATE_TOPIC = "__share_group_state"

#: ``append_internal(topic, index, batch, timeout_ms, done(error, when_ms), now_ms)``: append as
#: leader, acks=all.
AppendInternal = Callable[[str, int, bytearray, int, Callable[[ErrorCode, int], list[Effect]], int], list[Effect]]


class ShareStateTopic:
    def __init__(self, config: Any, append_internal: AppendInternal, read_log: Callable[[str, int], bytes]) -> None:
        self.config = config
        self.append_internal = append_internal
        self.read_log = read_log

    def append(self, index: int, records: list[tuple[bytes, bytes | None]],
               done: Callable[[ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        batch = build_batch(records, now_ms)
        return self.append_internal(SHARE_STATE_TOPIC, index, batch, self.config["request.timeout.ms"], done, now_ms)

    def creation(self) -> tuple[int, int, dict[str, str]]:
        cfg = self.config
        rf = cfg["share.coordinator.state.topic.replication.factor"]
        configs = {"cleanup.policy": "compact", "compression.type": "uncompressed",
                   "min.insync.replicas": str(min(cfg["share.coordinator.state.topic.min.isr"], rf)),
                   "segment.bytes": str(cfg["share.coordinator.state.topic.segment.bytes"])}
        return cfg["share.coordinator.state.topic.num.partitions"], rf, configs

    def on_leadership(self, coordinator: ShareCoordinator, topic: str, index: int, leader: bool,
                      now_ms: int) -> list[Effect]:
        if topic != SHARE_STATE_TOPIC:
            return []
        if not leader:
            coordinator.unload_partition(index)
        elif index not in coordinator.owned:
            coordinator.load_partition(index, iter_records(self.read_log(topic, index)))
        return []
