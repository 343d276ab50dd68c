"""Appends as leader (Kafka's ReplicaManager.appendToLocalLog) and the produce purgatory.

:meth:`LeaderWrites.append_to_leader` validates one partition's batch (``validation``: the batch
itself, ``compression.type``, keys in a compacted topic) and appends it, after
:meth:`~LeaderWrites.up_convert` made one of a Produce v0-v2 message set of format v0 or v1;
``ReplicaManager.append_records`` calls them and parks an acks=all answer in :attr:`purgatory`
as a :class:`DelayedProduce`; :meth:`append_internal` is the broker's own acks=all write
(``__consumer_offsets``). Pure: it returns effects.
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.config_key import LONG_MAX
from strandline.core.effects import Effect
from strandline.coordination.metadata import MetadataCache, TopicMetadata
from strandline.log.producer_state import VerificationGuard
from strandline.protocol.legacy_records import first_magic, up_convert
from strandline.protocol.markers import build_marker
from strandline.protocol.records import Buffer, read_header
from strandline.replication.partition import Partition
from strandline.replication.purgatory import DelayedCall, ProduceResult, Purgatory
from strandline.replication.validation import CODECS, apply_compression_type, check_keys, validate_produce_records


class LeaderWrites:
    def __init__(self, config: Any, metadata: MetadataCache, partitions: dict[tuple[str, int], Partition],
                 fetch_purgatory: Purgatory) -> None:
        self.config = config
        self.metadata = metadata
        self.partitions = partitions
        self.fetch_purgatory = fetch_purgatory
        self.purgatory = Purgatory()            # the produce purgatory: acks=all answers waiting on the HW

    def append_to_leader(self, topic: TopicMetadata, index: int, records: Buffer | None, acks: int,
                         now_ms: int, transactional: bool = False,
                         guard: VerificationGuard | None = None) -> tuple[ProduceResult, int | None]:
        """Validate and append one partition's batch as leader. Returns its :class:`ProduceResult`
        and, when acks=all, the offset the high watermark must reach. ``transactional``: the request names a
        transactional id (Kafka refuses transactional records without one). With
        ``transaction.partition.verification.enable``, a transactional batch that opens its
        producer's transaction is appended only under ``guard``, the coordinator's confirmation
        (KIP-890; :meth:`ReplicaManager.append_records` asks for it)."""
        partition = self.partitions.get((topic.name, index))
        if partition is None or not partition.is_leader:
            return ProduceResult(ErrorCode.not_leader_or_follower), None
        log_config = partition.log.config
        checked = validate_produce_records(
            records, log_config.max_message_bytes,
            log_config.message_timestamp_difference_max_ms if log_config.message_timestamp_type == "CreateTime"
            and log_config.message_timestamp_difference_max_ms < LONG_MAX else None, now_ms)
        if checked.error is not ErrorCode.none:
            return ProduceResult(checked.error, -1, -1, -1 if checked.early else partition.log_start_offset,
                                 checked.message), None
        assert records is not None and checked.header is not None     # as validation passed
        if checked.header.is_transactional and not transactional:
            return ProduceResult(ErrorCode.transactional_id_authorization_failed, -1, -1, partition.log_start_offset,
                                 "transactional records need the producer's transactional id"), None
        records, checked = apply_compression_type(records, checked.header,
                                                  self.config.topic_value(topic.configs, "compression.type"),
                                                  log_config.max_message_bytes)
        if checked.error is ErrorCode.none and log_config.compacts:
            assert checked.header is not None
            checked = check_keys(records, checked.header, topic.name, index)
        if checked.error is not ErrorCode.none:
            return ProduceResult(checked.error, -1, -1, partition.log_start_offset, checked.message,
                                 checked.record_errors or ()), None
        header = checked.header
        assert header is not None           # every check passed
        min_isr = self.config.topic_value(topic.configs, "min.insync.replicas")
        if records.__class__ is not memoryview or records.readonly:
            records = bytearray(records)        # stamped in place: a copy unless it is the request's own buffer
        # a writable memoryview (the request's own buffer) is stamped in place as a bytearray is
        verify = transactional and self.config["transaction.partition.verification.enable"]
        outcome = partition.append_records_to_leader(records, header, acks, min_isr, now_ms,  # type: ignore[arg-type]  # a writable view
                                                     verify=verify, guard=guard)
        if outcome.error is not ErrorCode.none:
            return ProduceResult(outcome.error, -1, -1, partition.log_start_offset, outcome.message), None
        if self.config.topic_value(topic.configs, "flush.on.ack"):
            partition.log.flush()
        result = ProduceResult(ErrorCode.none, outcome.base_offset, outcome.log_append_time, partition.log_start_offset)
        return result, (outcome.last_offset + 1 if acks == -1 else None)

    def up_convert(self, topic: TopicMetadata, index: int, records: Buffer | None,
                   now_ms: int) -> tuple[Buffer | None, ProduceResult | None]:
        """A Produce v0-v2 request's records for :meth:`append_to_leader`: a message set of format
        v0 or v1 becomes one record batch v2 (Kafka's ``LogValidator`` up-conversion, checking what
        it checks), anything else is returned as it is. Returns ``(records, None)``, or ``(None,
        result)`` when the produce is answered at once: an error, or NONE with base offset -1 for
        a message set with no complete message (Kafka appends nothing)."""
        magic = first_magic(records)
        if records is not None and len(records) > 0 and magic not in (0, 1):
            return records, None
        partition = self.partitions.get((topic.name, index))
        if partition is None or not partition.is_leader:
            return None, ProduceResult(ErrorCode.not_leader_or_follower)
        if records is None:
            return records, None            # refused by validation, as in any version
        log_config = partition.log.config
        converted = up_convert(
            records, max_message_bytes=log_config.max_message_bytes,
            target_codec=CODECS[self.config.topic_value(topic.configs, "compression.type")],
            compacted=log_config.compacts,
            max_timestamp_difference_ms=log_config.message_timestamp_difference_max_ms
            if log_config.message_timestamp_type == "CreateTime" else None,
            now_ms=now_ms, where=f"{topic.name}-{index}")
        if converted.error is not ErrorCode.none:
            return None, ProduceResult(converted.error, -1, -1, partition.log_start_offset, converted.message,
                                       converted.record_errors or ())
        if converted.batch is None:
            return None, ProduceResult(ErrorCode.none, -1, -1, partition.log_start_offset)
        return converted.batch, None

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's ``min.insync.replicas`` as the metadata cache knows it now."""
        known = self.metadata.topics.get(topic)
        min_isr: int = self.config.topic_value(known.configs if known else {}, "min.insync.replicas")
        return min_isr

    def write_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, done: Callable[[ErrorCode, int], list[Effect]],
                     now_ms: int, transaction_version: int = 0) -> list[Effect]:
        """WriteTxnMarkers for one partition: append the commit or abort marker of a producer's
        transaction as leader, acks=all; refused from a fenced producer epoch or coordinator
        (:meth:`ProducerStateManager.check_marker`, with the marker's ``transaction_version``)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.is_leader:
            return done(ErrorCode.not_leader_or_follower, now_ms)
        error = partition.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch,
                                                      transaction_version)
        if error is not ErrorCode.none:
            return done(error, now_ms)
        batch = build_marker(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        return self.append_internal(topic, index, batch, self.config["request.timeout.ms"], done, now_ms)

    def append_internal(self, topic: str, index: int, batch: bytearray, timeout_ms: int,
                        done: Callable[[ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        """A batch the broker writes itself (``__consumer_offsets``), acks=all: ``done(error)``
        once the ISR has it, NOT_LEADER_OR_FOLLOWER when this broker does not lead the partition."""
        key = (topic, index)
        partition = self.partitions.get(key)
        known = self.metadata.topics.get(topic)
        if partition is None or not partition.is_leader or known is None:
            return done(ErrorCode.not_leader_or_follower, now_ms)
        min_isr = self.config.topic_value(known.configs, "min.insync.replicas")
        outcome = partition.append_records_to_leader(batch, read_header(batch, 0), -1, min_isr, now_ms)
        if outcome.error is not ErrorCode.none:
            return done(outcome.error, now_ms)
        if self.config.topic_value(known.configs, "flush.on.ack"):
            partition.log.flush()          # DUR-2, as for a produce request: markers and offsets too
        effects = self.fetch_purgatory.check_keys([key], now_ms)
        return effects + self.wait_committed(topic, index, outcome.last_offset + 1, timeout_ms, done, now_ms)

    def wait_committed(self, topic: str, index: int, required: int, timeout_ms: int,
                       done: Callable[[ErrorCode, int], list[Effect]], now_ms: int) -> list[Effect]:
        """``done(NONE)`` once the high watermark of the partition this broker leads reaches
        ``required`` (at once if it has); NOT_LEADER_OR_FOLLOWER if it stops leading it first,
        REQUEST_TIMED_OUT after ``timeout_ms``."""
        key = (topic, index)
        partition = self.partitions.get(key)
        if partition is None or not partition.is_leader:
            return done(ErrorCode.not_leader_or_follower, now_ms)
        if partition.high_watermark >= required:
            return done(ErrorCode.none, now_ms)

        def try_complete(when_ms: int, expired: bool) -> list[Effect] | None:
            if not partition.is_leader or self.partitions.get(key) is not partition:
                return done(ErrorCode.not_leader_or_follower, when_ms)
            if partition.high_watermark >= required:
                return done(ErrorCode.none, when_ms)
            if expired:
                return done(ErrorCode.request_timed_out, when_ms)
            return None

        self.purgatory.watch(DelayedCall(-1, now_ms + timeout_ms, (key,), try_complete))
        return []
