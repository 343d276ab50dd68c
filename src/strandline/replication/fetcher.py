"""The follower side of replication: which partitions a broker pulls from each leader, and how.

One :class:`ReplicaFetcher` per leader broker (Kafka's ReplicaFetcherThread with
``num.replica.fetchers=1``). A partition enters it *truncating*: before its first fetch the
follower cuts its log where it diverges from the leader's (OffsetsForLeaderEpoch with KIP-279's
loop, EPO-2), or at its high watermark in the legacy mode (EPO-4). Then it fetches from its log
end offset (REP-1). At most one request per leader is in flight; a partition that failed waits
``replica.fetch.backoff.ms``. Pure: the broker core sends the requests and feeds the answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strandline.replication.fetch_session import SessionHandler


@dataclass(slots=True)
class PartitionFetchState:
    leader_epoch: int
    truncating: bool = True
    delayed_until_ms: int = 0


@dataclass
class ReplicaFetcher:
    """Pulls from one leader; each request goes to the leader's endpoint as the metadata names it then.

    Besides each partition's :class:`PartitionFetchState`, it keeps what lets an incremental Fetch
    be built from the partitions that changed only: those truncating, those delayed (until seen
    past their delay), those whose fetch state changed since the last Fetch was built (``dirty``),
    and the replica manager's change journal position then (every log end or start offset move)."""

    leader_id: int
    partitions: dict[tuple[str, int], PartitionFetchState] = field(default_factory=dict)
    in_flight: bool = False
    backoff_until_ms: int = 0
    session: SessionHandler = field(default_factory=SessionHandler)     # KIP-227, with this leader
    truncating: dict[tuple[str, int], None] = field(default_factory=dict)
    delayed: dict[tuple[str, int], None] = field(default_factory=dict)
    dirty: dict[tuple[str, int], None] = field(default_factory=dict)
    journal_position: int = -1          # -1: build the next Fetch from every partition
    journal_epoch: int = -1
    max_bytes: int = -1                 # replica.fetch.max.bytes when the last Fetch was built

    def add(self, key: tuple[str, int], state: PartitionFetchState) -> None:
        self.partitions[key] = state
        self.dirty[key] = None
        self.delayed.pop(key, None)
        if state.truncating:
            self.truncating[key] = None
        else:
            self.truncating.pop(key, None)

    def remove(self, key: tuple[str, int]) -> None:
        if self.partitions.pop(key, None) is not None:
            self.dirty[key] = None
            self.truncating.pop(key, None)
            self.delayed.pop(key, None)

    def set_truncating(self, key: tuple[str, int], state: PartitionFetchState, truncating: bool) -> None:
        state.truncating = truncating
        self.dirty[key] = None
        if truncating:
            self.truncating[key] = None
        else:
            self.truncating.pop(key, None)

    def delay(self, key: tuple[str, int], state: PartitionFetchState, until_ms: int) -> None:
        state.delayed_until_ms = until_ms
        self.delayed[key] = None

    def ready(self, now_ms: int) -> tuple[list[tuple[tuple[str, int], PartitionFetchState]],
                                          list[tuple[tuple[str, int], PartitionFetchState]]]:
        """The partitions that may be asked for now: those truncating, and those fetching."""
        truncating: list = []
        fetching: list = []
        for item in self.partitions.items():
            state = item[1]
            if state.delayed_until_ms <= now_ms:
                (truncating if state.truncating else fetching).append(item)
        return truncating, fetching

    def ready_truncating(self, now_ms: int) -> list[tuple[tuple[str, int], PartitionFetchState]]:
        """The partitions truncating that may be asked about now."""
        parts = self.partitions
        return [(key, parts[key]) for key in self.truncating if parts[key].delayed_until_ms <= now_ms]

    def next_wakeup_ms(self) -> int | None:
        """When a delayed partition or the fetcher's backoff ends, if a request could go then."""
        if self.in_flight or not self.partitions:
            return None
        times = [s.delayed_until_ms for s in self.partitions.values()]
        return max(self.backoff_until_ms, min(times))
