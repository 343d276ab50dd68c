"""Group-level configuration (Kafka 4.x's GroupConfig, KIP-848 and KIP-932): every group key, the
broker key it defaults from, and its validation.

A group's overrides are set with IncrementalAlterConfigs (or AlterConfigs) on a GROUP resource, as
``kafka-configs.sh --entity-type groups`` and ``Admin.incrementalAlterConfigs`` do, and kept in
ZooKeeper at ``/config/groups/<group>``. A group with no override takes the broker's value. Each
value is checked as Kafka checks it: within the broker's ``min``/``max`` bounds, the session
timeout above the heartbeat interval. The broker keys of groups are checked here too: the
rebalance protocols served, the consumer groups' server-side assignors and the migration policy
between the protocols.

``share.auto.offset.reset`` (KIP-932) says where a share group starts on a partition it has never
consumed: ``latest`` (the default: the high watermark), ``earliest`` (the log's start) or
``by_duration:<ISO-8601 duration>`` (the first record written within that duration before now,
KIP-1106).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from strandline.core.config_key import ConfigError, Key

# ------------------------------------------------------------------ broker keys of groups

def rebalance_protocols(key: str, raw: str, items: list[str]) -> None:
    if "classic" not in items:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: disabling the 'classic' protocol "
                          f"is not supported")


#: the server-side assignors of strandline.group.consumer.assignors, by name and by Kafka's class name
CONSUMER_ASSIGNORS = {"uniform": "uniform", "range": "range",
                      "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                      "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def consumer_assignors(key: str, raw: str, items: list[str]) -> None:
    unknown = [n for n in items if n not in CONSUMER_ASSIGNORS]
    if unknown or not items:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: unknown assignor(s) "
                          f"{', '.join(unknown) or '(none given)'}; known: uniform, range")


#: group.consumer.migration.policy's values, taken in any case as Kafka takes them: whether a
#: classic group may be upgraded to a consumer group, and a consumer group downgraded
MIGRATION_POLICIES = {"bidirectional": (True, True), "upgrade": (True, False), "downgrade": (False, True),
                      "disabled": (False, False)}


def migration_policy(key: str, raw: str, text: str) -> None:
    if text.lower() not in MIGRATION_POLICIES:
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: expected one of "
                          f"{', '.join(MIGRATION_POLICIES)} (in any case)")


SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"

_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,9})?)S)?)?$", re.IGNORECASE)


@dataclass(frozen=True)
class OffsetReset:
    """A parsed ``share.auto.offset.reset``: ``latest``, ``earliest`` or ``by_duration``
    (``duration_ms`` before now)."""

    strategy: str
    duration_ms: int = 0


def parse_offset_reset(key: str, raw: Any) -> OffsetReset:
    text = str(raw).strip()
    lowered = text.lower()
    if lowered in ("latest", "earliest"):
        return OffsetReset(lowered)
    if lowered.startswith("by_duration:"):
        match = _DURATION.match(text[len("by_duration:"):].strip())
        if match and text[len("by_duration:"):].strip().upper() not in ("P", "PT"):
            days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
            return OffsetReset("by_duration", int(round(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)))
        raise ConfigError(f"Invalid value {raw!r} for configuration {key}: the duration after by_duration: must "
                          f"be an ISO-8601 duration such as P1D, PT2H or PT30M")
    raise ConfigError(f"Invalid value {raw!r} for configuration {key}: String must be one of: latest, earliest, "
                      f"by_duration:<ISO-8601 duration>")


def _offset_reset(key: str, raw: Any, value: Any) -> None:
    parse_offset_reset(key, raw)


#: group key -> (the broker key it defaults from, the Key that parses it)
GROUP_KEYS: dict[str, tuple[str | None, Key]] = {
    "consumer.session.timeout.ms": ("group.consumer.session.timeout.ms", Key(
        "consumer.session.timeout.ms", "int", 45000, lo=1,
        doc="The timeout to detect client failures of this consumer group (KIP-848).")),
    "consumer.heartbeat.interval.ms": ("group.consumer.heartbeat.interval.ms", Key(
        "consumer.heartbeat.interval.ms", "int", 5000, lo=1,
        doc="The heartbeat interval given to the members of this consumer group (KIP-848).")),
    "share.session.timeout.ms": ("group.share.session.timeout.ms", Key(
        "share.session.timeout.ms", "int", 45000, lo=1,
        doc="The timeout to detect client failures of this share group.")),
    "share.heartbeat.interval.ms": ("group.share.heartbeat.interval.ms", Key(
        "share.heartbeat.interval.ms", "int", 5000, lo=1,
        doc="The heartbeat interval given to the members of this share group.")),
    "share.record.lock.duration.ms": ("group.share.record.lock.duration.ms", Key(
        "share.record.lock.duration.ms", "int", 30000, lo=1000,
        doc="How long a record handed to a member of this share group stays locked to it.")),
    SHARE_AUTO_OFFSET_RESET: (None, Key(
        SHARE_AUTO_OFFSET_RESET, "string", "latest", validator=_offset_reset,
        doc="The strategy to initialize the share-partition start offset: latest, earliest or "
            "by_duration:<ISO-8601 duration>.")),
}

#: a group key and the broker keys bounding it: (minimum, maximum)
_BOUNDS = {
    "consumer.session.timeout.ms": ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": ("group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
}


def check_broker_group_keys(values: Mapping[str, Any]) -> None:
    """Kafka's GroupCoordinatorConfig and ShareGroupConfig on the broker's own keys: each group
    timing's default within its bounds, and each heartbeat interval below its session timeout."""
    for name, (lo, hi) in _BOUNDS.items():
        key = GROUP_KEYS[name][0]
        assert key is not None
        if values[lo] > values[hi]:
            raise ConfigError(f"Invalid value {values[lo]} for configuration {lo}: must be at most {hi} ({values[hi]})")
        if not values[lo] <= values[key] <= values[hi]:
            raise ConfigError(f"Invalid value {values[key]} for configuration {key}: must be between {lo} "
                              f"({values[lo]}) and {hi} ({values[hi]})")
    for kind in ("consumer", "share"):
        interval, session = f"group.{kind}.heartbeat.interval.ms", f"group.{kind}.session.timeout.ms"
        if values[interval] >= values[session]:
            raise ConfigError(f"Invalid value {values[interval]} for configuration {interval}: must be less than "
                              f"{session} ({values[session]})")


