"""The follower side of replication: which partitions a broker pulls from each leader, and how.

One :class:`ReplicaFetcher` per leader broker (Kafka's ReplicaFetcherThread with
``num.replica.fetchers=1``), which runs its own loop (:meth:`ReplicaFetcher.do_work`). A partition
enters it *truncating*: before its first fetch the follower cuts its log where it diverges from
the leader's (OffsetsForLeaderEpoch with KIP-279's loop, EPO-2), or at its high watermark in the
legacy mode (EPO-4). Then long-poll Fetch requests from its log end offset with ``replica_id``
set (REP-1); the leader's batches are appended as they are (never re-encoded) and the high
watermark follows the leader's (:meth:`Partition.update_follower_high_watermark`). At most one
request per leader is in flight; a partition that failed waits ``replica.fetch.backoff.ms``. Pure:
the broker core sends the requests and feeds the answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.coordination.metadata import MetadataCache
from strandline.log.appends import OffsetOutOfOrder
from strandline.log.log import Log
from strandline.log.segment import CorruptRecordError
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.protocol.hot_readers import FETCH_RESPONSE_VERSION, decode_fetch_response
from strandline.protocol.hot_responses import FETCH_REQUEST_VERSION, encode_fetch_request
from strandline.protocol.records import Buffer, iter_batches
from strandline.replication.fetch_session import INITIAL_EPOCH, ChangeJournal, Position, SessionHandler
from strandline.replication.partition import Partition
from strandline.replication.purgatory import Purgatory
from strandline.replication.quota import ReplicationQuota, throttled
from strandline.replication.topic_stats import BrokerTopicStats
from strandline.replication.truncation import after_offsets_for_leader_epoch

FETCH_VERSION = 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
_RETRIABLE_QUIETLY = {ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch,
                      ErrorCode.fenced_leader_epoch, ErrorCode.unknown_topic_or_partition}
Key = tuple[str, int]


@dataclass
class FetcherContext:
    """What every fetcher of a broker shares, from its :class:`ReplicaFetcherManager`: the replica
    manager's partitions, metadata, outbox, fetch purgatory (consumers' fetches wait on a
    follower's HW too), topic stats and change journal, the follower-side quota, and ``wake``,
    which lets every fetcher send what it can (after an answer)."""
    config: Any
    broker_id: int
    partitions: dict[tuple[str, int], Partition]
    metadata: MetadataCache
    outbox: Outbox
    fetch_purgatory: Purgatory
    topic_stats: BrokerTopicStats
    journal: ChangeJournal | None
    follower_quota: ReplicationQuota
    wake: Callable[[int], list[Effect]]


def truncate(partition: Partition, offset: int, why: str) -> list[Effect]:
    """Cut a follower's log at ``offset`` (:meth:`Partition.truncate_to`), saying so when it cut."""
    before = partition.truncate_to(offset)
    if before is None:
        return []
    return [LogLine("info", f"Truncated {partition.topic}-{partition.index} from {before} to "
                        f"{partition.log_end_offset}: {why}")]


@dataclass(slots=True)
class PartitionFetchState:
    leader_epoch: int
    truncating: bool = True
    delayed_until_ms: int = 0


class IncrementalFetch(NamedTuple):
    """What an incremental Fetch carries (:meth:`ReplicaFetcher._incremental_positions`)."""
    named: dict[Key, Position]      # the partitions whose position changed, at their new position
    forgotten: list[Key]            # those the session has that are fetched no more (now)
    any_left: bool                  # whether the session still fetches any partition
    journal_position: int           # the change journal's position and epoch before they were read
    journal_epoch: int


