"""The follower side of replication: one fetcher per leader, pulling what this broker follows
(Kafka's ReplicaFetcherManager and ReplicaFetcherThread, SPEC REP-1, EPO-2, EPO-4).

A partition enters its leader's fetcher *truncating*: the follower first cuts its log where it
diverges from the leader's (OffsetsForLeaderEpoch, KIP-279), or it was cut at its high watermark in
the legacy mode. Then long-poll Fetch requests from its log end offset with ``replica_id`` set;
the leader's batches are appended as they are (never re-encoded) and HW = min(own LEO, leader's HW).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import LogLine
from strandline.core.outbox import Outbox
from strandline.coordination.metadata import MetadataCache
from strandline.log.log import OffsetOutOfOrder
from strandline.log.segment import CorruptRecordError
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.protocol.hot_readers import FETCH_RESPONSE_VERSION, decode_fetch_response
from strandline.protocol.hot_responses import FETCH_REQUEST_VERSION, encode_fetch_request
from strandline.protocol.records import iter_batches
from strandline.replication.fetch_session import INITIAL_EPOCH, ChangeJournal
from strandline.replication.fetcher import PartitionFetchState, ReplicaFetcher
from strandline.replication.partition import Partition
from strandline.replication.quota import ReplicationQuota, throttled
from strandline.replication.purgatory import Purgatory
from strandline.replication.topic_stats import BrokerTopicStats
from strandline.replication.truncation import after_offsets_for_leader_epoch

FETCH_VERSION = 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
_RETRIABLE_QUIETLY = {ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch,
                      ErrorCode.fenced_leader_epoch, ErrorCode.unknown_topic_or_partition}


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

    def __post_init__(self) -> None:
        self.follower_quota = ReplicationQuota(lambda: self.config["follower.replication.throttled.rate"])

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    def add_partition(self, key: tuple[str, int], leader_id: int, leader_epoch: int, truncating: bool) -> None:
        """Fetch ``key`` from ``leader_id``; its broker may not have registered yet, and the fetcher
        then waits for the metadata to name its endpoint."""
        fetch_state = PartitionFetchState(leader_epoch, truncating=truncating)
        fetcher = self.fetchers.setdefault(leader_id, ReplicaFetcher(leader_id))
        fetcher.add(key, fetch_state)
        # an answer in flight for the old epoch will be dropped: the next Fetch is full, so that the
        # leader's session tells this partition's state again
        fetcher.session.failed()

    def remove_partitions(self, keys: list[tuple[str, int]]) -> None:
        for fetcher in self.fetchers.values():
            for key in keys:
                fetcher.remove(key)

    def truncate(self, partition: Partition, offset: int, why: str) -> list:
        before = partition.truncate_to(offset)
        if before is None:
            return []
        return [LogLine("info", f"Truncated {partition.topic}-{partition.index} from {before} to "
                            f"{partition.log_end_offset}: {why}")]

    def _with_leader(self) -> list[ReplicaFetcher]:
        """Fetchers whose leader's endpoint is known; the others wait for the metadata to name it
        (LeaderAndIsr's live leaders, UpdateMetadata), then start at once."""
        brokers = self.metadata.brokers
        return [f for f in self.fetchers.values() if f.leader_id in brokers]

    def next_deadline_ms(self) -> int | None:
        times = [t for f in self._with_leader() if (t := f.next_wakeup_ms()) is not None]
        return min(times) if times else None

    def maybe_send_fetches(self, now_ms: int) -> list:
        effects: list = []
        for fetcher in self._with_leader():
            if fetcher.in_flight or fetcher.backoff_until_ms > now_ms or not fetcher.partitions:
                continue
            truncating = fetcher.ready_truncating(now_ms)
            if truncating:
                effects.extend(self._send_offsets_for_leader_epoch(fetcher, truncating, now_ms))
                continue
            incremental = self._incremental_positions(fetcher, now_ms)
            if incremental is not None:
                if incremental[2]:
                    effects.extend(self._send_fetch(fetcher, [], now_ms, incremental))
                continue
            _, fetching = fetcher.ready(now_ms)
            if fetching:
                effects.extend(self._send_fetch(fetcher, fetching, now_ms))
        return effects

    def _incremental_positions(self, fetcher: ReplicaFetcher, now_ms: int) -> tuple | None:
        """For an incremental Fetch: the positions of the partitions that changed since the last
        Fetch was built and those that may be fetched again (a delay past), the journal's position
        and epoch before they were read, and whether any partition is left to fetch; None when the
        Fetch must be built from every partition (a new session, a fallen-off journal reader, a new
        replica.fetch.max.bytes, or a topic throttling followers)."""
        journal = self.journal
        if (journal is None or fetcher.session.epoch == INITIAL_EPOCH
                or fetcher.max_bytes != self.config["replica.fetch.max.bytes"] or self._follower_throttles()):
            return None
        changed = journal.since(fetcher.journal_position, fetcher.journal_epoch)
        if changed is None:
            return None
        position, epoch = journal.position, journal.epoch
        states = fetcher.partitions
        candidates = dict(fetcher.dirty)
        candidates.update(fetcher.delayed)
        for key in changed:
            if key in states:
                candidates[key] = None
        max_bytes = fetcher.max_bytes
        sent = fetcher.session.sent
        partitions = self.partitions
        named: dict[tuple[str, int], tuple[int, int, int, int]] = {}
        forgotten: list[tuple[str, int]] = []
        for key in candidates:
            state = states.get(key)
            if state is None or state.truncating or state.delayed_until_ms > now_ms:
                if key in sent:
                    forgotten.append(key)
                continue
            log = partitions[key].log
            position_of = (state.leader_epoch, log.log_end_offset, log.log_start_offset, max_bytes)
            if sent.get(key) != position_of:
                named[key] = position_of
        left = len(sent) - len(forgotten) + sum(1 for key in named if key not in sent)
        return named, forgotten, left > 0, position, epoch

    def _built(self, fetcher: ReplicaFetcher, now_ms: int, position: int, epoch: int, full: bool) -> None:
        """A Fetch was built: what changes from now on goes into the next one."""
        fetcher.dirty.clear()
        if full:
            fetcher.delayed = {key: None for key, s in fetcher.partitions.items() if s.delayed_until_ms > now_ms}
        else:
            fetcher.delayed = {key: None for key in fetcher.delayed
                               if (s := fetcher.partitions.get(key)) is not None and s.delayed_until_ms > now_ms}
        fetcher.journal_position, fetcher.journal_epoch = position, epoch
        fetcher.max_bytes = self.config["replica.fetch.max.bytes"]

    def _client_id(self) -> str:
        return f"strandline-replica-fetcher-{self.broker_id}"

    def _send_offsets_for_leader_epoch(self, fetcher: ReplicaFetcher, ready: list, now_ms: int) -> list:
        by_topic: dict[str, list] = {}
        asked: dict[tuple[str, int], int] = {}
        effects: list = []
        for key, state in ready:
            partition = self.partitions[key]
            latest = partition.log.leader_epoch_cache.latest_epoch
            if latest < 0:
                # nothing written under any epoch: the high watermark is all we know
                effects.extend(self.truncate(partition, partition.high_watermark, "no leader epochs"))
                fetcher.set_truncating(key, state, False)
                continue
            asked[key] = state.leader_epoch
            by_topic.setdefault(key[0], []).append({"partition": key[1], "current_leader_epoch": state.leader_epoch,
                                                    "leader_epoch": latest})
        if not by_topic:
            return effects + self.maybe_send_fetches(now_ms)
        body = {"replica_id": self.broker_id,
                "topics": [{"topic": n, "partitions": p} for n, p in by_topic.items()]}
        def on_response(resp: Any, when_ms: int) -> list:
            out: list = []
            for t in resp.topics:
                for p in t.partitions:
                    out.extend(self._on_epoch_end_offset(fetcher, (t.topic, p.partition), asked, p, when_ms))
            return out + self.maybe_send_fetches(when_ms)

        return effects + self._fetcher_request(fetcher, ApiKey.OFFSET_FOR_LEADER_EPOCH,
                                               OFFSET_FOR_LEADER_EPOCH_VERSION, body, on_response, now_ms)

    def _fetcher_request(self, fetcher: ReplicaFetcher, api_key: int, version: int, body: dict,
                         on_response: Callable[[Any, int], list], now_ms: int) -> list:
        """One request of a fetcher to its leader; a failed connection or a bad answer backs it off."""
        fetcher.in_flight = True

        def on_frame(frame: bytes | None, when_ms: int) -> list:
            fetcher.in_flight = False
            if frame is None:
                return self._fetcher_failed(fetcher, when_ms)
            try:
                resp = None
                if api_key == ApiKey.FETCH and version == FETCH_RESPONSE_VERSION:
                    resp = decode_fetch_response(frame)     # records stay views of the frame (no copy)
                if resp is None:        # not the hand-read layout: kio reads it (and names what is wrong)
                    resp = api.decode_response(api_key, version, frame)
            except Exception as exc:
                return [LogLine("warning", f"Bad {api.api_name(api_key)} answer from broker {fetcher.leader_id}: {exc}")] \
                    + self._fetcher_failed(fetcher, when_ms)
            return on_response(resp, when_ms)

        client_id = self._client_id()
        if api_key == ApiKey.FETCH and version == FETCH_REQUEST_VERSION:
            encode = lambda cid: encode_fetch_request(cid, client_id, body)   # noqa: E731  (by hand: hot)
        else:
            encode = lambda cid: api.encode_request(api_key, version, cid, client_id, body)   # noqa: E731
        return self.outbox.send(self.metadata.brokers.get(fetcher.leader_id), "fetcher", encode, on_frame, now_ms)

    def _on_epoch_end_offset(self, fetcher: ReplicaFetcher, key: tuple[str, int], asked: dict, answer: Any,
                             now_ms: int) -> list:
        state = fetcher.partitions.get(key)
        partition = self.partitions.get(key)
        if state is None or partition is None or asked.get(key) != state.leader_epoch or not state.truncating:
            return []
        error = ErrorCode(int(answer.error_code))
        if error is not ErrorCode.none:
            return self._delay_partition(fetcher, key, state, error, now_ms)
        log = partition.log
        result = after_offsets_for_leader_epoch(answer.leader_epoch, answer.end_offset, log.leader_epoch_cache,
                                                log.log_end_offset, partition.high_watermark)
        effects = self.truncate(partition, result.offset,
                                 f"leader {fetcher.leader_id} has epoch {answer.leader_epoch} "
                                 f"ending at {answer.end_offset}")
        if result.done:
            fetcher.set_truncating(key, state, False)
        return effects

    def _throttled(self, key: tuple[str, int]) -> bool:
        """A replica of this broker outside the ISR that the topic throttles on the follower side."""
        partition = self.partitions.get(key)
        topic = self.metadata.topics.get(key[0])
        return (partition is not None and topic is not None and self.broker_id not in partition.isr
                and throttled(topic.configs, "follower.replication.throttled.replicas", key[1], self.broker_id))

    def _follower_throttles(self) -> bool:
        """Whether any topic throttles replicas on the follower side (rarely: during a move)."""
        return any(t.configs.get("follower.replication.throttled.replicas") for t in self.metadata.topics.values())

    def _send_fetch(self, fetcher: ReplicaFetcher, ready: list, now_ms: int, incremental: tuple | None = None) -> list:
        """A Fetch of ``ready`` (every partition that may be fetched now), or, for an incremental
        one, of what :meth:`_incremental_positions` found changed."""
        cfg = self.config
        max_bytes = cfg["replica.fetch.max.bytes"]
        throttled_keys: set = set()
        if incremental is not None:
            changes, dropped, _, journal_position, journal_epoch = incremental
            # what each partition is fetched at: named now, or as the session last heard (forgotten: none)
            sent, gone = fetcher.session.sent, set(dropped)
            session_id, epoch, named, forgotten = fetcher.session.build_changes(changes, dropped)

            def asked_at(key: tuple[str, int]) -> tuple | None:
                position = named.get(key)
                return position if position is not None or key in gone else sent.get(key)
        else:
            throttled_keys = {key for key, _ in ready if self._throttled(key)} if self._follower_throttles() else set()
            if throttled_keys and self.follower_quota.exceeded(now_ms):
                # over follower.replication.throttled.rate: those replicas wait, the others fetch
                ready = [(key, state) for key, state in ready if key not in throttled_keys]
                throttled_keys = set()
                if not ready:
                    fetcher.backoff_until_ms = now_ms + cfg["replica.fetch.backoff.ms"]
                    return []
            journal_position = self.journal.position if self.journal is not None else -1
            journal_epoch = self.journal.epoch if self.journal is not None else -1
            partitions = self.partitions
            positions: dict[tuple[str, int], tuple[int, int, int, int]] = {}   # epoch, fetch offset, log start, max
            for key, state in ready:
                log = partitions[key].log
                positions[key] = (state.leader_epoch, log.log_end_offset, log.log_start_offset, max_bytes)
            # an incremental fetch session (KIP-227): only the partitions whose position changed are named
            session_id, epoch, named, forgotten = fetcher.session.build(positions)
            asked_at = positions.get
        self._built(fetcher, now_ms, journal_position, journal_epoch, incremental is None)
        by_topic: dict[str, list] = {}
        for (topic, index), (leader_epoch, fetch_offset, log_start_offset, _) in named.items():
            by_topic.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": leader_epoch, "fetch_offset": fetch_offset,
                "log_start_offset": log_start_offset, "partition_max_bytes": max_bytes})
        forget: dict[str, list[int]] = {}
        for topic, index in forgotten:
            forget.setdefault(topic, []).append(index)
        body = {"replica_id": self.broker_id, "max_wait": cfg["replica.fetch.wait.max.ms"],
                "min_bytes": cfg["replica.fetch.min.bytes"], "max_bytes": cfg["replica.fetch.response.max.bytes"],
                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic": n, "partitions": p} for n, p in by_topic.items()],
                "forgotten_topics_data": [{"topic": n, "partitions": p} for n, p in forget.items()], "rack_id": ""}

        def on_response(resp: Any, when_ms: int) -> list:
            error = ErrorCode(int(resp.error_code))
            fetcher.session.succeeded(error, int(resp.session_id))
            if error in (ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch):
                return self.maybe_send_fetches(when_ms)      # the session is gone or out of step: a full fetch now
            if error is not ErrorCode.none:
                return self._fetcher_failed(fetcher, when_ms)
            out: list = []
            moved: list[tuple[str, int]] = []
            for t in resp.responses:
                for p in t.partitions:
                    key = (t.topic, p.partition_index)
                    if key in throttled_keys and p.records:
                        self.follower_quota.record(len(p.records), when_ms)
                    position = asked_at(key)
                    out.extend(self._on_fetched(fetcher, key, position and position[:2], p, when_ms, moved))
            if moved:
                out.extend(self.fetch_purgatory.check_keys(moved, when_ms))
            return out + self.maybe_send_fetches(when_ms)

        return self._fetcher_request(fetcher, ApiKey.FETCH, FETCH_VERSION, body, on_response, now_ms)

    def _on_fetched(self, fetcher: ReplicaFetcher, key: tuple[str, int], asked: tuple[int, int] | None,
                    answer: Any, now_ms: int, moved: list) -> list:
        state = fetcher.partitions.get(key)
        partition = self.partitions.get(key)
        if state is None or partition is None or asked is None or state.truncating:
            return []
        epoch, fetch_offset = asked
        if epoch != state.leader_epoch or fetch_offset != partition.log_end_offset:
            return []
        error = ErrorCode(int(answer.error_code))
        log = partition.log
        if error is ErrorCode.offset_out_of_range:
            if fetch_offset < answer.log_start_offset:
                partition.truncate_fully_and_start_at(answer.log_start_offset)
                return [LogLine("info", f"{key[0]}-{key[1]} restarts at the leader's log start offset "
                                    f"{answer.log_start_offset}")]
            fetcher.set_truncating(key, state, True)
            return []
        if error is not ErrorCode.none:
            return self._delay_partition(fetcher, key, state, error, now_ms)
        if _all_below_leader_start(log, answer.log_start_offset):
            dropped = (log.log_start_offset, log.log_end_offset)
            log.truncate_fully_and_start_at(log.log_end_offset)
            started_afresh = [LogLine("info", f"{key[0]}-{key[1]} holds only offsets {dropped[0]}-{dropped[1] - 1}, below "
                                          f"the leader's log start offset {answer.log_start_offset}: starts afresh "
                                          f"at {dropped[1]}")]
        else:
            started_afresh = []
        records = answer.records
        if records:
            try:
                if (base := _starts_inside(log, records)) is not None:
                    log.truncate_fully_and_start_at(base)
                log.append_as_follower(records, now_ms)
            except (CorruptRecordError, OffsetOutOfOrder) as exc:
                return started_afresh + self._delay_partition(fetcher, key, state, None, now_ms, str(exc))
            self.topic_stats.replicated_in(key[0], len(records))
            topic = self.metadata.topics.get(key[0])
            if self.config.topic_value(topic.configs if topic else {}, "flush.on.ack"):
                # DUR-3: flushed before the next fetch reports this offset and lets the HW pass it
                log.flush(now_ms)
            moved.append(key)
        if partition.update_follower_high_watermark(answer.high_watermark) and not records:
            moved.append(key)           # consumers waiting at this follower (KIP-392) may read on
        if answer.log_start_offset > log.log_start_offset:
            log.maybe_increment_log_start_offset(min(answer.log_start_offset, log.log_end_offset))
        return started_afresh

    def _delay_partition(self, fetcher: ReplicaFetcher, key: tuple[str, int], state: PartitionFetchState,
                         error: ErrorCode | None, now_ms: int, message: str = "") -> list:
        fetcher.delay(key, state, now_ms + self.config["replica.fetch.backoff.ms"])
        if error in _RETRIABLE_QUIETLY:
            return []
        what = error.name if error is not None else message
        return [LogLine("warning", f"Fetching {key[0]}-{key[1]} from broker {fetcher.leader_id} failed: {what}",
                    kind=f"fetching from broker {fetcher.leader_id} failed")]

    def _fetcher_failed(self, fetcher: ReplicaFetcher, now_ms: int) -> list:
        """No usable answer: back off, then a full fetch that replaces the session."""
        fetcher.session.failed()
        fetcher.backoff_until_ms = now_ms + self.config["replica.fetch.backoff.ms"]
        return []


def _all_below_leader_start(log: Any, leader_log_start_offset: int) -> bool:
    """Whether everything this replica holds lies below the leader's log start offset: deleted
    there (DeleteRecords), and perhaps never the leader's own. The leader's epoch cache starts at
    its log start, so its answer about an epoch before that could only say "ends at the log
    start": records this replica wrote in such an epoch, never committed, would stay below it,
    and come back with an old log start after a restart. The replica starts its log afresh."""
    return log.log_start_offset < log.log_end_offset <= leader_log_start_offset


def _starts_inside(log: Any, records: bytes) -> int | None:
    """The base offset of the first batch fetched when it begins below an empty log's start and
    holds it: the leader's log start offset lies inside that batch (DeleteRecords). The follower,
    which started its log again there, then starts it at the batch's base offset and keeps the
    whole batch, as Kafka does (KAFKA-6975); its log start offset follows the leader's next answer."""
    start = log.log_end_offset
    if start != log.log_start_offset:
        return None
    for _, header in iter_batches(records):
        return header.base_offset if header.base_offset < start <= header.base_offset + header.last_offset_delta \
            else None
    return None
