"""ZooKeeper operations of the controller and of partition leaders, in Kafka's znode layout (SPEC CTL-1)."""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable, Sequence

from strandline.core.config import config_text
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination import znodes
from strandline.coordination.store import Create, Delete, GetData, SetData, TransactionOp
from strandline.coordination.znodes import LeaderAndIsr

PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"

JUTE_MAXBUFFER = 0xFFFFF
"""ZooKeeper's default ``jute.maxbuffer`` (1048575 bytes): a server closes the connection of a
client whose request is longer ("Len error"), so a topic's creation multi must fit in it."""

# Sizes in ZooKeeper's wire format (jute): a request header (xid, op type); a MultiHeader (op
# type, done, error) before each op of a multi and one closing it; the open ACL every znode gets
# (count, perms, "world", "anyone").
_REQUEST_HEADER = 8
_MULTI_HEADER = 9
_OPEN_ACL = 4 + 4 + 4 + len("world") + 4 + len("anyone")


def create_topic_ops(topic: TopicMetadata, controller_epoch: int) -> list[TransactionOp]:
    """One transaction creating the topic, its config and every partition's state; it fails
    (NODE_EXISTS) while a deletion of the name is recorded under ``/admin/delete_topics``, whose
    znode it creates and deletes again (Kafka's "marked for deletion": a broker that has not heard
    of that deletion may still lead the old topic's partitions and write their state znodes, which
    the new topic's would be, the same paths with versions from 0 again, and such a write, meant for
    the old topic, would land on the new one)."""
    record = znodes.DeleteTopicsTopicZNode.path(topic.name)
    ops: list[TransactionOp] = [
        Create(record),
        Delete(record),
        Create(znodes.TopicZNode.path(topic.name),
               znodes.TopicZNode.encode({p: list(r) for p, r in topic.assignment.items()}, topic.topic_id)),
        Create(znodes.ConfigEntityZNode.path("topics", topic.name),
               znodes.ConfigEntityZNode.encode({k: config_text(v) for k, v in topic.configs.items()})),
        Create(znodes.TopicPartitionsZNode.path(topic.name)),
    ]
    for index in sorted(topic.assignment):
        state = topic.states[index]
        ops.append(Create(znodes.TopicPartitionZNode.path(topic.name, index)))
        ops.append(Create(znodes.TopicPartitionStateZNode.path(topic.name, index),
                          znodes.TopicPartitionStateZNode.encode(state)))
    return ops


def chroot(connect: str | None) -> str:
    """The chroot of a ``zookeeper.connect`` string (``host:port,host:port/chroot``), or ""."""
    _, slash, path = (connect or "").partition("/")
    return slash + path.rstrip("/") if path.strip("/") else ""


def op_size(op: TransactionOp, root: str = "") -> int:
    """Bytes one op adds to a multi (its header included)."""
    size = _MULTI_HEADER + 4 + len((root + op.path).encode())
    if isinstance(op, Create):
        return size + 4 + len(op.data) + _OPEN_ACL + 4      # data, ACL, flags
    if isinstance(op, SetData):
        return size + 4 + len(op.data) + 4                  # data, the version expected
    return size + 4                                          # the version checked (or deleted)


def multi_size(ops: Iterable[TransactionOp], root: str = "") -> int:
    """Bytes ZooKeeper reads for a multi of ``ops`` under chroot ``root``: what jute.maxbuffer bounds."""
    return _REQUEST_HEADER + _MULTI_HEADER + sum(op_size(op, root) for op in ops)


def split_multi(ops: Sequence[TransactionOp], fence: Sequence[TransactionOp] = (),
                root: str = "", limit: int | None = None) -> list[list[TransactionOp]]:
    """``ops`` in consecutive runs that each fit one multi (after ``fence``) within ``limit`` bytes:
    a controller electing leaders for thousands of partitions at once writes them in several
    transactions, as one would be refused ("Len error")."""
    limit = JUTE_MAXBUFFER if limit is None else limit
    base = multi_size(fence, root)
    runs: list[list[TransactionOp]] = []
    run: list[TransactionOp] = []
    size = base
    for op in ops:
        cost = op_size(op, root)
        if run and size + cost > limit:
            runs.append(run)
            run, size = [], base
        run.append(op)
        size += cost
    if run:
        runs.append(run)
    return runs


