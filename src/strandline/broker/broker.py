"""The broker core: requests and ZooKeeper results in, effects out.

``Broker`` never touches a socket, a clock or ZooKeeper itself. The shell (``runtime/``) or the
simulator (``sim/``) feeds it events with the current time and carries out the effects it
returns (:mod:`strandline.broker.effects`). Each API has one handler method; every transition
runs to completion without awaiting, so no locks are needed.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import re
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.broker.config import BrokerConfig, ConfigError, parse_topic_configs
from strandline.broker.control_plane import ControlPlane
from strandline.replication.purgatory import DelayedOperation, Purgatory
from strandline.broker.effects import Close, Log, Send, ZkRequest
from strandline.broker.follower import Follower
from strandline.broker.groups import INTERNAL_TOPICS, Groups
from strandline.coordination.metadata import MetadataCache, TopicMetadata, topic_name_error
from strandline.replication.validation import validate_produce_records
from strandline.coordination import zk_layout
from strandline.controller.assignment import InvalidReplicationFactor, assign_replicas, check_replication_factor
from strandline.coordination import znodes
from strandline.coordination.store import GetData, ZkError
from strandline.log.manager import LogManager
from strandline.protocol import api, control
from strandline.protocol.api import ApiKey, RequestHeader
from strandline.protocol.frames import ProtocolError
from strandline.protocol.records import UndecodableRecordsError
from strandline.replication.partition import LeaderAndIsr, Partition

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
PRODUCER_ID_BLOCK_SIZE = 1000
ISR_CHANGE_CHECK_INTERVAL_MS = 2500   # Kafka's isr-change-propagation task period
ISR_CHANGE_BLACKOUT_MS = 5000         # propagate once the last change is this old...
ISR_CHANGE_MAX_DELAY_MS = 60000       # ...or at least this often
ISR_READ_BACK_RETRY_MS = 500          # read a partition's state again while ZooKeeper cannot answer
_SOFTWARE_FIELD = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _ms(value: Any) -> int:
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


@dataclass
class Scheduled:
    name: str
    interval_ms: int
    next_ms: int


class Broker(ControlPlane, Follower, Groups):
    """One broker's core state machine."""

    def __init__(self, config: BrokerConfig, log_manager: LogManager, *, rng: Any,
                 new_uuid: Callable[[], uuid.UUID] = uuid.uuid4, now_ms: int = 0) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.logs = log_manager
        self.rng = rng
        self.new_uuid = new_uuid
        self.metadata = MetadataCache()
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.produce_purgatory = Purgatory()
        self.fetch_purgatory = Purgatory()
        self.controller_epoch = 0
        self._next_token = 1
        self._zk_callbacks: dict[int, Callable[[list, int], list]] = {}
        self._creating: dict[str, list[Callable[[ErrorCode, str | None, int], list]]] = {}
        self._producer_ids: tuple[int, int] = (0, 0)  # next id, end (exclusive) of our block
        self._producer_id_waiters: list[Callable[[int, int], list]] = []
        self._producer_id_fetching = False
        v = config.values
        self.scheduled = [
            Scheduled("highwatermark-checkpoint", v["replica.high.watermark.checkpoint.interval.ms"], now_ms),
            Scheduled("recovery-point-checkpoint", v["log.flush.offset.checkpoint.interval.ms"], now_ms),
            Scheduled("log-start-offset-checkpoint", v["log.flush.start.offset.checkpoint.interval.ms"], now_ms),
            Scheduled("log-retention", v["log.retention.check.interval.ms"], now_ms),
            Scheduled("log-flush", min(v["log.flush.scheduler.interval.ms"], 1 << 62), now_ms),
            Scheduled("isr-expiration", max(1, v["replica.lag.time.max.ms"] // 2), now_ms),
            Scheduled("isr-change-propagation", ISR_CHANGE_CHECK_INTERVAL_MS, now_ms),
        ]
        self.scheduled.append(Scheduled("offsets-retention", v["offsets.retention.check.interval.ms"], now_ms))
        if v["auto.leader.rebalance.enable"]:
            self.scheduled.append(Scheduled("auto-leader-rebalance",
                                            v["leader.imbalance.check.interval.seconds"] * 1000, now_ms))
        self.fetchers: dict = {}
        self._broker_callbacks: dict[int, Callable[[bytes | None, int], list]] = {}
        self._broker_epochs: dict[int, int] = {}
        self.broker_epoch = -1                      # this broker's registration (czxid), KIP-380
        self._delayed: list[tuple[int, int, Callable[[int], list]]] = []
        self._hw_checkpoint: dict | None = None
        self._loading_topics: set[str] = set()   # LeaderAndIsr/UpdateMetadata waiting on ZooKeeper
        self._before_load: list[tuple[int, bytes]] | None = []   # client requests until load_metadata
        self._heard_from_controller = False
        self.active_controller = False
        self._controller_ready = True        # a new controller: False until it has read the cluster
        self._pending_brokers: tuple | None = None
        self._shutting_down: set[int] = set()      # brokers in controlled shutdown (controller)
        self._init_groups()
        self.controlled_shutdown_done = False
        self._controller_epoch_version: int | None = None
        self._electing = False
        self._electing_partitions: collections.Counter = collections.Counter()   # controller: elections in flight
        self._owed_states: dict[tuple[str, int], set[int]] = {}   # ... and brokers owed their states after
        self._isr_change_set: set[tuple[str, int]] = set()
        self._last_isr_change_ms = 0
        self._last_isr_propagation_ms = now_ms
        for task in self.scheduled:
            task.next_ms = now_ms + task.interval_ms

    # ------------------------------------------------------------------ lifecycle

    def load_metadata(self, cluster_id: str | None, brokers: dict, topics: dict[str, TopicMetadata],
                      controller_id: int, controller_epoch: int, now_ms: int,
                      controller_epoch_version: int | None = None) -> list:
        """Install the cluster state read from ZooKeeper at start-up and open our replicas' logs.

        Leadership comes only from the controller's LeaderAndIsr; when this broker is the
        controller it takes office now (and sends them, to itself included)."""
        self.metadata.cluster_id = cluster_id
        if self._heard_from_controller:
            # the controller's requests can arrive between registration and this call: what they
            # said is newer than what was read from ZooKeeper before
            for name, topic in topics.items():
                self.metadata.topics.setdefault(name, topic)
            topics = self.metadata.topics
            if controller_epoch > self.controller_epoch:
                self.controller_epoch, self.metadata.controller_id = controller_epoch, controller_id
        else:
            self.metadata.brokers = dict(brokers)
            self.metadata.controller_id = controller_id
            self.controller_epoch = controller_epoch
            self.metadata.topics = dict(topics)
        effects: list = []
        for topic in topics.values():
            for index, replicas in sorted(topic.assignment.items()):
                if self.broker_id in replicas:
                    self._open_partition(topic, index, now_ms)
        for (name, index) in list(self.logs.logs):
            topic = topics.get(name)
            if topic is None or index not in topic.assignment or self.broker_id not in topic.assignment[index]:
                self.logs.delete_log(name, index)
                effects.append(Log("info", f"Deleted log of {name}-{index}: no longer assigned to this broker"))
        if controller_id == self.broker_id:
            # elected while starting: take office as any new controller does (read the cluster from
            # ZooKeeper, tell every broker, elect leaders for partitions that have none)
            effects.extend(self._become_controller(controller_epoch, controller_epoch_version,
                                                   "won the controller election while starting"))
        waiting, self._before_load = self._before_load or [], None
        for conn_id, frame in waiting:
            effects.extend(self.handle_request(conn_id, frame, now_ms))
        return effects

    def on_registered(self, broker_epoch: int) -> None:
        """The shell (re)registered this broker in ZooKeeper: control requests addressed to an
        earlier registration are refused from now on (STALE_BROKER_EPOCH)."""
        self.broker_epoch = broker_epoch

    def _high_watermarks(self) -> dict:
        if self._hw_checkpoint is None:
            self._hw_checkpoint = self.logs.read_high_watermarks()
        return self._hw_checkpoint

    def shutdown(self) -> None:
        """Clean shutdown: checkpoint high watermarks, flush logs, write the clean-shutdown marker."""
        self._checkpoint_high_watermarks()
        self.logs.shutdown()

    # ------------------------------------------------------------------ timers

    def _new_token(self) -> int:
        token = self._next_token
        self._next_token = token + 1 if token < 0x7FFFFFFF else 1
        return token

    def _after(self, due_ms: int, action: Callable[[int], list]) -> list:
        """Run ``action(now_ms)`` at ``due_ms`` (a retry or backoff); returns no effects now."""
        heapq.heappush(self._delayed, (due_ms, self._new_token(), action))
        return []

    def next_deadline_ms(self) -> int | None:
        deadlines = [t.next_ms for t in self.scheduled]
        if self._delayed:
            deadlines.append(self._delayed[0][0])
        fetch = self._fetcher_deadline()
        if fetch is not None:
            deadlines.append(fetch)
        groups = self.groups.next_deadline_ms()
        if groups is not None:
            deadlines.append(groups)
        for purgatory in (self.produce_purgatory, self.fetch_purgatory):
            d = purgatory.next_deadline()
            if d is not None:
                deadlines.append(d)
        return min(deadlines) if deadlines else None

    def tick(self, now_ms: int) -> list:
        effects: list = []
        effects.extend(self.produce_purgatory.expire(now_ms))
        effects.extend(self.fetch_purgatory.expire(now_ms))
        while self._delayed and self._delayed[0][0] <= now_ms:
            _, _, action = heapq.heappop(self._delayed)
            effects.extend(action(now_ms))
        for task in self.scheduled:
            if task.next_ms <= now_ms:
                task.next_ms = now_ms + task.interval_ms
                effects.extend(self._run_task(task.name, now_ms))
        effects.extend(self._maybe_send_fetches(now_ms))
        effects.extend(self.groups.tick(now_ms))
        return effects

    def _run_task(self, name: str, now_ms: int) -> list:
        if name == "highwatermark-checkpoint":
            self._checkpoint_high_watermarks()
        elif name == "recovery-point-checkpoint":
            self.logs.checkpoint_recovery_points()
        elif name == "log-start-offset-checkpoint":
            self.logs.checkpoint_log_start_offsets()
        elif name == "log-retention":
            deleted = self.logs.cleanup(now_ms)
            if deleted:
                return [Log("info", f"Retention deleted {deleted} log segment(s)")]
        elif name == "log-flush":
            self.logs.flush_dirty(now_ms)
        elif name == "isr-expiration":
            return self._maybe_shrink_isrs(now_ms)
        elif name == "isr-change-propagation":
            return self._maybe_propagate_isr_changes(now_ms)
        elif name == "auto-leader-rebalance":
            return self._leader_imbalance_check(now_ms)
        elif name == "offsets-retention":
            return self.groups.expire_offsets(now_ms)
        return []

    def _checkpoint_high_watermarks(self) -> None:
        self.logs.write_high_watermarks({key: p.high_watermark for key, p in self.partitions.items()})

    def connection_closed(self, conn_id: int) -> None:
        if self._before_load:
            self._before_load = [(c, frame) for c, frame in self._before_load if c != conn_id]
        self.produce_purgatory.cancel_connection(conn_id)
        self.fetch_purgatory.cancel_connection(conn_id)
        self._groups_connection_closed(conn_id)

    # ------------------------------------------------------------------ ZooKeeper plumbing

    def _zk(self, ops: list, callback: Callable[[list, int], list], transaction: bool = False) -> ZkRequest:
        token = self._new_token()
        self._zk_callbacks[token] = callback
        return ZkRequest(token, ops, transaction)

    def on_zk_result(self, token: int, results: list, now_ms: int) -> list:
        callback = self._zk_callbacks.pop(token, None)
        if callback is None:
            return []
        return callback(results, now_ms)

    # ------------------------------------------------------------------ requests

    def handle_request(self, conn_id: int, frame: bytes, now_ms: int) -> list:
        """Decode and answer one request frame of connection ``conn_id``.

        The controller's requests are served as soon as the broker listens. A client's request
        other than ApiVersions waits until :meth:`load_metadata`: before it the broker knows no
        brokers, controller or topics, and clients take such an answer for the cluster's state."""
        api_key = int.from_bytes(frame[:2], "big") if len(frame) >= 2 else -1
        if api_key in control.SCHEMAS:
            return self._control_request(conn_id, frame, now_ms)
        if self._before_load is not None and api_key != ApiKey.API_VERSIONS:
            self._before_load.append((conn_id, frame))
            return []
        try:
            header, request = api.decode_request(frame)
        except api.UnsupportedApiVersions as exc:
            return [Send(conn_id, [api.api_versions_fallback(exc.correlation_id)])]
        except ProtocolError as exc:
            return [Close(conn_id, str(exc))]
        handler = self._handlers.get(header.api_key)
        if handler is None:
            return [Close(conn_id, f"API key {header.api_key} is not handled")]
        return handler(self, conn_id, header, request, now_ms)

    def _not_served(self, topic: str, partition: int) -> ErrorCode:
        """Why this broker cannot serve a partition: it does not exist, or another broker leads it."""
        known = self.metadata.topics.get(topic)
        if known is None or partition not in known.assignment:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.not_leader_or_follower

    def _respond(self, conn_id: int, header: RequestHeader, body: Any) -> Send:
        return Send(conn_id, [api.encode_response(header, body)])

    # -- ApiVersions

    def _api_versions(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        body = api.api_versions_body()
        name = getattr(request, "client_software_name", None)
        version = getattr(request, "client_software_version", None)
        if header.api_version >= 3 and not (_valid_software_field(name) and _valid_software_field(version)):
            body["error_code"] = ErrorCode.invalid_request
        return [self._respond(conn_id, header, body)]

    # -- Metadata

    def _metadata(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        requested = request.topics
        if requested is not None and header.api_version == 0 and len(requested) == 0:
            requested = None
        names = None if requested is None else list(dict.fromkeys(t.name for t in requested))  # a set, as Kafka
        allow_auto = getattr(request, "allow_auto_topic_creation", True) and \
            self.config["auto.create.topics.enable"]
        missing = [n for n in (names or ()) if n not in self.metadata.topics and topic_name_error(n) is None]
        if missing and allow_auto:
            pending = set(missing)
            outcomes: dict[str, ErrorCode] = {}
            effects: list = []

            def created(name: str) -> Callable[[ErrorCode, str | None, int], list]:
                def done(error: ErrorCode, message: str | None, when_ms: int) -> list:
                    pending.discard(name)
                    outcomes[name] = error
                    if pending:
                        return []
                    return [self._respond(conn_id, header, self._metadata_body(names, header, outcomes))]
                return done

            for name in missing:
                effects.extend(self._auto_create(name, created(name), now_ms))
            return effects
        return [self._respond(conn_id, header, self._metadata_body(names, header))]

    def _metadata_body(self, names: list[str] | None, header: RequestHeader,
                       creations: dict[str, ErrorCode] | None = None) -> dict:
        """``creations``: the outcome of auto-creating each missing topic; a created topic (or one
        another broker created) is LEADER_NOT_AVAILABLE until this broker knows it, a failed
        creation answers with its error (as Kafka's createTopic)."""
        md = self.metadata
        brokers = [{"node_id": b.id, "host": b.host, "port": b.port, "rack": b.rack}
                   for b in md.brokers.values()]
        topics = []
        for name in (sorted(md.topics) if names is None else names):
            topic = md.topics.get(name)
            if topic is None:
                invalid = topic_name_error(name)
                creation = (creations or {}).get(name)
                if invalid:
                    error = ErrorCode.invalid_topic_exception
                elif creation is None:
                    error = ErrorCode.unknown_topic_or_partition
                elif creation in (ErrorCode.none, ErrorCode.topic_already_exists):
                    error = ErrorCode.leader_not_available
                else:
                    error = creation
                topics.append({"error_code": error, "name": name, "topic_id": uuid.UUID(int=0), "partitions": []})
                continue
            partitions = []
            for index in sorted(topic.assignment):
                replicas = list(topic.assignment[index])
                state = topic.states.get(index)
                leader = state.leader if state else -1
                error = ErrorCode.none if leader >= 0 and leader in md.brokers else ErrorCode.leader_not_available
                partitions.append({
                    "error_code": error, "partition_index": index, "leader_id": leader,
                    "leader_epoch": state.leader_epoch if state else -1,
                    "replica_nodes": replicas, "isr_nodes": list(state.isr) if state else [],
                    "offline_replicas": [r for r in replicas if r not in md.brokers],
                })
            topics.append({"error_code": ErrorCode.none, "name": name, "topic_id": topic.topic_id,
                           "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
                           "topic_authorized_operations": -2147483648})
        return {"brokers": brokers, "cluster_id": md.cluster_id, "controller_id": md.controller_id,
                "topics": topics, "cluster_authorized_operations": -2147483648}

    # -- Produce

    def _produce(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        acks = request.acks
        if request.transactional_id is not None:
            code = ErrorCode.transactional_id_authorization_failed
            return self._produce_all_failed(conn_id, header, request, code)
        if acks not in (-1, 0, 1):
            return self._produce_all_failed(conn_id, header, request, ErrorCode.invalid_required_acks)
        results: dict[tuple[str, int], list] = {}
        waiting: dict[tuple[str, int], int] = {}
        appended: list[tuple[str, int]] = []
        effects: list = []
        any_error = False
        for topic_data in request.topic_data:
            name = topic_data.name
            topic = self.metadata.topics.get(name)
            for pdata in topic_data.partition_data:
                key = (name, pdata.index)
                partition = self.partitions.get(key)
                if topic is None or pdata.index not in topic.assignment:
                    results[key] = [ErrorCode.unknown_topic_or_partition, -1, -1, -1, None]
                    if topic is None and topic_name_error(name) is None and self.config["auto.create.topics.enable"]:
                        effects.extend(self._auto_create(name, lambda e, m, t: [], now_ms))
                    any_error = True
                    continue
                if name in INTERNAL_TOPICS:
                    results[key] = [ErrorCode.invalid_topic_exception, -1, -1, -1,
                                    f"Cannot append to internal topic {name}"]
                    any_error = True
                    continue
                if partition is None or not partition.is_leader:
                    results[key] = [ErrorCode.not_leader_or_follower, -1, -1, -1, None]
                    any_error = True
                    continue
                log_config = partition.log.config
                checked = validate_produce_records(pdata.records, log_config.max_message_bytes)
                if checked.error is not ErrorCode.none:
                    results[key] = [checked.error, -1, -1, partition.log_start_offset, checked.message]
                    any_error = True
                    continue
                min_isr = self.config.topic_value(topic.configs, "min.insync.replicas")
                outcome = partition.append_records_to_leader(
                    bytearray(pdata.records), checked.header, acks, min_isr, now_ms)
                if outcome.error is not ErrorCode.none:
                    results[key] = [outcome.error, -1, -1, partition.log_start_offset, outcome.message]
                    any_error = True
                    continue
                if self.config.topic_value(topic.configs, "flush.on.ack"):
                    partition.log.flush()
                results[key] = [ErrorCode.none, outcome.base_offset, outcome.log_append_time,
                                partition.log_start_offset, None]
                appended.append(key)
                if acks == -1:
                    waiting[key] = outcome.last_offset + 1
        effects.extend(self.fetch_purgatory.check_keys(appended, now_ms))
        if acks == 0:
            if any_error:
                return effects + [Close(conn_id, "acks=0 produce failed")]
            return effects + [Send(conn_id, [])]

        def respond() -> Send:
            return Send(conn_id, [self._encode_produce(header, request, results)])

        if not waiting or all(self.partitions[k].high_watermark >= off for k, off in waiting.items()):
            return effects + [respond()]

        timeout_ms = _ms(request.timeout)

        def try_complete(when_ms: int, expired: bool) -> list | None:
            for key, required in list(waiting.items()):
                partition = self.partitions.get(key)
                if partition is None or not partition.is_leader or partition.isr_update_failed:
                    results[key][0] = ErrorCode.not_leader_or_follower
                    del waiting[key]
                elif partition.high_watermark >= required:
                    topic = self.metadata.topics.get(key[0])
                    min_isr = self.config.topic_value(topic.configs if topic else {}, "min.insync.replicas")
                    if len(partition.isr) < min_isr:
                        results[key][0] = ErrorCode.not_enough_replicas_after_append
                    del waiting[key]
            if waiting and not expired:
                return None
            for key in waiting:
                results[key][0] = ErrorCode.request_timed_out
            return [respond()]

        self.produce_purgatory.watch(DelayedOperation(conn_id, now_ms + timeout_ms, tuple(waiting), try_complete))
        return effects

    def _produce_all_failed(self, conn_id: int, header: RequestHeader, request: Any, code: ErrorCode) -> list:
        if request.acks == 0:
            return [Close(conn_id, f"acks=0 produce failed with {code.name}")]
        results = {(t.name, p.index): [code, -1, -1, -1, None]
                   for t in request.topic_data for p in t.partition_data}
        return [Send(conn_id, [self._encode_produce(header, request, results)])]

    def _encode_produce(self, header: RequestHeader, request: Any, results: dict) -> bytes:
        topics = []
        for topic_data in request.topic_data:
            parts = []
            for pdata in topic_data.partition_data:
                error, base, append_time, lso, message = results[(topic_data.name, pdata.index)]
                parts.append((pdata.index, error, base, append_time, lso, message))
            topics.append((topic_data.name, parts))
        return api.encode_produce_response(header, topics)

    # -- Fetch

    def _fetch(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        replica_id = request.replica_id
        committed_only = replica_id < 0
        max_wait_ms = _ms(request.max_wait)
        min_bytes = request.min_bytes
        max_bytes = min(getattr(request, "max_bytes", 0x7FFFFFFF), self.config["fetch.max.bytes"])
        isolation = getattr(request, "isolation_level", 0)
        # one entry per partition, the last one named, as Kafka's fetch request keeps them
        wanted = list({(t.topic, p.partition): (t.topic, p) for t in request.topics for p in t.partitions}.values())

        served: list = []     # the partitions read without error, for a follower's progress

        def read_all() -> tuple[list, int, bool]:
            total = 0
            errors = False
            served.clear()
            budget = max_bytes
            by_topic: dict[str, list] = {}
            order: list[str] = []
            for name, p in wanted:
                partition = self.partitions.get((name, p.partition))
                # a follower may ask before this broker has applied the LeaderAndIsr that makes it
                # leader (it waits on ZooKeeper): the fetch waits for it instead of failing
                arriving = replica_id >= 0 and name in self._loading_topics
                entry = {"partition_index": p.partition, "error_code": ErrorCode.none, "high_watermark": -1,
                         "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None if isolation == 0 else [],
                         "preferred_read_replica": -1, "records": b""}
                if partition is None:
                    entry["error_code"] = self._not_served(name, p.partition)
                    errors = errors or not arriving
                else:
                    result = partition.read_records(
                        p.fetch_offset, min(p.partition_max_bytes, budget),
                        getattr(p, "current_leader_epoch", -1),
                        committed_only=committed_only, min_one_batch=total == 0)
                    entry["error_code"] = result.error
                    errors = errors or (result.error is not ErrorCode.none and not arriving)
                    if result.error is ErrorCode.none:
                        served.append((name, p))
                    entry["high_watermark"] = result.high_watermark
                    entry["last_stable_offset"] = result.high_watermark
                    entry["log_start_offset"] = result.log_start_offset
                    entry["records"] = result.records
                    total += len(result.records)
                    budget = max(0, budget - len(result.records))
                if name not in by_topic:
                    by_topic[name] = []
                    order.append(name)
                by_topic[name].append(entry)
            topics = [{"topic": name, "partitions": by_topic[name]} for name in order]
            return topics, total, errors

        topics, total, errors = read_all()
        effects: list = []
        if replica_id >= 0:
            effects = self._follower_fetched(replica_id, list(served), now_ms)
        if max_wait_ms <= 0 or total >= min_bytes or errors or not wanted:
            return effects + [self._fetch_response(conn_id, header, topics)]

        def try_complete(when_ms: int, expired: bool) -> list | None:
            topics, total, errors = read_all()
            if expired or total >= min_bytes or errors:
                return [self._fetch_response(conn_id, header, topics)]
            return None

        keys = tuple((name, p.partition) for name, p in wanted)
        self.fetch_purgatory.watch(DelayedOperation(conn_id, now_ms + max_wait_ms, keys, try_complete))
        return effects

    def _follower_fetched(self, follower_id: int, served: list, now_ms: int) -> list:
        """A follower's fetch offset is its LEO (REP-1): for the partitions its fetch was served
        (an answer with an error says nothing of its progress), update its state on the leader,
        complete what a higher HW allows, and propose ISR expansion (ISR-4) unless the controller
        considers that broker dead (KIP-841: the latest UpdateMetadata does not list it)."""
        advanced = []
        effects: list = []
        alive = follower_id in self.metadata.brokers
        for name, p in served:
            partition = self.partitions.get((name, p.partition))
            if partition is None or not partition.is_leader:
                continue
            if partition.update_follower_fetch_state(follower_id, p.fetch_offset, now_ms):
                advanced.append((name, p.partition))
            new_isr = partition.isr_to_expand(follower_id) if alive else None
            if new_isr is not None:
                effects.extend(self._change_isr(partition, new_isr, now_ms))
        return effects + self._high_watermark_moved(advanced, now_ms)

    def _high_watermark_moved(self, keys: list, now_ms: int) -> list:
        if not keys:
            return []
        return self.produce_purgatory.check_keys(keys, now_ms) + self.fetch_purgatory.check_keys(keys, now_ms)

    def _change_isr(self, partition: Partition, new_isr: tuple[int, ...], now_ms: int) -> list:
        """ISR-5: write the new ISR with compare-and-set on the state znode's version; it counts
        for the high watermark at once (the maximal ISR) but replaces the ISR only once ZooKeeper
        has it. An answer that does not say (connection loss) or a version conflict is settled by
        reading the state back, as Kafka's ``checkLeaderAndIsrZkData`` does."""
        state = LeaderAndIsr(partition.leader_id, partition.leader_epoch, tuple(new_isr),
                             partition.controller_epoch, partition.zk_version)
        partition.pending_isr = state.isr
        op = zk_layout.update_partition_state(partition.topic, partition.index, state)

        def on_result(results: list, when_ms: int) -> list:
            if not self._still_pending(partition, state):
                return []       # the controller has told this broker a newer state meanwhile
            if results[0].error is ZkError.NONE:
                return self._isr_changed(partition, state, results[0].version, when_ms)
            partition.isr_outcome_unknown = True
            return self._read_back_isr(partition, state, when_ms)

        return [self._zk([op], on_result)]

    def _still_pending(self, partition: Partition, state: LeaderAndIsr) -> bool:
        """Whether ``state`` is still the change in flight: same partition object, still leader
        in the same epoch on the same znode version (no LeaderAndIsr came in between)."""
        key = (partition.topic, partition.index)
        return self.partitions.get(key) is partition and partition.is_leader and \
            partition.pending_isr == state.isr and partition.leader_epoch == state.leader_epoch and \
            partition.zk_version == state.zk_version

    def _read_back_isr(self, partition: Partition, state: LeaderAndIsr, now_ms: int) -> list:
        """What ZooKeeper holds decides: exactly our write (applied after all), the version we
        wrote on (not applied: our view is current, the change may be proposed again), or
        anything else (our view is stale: no more writes until the controller says our role).
        While ZooKeeper cannot be read the partition acknowledges nothing and asks again."""
        key = (partition.topic, partition.index)

        def on_read(results: list, when_ms: int) -> list:
            if not self._still_pending(partition, state):
                return []
            res = results[0]
            if res.error is not ZkError.NONE:
                return self._after(when_ms + ISR_READ_BACK_RETRY_MS,
                                   lambda t: self._read_back_isr(partition, state, t)
                                   if self._still_pending(partition, state) else [])
            current = znodes.TopicPartitionStateZNode.decode(res.data, res.version)
            if dataclasses.replace(current, zk_version=0) == dataclasses.replace(state, zk_version=0):
                return self._isr_changed(partition, state, current.zk_version, when_ms)
            if current.zk_version == state.zk_version:
                partition.pending_isr = None
                partition.isr_outcome_unknown = False
                return [Log("info", f"ISR change of {key[0]}-{key[1]} to {list(state.isr)} was not applied; "
                                    f"ZooKeeper still holds version {current.zk_version}")]
            partition.pending_isr = None
            partition.isr_outcome_unknown = False
            partition.isr_update_failed = True
            return [Log("warning", f"Cached zkVersion {state.zk_version} of {key[0]}-{key[1]} is not the one in "
                                   f"ZooKeeper ({current.zk_version}: leader {current.leader}, epoch "
                                   f"{current.leader_epoch}, ISR {list(current.isr)}); skip updating ISR and "
                                   f"acknowledge no write until the controller says this broker's role")] + \
                self._high_watermark_moved([key], when_ms)

        return [self._zk([GetData(znodes.TopicPartitionStateZNode.path(*key))], on_read)]

    def _isr_changed(self, partition: Partition, state: LeaderAndIsr, zk_version: int, now_ms: int) -> list:
        key = (partition.topic, partition.index)
        old_isr = partition.isr
        advanced = partition.apply_isr(state.isr, zk_version, now_ms)
        self._record_isr_change(key, now_ms)
        topic = self.metadata.topics.get(key[0])
        if topic is not None:
            topic.states[key[1]] = dataclasses.replace(state, zk_version=zk_version)
        effects: list = [Log("info", f"ISR of {key[0]}-{key[1]} changed from {list(old_isr)} to {list(state.isr)}")]
        return effects + self._high_watermark_moved([key] if advanced else [], now_ms)

    def _record_isr_change(self, key: tuple[str, int], now_ms: int) -> None:
        self._isr_change_set.add(key)
        self._last_isr_change_ms = now_ms

    def _maybe_shrink_isrs(self, now_ms: int) -> list:
        """ISR-3: the isr-expiration task drops followers that lag more than replica.lag.time.max.ms."""
        effects: list = []
        for partition in self.partitions.values():
            new_isr = partition.isr_to_shrink(now_ms)
            if new_isr is not None:
                effects.extend(self._change_isr(partition, new_isr, now_ms))
        return effects

    def _maybe_propagate_isr_changes(self, now_ms: int) -> list:
        """ISR-6: write changed partitions as one sequential node under /isr_change_notification once
        the last change is 5 s old, or at least every 60 s."""
        if not self._isr_change_set:
            return []
        if not (self._last_isr_change_ms + ISR_CHANGE_BLACKOUT_MS < now_ms
                or self._last_isr_propagation_ms + ISR_CHANGE_MAX_DELAY_MS < now_ms):
            return []
        changed = sorted(self._isr_change_set)
        self._isr_change_set.clear()
        self._last_isr_propagation_ms = now_ms

        def on_result(results: list, when_ms: int) -> list:
            if results[0].error is ZkError.NONE:
                return []
            # not written (or not known to be): tell again on the next round; a duplicate is harmless
            self._isr_change_set.update(changed)
            return [Log("warning", f"Writing the ISR change notification failed ({results[0].error.name}); "
                                   f"will write it again")]
        return [self._zk([zk_layout.isr_change_notification(changed)], on_result)]

    def _fetch_response(self, conn_id: int, header: RequestHeader, topics: list) -> Send:
        body = {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": topics}
        return Send(conn_id, api.encode_fetch_response(header, body))

    # -- ListOffsets

    def _list_offsets(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        replica_id = request.replica_id
        named = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                partition = self.partitions.get((t.name, p.partition_index))
                entry = {"partition_index": p.partition_index, "error_code": ErrorCode.none,
                         "timestamp": -1, "offset": -1, "leader_epoch": -1}
                if named[(t.name, p.partition_index)] > 1:    # as Kafka 2.8: each is answered once
                    entry["error_code"] = ErrorCode.invalid_request
                    parts.append(entry)
                    continue
                if partition is None or not partition.is_leader:
                    entry["error_code"] = self._not_served(t.name, p.partition_index)
                    parts.append(entry)
                    continue
                error = partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                if error is not ErrorCode.none:
                    entry["error_code"] = error
                    parts.append(entry)
                    continue
                log = partition.log
                limit = partition.high_watermark if replica_id == CONSUMER_REPLICA_ID else log.log_end_offset
                ts = p.timestamp
                if ts == EARLIEST_TIMESTAMP:
                    entry["offset"] = log.log_start_offset
                elif ts == LATEST_TIMESTAMP:
                    entry["offset"] = limit
                else:
                    try:
                        found = (log.find_max_timestamp(limit) if ts == MAX_TIMESTAMP
                                 else log.find_offset_by_timestamp(ts))
                    except UndecodableRecordsError:
                        entry["error_code"] = ErrorCode.corrupt_message
                        parts.append(entry)
                        continue
                    if found is not None and found[0] < limit:
                        entry["offset"], entry["timestamp"] = found
                if entry["offset"] >= 0:
                    # Kafka: the current epoch for LATEST, else the epoch of the batch found
                    entry["leader_epoch"] = (partition.leader_epoch if ts == LATEST_TIMESTAMP
                                             else log.leader_epoch_cache.epoch_for_offset(entry["offset"]))
                parts.append(entry)
            topics.append({"name": t.name, "partitions": parts})
        return [self._respond(conn_id, header, {"throttle_time": 0, "topics": topics})]

    # -- OffsetForLeaderEpoch

    def _offset_for_leader_epoch(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                partition = self.partitions.get((t.topic, p.partition))
                entry = {"error_code": ErrorCode.none, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
                if partition is None or not partition.is_leader:
                    entry["error_code"] = self._not_served(t.topic, p.partition)
                else:
                    error = partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                    if error is not ErrorCode.none:
                        entry["error_code"] = error
                    else:
                        epoch, end = partition.log.leader_epoch_cache.end_offset_for(
                            p.leader_epoch, partition.log.log_end_offset)
                        entry["leader_epoch"], entry["end_offset"] = epoch, end
                parts.append(entry)
            topics.append({"topic": t.topic, "partitions": parts})
        return [self._respond(conn_id, header, {"throttle_time": 0, "topics": topics})]

    # -- CreateTopics

    def _create_topics(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        results: dict[str, dict] = {}
        order: list[str] = []
        effects: list = []
        pending: set[str] = set()
        validate_only = getattr(request, "validate_only", False)
        seen: set[str] = set()

        def respond() -> Send:
            return self._respond(conn_id, header, {"throttle_time": 0, "topics": [results[n] for n in order]})

        not_controller = not self.is_controller
        for spec in request.topics:
            name = spec.name
            order.append(name)
            result = {"name": name, "topic_id": uuid.UUID(int=0), "error_code": ErrorCode.none,
                      "error_message": None, "num_partitions": -1, "replication_factor": -1, "configs": []}
            results[name] = result
            if name in seen:
                result["error_code"], result["error_message"] = ErrorCode.invalid_request, "Duplicate topic in request"
                continue
            seen.add(name)
            if not_controller:
                result["error_code"] = ErrorCode.not_controller
                result["error_message"] = f"This is not the controller (broker {self.metadata.controller_id} is)"
                continue
            plan = self._plan_topic(name, spec.num_partitions, spec.replication_factor,
                                    {a.partition_index: tuple(a.broker_ids) for a in spec.assignments},
                                    {c.name: c.value for c in spec.configs})
            if isinstance(plan, tuple):
                result["error_code"], result["error_message"] = plan
                continue
            result["num_partitions"] = plan.num_partitions
            result["replication_factor"] = len(plan.assignment[0])
            result["configs"] = [{"name": k, "value": str(v), "read_only": False, "config_source": 1,
                                  "is_sensitive": False} for k, v in sorted(plan.configs.items())]
            if validate_only:
                continue
            result["topic_id"] = plan.topic_id
            pending.add(name)

            def finish(error: ErrorCode, message: str | None, when_ms: int, name: str = name) -> list:
                res = results[name]
                if error is not ErrorCode.none:
                    res["error_code"], res["error_message"] = error, message
                    res["topic_id"] = uuid.UUID(int=0)
                pending.discard(name)
                return [] if pending else [respond()]

            effects.extend(self._create_topic(plan, finish, now_ms))
        if not pending:
            effects.append(respond())
        return effects

    def _plan_topic(self, name: str, num_partitions: int, replication_factor: int,
                    manual: dict[int, tuple[int, ...]], raw_configs: dict[str, str | None]
                    ) -> TopicMetadata | tuple[ErrorCode, str]:
        invalid = topic_name_error(name)
        if invalid:
            return ErrorCode.invalid_topic_exception, invalid
        if name in self.metadata.topics or name in self._creating:
            return ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
        try:
            configs = parse_topic_configs(raw_configs)
        except ConfigError as exc:
            return ErrorCode.invalid_config, str(exc)
        live = self.metadata.live_broker_ids()
        if manual:
            if num_partitions != -1 or replication_factor != -1:
                return ErrorCode.invalid_request, "Both replica assignments and partitions/replication factor were set"
            if sorted(manual) != list(range(len(manual))):
                return ErrorCode.invalid_replica_assignment, "Partitions must be numbered 0..n-1"
            sizes = {len(r) for r in manual.values()}
            if len(sizes) != 1 or any(len(set(r)) != len(r) for r in manual.values()):
                return ErrorCode.invalid_replica_assignment, "Every partition needs the same number of distinct replicas"
            unknown = sorted({b for r in manual.values() for b in r} - set(live))
            if unknown:
                return ErrorCode.invalid_replica_assignment, f"Unknown broker(s) {unknown} in replica assignment"
            num_partitions, replication_factor = len(manual), len(manual[0])
        else:
            if num_partitions == -1:
                num_partitions = self.config["num.partitions"]
            if replication_factor == -1:
                replication_factor = self.config["default.replication.factor"]
            if num_partitions <= 0:
                return ErrorCode.invalid_partitions, f"Number of partitions must be larger than 0, got {num_partitions}"
            if not live:
                return ErrorCode.broker_not_available, "No live brokers"
        try:
            check_replication_factor(replication_factor, len(live))
        except InvalidReplicationFactor as exc:
            return ErrorCode.invalid_replication_factor, str(exc)
        # checked before planning: the work grows with the partitions, and the znodes must fit
        limit = zk_layout.max_partitions(TopicMetadata(name, uuid.UUID(int=0), {}, {}, configs), replication_factor,
                                         live, self.controller_epoch, self._fenced([]),
                                         zk_layout.chroot(self.config["zookeeper.connect"]))
        if num_partitions > limit:
            return ErrorCode.invalid_partitions, (
                f"Number of partitions {num_partitions} is above the limit of {limit} for topic '{name}' with "
                f"replication factor {replication_factor}: its znodes must fit in one ZooKeeper request of at "
                f"most {zk_layout.JUTE_MAXBUFFER} bytes (jute.maxbuffer)")
        if manual:
            assignment = {p: tuple(r) for p, r in manual.items()}
        else:
            n = len(live)
            racks = {b: self.metadata.brokers[b].rack for b in live}
            raw = assign_replicas(live, num_partitions, replication_factor,
                                  self.rng.randrange(n), self.rng.randrange(n), racks=racks)
            assignment = {p: tuple(r) for p, r in raw.items()}
        return TopicMetadata(name, self.new_uuid(), assignment, {}, configs)

    def _create_topic(self, plan: TopicMetadata, done: Callable[[ErrorCode, str | None, int], list],
                      now_ms: int) -> list:
        """Write the topic's znodes in one transaction (controller role), then serve it."""
        live = set(self.metadata.live_broker_ids())
        for index, replicas in plan.assignment.items():
            alive = tuple(r for r in replicas if r in live)
            leader = alive[0] if alive else -1
            plan.states[index] = LeaderAndIsr(leader, 0, alive, self.controller_epoch, 0)
        self._creating[plan.name] = [done]
        ops = self._fenced(zk_layout.create_topic_ops(plan, self.controller_epoch))

        def on_result(results: list, when_ms: int) -> list:
            waiters = self._creating.pop(plan.name, [])
            failed = next((r for r in results if r.error is not ZkError.NONE), None)
            effects: list = []
            if failed is not None:
                if failed.error is ZkError.NODE_EXISTS:
                    error, message = ErrorCode.topic_already_exists, f"Topic '{plan.name}' already exists."
                elif failed.error is ZkError.BAD_VERSION:
                    error, message = ErrorCode.not_controller, "This broker is no longer the controller"
                else:
                    error, message = ErrorCode.unknown_server_error, f"ZooKeeper error {failed.error.name}"
                effects.append(Log("warning", f"Creating topic {plan.name} failed: {message}"))
            else:
                self.metadata.topics[plan.name] = plan
                parts = [(plan, index) for index in sorted(plan.assignment)]
                effects.extend(self._send_partition_states(parts, None, True, when_ms))
                effects.append(Log("info", f"Created topic {plan.name} with {plan.num_partitions} partition(s), "
                                           f"assignment {dict(plan.assignment)}"))
                error, message = ErrorCode.none, None
            for waiter in waiters:
                effects.extend(waiter(error, message, when_ms))
            return effects

        return [self._zk(ops, on_result, transaction=True)]

    def _auto_create(self, name: str, done: Callable[[ErrorCode, str | None, int], list], now_ms: int) -> list:
        if name in self.metadata.topics:
            return done(ErrorCode.none, None, now_ms)
        if name in self._creating:
            self._creating[name].append(done)
            return []
        live = self.metadata.live_broker_ids()
        rf = min(self.config["default.replication.factor"], max(1, len(live)))
        if not self.is_controller:
            return self._forward_create(name, self.config["num.partitions"], rf, done, now_ms)
        plan = self._plan_topic(name, self.config["num.partitions"], rf, {}, {})
        if isinstance(plan, tuple):
            return done(plan[0], plan[1], now_ms)
        return self._create_topic(plan, done, now_ms)

    def _forward_create(self, name: str, num_partitions: int, replication_factor: int,
                        done: Callable[[ErrorCode, str | None, int], list], now_ms: int,
                        configs: dict[str, str] | None = None) -> list:
        """Ask the controller to create a topic (Kafka 2.8's auto-topic-creation forwarding)."""
        self._creating[name] = [done]
        body = {"topics": [{"name": name, "num_partitions": num_partitions,
                            "replication_factor": replication_factor, "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                "timeout": 30000, "validate_only": False}

        def on_response(frame: bytes | None, when_ms: int) -> list:
            waiters = self._creating.pop(name, [])
            error, message = ErrorCode.leader_not_available, "the controller is not reachable"
            if frame is not None:
                try:
                    result = api.decode_response(ApiKey.CREATE_TOPICS, 5, frame).topics[0]
                    error, message = ErrorCode(int(result.error_code)), result.error_message
                except Exception as exc:
                    message = f"bad answer from the controller: {exc}"
            effects: list = []
            for waiter in waiters:
                effects.extend(waiter(error, message, when_ms))
            return effects

        return self._send_to_broker(
            self.metadata.controller_id, "forwarding",
            lambda cid: api.encode_request(ApiKey.CREATE_TOPICS, 5, cid, f"strandline-broker-{self.broker_id}", body),
            on_response, now_ms)

    # -- DeleteTopics

    def _delete_topics(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        if header.api_version >= 6:
            names = [t.name for t in request.topics]
        else:
            names = list(request.topic_names)
        results = {n: {"name": n, "topic_id": uuid.UUID(int=0), "error_code": ErrorCode.none, "error_message": None}
                   for n in names}
        pending: set[str] = set()
        effects: list = []

        def respond() -> Send:
            return self._respond(conn_id, header, {"throttle_time": 0, "responses": [results[n] for n in names]})

        for name in dict.fromkeys(names):
            topic = self.metadata.topics.get(name)
            if not self.is_controller:
                results[name]["error_code"] = ErrorCode.not_controller
                results[name]["error_message"] = f"This is not the controller (broker {self.metadata.controller_id} is)"
                continue
            if topic is None:
                results[name]["error_code"] = ErrorCode.unknown_topic_or_partition
                continue
            if not self.config["delete.topic.enable"]:
                results[name]["error_code"] = ErrorCode.topic_deletion_disabled
                continue
            if name in INTERNAL_TOPICS:
                # Kafka 2.8's brokers delete it; its kafka-topics tool refuses: every group's offsets would go
                results[name]["error_code"] = ErrorCode.invalid_topic_exception
                results[name]["error_message"] = f"Topic {name} is an internal topic and is not allowed to be deleted"
                continue
            results[name]["topic_id"] = topic.topic_id
            pending.add(name)

            def on_result(res: list, when_ms: int, name: str = name) -> list:
                out: list = []
                failed = next((r for r in res if r.error not in (ZkError.NONE, ZkError.NO_NODE)), None)
                if failed is not None:
                    results[name]["error_code"] = ErrorCode.unknown_server_error
                    results[name]["error_message"] = f"ZooKeeper error {failed.error.name}"
                else:
                    out.extend(self._drop_topic(name, when_ms))
                pending.discard(name)
                if not pending:
                    out.append(respond())
                return out

            effects.append(self._zk(zk_layout.delete_topic_ops(name), on_result))
        if not pending:
            effects.append(respond())
        return effects

    def _drop_topic(self, name: str, now_ms: int) -> list:
        """After the znodes are gone: StopReplica(delete) to the replicas, and UpdateMetadata
        marking the partitions deleted to every broker (this one included)."""
        topic = self.metadata.topics.get(name)
        if topic is None:
            return []
        effects: list = [Log("info", f"Deleted topic {name}")]
        per_broker: dict[int, list[int]] = {}
        for index, replicas in topic.assignment.items():
            for replica in replicas:
                per_broker.setdefault(replica, []).append(index)
        for broker_id, indexes in sorted(per_broker.items()):
            if broker_id in self.metadata.brokers:
                body = {**self._control_header(), "delete_partitions": True,
                        "topics": [{"name": name, "partition_indexes": sorted(indexes)}]}
                effects.extend(self._send_control(broker_id, control.STOP_REPLICA, body, now_ms))
        body = self._update_metadata_body([], [(name, index) for index in sorted(topic.assignment)])
        for broker_id in sorted(self.metadata.brokers):
            effects.extend(self._send_control(broker_id, control.UPDATE_METADATA, body, now_ms))
        return effects

    # -- InitProducerId

    def _init_producer_id(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        if request.transactional_id is not None:
            return [self._respond(conn_id, header, {
                "throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                "producer_id": -1, "producer_epoch": -1})]
        old_pid = getattr(request, "producer_id", -1)
        old_epoch = getattr(request, "producer_epoch", -1)
        if old_pid >= 0 and 0 <= old_epoch < 32766:
            # KIP-360: an idempotent producer bumps its epoch to recover from a sequence error.
            return [self._respond(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none,
                                                    "producer_id": old_pid, "producer_epoch": old_epoch + 1})]

        def answer(pid: int, when_ms: int) -> list:
            if pid < 0:
                return [self._respond(conn_id, header, {"throttle_time": 0,
                                                        "error_code": ErrorCode.coordinator_not_available,
                                                        "producer_id": -1, "producer_epoch": -1})]
            return [self._respond(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none,
                                                    "producer_id": pid, "producer_epoch": 0})]

        return self._allocate_producer_id(answer, now_ms)

    def _allocate_producer_id(self, callback: Callable[[int, int], list], now_ms: int) -> list:
        next_id, end = self._producer_ids
        if next_id < end:
            self._producer_ids = (next_id + 1, end)
            return callback(next_id, now_ms)
        self._producer_id_waiters.append(callback)
        if self._producer_id_fetching:
            return []
        self._producer_id_fetching = True
        return [self._zk([zk_layout.get_producer_id_block()], self._on_producer_block_read)]

    def _on_producer_block_read(self, results: list, now_ms: int) -> list:
        result = results[0]
        if result.error is ZkError.NO_NODE:
            start, version = 0, -1
        elif result.error is ZkError.NONE:
            start, version = zk_layout.next_producer_id_block_start(result.data), result.version
        else:
            return self._fail_producer_ids(now_ms)
        end = start + PRODUCER_ID_BLOCK_SIZE
        op = zk_layout.claim_producer_id_block(self.broker_id, start, end - 1, version)

        def on_claimed(res: list, when_ms: int) -> list:
            if res[0].error in (ZkError.BAD_VERSION, ZkError.NODE_EXISTS):
                return [self._zk([zk_layout.get_producer_id_block()], self._on_producer_block_read)]
            if res[0].error is not ZkError.NONE:
                return self._fail_producer_ids(when_ms)
            self._producer_ids = (start, end)
            self._producer_id_fetching = False
            waiters, self._producer_id_waiters = self._producer_id_waiters, []
            effects: list = []
            for waiter in waiters:
                effects.extend(self._allocate_producer_id(waiter, when_ms))
            return effects

        return [self._zk([op], on_claimed)]

    def _fail_producer_ids(self, now_ms: int) -> list:
        self._producer_id_fetching = False
        waiters, self._producer_id_waiters = self._producer_id_waiters, []
        effects: list = []
        for waiter in waiters:
            effects.extend(waiter(-1, now_ms))
        return effects

    # -- ElectLeaders

    def _elect_leaders(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list:
        election_type = getattr(request, "election_type", 0)
        wanted = None if request.topic_partitions is None else \
            list(dict.fromkeys((t.topic, p) for t in request.topic_partitions for p in t.partitions))  # a set, as Kafka

        def respond(results: dict, error: ErrorCode = ErrorCode.none) -> list:
            by_topic: dict[str, list] = {}
            for (name, index), (code, message) in results.items():
                by_topic.setdefault(name, []).append(
                    {"partition_id": index, "error_code": code, "error_message": message})
            return [self._respond(conn_id, header, {
                "throttle_time": 0, "error_code": error,
                "replica_election_results": [{"topic": n, "partition_result": p} for n, p in by_topic.items()]})]

        if not self.is_controller:
            return respond({k: (ErrorCode.not_controller, None) for k in wanted or []}, ErrorCode.not_controller)
        if election_type != 0:
            return respond({k: (ErrorCode.invalid_request, "only preferred leader election (type 0) is served")
                            for k in wanted or []})
        keys = wanted if wanted is not None else [(t.name, i) for t, i in self._all_partitions()]
        known = [k for k in keys if k[0] in self.metadata.topics and k[1] in self.metadata.topics[k[0]].assignment]
        already = {k for k in known
                   if (s := self.metadata.topics[k[0]].states.get(k[1])) is not None
                   and s.leader == self.metadata.topics[k[0]].assignment[k[1]][0]}

        def done(when_ms: int) -> list:
            results = {}
            for k in keys:
                results[k] = (ErrorCode.election_not_needed, None) if k in already and wanted is not None \
                    else self._preferred_result(k)
            if wanted is None:   # all partitions: report only those that were not led by their preferred replica
                results = {k: v for k, v in results.items() if k not in already}
            return respond(results)

        return self.elect_preferred_leaders([k for k in known if k not in already], now_ms, done)

    _handlers: dict[int, Callable] = {
        ApiKey.ELECT_LEADERS: _elect_leaders,
        ApiKey.FIND_COORDINATOR: Groups._find_coordinator,
        ApiKey.JOIN_GROUP: Groups._join_group,
        ApiKey.SYNC_GROUP: Groups._sync_group,
        ApiKey.HEARTBEAT: Groups._heartbeat,
        ApiKey.LEAVE_GROUP: Groups._leave_group,
        ApiKey.OFFSET_COMMIT: Groups._offset_commit,
        ApiKey.OFFSET_FETCH: Groups._offset_fetch,
        ApiKey.LIST_GROUPS: Groups._list_groups,
        ApiKey.DESCRIBE_GROUPS: Groups._describe_groups,
        ApiKey.DELETE_GROUPS: Groups._delete_groups,
        ApiKey.API_VERSIONS: _api_versions,
        ApiKey.METADATA: _metadata,
        ApiKey.PRODUCE: _produce,
        ApiKey.FETCH: _fetch,
        ApiKey.LIST_OFFSETS: _list_offsets,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
        ApiKey.CREATE_TOPICS: _create_topics,
        ApiKey.DELETE_TOPICS: _delete_topics,
        ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    }


def _valid_software_field(value: str | None) -> bool:
    """KIP-511: client software name and version must match ``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?``."""
    return bool(value) and _SOFTWARE_FIELD.fullmatch(value) is not None
