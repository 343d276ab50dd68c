"""What differs between Kafka's and Strandline's answers by nature, made equal before they are
compared. Each rule names the field (by its name in the answer, at any depth; for some, only in
one API's answers), what it becomes, and why it cannot be compared. Nothing else is touched.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

ZERO_UUID = str(uuid.UUID(int=0))


def _opaque(label: str) -> Callable[[Any, Any], Any]:
    """A value each cluster makes up on its own: equal once it is only known to be set."""
    def rule(value: Any, side: Any) -> Any:
        if value in (None, "", ZERO_UUID, -1):
            return value
        return f"<{label}>"
    return rule


def _port(value: Any, side: Any) -> Any:
    for broker, port in side.ports.items():
        if value == port:
            return f"<port of broker {broker}>"
    return value


def _member(value: Any, side: Any) -> Any:
    """A member id (client id, '-', a UUID the coordinator makes up) becomes the order in which
    the side first showed it, so that 'the leader is this member' is still compared."""
    if not value:
        return value
    seen = side.members
    if value not in seen:
        seen[value] = f"<member {len(seen) + 1}>"
    return seen[value]


def _throttle(value: Any, side: Any) -> Any:
    return "<throttle>" if isinstance(value, int) and value >= 0 else value


def _nothing(value: Any, side: Any) -> Any:
    return None


#: (API key or None for every API, field name, rule, reason)
RULES: list[tuple[int | None, str, Callable[[Any, Any], Any], str]] = [
    (None, "cluster_id", _opaque("cluster id"), "each cluster makes up its own id"),
    (None, "topic_id", _opaque("topic id"), "each cluster makes up its own topic ids (KIP-516)"),
    (None, "port", _port, "the brokers listen on different ports; the broker behind a port is compared"),
    (None, "controller_id", _opaque("controller"),
     "each cluster elects its own controller (the first broker to reach ZooKeeper)"),
    (None, "error_message", _nothing, "error codes are compared, not each broker's wording"),
    (None, "member_id", _member, "the coordinator makes up member ids (client id and a random UUID)"),
    (11, "leader", _member, "JoinGroup's leader is a member id (see member_id)"),
    (None, "session_id", _opaque("fetch session"), "fetch session ids are random (KIP-227)"),
    (None, "producer_id", _opaque("producer id"),
     "each cluster hands out its own producer ids (blocks taken from ZooKeeper)"),
    (10, "node_id", _opaque("coordinator"),
     "the coordinator is the leader of an internal topic's partition, placed by each controller from a "
     "random first broker"),
    (10, "port", _opaque("coordinator"), "see node_id: the coordinator's port"),
    (1, "aborted_transactions", lambda v, side: [] if v is None else v,
     "null and an empty list both say: no aborted transaction in the range (Kafka 3.9 sends an empty list "
     "with an error, Strandline null)"),
    (None, "batch_index_error_message", _nothing, "error codes are compared, not each broker's wording"),
    (35, "log_dir", _opaque("log dir"), "each broker's log directory is a path of its own"),
    (35, "path", _opaque("log dir"), "each broker's log directory is a path of its own"),
    (None, "throttle_time", _throttle, "each broker throttles by its own quotas and load (none here: 0)"),
]

#: (API key, list field, the fields that order it, reason): lists whose order the protocol does not define
SORTS: list[tuple[int, str, tuple[str, ...], str]] = [
    (3, "brokers", ("node_id",), "Metadata lists brokers in no defined order"),
    (3, "topics", ("name",), "Metadata lists topics in no defined order"),
    (3, "partitions", ("partition_index",), "Metadata lists partitions in no defined order"),
    (3, "isr_nodes", (), "an ISR is a set: each leader keeps it in the order replicas joined"),
    (3, "offline_replicas", (), "a set"),
    (61, "active_producers", ("producer_epoch", "last_sequence", "coordinator_epoch", "current_txn_start_offset"),
     "DescribeProducers lists producers in no defined order (their ids differ: each cluster hands out its own)"),
    (60, "brokers", ("broker_id",), "DescribeCluster lists brokers in no defined order"),
    (16, "groups", ("group_id",), "ListGroups lists groups in no defined order"),
    (15, "groups", ("group_id",), "DescribeGroups answers in no defined order"),
    (32, "configs", ("name",), "DescribeConfigs lists configs in no defined order"),
    (19, "configs", ("name",), "CreateTopics lists configs in no defined order"),
    (37, "results", ("name",), "CreatePartitions answers in no defined order (Kafka: a hash map's)"),
    (42, "results", ("group_id",), "DeleteGroups answers in no defined order (Kafka: a hash map's)"),
    (43, "replica_election_results", ("topic",), "ElectLeaders answers in no defined order (Kafka: a hash map's)"),
    (43, "partition_result", ("partition_id",), "likewise"),
    (45, "responses", ("name",), "AlterPartitionReassignments answers in no defined order (Kafka: a hash map's)"),
    (45, "partitions", ("partition_index",), "likewise"),
    (35, "partitions", ("partition_index",), "DescribeLogDirs lists partitions in no defined order"),
    (35, "topics", ("name",), "DescribeLogDirs lists topics in no defined order"),
]


#: topic configs Kafka 3.x added after 2.8 (tiered storage, KIP-405; compression levels, KIP-390;
#: the split timestamp bounds, KIP-937): Kafka 3.9 lists them, a 2.8 broker (and Strandline) does not
KAFKA_3_TOPIC_CONFIGS = frozenset({
    "remote.storage.enable", "local.retention.ms", "local.retention.bytes", "remote.log.copy.disable",
    "remote.log.delete.on.disable", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms"})

#: topic configs left out of both sides' lists: Kafka 3.x's own (above); Strandline's own
#: ``flush.on.ack`` (DUR-3) and ``unclean.recovery.strategy`` (KIP-966's unclean recovery, which
#: Kafka has not shipped; docs/configuration.md); ``message.format.version``, which Kafka 3.x pins
#: to 3.0-IV1 (deprecated, KIP-724) where Kafka 2.8 and Strandline answer 2.8-IV1
UNCOMPARED_TOPIC_CONFIGS = KAFKA_3_TOPIC_CONFIGS | {"flush.on.ack", "unclean.recovery.strategy",
                                                    "message.format.version"}


def _uncompared_config(entry: Any) -> bool:
    return isinstance(entry, dict) and entry.get("name") in UNCOMPARED_TOPIC_CONFIGS


#: (API key, list field, what is left out of it, reason)
FILTERS: list[tuple[int, str, Callable[[Any], bool], str]] = [
    (19, "configs", _uncompared_config, "UNCOMPARED_TOPIC_CONFIGS"),
    (32, "configs", _uncompared_config, "UNCOMPARED_TOPIC_CONFIGS"),
]


def _merge_list_groups(answers: list, ctx: Any) -> Any:
    """ListGroups asked of every broker: each coordinator lists its own groups, and which broker
    coordinates a group is each cluster's choice (see FindCoordinator): the union of this run's
    groups and every broker's error code."""
    if any(not isinstance(a, dict) for a in answers):
        return answers
    groups = [g for a in answers for g in a.get("groups", []) if str(g.get("group_id", "")).endswith(ctx.run)]
    return {"error_codes": sorted({a["error_code"] for a in answers}),
            "groups": sorted(groups, key=lambda g: g["group_id"])}


