"""Broker and topic configuration: Kafka's keys, Kafka's defaults, strict validation.

A ``server.properties`` file plus ``--override key=value`` pairs become a :class:`BrokerConfig`.
Unknown keys and bad values are refused with :class:`ConfigError`, whose message is one line
naming the key. Topic-level overrides (``retention.ms``, ``segment.bytes``, ...) follow Kafka's
topic config names and fall back to the broker's ``log.*`` defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from strandline.log.config import LogConfig

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ConfigError(ValueError):
    """A configuration key or value that is refused; the message is one line naming the key."""


def _parse_int(key: str, raw: str, lo: int | None, hi: int | None) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: not a number") from None
    if lo is not None and value < lo:
        raise ConfigError(f"Invalid value {value} for configuration {key}: must be at least {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"Invalid value {value} for configuration {key}: must be at most {hi}")
    return value


def _parse_bool(key: str, raw: str) -> bool:
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"Invalid value {raw!r} for configuration {key}: expected true or false")


@dataclass(frozen=True)
class Key:
    name: str
    kind: str  # "int", "long", "bool", "string", "list", "choice"
    default: Any
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""

    def parse(self, raw: Any) -> Any:
        if self.kind in ("int", "long"):
            hi = self.hi if self.hi is not None else (INT_MAX if self.kind == "int" else LONG_MAX)
            return _parse_int(self.name, raw, self.lo, hi)
        if self.kind == "bool":
            return _parse_bool(self.name, raw)
        if self.kind == "choice":
            text = str(raw).strip()
            if text not in self.choices:
                raise ConfigError(
                    f"Invalid value {raw!r} for configuration {self.name}: "
                    f"expected one of {', '.join(self.choices)}"
                )
            return text
        if self.kind == "list":
            return [part.strip() for part in str(raw).split(",") if part.strip()]
        return str(raw).strip()


def _keys(*keys: Key) -> dict[str, Key]:
    return {k.name: k for k in keys}


BROKER_KEYS: dict[str, Key] = _keys(
    Key("broker.id", "int", -1, lo=-1, doc="The broker id; required, unique per cluster."),
    Key("broker.rack", "string", None),
    Key("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"]),
    Key("advertised.listeners", "list", None),
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
    Key("message.max.bytes", "int", 1048588, lo=0),
    Key("socket.request.max.bytes", "int", 104857600, lo=1),
    Key("fetch.max.bytes", "int", 57671680, lo=1024),
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
    Key("log.cleanup.policy", "list", ["delete"]),
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
    Key("replica.socket.timeout.ms", "int", 30000, lo=1),
    Key("controller.socket.timeout.ms", "int", 30000, lo=1),
    Key("replica.high.watermark.checkpoint.interval.ms", "long", 5000, lo=1),
    Key("num.replica.fetchers", "int", 1, lo=1),
    Key("replication.truncation", "choice", "leader-epoch", choices=("leader-epoch", "high-watermark"),
        doc="Strandline: how a replica truncates on becoming follower (SPEC EPO-4 legacy mode)."),
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
    Key("transactional.id.expiration.ms", "int", 604800000, lo=1),
    Key("producer.id.expiration.ms", "int", 86400000, lo=1),
    Key("request.timeout.ms", "int", 30000, lo=0),
    Key("connections.max.idle.ms", "long", 600000),
    Key("log.flush.on.ack", "bool", False,
        doc="Strandline: fsync before acknowledging produce requests (SPEC DUR-2; topic key flush.on.ack)."),
)

# Topic-level keys: topic key -> (broker key it defaults from, Key used for parsing)
TOPIC_KEYS: dict[str, tuple[str | None, Key]] = {
    "segment.bytes": ("log.segment.bytes", Key("segment.bytes", "int", None, lo=14)),
    "segment.ms": ("log.roll.ms", Key("segment.ms", "long", None, lo=1)),
    "segment.index.bytes": ("log.index.size.max.bytes", Key("segment.index.bytes", "int", None, lo=4)),
    "index.interval.bytes": ("log.index.interval.bytes", Key("index.interval.bytes", "int", None, lo=0)),
    "retention.ms": ("log.retention.ms", Key("retention.ms", "long", None, lo=-1)),
    "retention.bytes": ("log.retention.bytes", Key("retention.bytes", "long", None, lo=-1)),
    "max.message.bytes": ("message.max.bytes", Key("max.message.bytes", "int", None, lo=0)),
    "flush.messages": ("log.flush.interval.messages", Key("flush.messages", "long", None, lo=1)),
    "flush.ms": ("log.flush.interval.ms", Key("flush.ms", "long", None, lo=0)),
    "message.timestamp.type": ("log.message.timestamp.type", Key(
        "message.timestamp.type", "choice", None, choices=("CreateTime", "LogAppendTime"))),
    "cleanup.policy": ("log.cleanup.policy", Key("cleanup.policy", "choice", None, choices=("delete",))),
    "min.insync.replicas": ("min.insync.replicas", Key("min.insync.replicas", "int", None, lo=1)),
    "unclean.leader.election.enable": ("unclean.leader.election.enable", Key(
        "unclean.leader.election.enable", "bool", None)),
    "flush.on.ack": ("log.flush.on.ack", Key("flush.on.ack", "bool", None)),
    "compression.type": (None, Key("compression.type", "choice", "producer", choices=("producer",))),
}


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


def parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise ConfigError(f"Invalid override {text!r}: expected key=value")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listener(key: str, text: str) -> Listener:
    name, sep, rest = text.partition("://")
    if not sep or ":" not in rest:
        raise ConfigError(f"Invalid value {text!r} for configuration {key}: expected NAME://host:port")
    host, _, port = rest.rpartition(":")
    if name.upper() != "PLAINTEXT":
        raise ConfigError(f"Invalid value {text!r} for configuration {key}: only PLAINTEXT listeners are supported")
    host = host.strip("[]") or "0.0.0.0"
    return Listener(name.upper(), host, _parse_int(key, port, 0, 65535))


@dataclass(frozen=True)
class BrokerConfig:
    """Validated broker configuration; ``values`` holds every key with its effective value."""

    values: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @classmethod
    def from_properties(cls, props: dict[str, str], *, require_zookeeper: bool = True) -> "BrokerConfig":
        values: dict[str, Any] = {}
        for key, raw in props.items():
            spec = BROKER_KEYS.get(key)
            if spec is None:
                raise ConfigError(f"Unknown configuration key {key!r}")
            values[key] = spec.parse(raw)
        for key, spec in BROKER_KEYS.items():
            values.setdefault(key, spec.default)
        # Derived defaults, as Kafka derives them.
        if values["log.roll.ms"] is None:
            values["log.roll.ms"] = values["log.roll.hours"] * 3600_000
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
        listeners = [parse_listener("listeners", text) for text in values["listeners"]]
        if not listeners:
            raise ConfigError("Invalid value for configuration listeners: at least one listener is required")
        values["listeners"] = listeners
        if values["advertised.listeners"]:
            values["advertised.listeners"] = [
                parse_listener("advertised.listeners", text) for text in values["advertised.listeners"]
            ]
        else:
            values["advertised.listeners"] = listeners
        if values["replica.fetch.wait.max.ms"] > values["replica.lag.time.max.ms"]:
            raise ConfigError(
                "Invalid value for configuration replica.fetch.wait.max.ms: must be at most replica.lag.time.max.ms"
            )
        if not values["log.dirs"]:
            raise ConfigError("Invalid value for configuration log.dirs: at least one directory is required")
        return cls(values)

    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]

    @property
    def listener(self) -> Listener:
        return self.values["listeners"][0]

    @property
    def advertised(self) -> Listener:
        adv = self.values["advertised.listeners"][0]
        if adv.host in ("0.0.0.0", "::", ""):
            return Listener(adv.name, "127.0.0.1", adv.port)
        return adv

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
        )

    def topic_value(self, overrides: dict[str, Any], topic_key: str) -> Any:
        """A topic-level setting: the topic's override, else the broker default it derives from."""
        value = overrides.get(topic_key)
        if value is not None:
            return value
        broker_key = TOPIC_KEYS[topic_key][0]
        return self.values[broker_key] if broker_key else TOPIC_KEYS[topic_key][1].default


def parse_topic_configs(raw: dict[str, str | None]) -> dict[str, Any]:
    """Validate topic-level configs (CreateTopics / ``--config``); raises ConfigError."""
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        entry = TOPIC_KEYS.get(key)
        if entry is None:
            raise ConfigError(f"Unknown topic configuration key {key!r}")
        if value is None:
            continue
        parsed[key] = entry[1].parse(value)
    return parsed


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
