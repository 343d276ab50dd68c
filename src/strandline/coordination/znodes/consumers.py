"""``/consumers``: the offsets OffsetCommit v0 stores in ZooKeeper."""

from __future__ import annotations




class ConsumerOffsetZNode:
    """``/consumers/<group>/offsets/<topic>/<partition>``: an offset committed with OffsetCommit v0,
    read by OffsetFetch v0 (Kafka's ``ConsumerOffset``), the offset in decimal ASCII."""

    @staticmethod
    def path(group: str, topic: str, partition: int) -> str:
        return f"/consumers/{group}/offsets/{topic}/{partition}"

    @staticmethod
    def encode(offset: int) -> bytes:
        return str(offset).encode()

    @staticmethod
    def decode(data: bytes | None, path: str = "/consumers/<group>/offsets/<topic>/<partition>") -> int:
        try:
            return int((data or b"").decode())
        except (UnicodeDecodeError, ValueError):
            raise ValueError(f"{path}: not an offset: {data!r}") from None
