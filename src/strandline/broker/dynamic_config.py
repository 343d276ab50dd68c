"""Dynamic configuration, ZooKeeper era (Kafka's DynamicConfigManager and DynamicBrokerConfig).

Topic overrides live in ``/config/topics/<t>``, dynamic broker configs in ``/config/brokers/<id>``
(one broker) and ``/config/brokers/<default>`` (every broker). A change writes the entity and a
sequential notification ``/config/changes/config_change_<n>``
(``{"version":2,"entity_path":"topics/t"}``) in one ZooKeeper transaction. Every broker watches
``/config/changes``, reads each notification newer than the last it processed, and applies the
entity's current config at once: a topic's to its logs and to the controller, a broker's to the
effective broker configuration (per-broker over cluster default over ``server.properties`` over
Kafka's defaults). Notifications older than 15 minutes are deleted by whichever broker reads them.

This module also describes configs as Kafka's DescribeConfigs does: each value with its source
and, on request, its synonyms in precedence order.
"""

from __future__ import annotations

import enum
from typing import Any, Callable

from strandline.core.config import BROKER_KEYS, DYNAMIC_BROKER_KEYS, BrokerConfig, broker_synonyms, config_text
from strandline.core.config_key import ConfigError, Key
from strandline.core.group_keys import GROUP_KEYS, group_value
from strandline.core.topic_keys import TOPIC_KEYS, parse_topic_configs
from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.coordination import znodes
from strandline.coordination.metadata import MetadataCache
from strandline.coordination.store import Delete, GetData, OpResult, ZkError

DEFAULT_ENTITY = "<default>"
#: Kafka's ``changeExpirationMs`` for config change notifications.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
RETRY_MS = 1000                 # read again after ZooKeeper failed to answer
_NOTIFICATION = znodes.ConfigEntityChangeNotificationSequenceZNode


#: dynamic only per broker id, never as the cluster-wide default (Kafka's PerBrokerConfigs)
PER_BROKER_KEYS: frozenset[str] = frozenset({"advertised.listeners"})


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source`` (KIP-226)."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


_DEFAULTS: dict[str, str] = {k: t for k, spec in BROKER_KEYS.items() if (t := config_text(spec.default)) is not None}


def _known(props: dict[str, str]) -> dict[str, str]:
    """The broker keys of ``props``; the others are custom entries, which Kafka accepts in a
    dynamic broker config (``customPropsAllowed``), stores and leaves unused."""
    return {k: v for k, v in props.items() if k in BROKER_KEYS}


def _custom(props: dict[str, str]) -> dict[str, str]:
    """The custom entries of ``props``: kept in the dynamic layers for DescribeConfigs."""
    return {k: v for k, v in props.items() if k not in BROKER_KEYS}


def validate_broker_update(config: BrokerConfig, props: dict[str, str], per_broker: bool) -> None:
    """Refuse (ConfigError, one line) a dynamic broker config that Kafka would refuse: a read-only
    key, a bad value, or a combination the broker could not start with. Keys that are no broker
    config at all pass, as custom entries."""
    props = _known(props)
    fixed = sorted(k for k in props if k not in DYNAMIC_BROKER_KEYS)
    if fixed:
        raise ConfigError(f"Cannot update these configs dynamically: {', '.join(fixed)}")
    own = sorted(k for k in props if k in PER_BROKER_KEYS)
    if own and not per_broker:
        raise ConfigError(f"Cannot update these configs at default cluster level, broker id must be specified: "
                          f"{', '.join(own)}")
    for key, raw in props.items():
        BROKER_KEYS[key].parse(raw)
    default = props if not per_broker else _known(config.dynamic_default)
    broker = props if per_broker else _known(config.dynamic_broker)
    BrokerConfig.from_properties({**config.originals, **default, **broker}, require_zookeeper=False)


