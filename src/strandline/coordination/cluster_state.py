"""Reading the cluster's state from ZooKeeper (brokers, topics, partition states, configs)."""

from __future__ import annotations

import uuid
from typing import Callable, Sequence

from strandline.core.config_key import ConfigError
from strandline.core.topic_keys import parse_topic_configs
from strandline.coordination.acl_znodes import AclZNode
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination import znodes
from strandline.coordination.store import CoordinationStore, GetChildren, GetData, OpResult, ZkError
from strandline.coordination.znodes import BrokerInfo
from strandline.security.acl import AccessControlEntry, PatternType, ResourcePattern

#: Where a reader says what it skipped: the shell passes its logger's ``warning``.
Warn = Callable[[str], None]


def _unsaid(line: str) -> None:
    """The default :data:`Warn`: a reader whose caller keeps no log (the simulator)."""


class ZooKeeperUnanswered(Exception):
    """ZooKeeper did not answer a read (the connection dropped): the cluster read is made again."""


def answered(path: str, res: OpResult) -> OpResult:
    """``res`` unless ZooKeeper did not answer (a missing node is an answer)."""
    if res.error not in (ZkError.NONE, ZkError.NO_NODE):
        raise ZooKeeperUnanswered(f"ZooKeeper did not answer the read of {path} ({res.error.name})")
    return res


def _read(store: CoordinationStore, ops: Sequence[GetData | GetChildren]) -> list[OpResult]:
    return [answered(op.path, res) for op, res in zip(ops, store.execute(ops))]


def read_brokers(store: CoordinationStore) -> dict[int, BrokerInfo]:
    """The live brokers (``/brokers/ids``), as :func:`read_cluster_state` reads them."""
    brokers: dict[int, BrokerInfo] = {}
    [ids] = _read(store, [GetChildren(znodes.BrokerIdsZNode.path())])
    for child in ids.children:
        [res] = _read(store, [GetData(znodes.BrokerIdZNode.path(int(child)))])
        if res.error is ZkError.NONE:
            info = znodes.BrokerIdZNode.decode(res.data, int(child))
            brokers[info.id] = info
    return brokers


def read_cluster_state(store: CoordinationStore, warn: Warn = _unsaid) -> tuple[dict[int, BrokerInfo], dict[str, TopicMetadata]]:
    """Read live brokers and every topic (assignment, partition states, configs) from ZooKeeper.
    Raises :class:`ZooKeeperUnanswered` when a read got no answer: a topic, config or state left
    out would pass for one that does not exist."""
    brokers = read_brokers(store)
    topics: dict[str, TopicMetadata] = {}
    [names] = _read(store, [GetChildren(znodes.TopicsZNode.path())])
    for name in names.children:
        topic_res, config_res = _read(store, [GetData(znodes.TopicZNode.path(name)),
                                              GetData(znodes.ConfigEntityZNode.path("topics", name))])
        if topic_res.error is not ZkError.NONE:
            continue
        decoded = znodes.TopicZNode.decode(topic_res.data)
        assignment, topic_id = decoded
        configs = {}
        if config_res.error is ZkError.NONE and config_res.data:
            try:
                configs = parse_topic_configs(znodes.ConfigEntityZNode.decode(config_res.data))
            except ConfigError as exc:
                warn(f"Ignoring bad config of topic {name}: {exc}")
        states = {}
        paths = [GetData(znodes.TopicPartitionStateZNode.path(name, p)) for p in sorted(assignment)]
        for p, res in zip(sorted(assignment), _read(store, paths)):
            if res.error is ZkError.NONE:
                states[p] = znodes.TopicPartitionStateZNode.decode(res.data, res.version)
        topics[name] = TopicMetadata(name, topic_id or uuid.UUID(int=0),
                                     {int(p): tuple(r) for p, r in assignment.items()}, states, configs,
                                     {int(p): tuple(r) for p, r in (decoded.adding_replicas or {}).items() if r},
                                     {int(p): tuple(r) for p, r in (decoded.removing_replicas or {}).items() if r})
    return brokers, topics


def read_dynamic_broker_configs(store: CoordinationStore, broker_id: int, warn: Warn = _unsaid) -> tuple[dict[str, str], dict[str, str]]:
    """The dynamic broker configs a starting broker applies: ``/config/brokers/<default>`` and
    ``/config/brokers/<broker_id>`` (missing or unreadable: empty)."""
    layers = []
    for name in ("<default>", broker_id):
        [res] = store.execute([GetData(znodes.ConfigEntityZNode.path("brokers", name))])
        config: dict[str, str] = {}
        if res.error is ZkError.NONE:
            try:
                config = znodes.ConfigEntityZNode.decode(res.data, "brokers", name)
            except ValueError as exc:
                warn(f"Ignoring dynamic broker configs: {exc}")
        layers.append(config)
    return layers[0], layers[1]


def read_acls(store: CoordinationStore, warn: Warn = _unsaid) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """Every ACL under ``/kafka-acl`` and ``/kafka-acl-extended/prefixed`` (an unreadable node is
    skipped with a warning, as Kafka's authorizer skips it)."""
    acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
        [types] = store.execute([GetChildren(AclZNode.root(pattern_type))])
        for type_name in types.children:
            try:
                resource_type = AclZNode.resource_type(type_name)
            except ValueError as exc:
                warn(f"Ignoring ACLs under {AclZNode.root(pattern_type)}: {exc}")
                continue
            [names] = store.execute([GetChildren(AclZNode.type_path(pattern_type, resource_type))])
            patterns = [ResourcePattern(resource_type, name, pattern_type) for name in names.children]
            for pattern, res in zip(patterns, store.execute([GetData(AclZNode.path(p)) for p in patterns])):
                if res.error is not ZkError.NONE:
                    continue
                try:
                    entries = AclZNode.decode(res.data, AclZNode.path(pattern))
                except ValueError as exc:
                    warn(f"Ignoring ACLs: {exc}")
                    continue
                if entries:
                    acls[pattern] = entries
    return acls
