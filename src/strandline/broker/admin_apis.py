"""The controller's admin APIs on the wire: CreateTopics, DeleteTopics, CreatePartitions,
ElectLeaders (preferred and unclean), the partition reassignments, AlterIsr.

Each handler checks what the request may ask of this broker (only the controller serves them,
NOT_CONTROLLER elsewhere), hands each topic or partition to the :class:`Controller`, and shapes
the answer once every part is decided. The decisions themselves live in ``controller/``.
"""

from __future__ import annotations

import collections
import functools
import uuid
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.security.authorizer import AclAuthorizer
from strandline.broker.dynamic_config import describe_topic
from strandline.core.effects import Effect, Send
from strandline.core.wire import Handler, response
from strandline.controller.alter_isr import proposals_of
from strandline.controller.controller import Controller
from strandline.coordination.metadata import MetadataCache
from strandline.group.offsets_topic import INTERNAL_TOPICS
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security.acl import AclOperation
from strandline.core.config import BrokerConfig


#: each partition's outcome: its error and message
_Outcomes = dict[tuple[str, int], tuple[ErrorCode, "str | None"]]
#: how one topic's operation ends: ``done(error, message, now_ms)`` -> the effects
_Done = Callable[[ErrorCode, "str | None", int], list[Effect]]
#: one topic's operation, started with what it calls when it ends
_Start = Callable[[_Done], list[Effect]]


