"""Length-prefixed Kafka frames: feed bytes, get whole request frames (sans-IO)."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class ProtocolError(Exception):
    """Malformed, truncated or oversized input: the connection that sent it is closed."""


class FrameDecoder:
    """Splits a byte stream into frames (payloads without their int32 size prefix).

    Partial input is kept as a list of chunks and joined once, when a frame is complete, so a
    100 MB frame arriving in 64 KiB pieces costs one copy, not a quadratic number.
    """

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._need = -1  # size of the frame being assembled, -1 while the prefix is incomplete

    def feed(self, data: bytes) -> list[bytes]:
        if not data:
            return []
        frames: list[bytes] = []
        if self._chunks:
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered < (self._need + 4 if self._need >= 0 else 4):
                return frames
            data = b"".join(self._chunks)
            self._chunks = []
            self._buffered = 0
        pos = 0
        end = len(data)
        while end - pos >= 4:
            size = _SIZE.unpack_from(data, pos)[0]
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise ProtocolError(
                    f"frame size {size} exceeds socket.request.max.bytes {self.max_frame_bytes}")
            if end - pos - 4 < size:
                break
            frames.append(data[pos + 4:pos + 4 + size] if (pos or end != size + 4) else data[4:])
            pos += 4 + size
        if pos < end:
            rest = data[pos:] if pos else data
            self._chunks = [rest]
            self._buffered = len(rest)
            self._need = _SIZE.unpack_from(rest, 0)[0] if len(rest) >= 4 else -1
        else:
            self._need = -1
        return frames

    @property
    def buffered(self) -> int:
        return self._buffered
