"""Broker configuration: Kafka's keys, Kafka's defaults, strict validation.

A ``server.properties`` file plus ``--override key=value`` pairs become a :class:`BrokerConfig`.
Unknown keys and bad values are refused with :class:`~strandline.core.config_key.ConfigError`,
whose message is one line naming the key. The broker keys are :data:`BROKER_KEYS`, with the
security keys of :mod:`strandline.core.security_keys` among them; the listeners are parsed by
:mod:`strandline.core.listeners`. Topic-level overrides (``retention.ms``, ``segment.bytes``, ...,
:mod:`strandline.core.topic_keys`) follow Kafka's topic config names and fall back to the
broker's ``log.*`` defaults (:meth:`BrokerConfig.log_config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from strandline.core.group_keys import (check_broker_group_keys, consumer_assignors, migration_policy,
                                        rebalance_protocols)
from strandline.core.config_key import INT_MAX, LONG_MAX, ConfigError, Key, key_table
from strandline.core.listeners import (SECURITY_PROTOCOLS, Listener, check_protocol_map, check_unique,
                                       parse_listener, protocol_map)
from strandline.core.security_keys import SECURITY_KEYS, listener_key
from strandline.core.topic_keys import COMPRESSION_TYPES, TOPIC_KEYS, UNCLEAN_RECOVERY_STRATEGIES, \
    check_message_format_version
from strandline.core import api_version
from strandline.log.config import LogConfig


def _inter_broker_protocol_version(key: str, raw: str, text: str) -> None:
    try:
        api_version.parse(text)
    except ValueError as exc:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: {exc} (such as 2.8, 2.7 or 2.8-IV1)") from None


#: ``authorizer.class.name`` values that turn on Strandline's ACL authorizer (Kafka's ZooKeeper ones)
ACL_AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")


def _authorizer(key: str, raw: str, text: str) -> None:
    if text and text not in ACL_AUTHORIZERS:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: the available authorizer is "
                          f"{ACL_AUTHORIZERS[0]} (ACLs in ZooKeeper), or none (empty)")


#: ``replica.selector.class`` values Strandline serves (KIP-392): Kafka's rack-aware selector
REPLICA_SELECTORS = ("org.apache.kafka.common.replica.RackAwareReplicaSelector",)


def _replica_selector(key: str, raw: str, text: str) -> None:
    if text and text not in REPLICA_SELECTORS:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: the available selector is "
                          f"{REPLICA_SELECTORS[0]}, or none (empty: consumers read from leaders only)")


def _super_users(key: str, raw: str, text: str) -> None:
    for principal in (p.strip() for p in text.split(";")):
        kind, sep, name = principal.partition(":")
        if principal and not (sep and kind and name):
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: {principal!r} is not a principal "
                              f"such as User:admin (principals are separated by ;)")


def config_text(value: Any) -> str | None:
    """A config value as Kafka shows and stores it: ``true``/``false``, comma-joined lists."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(config_text(v) or "" for v in value)
    if isinstance(value, Listener):
        return f"{value.name}://{value.host}:{value.port}"
    if isinstance(value, float):
        return repr(value).replace("e+", "E").replace("inf", "Infinity")
    return str(value)


