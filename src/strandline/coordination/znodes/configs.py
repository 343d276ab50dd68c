"""The config znodes: ``/config/<entity type>/<name>`` (dynamic configs of topics, brokers,
clients, users and groups) and the change notifications under ``/config/changes``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from strandline.coordination.znode_json import (
    FixedPathZNode as _FixedPathZNode, decode_json as _decode, json_bytes as _json,
    SequentialZNode as _SequentialZNode, json_object as _object)


class ConfigEntityTypeZNode:
    """``/config/<entity type>``: ``topics``, ``clients``, ``users``, ``brokers``, ``groups``."""

    TYPES = ("topics", "clients", "users", "brokers", "groups")

    @staticmethod
    def path(entity_type: str) -> str:
        return f"/config/{entity_type}"


class ConfigEntityZNode:
    """``/config/topics/<t>`` and ``/config/brokers/<id>``: ``{"version":1,"config":{"k":"v",...}}``.

    Values are strings, as in Kafka's ``Properties``; ``encode`` writes booleans as ``true``/``false``.
    """

    @staticmethod
    def path(entity_type: str, name: str | int) -> str:
        return f"{ConfigEntityTypeZNode.path(entity_type)}/{name}"

    @staticmethod
    def encode(config: Mapping[str, Any]) -> bytes:
        def text(v: Any) -> str:
            return str(v).lower() if isinstance(v, bool) else str(v)

        return _json({"version": 1, "config": {str(k): text(v) for k, v in sorted(config.items())}})

    @staticmethod
    def decode(data: bytes | None, entity_type: str = "<type>", name: str | int = "<name>") -> dict[str, str]:
        """An empty or missing node is an empty config, as in Kafka."""
        if not data:
            return {}

        def parse(obj: Any) -> dict[str, str]:
            config = _object(_object(obj).get("config") or {})
            return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}

        return _decode(ConfigEntityZNode.path(entity_type, name), data, parse)


class ConfigEntityChangeNotificationZNode(_FixedPathZNode):
    """``/config/changes``: Kafka's dynamic-config change notifications (created at startup)."""

    PATH = "/config/changes"


class ConfigEntityChangeNotificationSequenceZNode(_SequentialZNode):
    """``/config/changes/config_change_<10 digits>``: ``{"version":2,"entity_path":"topics/t"}``
    (a sequential node; ``entity_path`` is ``<entity type>/<name>``, e.g. ``brokers/<default>``)."""

    PREFIX = "config_change_"

    @staticmethod
    def create_path() -> str:
        return f"{ConfigEntityChangeNotificationZNode.path()}/{ConfigEntityChangeNotificationSequenceZNode.PREFIX}"

    @staticmethod
    def path(child: str) -> str:
        return f"{ConfigEntityChangeNotificationZNode.path()}/{child}"

    @staticmethod
    def encode(entity_type: str, name: str | int) -> bytes:
        return _json({"version": 2, "entity_path": f"{entity_type}/{name}"})

    @staticmethod
    def decode(data: bytes | None, child: str = "<child>") -> tuple[str, str]:
        """(entity type, name); version 1 (``entity_type`` and ``entity_name``) is read too."""
        def parse(obj: Any) -> tuple[str, str]:
            obj = _object(obj)
            if "entity_path" in obj:
                entity_type, sep, name = str(obj["entity_path"]).partition("/")
                if not sep or not name:
                    raise ValueError(f"entity_path {obj['entity_path']!r} is not <type>/<name>")
                return entity_type, name
            return str(obj["entity_type"]), str(obj["entity_name"])

        return _decode(ConfigEntityChangeNotificationSequenceZNode.path(child), data, parse)
