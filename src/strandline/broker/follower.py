"""Role changes and the follower side of replication in the broker core (REP-1, EPO-2, EPO-4).

A broker becomes leader or follower of a partition only through LeaderAndIsr. As follower it
pulls from the leader with :class:`~strandline.replication.fetcher.ReplicaFetcher` state: first
truncation (OffsetsForLeaderEpoch, KIP-279; or the checkpointed high watermark in the legacy
mode), then long-poll Fetch requests from its log end offset with ``replica_id`` set, appending
the leader's batches as they are (never re-encoded) and taking HW = min(own LEO, leader's HW).
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.broker.effects import Log
from strandline.coordination.metadata import TopicMetadata
from strandline.log.log import OffsetOutOfOrder
from strandline.log.segment import CorruptRecordError
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.replication.fetcher import PartitionFetchState, ReplicaFetcher
from strandline.replication.partition import LeaderAndIsr, Partition
from strandline.replication.truncation import after_offsets_for_leader_epoch, legacy_truncation_offset

FETCH_VERSION = 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
_RETRIABLE_QUIETLY = {ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch,
                      ErrorCode.fenced_leader_epoch, ErrorCode.unknown_topic_or_partition}


class Follower:
    """Mixin of :class:`strandline.broker.broker.Broker`: role changes and replica fetching."""

    broker_id: int
    partitions: dict[tuple[str, int], Partition]
    fetchers: dict[int, ReplicaFetcher]

    # ------------------------------------------------------------------ role changes

    def _open_partition(self, topic: TopicMetadata, index: int, now_ms: int) -> Partition:
        """The partition object of a local replica, opening (or creating) its log."""
        key = (topic.name, index)
        partition = self.partitions.get(key)
        if partition is not None:
            return partition
        config = self.config  # type: ignore[attr-defined]
        log_config = config.log_config(topic.configs)
        log = self.logs.get_or_create_log(topic.name, index, log_config, now_ms)  # type: ignore[attr-defined]
        hws = self._high_watermarks()  # type: ignore[attr-defined]
        partition = Partition(topic.name, index, self.broker_id, log,
                              replica_lag_time_max_ms=config["replica.lag.time.max.ms"])
        partition.high_watermark = min(max(hws.get(key, 0), log.log_start_offset), log.log_end_offset)
        partition.log_append_time = log_config.message_timestamp_type == "LogAppendTime"
        partition.rebuild_producer_state()
        self.partitions[key] = partition
        return partition

    def _become_leader(self, partition: Partition, state: LeaderAndIsr, replicas: tuple[int, ...],
                       now_ms: int) -> list:
        key = (partition.topic, partition.index)
        self._stop_fetching([key])
        was_follower = not partition.is_leader and partition.leader_epoch >= 0
        partition.make_leader(state, replicas, now_ms)
        if was_follower:
            partition.rebuild_producer_state()   # a follower appended without tracking producers
        return [Log("info", f"Leader of {key[0]}-{key[1]} in epoch {state.leader_epoch}, ISR {list(state.isr)}, "
                            f"LEO {partition.log_end_offset}, HW {partition.high_watermark}")] + \
            self._on_leadership(partition, True, now_ms)  # type: ignore[attr-defined]

    def _become_follower(self, partition: Partition, state: LeaderAndIsr, replicas: tuple[int, ...],
                         now_ms: int) -> list:
        key = (partition.topic, partition.index)
        self._stop_fetching([key])
        partition.make_follower(state, replicas)
        effects: list = self._on_leadership(partition, False, now_ms)  # type: ignore[attr-defined]
        effects.append(Log("info", f"Follower of {key[0]}-{key[1]} in epoch {state.leader_epoch}, "
                                   f"leader {state.leader}, LEO {partition.log_end_offset}"))
        if state.leader < 0:
            return effects
        fetch_state = PartitionFetchState(state.leader_epoch)
        if self.config["replication.truncation"] == "high-watermark":  # type: ignore[attr-defined]
            effects.extend(self._truncate(partition, legacy_truncation_offset(
                partition.high_watermark, partition.log_end_offset), "its high watermark (legacy mode)"))
            fetch_state.truncating = False
        # the leader's broker may not have registered yet: its fetcher then waits for the endpoint
        fetcher = self.fetchers.setdefault(state.leader, ReplicaFetcher(state.leader))
        fetcher.partitions[key] = fetch_state
        return effects

    def _stop_fetching(self, keys: list[tuple[str, int]]) -> None:
        for fetcher in self.fetchers.values():
            for key in keys:
                fetcher.partitions.pop(key, None)

    def _truncate(self, partition: Partition, offset: int, why: str) -> list:
        log = partition.log
        if offset >= log.log_end_offset:
            return []
        before = log.log_end_offset
        log.truncate_to(offset)
        partition.high_watermark = min(partition.high_watermark, log.log_end_offset)
        partition.rebuild_producer_state()
        return [Log("info", f"Truncated {partition.topic}-{partition.index} from {before} to "
                            f"{log.log_end_offset}: {why}")]

    # ------------------------------------------------------------------ fetching

    def _fetchers_with_leader(self) -> list[ReplicaFetcher]:
        """Fetchers whose leader's endpoint is known; the others wait for the metadata to name it
        (LeaderAndIsr's live leaders, UpdateMetadata), then start at once."""
        brokers = self.metadata.brokers  # type: ignore[attr-defined]
        return [f for f in self.fetchers.values() if f.leader_id in brokers]

    def _fetcher_deadline(self) -> int | None:
        times = [t for f in self._fetchers_with_leader() if (t := f.next_wakeup_ms()) is not None]
        return min(times) if times else None

    def _maybe_send_fetches(self, now_ms: int) -> list:
        effects: list = []
        for fetcher in self._fetchers_with_leader():
            if fetcher.in_flight or fetcher.backoff_until_ms > now_ms or not fetcher.partitions:
                continue
            truncating = list(fetcher.ready(now_ms, True))
            if truncating:
                effects.extend(self._send_offsets_for_leader_epoch(fetcher, truncating, now_ms))
                continue
            fetching = list(fetcher.ready(now_ms, False))
            if fetching:
                effects.extend(self._send_fetch(fetcher, fetching, now_ms))
        return effects

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
                effects.extend(self._truncate(partition, partition.high_watermark, "no leader epochs"))
                state.truncating = False
                continue
            asked[key] = state.leader_epoch
            by_topic.setdefault(key[0], []).append({"partition": key[1], "current_leader_epoch": state.leader_epoch,
                                                    "leader_epoch": latest})
        if not by_topic:
            return effects + self._maybe_send_fetches(now_ms)
        body = {"replica_id": self.broker_id,
                "topics": [{"topic": n, "partitions": p} for n, p in by_topic.items()]}
        def on_response(resp: Any, when_ms: int) -> list:
            out: list = []
            for t in resp.topics:
                for p in t.partitions:
                    out.extend(self._on_epoch_end_offset(fetcher, (t.topic, p.partition), asked, p, when_ms))
            return out + self._maybe_send_fetches(when_ms)

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
                resp = api.decode_response(api_key, version, frame)
            except Exception as exc:
                return [Log("warning", f"Bad {api.api_name(api_key)} answer from broker {fetcher.leader_id}: {exc}")] \
                    + self._fetcher_failed(fetcher, when_ms)
            return on_response(resp, when_ms)

        return self._send_to_broker(  # type: ignore[attr-defined]
            fetcher.leader_id, "fetcher",
            lambda cid: api.encode_request(api_key, version, cid, self._client_id(), body), on_frame, now_ms)

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
        effects = self._truncate(partition, result.offset,
                                 f"leader {fetcher.leader_id} has epoch {answer.leader_epoch} "
                                 f"ending at {answer.end_offset}")
        if result.done:
            state.truncating = False
        return effects

    def _send_fetch(self, fetcher: ReplicaFetcher, ready: list, now_ms: int) -> list:
        cfg = self.config  # type: ignore[attr-defined]
        by_topic: dict[str, list] = {}
        asked: dict[tuple[str, int], tuple[int, int]] = {}
        for key, state in ready:
            partition = self.partitions[key]
            asked[key] = (state.leader_epoch, partition.log_end_offset)
            by_topic.setdefault(key[0], []).append({
                "partition": key[1], "current_leader_epoch": state.leader_epoch,
                "fetch_offset": partition.log_end_offset, "log_start_offset": partition.log_start_offset,
                "partition_max_bytes": cfg["replica.fetch.max.bytes"]})
        body = {"replica_id": self.broker_id, "max_wait": cfg["replica.fetch.wait.max.ms"],
                "min_bytes": cfg["replica.fetch.min.bytes"], "max_bytes": cfg["replica.fetch.response.max.bytes"],
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": n, "partitions": p} for n, p in by_topic.items()],
                "forgotten_topics_data": [], "rack_id": ""}
        def on_response(resp: Any, when_ms: int) -> list:
            out: list = []
            moved: list[tuple[str, int]] = []
            for t in resp.responses:
                for p in t.partitions:
                    key = (t.topic, p.partition_index)
                    out.extend(self._on_fetched(fetcher, key, asked.get(key), p, when_ms, moved))
            if moved:
                out.extend(self.fetch_purgatory.check_keys(moved, when_ms))  # type: ignore[attr-defined]
            return out + self._maybe_send_fetches(when_ms)

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
                log.truncate_fully_and_start_at(answer.log_start_offset)
                partition.high_watermark = answer.log_start_offset
                partition.rebuild_producer_state()
                return [Log("info", f"{key[0]}-{key[1]} restarts at the leader's log start offset "
                                    f"{answer.log_start_offset}")]
            state.truncating = True
            return []
        if error is not ErrorCode.none:
            return self._delay_partition(fetcher, key, state, error, now_ms)
        records = answer.records
        if records:
            try:
                log.append_as_follower(records, now_ms)
            except (CorruptRecordError, OffsetOutOfOrder) as exc:
                return self._delay_partition(fetcher, key, state, None, now_ms, str(exc))
            topic = self.metadata.topics.get(key[0])  # type: ignore[attr-defined]
            if self.config.topic_value(topic.configs if topic else {}, "flush.on.ack"):  # type: ignore
                # DUR-3: flushed before the next fetch reports this offset and lets the HW pass it
                log.flush(now_ms)
            moved.append(key)
        leader_hw = answer.high_watermark
        new_hw = min(log.log_end_offset, leader_hw)
        if new_hw > partition.high_watermark:
            partition.high_watermark = new_hw
        if answer.log_start_offset > log.log_start_offset:
            log.maybe_increment_log_start_offset(min(answer.log_start_offset, log.log_end_offset))
        return []

    def _delay_partition(self, fetcher: ReplicaFetcher, key: tuple[str, int], state: PartitionFetchState,
                         error: ErrorCode | None, now_ms: int, message: str = "") -> list:
        state.delayed_until_ms = now_ms + self.config["replica.fetch.backoff.ms"]  # type: ignore[attr-defined]
        if error in _RETRIABLE_QUIETLY:
            return []
        what = error.name if error is not None else message
        return [Log("warning", f"Fetching {key[0]}-{key[1]} from broker {fetcher.leader_id} failed: {what}")]

    def _fetcher_failed(self, fetcher: ReplicaFetcher, now_ms: int) -> list:
        fetcher.backoff_until_ms = now_ms + self.config["replica.fetch.backoff.ms"]  # type: ignore[attr-defined]
        return []
