"""``Broker``: one broker's core, the composition root (Kafka's KafkaServer without its threads).

It builds the components, each owning its state, and wires them through a few named methods:

- :class:`~strandline.replication.replica_manager.ReplicaManager`: the partitions this broker hosts;
- :class:`~strandline.controller.controller.Controller`: the controller role;
- :class:`~strandline.group.coordinator.GroupCoordinator` with its
  :class:`~strandline.group.offsets_topic.OffsetsTopic`: consumer groups;
- :class:`~strandline.security.authorizer.AclAuthorizer`: ACLs and who may do what;
- :class:`~strandline.broker.apis.KafkaApis`: the request router.

``Broker`` never touches a socket, a clock or ZooKeeper itself. The shell (``runtime/``) or the
simulator (``sim/``) feeds it events with the current time and carries out the effects it returns
(:mod:`strandline.core.effects`); answers to what a component asked for come back through the
shared :class:`~strandline.core.outbox.Outbox`. Every transition runs to completion without
awaiting, so no locks are needed.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.broker.admin_apis import AdminApis
from strandline.broker.alter_isr_sender import AlterIsrSender
from strandline.broker.apis import KafkaApis
from strandline.broker.log_apis import LogApis
from strandline.security.authorizer import AclAuthorizer
from strandline.broker.auto_topic_creation import AutoTopicCreationManager
from strandline.core import api_version
from strandline.core.config import BrokerConfig
from strandline.broker.config_apis import ConfigApis
from strandline.broker.loggers import BrokerLoggers
from strandline.broker.dynamic_config import DynamicConfigManager
from strandline.broker.features import FeatureApis, FinalizedFeatures
from strandline.core.effects import Effect, FlushFiles, LogLine, WriteCheckpoint
from strandline.broker.group_apis import GroupApis
from strandline.broker.group_configs import GroupConfigs
from strandline.broker.zk_offsets import ZkOffsets
from strandline.core.outbox import Outbox
from strandline.transaction.producer_ids import ProducerIdManager
from strandline.broker.quota_apis import QuotaApis
from strandline.broker.share_state_apis import ShareStateApis
from strandline.broker.shutdown import ControlledShutdown
from strandline.broker.txn_apis import TxnApis
from strandline.transaction.markers import TransactionMarkers
from strandline.transaction.verification import TransactionVerifier
from strandline.transaction.state_topic import TXN_TOPIC, TransactionStateTopic
from strandline.controller.controller import Controller
from strandline.coordination import znodes
from strandline.coordination.metadata import MetadataCache, TopicMetadata
from strandline.coordination.store import OpResult, SetData, ZkError
from strandline.coordination.znodes import BrokerInfo
from strandline.group.consumer.model import TopicMetadata as ConsumerTopic
from strandline.group.consumer_groups import ConsumerGroups
from strandline.group.coordinator import GroupCoordinator
from strandline.group.offsets_topic import OFFSETS_TOPIC, OffsetsTopic
from strandline.group.share.coordinator import ShareCoordinator
from strandline.group.share.state_topic import SHARE_STATE_TOPIC, ShareStateTopic
from strandline.log.cleaner import LogCleaner
from strandline.log.manager import LogManager
from strandline.replication.fetch_session import FetchSessionCache
from strandline.replication.fetcher import ReplicaFetcher
from strandline.replication.isr_manager import ISR_CHANGE_CHECK_INTERVAL_MS
from strandline.replication.partition import Partition
from strandline.replication.replica_manager import ReplicaManager
from strandline.transaction.coordinator import TransactionCoordinator


@dataclass
class Scheduled:
    name: str
    interval_ms: int
    next_ms: int


class Broker:
    """One broker's core state machine."""

    def __init__(self, config: BrokerConfig, log_manager: LogManager, *, rng: Any,
                 new_uuid: Callable[[], uuid.UUID] = uuid.uuid4, now_ms: int = 0,
                 loggers: dict[str, str | None] | None = None) -> None:
        """``loggers``: the shell's loggers and their own levels (see :mod:`strandline.broker.loggers`)."""
        self.config = config
        self.broker_id = config.broker_id
        self.logs = log_manager
        log_manager.flush_rolls_later()         # a roll's fsync never holds up the event loop
        self.metadata = MetadataCache()
        self.outbox = Outbox(config)
        self.broker_epoch = -1                  # this broker's registration (czxid), KIP-380
        self.replica_manager = ReplicaManager(config, log_manager, self.metadata, self.outbox,
                                              lambda: self.broker_epoch, now_ms)
        self.controller = Controller(config, self.outbox, rng=rng, new_uuid=new_uuid,
                                     deliver_locally=self._deliver_control, controller_seen=self._controller_seen,
                                     local_log_info=self.replica_manager.local_log_info)
        if self.replica_manager.alter_isr is not None:     # inter.broker.protocol.version 2.7+
            self.replica_manager.alter_isr.send = AlterIsrSender(self.broker_id, self.metadata, self.controller,
                                                                 self.outbox)
        self.offsets_topic = OffsetsTopic(config, self.replica_manager.writes.append_internal,
                                          self.replica_manager.read_log)
        self.groups = GroupCoordinator(config, self.offsets_topic.append, lambda: str(new_uuid()))
        self.group_configs = GroupConfigs(config, self.outbox)
        self.consumer_groups = ConsumerGroups(
            config, self.groups, self._consumer_group_topics, lambda: str(new_uuid()),
            lambda index: self.replica_manager.partitions[(OFFSETS_TOPIC, index)].log.log_end_offset,
            functools.partial(self.replica_manager.writes.wait_committed, OFFSETS_TOPIC))
        self.consumer_groups.core.timings = lambda group_id: (
            self.group_configs.value(group_id, "consumer.session.timeout.ms"),
            self.group_configs.value(group_id, "consumer.heartbeat.interval.ms"))
        self.replica_manager.leadership_listeners.append(
            lambda topic, index, leader, t: self.offsets_topic.on_leadership(self.groups, topic, index, leader, t,
                                                                             self.consumer_groups,
                                                                             (self.apis.share_apis,)))
        self.auto_topics = AutoTopicCreationManager(config, self.metadata, self.controller, self.outbox)
        self.controlled_shutdown = ControlledShutdown(config, self.metadata, self.controller, self.outbox,
                                                      lambda: self.broker_epoch)
        self.authorizer = AclAuthorizer(config, self.outbox)
        producer_ids = ProducerIdManager(self.broker_id, self.outbox)
        self.transaction_state = TransactionStateTopic(config, self.replica_manager.writes.append_internal,
                                                       self.replica_manager.read_log)
        self.share_state = ShareStateTopic(config, self.replica_manager.writes.append_internal,
                                           self.replica_manager.read_log)
        self.share_coordinator = ShareCoordinator(
            self._share_state_partitions, self.share_state.append, self._partitions_of_topic_id,
            lambda index: self.replica_manager.partitions[(SHARE_STATE_TOPIC, index)].log.log_end_offset,
            functools.partial(self.replica_manager.writes.wait_committed, SHARE_STATE_TOPIC),
            config["request.timeout.ms"])
        self.replica_manager.leadership_listeners.append(
            lambda topic, index, leader, t: self.share_state.on_leadership(self.share_coordinator, topic, index,
                                                                           leader, t))
        self.auto_topics.internal = {OFFSETS_TOPIC: self.offsets_topic.creation,
                                     TXN_TOPIC: self.transaction_state.creation,
                                     SHARE_STATE_TOPIC: self.share_state.creation}
        markers = TransactionMarkers(config, self.metadata, self.outbox)
        verifier = TransactionVerifier(config, self.metadata, self.outbox)
        self.replica_manager.verify_transaction = verifier.verify
        self.transactions = TransactionCoordinator(config, self.transaction_state.append,
                                                   producer_ids.generate_producer_id, markers.send, self.outbox.after)
        self.replica_manager.leadership_listeners.append(
            lambda topic, index, leader, t: self.transaction_state.on_leadership(
                self.transactions, topic, index, leader, self._leader_epoch_of(topic, index), t))
        self.features = FinalizedFeatures(config)
        txn_apis = TxnApis(config, self.metadata, self.transactions, self.transaction_state, self.auto_topics,
                           self._write_marker, self.authorizer, self.features)
        txn_apis.verifier = verifier
        self.apis = KafkaApis(config, self.metadata, self.replica_manager, self.controller, self.auto_topics,
                              producer_ids,
                              GroupApis(self.metadata, self.groups, self.offsets_topic, self.auto_topics,
                                        self.authorizer, txn_apis,
                                        ZkOffsets(config, self.metadata, self.outbox, self.authorizer),
                                        self.consumer_groups),
                              AdminApis(config, self.metadata, self.controller, self.authorizer),
                              ConfigApis(config, self.metadata, self.outbox, self.authorizer, BrokerLoggers(loggers)),
                              FetchSessionCache(config, rng), self.authorizer, txn_apis,
                              LogApis(self.metadata, self.replica_manager, self.authorizer),
                              QuotaApis(self.outbox, self.authorizer, lambda: self.controller.is_active),
                              FeatureApis(self.outbox, self.authorizer, self.features,
                                          lambda: self.controller.is_active),
                              ShareStateApis(config, self.authorizer, self.share_coordinator),
                              group_configs=self.group_configs)
        self.cleaner = LogCleaner(log_manager)
        self._configure_cleaner()
        self.dynamic_config = DynamicConfigManager(config, self.metadata, self.outbox, self._topic_config_changed,
                                                   self._broker_config_changed, self.apis.quota_apis.reload,
                                                   self.group_configs.reload)
        v = config.values
        self.scheduled = [
            Scheduled("highwatermark-checkpoint", v["replica.high.watermark.checkpoint.interval.ms"], now_ms),
            Scheduled("recovery-point-checkpoint", v["log.flush.offset.checkpoint.interval.ms"], now_ms),
            Scheduled("log-start-offset-checkpoint", v["log.flush.start.offset.checkpoint.interval.ms"], now_ms),
            Scheduled("log-retention", v["log.retention.check.interval.ms"], now_ms),
            Scheduled("log-flush", min(v["log.flush.scheduler.interval.ms"], 1 << 62), now_ms),
            Scheduled("isr-expiration", max(1, v["replica.lag.time.max.ms"] // 2), now_ms),
            Scheduled("isr-change-propagation", ISR_CHANGE_CHECK_INTERVAL_MS, now_ms),
            Scheduled("offsets-retention", v["offsets.retention.check.interval.ms"], now_ms),
            Scheduled("transaction-abort", v["transaction.abort.timed.out.transaction.cleanup.interval.ms"], now_ms),
        ]
        for task in self.scheduled:
            task.next_ms = now_ms + task.interval_ms

    # ------------------------------------------------------------------ what the shell and tests read

    @property
    def partitions(self) -> dict[tuple[str, int], Partition]:
        return self.replica_manager.partitions

    @property
    def fetchers(self) -> dict[int, ReplicaFetcher]:
        return self.replica_manager.fetcher_manager.fetchers

    @property
    def is_controller(self) -> bool:
        return self.controller.is_active

    @property
    def controller_epoch(self) -> int:
        """The controller epoch this broker acts in: its own as controller, else the newest heard."""
        epoch = self.controller.epoch
        return epoch if epoch is not None else self.replica_manager.controller_epoch

    @property
    def controlled_shutdown_done(self) -> bool:
        return self.controlled_shutdown.done

    # ------------------------------------------------------------------ lifecycle

    def load_metadata(self, cluster_id: str | None, brokers: dict[int, BrokerInfo], topics: dict[str, TopicMetadata],
                      controller_id: int, controller_epoch: int, now_ms: int,
                      controller_epoch_version: int | None = None) -> list[Effect]:
        """Install the cluster state read from ZooKeeper at start-up and open our replicas' logs.

        Leadership comes only from the controller's LeaderAndIsr; when this broker is the
        controller it takes office now (and sends them, to itself included)."""
        effects = self.replica_manager.startup(cluster_id, brokers, topics, controller_id, controller_epoch, now_ms)
        if controller_id == self.broker_id:
            # elected while starting: take office as any new controller does (read the cluster from
            # ZooKeeper, tell every broker, elect leaders for partitions that have none)
            effects.extend(self.controller.become_controller(controller_epoch, controller_epoch_version,
                                                             "won the controller election while starting"))
        return effects + self.apis.metadata_loaded(now_ms)

    def load_entity_configs(self, now_ms: int) -> list[Effect]:
        """Read every client quota and every group's config from ZooKeeper and apply them (the
        shell asks once the cluster is loaded; changes come with ``/config/changes`` afterwards)."""
        return self.apis.quota_apis.load(now_ms) + self.group_configs.load(now_ms)

    def on_registered(self, broker_epoch: int, now_ms: int = 0) -> list[Effect]:
        """The shell (re)registered this broker in ZooKeeper: control requests addressed to an
        earlier registration are refused from now on (STALE_BROKER_EPOCH). Registered again after
        its session was lost, it looks for topics deleted meanwhile (the controller told only the
        brokers registered then): read once registered, no deletion can fall between the two."""
        again = self.broker_epoch >= 0 and broker_epoch != self.broker_epoch
        self.broker_epoch = broker_epoch
        return self.replica_manager.forget_deleted_topics(now_ms) if again else []

    def registration_clean_shutdown(self) -> bool | None:
        """What this broker's registration says of its last shutdown (KIP-966): None with eligible
        leader replicas off (the registration is Kafka's); else whether its log dirs held the
        clean-shutdown marker at startup, none of them keeping an unclean shutdown that no
        controller handled, in every registration of this life: registered again (a new
        ZooKeeper session) before a controller took it out of the ISRs and ELRs, it must still be
        taken out."""
        if not api_version.elr_enabled(self.config):
            return None
        return self.logs.had_clean_shutdown

    def unclean_shutdown_unhandled(self, registration: BrokerInfo | None) -> bool:
        """Whether this life began after an unclean shutdown that no controller was seen to handle:
        ``registration`` is this broker's registration as read before a clean stop (None: not
        read), which a controller marks with the broker epoch it handled. The clean-shutdown
        marker then keeps it, so that a clean stop does not hide what the unclean one cut."""
        if self.logs.had_clean_shutdown:
            return False
        return registration is None or registration.unclean_shutdown_handled != self.broker_epoch

    def begin_controlled_shutdown(self, now_ms: int) -> list[Effect]:
        """Ask the controller to move this broker's leaderships away before it stops;
        ``controlled_shutdown_done`` turns True when the broker may stop."""
        self.replica_manager.begin_controlled_shutdown()
        return self.controlled_shutdown.begin(now_ms)

    def shutdown(self, registration: BrokerInfo | None = None) -> None:
        """Clean shutdown: checkpoint high watermarks, flush logs, write the clean-shutdown marker
        (:meth:`unclean_shutdown_unhandled` of ``registration``, this broker's registration as the
        shell read it last, None if it could not). The shell has written every
        ``WriteCheckpoint`` it was given before it calls this."""
        self.replica_manager.checkpoint_high_watermarks()
        self.logs.write_checkpoints(self.cleaner.take_checkpoint_writes())
        self.logs.shutdown(self.unclean_shutdown_unhandled(registration))

    # ------------------------------------------------------------------ events

    def handle_request(self, conn_id: int, frame: bytes | bytearray, now_ms: int) -> list[Effect]:
        """Decode and answer one request frame of connection ``conn_id``."""
        return self.apis.handle_request(conn_id, frame, now_ms)

    def connection_opened(self, conn_id: int, host: str, listener: str = "PLAINTEXT",
                          principal: str = "User:ANONYMOUS") -> list[Effect]:
        """A client connected from ``host`` (its IP address, which ACLs may name) on ``listener``,
        authenticated as ``principal`` (a SASL listener's connection reaches the core only once
        authenticated)."""
        protocol = next((l.protocol for l in getattr(self.config, "listeners", ()) if l.name == listener), "PLAINTEXT")
        self.authorizer.connection_opened(conn_id, host, listener, principal, protocol)
        return []

    def connection_closed(self, conn_id: int) -> None:
        self.authorizer.connection_closed(conn_id)
        self.apis.connection_closed(conn_id)
        self.replica_manager.connection_closed(conn_id)

    def on_files_flushed(self, token: int, now_ms: int) -> list[Effect]:
        """The :class:`~strandline.core.effects.FlushFiles` ``token`` is done: the log's recovery
        point passes the rolled segment."""
        self.logs.roll_flushed(token)
        return []

    def on_zk_result(self, token: int, results: Any, now_ms: int) -> list[Effect]:
        return self.outbox.on_zk_result(token, results, now_ms)

    def on_broker_response(self, token: int, frame: bytes | None, now_ms: int) -> list[Effect]:
        """The answer to a :class:`~strandline.core.effects.BrokerSend` (None: no answer)."""
        return self.outbox.on_broker_response(token, frame, now_ms)

    def on_controller_changed(self, controller_id: int | None, now_ms: int) -> list[Effect]:
        """``/controller`` changed (None: it is gone)."""
        return self.controller.on_controller_changed(controller_id, now_ms)

    def on_session_lost(self, now_ms: int) -> list[Effect]:
        return self.controller.on_session_lost(now_ms)

    def on_brokers_changed(self, brokers: dict[int, BrokerInfo], epochs: dict[int, int], now_ms: int,
                           listing: int | None = None) -> list[Effect]:
        """The children of ``/brokers/ids`` changed, with each registration's czxid; ``listing``
        numbers the shell's reads of them in the order they were made."""
        return self.controller.on_brokers_changed(brokers, epochs, now_ms, listing)

    def on_isr_change_notifications(self, children: list[str], now_ms: int) -> list[Effect]:
        return self.controller.on_isr_change_notifications(children, now_ms)

    def on_delete_topics_changed(self, children: list[str], now_ms: int) -> list[Effect]:
        """The children of ``/admin/delete_topics`` changed (only the controller acts)."""
        return self.controller.on_delete_topics_changed(children, now_ms)

    def on_features_changed(self, data: bytes | None, version: int) -> list[Effect]:
        """``/feature`` changed (None: it does not exist): the cluster's finalized feature levels."""
        return self.features.on_znode(data, version)

    def on_reassign_partitions_changed(self, data: bytes | None, now_ms: int) -> list[Effect]:
        """``/admin/reassign_partitions`` changed (None: it does not exist); only the controller acts."""
        if data is None:
            return self.controller.on_reassign_partitions_node(None, now_ms)
        try:
            moves = znodes.ReassignPartitionsZNode.decode(data)
        except ValueError as exc:
            return [LogLine("warning", f"Ignoring {znodes.ReassignPartitionsZNode.path()}: {exc}")]
        return self.controller.on_reassign_partitions_node(moves, now_ms)

    def on_acl_changes(self, root: str, children: list[str], now_ms: int) -> list[Effect]:
        """The children of ``/kafka-acl-changes`` or ``/kafka-acl-extended-changes`` changed."""
        return self.authorizer.on_acl_changes(root, children, now_ms)

    def on_config_changes(self, children: list[str], now_ms: int) -> list[Effect]:
        """The children of ``/config/changes`` changed: apply the configs they name."""
        return self.dynamic_config.on_config_changes(children, now_ms)

    def _topic_config_changed(self, name: str, configs: dict[str, Any], now_ms: int) -> list[Effect]:
        self.replica_manager.update_topic_configs(name, configs)
        return [LogLine("info", f"Topic {name} config now {configs or '(broker defaults)'}")] + \
            self.controller.on_topic_config_changed(name, configs, now_ms)

    def _configure_cleaner(self) -> None:
        v = self.config.values
        self.cleaner.configure(v["log.cleaner.enable"] and v["log.cleaner.threads"] > 0, v["log.cleaner.backoff.ms"],
                               v["log.cleaner.io.max.bytes.per.second"], v["log.cleaner.dedupe.buffer.size"],
                               v["log.cleaner.io.buffer.load.factor"])

    def _high_watermark_of(self, key: tuple[str, int]) -> int | None:
        partition = self.replica_manager.partitions.get(key)
        return partition.high_watermark if partition is not None else None

    def _broker_config_changed(self, changed: set[str], now_ms: int) -> list[Effect]:
        self._configure_cleaner()
        self.replica_manager.refresh_log_configs()
        effects = self.update_broker_info(now_ms) if "advertised.listeners" in changed else []
        return effects + self.controller.on_broker_config_changed(changed, now_ms)

    def update_broker_info(self, now_ms: int) -> list[Effect]:
        """Rewrite this broker's registration with its advertised listener (Kafka's
        ``updateBrokerInfo``: any znode version; the broker epoch, its czxid, stays). The
        controller sees the change and sends every broker the new address (UpdateMetadata)."""
        adv = self.config.advertised
        path = znodes.BrokerIdZNode.path(self.broker_id)
        endpoints = self.config.registered_endpoints()
        data = znodes.BrokerIdZNode.encode(self.broker_id, adv.host, adv.port, self.config["broker.rack"], now_ms,
                                           endpoints=endpoints, clean_shutdown=self.registration_clean_shutdown())

        def written(results: list[OpResult], when_ms: int) -> list[Effect]:
            error = results[0].error
            if error is ZkError.NONE:
                return [LogLine("info", f"Updated broker {self.broker_id} at path {path} with addresses: " +
                                ",".join(f"{n}://{h}:{p}" for n, h, p, _ in endpoints))]
            return [LogLine("warning", f"Could not update broker {self.broker_id} at path {path}: {error.name}; "
                                   f"the new address is registered when the broker next registers")]

        return [self.outbox.zk([SetData(path, data)], written)]

    def _deliver_control(self, api_key: int, body: dict[str, Any], topics: dict[str, TopicMetadata], now_ms: int) -> list[Effect]:
        """The controller's requests to this broker: handled as if they came over the network,
        except that the topics they name need not be read from ZooKeeper."""
        self.replica_manager.learn_topics(topics.values())
        return self.replica_manager.handle_control(api_key, body, lambda answer: [], now_ms, local=True)

    def _controller_seen(self, controller_id: int | None) -> None:
        """The metadata cache names the controller as soon as this broker knows it; the replica
        manager takes requests from it only."""
        self.replica_manager.controller_seen(controller_id)
        if controller_id is not None:
            self.metadata.controller_id = controller_id
        elif self.metadata.controller_id == self.broker_id:
            self.metadata.controller_id = -1

    # ------------------------------------------------------------------ time

    def next_deadline_ms(self) -> int | None:
        deadlines = [t.next_ms for t in self.scheduled]
        if self.logs.roll_flushes_due or self.logs.checkpoints_due:
            deadlines.append(0)                 # hand them to the shell at once
        for deadline in (self.outbox.next_deadline_ms(), self.controller.next_deadline_ms(),
                         self.replica_manager.next_deadline_ms(),
                         self.groups.next_deadline_ms(), self.consumer_groups.next_deadline_ms(),
                         self.apis.share_apis.next_deadline_ms(), self.cleaner.next_deadline_ms()):
            if deadline is not None:
                deadlines.append(deadline)
        return min(deadlines)

    def tick(self, now_ms: int) -> list[Effect]:
        effects = self.replica_manager.expire_delayed(now_ms)
        effects.extend(self.outbox.tick(now_ms))
        effects.extend(self.controller.tick(now_ms))
        for task in self.scheduled:
            if task.next_ms <= now_ms:
                task.next_ms = now_ms + task.interval_ms
                effects.extend(self._run_task(task.name, now_ms))
        effects.extend(self.replica_manager.maybe_send_fetches(now_ms))
        effects.extend(self.groups.tick(now_ms))
        effects.extend(self.consumer_groups.tick(now_ms))
        effects.extend(self.apis.share_apis.tick(now_ms))
        effects.extend(FlushFiles(f.paths, f.token) for f in self.logs.take_roll_flushes())
        effects.extend(_written(self.logs.take_checkpoints_due()))
        if self.logs.started:
            effects.extend(LogLine("info", line) for line in self.cleaner.tick(now_ms, self._high_watermark_of))
            effects.extend(_written(self.cleaner.take_checkpoint_writes()))
        return effects

    def _run_task(self, name: str, now_ms: int) -> list[Effect]:
        replicas = self.replica_manager
        if name == "highwatermark-checkpoint":
            return _written(replicas.high_watermark_checkpoints())
        elif name == "recovery-point-checkpoint":
            return _written(self.logs.recovery_point_checkpoints())
        elif name == "log-start-offset-checkpoint":
            return _written(self.logs.log_start_offset_checkpoints())
        elif name == "log-retention":
            # never a segment above a partition's high watermark (Kafka's deletableSegments)
            deleted = self.logs.cleanup(now_ms, {k: p.high_watermark for k, p in replicas.partitions.items()})
            if deleted:
                self.replica_manager.note_state_change()      # log start offsets moved
                return [LogLine("info", f"Retention deleted {deleted} log segment(s)")]
        elif name == "log-flush":
            self.logs.flush_dirty(now_ms)
        elif name == "isr-expiration":
            return replicas.maybe_shrink_isrs(now_ms)
        elif name == "isr-change-propagation":
            return replicas.maybe_propagate_isr_changes(now_ms)
        elif name == "offsets-retention":
            return self.groups.expire_offsets(now_ms)
        elif name == "transaction-abort":
            return self.transactions.abort_timed_out(now_ms)
        return []

    def _write_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, done: Callable[[ErrorCode, int], list[Effect]], now_ms: int,
                      transaction_version: int = 0) -> list[Effect]:
        """WriteTxnMarkers for one partition; on ``__consumer_offsets`` the group coordinator then
        makes the transaction's offsets count (or drops them)."""
        def written(error: ErrorCode, when_ms: int) -> list[Effect]:
            if error is ErrorCode.none and topic == OFFSETS_TOPIC:
                self.groups.end_txn(index, producer_id, commit)
            return done(error, when_ms)

        return self.replica_manager.writes.write_marker(topic, index, producer_id, producer_epoch, commit,
                                                        coordinator_epoch, written, now_ms, transaction_version)

    def _consumer_group_topics(self) -> dict[str, ConsumerTopic]:
        """The cluster's topics as the consumer group coordinator sees them: id, name, partitions."""
        return {name: ConsumerTopic(t.topic_id, name, len(t.assignment)) for name, t in self.metadata.topics.items()}

    def _share_state_partitions(self) -> int:
        """``__share_group_state``'s partitions: the topic's own count, or the configured one."""
        topic = self.metadata.topics.get(SHARE_STATE_TOPIC)
        return topic.num_partitions if topic is not None else self.config["share.coordinator.state.topic.num.partitions"]

    def _partitions_of_topic_id(self, topic_id: uuid.UUID) -> int | None:
        """How many partitions the topic with this id has (None: no such topic)."""
        name = self.metadata.topic_name_of(topic_id)
        return self.metadata.topics[name].num_partitions if name is not None else None

    def _leader_epoch_of(self, topic: str, index: int) -> int:
        partition = self.replica_manager.partitions.get((topic, index))
        return partition.leader_epoch if partition is not None else -1


def _written(files: list[tuple[str, bytes]]) -> list[Effect]:
    """The shell writes these checkpoint files ``(path, content)`` off the event loop."""
    return [WriteCheckpoint(path, content) for path, content in files]
