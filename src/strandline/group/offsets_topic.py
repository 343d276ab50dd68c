"""``__consumer_offsets``: the log of the groups (Kafka's GroupMetadataManager, its storage side).

The group coordinator writes each change that must survive (a group's membership, committed
offsets) as records of the offsets partition its group maps to, acks=all through that partition's
ISR; the broker leading a partition coordinates its groups, and rebuilds them from it when it
becomes leader. The topic is created on first use, with ``offsets.topic.replication.factor``
replicas once that many brokers are alive, and Kafka's configs (``cleanup.policy=compact``,
``segment.bytes`` from ``offsets.topic.segment.bytes``, ``compression.type=producer``): the log
cleaner keeps the newest record of each group and each committed offset, and a tombstone (an
expired or deleted offset, a deleted group) for ``delete.retention.ms``, so a new coordinator
replays only what is current.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, Sequence

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.group import records as rec
from strandline.group.consumer_groups import ConsumerGroups
from strandline.group.coordinator import GroupCoordinator
from strandline.group.model import Appended

OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state"})

class GroupLoader(Protocol):
    """Groups of another kind kept in the same log (share groups): loaded and unloaded with it."""

    def load_partition(self, partition: int, records: Iterable[tuple[Any, ...]], now_ms: int) -> None: ...

    def unload_partition(self, partition: int) -> None: ...


#: ``done(error, when_ms, base_offset)``: ``base_offset`` is where the batch lies (-1 unless written).
Done = Appended
#: ``append_internal(topic, index, batch, timeout_ms, done(error, when_ms), now_ms)``: append as
#: leader, acks=all.
AppendInternal = Callable[[str, int, bytearray, int, Callable[[ErrorCode, int], list[Effect]], int], list[Effect]]
#: ``read_log(topic, index)``: every record batch of this broker's replica.
ReadLog = Callable[[str, int], bytes]


class OffsetsTopic:
    def __init__(self, config: Any, append_internal: AppendInternal, read_log: ReadLog) -> None:
        self.config = config
        self.append_internal = append_internal
        self.read_log = read_log

    def append(self, index: int, records: Sequence[rec.KeyValue], done: Done, now_ms: int,
               producer: tuple[int, int] | None = None) -> list[Effect]:
        """Write records to an offsets partition this broker leads; ``done`` once the ISR has them,
        with the offset of the first: NOT_COORDINATOR when it does not lead it,
        COORDINATOR_NOT_AVAILABLE when too few replicas."""
        batch = rec.build_batch(records, now_ms) if producer is None else \
            rec.build_batch(records, now_ms, producer[0], producer[1], transactional=True)

        def mapped(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is ErrorCode.none:
                # the leader's append stamped the batch's base offset into it, in place
                return done(error, when_ms, int.from_bytes(batch[0:8], "big", signed=True))
            if error in (ErrorCode.request_timed_out, ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced):
                return done(error, when_ms, -1)      # a fenced transactional commit says so (Kafka)
            if error is ErrorCode.not_leader_or_follower:
                return done(ErrorCode.not_coordinator, when_ms, -1)
            return done(ErrorCode.coordinator_not_available, when_ms, -1)

        return self.append_internal(OFFSETS_TOPIC, index, batch, self.config["offsets.commit.timeout.ms"],
                                    mapped, now_ms)

    def creation(self) -> tuple[int, int, dict[str, str]]:
        """Partitions, replication factor and configs to create the topic with (it is not created
        while fewer brokers are alive than the replication factor, as in Kafka)."""
        cfg = self.config
        rf = cfg["offsets.topic.replication.factor"]
        configs = {"cleanup.policy": "compact", "compression.type": "producer",
                   "segment.bytes": str(cfg["offsets.topic.segment.bytes"])}
        return cfg["offsets.topic.num.partitions"], rf, configs

    def on_leadership(self, coordinator: GroupCoordinator, topic: str, index: int, leader: bool,
                      now_ms: int, consumer_groups: ConsumerGroups | None = None,
                      others: Sequence[GroupLoader] = ()) -> list[Effect]:
        """Loading and unloading the groups of an offsets partition as its leadership moves: the
        classic groups and committed offsets, the consumer groups (KIP-848) and the ``others``
        (share groups) of the same log."""
        if topic != OFFSETS_TOPIC:
            return []
        loaders: list[GroupLoader] = ([consumer_groups] if consumer_groups is not None else []) + list(others)
        if not leader:
            for loader in loaders:
                loader.unload_partition(index)
            return coordinator.unload_partition(index) if index in coordinator.owned else []
        records = list(rec.iter_log_records(self.read_log(topic, index)))
        count = coordinator.load_partition(index, records, now_ms)
        for loader in loaders:
            loader.load_partition(index, records, now_ms)
        return [LogLine("info", f"Coordinator of the groups of {OFFSETS_TOPIC}-{index} "
                            f"({count} record(s) loaded)")] if count else []
