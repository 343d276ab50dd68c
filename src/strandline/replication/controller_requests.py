"""The controller's requests to a broker's :class:`ReplicaManager` (Kafka's ReplicaManager, its
controller-facing half): LeaderAndIsr (become leader or follower), UpdateMetadata (the metadata
cache), StopReplica, and the topics a request names that the broker must read from ZooKeeper
first. A component of :class:`ReplicaManager`, which builds it: it keeps what it knows of the
controller (its epoch, who it is, whether this broker heard from it), the requests held while
topics are read, the topics recreated, and the listeners told of leaderships; of the replica
manager it needs only :class:`HostedReplicas`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Protocol

from kio.schema.errors import ErrorCode

from strandline.core.listeners import SECURITY_PROTOCOLS
from strandline.core.effects import Effect, LogLine
from strandline.coordination import znodes
from strandline.core.outbox import Outbox
from strandline.coordination.metadata import MetadataCache, TopicMetadata
from strandline.coordination.store import GetChildren, OpResult, ZkError
from strandline.coordination.znodes import BrokerInfo, LeaderAndIsr
from strandline.protocol import control
from strandline.replication.fetcher_manager import ReplicaFetcherManager
from strandline.replication.partition import Partition
from strandline.replication.topic_stats import BrokerTopicStats
from strandline.replication.topic_ids import leader_and_isr_answer, other_topic, stale_log
from strandline.replication.truncation import legacy_truncation_offset

#: UpdateMetadata's security protocol ids
PROTOCOL_NAMES = dict(enumerate(SECURITY_PROTOCOLS))

LEADER_DURING_DELETE = -2       # UpdateMetadata's leader for a partition being deleted (Kafka)
TOPIC_READ_RETRY_MS = 500       # read an unknown topic again while ZooKeeper cannot answer


#: ``listener(topic, index, leader, now_ms)``: this broker became leader (True) or stopped leading.
LeadershipListener = Callable[[str, int, bool, int], list[Effect]]
#: ``respond(answer)``: the effects that answer a control request (its body as a dict)
ControlRespond = Callable[[dict[str, Any]], list[Effect]]


class HostedReplicas(Protocol):
    """What :class:`ControllerRequests` needs of the replica manager: the partitions it hosts,
    opening and deleting one, completing the requests waiting on partitions that changed, and
    noting a change no watch key announces."""

    @property
    def partitions(self) -> Mapping[tuple[str, int], Partition]: ...

    def open_partition(self, topic: TopicMetadata, index: int, now_ms: int) -> Partition: ...

    def delete_partition(self, key: tuple[str, int]) -> None: ...

    def complete_delayed_requests(self, keys: list[tuple[str, int]], now_ms: int) -> list[Effect]: ...

    def note_state_change(self) -> None: ...


class ControllerRequests:
    """The controller's requests to one broker, applied to its :class:`HostedReplicas`."""

    def __init__(self, replicas: HostedReplicas, config: Any, metadata: MetadataCache, outbox: Outbox,
                 fetcher_manager: ReplicaFetcherManager, topic_stats: BrokerTopicStats,
                 broker_epoch: Callable[[], int]) -> None:
        self.replicas = replicas
        self.config = config
        self.broker_id = config.broker_id
        self.metadata = metadata
        self.outbox = outbox
        self.fetcher_manager = fetcher_manager
        self.topic_stats = topic_stats
        self.broker_epoch = broker_epoch   # this broker's registration (czxid), KIP-380
        self.controller_epoch = 0          # the newest controller epoch this broker has heard from
        self.recreated: set[str] = set()   # topics read again for another topic id (topic_ids)
        self.deleted_stale: list[str] = []  # logs of earlier topics deleted, not reported yet
        #: the controller as ``/controller`` names it, as far as this broker read (-1: not known);
        #: the controller's requests must come from it (:meth:`refusal`)
        self.zk_controller_id = -1
        self._controller_watched = False   # zk_controller_id came from the watch, newer than start-up's read
        self.heard_from_controller = False
        self.shutting_down = False         # asked the controller for a controlled shutdown
        self.loading_topics: set[str] = set()      # LeaderAndIsr/UpdateMetadata waiting on ZooKeeper
        #: control requests that came while one waits on ZooKeeper (None: none waits)
        self._held_control: list[tuple[int, dict[str, Any], ControlRespond, bool]] | None = None
        self.leadership_listeners: list[LeadershipListener] = []

    def install_cluster(self, cluster_id: str | None, brokers: dict[int, BrokerInfo],
                        topics: dict[str, TopicMetadata], controller_id: int,
                        controller_epoch: int) -> dict[str, TopicMetadata]:
        """The cluster as read from ZooKeeper at start-up, unless the controller's requests (which
        can arrive between registration and start-up) said something newer; returns the topics
        then known."""
        md = self.metadata
        md.cluster_id = cluster_id
        if not self._controller_watched:
            self.zk_controller_id = controller_id
        if self.heard_from_controller:
            for name, topic in topics.items():
                md.topics.setdefault(name, topic)
            if controller_epoch > self.controller_epoch:
                self.controller_epoch, md.controller_id = controller_epoch, controller_id
            return md.topics
        md.brokers = dict(brokers)
        md.controller_id = controller_id
        self.controller_epoch = controller_epoch
        md.topics = dict(topics)
        return topics

    def begin_controlled_shutdown(self) -> None:
        """From now on a partition this broker is told to follow (one whose leadership the
        controller moves away from it) is not fetched: the old leader is caught up at once, and its
        first Fetch would take it back into the ISR the controller just took it out of, to stall
        acks=all writes there once it is gone (Kafka 3.3 keeps a replica in controlled shutdown out
        of the ISR, KAFKA-14140). The partitions it already followed are fetched until the
        controller's StopReplica."""
        self.shutting_down = True

    def handle_control(self, api_key: int, body: dict[str, Any], respond: ControlRespond, now_ms: int,
                       load: bool = True, local: bool = False) -> list[Effect]:
        """LeaderAndIsr, UpdateMetadata or StopReplica from the controller (``local``: this broker's
        own controller, in-process): a request that does not come from the current controller to
        this broker's current registration is refused (:meth:`refusal`); topics this broker does
        not know yet are read from ZooKeeper first, and the requests that come meanwhile wait, so
        that they apply in the controller's order."""
        if self._held_control is not None and load:
            self._held_control.append((api_key, body, respond, local))
            return []
        refused = self.refusal(body, local)
        if refused is not None:
            return respond(control.error_answer(api_key, refused))
        missing = self._unknown_topics(api_key, body) if load else []
        if missing:
            self.loading_topics.update(missing)
            self._held_control = []

            def loaded(when_ms: int, unread: list[str]) -> list[Effect]:
                if unread:         # ZooKeeper did not answer: read them again, as Kafka's client resends
                    return self.outbox.after(when_ms + TOPIC_READ_RETRY_MS, lambda t: [
                        self.outbox.zk(*self.metadata.load_topics(unread, loaded))])
                self.loading_topics.difference_update(missing)
                held, self._held_control = self._held_control, None
                assert held is not None         # set when the read was sent, cleared only here
                # the epochs are checked again: a newer controller may have spoken meanwhile
                effects = self.handle_control(api_key, body, respond, when_ms, load=False, local=local)
                for held_key, held_body, held_respond, held_local in held:
                    effects += self.handle_control(held_key, held_body, held_respond, when_ms, local=held_local)
                return effects
            return [self.outbox.zk(*self.metadata.load_topics(missing, loaded))]
        effects, answer = self.apply_control(api_key, body, now_ms)
        return effects + respond(answer)

    def refusal(self, body: dict[str, Any], local: bool = False) -> ErrorCode | None:
        """Why a control request is refused as a whole, None if it is not.

        - STALE_CONTROLLER_EPOCH: an older controller epoch than one this broker heard from (Kafka).
        - STALE_BROKER_EPOCH: addressed to another registration of this broker than its current one
          (KIP-380). Kafka refuses only an earlier one; here a later one, the unknown epoch -1 and
          any request before this broker registered are refused too: only the controller, which
          addresses each broker's registration as it read it from ZooKeeper, sends them, and a
          client must not move leaderships. A broker that registered a moment ago may hear of its
          new epoch after the controller; the controller sends the request again
          (ControllerChannel) until the broker knows it.
        - STALE_CONTROLLER_EPOCH too when the request names another controller than the one this
          broker knows from ZooKeeper (``/controller``): a controller that just took office may be
          refused until this broker's watch tells it of the new controller; it sends again.

        The controller's own requests to this broker (``local``) are checked for their epoch only."""
        if not local:       # the broker epoch first, as Kafka's KafkaApis checks it before the controller's
            own = self.broker_epoch()
            if own < 0 or body["broker_epoch"] != own:
                return ErrorCode.stale_broker_epoch
        if body["controller_epoch"] < self.controller_epoch:
            return ErrorCode.stale_controller_epoch
        if local:
            return None
        if self.zk_controller_id >= 0 and body["controller_id"] != self.zk_controller_id:
            return ErrorCode.stale_controller_epoch
        return None

    def replica_log_info(self, body: dict[str, Any]) -> dict[str, Any]:
        """GetReplicaLogInfo (KIP-966's unclean recovery): for each partition the controller names
        by topic id, this replica's last written leader epoch, the leader epoch it knows and its log
        end offset, whatever its role (UNKNOWN_TOPIC_ID, or REPLICA_NOT_AVAILABLE for a partition
        not hosted here); at most 1000 partitions are answered, the answer says when it left some."""
        names = {t.topic_id: name for name, t in self.metadata.topics.items()}
        answered, topics = 0, []
        truncated = False
        for ask in body["topic_partitions"]:
            parts = []
            for index in ask["partitions"]:
                if answered == control.GET_REPLICA_LOG_INFO_MAX_PARTITIONS:
                    truncated = True
                    break
                answered += 1
                entry = {"partition": index, "last_written_leader_epoch": -1, "current_leader_epoch": -1,
                         "log_end_offset": -1, "error_code": ErrorCode.none}
                name = names.get(ask["topic_id"])
                partition = self.replicas.partitions.get((name, index)) if name is not None else None
                if name is None:
                    entry["error_code"] = ErrorCode.unknown_topic_id
                elif partition is None or partition.log.topic_id not in (None, ask["topic_id"]):
                    entry["error_code"] = ErrorCode.replica_not_available
                else:
                    entry["last_written_leader_epoch"], entry["log_end_offset"] = log_info(partition)
                    entry["current_leader_epoch"] = partition.leader_epoch
                parts.append(entry)
            if parts:
                topics.append({"topic_id": ask["topic_id"], "partition_log_info": parts})
        return {"throttle_time_ms": 0, "broker_epoch": self.broker_epoch(), "truncated": truncated,
                "topic_partition_log_info_list": topics}

    def local_log_info(self, name: str, index: int) -> tuple[int, int] | None:
        """What GetReplicaLogInfo answers of this broker's replica of ``name``-``index``: (its last
        written leader epoch, its log end offset); None when it hosts none."""
        partition = self.replicas.partitions.get((name, index))
        return log_info(partition) if partition is not None else None

    def controller_seen(self, controller_id: int | None) -> None:
        """``/controller`` names ``controller_id`` (None: this broker is no longer the controller, and
        does not know who is)."""
        self._controller_watched = True
        if controller_id is not None:
            self.zk_controller_id = controller_id
        elif self.zk_controller_id == self.broker_id:
            self.zk_controller_id = -1

    def apply_control(self, api_key: int, body: dict[str, Any], now_ms: int) -> tuple[list[Effect], dict[str, Any]]:
        """Carry out a control request (the controller's own ones come straight here)."""
        self.heard_from_controller = True
        self.replicas.note_state_change()
        if body["controller_epoch"] > self.controller_epoch or self.metadata.controller_id < 0:
            self.controller_epoch = body["controller_epoch"]
            self.metadata.controller_id = body["controller_id"]
        if api_key == control.LEADER_AND_ISR:
            return self.become_leader_or_follower(body, now_ms)
        if api_key == control.UPDATE_METADATA:
            return self.maybe_update_metadata_cache(body, now_ms), {"error_code": ErrorCode.none}
        return self.stop_replicas(body, now_ms)

    def _unknown_topics(self, api_key: int, body: dict[str, Any]) -> list[str]:
        if api_key == control.STOP_REPLICA:
            return []
        names = []
        for ts in body["topic_states"]:
            name = ts["topic_name"]
            if not any(p["leader"] != LEADER_DURING_DELETE for p in ts["partition_states"]):
                continue                # a deletion: nothing to read
            if other_topic(self.metadata.topics.get(name), ts):     # read it again (topic_ids)
                del self.metadata.topics[name]
                self.recreated.add(name)
            if name not in self.metadata.topics:
                names.append(name)
        return names

    def learn_topics(self, topics: Iterable[TopicMetadata]) -> None:
        """Topics as the controller knows them (its own requests to this broker): their
        assignment, id and configs, as :meth:`MetadataCache.load_topics` would read them."""
        for topic in topics:
            known = self.metadata.topics.get(topic.name)
            if known is not None and known.topic_id.int and known.topic_id != topic.topic_id:
                self.recreated.add(topic.name)     # an earlier topic of that name (topic_ids)
            elif known is not None:
                continue
            self.metadata.topics[topic.name] = TopicMetadata(topic.name, topic.topic_id, dict(topic.assignment),
                                                             {}, dict(topic.configs))

    def become_leader_or_follower(self, body: dict[str, Any], now_ms: int) -> tuple[list[Effect], dict[str, Any]]:
        effects: list[Effect] = []
        errors: list[dict[str, Any]] = []
        changed: list[tuple[str, int]] = []
        for leader in body["live_leaders"]:
            if leader["broker_id"] not in self.metadata.brokers:
                self.metadata.brokers[leader["broker_id"]] = BrokerInfo(
                    leader["broker_id"], leader["host_name"], leader["port"])
        for ts in body["topic_states"]:
            name = ts["topic_name"]
            topic = self.metadata.topics.get(name)
            if topic is not None and name in self.recreated and not other_topic(topic, ts):
                effects.extend(self._drop_stale_replicas(topic, now_ms))
            for ps in ts["partition_states"]:
                index = ps["partition_index"]
                replicas = tuple(ps["replicas"])
                code = ErrorCode.none
                if topic is None or self.broker_id not in replicas:
                    code = ErrorCode.unknown_topic_or_partition
                elif other_topic(topic, ts):    # a request about a topic ZooKeeper no longer holds
                    code = ErrorCode.inconsistent_topic_id
                else:
                    partition = self.replicas.open_partition(topic, index, now_ms)
                    if ps["leader_epoch"] <= partition.leader_epoch:
                        code = ErrorCode.stale_controller_epoch
                    else:
                        state = LeaderAndIsr(ps["leader"], ps["leader_epoch"], tuple(ps["isr"]),
                                             ps["controller_epoch"], ps["zk_version"])
                        topic.assignment[index] = replicas
                        if state.leader == self.broker_id:
                            effects.extend(self._make_leader(partition, state, replicas, now_ms))
                        else:
                            effects.extend(self._make_follower(partition, state, replicas, now_ms))
                        changed.append((name, index))
                errors.append({"topic_name": name, "partition_index": index, "error_code": code})
        if changed:
            effects.extend(self.replicas.complete_delayed_requests(changed, now_ms))
        effects.extend(self.fetcher_manager.maybe_send_fetches(now_ms))
        return effects + self.stale_logs_deleted(), leader_and_isr_answer(body, errors)

    def forget_deleted_topics(self, now_ms: int) -> list[Effect]:
        """Registered again after this broker's ZooKeeper session was lost: it may have missed a
        topic's deletion (the controller tells the brokers registered then). The topics it knows
        that ZooKeeper no longer has are dropped from its metadata and their replicas deleted, as
        the StopReplica and UpdateMetadata it missed would have; one it learned of since the read
        was sent is left."""
        known = dict(self.metadata.topics)

        def on_children(results: list[OpResult], when_ms: int) -> list[Effect]:
            [res] = results
            if res.error is not ZkError.NONE:     # read again, as Kafka's ZooKeeper client resends
                return self.outbox.after(when_ms + TOPIC_READ_RETRY_MS, self.forget_deleted_topics)
            present = set(res.children)
            effects: list[Effect] = []
            for name, topic in known.items():
                if name in present or self.metadata.topics.get(name) is not topic:
                    continue
                del self.metadata.topics[name]
                self.topic_stats.remove_topic(name)
                effects.append(LogLine("info", f"Topic {name} was deleted while this broker's ZooKeeper session was lost"))
                local = [i for (n, i) in self.replicas.partitions if n == name]
                effects += self._delete_replicas(name, local, when_ms)
            return effects

        return [self.outbox.zk([GetChildren(znodes.TopicsZNode.path())], on_children)]

    def stale_logs_deleted(self) -> list[Effect]:
        said, self.deleted_stale = self.deleted_stale, []
        return [LogLine("warning", f"Deleted log of {what}: it belongs to an earlier topic of that name") for what in said]

    def _drop_stale_replicas(self, topic: TopicMetadata, now_ms: int) -> list[Effect]:
        """Once a topic was read again for another id: delete the local replicas of its name whose
        logs are of the earlier topic (topic_ids)."""
        self.recreated.discard(topic.name)
        partitions = self.replicas.partitions
        stale = [i for (n, i), p in partitions.items() if n == topic.name and stale_log(p.log.topic_id, topic)]
        self.deleted_stale += [f"{topic.name}-{i} (topic id {partitions[(topic.name, i)].log.topic_id}, now "
                               f"{topic.topic_id})" for i in stale]
        return self._delete_replicas(topic.name, stale, now_ms)

    def _delete_replicas(self, name: str, indexes: list[int], now_ms: int) -> list[Effect]:
        """Stop and delete the local replicas ``indexes`` of topic ``name``, as a topic's deletion does."""
        if not indexes:
            return []
        return self.stop_replicas({"topic_states": [{"topic_name": name, "partition_states": [
            {"partition_index": i, "leader_epoch": control.EPOCH_DURING_DELETE, "delete_partition": True}
            for i in indexes]}]}, now_ms)[0]

    def _leadership_changed(self, partition: Partition, leader: bool, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        for listener in self.leadership_listeners:
            effects.extend(listener(partition.topic, partition.index, leader, now_ms))
        return effects

    def _make_leader(self, partition: Partition, state: LeaderAndIsr, replicas: tuple[int, ...],
                     now_ms: int) -> list[Effect]:
        key = (partition.topic, partition.index)
        self.fetcher_manager.remove_partitions([key])
        partition.make_leader(state, replicas, now_ms)
        return [LogLine("info", f"Leader of {key[0]}-{key[1]} in epoch {state.leader_epoch}, ISR {list(state.isr)}, "
                            f"LEO {partition.log_end_offset}, HW {partition.high_watermark}")] + \
            self._leadership_changed(partition, True, now_ms)

    def _make_follower(self, partition: Partition, state: LeaderAndIsr, replicas: tuple[int, ...],
                       now_ms: int) -> list[Effect]:
        key = (partition.topic, partition.index)
        self.fetcher_manager.remove_partitions([key])
        partition.make_follower(state, replicas)
        effects = self._leadership_changed(partition, False, now_ms)
        effects.append(LogLine("info", f"Follower of {key[0]}-{key[1]} in epoch {state.leader_epoch}, "
                                   f"leader {state.leader}, LEO {partition.log_end_offset}"))
        if state.leader < 0 or self.shutting_down:
            return effects
        truncating = True
        if self.config["replication.truncation"] == "high-watermark":
            effects.extend(self.fetcher_manager.truncate(partition, legacy_truncation_offset(
                partition.high_watermark, partition.log_end_offset), "its high watermark (legacy mode)"))
            truncating = False
        self.fetcher_manager.add_partition(key, state.leader, state.leader_epoch, truncating)
        return effects

    def maybe_update_metadata_cache(self, body: dict[str, Any], now_ms: int) -> list[Effect]:
        md = self.metadata
        brokers: dict[int, BrokerInfo] = {}
        for b in body["live_brokers"]:
            brokers[b["id"]] = BrokerInfo.of(b["id"], [
                (ep.get("listener") or PROTOCOL_NAMES.get(ep.get("security_protocol", 0), "PLAINTEXT"), ep["host"],
                 ep["port"], PROTOCOL_NAMES.get(ep.get("security_protocol", 0), "PLAINTEXT"))
                for ep in b["endpoints"]], b["rack"])
        md.brokers = brokers
        effects: list[Effect] = []
        for ts in body["topic_states"]:
            name = ts["topic_name"]
            for ps in ts["partition_states"]:
                if ps["leader"] == LEADER_DURING_DELETE:
                    if other_topic(md.topics.get(name), ts):    # (the deletion of an earlier topic of that name)
                        break
                    if md.topics.pop(name, None) is not None:
                        self.topic_stats.remove_topic(name)
                        effects.append(LogLine("info", f"Topic {name} deleted from the metadata cache"))
                    break
                topic = md.topics.get(name)
                if topic is None or other_topic(topic, ts):     # (the states of a topic since deleted)
                    continue
                if name in self.recreated:
                    effects.extend(self._drop_stale_replicas(topic, now_ms))
                index = ps["partition_index"]
                cached = topic.states.get(index)
                if cached is not None and (ps["leader_epoch"], ps["zk_version"]) < (cached.leader_epoch,
                                                                                     cached.zk_version):
                    continue        # older than what we know (a late or replayed UpdateMetadata)
                topic.assignment[index] = tuple(ps["replicas"])
                topic.states[index] = LeaderAndIsr(
                    ps["leader"], ps["leader_epoch"], tuple(ps["isr"]), ps["controller_epoch"], ps["zk_version"])
        return effects + self.stale_logs_deleted() + self.fetcher_manager.maybe_send_fetches(now_ms)

    def stop_replicas(self, body: dict[str, Any], now_ms: int) -> tuple[list[Effect], dict[str, Any]]:
        """Stop fetching for (and delete, if asked) each partition named, unless the request names
        an older leader epoch than the replica's (KIP-570: a StopReplica retried late, after a
        LeaderAndIsr of a newer epoch gave the replica back, is answered FENCED_LEADER_EPOCH).
        A topic's deletion names epoch -2: its partitions stop whatever their epoch."""
        effects: list[Effect] = []
        errors: list[dict[str, Any]] = []
        stopped: list[tuple[tuple[str, int], bool]] = []
        partitions = self.replicas.partitions
        for ts in body["topic_states"]:
            for ps in ts["partition_states"]:
                key = (ts["topic_name"], ps["partition_index"])
                partition = partitions.get(key)
                asked = ps["leader_epoch"]
                code = ErrorCode.none
                if partition is not None and 0 <= asked < partition.leader_epoch:
                    code = ErrorCode.fenced_leader_epoch
                else:
                    stopped.append((key, ps["delete_partition"]))
                errors.append({"topic_name": key[0], "partition_index": key[1], "error_code": code})
        keys = [key for key, _ in stopped]
        self.fetcher_manager.remove_partitions(keys)
        for key, delete in stopped:
            partition = partitions.get(key)
            if partition is not None and partition.is_leader:
                effects.extend(self._leadership_changed(partition, False, now_ms))
            if partition is not None and delete:
                self.replicas.delete_partition(key)
                effects.append(LogLine("info", f"Deleted log of {key[0]}-{key[1]}"))
        effects.extend(self.replicas.complete_delayed_requests(keys, now_ms))
        return effects, {"error_code": ErrorCode.none, "partition_errors": errors}


def log_info(partition: Partition) -> tuple[int, int]:
    """A replica's log as unclean recovery weighs it: (the leader epoch of its last batch, -1 when
    it holds none, and its log end offset). The epoch of the last batch, not the latest epoch the
    replica began: a replica made leader in a new epoch that wrote nothing in it holds nothing of
    that epoch (the simulator's seed 6563155: such a leader, in epoch 5 at offset 231, outranked
    a replica holding what epoch 4 had committed up to 270)."""
    log = partition.log
    end = log.log_end_offset
    last = log.leader_epoch_cache.epoch_for_offset(end - 1) if end > log.log_start_offset else -1
    return last, end
