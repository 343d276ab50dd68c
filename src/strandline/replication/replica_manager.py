"""``ReplicaManager``: the partitions this broker hosts (Kafka's ReplicaManager).

It applies the controller's decisions (LeaderAndIsr: become leader or follower; UpdateMetadata: the
metadata cache; StopReplica) through its :class:`ControllerRequests`, reads records for consumers
and followers, holds the fetch purgatory (long-poll fetches), and checkpoints high watermarks. Appends as leader and acks=all waits are its
:class:`LeaderWrites`', ISR changes its :class:`IsrManager`'s, the follower side its
:class:`ReplicaFetcherManager`'s, DeleteRecords and whole-replica reads its :class:`LogAdmin`'s. Pure:
it returns effects; time comes in as ``now_ms``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, NamedTuple, cast

from kio.schema.errors import ErrorCode

from strandline.core import api_version
from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.coordination.metadata import MetadataCache, TopicMetadata
from strandline.coordination.znodes import BrokerInfo
from strandline.log.manager import LogManager
from strandline.log.producer_state import VerificationGuard
from strandline.protocol.records import Buffer
from strandline.replication.alter_isr_manager import AlterIsrManager
from strandline.replication.controller_requests import ControlRespond, ControllerRequests, LeadershipListener
from strandline.replication.fetch_session import ChangeJournal, FetchSession, SessionPartition, SessionScan
from strandline.replication.fetch_types import FetchedPartition, FetchedTopic, FetchPartitionRequest
from strandline.replication.fetcher_manager import ReplicaFetcherManager
from strandline.replication.isr_manager import IsrManager
from strandline.replication.leader_writes import LeaderWrites
from strandline.replication.log_admin import LogAdmin
from strandline.replication.partition import FetchClock, Partition
from strandline.replication.produce_verification import VerifyTransaction, verification_error, verification_guards
from strandline.replication.purgatory import (DelayedFetch, DelayedProduce, FetchParams, KeyedRequest, LogReadResult,
                                              ProduceResult, Purgatory)
from strandline.replication.quota import ReplicationQuota, throttled
from strandline.replication.replica_selector import preferred_read_replica
from strandline.replication.topic_ids import stale_log
from strandline.replication.topic_stats import BrokerTopicStats

Key = tuple[str, int]
#: the partitions a Fetch names: each with its topic's name and what the Fetch asks of it
Wanted = list[tuple[str, FetchPartitionRequest]]


class ProduceEntry(NamedTuple):
    """One partition of a Produce request for :meth:`ReplicaManager.append_records`."""
    topic: TopicMetadata
    partition: int
    records: Buffer | None


class ReplicaManager:
    def __init__(self, config: Any, logs: LogManager, metadata: MetadataCache, outbox: Outbox,
                 broker_epoch: Callable[[], int], now_ms: int) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.logs = logs
        self.metadata = metadata
        self.outbox = outbox
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: the partitions that changed, in order (fetch sessions and fetchers look only at those):
        #: every key the fetch purgatory is told of, every log end or start offset move, every ISR
        #: change; a change no key announces starts every reader over
        self.journal = ChangeJournal()
        self.fetch_purgatory = Purgatory()
        self.fetch_purgatory.listener = self.journal.extend
        self.writes = LeaderWrites(config, metadata, self.partitions, self.fetch_purgatory)
        self.produce_purgatory = self.writes.purgatory    # acks=all answers waiting on the HW
        self.leader_quota = ReplicationQuota(lambda: config["leader.replication.throttled.rate"])
        #: ``replica.selector.class`` is set: consumers may read from followers (KIP-392)
        self.replica_selector = bool(config["replica.selector.class"])
        self._hw_checkpoint: dict[Key, int] | None = None
        #: ISR changes go to the controller (AlterIsr, inter.broker.protocol.version 2.7+), else to ZooKeeper
        self.alter_isr = AlterIsrManager(self.broker_id, broker_epoch, outbox) \
            if api_version.alter_isr_supported(config["inter.broker.protocol.version"]) else None
        self.isr_manager = IsrManager(self.partitions, metadata, outbox, self.high_watermark_moved, now_ms,
                                      self.alter_isr)
        self.isr_manager.partition_changed = self.journal.add
        self.topic_stats = BrokerTopicStats()
        self.fetcher_manager = ReplicaFetcherManager(config, self.partitions, metadata, outbox, self.fetch_purgatory,
                                                     self.topic_stats, journal=self.journal)
        self.log_admin = LogAdmin(self.partitions, logs, metadata, self.note_state_change)
        self.controller_requests = ControllerRequests(self, config, metadata, outbox, self.fetcher_manager,
                                                      self.topic_stats, broker_epoch)
        #: told when this broker starts or stops leading a partition (the coordinators load or unload it)
        self.leadership_listeners: list[LeadershipListener] = self.controller_requests.leadership_listeners
        #: Counts changes to partitions that a parked fetch's watch keys may not announce (roles,
        #: epochs, log start offsets, HW moves): a parked session fetch whose keys nobody touched
        #: and that saw none of them expires with the answer it had (:meth:`fetch_messages`).
        self.state_changes = 0
        #: asks the transaction coordinator whether partitions are in a producer's transaction
        #: (KIP-890): ``verify(transactional id, producer id, producer epoch, partitions,
        #: done(errors by partition, now_ms), now_ms)``; the broker wires it, None: never asked
        self.verify_transaction: VerifyTransaction | None = None

    # ------------------------------------------------------------------ the controller's requests

    def handle_control(self, api_key: int, body: dict[str, Any], respond: ControlRespond, now_ms: int,
                       local: bool = False) -> list[Effect]:
        """LeaderAndIsr, UpdateMetadata or StopReplica (:meth:`ControllerRequests.handle_control`)."""
        return self.controller_requests.handle_control(api_key, body, respond, now_ms, local=local)

    def replica_log_info(self, body: dict[str, Any]) -> dict[str, Any]:
        """GetReplicaLogInfo (:meth:`ControllerRequests.replica_log_info`)."""
        return self.controller_requests.replica_log_info(body)

    def local_log_info(self, name: str, index: int) -> tuple[int, int] | None:
        """(last written leader epoch, log end offset) of this broker's replica, for its own controller."""
        return self.controller_requests.local_log_info(name, index)

    def controller_seen(self, controller_id: int | None) -> None:
        self.controller_requests.controller_seen(controller_id)

    def learn_topics(self, topics: Iterable[TopicMetadata]) -> None:
        self.controller_requests.learn_topics(topics)

    def forget_deleted_topics(self, now_ms: int) -> list[Effect]:
        return self.controller_requests.forget_deleted_topics(now_ms)

    def begin_controlled_shutdown(self) -> None:
        self.controller_requests.begin_controlled_shutdown()

    @property
    def controller_epoch(self) -> int:
        """The newest controller epoch this broker has heard from."""
        return self.controller_requests.controller_epoch

    def note_state_change(self) -> None:
        """A partition changed in a way no watch key announces (a role, an epoch, a log start offset)."""
        self.state_changes += 1
        self.journal.everything_changed()

    def complete_delayed_requests(self, keys: list[tuple[str, int]], now_ms: int) -> list[Effect]:
        """Partitions changed role or went: the produce and fetch requests waiting on them may
        complete (Kafka's completeDelayedFetchOrProduceRequests)."""
        return self.produce_purgatory.check_keys(keys, now_ms) + self.fetch_purgatory.check_keys(keys, now_ms)

    def delete_partition(self, key: tuple[str, int]) -> None:
        """Drop a local replica and delete its log."""
        del self.partitions[key]
        self.logs.delete_log(*key)

    def update_topic_configs(self, name: str, configs: dict[str, Any]) -> None:
        """A topic's overrides changed: the metadata cache and its local logs take them now."""
        topic = self.metadata.topics.get(name)
        if topic is None:
            return
        topic.configs = dict(configs)
        self._apply_log_config(topic)

    def refresh_log_configs(self) -> None:
        """The broker's log defaults changed: every log takes its topic's overrides over them."""
        self.logs.default_config = self.config.log_config()
        for topic in self.metadata.topics.values():
            self._apply_log_config(topic)

    def _apply_log_config(self, topic: TopicMetadata) -> None:
        log_config = self.config.log_config(topic.configs)
        for index in topic.assignment:
            partition = self.partitions.get((topic.name, index))
            if partition is not None and partition.log.config != log_config:
                partition.log.update_config(log_config)
                partition.log_append_time = log_config.message_timestamp_type == "LogAppendTime"

    # ------------------------------------------------------------------ partitions and logs

    def open_partition(self, topic: TopicMetadata, index: int, now_ms: int) -> Partition:
        """The partition object of a local replica, opening (or creating) its log."""
        key = (topic.name, index)
        partition = self.partitions.get(key)
        if partition is not None:
            return partition
        config = self.config
        log_config = config.log_config(topic.configs)
        log = self.logs.get_or_create_log(topic.name, index, log_config, now_ms)
        if stale_log(log.topic_id, topic):      # a log of an earlier topic of that name (topic_ids)
            self.logs.delete_log(topic.name, index)
            self.controller_requests.deleted_stale.append(
                f"{topic.name}-{index} (topic id {log.topic_id}, now {topic.topic_id})")
            log = self.logs.get_or_create_log(topic.name, index, log_config, now_ms)
        if log.topic_id is None and topic.topic_id.int:
            self.logs.assign_topic_id(log, topic.topic_id)
        hws = self._high_watermarks()
        partition = Partition(topic.name, index, self.broker_id, log,
                              replica_lag_time_max_ms=config["replica.lag.time.max.ms"])
        partition.restore_high_watermark(hws.get(key, 0))
        if api_version.elr_enabled(config):
            partition.elr_min_isr = functools.partial(self.writes.min_insync_replicas, topic.name)
        partition.log_append_time = log_config.message_timestamp_type == "LogAppendTime"
        log.offsets_listener = self.journal.add
        self.partitions[key] = partition
        return partition

    def startup(self, cluster_id: str | None, brokers: dict[int, BrokerInfo], topics: dict[str, TopicMetadata],
                controller_id: int, controller_epoch: int, now_ms: int) -> list[Effect]:
        """Install the cluster as read from ZooKeeper at start-up (unless the controller's requests,
        which can arrive between registration and this call, said something newer), open the
        replicas assigned to this broker and delete the logs of others. Leadership comes only from
        the controller's LeaderAndIsr."""
        topics = self.controller_requests.install_cluster(cluster_id, brokers, topics, controller_id, controller_epoch)
        effects: list[Effect] = []
        for topic in topics.values():
            for index, replicas in sorted(topic.assignment.items()):
                if self.broker_id in replicas:
                    self.open_partition(topic, index, now_ms)
        for (name, index) in list(self.logs.logs):
            known = topics.get(name)
            if known is None or index not in known.assignment or self.broker_id not in known.assignment[index]:
                self.logs.delete_log(name, index)
                effects.append(LogLine("info", f"Deleted log of {name}-{index}: no longer assigned to this broker"))
        return effects + self.controller_requests.stale_logs_deleted()

    def leader_partition(self, topic: str, index: int) -> tuple[Partition | None, ErrorCode]:
        """The partition if this broker leads it, else why not (Kafka's getPartitionOrError)."""
        partition = self.partitions.get((topic, index))
        if partition is None or not partition.is_leader:
            return None, self.not_served(topic, index)
        return partition, ErrorCode.none

    def not_served(self, topic: str, index: int) -> ErrorCode:
        """Why this broker cannot serve a partition: it does not exist, or another broker leads it."""
        known = self.metadata.topics.get(topic)
        if known is None or index not in known.assignment:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.not_leader_or_follower

    def _high_watermarks(self) -> dict[Key, int]:
        if self._hw_checkpoint is None:
            self._hw_checkpoint = self.logs.read_high_watermarks()
        return self._hw_checkpoint

    def high_watermark_checkpoints(self) -> list[tuple[str, bytes]]:
        """The ``replication-offset-checkpoint`` files' contents, by path; none until a partition
        has been opened (which reads the files): written before that, they would erase the high
        watermarks the partitions are about to read. Kafka likewise starts checkpointing them at
        the first LeaderAndIsr."""
        if self._hw_checkpoint is None:
            return []
        return self.logs.high_watermark_checkpoints({key: p.high_watermark for key, p in self.partitions.items()})

    def checkpoint_high_watermarks(self) -> None:
        self.logs.write_checkpoints(self.high_watermark_checkpoints())

    # ------------------------------------------------------------------ writes

    def append_records(self, conn_id: int, timeout_ms: int, acks: int, entries: list[ProduceEntry],
                       respond: Callable[[dict[tuple[str, int], ProduceResult]], list[Effect]], now_ms: int,
                       transactional: bool = False, legacy: bool = False,
                       transactional_id: str | None = None, tv2: bool = False) -> list[Effect]:
        """A Produce request's partitions that passed the request's own checks (Kafka's
        ``appendRecords``): append each as leader (after up-converting a v0-v2 message set when
        ``legacy``), wake the fetches waiting on them, then ``respond(results)`` (a
        :class:`ProduceResult` per partition): at once for acks=0 and 1, and for acks=all once
        each partition's high watermark reaches its batch's end (a :class:`DelayedProduce` in the
        produce purgatory, until ``timeout_ms``). ``transactional``: the request names a
        transactional id, ``transactional_id``.

        With ``transaction.partition.verification.enable`` (KIP-890), a transactional batch that
        would open its producer's transaction on a partition (none open there) is held while the
        transaction coordinator is asked whether the partition is in that transaction
        (:attr:`verify_transaction`, AddPartitionsToTxn v4 ``verify_only``); the request's
        partitions are appended once it answers, those it refused failing with its error
        (:func:`verification_error`). ``tv2``: a Produce v12 of transactions v2 (KIP-890 part 2),
        whose client sent no AddPartitionsToTxn: the coordinator is asked to add the partition
        (AddPartitionsToTxn v5) instead, whether verification is on or not."""
        verify = self.verify_transaction
        if transactional and transactional_id and verify is not None and \
                (tv2 or self.config["transaction.partition.verification.enable"]):
            guards, producer = verification_guards(self.partitions, ((t.name, i, r) for t, i, r in entries), now_ms)
            if guards:
                # the request's records are views of its frame: kept as bytes while the coordinator answers
                owned = [ProduceEntry(t, i, bytes(r) if r is not None else None) for t, i, r in entries]

                def verified(errors: dict[tuple[str, int], ErrorCode], when_ms: int) -> list[Effect]:
                    refused = {key: verification_error(error, tv2) for key, error in errors.items()
                               if key in guards and error is not ErrorCode.none}
                    return self._append(conn_id, timeout_ms, acks, owned, respond, when_ms, transactional, legacy,
                                        guards, refused)

                return verify(transactional_id, producer[0], producer[1], sorted(guards), verified, now_ms, tv2)
        return self._append(conn_id, timeout_ms, acks, entries, respond, now_ms, transactional, legacy, {}, {})

    def _append(self, conn_id: int, timeout_ms: int, acks: int, entries: list[ProduceEntry],
                respond: Callable[[dict[tuple[str, int], ProduceResult]], list[Effect]], now_ms: int,
                transactional: bool, legacy: bool, guards: dict[tuple[str, int], VerificationGuard],
                refused: dict[tuple[str, int], ProduceResult]) -> list[Effect]:
        writes = self.writes
        stats = self.topic_stats
        results: dict[tuple[str, int], ProduceResult] = {}
        waiting: dict[tuple[str, int], int] = {}
        appended: list[tuple[str, int]] = []
        for topic, index, records in entries:
            key = (topic.name, index)
            if key in refused:
                results[key] = refused[key]
                stats.produced(topic.name, records or b"", refused[key].error)
                continue
            if legacy:      # v0-v2: a message set of format v0 or v1 is stored as a record batch v2
                converted, early = writes.up_convert(topic, index, records, now_ms)
                if early is not None:
                    results[key] = early
                    stats.produced(topic.name, records if early.error else b"", early.error)
                    continue
                records = converted
            result, required = writes.append_to_leader(topic, index, records, acks, now_ms, transactional,
                                                       guards.get(key))
            results[key] = result
            stats.produced(topic.name, records, result.error)
            if result.error is not ErrorCode.none:
                continue
            appended.append(key)
            if required is not None:
                waiting[key] = required
        effects = self.fetch_purgatory.check_keys(appended, now_ms)    # new records: long polls may complete
        partitions = self.partitions
        if not waiting or all(partitions[k].high_watermark >= off for k, off in waiting.items()):
            return effects + respond(results)
        self.produce_purgatory.watch(DelayedProduce(conn_id, now_ms + timeout_ms, waiting, results, partitions,
                                                    writes.min_insync_replicas, respond))
        return effects

    # ------------------------------------------------------------------ reads

    def read_log(self, topic: str, index: int) -> bytes:
        return self.log_admin.read_log(topic, index)

    def fetch_messages(self, conn_id: int, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                       isolation: int, wanted: Wanted, respond: Callable[[list[FetchedTopic]], list[Effect]],
                       now_ms: int, session: FetchSession | None = None, client_rack: str | None = None) -> list[Effect]:
        """Read whole batches for a consumer (below the HW) or a follower (below the LEO, REP-1)
        (:meth:`read_from_local_log`); a fetch with too little data waits up to ``max_wait_ms``
        for appends (REP-2) as a :class:`DelayedFetch` in the fetch purgatory. A follower's fetch
        also reports its progress (:meth:`_follower_fetched`). ``respond(topics)`` answers.

        ``client_rack``: a consumer's rack, from Fetch v11+ (None before). With
        ``replica.selector.class`` set, such a consumer is sent to a replica in its rack
        (:func:`preferred_read_replica`), and a follower serves it (KIP-392); unset, only leaders
        serve consumers (CLI-2).

        ``session``: an incremental fetch session (``wanted`` then holds only the partitions this
        Fetch named). Only the partitions :meth:`FetchSession.keys_to_read` names are looked at; a
        quiet one (:meth:`SessionPartition.quiet`) is left out of the answer, so an idle session
        costs nothing per partition, and a follower's fetch still counts for the ISR through the
        session's :class:`FetchClock`."""
        follower = replica_id >= 0
        from_any_replica = not follower and client_rack is not None and self.replica_selector
        params = FetchParams(replica_id, max_wait_ms, min_bytes, max_bytes, isolation, from_any_replica,
                             client_rack if from_any_replica and client_rack is not None else "",
                             self.metadata.brokers)
        seen = self.state_changes           # before the arrival's scan: what changes after it counts
        scan = None
        if session is None:
            read = self.read_from_local_log(params, (((name, p.partition), name, p) for name, p in wanted), now_ms,
                                            True, None, None)
            waits = bool(wanted)
        else:
            read, scan = self._read_session(params, session, wanted, now_ms)
            waits = bool(session.partitions)
        effects: list[Effect] = []
        if follower:
            effects = self._follower_fetched(replica_id, list(read.served), now_ms,
                                             session.clock if session is not None else None)
        if max_wait_ms <= 0 or read.total >= min_bytes or read.urgent or not waits:
            return effects + respond(read.topics)
        keys = () if session is not None else tuple((name, p.partition) for name, p in wanted)
        delayed = DelayedFetch(conn_id, now_ms + max_wait_ms, keys, self, params, wanted, session, scan, seen,
                               read.topics, respond)
        if session is not None:
            self.fetch_purgatory.watch_all(delayed, session.partitions)
        else:
            self.fetch_purgatory.watch(delayed)
        return effects

    def _read_session(self, params: FetchParams, session: FetchSession, wanted: Wanted,
                      now_ms: int) -> tuple[LogReadResult, SessionScan]:
        """A session fetch's read on arrival: the partitions the session must look at, those that
        stay quiet left out; the session's scan then records what it saw."""
        replica_id = params.replica_id
        partitions = self.partitions
        journal = self.journal
        parts = session.partitions
        if session.dropped:
            if replica_id >= 0:
                for key in session.dropped:
                    partition = partitions.get(key)
                    if partition is not None:
                        partition.release_quiet_clock(replica_id, session.clock)
            session.dropped.clear()
        reader = (replica_id, params.isolation)
        scan = session.scan
        keys = session.keys_to_read(journal, scan if scan is not None and scan.reader == reader else None,
                                    ((name, p.partition) for name, p in wanted))
        position, epoch = journal.position, journal.epoch     # what changes from here on counts next time
        unquiet: list[Key] = []
        read = self.read_from_local_log(params, ((key, key[0], parts[key]) for key in keys if key in parts), now_ms,
                                        True, unquiet, session)
        session.clock.ms = now_ms
        scan = session.scan = SessionScan(reader, position, epoch, frozenset(unquiet))
        return read, scan

    def read_from_local_log(self, params: FetchParams, keyed: Iterable[KeyedRequest], at_ms: int, arrival: bool,
                            unquiet: list[Key] | None, session: FetchSession | None) -> LogReadResult:
        """Read ``keyed`` ((key, name, partition request) in order) for a Fetch (Kafka's
        ``readFromLocalLog``), within its ``max_bytes``; in a session, those quiet are left out,
        and the others' keys go to ``unquiet``. ``arrival``: the Fetch's first read (not a
        :class:`DelayedFetch`'s later one)."""
        replica_id = params.replica_id
        follower = replica_id >= 0
        partitions = self.partitions
        journal = self.journal
        total = 0
        urgent = False      # an error or a preferred read replica: answered at once
        served: Wanted = []
        budget = params.max_bytes
        by_topic: dict[str, list[FetchedPartition]] = {}
        order: list[str] = []
        clock = session.clock if session is not None and arrival and follower else None
        deletes_waiting = clock is not None and len(self.log_admin.purgatory) > 0
        loading = self.controller_requests.loading_topics
        for key, name, p in keyed:
            partition = partitions.get(key)
            if clock is not None and partition is not None and partition.take_quiet_clock(replica_id, clock):
                journal.add(key)
            if session is not None:     # a session's reads are of its own partitions
                if partition is not None and cast(SessionPartition, p).quiet(partition, replica_id, arrival, deletes_waiting, at_ms):
                    if clock is not None:
                        partition.attach_quiet_clock(replica_id, clock)
                    continue
                if unquiet is not None:
                    unquiet.append(key)
            # a follower may ask before this broker has applied the LeaderAndIsr that makes it
            # leader (it waits on ZooKeeper): the fetch waits for it instead of failing
            arriving = follower and name in loading
            if partition is None:
                entry = _empty_fetch_entry(p.partition, params.isolation)
                entry["error_code"] = self.not_served(name, p.partition)
                urgent = urgent or not arriving
            else:
                entry, size = self._read_partition(params, name, p, partition, min(p.partition_max_bytes, budget),
                                                   total == 0, at_ms)
                if entry["preferred_read_replica"] >= 0:
                    urgent = True
                else:
                    if entry["error_code"] is ErrorCode.none:
                        served.append((name, p))
                    else:
                        urgent = urgent or not arriving
                    total += size
                    budget = max(0, budget - size)
            if name not in by_topic:
                by_topic[name] = []
                order.append(name)
            by_topic[name].append(entry)
        topics: list[FetchedTopic] = [{"topic": name, "partitions": by_topic[name]} for name in order]
        return LogReadResult(topics, total, urgent, served)

    def _read_partition(self, params: FetchParams, name: str, p: FetchPartitionRequest, partition: Partition,
                        limit: int, first: bool, at_ms: int) -> tuple[FetchedPartition, int]:
        """One partition's entry in a Fetch answer, and the bytes of records it holds; ``limit``:
        what is left of the Fetch's bytes for it, ``first``: no partition before it read any."""
        replica_id = params.replica_id
        follower = replica_id >= 0
        committed_only = not follower
        read_committed = committed_only and params.isolation == 1
        entry = _empty_fetch_entry(p.partition, params.isolation)
        if params.rack and partition.is_leader and (elsewhere := preferred_read_replica(
                partition, p.fetch_offset, params.rack, params.brokers, at_ms)) >= 0:
            # the consumer reads from a replica in its rack: no records, the leader's offsets
            entry["preferred_read_replica"] = elsewhere
            entry["high_watermark"] = partition.high_watermark
            entry["last_stable_offset"] = partition.last_stable_offset()
            entry["log_start_offset"] = partition.log.log_start_offset
            return entry, 0
        # an out-of-sync follower of a throttled replica gets no data while over the rate
        quota = self.leader_quota
        throttle = follower and replica_id not in partition.isr and self._throttled(
            name, p.partition, "leader.replication.throttled.replicas", self.broker_id)
        if throttle and quota.exceeded(at_ms):
            limit = 0
        result = partition.read_records(
            p.fetch_offset, limit, getattr(p, "current_leader_epoch", -1),
            committed_only=committed_only, min_one_batch=first and limit > 0,
            stable_only=read_committed, leader_only=not params.from_any_replica)
        if throttle:
            quota.record(len(result.records), at_ms)
        entry["error_code"] = result.error
        entry["high_watermark"] = result.high_watermark
        entry["last_stable_offset"] = result.high_watermark
        if result.error is ErrorCode.none:
            # the partition's, whatever the isolation level (as Kafka reports it)
            entry["last_stable_offset"] = lso = partition.last_stable_offset()
            if read_committed:
                entry["aborted_transactions"] = [
                    (txn.producer_id, txn.first_offset)
                    for txn in partition.log.collect_aborted_txns(p.fetch_offset, lso)]
        entry["log_start_offset"] = result.log_start_offset
        entry["records"] = result.records
        return entry, len(result.records)

    def _throttled(self, name: str, index: int, key: str, broker_id: int) -> bool:
        topic = self.metadata.topics.get(name)
        return topic is not None and throttled(topic.configs, key, index, broker_id)

    def _follower_fetched(self, follower_id: int, served: Wanted, now_ms: int,
                          clock: FetchClock | None = None) -> list[Effect]:
        """A follower's fetch offset is its LEO (REP-1): for the partitions its fetch was served
        (an answer with an error says nothing of its progress), update its state on the leader,
        complete what a higher HW allows, and propose ISR expansion (ISR-4) unless the controller
        considers that broker dead (KIP-841: the latest UpdateMetadata does not list it)."""
        advanced: list[Key] = []
        effects: list[Effect] = []
        alive = follower_id in self.metadata.brokers
        for name, p in served:
            key = (name, p.partition)
            partition = self.partitions.get(key)
            if partition is None or not partition.is_leader:
                continue
            if partition.take_quiet_clock(follower_id, clock):
                self.journal.add(key)
            if partition.update_follower_fetch_state(follower_id, p.fetch_offset, now_ms,
                                                     getattr(p, "log_start_offset", -1)):
                advanced.append((name, p.partition))
            new_isr = partition.isr_to_expand(follower_id) if alive else None
            if new_isr is not None:
                effects.extend(self.isr_manager.change_isr(partition, new_isr, now_ms))
        effects.extend(self.log_admin.followers_fetched([(name, p.partition) for name, p in served], now_ms))
        return effects + self.high_watermark_moved(advanced, now_ms)

    def high_watermark_moved(self, keys: list[Key], now_ms: int) -> list[Effect]:
        if not keys:
            return []
        self.state_changes += 1     # (a fetch parked after reading the old HW is not watching yet)
        return self.complete_delayed_requests(keys, now_ms)

    # ------------------------------------------------------------------ time and connections

    def maybe_shrink_isrs(self, now_ms: int) -> list[Effect]:
        return self.isr_manager.maybe_shrink_isrs(now_ms)

    def maybe_propagate_isr_changes(self, now_ms: int) -> list[Effect]:
        return self.isr_manager.maybe_propagate_isr_changes(now_ms)

    def maybe_send_fetches(self, now_ms: int) -> list[Effect]:
        return self.fetcher_manager.maybe_send_fetches(now_ms)

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (self.fetcher_manager.next_deadline_ms(), self.produce_purgatory.next_deadline(),
                                 self.fetch_purgatory.next_deadline(), self.log_admin.next_deadline())
                     if d is not None]
        return min(deadlines) if deadlines else None

    def expire_delayed(self, now_ms: int) -> list[Effect]:
        return (self.produce_purgatory.expire(now_ms) + self.fetch_purgatory.expire(now_ms)
                + self.log_admin.expire(now_ms))

    def connection_closed(self, conn_id: int) -> None:
        self.produce_purgatory.cancel_connection(conn_id)
        self.fetch_purgatory.cancel_connection(conn_id)
        self.log_admin.connection_closed(conn_id)


def _empty_fetch_entry(index: int, isolation: int) -> FetchedPartition:
    """A partition's entry in a Fetch answer before it is read: no records, unknown offsets."""
    return {"partition_index": index, "error_code": ErrorCode.none, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1,
            "aborted_transactions": None if isolation == 0 else [],
            "preferred_read_replica": -1, "records": b""}
