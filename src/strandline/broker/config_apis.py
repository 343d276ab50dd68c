"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs (Kafka's ZkAdminManager, 2.8).

Any broker serves topic resources; a broker resource named by an id is served by that broker
only, the empty name (the cluster-wide default) by any. A change is written to ZooKeeper with its
change notification in one transaction (compare-and-set on the entity's version, retried on a
race); every broker then applies it (:mod:`strandline.broker.dynamic_config`). Errors are
Kafka's: an unknown topic key INVALID_CONFIG, a bad value or a read-only broker key
INVALID_REQUEST, an unknown topic UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import collections
import enum
import functools
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.security.authorizer import AclAuthorizer
from strandline.core.config import BROKER_KEYS, BrokerConfig, config_text
from strandline.core.config_key import ConfigError
from strandline.core.topic_keys import TOPIC_KEYS, parse_topic_configs
from strandline.broker.dynamic_config import (DEFAULT_ENTITY, describe_broker, describe_group, describe_topic,
                                              validate_broker_update)
from strandline.broker.group_configs import ENTITY_TYPE as GROUP_ENTITY, group_path
from strandline.broker.quotas import sanitize
from strandline.core.group_keys import GROUP_KEYS, parse_group_configs
from strandline.core.effects import Effect, LogLine
from strandline.broker.loggers import BrokerLoggers, LoggerRefused
from strandline.core.outbox import Outbox
from strandline.core.wire import Handler, response
from strandline.coordination import znodes
from strandline.coordination.metadata import MetadataCache, topic_name_error
from strandline.coordination.store import Create, GetData, OpResult, SetData, ZkError
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security import acl

_NOTIFICATION = znodes.ConfigEntityChangeNotificationSequenceZNode
Outcome = tuple[ErrorCode, "str | None"]
Done = Callable[[ErrorCode, "str | None", int], list[Effect]]


class ResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


class OpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _type_name(resource_type: int) -> str:
    try:
        return ResourceType(resource_type).name
    except ValueError:
        return f"UNKNOWN({resource_type})"