def group_value(broker_values: Mapping[str, Any], overrides: Mapping[str, Any], name: str) -> Any:
    """The value of group key ``name`` for a group with ``overrides``: its own, else the broker's."""
    if name in overrides:
        return overrides[name]
    broker_key, spec = GROUP_KEYS[name]
    return broker_values[broker_key] if broker_key is not None else spec.default


def parse_group_configs(raw: Mapping[str, Any], broker_values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A group's overrides, checked: every name a group key (``Unknown group config name``),
    every value of its type, and, given the broker's values, the timings within the broker's
    bounds and each session timeout above its heartbeat interval, as Kafka's GroupConfig."""
    unknown = [n for n in raw if n not in GROUP_KEYS]
    if unknown:
        raise ConfigError(f"Unknown group config name: {unknown[0]}")
    parsed: dict[str, Any] = {}
    for name, value in raw.items():
        parsed[name] = GROUP_KEYS[name][1].parse(value)
    if broker_values is None:
        return parsed
    for name, (lo_key, hi_key) in _BOUNDS.items():
        value = group_value(broker_values, parsed, name)
        if value < broker_values[lo_key]:
            raise ConfigError(f"{name} must be greater than or equal to {lo_key}")
        if value > broker_values[hi_key]:
            raise ConfigError(f"{name} must be less than or equal to {hi_key}")
    for kind in ("consumer", "share"):
        if group_value(broker_values, parsed, f"{kind}.session.timeout.ms") <= \
                group_value(broker_values, parsed, f"{kind}.heartbeat.interval.ms"):
            raise ConfigError(f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")
    return parsed


__all__ = ["GROUP_KEYS", "check_broker_group_keys", "SHARE_AUTO_OFFSET_RESET", "OffsetReset", "group_value", "parse_group_configs",
           "parse_offset_reset"]
