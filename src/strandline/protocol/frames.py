"""Length-prefixed Kafka frames: feed bytes, get whole request frames (sans-IO).

Every Kafka request and response travels as ``int32 size`` followed by ``size`` bytes. The
decoder turns an arbitrary sequence of byte chunks (as a socket delivers them) into those
payloads. It never does I/O and never looks inside a payload.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")

#: A spanning frame at least this large is assembled in place (see :class:`FrameDecoder`).
LARGE_FRAME_BYTES = 64 * 1024
#: ... and at most this large: the buffer is allocated whole when the size prefix arrives (as
#: Kafka's NetworkReceive does), so a larger one is collected as it comes, bounding what a peer
#: that announces a frame and sends nothing more makes the broker hold.
IN_PLACE_MAX_BYTES = 16 * 1024 * 1024


class ProtocolError(Exception):
    """Malformed, truncated or oversized input: the connection that sent it is closed."""


class FrameDecoder:
    """Splits a byte stream into frames (payloads without their int32 size prefix).

    A frame that lies wholly inside one ``feed`` chunk is sliced out directly. A frame that
    spans chunks is collected as a list of pieces and joined once, when its last byte arrives,
    so a 100 MB frame arriving in 64 KiB pieces costs one copy, not a quadratic number. Pieces
    of ``bytes`` input are kept by reference; other buffers (``bytearray``, ``memoryview``)
    are copied when kept, because the caller may reuse them.

    A frame of ``LARGE_FRAME_BYTES`` to ``IN_PLACE_MAX_BYTES`` that spans chunks is assembled in
    a ``bytearray`` of its size instead, and :meth:`pending_buffer` offers its unfilled rest, so
    that a socket can read the rest straight into it (:meth:`filled` then counts what arrived):
    such a frame is handed out as that ``bytearray``, never copied.

    A negative size, or one above ``max_frame_bytes`` (``socket.request.max.bytes``), raises
    :class:`ProtocolError` as soon as its four bytes are seen; the decoder is then unusable and
    the connection must be closed (as Kafka does).
    """

    __slots__ = ("max_frame_bytes", "_prefix", "_parts", "_have", "_need", "_frame")

    def __init__(self, max_frame_bytes: int = 104857600) -> None:
        if max_frame_bytes < 0:
            raise ValueError(f"max_frame_bytes must be >= 0, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._prefix = b""           # 0-3 bytes of a size prefix not yet complete
        self._parts: list[bytes] = []  # pieces of the payload being assembled
        self._have = 0               # bytes in _parts
        self._need = -1              # payload size being assembled, -1 while reading a prefix
        self._frame: bytearray | None = None   # a large payload being assembled in place

    @property
    def buffered(self) -> int:
        """Bytes held back, waiting for the rest of their frame."""
        return len(self._prefix) + self._have + (4 if self._need >= 0 else 0)

    def _check(self, size: int) -> int:
        if size < 0:
            raise ProtocolError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise ProtocolError(
                f"frame size {size} exceeds socket.request.max.bytes {self.max_frame_bytes}")
        return size

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | bytearray]:
        """Consume ``data``; return the frames it completes, in order (possibly none)."""
        end = len(data)
        if not end:
            return []
        frames: list[bytes | bytearray] = []
        owned = type(data) is bytes     # bytes may be kept by reference; others are copied
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
            end = len(view)
        pos = 0
        while True:
            if self._need < 0:
                # -- reading a size prefix
                avail = end - pos
                if self._prefix:
                    missing = 4 - len(self._prefix)
                    if avail < missing:
                        self._prefix += bytes(view[pos:end])
                        return frames
                    size = _SIZE.unpack(self._prefix + bytes(view[pos:pos + missing]))[0]
                    self._prefix = b""
                    pos += missing
                else:
                    if avail < 4:
                        if avail:
                            self._prefix = bytes(view[pos:end])
                        return frames
                    size = _SIZE.unpack_from(view, pos)[0]
                    pos += 4
                self._check(size)
                if end - pos >= size:
                    # the whole payload is in this chunk
                    if owned and pos == 4 and size == end - 4:
                        frames.append(data[4:])  # type: ignore[arg-type]  # owned: data is bytes
                    else:
                        frames.append(bytes(view[pos:pos + size]))
                    pos += size
                    continue
                self._need = size
                if LARGE_FRAME_BYTES <= size <= IN_PLACE_MAX_BYTES:
                    self._frame = bytearray(size)
            # -- assembling a payload that spans chunks
            take = min(self._need - self._have, end - pos)
            if take:
                if self._frame is not None:
                    self._frame[self._have:self._have + take] = view[pos:pos + take]
                elif owned and pos == 0 and take == end:
                    self._parts.append(data)  # type: ignore[arg-type]  # owned: data is bytes
                else:
                    self._parts.append(bytes(view[pos:pos + take]))
                self._have += take
                pos += take
            if self._have < self._need:
                return frames
            if self._frame is not None:
                frames.append(self._frame)
                self._frame = None
            else:
                parts = self._parts
                frames.append(parts[0] if len(parts) == 1 else b"".join(parts))
            self._parts = []
            self._have = 0
            self._need = -1
            if pos == end:
                return frames

    def pending_buffer(self) -> memoryview | None:
        """The unfilled rest of a large frame being assembled in place, for a socket to read into
        directly (then call :meth:`filled`); None when no such frame is under way."""
        if self._frame is None:
            return None
        return memoryview(self._frame)[self._have:]

    def pending_bytes(self) -> int:
        """How much of a large frame being assembled in place is still to come (0: none is)."""
        return self._need - self._have if self._frame is not None else 0

    def filled(self, nbytes: int) -> list[bytearray]:
        """``nbytes`` were written into the buffer :meth:`pending_buffer` gave: the frame, as a
        ``bytearray``, once it is whole (else nothing yet)."""
        if self._frame is None or nbytes < 0 or self._have + nbytes > self._need:
            raise ValueError(f"{nbytes} bytes filled into no pending frame, or past its end")
        self._have += nbytes
        if self._have < self._need:
            return []
        frame = self._frame
        self._frame = None
        self._have = 0
        self._need = -1
        return [frame]