class _SideView:
    def __init__(self, ctx: Any) -> None:
        self.ports = ctx.side.ports
        self.members = ctx.answers.setdefault("__members__", {})


def normalize(api: int, version: int, answer: Any, ctx: Any) -> Any:
    side = _SideView(ctx)
    if api == 16 and isinstance(answer, list):
        answer = _merge_list_groups(answer, ctx)
    rules = {name: rule for key, name, rule, _ in RULES if key is None or key == api}
    sorts = {name: keys for key, name, keys, _ in SORTS if key == api}
    filters = {name: drop for key, name, drop, _ in FILTERS if key == api}
    return _walk(answer, rules, sorts, side, filters)


def _walk(node: Any, rules: dict, sorts: dict, side: Any, filters: dict | None = None) -> Any:
    filters = filters or {}
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in filters and isinstance(v, list):
                v = [item for item in v if not filters[k](item)]
            v = _walk(v, rules, sorts, side, filters)
            if k in rules and not isinstance(v, (dict, list)):
                v = rules[k](v, side)
            if k in sorts and isinstance(v, list):
                keys = sorts[k]
                v = sorted(v, key=lambda item: tuple(str(item.get(f)) for f in keys) if keys and isinstance(item, dict)
                           else (str(type(item)), item if not isinstance(item, dict) else str(item)))
            out[k] = v
        return out
    if isinstance(node, list):
        return [_walk(v, rules, sorts, side, filters) for v in node]
    return node