@dataclass
class ReplicaFetcher:
    """Pulls from one leader (Kafka's ReplicaFetcherThread): :meth:`do_work` is one turn of its
    loop; each request goes to the leader's endpoint as the metadata names it then, and its answer
    is applied here (:meth:`_on_fetched`, :meth:`_on_epoch_end_offset`).

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
    context: FetcherContext = field(kw_only=True, repr=False, compare=False)   # shared by every fetcher

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
        truncating: list[tuple[Key, PartitionFetchState]] = []
        fetching: list[tuple[Key, PartitionFetchState]] = []
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

    # -- the loop ------------------------------------------------------------------------------

    def do_work(self, now_ms: int) -> list[Effect]:
        """One turn of the loop (Kafka's ``doWork``): unless a request is in flight or the fetcher
        backs off, ask the leader where the partitions truncating diverge, else Fetch the others
        (incrementally when the session allows)."""
        if self.in_flight or self.backoff_until_ms > now_ms or not self.partitions:
            return []
        truncating = self.ready_truncating(now_ms)
        if truncating:
            return self._send_offsets_for_leader_epoch(truncating, now_ms)
        incremental = self._incremental_positions(now_ms)
        if incremental is not None:
            return self._send_fetch([], now_ms, incremental) if incremental.any_left else []
        _, fetching = self.ready(now_ms)
        if fetching:
            return self._send_fetch(fetching, now_ms)
        return []

    # -- requests and answers ------------------------------------------------------------------

    def _incremental_positions(self, now_ms: int) -> IncrementalFetch | None:
        """For an incremental Fetch: the positions of the partitions that changed since the last
        Fetch was built and those that may be fetched again (a delay past), the journal's position
        and epoch before they were read, and whether any partition is left to fetch; None when the
        Fetch must be built from every partition (a new session, a fallen-off journal reader, a new
        replica.fetch.max.bytes, or a topic throttling followers)."""
        ctx = self.context
        journal = ctx.journal
        if (journal is None or self.session.epoch == INITIAL_EPOCH
                or self.max_bytes != ctx.config["replica.fetch.max.bytes"] or self._follower_throttles()):
            return None
        changed = journal.since(self.journal_position, self.journal_epoch)
        if changed is None:
            return None
        position, epoch = journal.position, journal.epoch
        states = self.partitions
        candidates = dict(self.dirty)
        candidates.update(self.delayed)
        for key in changed:
            if key in states:
                candidates[key] = None
        max_bytes = self.max_bytes
        sent = self.session.sent
        partitions = ctx.partitions
        named: dict[Key, Position] = {}
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
        return IncrementalFetch(named, forgotten, left > 0, position, epoch)

    def _built(self, now_ms: int, position: int, epoch: int, full: bool) -> None:
        """A Fetch was built: what changes from now on goes into the next one."""
        ctx = self.context
        self.dirty.clear()
        if full:
            self.delayed = {key: None for key, s in self.partitions.items() if s.delayed_until_ms > now_ms}
        else:
            self.delayed = {key: None for key in self.delayed
                               if (s := self.partitions.get(key)) is not None and s.delayed_until_ms > now_ms}
        self.journal_position, self.journal_epoch = position, epoch
        self.max_bytes = ctx.config["replica.fetch.max.bytes"]

    def _client_id(self) -> str:
        ctx = self.context
        return f"strandline-replica-fetcher-{ctx.broker_id}"

    def _send_offsets_for_leader_epoch(self, ready: list[tuple[Key, PartitionFetchState]],
                                       now_ms: int) -> list[Effect]:
        ctx = self.context
        by_topic: dict[str, list[dict[str, int]]] = {}
        asked: dict[Key, int] = {}
        effects: list[Effect] = []
        for key, state in ready:
            partition = ctx.partitions[key]
            latest = partition.log.leader_epoch_cache.latest_epoch
            if latest < 0:
                # nothing written under any epoch: the high watermark is all we know
                effects.extend(truncate(partition, partition.high_watermark, "no leader epochs"))
                self.set_truncating(key, state, False)
                continue
            asked[key] = state.leader_epoch
            by_topic.setdefault(key[0], []).append({"partition": key[1], "current_leader_epoch": state.leader_epoch,
                                                    "leader_epoch": latest})
        if not by_topic:
            return effects + ctx.wake(now_ms)
        body = {"replica_id": ctx.broker_id,
                "topics": [{"topic": n, "partitions": p} for n, p in by_topic.items()]}
        def on_response(resp: Any, when_ms: int) -> list[Effect]:
            out: list[Effect] = []
            for t in resp.topics:
                for p in t.partitions:
                    out.extend(self._on_epoch_end_offset((t.topic, p.partition), asked, p, when_ms))
            return out + ctx.wake(when_ms)

        return effects + self._fetcher_request(ApiKey.OFFSET_FOR_LEADER_EPOCH,
                                               OFFSET_FOR_LEADER_EPOCH_VERSION, body, on_response, now_ms)

    def _fetcher_request(self, api_key: int, version: int, body: dict[str, Any],
                         on_response: Callable[[Any, int], list[Effect]], now_ms: int) -> list[Effect]:
        """One request of this fetcher to its leader; a failed connection or a bad answer backs it off."""
        ctx = self.context
        self.in_flight = True

        def on_frame(frame: bytes | None, when_ms: int) -> list[Effect]:
            self.in_flight = False
            if frame is None:
                return self._fetcher_failed(when_ms)
            try:
                resp = None
                if api_key == ApiKey.FETCH and version == FETCH_RESPONSE_VERSION:
                    resp = decode_fetch_response(frame)     # records stay views of the frame (no copy)
                if resp is None:        # not the hand-read layout: kio reads it (and names what is wrong)
                    resp = api.decode_response(api_key, version, frame)
            except Exception as exc:
                return [LogLine("warning", f"Bad {api.api_name(api_key)} answer from broker {self.leader_id}: {exc}")] \
                    + self._fetcher_failed(when_ms)
            return on_response(resp, when_ms)

        client_id = self._client_id()
        if api_key == ApiKey.FETCH and version == FETCH_REQUEST_VERSION:
            encode = lambda cid: encode_fetch_request(cid, client_id, body)   # noqa: E731  (by hand: hot)
        else:
            encode = lambda cid: api.encode_request(api_key, version, cid, client_id, body)   # noqa: E731
        return ctx.outbox.send(ctx.metadata.brokers.get(self.leader_id), "fetcher", encode, on_frame, now_ms)

    def _on_epoch_end_offset(self, key: Key, asked: dict[Key, int], answer: Any,
                             now_ms: int) -> list[Effect]:
        ctx = self.context
        state = self.partitions.get(key)
        partition = ctx.partitions.get(key)
        if state is None or partition is None or asked.get(key) != state.leader_epoch or not state.truncating:
            return []
        error = ErrorCode(int(answer.error_code))
        if error is not ErrorCode.none:
            return self._delay_partition(key, state, error, now_ms)
        log = partition.log
        result = after_offsets_for_leader_epoch(answer.leader_epoch, answer.end_offset, log.leader_epoch_cache,
                                                log.log_end_offset, partition.high_watermark)
        effects = truncate(partition, result.offset,
                                 f"leader {self.leader_id} has epoch {answer.leader_epoch} "
                                 f"ending at {answer.end_offset}")
        if result.done:
            self.set_truncating(key, state, False)
        return effects

    def _throttled(self, key: tuple[str, int]) -> bool:
        """A replica of this broker outside the ISR that the topic throttles on the follower side."""
        ctx = self.context
        partition = ctx.partitions.get(key)
        topic = ctx.metadata.topics.get(key[0])
        return (partition is not None and topic is not None and ctx.broker_id not in partition.isr
                and throttled(topic.configs, "follower.replication.throttled.replicas", key[1], ctx.broker_id))

    def _follower_throttles(self) -> bool:
        """Whether any topic throttles replicas on the follower side (rarely: during a move)."""
        ctx = self.context
        return any(t.configs.get("follower.replication.throttled.replicas") for t in ctx.metadata.topics.values())

    def _send_fetch(self, ready: list[tuple[Key, PartitionFetchState]], now_ms: int,
                    incremental: IncrementalFetch | None = None) -> list[Effect]:
        """A Fetch of ``ready`` (every partition that may be fetched now), or, for an incremental
        one, of what :meth:`_incremental_positions` found changed."""
        ctx = self.context
        cfg = ctx.config
        max_bytes = cfg["replica.fetch.max.bytes"]
        throttled_keys: set[Key] = set()
        asked_at: Callable[[Key], Position | None]
        if incremental is not None:
            changes, dropped, _, journal_position, journal_epoch = incremental
            # what each partition is fetched at: named now, or as the session last heard (forgotten: none)
            sent, gone = self.session.sent, set(dropped)
            session_id, epoch, named, forgotten = self.session.build_changes(changes, dropped)

            def session_asked_at(key: Key) -> Position | None:
                position = named.get(key)
                return position if position is not None or key in gone else sent.get(key)
            asked_at = session_asked_at
        else:
            throttled_keys = {key for key, _ in ready if self._throttled(key)} if self._follower_throttles() else set()
            if throttled_keys and ctx.follower_quota.exceeded(now_ms):
                # over follower.replication.throttled.rate: those replicas wait, the others fetch
                ready = [(key, state) for key, state in ready if key not in throttled_keys]
                throttled_keys = set()
                if not ready:
                    self.backoff_until_ms = now_ms + cfg["replica.fetch.backoff.ms"]
                    return []
            journal_position = ctx.journal.position if ctx.journal is not None else -1
            journal_epoch = ctx.journal.epoch if ctx.journal is not None else -1
            partitions = ctx.partitions
            positions: dict[Key, Position] = {}   # epoch, fetch offset, log start, max
            for key, state in ready:
                log = partitions[key].log
                positions[key] = (state.leader_epoch, log.log_end_offset, log.log_start_offset, max_bytes)
            # an incremental fetch session (KIP-227): only the partitions whose position changed are named
            session_id, epoch, named, forgotten = self.session.build(positions)
            asked_at = positions.get
        self._built(now_ms, journal_position, journal_epoch, incremental is None)
        by_topic: dict[str, list[dict[str, int]]] = {}
        for (topic, index), (leader_epoch, fetch_offset, log_start_offset, _) in named.items():
            by_topic.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": leader_epoch, "fetch_offset": fetch_offset,
                "log_start_offset": log_start_offset, "partition_max_bytes": max_bytes})
        forget: dict[str, list[int]] = {}
        for topic, index in forgotten:
            forget.setdefault(topic, []).append(index)
        body = {"replica_id": ctx.broker_id, "max_wait": cfg["replica.fetch.wait.max.ms"],
                "min_bytes": cfg["replica.fetch.min.bytes"], "max_bytes": cfg["replica.fetch.response.max.bytes"],
                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic": n, "partitions": p} for n, p in by_topic.items()],
                "forgotten_topics_data": [{"topic": n, "partitions": p} for n, p in forget.items()], "rack_id": ""}

        def on_response(resp: Any, when_ms: int) -> list[Effect]:
            error = ErrorCode(int(resp.error_code))
            self.session.succeeded(error, int(resp.session_id))
            if error in (ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch):
                return ctx.wake(when_ms)      # the session is gone or out of step: a full fetch now
            if error is not ErrorCode.none:
                return self._fetcher_failed(when_ms)
            out: list[Effect] = []
            moved: list[Key] = []
            for t in resp.responses:
                for p in t.partitions:
                    key = (t.topic, p.partition_index)
                    if key in throttled_keys and p.records:
                        ctx.follower_quota.record(len(p.records), when_ms)
                    position = asked_at(key)
                    out.extend(self._on_fetched(key, position and position[:2], p, when_ms, moved))
            if moved:
                out.extend(ctx.fetch_purgatory.check_keys(moved, when_ms))
            return out + ctx.wake(when_ms)

        return self._fetcher_request(ApiKey.FETCH, FETCH_VERSION, body, on_response, now_ms)

    def _on_fetched(self, key: Key, asked: tuple[int, int] | None,
                    answer: Any, now_ms: int, moved: list[Key]) -> list[Effect]:
        ctx = self.context
        state = self.partitions.get(key)
        partition = ctx.partitions.get(key)
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
            self.set_truncating(key, state, True)
            return []
        if error is not ErrorCode.none:
            return self._delay_partition(key, state, error, now_ms)
        started_afresh: list[Effect]
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
                return started_afresh + self._delay_partition(key, state, None, now_ms, str(exc))
            ctx.topic_stats.replicated_in(key[0], len(records))
            topic = ctx.metadata.topics.get(key[0])
            if ctx.config.topic_value(topic.configs if topic else {}, "flush.on.ack"):
                # DUR-3: flushed before the next fetch reports this offset and lets the HW pass it
                log.flush(now_ms)
            moved.append(key)
        if partition.update_follower_high_watermark(answer.high_watermark) and not records:
            moved.append(key)           # consumers waiting at this follower (KIP-392) may read on
        if answer.log_start_offset > log.log_start_offset:
            log.maybe_increment_log_start_offset(min(answer.log_start_offset, log.log_end_offset))
        return started_afresh

    def _delay_partition(self, key: tuple[str, int], state: PartitionFetchState,
                         error: ErrorCode | None, now_ms: int, message: str = "") -> list[Effect]:
        ctx = self.context
        self.delay(key, state, now_ms + ctx.config["replica.fetch.backoff.ms"])
        if error in _RETRIABLE_QUIETLY:
            return []
        what = error.name if error is not None else message
        return [LogLine("warning", f"Fetching {key[0]}-{key[1]} from broker {self.leader_id} failed: {what}",
                    kind=f"fetching from broker {self.leader_id} failed")]

    def _fetcher_failed(self, now_ms: int) -> list[Effect]:
        """No usable answer: back off, then a full fetch that replaces the session."""
        ctx = self.context
        self.session.failed()
        self.backoff_until_ms = now_ms + ctx.config["replica.fetch.backoff.ms"]
        return []


def _all_below_leader_start(log: Log, leader_log_start_offset: int) -> bool:
    """Whether everything this replica holds lies below the leader's log start offset: deleted
    there (DeleteRecords), and perhaps never the leader's own. The leader's epoch cache starts at
    its log start, so its answer about an epoch before that could only say "ends at the log
    start": records this replica wrote in such an epoch, never committed, would stay below it,
    and come back with an old log start after a restart. The replica starts its log afresh."""
    return log.log_start_offset < log.log_end_offset <= leader_log_start_offset


def _starts_inside(log: Log, records: Buffer) -> int | None:
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
