"""The follower side of replication: one fetcher per leader, pulling what this broker follows
(Kafka's ReplicaFetcherManager, SPEC REP-1, EPO-2, EPO-4). It adds and removes partitions, and
gives each :class:`ReplicaFetcher` (which runs its own loop, :mod:`strandline.replication.fetcher`)
a turn when there may be work: after the controller's requests, an answer, or a deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strandline.core.effects import Effect
from strandline.core.outbox import Outbox
from strandline.coordination.metadata import MetadataCache
from strandline.replication.fetch_session import ChangeJournal
from strandline.replication.fetcher import FetcherContext, PartitionFetchState, ReplicaFetcher, truncate
from strandline.replication.partition import Partition
from strandline.replication.purgatory import Purgatory
from strandline.replication.quota import ReplicationQuota
from strandline.replication.topic_stats import BrokerTopicStats


@dataclass
class ReplicaFetcherManager:
    config: Any
    partitions: dict[tuple[str, int], Partition]      # the replica manager's
    metadata: MetadataCache
    outbox: Outbox
    fetch_purgatory: Purgatory                        # consumers' fetches wait on a follower's HW too
    topic_stats: BrokerTopicStats = field(default_factory=BrokerTopicStats)     # the replica manager's
    fetchers: dict[int, ReplicaFetcher] = field(default_factory=dict)     # by leader
    journal: ChangeJournal | None = None              # the replica manager's: the partitions that changed
    follower_quota: ReplicationQuota = field(init=False)
    context: FetcherContext = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.follower_quota = ReplicationQuota(lambda: self.config["follower.replication.throttled.rate"])
        self.context = FetcherContext(self.config, self.config.broker_id, self.partitions, self.metadata, self.outbox,
                                      self.fetch_purgatory, self.topic_stats, self.journal, self.follower_quota,
                                      self.maybe_send_fetches)

    @property
    def broker_id(self) -> int:
        broker_id: int = self.config.broker_id
        return broker_id

    def add_partition(self, key: tuple[str, int], leader_id: int, leader_epoch: int, truncating: bool) -> None:
        """Fetch ``key`` from ``leader_id``; its broker may not have registered yet, and the fetcher
        then waits for the metadata to name its endpoint."""
        fetch_state = PartitionFetchState(leader_epoch, truncating=truncating)
        fetcher = self.fetchers.setdefault(leader_id, ReplicaFetcher(leader_id, context=self.context))
        fetcher.add(key, fetch_state)
        # an answer in flight for the old epoch will be dropped: the next Fetch is full, so that the
        # leader's session tells this partition's state again
        fetcher.session.failed()

    def remove_partitions(self, keys: list[tuple[str, int]]) -> None:
        for fetcher in self.fetchers.values():
            for key in keys:
                fetcher.remove(key)

    def truncate(self, partition: Partition, offset: int, why: str) -> list[Effect]:
        return truncate(partition, offset, why)

    def _with_leader(self) -> list[ReplicaFetcher]:
        """Fetchers whose leader's endpoint is known; the others wait for the metadata to name it
        (LeaderAndIsr's live leaders, UpdateMetadata), then start at once."""
        brokers = self.metadata.brokers
        return [f for f in self.fetchers.values() if f.leader_id in brokers]

    def next_deadline_ms(self) -> int | None:
        times = [t for f in self._with_leader() if (t := f.next_wakeup_ms()) is not None]
        return min(times) if times else None

    def maybe_send_fetches(self, now_ms: int) -> list[Effect]:
        """Each fetcher whose leader's endpoint is known takes a turn (:meth:`ReplicaFetcher.do_work`)."""
        effects: list[Effect] = []
        for fetcher in self._with_leader():
            effects.extend(fetcher.do_work(now_ms))
        return effects