BROKER_KEYS: dict[str, Key] = key_table(
    Key("broker.id", "int", -1, lo=-1, doc="The broker id; required, unique per cluster."),
    Key("broker.rack", "string", None),
    Key("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"],
        doc="The listeners, NAME://host:port separated by commas, each with its own server socket; "
            "the name's security protocol comes from listener.security.protocol.map. Port 0: any free "
            "port (registered as bound)."),
    Key("advertised.listeners", "list", None,
        doc="The listeners registered in ZooKeeper for clients and brokers (default: listeners); "
            "each name must be one of listeners'."),
    Key("listener.security.protocol.map", "list",
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
        validator=check_protocol_map,
        doc="Listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), NAME:PROTOCOL "
            "separated by commas."),
    Key("inter.broker.listener.name", "string", None,
        doc="The listener brokers connect to each other on; unset: the listener of "
            "security.inter.broker.protocol. Only one of the two may be set."),
    Key("security.inter.broker.protocol", "choice", "PLAINTEXT", choices=SECURITY_PROTOCOLS,
        doc="The security protocol brokers connect to each other with (its listener's name is the "
            "protocol's) when inter.broker.listener.name is unset."),
    Key("authorizer.class.name", "string", "", validator=_authorizer,
        doc="kafka.security.authorizer.AclAuthorizer turns on ACLs (kept in ZooKeeper); empty: none."),
    Key("allow.everyone.if.no.acl.found", "bool", False,
        doc="With an authorizer: whether a resource without any ACL is open to everyone."),
    Key("super.users", "string", None, validator=_super_users,
        doc="Principals (User:name, separated by ;) the authorizer allows everything."),
    Key("log.dirs", "list", None),
    Key("log.dir", "string", "/tmp/kafka-logs"),
    Key("zookeeper.connect", "string", None),
    Key("zookeeper.session.timeout.ms", "int", 18000, lo=1),
    Key("zookeeper.connection.timeout.ms", "int", None, lo=1),
    Key("num.partitions", "int", 1, lo=1),
    Key("default.replication.factor", "int", 1, lo=1),
    Key("auto.create.topics.enable", "bool", True),
    Key("delete.topic.enable", "bool", True),
    Key("min.insync.replicas", "int", 1, lo=1),
    Key("unclean.leader.election.enable", "bool", False),
    Key("unclean.recovery.strategy", "choice", "Balanced", choices=UNCLEAN_RECOVERY_STRATEGIES,
        doc="With eligible leader replicas, what the controller does with a partition whose ISR and ELR are both "
            "empty (KIP-966's unclean recovery): Balanced waits until every replica of the partition is back, "
            "asks each for its log (GetReplicaLogInfo) and elects the one with the newest epoch and the "
            "longest log; Aggressive elects that way among every live replica that answers; None leaves the "
            "partition offline for an operator's unclean election. unclean.leader.election.enable=true comes "
            "first (any live replica, at once)."),
    Key("eligible.leader.replicas.enable", "bool", False,
        doc="Eligible leader replicas (KIP-966; Kafka 4.0's feature eligible.leader.replicas.version): the high "
            "watermark advances only while the ISR holds min.insync.replicas; replicas that leave a smaller ISR "
            "stay eligible to lead; a broker back from an unclean shutdown loses its eligibility. Needs "
            "inter.broker.protocol.version 2.7 or later (AlterIsr)."),
    Key("message.max.bytes", "int", 1048588, lo=0),
    Key("socket.request.max.bytes", "int", 104857600, lo=1),
    Key("fetch.max.bytes", "int", 57671680, lo=1024),
    Key("max.incremental.fetch.session.cache.slots", "int", 1000, lo=0),
    Key("min.incremental.fetch.session.eviction.ms", "int", 120000, lo=0),
    Key("log.segment.bytes", "int", 1073741824, lo=14),
    Key("log.roll.ms", "long", None, lo=1),
    Key("log.roll.hours", "int", 168, lo=1),
    Key("log.retention.ms", "long", None, lo=-1),
    Key("log.retention.minutes", "int", None, lo=-1),
    Key("log.retention.hours", "int", 168, lo=-1),
    Key("log.retention.bytes", "long", -1, lo=-1),
    Key("log.retention.check.interval.ms", "long", 300000, lo=1),
    Key("log.index.interval.bytes", "int", 4096, lo=0),
    Key("log.index.size.max.bytes", "int", 10485760, lo=4),
    Key("log.flush.interval.messages", "long", LONG_MAX, lo=1),
    Key("log.flush.interval.ms", "long", None, lo=0),
    Key("log.flush.scheduler.interval.ms", "long", LONG_MAX, lo=0),
    Key("log.flush.offset.checkpoint.interval.ms", "int", 60000, lo=0),
    Key("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, lo=0),
    Key("log.message.timestamp.type", "choice", "CreateTime", choices=("CreateTime", "LogAppendTime")),
    Key("log.cleanup.policy", "list", ["delete"], choices=("compact", "delete")),
    Key("num.io.threads", "int", 8, lo=1),
    Key("num.network.threads", "int", 3, lo=1),
    Key("num.recovery.threads.per.data.dir", "int", 1, lo=1),
    Key("socket.send.buffer.bytes", "int", 102400, lo=-1),
    Key("socket.receive.buffer.bytes", "int", 102400, lo=-1),
    Key("replica.lag.time.max.ms", "long", 30000, lo=1),
    Key("replica.fetch.wait.max.ms", "int", 500, lo=0),
    Key("replica.fetch.min.bytes", "int", 1, lo=0),
    Key("replica.fetch.max.bytes", "int", 1048576, lo=0),
    Key("replica.fetch.response.max.bytes", "int", 10485760, lo=0),
    Key("replica.fetch.backoff.ms", "int", 1000, lo=0),
    Key("replica.selector.class", "string", None, validator=_replica_selector,
        doc="Set to Kafka's RackAwareReplicaSelector, consumers that name a rack (client.rack) are sent "
            "to a replica in it, and followers serve consumers' fetches (v11+) up to their high "
            "watermark (KIP-392). Unset, only leaders serve consumers."),
    Key("replica.socket.timeout.ms", "int", 30000, lo=1),
    Key("controller.socket.timeout.ms", "int", 30000, lo=1),
    Key("replica.high.watermark.checkpoint.interval.ms", "long", 5000, lo=1),
    Key("num.replica.fetchers", "int", 1, lo=1),
    Key("replication.truncation", "choice", "leader-epoch", choices=("leader-epoch", "high-watermark"),
        doc="Strandline: how a replica truncates on becoming follower (SPEC EPO-4 legacy mode)."),
    Key("inter.broker.protocol.version", "string", api_version.LATEST, validator=_inter_broker_protocol_version,
        doc="Kafka's inter-broker protocol version (2.8-IV1, 2.8, 2.7, 2.6, ...). From 2.7 on a leader proposes "
            "its ISR changes to the controller (AlterIsr, KIP-497); before, it writes the partition's state "
            "znode itself (the legacy mode)."),
    Key("controlled.shutdown.enable", "bool", True),
    Key("controlled.shutdown.max.retries", "int", 3, lo=0),
    Key("controlled.shutdown.retry.backoff.ms", "long", 5000, lo=0),
    Key("auto.leader.rebalance.enable", "bool", True),
    Key("leader.imbalance.check.interval.seconds", "long", 300, lo=1),
    Key("leader.imbalance.per.broker.percentage", "int", 10, lo=0),
    Key("group.initial.rebalance.delay.ms", "int", 3000, lo=0),
    Key("offsets.topic.num.partitions", "int", 50, lo=1),
    Key("offsets.topic.replication.factor", "int", 3, lo=1),
    Key("offsets.retention.minutes", "int", 10080, lo=1),
    Key("offsets.retention.check.interval.ms", "long", 600000, lo=1),
    Key("offsets.commit.timeout.ms", "int", 5000, lo=1),
    Key("offsets.topic.segment.bytes", "int", 104857600, lo=1),
    Key("offset.metadata.max.bytes", "int", 4096, lo=0),
    Key("group.min.session.timeout.ms", "int", 6000, lo=0),
    Key("group.max.session.timeout.ms", "int", 1800000, lo=0),
    Key("group.max.size", "int", 2147483647, lo=1),
    # the consumer group protocol of KIP-848 (ConsumerGroupHeartbeat), with Kafka 4.0's keys and defaults
    Key("group.coordinator.rebalance.protocols", "list", ["classic", "consumer"], choices=("classic", "consumer"),
        validator=rebalance_protocols,
        doc="The group protocols the coordinator serves: classic (JoinGroup/SyncGroup) always; consumer "
            "(ConsumerGroupHeartbeat and ConsumerGroupDescribe, KIP-848) when listed."),
    Key("group.consumer.session.timeout.ms", "int", 45000, lo=1),
    Key("group.consumer.min.session.timeout.ms", "int", 45000, lo=1),
    Key("group.consumer.max.session.timeout.ms", "int", 60000, lo=1),
    Key("group.consumer.heartbeat.interval.ms", "int", 5000, lo=1),
    Key("group.consumer.min.heartbeat.interval.ms", "int", 5000, lo=1),
    Key("group.consumer.max.heartbeat.interval.ms", "int", 15000, lo=1),
    Key("group.consumer.max.size", "int", 2147483647, lo=1),
    Key("group.consumer.assignors", "list", ["org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                                             "org.apache.kafka.coordinator.group.assignor.RangeAssignor"],
        validator=consumer_assignors,
        doc="The server-side assignors of consumer groups, by name (uniform, range) or Kafka's class "
            "name; the first is the one a group uses unless its members ask for another."),
    Key("group.consumer.migration.policy", "string", "bidirectional", validator=migration_policy,
        doc="Whether a live classic group becomes a consumer group when a member of the consumer protocol "
            "joins it (upgrade), and a consumer group whose last member of that protocol leaves becomes a "
            "classic group again (downgrade): both, either or neither."),
    # share groups (KIP-932), with Kafka 4.2's keys and defaults; served when group.share.enable is true
    Key("group.share.enable", "bool", False,
        doc="Serve share groups (ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge), "
            "their share-partitions' state kept by the share coordinator in __share_group_state."),
    Key("group.share.session.timeout.ms", "int", 45000, lo=1),
    Key("group.share.min.session.timeout.ms", "int", 45000, lo=1),
    Key("group.share.max.session.timeout.ms", "int", 60000, lo=1),
    Key("group.share.heartbeat.interval.ms", "int", 5000, lo=1),
    Key("group.share.min.heartbeat.interval.ms", "int", 5000, lo=1),
    Key("group.share.max.heartbeat.interval.ms", "int", 15000, lo=1),
    Key("group.share.max.size", "int", 200, lo=1, hi=1000),
    Key("group.share.record.lock.duration.ms", "int", 30000, lo=1000, hi=3600000),
    Key("group.share.min.record.lock.duration.ms", "int", 15000, lo=1000, hi=30000),
    Key("group.share.max.record.lock.duration.ms", "int", 60000, lo=30000, hi=3600000),
    Key("group.share.delivery.count.limit", "int", 5, lo=2, hi=10),
    Key("group.share.partition.max.record.locks", "int", 2000, lo=100, hi=10000),
    Key("group.share.max.share.sessions", "int", 2000, lo=1),
    # the share coordinator's keys (KIP-932), with Kafka 4.2's defaults
    Key("share.coordinator.state.topic.num.partitions", "int", 50, lo=1),
    Key("share.coordinator.state.topic.replication.factor", "int", 3, lo=1),
    Key("share.coordinator.state.topic.min.isr", "int", 2, lo=1),
    Key("share.coordinator.state.topic.segment.bytes", "int", 104857600, lo=1),
    Key("transactional.id.expiration.ms", "int", 604800000, lo=1),
    # the transaction coordinator's keys, with Kafka's defaults
    Key("transaction.state.log.num.partitions", "int", 50, lo=1),
    Key("transaction.state.log.replication.factor", "int", 3, lo=1),
    Key("transaction.state.log.min.isr", "int", 2, lo=1),
    Key("transaction.state.log.segment.bytes", "int", 104857600, lo=1),
    Key("transaction.state.log.load.buffer.size", "int", 5242880, lo=1),
    Key("transaction.max.timeout.ms", "int", 900000, lo=1),
    Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, lo=1),
    Key("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, lo=1),
    Key("transaction.partition.verification.enable", "bool", True,
        doc="Kafka 3.6+ (KIP-890 part 1): before appending a transactional batch that would open its "
            "producer's transaction on a partition, the leader asks the transaction coordinator "
            "(AddPartitionsToTxn v4, verify_only) whether the partition is in that ongoing transaction, "
            "and refuses the batch (INVALID_TXN_STATE) if not: a late batch cannot open a transaction "
            "that never ends. On by default, as in Kafka; every broker must serve AddPartitionsToTxn v4."),
    Key("transaction.version", "int", 2, lo=0, hi=2,
        doc="The finalized level of Kafka's feature transaction.version, which ApiVersions v3+ answers "
            "(FinalizedFeatures; Kafka sets it with kafka-storage format --feature or kafka-features "
            "upgrade, 2 on a fresh Kafka 4.0 cluster), until UpdateFeatures (kafka-features upgrade or "
            "downgrade) writes the cluster's level to ZooKeeper's /feature, which then holds for every broker. At 2, Kafka 4.x clients use transactions v2 "
            "(KIP-890 part 2): the producer epoch is bumped at every commit and abort (EndTxn v5), and a "
            "partition or a group's offsets join a transaction when the first Produce v12 or "
            "TxnOffsetCommit v5 reaches them (no AddPartitionsToTxn or AddOffsetsToTxn from the client). "
            "0 or 1: clients use transactions v1; every broker of a cluster must have the same value."),
    Key("producer.id.expiration.ms", "int", 86400000, lo=1),
    Key("request.timeout.ms", "int", 30000, lo=0),
    Key("connections.max.idle.ms", "long", 600000),
    Key("log.flush.on.ack", "bool", False,
        doc="Strandline: fsync before acknowledging produce requests (SPEC DUR-2; topic key flush.on.ack)."),
    Key("metrics.port", "int", -1, lo=-1, hi=65535,
        doc="Strandline: the port of the broker's HTTP endpoint for operators (/metrics in Prometheus' "
            "format, /status as JSON) on the listener's host; -1: the listener's port + 1000; 0: none."),
)


# Keys Kafka 2.8 also knows; accepted, stored and described (their subsystems are not all in
# Strandline: log cleaning, connection limits, quotas)
BROKER_KEYS.update(key_table(
    Key("log.roll.jitter.ms", "long", None, lo=0),
    Key("log.roll.jitter.hours", "int", 0, lo=0),
    Key("log.segment.delete.delay.ms", "long", 60000, lo=0),
    Key("log.preallocate", "bool", False),
    Key("log.message.format.version", "string", "2.8-IV1", validator=check_message_format_version),
    Key("log.message.timestamp.difference.max.ms", "long", LONG_MAX, lo=0),
    Key("log.message.downconversion.enable", "bool", True),
    Key("log.cleaner.enable", "bool", True),
    Key("log.cleaner.threads", "int", 1, lo=0),
    Key("log.cleaner.backoff.ms", "long", 15000, lo=0),
    Key("log.cleaner.dedupe.buffer.size", "long", 134217728),
    Key("log.cleaner.io.buffer.size", "int", 524288, lo=0),
    Key("log.cleaner.io.buffer.load.factor", "double", 0.9),
    Key("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308),
    Key("log.cleaner.delete.retention.ms", "long", 86400000, lo=0),
    Key("log.cleaner.min.compaction.lag.ms", "long", 0, lo=0),
    Key("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, lo=1),
    Key("log.cleaner.min.cleanable.ratio", "double", 0.5, lo=0, hi=1),
    Key("compression.type", "choice", "producer", choices=COMPRESSION_TYPES),
    Key("leader.replication.throttled.rate", "long", LONG_MAX, lo=0),
    Key("follower.replication.throttled.rate", "long", LONG_MAX, lo=0),
    Key("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, lo=0),
    Key("background.threads", "int", 10, lo=1),
    Key("max.connections", "int", INT_MAX, lo=0),
    Key("max.connections.per.ip", "int", INT_MAX, lo=0),
    Key("max.connection.creation.rate", "int", INT_MAX, lo=0),
))
BROKER_KEYS.update(SECURITY_KEYS)

#: Broker keys an AlterConfigs may change while the brokers run (Kafka 2.8's
#: DynamicBrokerConfig.AllDynamicConfigs, less the listener and SSL/SASL keys Strandline has no
#: use for); the others are read-only.
DYNAMIC_BROKER_KEYS: frozenset[str] = frozenset({
    "advertised.listeners",
    # a topic config's broker key (Kafka's DynamicLogConfig: LogConfig.TopicConfigSynonyms' values, so
    # log.retention.ms but not its .minutes and .hours synonyms; not log.message.format.version)
    "log.segment.bytes", "log.roll.ms", "log.roll.jitter.ms",
    "log.index.size.max.bytes", "log.flush.interval.messages", "log.flush.interval.ms", "log.retention.bytes",
    "log.retention.ms", "log.index.interval.bytes",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
    "log.segment.delete.delay.ms", "log.cleaner.min.cleanable.ratio", "log.cleanup.policy",
    "unclean.leader.election.enable", "unclean.recovery.strategy", "min.insync.replicas", "compression.type",
    "log.preallocate",
    "log.message.timestamp.type", "log.message.timestamp.difference.max.ms",
    "log.message.downconversion.enable", "message.max.bytes", "log.flush.on.ack",
    "num.io.threads", "num.network.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "background.threads",
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "max.connections", "max.connections.per.ip", "max.connection.creation.rate",
})

#: A broker key's synonyms, highest precedence first, as Kafka lists them in DescribeConfigs.
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
    "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}


def broker_synonyms(key: str) -> tuple[str, ...]:
    return BROKER_SYNONYMS.get(key, (key,))


def parse_properties(text: str, source: str = "server.properties") -> dict[str, str]:
    """Parse Java-properties-style ``key=value`` lines (``#``/``!`` comments, ``:`` separators)."""
    props: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"{source}:{lineno}: expected key=value, found {stripped!r}")
        props[stripped[:sep].strip()] = stripped[sep + 1:].strip()
    return props


def parse_override(text: str, option: str = "--override") -> tuple[str, str]:
    """``key=value`` as given to ``option``."""
    if "=" not in text or not text.split("=", 1)[0].strip():
        raise ConfigError(f"{option} {text!r}: expected KEY=VALUE (e.g. min.insync.replicas=2)")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


@dataclass(frozen=True)
class BrokerConfig:
    """Validated broker configuration; ``values`` holds every key with its effective value."""

    values: dict[str, Any] = field(default_factory=dict)
    #: The keys as given (server.properties and overrides): Kafka's static broker configs.
    originals: dict[str, str] = field(default_factory=dict)
    #: Dynamic broker configs in effect (``/config/brokers/<default>`` and ``/config/brokers/<id>``);
    #: see :mod:`strandline.broker.dynamic_config`.
    dynamic_default: dict[str, str] = field(default_factory=dict)
    dynamic_broker: dict[str, str] = field(default_factory=dict)
    #: The ports the listeners configured with port 0 listen on (by listener name).
    bound_ports: dict[str, int] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @classmethod
    def from_properties(cls, props: dict[str, str], *, require_zookeeper: bool = True) -> "BrokerConfig":
        values: dict[str, Any] = {}
        for key, raw in props.items():
            spec = BROKER_KEYS.get(key)
            if spec is None:
                if key.startswith("listener.name."):
                    continue                    # below, once the listeners are known
                raise ConfigError(f"Unknown configuration key {key!r}")
            values[key] = spec.parse(raw)
        for key, spec in BROKER_KEYS.items():
            values.setdefault(key, spec.default)
        # Derived defaults, as Kafka derives them.
        if values["log.roll.ms"] is None:
            values["log.roll.ms"] = values["log.roll.hours"] * 3600_000
        if values["log.roll.jitter.ms"] is None:
            values["log.roll.jitter.ms"] = values["log.roll.jitter.hours"] * 3600_000
        if values["log.retention.ms"] is None:
            if values["log.retention.minutes"] is not None:
                minutes = values["log.retention.minutes"]
                values["log.retention.ms"] = -1 if minutes < 0 else minutes * 60_000
            else:
                hours = values["log.retention.hours"]
                values["log.retention.ms"] = -1 if hours < 0 else hours * 3600_000
        if values["log.flush.interval.ms"] is None:
            values["log.flush.interval.ms"] = values["log.flush.scheduler.interval.ms"]
        if values["log.dirs"] is None:
            values["log.dirs"] = [values["log.dir"]]
        if values["zookeeper.connection.timeout.ms"] is None:
            values["zookeeper.connection.timeout.ms"] = values["zookeeper.session.timeout.ms"]
        if values["broker.id"] < 0:
            raise ConfigError("Missing required configuration broker.id (a non-negative integer)")
        if require_zookeeper and not values["zookeeper.connect"]:
            raise ConfigError("Missing required configuration zookeeper.connect (host:port[,host:port...])")
        protocols = protocol_map(values["listener.security.protocol.map"])
        listeners = [parse_listener("listeners", text, protocols) for text in values["listeners"]]
        if not listeners:
            raise ConfigError("Invalid value for configuration listeners: at least one listener is required")
        check_unique("listeners", listeners, ports=True)
        values["listeners"] = listeners
        if values["advertised.listeners"]:
            advertised = [parse_listener("advertised.listeners", text, protocols)
                          for text in values["advertised.listeners"]]
            check_unique("advertised.listeners", advertised, ports=False)
            names = {l.name for l in listeners}
            stray = [l.name for l in advertised if l.name not in names]
            if stray:
                raise ConfigError(f"Invalid value for configuration advertised.listeners: {stray[0]} is not one of "
                                  f"the listeners' names ({', '.join(sorted(names))})")
            values["advertised.listeners"] = advertised
        else:
            values["advertised.listeners"] = listeners
        if "inter.broker.listener.name" in props and "security.inter.broker.protocol" in props:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol "
                              "should be set.")
        if values["inter.broker.listener.name"]:
            values["inter.broker.listener.name"] = values["inter.broker.listener.name"].strip().upper()
        inter = values["inter.broker.listener.name"] or values["security.inter.broker.protocol"]
        if inter not in {l.name for l in values["advertised.listeners"]}:
            raise ConfigError(f"Invalid value {inter!r} for configuration inter.broker.listener.name: it must be a "
                              f"listener name defined in advertised.listeners (its security protocol: "
                              f"security.inter.broker.protocol)")
        for key, raw in props.items():
            if key.startswith("listener.name."):
                found = listener_key(key)
                if found is None:
                    raise ConfigError(f"Unknown configuration key {key!r}")
                values[key] = found[2].parse(raw)
        if values["replica.fetch.wait.max.ms"] > values["replica.lag.time.max.ms"]:
            raise ConfigError(
                "Invalid value for configuration replica.fetch.wait.max.ms: must be at most replica.lag.time.max.ms"
            )
        check_broker_group_keys(values)
        if not values["log.dirs"]:
            raise ConfigError("Invalid value for configuration log.dirs: at least one directory is required")
        return cls(values, {str(k): str(v) for k, v in props.items()})

    @property
    def broker_id(self) -> int:
        broker_id: int = self.values["broker.id"]
        return broker_id

    @property
    def listener(self) -> Listener:
        listener: Listener = self.values["listeners"][0]
        return listener

    @property
    def listeners(self) -> list[Listener]:
        listeners: list[Listener] = self.values["listeners"]
        return listeners

    @property
    def inter_broker_listener(self) -> str:
        """The name of the listener brokers connect to each other on."""
        name: str = self.values["inter.broker.listener.name"] or self.values["security.inter.broker.protocol"]
        return name

    @property
    def advertised_listeners(self) -> list[Listener]:
        """Every advertised listener, a wildcard host as 127.0.0.1 and port 0 as bound (once
        :meth:`bound` has said)."""
        bound = self.bound_ports
        result = []
        for adv in self.values["advertised.listeners"]:
            host = "127.0.0.1" if adv.host in ("0.0.0.0", "::", "") else adv.host
            port = adv.port or bound.get(adv.name, 0)
            result.append(Listener(adv.name, host, port, adv.protocol))
        return result

    @property
    def advertised(self) -> Listener:
        """The inter-broker listener's advertised endpoint (the first advertised listener's when
        another name is set)."""
        listeners = self.advertised_listeners
        return next((l for l in listeners if l.name == self.inter_broker_listener), listeners[0])

    def registered_endpoints(self) -> list[tuple[str, str, int, str]]:
        """(listener, host, port, protocol) of every advertised listener: what the broker registers."""
        return [(l.name, l.host, l.port, l.protocol) for l in self.advertised_listeners]

    def bound(self, name: str, port: int) -> None:
        """Listener ``name`` (configured with port 0) listens on ``port``: advertise that."""
        self.bound_ports[name] = port

    def listener_config(self, name: str) -> dict[str, Any]:
        """The security keys of listener ``name``: ``listener.name.<name>.<key>`` over ``<key>``;
        a mechanism's JAAS config as ``<mechanism>.sasl.jaas.config`` (lower case)."""
        prefix = f"listener.name.{name.lower()}."
        result = {key: self.values[key] for key in SECURITY_KEYS}
        for key, value in self.values.items():
            if key.startswith(prefix):
                result[key[len(prefix):]] = value
        return result

    @property
    def metrics_port(self) -> int | None:
        """The port of the operators' HTTP endpoint (``metrics.port``), None for none."""
        port = self.values["metrics.port"]
        if port == -1:
            port = self.listener.port + 1000 if self.listener.port and self.listener.port + 1000 <= 65535 else 0
        return port or None

    def log_config(self, overrides: dict[str, Any] | None = None) -> LogConfig:
        """The LogConfig for a topic: its overrides over this broker's ``log.*`` defaults."""
        v = self.values
        topic = overrides or {}

        def pick(topic_key: str, broker_key: str) -> Any:
            value = topic.get(topic_key)
            return v[broker_key] if value is None else value

        return LogConfig(
            segment_bytes=pick("segment.bytes", "log.segment.bytes"),
            segment_ms=pick("segment.ms", "log.roll.ms"),
            segment_index_bytes=pick("segment.index.bytes", "log.index.size.max.bytes"),
            index_interval_bytes=pick("index.interval.bytes", "log.index.interval.bytes"),
            retention_ms=pick("retention.ms", "log.retention.ms"),
            retention_bytes=pick("retention.bytes", "log.retention.bytes"),
            max_message_bytes=pick("max.message.bytes", "message.max.bytes"),
            flush_messages=pick("flush.messages", "log.flush.interval.messages"),
            flush_ms=pick("flush.ms", "log.flush.interval.ms"),
            message_timestamp_type=pick("message.timestamp.type", "log.message.timestamp.type"),
            message_timestamp_difference_max_ms=pick("message.timestamp.difference.max.ms",
                                                     "log.message.timestamp.difference.max.ms"),
            cleanup_policy=tuple(pick("cleanup.policy", "log.cleanup.policy")),
            min_cleanable_ratio=pick("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio"),
            min_compaction_lag_ms=pick("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"),
            max_compaction_lag_ms=pick("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
            delete_retention_ms=pick("delete.retention.ms", "log.cleaner.delete.retention.ms"),
            producer_id_expiration_ms=v["producer.id.expiration.ms"],
        )

    def topic_value(self, overrides: dict[str, Any], topic_key: str) -> Any:
        """A topic-level setting: the topic's override, else the broker default it derives from."""
        value = overrides.get(topic_key)
        if value is not None:
            return value
        broker_key = TOPIC_KEYS[topic_key][0]
        return self.values[broker_key] if broker_key else TOPIC_KEYS[topic_key][1].default


def load_broker_config(path: str | None, overrides: list[str], *,
                       reader: Callable[[str], str] | None = None) -> BrokerConfig:
    """Read ``path`` (if given) and apply ``key=value`` overrides."""
    props: dict[str, str] = {}
    if path:
        if reader is None:
            raise ConfigError("no reader for the configuration file")
        props = parse_properties(reader(path), source=path)
    for item in overrides:
        key, value = parse_override(item)
        props[key] = value
    return BrokerConfig.from_properties(props)
