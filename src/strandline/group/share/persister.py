"""A partition leader's client of the share coordinator (Kafka's ``DefaultStatePersister``).

The leader of a partition read by a share group reads the share-partition's state from the share
coordinator when it takes the share-partition, initializes it on first use, and writes it after
every change. Each request goes to the broker leading the key's ``__share_group_state``
partition, as this broker knows it, on the broker's ``share-state`` channel; ``done`` gets the
partition's error (COORDINATOR_NOT_AVAILABLE when no coordinator is known, and the topic is
created if it does not exist; NETWORK_EXCEPTION when no answer came).
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.coordination.metadata import MetadataCache
from strandline.core.effects import Effect
from strandline.core.outbox import Outbox
from strandline.group.share.coordinator import invalid_batches, partition_of
from strandline.group.share.partition import RecordState, StateBatch
from strandline.group.share.records import ShareStateKey
from strandline.group.share.state_topic import SHARE_STATE_TOPIC
from strandline.protocol import api
from strandline.protocol.api import ApiKey

#: ``done(error, state epoch, start offset, batches, now_ms)``
ReadDone = Callable[[ErrorCode, int, int, "list[StateBatch]", int], list[Effect]]
#: ``done(error, start offset, leader epoch, now_ms)`` (start offset -1: never initialized)
SummaryDone = Callable[[ErrorCode, int, int, int], list[Effect]]
Done = Callable[[ErrorCode, int], list[Effect]]
WRITE_VERSION = 0


class SharePersister:
    def __init__(self, config: Any, metadata: MetadataCache, outbox: Outbox,
                 create_topic: Callable[[int], list[Effect]]) -> None:
        """``create_topic(now_ms)``: create ``__share_group_state`` (its first use)."""
        self.config = config
        self.metadata = metadata
        self.outbox = outbox
        self.create_topic = create_topic

    def coordinator(self, key: ShareStateKey) -> Any | None:
        topic = self.metadata.topics.get(SHARE_STATE_TOPIC)
        if topic is None:
            return None
        state = topic.states.get(partition_of(key, topic.num_partitions))
        if state is None or state.leader < 0:
            return None
        return self.metadata.brokers.get(state.leader)

    def read(self, key: ShareStateKey, leader_epoch: int, done: ReadDone, now_ms: int) -> list[Effect]:
        body = {"group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [
            {"partition": key.partition, "leader_epoch": leader_epoch}]}]}

        def answered(result: Any, error: ErrorCode, at_ms: int) -> list[Effect]:
            if result is None or error is not ErrorCode.none:
                return done(error, 0, -1, [], at_ms)
            try:
                batches = [StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                           for b in result.state_batches]
            except ValueError:          # a state no coordinator of ours writes: as no answer
                return done(ErrorCode.unknown_server_error, 0, -1, [], at_ms)
            if invalid_batches(tuple(batches), result.start_offset) is not None:
                return done(ErrorCode.unknown_server_error, 0, -1, [], at_ms)
            return done(error, result.state_epoch, result.start_offset, batches, at_ms)
        return self._send(key, ApiKey.READ_SHARE_GROUP_STATE, 0, body, answered, now_ms)

    def read_summary(self, key: ShareStateKey, done: SummaryDone, now_ms: int) -> list[Effect]:
        body = {"group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [
            {"partition": key.partition, "leader_epoch": -1}]}]}

        def answered(result: Any, error: ErrorCode, at_ms: int) -> list[Effect]:
            if result is None or error is not ErrorCode.none:
                return done(error, -1, -1, at_ms)
            return done(error, int(result.start_offset), int(result.leader_epoch), at_ms)
        return self._send(key, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, body, answered, now_ms)

    def delete(self, key: ShareStateKey, done: Done, now_ms: int) -> list[Effect]:
        body = {"group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [
            {"partition": key.partition}]}]}
        return self._send(key, ApiKey.DELETE_SHARE_GROUP_STATE, 0, body,
                          lambda _, error, at_ms: done(error, at_ms), now_ms)

    def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int, done: Done,
                   now_ms: int) -> list[Effect]:
        body = {"group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [
            {"partition": key.partition, "state_epoch": state_epoch, "start_offset": start_offset}]}]}
        return self._send(key, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, body,
                          lambda _, error, at_ms: done(error, at_ms), now_ms)

    def write(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: list[StateBatch], done: Done, now_ms: int) -> list[Effect]:
        body = {"group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [
            {"partition": key.partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch,
             "start_offset": start_offset,
             "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                "delivery_state": int(b.state), "delivery_count": b.delivery_count}
                               for b in batches]}]}]}
        return self._send(key, ApiKey.WRITE_SHARE_GROUP_STATE, WRITE_VERSION, body,
                          lambda _, error, at_ms: done(error, at_ms), now_ms)

    def _send(self, key: ShareStateKey, api_key: ApiKey, version: int, body: dict[str, Any],
              answered: Callable[[Any, ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        broker = self.coordinator(key)
        if broker is None:
            effects = self.create_topic(now_ms) if SHARE_STATE_TOPIC not in self.metadata.topics else []
            return effects + answered(None, ErrorCode.coordinator_not_available, now_ms)
        client_id = f"strandline-broker-{self.config.broker_id}"

        def frame_for(correlation_id: int) -> bytes:
            return api.encode_request(api_key, version, correlation_id, client_id, body)

        def on_frame(frame: bytes | None, at_ms: int) -> list[Effect]:
            if frame is None:
                return answered(None, ErrorCode.network_exception, at_ms)
            try:
                decoded = api.decode_response(api_key, version, frame)
                result = decoded.results[0].partitions[0]
            except Exception:     # an answer that does not decode, or names no partition: as none
                return answered(None, ErrorCode.network_exception, at_ms)
            return answered(result, ErrorCode(int(result.error_code)), at_ms)

        return self.outbox.send(broker, "share-state", frame_for, on_frame, now_ms)