def apply_dynamic_broker_configs(config: BrokerConfig, default: dict[str, str], broker: dict[str, str]
                                 ) -> tuple[set[str], list[str]]:
    """Make ``default`` (``/config/brokers/<default>``) and ``broker`` (``/config/brokers/<id>``)
    the dynamic layers of ``config`` and recompute its effective values in place. Entries a broker
    cannot take (written by another tool) are skipped; custom entries are kept in the layers, unused.
    Returns the keys whose effective value changed and one warning per skipped entry."""
    warnings: list[str] = []

    def usable(layer: dict[str, str], where: str, per_broker: bool) -> dict[str, str]:
        kept = {}
        for key, raw in _known(layer).items():
            try:
                validate_broker_update(config, {key: raw}, per_broker)
            except ConfigError as exc:
                warnings.append(f"Ignoring dynamic broker config {key} in {where}: {exc}")
                continue
            kept[key] = raw
        return kept

    custom = (_custom(default), _custom(broker))
    default, broker = usable(default, DEFAULT_ENTITY, False), usable(broker, "this broker's entry", True)
    try:
        fresh = BrokerConfig.from_properties({**config.originals, **default, **broker}, require_zookeeper=False)
    except ConfigError as exc:
        return set(), [f"Ignoring dynamic broker configs {default} {broker}: {exc}"]
    config.dynamic_default.clear()
    config.dynamic_default.update({**default, **custom[0]})
    config.dynamic_broker.clear()
    config.dynamic_broker.update({**broker, **custom[1]})
    changed = {k for k, v in fresh.values.items() if config.values.get(k) != v}
    for key in changed:
        config.values[key] = fresh.values[key]
    return changed, warnings


# -- describing -----------------------------------------------------------------------------------

