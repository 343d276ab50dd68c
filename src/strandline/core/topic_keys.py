"""Topic-level configuration (Kafka 2.8's LogConfig): every topic key, the broker key it defaults
from, and its validation. A topic's overrides (CreateTopics, AlterConfigs, ``--config``) are
checked by :func:`parse_topic_configs`; :meth:`strandline.core.config.BrokerConfig.log_config`
lays them over the broker's ``log.*`` defaults."""

from __future__ import annotations

import re
from typing import Any, Mapping

from strandline.core.config_key import LONG_MAX, ConfigError, Key

#: ``unclean.recovery.strategy`` (KIP-966's unclean recovery, controller.unclean_recovery)
UNCLEAN_RECOVERY_STRATEGIES = ("None", "Balanced", "Aggressive")

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _throttled_replicas(key: str, raw: str, items: list[str]) -> None:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker`` pairs."""
    if items == ["*"]:
        return
    for item in items:
        part, sep, broker = item.partition(":")
        if not (sep and part.strip().isdigit() and broker.strip().isdigit()):
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: must be the literal '*' or a "
                              f"list of replicas in the form [PartitionId]:[BrokerId],[PartitionId]:[BrokerId],...")


_MESSAGE_FORMAT = re.compile(r"^(0\.(8\.[0-2]|9\.0|10\.[0-2]|11\.0)|[12]\.[0-8])(\.\d+)?(-IV\d+)?$")


def check_message_format_version(key: str, raw: str, text: str) -> None:
    if not _MESSAGE_FORMAT.match(text):
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: not a Kafka version such as 2.8 or 2.8-IV1")


# Topic-level keys: topic key -> (broker key it defaults from, Key used for parsing); every topic
# config of Kafka 2.8 (LogConfig), with its validation, plus Strandline's flush.on.ack.
TOPIC_KEYS: dict[str, tuple[str | None, Key]] = {
    "cleanup.policy": ("log.cleanup.policy", Key("cleanup.policy", "list", None, choices=("compact", "delete"))),
    "compression.type": ("compression.type", Key("compression.type", "choice", None, choices=COMPRESSION_TYPES)),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms", Key("delete.retention.ms", "long", None, lo=0)),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms", Key("file.delete.delay.ms", "long", None, lo=0)),
    "flush.messages": ("log.flush.interval.messages", Key("flush.messages", "long", None, lo=1)),
    "flush.ms": ("log.flush.interval.ms", Key("flush.ms", "long", None, lo=0)),
    "follower.replication.throttled.replicas": (None, Key(
        "follower.replication.throttled.replicas", "list", [], validator=_throttled_replicas)),
    "index.interval.bytes": ("log.index.interval.bytes", Key("index.interval.bytes", "int", None, lo=0)),
    "leader.replication.throttled.replicas": (None, Key(
        "leader.replication.throttled.replicas", "list", [], validator=_throttled_replicas)),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms", Key("max.compaction.lag.ms", "long", None, lo=1)),
    "max.message.bytes": ("message.max.bytes", Key("max.message.bytes", "int", None, lo=0)),
    "message.downconversion.enable": ("log.message.downconversion.enable", Key(
        "message.downconversion.enable", "bool", None)),
    "message.format.version": ("log.message.format.version", Key(
        "message.format.version", "string", None, validator=check_message_format_version)),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms", Key(
        "message.timestamp.difference.max.ms", "long", None, lo=0)),
    "message.timestamp.type": ("log.message.timestamp.type", Key(
        "message.timestamp.type", "choice", None, choices=("CreateTime", "LogAppendTime"))),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio", Key(
        "min.cleanable.dirty.ratio", "double", None, lo=0, hi=1)),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms", Key("min.compaction.lag.ms", "long", None, lo=0)),
    "min.insync.replicas": ("min.insync.replicas", Key("min.insync.replicas", "int", None, lo=1)),
    "preallocate": ("log.preallocate", Key("preallocate", "bool", None)),
    "retention.bytes": ("log.retention.bytes", Key("retention.bytes", "long", None, lo=-1)),
    "retention.ms": ("log.retention.ms", Key("retention.ms", "long", None, lo=-1)),
    "segment.bytes": ("log.segment.bytes", Key("segment.bytes", "int", None, lo=14)),
    "segment.index.bytes": ("log.index.size.max.bytes", Key("segment.index.bytes", "int", None, lo=4)),
    "segment.jitter.ms": ("log.roll.jitter.ms", Key("segment.jitter.ms", "long", None, lo=0)),
    "segment.ms": ("log.roll.ms", Key("segment.ms", "long", None, lo=1)),
    "unclean.leader.election.enable": ("unclean.leader.election.enable", Key(
        "unclean.leader.election.enable", "bool", None)),
    "unclean.recovery.strategy": ("unclean.recovery.strategy", Key(
        "unclean.recovery.strategy", "choice", None, choices=UNCLEAN_RECOVERY_STRATEGIES)),
    "flush.on.ack": ("log.flush.on.ack", Key("flush.on.ack", "bool", None)),
}


def parse_topic_configs(raw: Mapping[str, str | None]) -> dict[str, Any]:
    """Validate topic-level configs (CreateTopics / ``--config``); raises ConfigError."""
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        entry = TOPIC_KEYS.get(key)
        if entry is None:
            raise ConfigError(f"Unknown topic configuration key {key!r}")
        if value is None:
            continue
        parsed[key] = entry[1].parse(value)
    if parsed.get("min.compaction.lag.ms", 0) > parsed.get("max.compaction.lag.ms", LONG_MAX):
        raise ConfigError("Invalid value for configuration min.compaction.lag.ms: conflict with max.compaction.lag.ms "
                          "(min.compaction.lag.ms must be at most max.compaction.lag.ms)")
    return parsed
