"""Every group's config overrides, as ZooKeeper holds them (``/config/groups/<group>``).

A broker reads them all when it starts, then each group whose config changed (a
``/config/changes`` notification of entity type ``groups``). The share-partition leader reads
``share.auto.offset.reset`` and ``share.record.lock.duration.ms`` here, the group coordinators
the session timeouts and heartbeat intervals (:mod:`strandline.core.group_keys`). Group ids are
kept sanitized in ZooKeeper as Kafka keeps user and client names (URL-encoded).
"""

from __future__ import annotations

from typing import Any

from strandline.broker.quotas import desanitize, sanitize
from strandline.core.config_key import ConfigError
from strandline.core.effects import Effect, LogLine
from strandline.core.group_keys import SHARE_AUTO_OFFSET_RESET, OffsetReset, group_value, parse_group_configs, \
    parse_offset_reset
from strandline.core.outbox import Outbox
from strandline.coordination import znodes
from strandline.coordination.store import GetChildren, GetData, OpResult, ZkError

ENTITY_TYPE = "groups"
RETRY_MS = 1000


def group_path(group_id: str) -> str:
    return znodes.ConfigEntityZNode.path(ENTITY_TYPE, sanitize(group_id))


class GroupConfigs:
    def __init__(self, config: Any, outbox: Outbox) -> None:
        self.config = config
        self.outbox = outbox
        #: group id -> its overrides, parsed
        self.overrides: dict[str, dict[str, Any]] = {}

    def value(self, group_id: str, name: str) -> Any:
        """Group key ``name`` for the group: its override, else the broker's value."""
        return group_value(self.config, self.overrides.get(group_id, {}), name)

    def offset_reset(self, group_id: str) -> OffsetReset:
        return parse_offset_reset(SHARE_AUTO_OFFSET_RESET, self.value(group_id, SHARE_AUTO_OFFSET_RESET))

    def apply(self, group_id: str, raw: dict[str, str]) -> list[Effect]:
        """Install a group's overrides as stored; what this broker cannot parse is ignored, with a line."""
        try:
            parsed = parse_group_configs(raw)
        except ConfigError as exc:
            return [LogLine("warning", f"Ignoring bad config of group {group_id}: {exc}")]
        if parsed:
            self.overrides[group_id] = parsed
        else:
            self.overrides.pop(group_id, None)
        return []

    # -- reading ZooKeeper

    def load(self, now_ms: int) -> list[Effect]:
        """Read every group's overrides (at start)."""
        def on_children(results: list[OpResult], when_ms: int) -> list[Effect]:
            [listing] = results
            if listing.error is ZkError.NO_NODE:
                return []
            if listing.error is not ZkError.NONE:
                return self._again(self.load, when_ms)
            names = list(listing.children)
            if not names:
                return []

            def on_reads(reads: list[OpResult], at_ms: int) -> list[Effect]:
                effects: list[Effect] = []
                for name, read in zip(names, reads):
                    effects += self._installed(desanitize(name), read, at_ms)
                return effects

            return [self.outbox.zk([GetData(znodes.ConfigEntityZNode.path(ENTITY_TYPE, n)) for n in names], on_reads)]

        return [self.outbox.zk([GetChildren(znodes.ConfigEntityTypeZNode.path(ENTITY_TYPE))], on_children)]

    def reload(self, stored_name: str, now_ms: int) -> list[Effect]:
        """One group's overrides changed (its notification names it as stored: sanitized)."""
        group_id = desanitize(stored_name)

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            return self._installed(group_id, results[0], when_ms)

        return [self.outbox.zk([GetData(group_path(group_id))], on_read)]

    def _installed(self, group_id: str, read: OpResult, now_ms: int) -> list[Effect]:
        if read.error is ZkError.NO_NODE:
            self.overrides.pop(group_id, None)
            return []
        if read.error is not ZkError.NONE:
            return self._again(lambda t: self.reload(sanitize(group_id), t), now_ms)
        try:
            raw = znodes.ConfigEntityZNode.decode(read.data, ENTITY_TYPE, sanitize(group_id))
        except ValueError as exc:
            return [LogLine("warning", f"Ignoring unreadable config of group {group_id}: {exc}")]
        return self.apply(group_id, raw)

    def _again(self, action: Any, now_ms: int) -> list[Effect]:
        return self.outbox.after(now_ms + RETRY_MS, action)
