"""Creating topics on first use (Kafka 2.8's AutoTopicCreationManager).

A Metadata or Produce request naming a missing topic creates it when
``auto.create.topics.enable`` is set, with ``num.partitions`` and ``default.replication.factor``
(capped by the live brokers). The internal topics (``__consumer_offsets``, created by the group
coordinator's first FindCoordinator, ``__transaction_state`` by the transaction coordinator's) are
created with their own partitions, configs and replication factor (``offsets.topic.replication.factor``,
``transaction.state.log.replication.factor``), never fewer replicas: while fewer brokers are alive
the creation fails with INVALID_REPLICATION_FACTOR (FindCoordinator answers
COORDINATOR_NOT_AVAILABLE), as in Kafka, and is tried again on the next request. On the controller
the controller creates it; any other broker forwards a CreateTopics request to the controller.
Callers of a creation already under way wait for its outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.controller.context import TopicCreated
from strandline.controller.controller import Controller
from strandline.coordination.metadata import MetadataCache
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.security.acl import AclOperation
from strandline.security.authorizer import AclAuthorizer
from strandline.core.config import BrokerConfig

#: ``creation()``: the partitions, replication factor and configs an internal topic is created with
InternalTopic = Callable[[], tuple[int, int, dict[str, str]]]
#: the key each internal topic's replication factor comes from (Kafka's message names it)
REPLICATION_KEYS = {"__consumer_offsets": "offsets.topic.replication.factor",
                    "__transaction_state": "transaction.state.log.replication.factor",
                    "__share_group_state": "share.coordinator.state.topic.replication.factor"}


@dataclass
class AutoTopicCreationManager:
    config: BrokerConfig
    metadata: MetadataCache
    controller: Controller
    outbox: Outbox
    _forwarded: dict[str, list[TopicCreated]] = field(default_factory=dict)   # CreateTopics sent to the controller
    #: the internal topics by name (set by the broker)
    internal: dict[str, InternalTopic] = field(default_factory=dict)
    _too_few: set[str] = field(default_factory=set)    # internal topics refused for want of brokers, said once

    def pending(self, name: str) -> bool:
        return name in self._forwarded or self.controller.is_creating(name)

    def create(self, name: str, done: TopicCreated, now_ms: int, num_partitions: int | None = None,
               replication_factor: int | None = None, configs: dict[str, str] | None = None) -> list[Effect]:
        """Create ``name`` unless this broker knows it; ``done(error, message, now_ms)``. An internal
        topic is created as :attr:`internal` says, whatever is asked."""
        if name in self.metadata.topics:
            return done(ErrorCode.none, None, now_ms)
        if name in self._forwarded:
            self._forwarded[name].append(done)
            return []
        live = len(self.metadata.live_broker_ids())
        internal = self.internal.get(name)
        if internal is not None:
            partitions, rf, configs = internal()
            if live < rf:
                return self._too_few_brokers(name, live, rf, done, now_ms)
            self._too_few.discard(name)
        else:
            partitions = self.config["num.partitions"] if num_partitions is None else num_partitions
            wanted = self.config["default.replication.factor"] if replication_factor is None else replication_factor
            rf = min(wanted, max(1, live))
        if self.controller.is_active:
            return self.controller.create_topic_if_absent(name, partitions, rf, configs or {}, done, now_ms)
        return self._forward(name, partitions, rf, configs or {}, done, now_ms)

    def _too_few_brokers(self, name: str, live: int, rf: int, done: TopicCreated, now_ms: int) -> list[Effect]:
        """Kafka's refusal to create an internal topic with fewer replicas than its configured
        replication factor; logged once until the topic can be created."""
        message = (f"Number of alive brokers '{live}' does not meet the required replication factor '{rf}' for "
                   f"the topic '{name}' (configured via '{REPLICATION_KEYS.get(name, 'default.replication.factor')}'). "
                   "This error can be ignored if the cluster is starting up and not all brokers are up yet.")
        said = [] if name in self._too_few else [LogLine("warning", message)]
        self._too_few.add(name)
        return said + done(ErrorCode.invalid_replication_factor, message, now_ms)

    def _forward(self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str],
                 done: TopicCreated, now_ms: int) -> list[Effect]:
        """Ask the controller to create a topic (Kafka 2.8's auto-topic-creation forwarding)."""
        self._forwarded[name] = [done]
        body = {"topics": [{"name": name, "num_partitions": num_partitions,
                            "replication_factor": replication_factor, "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "timeout": 30000, "validate_only": False}

        def on_response(frame: bytes | None, when_ms: int) -> list[Effect]:
            waiters = self._forwarded.pop(name, [])
            error, message = ErrorCode.leader_not_available, "the controller is not reachable"
            if frame is not None:
                try:
                    result = api.decode_response(ApiKey.CREATE_TOPICS, 5, frame).topics[0]
                    error, message = ErrorCode(int(result.error_code)), result.error_message
                except Exception as exc:
                    message = f"bad answer from the controller: {exc}"
            effects: list[Effect] = []
            for waiter in waiters:
                effects.extend(waiter(error, message, when_ms))
            return effects

        client_id = f"strandline-broker-{self.config.broker_id}"
        return self.outbox.send(
            self.metadata.brokers.get(self.metadata.controller_id), "forwarding",
            lambda cid: api.encode_request(ApiKey.CREATE_TOPICS, 5, cid, client_id, body), on_response, now_ms)


def may_create(authorizer: AclAuthorizer, conn_id: int, name: str) -> bool:
    """Kafka's rule for creating a topic: CREATE on the cluster, or on the topic."""
    return authorizer.allows_cluster(conn_id, AclOperation.CREATE) or \
        authorizer.allows_topic(conn_id, AclOperation.CREATE, name)
