"""The cluster-wide znodes: ``/cluster/id`` and ``/latest_producer_id_block``."""

from __future__ import annotations

from typing import Any

from strandline.coordination.znode_json import (
    FixedPathZNode as _FixedPathZNode, decode_json as _decode, json_bytes as _json,
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