def max_partitions(topic: TopicMetadata, replication_factor: int, broker_ids: Sequence[int],
                   controller_epoch: int, fence: Sequence[TransactionOp] = (), root: str = "",
                   limit: int = JUTE_MAXBUFFER) -> int:
    """The most partitions ``topic`` (its name, id and configs) can have for its creation multi
    (``fence`` then :func:`create_topic_ops`) to fit in ``limit`` bytes.

    Every partition is costed as if each replica and ISR member were the broker with the longest
    id, so any assignment of that many partitions over ``broker_ids`` fits."""
    empty = dataclasses.replace(topic, assignment={}, states={})
    room = limit - multi_size([*fence, *create_topic_ops(empty, controller_epoch)], root)
    widest = max(broker_ids, key=lambda b: len(str(b)))
    replicas = (widest,) * replication_factor
    state = znodes.TopicPartitionStateZNode.encode(LeaderAndIsr(widest, 0, replicas, controller_epoch, 0))
    no_partitions = len(znodes.TopicZNode.encode({}, topic.topic_id))
    count = 0
    for digits in range(1, 11):                  # partitions whose index has this many digits cost the same
        first = 0 if digits == 1 else 10 ** (digits - 1)
        cost = (multi_size([Create(znodes.TopicPartitionZNode.path(topic.name, first)),
                            Create(znodes.TopicPartitionStateZNode.path(topic.name, first), state)], root)
                - _REQUEST_HEADER - _MULTI_HEADER
                + len(znodes.TopicZNode.encode({first: replicas}, topic.topic_id)) - no_partitions + 1)  # and a comma
        fits = min(max(room, 0) // cost, 10 ** digits - first)
        count += fits
        room -= fits * cost
        if fits < 10 ** digits - first:
            break
    return count


def delete_topic_ops(name: str) -> list[Delete]:
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


def claim_producer_id_block(broker_id: int, start: int, end: int, version: int) -> Create | SetData:
    data = json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                       "block_end": str(end)}).encode()
    if version < 0:
        return Create(PRODUCER_ID_BLOCK_PATH, data)
    return SetData(PRODUCER_ID_BLOCK_PATH, data, version)


def controller_election_ops(broker_id: int, new_epoch: int, epoch_version: int, now_ms: int) -> list[Create | SetData]:
    """Kafka's election multi-op: ephemeral /controller plus /controller_epoch bumped by one."""
    epoch_data = znodes.ControllerEpochZNode.encode(new_epoch)
    epoch_op = (Create(znodes.ControllerEpochZNode.path(), epoch_data) if epoch_version < 0
                else SetData(znodes.ControllerEpochZNode.path(), epoch_data, epoch_version))
    return [Create(znodes.ControllerZNode.path(), znodes.ControllerZNode.encode(broker_id, now_ms), ephemeral=True),
            epoch_op]


def update_partition_state(topic: str, partition: int, state: LeaderAndIsr) -> SetData:
    """Compare-and-set of a partition's state znode on the version the writer last saw (ISR-5)."""
    return SetData(znodes.TopicPartitionStateZNode.path(topic, partition),
                   znodes.TopicPartitionStateZNode.encode(state), state.zk_version)


def isr_change_notification(partitions: list[tuple[str, int]]) -> Create:
    """ISR-6: one persistent sequential node listing the partitions whose ISR changed."""
    return Create(znodes.IsrChangeNotificationSequenceZNode.path(),
                  znodes.IsrChangeNotificationSequenceZNode.encode(partitions), sequential=True)
