"""ZooKeeper operations the controller role issues, in Kafka's znode layout (SPEC CTL-1)."""

from __future__ import annotations

import json

from strandline.broker.metadata import TopicMetadata
from strandline.coordination import znodes
from strandline.coordination.store import Create, Delete, GetData, SetData

PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"


def create_topic_ops(topic: TopicMetadata, controller_epoch: int) -> list:
    """One transaction creating the topic, its config and every partition's state."""
    ops: list = [
        Create(znodes.TopicZNode.path(topic.name),
               znodes.TopicZNode.encode({p: list(r) for p, r in topic.assignment.items()}, topic.topic_id)),
        Create(znodes.ConfigEntityZNode.path("topics", topic.name),
               znodes.ConfigEntityZNode.encode({k: str(v).lower() if isinstance(v, bool) else str(v)
                                                for k, v in topic.configs.items()})),
        Create(znodes.TopicPartitionsZNode.path(topic.name)),
    ]
    for index in sorted(topic.assignment):
        state = topic.states[index]
        ops.append(Create(znodes.TopicPartitionZNode.path(topic.name, index)))
        ops.append(Create(znodes.TopicPartitionStateZNode.path(topic.name, index),
                          znodes.TopicPartitionStateZNode.encode(state)))
    return ops


def delete_topic_ops(name: str) -> list:
    return [Delete(znodes.TopicZNode.path(name), recursive=True),
            Delete(znodes.ConfigEntityZNode.path("topics", name))]


def get_producer_id_block() -> GetData:
    return GetData(PRODUCER_ID_BLOCK_PATH)


def next_producer_id_block_start(data: bytes | None) -> int:
    """Kafka's ``{"version":1,"broker":B,"block_start":"S","block_end":"E"}``: next block starts at E+1."""
    if not data:
        return 0
    block = json.loads(data)
    return int(block["block_end"]) + 1


def claim_producer_id_block(broker_id: int, start: int, end: int, version: int):
    data = json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                       "block_end": str(end)}).encode()
    if version < 0:
        return Create(PRODUCER_ID_BLOCK_PATH, data)
    return SetData(PRODUCER_ID_BLOCK_PATH, data, version)


def controller_election_ops(broker_id: int, new_epoch: int, epoch_version: int, now_ms: int) -> list:
    """Kafka's election multi-op: ephemeral /controller plus /controller_epoch bumped by one."""
    epoch_data = znodes.ControllerEpochZNode.encode(new_epoch)
    epoch_op = (Create(znodes.ControllerEpochZNode.path(), epoch_data) if epoch_version < 0
                else SetData(znodes.ControllerEpochZNode.path(), epoch_data, epoch_version))
    return [Create(znodes.ControllerZNode.path(), znodes.ControllerZNode.encode(broker_id, now_ms), ephemeral=True),
            epoch_op]


def update_partition_state(topic: str, partition: int, state) -> SetData:
    """Compare-and-set of a partition's state znode on the version the writer last saw (ISR-5)."""
    return SetData(znodes.TopicPartitionStateZNode.path(topic, partition),
                   znodes.TopicPartitionStateZNode.encode(state), state.zk_version)


def isr_change_notification(partitions: list[tuple[str, int]]) -> Create:
    """ISR-6: one persistent sequential node listing the partitions whose ISR changed."""
    return Create(znodes.IsrChangeNotificationSequenceZNode.path(),
                  znodes.IsrChangeNotificationSequenceZNode.encode(partitions), sequential=True)
