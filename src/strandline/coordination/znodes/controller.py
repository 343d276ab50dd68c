"""The controller's znodes: ``/controller`` (who holds the office) and ``/controller_epoch``."""

from __future__ import annotations


from strandline.coordination.znode_json import (
    FixedPathZNode as _FixedPathZNode, decode_json as _decode, json_bytes as _json,
    json_int as _int, json_object as _object)


class ControllerZNode(_FixedPathZNode):
    """``/controller``: the ephemeral controller registration, ``{"version":1,"brokerid":N,"timestamp":"<ms>"}``."""

    PATH = "/controller"

    @staticmethod
    def encode(broker_id: int, timestamp_ms: int) -> bytes:
        return _json({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})

    @staticmethod
    def decode(data: bytes | None) -> int:
        """The controller's broker id."""
        return _decode(ControllerZNode.path(), data, lambda obj: _int(_object(obj)["brokerid"]))


class ControllerEpochZNode(_FixedPathZNode):
    """``/controller_epoch``: a plain integer, created as ``0`` so the first controller has epoch 1."""

    PATH = "/controller_epoch"
    INITIAL = 0

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(int(epoch)).encode("ascii")

    @staticmethod
    def decode(data: bytes | None) -> int:
        try:
            text = bytes(data).decode("ascii").strip()  # type: ignore[arg-type]  # None: TypeError, malformed below
            if not text.lstrip("-").isdigit():
                raise ValueError
            return int(text)
        except (ValueError, TypeError):
            raise ValueError(f"malformed data in znode {ControllerEpochZNode.path()}: "
                             f"expected an integer, got {data!r}") from None