def _synonyms(config: BrokerConfig, name: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Kafka's configSynonyms: each of ``names`` set in a layer, layers in precedence order,
    from ``name`` on."""
    found = []
    for layer, source in ((config.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                          (config.originals, ConfigSource.STATIC_BROKER_CONFIG),
                          (_DEFAULTS, ConfigSource.DEFAULT_CONFIG)):
        for synonym in names:
            if synonym in layer:
                found.append({"name": synonym, "value": layer[synonym], "source": int(source)})
    while found and found[0]["name"] != name:
        found.pop(0)
    return found


def _entry(name: str, value: str | None, synonyms: list[dict[str, Any]], read_only: bool, type_id: int, doc: str,
           include_synonyms: bool, include_docs: bool, sensitive: bool = False) -> dict[str, Any]:
    if sensitive:                       # a password: no value anywhere, as Kafka
        value = None
        synonyms = [{**s, "value": None} for s in synonyms]
    source = synonyms[0]["source"] if synonyms else int(ConfigSource.DEFAULT_CONFIG)
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == ConfigSource.DEFAULT_CONFIG, "is_sensitive": sensitive,
            "synonyms": synonyms if include_synonyms else [], "config_type": type_id,
            "documentation": (doc or None) if include_docs else None}


def _wanted(keys: Any, names: list[str]) -> list[str]:
    return names if keys is None else [n for n in names if n in set(keys)]


def _describe_overridable(config: BrokerConfig, table: dict[str, tuple[str | None, Key]], overrides: dict[str, Any],
                          value_of: Callable[[str], Any], source: ConfigSource, keys: Any, include_synonyms: bool,
                          include_docs: bool) -> list[dict[str, Any]]:
    """Every key of ``table`` (key -> the broker key it falls back to, its Key): its override
    (``source``) or the broker value it falls back to, with its synonyms."""
    entries = []
    for name in _wanted(keys, list(table)):
        broker_key, spec = table[name]
        synonyms = _synonyms(config, broker_key, broker_synonyms(broker_key)) if broker_key else []
        if name in overrides:
            synonyms.insert(0, {"name": name, "value": config_text(overrides[name]), "source": int(source)})
        value = config_text(value_of(name))
        entries.append(_entry(name, value, synonyms, False, spec.type_id, spec.doc, include_synonyms, include_docs))
    return entries


def describe_topic(config: BrokerConfig, overrides: dict[str, Any], keys: Any, include_synonyms: bool,
                   include_docs: bool) -> list[dict[str, Any]]:
    """A topic's configs: every topic key, its override or the broker value it falls back to."""
    return _describe_overridable(config, TOPIC_KEYS, overrides, lambda name: config.topic_value(overrides, name),
                                 ConfigSource.TOPIC_CONFIG, keys, include_synonyms, include_docs)


def describe_group(config: BrokerConfig, overrides: dict[str, Any], keys: Any, include_synonyms: bool,
                   include_docs: bool) -> list[dict[str, Any]]:
    """A group's configs: every group key, its override or the broker value it falls back to."""
    return _describe_overridable(config, GROUP_KEYS, overrides, lambda name: group_value(config.values, overrides, name),
                                 ConfigSource.GROUP_CONFIG, keys, include_synonyms, include_docs)


def describe_broker(config: BrokerConfig, per_broker: bool, keys: Any, include_synonyms: bool,
                    include_docs: bool) -> list[dict[str, Any]]:
    """This broker's configs (``per_broker``), or the cluster-wide dynamic defaults. A custom
    entry is described as Kafka describes a key it has no type for: sensitive (no value), read-only,
    type UNKNOWN."""
    entries = []
    layers = (config.dynamic_broker, config.dynamic_default) if per_broker else (config.dynamic_default,)
    custom = [n for n in dict.fromkeys(k for layer in layers for k in layer) if n not in BROKER_KEYS]
    names = list(BROKER_KEYS) + custom if per_broker else list(config.dynamic_default)
    for name in _wanted(keys, names):
        spec = BROKER_KEYS.get(name)
        if spec is None:
            synonyms = [{"name": name, "value": None, "source": int(source)} for layer, source in (
                (config.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                (config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
                if any(layer is shown for shown in layers) and name in layer]
            entries.append(_entry(name, None, synonyms, True, 0, "", include_synonyms, include_docs, sensitive=True))
            continue
        synonyms = _synonyms(config, name, broker_synonyms(name))
        if per_broker:
            value = config_text(config.values.get(name))
        else:
            synonyms = [s for s in synonyms if s["source"] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            value = config.dynamic_default[name]
        entries.append(_entry(name, value, synonyms, name not in DYNAMIC_BROKER_KEYS, spec.type_id, spec.doc,
                              include_synonyms, include_docs, sensitive=spec.sensitive))
    return entries


# -- applying changes -----------------------------------------------------------------------------

TopicConfigListener = Callable[[str, dict[str, Any], int], list[Effect]]
BrokerConfigListener = Callable[[set[str], int], list[Effect]]


class DynamicConfigManager:
    """Follows ``/config/changes`` and applies each changed entity's config."""

    def __init__(self, config: BrokerConfig, metadata: MetadataCache, outbox: Outbox,
                 on_topic_config: TopicConfigListener, on_broker_config: BrokerConfigListener,
                 on_quota_entity: Callable[[str, str, int], list[Effect]] | None = None,
                 on_group_entity: Callable[[str, int], list[Effect]] | None = None) -> None:
        self.config = config
        self.on_quota_entity = on_quota_entity
        self.on_group_entity = on_group_entity
        self.metadata = metadata
        self.outbox = outbox
        self.on_topic_config = on_topic_config
        self.on_broker_config = on_broker_config
        self.last_seen = -1          # the newest notification processed

    def on_config_changes(self, children: list[str], now_ms: int) -> list[Effect]:
        """The children of ``/config/changes`` (the shell's watch): process the new ones."""
        new = sorted((seq, child) for child in children
                     if (seq := _NOTIFICATION.sequence(child)) is not None and seq > self.last_seen)
        if not new:
            return []
        self.last_seen = new[-1][0]

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            effects: list[Effect] = []
            entities: dict[tuple[str, str], None] = {}
            expired = []
            unread = []
            for (seq, child), result in zip(new, results):
                if result.error is ZkError.NO_NODE:
                    continue
                if result.error is not ZkError.NONE:
                    # read again shortly, as Kafka's ZooKeeper client resends a request
                    self.last_seen = min(self.last_seen, seq - 1)
                    unread.append(child)
                    continue
                try:
                    entities[_NOTIFICATION.decode(result.data, child)] = None
                except ValueError as exc:
                    effects.append(LogLine("warning", f"Ignoring config change notification {child}: {exc}"))
                if result.ctime_ms and when_ms - result.ctime_ms > CHANGE_EXPIRATION_MS:
                    expired.append(Delete(_NOTIFICATION.path(child)))
            if expired:
                effects.append(self.outbox.zk(expired, lambda results, t: []))
            for entity_type, name in entities:
                effects.extend(self.reload(entity_type, name, when_ms))
            if unread:          # every child again: those above the lowered last seen are read once more
                effects.extend(self.outbox.after(when_ms + RETRY_MS, lambda t: self.on_config_changes(children, t)))
            return effects

        return [self.outbox.zk([GetData(_NOTIFICATION.path(child)) for _, child in new], on_read)]

    def reload(self, entity_type: str, name: str, now_ms: int) -> list[Effect]:
        """Read one entity's config from ZooKeeper and apply it, if it concerns this broker."""
        if entity_type == "topics":
            if name not in self.metadata.topics:
                return []            # a topic learnt later is read with its config

            def on_topic(results: list[OpResult], when_ms: int) -> list[Effect]:
                [result] = results
                if name not in self.metadata.topics:
                    return []
                if result.error not in (ZkError.NONE, ZkError.NO_NODE):      # no answer: read it again
                    return self.outbox.after(when_ms + RETRY_MS, lambda t: self.reload(entity_type, name, t))
                try:
                    configs = parse_topic_configs(znodes.ConfigEntityZNode.decode(result.data, "topics", name))
                except (ConfigError, ValueError) as exc:
                    return [LogLine("warning", f"Ignoring bad config of topic {name}: {exc}")]
                return self.on_topic_config(name, configs, when_ms)

            return [self.outbox.zk([GetData(znodes.ConfigEntityZNode.path("topics", name))], on_topic)]
        if entity_type == "brokers" and name in (DEFAULT_ENTITY, str(self.config.broker_id)):
            return self.reload_broker(now_ms)
        if entity_type in ("users", "clients") and self.on_quota_entity is not None:
            return self.on_quota_entity(entity_type, name, now_ms)   # client quotas
        if entity_type == "groups" and self.on_group_entity is not None:
            return self.on_group_entity(name, now_ms)                  # group configs (KIP-848, KIP-932)
        return []

    def reload_broker(self, now_ms: int) -> list[Effect]:
        ops = [GetData(znodes.ConfigEntityZNode.path("brokers", DEFAULT_ENTITY)),
               GetData(znodes.ConfigEntityZNode.path("brokers", self.config.broker_id))]

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            if any(r.error not in (ZkError.NONE, ZkError.NO_NODE) for r in results):
                return [LogLine("warning", "Could not read the dynamic broker configs from ZooKeeper "
                                       f"({', '.join(r.error.name for r in results)}); trying again")] + \
                    self.outbox.after(when_ms + RETRY_MS, self.reload_broker)
            layers = []
            entities: tuple[str | int, ...] = (DEFAULT_ENTITY, self.config.broker_id)
            for result, who in zip(results, entities):
                try:
                    layers.append(znodes.ConfigEntityZNode.decode(result.data, "brokers", who)
                                  if result.error is ZkError.NONE else {})
                except ValueError as exc:
                    return [LogLine("warning", f"Ignoring dynamic broker configs: {exc}")]
            changed, warnings = apply_dynamic_broker_configs(self.config, layers[0], layers[1])
            effects: list[Effect] = [LogLine("warning", w) for w in warnings]
            if changed:
                effects.append(LogLine("info", "Dynamic broker configs now in effect: "
                                           + ", ".join(f"{k}={config_text(self.config.values[k])}"
                                                       for k in sorted(changed))))
                effects.extend(self.on_broker_config(changed, when_ms))
            return effects

        return [self.outbox.zk(ops, on_read)]
