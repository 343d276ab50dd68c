"""The cluster-wide znodes: ``/cluster/id``, ``/latest_producer_id_block`` and ``/feature``."""

from __future__ import annotations

from typing import Any

from strandline.coordination.znode_json import (
    FixedPathZNode as _FixedPathZNode, decode_json as _decode, json_bytes as _json, json_int as _int,
    json_object as _object)


class ProducerIdBlockZNode(_FixedPathZNode):
    """``/latest_producer_id_block`` (created empty at startup; its format lives in ``controller.zk_layout``)."""

    PATH = "/latest_producer_id_block"


class ClusterIdZNode(_FixedPathZNode):
    """``/cluster/id``: ``{"version":"1","id":"<base64 uuid>"}`` (the version is a string, as in Kafka)."""

    PATH = "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _json({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes | None) -> str:
        def parse(obj: Any) -> str:
            cluster_id = _object(obj)["id"]
            if not isinstance(cluster_id, str) or not cluster_id:
                raise TypeError(f"id must be a non-empty string, got {cluster_id!r}")
            return cluster_id

        return _decode(ClusterIdZNode.path(), data, parse)


class FeatureZNode(_FixedPathZNode):
    """``/feature``: the cluster's finalized feature levels (KIP-584), Kafka's version 2 layout:
    ``{"version":2,"status":1,"features":{"transaction.version":{"max_version_level":2}}}``. A
    feature at level 0 is absent; status 0 (disabled) finalizes nothing. ``decode`` also reads
    version 1 (each feature with a ``min_version_level`` too) and returns ``{name: level}``."""

    PATH = "/feature"
    VERSION = 2
    ENABLED = 1

    @staticmethod
    def encode(levels: dict[str, int]) -> bytes:
        return _json({"version": FeatureZNode.VERSION, "status": FeatureZNode.ENABLED,
                      "features": {name: {"max_version_level": level}
                                   for name, level in sorted(levels.items()) if level > 0}})

    @staticmethod
    def decode(data: bytes | None) -> dict[str, int]:
        def parse(obj: Any) -> dict[str, int]:
            obj = _object(obj)
            version = _int(obj["version"])
            if version not in (1, 2):
                raise ValueError(f"unsupported version {version}")
            status = _int(obj["status"])
            if status not in (0, 1):
                raise ValueError(f"malformed status {status}")
            features = {str(name): _int(_object(info)["max_version_level"])
                        for name, info in _object(obj["features"]).items()}
            if any(level < 1 for level in features.values()):
                raise ValueError("a finalized level below 1")
            return features if status == FeatureZNode.ENABLED else {}

        return _decode(FeatureZNode.path(), data, parse)