class AdminApis:
    def __init__(self, config: BrokerConfig, metadata: MetadataCache, controller: Controller,
                 authorizer: AclAuthorizer) -> None:
        self.config = config
        self.metadata = metadata
        self.controller = controller
        self.authorizer = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.CREATE_TOPICS: self._create_topics, ApiKey.DELETE_TOPICS: self._delete_topics,
                ApiKey.ELECT_LEADERS: self._elect_leaders, ApiKey.CREATE_PARTITIONS: self._create_partitions,
                ApiKey.ALTER_PARTITION_REASSIGNMENTS: self._alter_reassignments,
                ApiKey.LIST_PARTITION_REASSIGNMENTS: self._list_reassignments,
                ApiKey.ALTER_ISR: self._alter_isr}

    def _not_controller(self) -> str:
        return f"This is not the controller (broker {self.metadata.controller_id} is)"

    # -- CreateTopics

    def _create_topics(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        results: dict[str, dict[str, Any]] = {}
        order: list[str] = []
        starts: list[tuple[str, _Start]] = []
        validate_only = getattr(request, "validate_only", False)
        seen: set[str] = set()

        def respond() -> Send:
            return response(conn_id, header, {"throttle_time": 0, "topics": [results[n] for n in order]})

        not_controller = not self.controller.is_active
        may_create_any = self.authorizer.allows_cluster(conn_id, AclOperation.CREATE)
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
                result["error_code"], result["error_message"] = ErrorCode.not_controller, self._not_controller()
                continue
            if not may_create_any and not self.authorizer.allows_topic(conn_id, AclOperation.CREATE, name):
                result["error_code"], result["error_message"] = ErrorCode.topic_authorization_failed, \
                    "Authorization failed."
                continue
            plan = self.controller.plan_topic(name, spec.num_partitions, spec.replication_factor,
                                              {a.partition_index: tuple(a.broker_ids) for a in spec.assignments},
                                              {c.name: c.value for c in spec.configs})
            if isinstance(plan, tuple):
                result["error_code"], result["error_message"] = plan
                continue
            result["num_partitions"] = plan.num_partitions
            result["replication_factor"] = len(plan.assignment[0])
            # KIP-525: every config of the new topic, as DescribeConfigs would describe it
            result["configs"] = describe_topic(self.config, plan.configs, None, False, False)
            if validate_only:
                continue
            result["topic_id"] = plan.topic_id
            starts.append((name, functools.partial(self.controller.create_topic, plan, now_ms=now_ms)))
        return _all_then_respond(starts, results, respond, clear_topic_id=True)

    # -- DeleteTopics

    def _delete_topics(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        """v6 names topics by name or by id (KIP-516), as Kafka 2.8: an id is resolved to the topic's
        name, an unknown one is UNKNOWN_TOPIC_ID; each answer echoes the id it was asked with (zero
        for a name)."""
        zero = uuid.UUID(int=0)
        results: dict[str, dict[str, Any]] = {}     # by name: the same answer for a name asked twice
        answers: list[dict[str, Any]] = []          # in the request's order

        def entry(name: str, topic_id: uuid.UUID) -> dict[str, Any]:
            return results.setdefault(name, {"name": name, "topic_id": topic_id, "error_code": ErrorCode.none,
                                             "error_message": None})

        if header.api_version >= 6:
            by_id = {t.topic_id: t.name for t in self.metadata.topics.values()}
            for t in request.topics:
                topic_id = t.topic_id or zero           # kio reads the zero id as None
                if t.name is not None and topic_id != zero:
                    answers.append({"name": t.name, "topic_id": topic_id, "error_code": ErrorCode.invalid_request,
                                    "error_message": "Topic name and topic ID can not both be specified."})
                elif topic_id == zero:
                    answers.append(entry(t.name, zero))
                elif (name := by_id.get(topic_id)) is None:
                    answers.append({"name": None, "topic_id": topic_id, "error_code": ErrorCode.unknown_topic_id,
                                    "error_message": None})
                else:
                    answers.append(entry(name, topic_id))
        else:
            answers = [entry(n, zero) for n in request.topic_names]
        starts: list[tuple[str, _Start]] = []

        def respond() -> Send:
            return response(conn_id, header, {"throttle_time": 0, "responses": answers})

        for name in list(results):
            result = results[name]
            if not self.controller.is_active:
                result["error_code"], result["error_message"] = ErrorCode.not_controller, self._not_controller()
                continue
            if name is not None and not self.authorizer.allows_topic(conn_id, AclOperation.DELETE, name):
                result["error_code"] = ErrorCode.topic_authorization_failed
                continue
            topic_id = self.controller.topic_id(name)
            if topic_id is None:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
                continue
            if not self.config["delete.topic.enable"]:
                result["error_code"] = ErrorCode.topic_deletion_disabled
                continue
            if name in INTERNAL_TOPICS:
                # Kafka 2.8's brokers delete it; its kafka-topics tool refuses: every group's offsets would go
                result["error_code"] = ErrorCode.invalid_topic_exception
                result["error_message"] = f"Topic {name} is an internal topic and is not allowed to be deleted"
                continue
            starts.append((name, functools.partial(self.controller.delete_topic, name, now_ms=now_ms)))
        return _all_then_respond(starts, results, respond, clear_topic_id=False)

    # -- CreatePartitions

    def _create_partitions(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        names = [t.name for t in request.topics]
        results = {n: {"name": n, "error_code": ErrorCode.none, "error_message": None} for n in names}
        starts: list[tuple[str, _Start]] = []

        def respond() -> Send:
            return response(conn_id, header, {"throttle_time": 0, "results": [results[n] for n in names]})

        duplicates = {n for n, times in collections.Counter(names).items() if times > 1}
        for spec in request.topics:
            name, result = spec.name, results[spec.name]
            if name in duplicates:
                result["error_code"], result["error_message"] = ErrorCode.invalid_request, \
                    "Duplicate topic in request."
                continue
            if not self.controller.is_active:
                result["error_code"], result["error_message"] = ErrorCode.not_controller, self._not_controller()
                continue
            if not self.authorizer.allows_topic(conn_id, AclOperation.ALTER, name):
                result["error_code"], result["error_message"] = ErrorCode.topic_authorization_failed, \
                    "The topic authorization is failed."
                continue
            manual = None if spec.assignments is None else [tuple(a.broker_ids) for a in spec.assignments]
            starts.append((name, functools.partial(self.controller.add_partitions, spec.name, spec.count, manual,
                                                   bool(request.validate_only), now_ms=now_ms)))
        return _all_then_respond(starts, results, respond, clear_topic_id=False)

    # -- AlterPartitionReassignments, ListPartitionReassignments (CTL-11)

    def _alter_reassignments(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        wanted = list({(t.name, p.partition_index): ((t.name, p.partition_index),
                                                      None if p.replicas is None else tuple(p.replicas))
                       for t in request.topics for p in t.partitions}.values())

        def respond(results: _Outcomes, when_ms: int, error: ErrorCode = ErrorCode.none,
                    message: str | None = None, partitions: bool = True) -> list[Effect]:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (name, index), _ in (wanted if partitions else ()):
                code, text = results.get((name, index), (error, message))
                by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code,
                                                      "error_message": text})
            return [response(conn_id, header, {
                "throttle_time": 0, "error_code": error, "error_message": message,
                "responses": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})]

        if not self.authorizer.allows_cluster(conn_id, AclOperation.ALTER):
            return respond({}, now_ms, ErrorCode.cluster_authorization_failed, None)
        if not self.controller.is_active:   # as Kafka's controller callback: the error alone, no partitions
            return respond({}, now_ms, ErrorCode.not_controller, self._not_controller(), partitions=False)
        return self.controller.alter_reassignments(wanted, now_ms, respond)

    def _list_reassignments(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        wanted = None if request.topics is None else \
            [(t.name, i) for t in request.topics for i in t.partition_indexes]
        if not self.authorizer.allows_cluster(conn_id, AclOperation.DESCRIBE):
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                               "error_message": None, "topics": []})]
        ongoing = self.controller.list_reassignments(wanted) if self.controller.is_active else None
        if ongoing is None:
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.not_controller,
                                               "error_message": self._not_controller(), "topics": []})]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (name, index), (replicas, adding, removing) in ongoing.items():
            by_topic.setdefault(name, []).append({"partition_index": index, "replicas": list(replicas),
                                                  "adding_replicas": list(adding),
                                                  "removing_replicas": list(removing)})
        return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                                           "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})]

    # -- UpdateFeatures (KIP-584)

    # -- AlterIsr (KIP-497)

    def _alter_isr(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        """As Kafka 2.8's ``KafkaApis.handleAlterIsrRequest``: CLUSTER_ACTION on the cluster, then
        the controller alone (NOT_CONTROLLER elsewhere), which answers once it has written the
        accepted ISRs (``controller/alter_isr.py``)."""
        if not self.authorizer.allows_cluster(conn_id, AclOperation.CLUSTER_ACTION):
            return [response(conn_id, header, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                               "topics": []})]
        return self.controller.alter_isr(request.broker_id, request.broker_epoch, proposals_of(request),
                                         lambda body, when_ms: [response(conn_id, header, body)], now_ms)

    # -- ElectLeaders

    def _elect_leaders(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        election_type = getattr(request, "election_type", 0)
        wanted = None if request.topic_partitions is None else \
            list(dict.fromkeys((t.topic, p) for t in request.topic_partitions for p in t.partitions))  # a set, as Kafka

        def respond(results: _Outcomes, error: ErrorCode = ErrorCode.none) -> list[Effect]:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (name, index), (code, message) in results.items():
                by_topic.setdefault(name, []).append(
                    {"partition_id": index, "error_code": code, "error_message": message})
            return [response(conn_id, header, {
                "throttle_time": 0, "error_code": error,
                "replica_election_results": [{"topic": n, "partition_result": p} for n, p in by_topic.items()]})]

        if not self.authorizer.allows_cluster(conn_id, AclOperation.ALTER):
            return respond({k: (ErrorCode.cluster_authorization_failed, None) for k in wanted or []},
                           ErrorCode.cluster_authorization_failed)
        if not self.controller.is_active:
            return respond({k: (ErrorCode.not_controller, None) for k in wanted or []}, ErrorCode.not_controller)
        if election_type == 1:
            return self.controller.elect_unclean_leaders(wanted, now_ms, lambda results, when_ms: respond(results))
        if election_type != 0:
            return respond({k: (ErrorCode.invalid_request, f"Unknown election type {election_type}")
                            for k in wanted or []})
        return self.controller.elect_preferred_leaders(wanted, now_ms, lambda results, when_ms: respond(results))


def _all_then_respond(starts: list[tuple[str, _Start]], results: dict[str, dict[str, Any]], respond: Callable[[], Send],
                      clear_topic_id: bool) -> list[Effect]:
    """Start each topic's operation (``start(done)``); answer once, when every one is done, with
    the errors they ended with (a failed creation has no topic id)."""
    pending = {name for name, _ in starts}
    started = False

    def finisher(name: str) -> _Done:
        def done(error: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
            if error is not ErrorCode.none:
                results[name]["error_code"], results[name]["error_message"] = error, message
                if clear_topic_id:
                    results[name]["topic_id"] = uuid.UUID(int=0)
            pending.discard(name)
            return [respond()] if started and not pending else []
        return done

    effects: list[Effect] = []
    for name, start in starts:
        effects.extend(start(finisher(name)))
    started = True
    return effects + ([respond()] if not pending else [])