class ConfigApis:
    def __init__(self, config: BrokerConfig, metadata: MetadataCache, outbox: Outbox, authorizer: AclAuthorizer,
                 loggers: BrokerLoggers | None = None) -> None:
        self.config = config
        self.metadata = metadata
        self.outbox = outbox
        self.authorizer = authorizer
        self.loggers = loggers if loggers is not None else BrokerLoggers()

    def _authorize(self, conn_id: int, op: acl.AclOperation, rtype: int, name: str) -> None:
        """Kafka's rule: a topic's configs need DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic
        (TOPIC_AUTHORIZATION_FAILED), a broker's or its loggers' on the cluster
        (CLUSTER_AUTHORIZATION_FAILED)."""
        if rtype == ResourceType.TOPIC:
            if not self.authorizer.allows(conn_id, op, acl.ResourceType.TOPIC, name):
                raise _Refused(ErrorCode.topic_authorization_failed, f"Not authorized to access topic {name}")
        elif rtype in (ResourceType.BROKER, ResourceType.BROKER_LOGGER):
            if not self.authorizer.allows_cluster(conn_id, op):
                raise _Refused(ErrorCode.cluster_authorization_failed, "Not authorized to access the cluster")
        elif rtype == ResourceType.GROUP:
            if not self.authorizer.allows(conn_id, op, acl.ResourceType.GROUP, name):
                raise _Refused(ErrorCode.group_authorization_failed, f"Not authorized to access group {name}")

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.DESCRIBE_CONFIGS: self._describe_configs, ApiKey.ALTER_CONFIGS: self._alter_configs,
                ApiKey.INCREMENTAL_ALTER_CONFIGS: self._incremental_alter_configs}

    # -- resources

    def _broker_entity(self, name: str) -> str:
        """The ZooKeeper entity of a broker resource this broker may serve."""
        if not name:
            return DEFAULT_ENTITY
        try:
            broker_id = int(name)
        except ValueError:
            raise _Refused(ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}") from None
        if broker_id != self.config.broker_id:
            raise _Refused(ErrorCode.invalid_request,
                           f"Unexpected broker id, expected {self.config.broker_id} or empty string, but received {name}")
        return str(broker_id)

    def _logger_broker(self, name: str, describing: bool) -> None:
        """A BROKER_LOGGER resource names this broker (Kafka's checks and words, which differ
        between DescribeConfigs and IncrementalAlterConfigs)."""
        if describing and not name:
            raise _Refused(ErrorCode.invalid_request, "Broker id must not be empty")
        try:
            broker_id = int(name)
        except ValueError:
            noun = "Broker" if describing else "Node"
            raise _Refused(ErrorCode.invalid_request, f"{noun} id must be an integer, but it is: {name}") from None
        if broker_id != self.config.broker_id:
            comma = "" if describing else ","
            raise _Refused(ErrorCode.invalid_request,
                           f"Unexpected broker id, expected {self.config.broker_id}{comma} but received {name}")

    @staticmethod
    def _named_group(name: str) -> None:
        if not name:
            raise _Refused(ErrorCode.invalid_request, "Default group resources are not allowed.")

    def _known_topic(self, name: str) -> None:
        invalid = topic_name_error(name)
        if invalid:
            raise _Refused(ErrorCode.invalid_topic_exception, invalid)
        if name not in self.metadata.topics:
            raise _Refused(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")

    # -- DescribeConfigs

    def _describe_configs(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        synonyms = bool(getattr(request, "include_synonyms", False))
        docs = bool(getattr(request, "include_documentation", False))
        results: list[dict[str, Any]] = []
        reads: list[tuple[int, str, str]] = []          # (result, entity type, name): read from ZooKeeper
        for resource in request.resources:
            rtype, name, keys = resource.resource_type, resource.resource_name, resource.configuration_keys
            result = {"error_code": ErrorCode.none, "error_message": None, "resource_type": rtype,
                      "resource_name": name, "configs": []}
            results.append(result)
            try:
                self._authorize(conn_id, acl.AclOperation.DESCRIBE_CONFIGS, rtype, name)
                if rtype == ResourceType.TOPIC:
                    self._known_topic(name)
                    reads.append((len(results) - 1, "topics", name))
                elif rtype == ResourceType.GROUP:
                    self._named_group(name)
                    reads.append((len(results) - 1, GROUP_ENTITY, name))
                elif rtype == ResourceType.BROKER:
                    per_broker = self._broker_entity(name) != DEFAULT_ENTITY
                    result["configs"] = describe_broker(self.config, per_broker, keys, synonyms, docs)
                elif rtype == ResourceType.BROKER_LOGGER:
                    self._logger_broker(name, describing=True)
                    result["configs"] = self.loggers.describe(keys)
                else:
                    raise _Refused(ErrorCode.invalid_request, f"Unsupported resource type: {_type_name(rtype)}")
            except _Refused as exc:
                result["error_code"], result["error_message"] = exc.code, str(exc)

        def respond() -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "results": results})]

        if not reads:
            return respond()

        def on_read(answers: list[OpResult], when_ms: int) -> list[Effect]:
            for (i, entity_type, name), read in zip(reads, answers):
                keys = request.resources[i].configuration_keys
                if entity_type == GROUP_ENTITY:
                    results[i]["configs"] = describe_group(self.config, self._stored_group_config(name, read), keys,
                                                           synonyms, docs)
                else:
                    overrides = self._stored_topic_config(name, read)
                    results[i]["configs"] = describe_topic(self.config, overrides, keys, synonyms, docs)
            return respond()

        return [self.outbox.zk([GetData(group_path(n) if t == GROUP_ENTITY else znodes.ConfigEntityZNode.path(t, n))
                                for _, t, n in reads], on_read)]

    def _stored_group_config(self, name: str, read: Any) -> dict[str, Any]:
        """A group's overrides as ZooKeeper holds them (none if unreadable)."""
        if read.error is ZkError.NONE:
            try:
                return parse_group_configs(znodes.ConfigEntityZNode.decode(read.data, GROUP_ENTITY, name))
            except (ConfigError, ValueError):
                pass
        return {}

    def _stored_topic_config(self, name: str, read: Any) -> dict[str, Any]:
        """A topic's overrides as ZooKeeper holds them; what this broker applied if unreadable."""
        if read.error is ZkError.NONE:
            try:
                return parse_topic_configs(znodes.ConfigEntityZNode.decode(read.data, "topics", name))
            except (ConfigError, ValueError):
                pass
        topic = self.metadata.topics.get(name)
        return dict(topic.configs) if topic is not None else {}

    # -- AlterConfigs (the whole set) and IncrementalAlterConfigs (operations on it)

    def _alter_configs(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def plan(resource: Any) -> Callable[[dict[str, str]], dict[str, str]]:
            nulls = [c.name for c in resource.configs if c.value is None]
            if nulls:
                raise _Refused(ErrorCode.invalid_request, f"Null value not supported for : {','.join(nulls)}")
            wanted = {c.name: c.value for c in resource.configs}
            return lambda current: dict(wanted)

        return self._alter(conn_id, header, request, plan, now_ms)

    def _incremental_alter_configs(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def plan(resource: Any) -> Callable[[dict[str, str]], dict[str, str]]:
            names = [c.name for c in resource.configs]
            duplicates = sorted(n for n, times in collections.Counter(names).items() if times > 1)
            if duplicates:
                raise _Refused(ErrorCode.invalid_request, f"Error due to duplicate config keys : {','.join(duplicates)}")
            nulls = [f"{_op_name(c.config_operation)}:{c.name}" for c in resource.configs
                     if c.value is None and c.config_operation != OpType.DELETE]
            if nulls:
                raise _Refused(ErrorCode.invalid_request, f"Null value not supported for : {','.join(nulls)}")
            keys = ({k: spec for k, (_, spec) in TOPIC_KEYS.items()} if resource.resource_type == ResourceType.TOPIC
                    else {k: spec for k, (_, spec) in GROUP_KEYS.items()} if resource.resource_type == ResourceType.GROUP
                    else BROKER_KEYS)
            ops = list(resource.configs)
            for op in ops:
                if op.config_operation not in set(OpType):
                    raise _Refused(ErrorCode.invalid_request, f"Unknown config operation {op.config_operation} "
                                                              f"for config key: {op.name}")
                if op.config_operation in (OpType.APPEND, OpType.SUBTRACT):
                    spec = keys.get(op.name)
                    if spec is None:
                        raise _Refused(ErrorCode.invalid_config, f"Unknown topic config name: {op.name}")
                    if spec.kind != "list":
                        verb = "append" if op.config_operation == OpType.APPEND else "subtract"
                        raise _Refused(ErrorCode.invalid_request,
                                       f"Config value {verb} is not allowed for config key: {op.name}")

            def apply(current: dict[str, str]) -> dict[str, str]:
                props = dict(current)
                for op in ops:
                    if op.config_operation == OpType.SET:
                        props[op.name] = op.value
                    elif op.config_operation == OpType.DELETE:
                        props.pop(op.name, None)
                    else:
                        old = props.get(op.name)
                        if old is None:
                            fallback = (self.config.topic_value({}, op.name) if resource.resource_type ==
                                        ResourceType.TOPIC else self.config.values.get(op.name))
                            old = config_text(fallback) or ""
                        items = [x for x in old.split(",") if x]
                        given = [x for x in op.value.split(",") if x]
                        if op.config_operation == OpType.APPEND:
                            items += given
                        else:
                            items = [x for x in items if x not in given]
                        props[op.name] = ",".join(items)
                return props
            return apply

        return self._alter(conn_id, header, request, plan, now_ms, self._alter_loggers)

    def _alter_loggers(self, resource: Any, validate_only: bool) -> list[Effect]:
        """IncrementalAlterConfigs of this broker's loggers: all operations are checked, then all
        carried out (in memory, at once)."""
        self._logger_broker(resource.resource_name, describing=False)
        names = [c.name for c in resource.configs]
        duplicates = sorted(n for n, times in collections.Counter(names).items() if times > 1)
        if duplicates:
            raise _Refused(ErrorCode.invalid_request, f"Error due to duplicate config keys : {','.join(duplicates)}")
        ops = [(c.config_operation, c.name, c.value) for c in resource.configs]
        try:
            self.loggers.validate(ops)
        except LoggerRefused as exc:
            raise _Refused(exc.code, str(exc)) from None
        return [] if validate_only else self.loggers.apply(ops)

    def _alter(self, conn_id: int, header: RequestHeader, request: Any,
               plan: Callable[[Any], Callable[[dict[str, str]], dict[str, str]]], now_ms: int,
               alter_loggers: Callable[[Any, bool], list[Effect]] | None = None) -> list[Effect]:
        """Each resource: check it, then read its entity, compute the new config, validate it and
        write it with its notification; answer once every resource is decided."""
        validate_only = bool(request.validate_only)
        outcomes: list[Outcome | None] = [None] * len(request.resources)
        starts: list[Callable[[], list[Effect]]] = []
        done_at_once: list[Effect] = []

        def respond() -> list[Effect]:
            answered: list[dict[str, Any]] = []
            for r, outcome in zip(request.resources, outcomes):
                assert outcome is not None, "answered before every resource had its outcome"
                answered.append({"error_code": outcome[0], "error_message": outcome[1],
                                 "resource_type": r.resource_type, "resource_name": r.resource_name})
            return [response(conn_id, header, {"throttle_time": 0, "responses": answered})]

        left = [0]                  # resources still to decide, once the first pass is over

        def finisher(i: int) -> Done:
            def done(code: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
                outcomes[i] = (code, message)
                left[0] -= 1
                return respond() if left[0] == 0 else []
            return done

        for i, resource in enumerate(request.resources):
            rtype, name = resource.resource_type, resource.resource_name
            try:
                self._authorize(conn_id, acl.AclOperation.ALTER_CONFIGS, rtype, name)
                if rtype == ResourceType.TOPIC:
                    self._known_topic(name)
                    entity_type, entity = "topics", name
                    check = self._topic_check(name)
                elif rtype == ResourceType.GROUP:
                    self._named_group(name)
                    entity_type, entity = GROUP_ENTITY, sanitize(name)
                    check = self._group_check()
                elif rtype == ResourceType.BROKER:
                    entity_type, entity = "brokers", self._broker_entity(name)
                    check = self._broker_check(name, entity != DEFAULT_ENTITY)
                elif rtype == ResourceType.BROKER_LOGGER and alter_loggers is not None:
                    done_at_once += alter_loggers(resource, validate_only)
                    outcomes[i] = (ErrorCode.none, None)
                    continue
                else:
                    raise _Refused(ErrorCode.invalid_request, f"AlterConfigs is only supported for topics, brokers "
                                                              f"and groups, but resource type is {_type_name(rtype)}")
                compute = plan(resource)
            except _Refused as exc:
                outcomes[i] = (exc.code, str(exc))
                continue
            starts.append(functools.partial(self._change_entity, entity_type, entity, compute, check, validate_only,
                                            finisher(i), now_ms))
        if not starts:
            return done_at_once + respond()
        effects: list[Effect] = done_at_once
        left[0] = len(starts)
        for start in starts:
            effects.extend(start())
        return effects

    def _topic_check(self, name: str) -> Callable[[dict[str, str]], None]:
        def check(props: dict[str, str]) -> None:
            unknown = sorted(k for k in props if k not in TOPIC_KEYS)
            if unknown:
                raise _Refused(ErrorCode.invalid_config, f"Unknown topic config name: {', '.join(unknown)}")
            try:
                parse_topic_configs(props)
            except ConfigError as exc:
                raise _Refused(ErrorCode.invalid_request, f"Invalid config value for resource "
                                                          f"ConfigResource(type=TOPIC, name='{name}'): {exc}") from None
        return check

    def _group_check(self) -> Callable[[dict[str, str]], None]:
        """Kafka's GroupConfig.validate: known names (INVALID_CONFIG), values of their types and
        within the broker's bounds."""
        def check(props: dict[str, str]) -> None:
            try:
                parse_group_configs(props, self.config.values)
            except ConfigError as exc:
                raise _Refused(ErrorCode.invalid_config, str(exc)) from None
        return check

    def _broker_check(self, name: str, per_broker: bool) -> Callable[[dict[str, str]], None]:
        def check(props: dict[str, str]) -> None:
            try:
                validate_broker_update(self.config, props, per_broker)
            except ConfigError as exc:
                raise _Refused(ErrorCode.invalid_request, f"Invalid config value for resource "
                                                          f"ConfigResource(type=BROKER, name='{name}'): {exc}") from None
        return check

    def _change_entity(self, entity_type: str, name: str, compute: Callable[[dict[str, str]], dict[str, str]],
                       check: Callable[[dict[str, str]], None], validate_only: bool, done: Done, now_ms: int,
                       attempts: int = 5) -> list[Effect]:
        path = znodes.ConfigEntityZNode.path(entity_type, name)

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            [read] = results
            if read.error not in (ZkError.NONE, ZkError.NO_NODE):
                return done(ErrorCode.unknown_server_error, f"ZooKeeper error {read.error.name}", when_ms)
            try:
                current = znodes.ConfigEntityZNode.decode(read.data, entity_type, name) \
                    if read.error is ZkError.NONE else {}
            except ValueError:
                current = {}                  # unreadable: replaced by what this request sets
            props = compute(current)
            try:
                check(props)
            except _Refused as exc:
                return done(exc.code, str(exc), when_ms)
            if validate_only:
                return done(ErrorCode.none, None, when_ms)
            data = znodes.ConfigEntityZNode.encode(props)
            write = SetData(path, data, read.version) if read.error is ZkError.NONE else Create(path, data)
            ops = [write, Create(_NOTIFICATION.create_path(), _NOTIFICATION.encode(entity_type, name), sequential=True)]

            def on_written(written: list[OpResult], at_ms: int) -> list[Effect]:
                error = written[0].error
                if error is ZkError.NONE:
                    shown = ", ".join(f"{k}={v}" for k, v in sorted(props.items())) or "(none)"
                    return [LogLine("info", f"Updated config of {entity_type}/{name}: {shown}")] + \
                        done(ErrorCode.none, None, at_ms)
                if error in (ZkError.BAD_VERSION, ZkError.NODE_EXISTS, ZkError.NO_NODE) and attempts > 1:
                    return self._change_entity(entity_type, name, compute, check, validate_only, done, at_ms,
                                               attempts - 1)
                return done(ErrorCode.unknown_server_error, f"ZooKeeper error {error.name}", at_ms)

            return [self.outbox.zk(ops, on_written, transaction=True)]

        return [self.outbox.zk([GetData(path)], on_read)]


def _op_name(op: int) -> str:
    try:
        return OpType(op).name
    except ValueError:
        return str(op)
