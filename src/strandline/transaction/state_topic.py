"""``__transaction_state`` as the transaction coordinator sees it: appending its records through the
replica manager, the topic's creation settings, and loading a partition when this broker leads it."""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect
from strandline.group.records import iter_records
from strandline.transaction import records as rec
from strandline.transaction.coordinator import TransactionCoordinator

TXN_TOPIC = rec.TRANSACTION_STATE_TOPIC


#: ``append_internal(topic, index, batch, timeout_ms, done(error, when_ms), now_ms)``: append as
#: leader, acks=all.
AppendInternal = Callable[[str, int, bytearray, int, Callable[[ErrorCode, int], list[Effect]], int], list[Effect]]


class TransactionStateTopic:
    """``__transaction_state``: the coordinator's log (Kafka's TransactionStateManager, its storage)."""

    def __init__(self, config: Any, append_internal: AppendInternal, read_log: Callable[[str, int], bytes]) -> None:
        self.config = config
        self.append_internal = append_internal
        self.read_log = read_log

    def append(self, index: int, records: list[tuple[bytes, bytes | None]],
               done: Callable[[ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        batch = rec.build_state_batch(records, now_ms)
        return self.append_internal(TXN_TOPIC, index, batch, self.config["request.timeout.ms"], done, now_ms)

    def creation(self) -> tuple[int, int, dict[str, str]]:
        """Partitions, replication factor and configs to create the topic with (it is not created
        while fewer brokers are alive than the replication factor, as in Kafka)."""
        cfg = self.config
        rf = cfg["transaction.state.log.replication.factor"]
        configs = {"cleanup.policy": "compact", "compression.type": "uncompressed",
                   "min.insync.replicas": str(min(cfg["transaction.state.log.min.isr"], rf)),
                   "segment.bytes": str(cfg["transaction.state.log.segment.bytes"])}
        return cfg["transaction.state.log.num.partitions"], rf, configs

    def on_leadership(self, coordinator: TransactionCoordinator, topic: str, index: int, leader: bool,
                      leader_epoch: int, now_ms: int) -> list[Effect]:
        if topic != TXN_TOPIC:
            return []
        if not leader:
            return coordinator.unload_partition(index) if index in coordinator.owned else []
        if index in coordinator.owned:
            return []           # still the leader (a new leader epoch, e.g. the ISR changed): nothing to load
        return coordinator.load_partition(index, leader_epoch, iter_records(self.read_log(topic, index)), now_ms)
