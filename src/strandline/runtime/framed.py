"""Size-prefixed frames read off a TCP connection, in both directions of the broker's traffic."""

from __future__ import annotations

import asyncio
import socket
from typing import Sequence

from strandline.protocol.frames import FrameDecoder, ProtocolError


class FramedProtocol(asyncio.BufferedProtocol):
    """Feeds what arrives to ``decoder``: ``frames_received`` gets the frames each read completes
    (perhaps none); input that is not a valid frame goes to ``malformed`` instead.

    Reads go into one buffer shared by every connection of the loop (the decoder copies what it
    keeps before the next read), except the rest of a large frame, which the socket reads straight
    into the frame's own buffer (``FrameDecoder.pending_buffer``): no copy, no join.

    While such a rest (of at least ``MIN_RCVLOWAT``) is awaited, the socket's ``SO_RCVLOWAT`` is
    that rest (at most ``MAX_RCVLOWAT``), so the loop is woken once when it has all arrived, not
    for every piece the peer's writes deliver (a megabyte Fetch answer otherwise takes 6-7
    wake-ups, each an ``epoll_wait``, a ``recv`` and the loop's Python). The kernel (Linux 4.18
    on) grows the receive buffer to fit, and still wakes the reader when its receive window is
    full or the peer closes (kernels without the 2020 fixes "tcp: fix SO_RCVLOWAT hangs with fat
    skbs" and "tcp: fix SO_RCVLOWAT possible hangs under high mem pressure" could miss that)."""

    decoder: FrameDecoder
    transport: asyncio.BaseTransport | None = None
    _direct = False
    _lowat = 1                      # the SO_RCVLOWAT this protocol last set on its socket

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self.decoder.pending_buffer()
        if view is not None:
            self._direct = True
            return view
        self._direct = False
        return _READ_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.decoder.filled(nbytes) if self._direct else self.decoder.feed(_READ_BUFFER[:nbytes])
        except ProtocolError as exc:
            self.malformed(exc)
            return
        rest = self.decoder.pending_bytes()
        want = min(rest, MAX_RCVLOWAT) if rest >= MIN_RCVLOWAT else 1
        if want != self._lowat and (self._lowat == 1 or want < self._lowat):
            self._set_lowat(want)
        if frames:
            self.frames_received(frames)

    def _set_lowat(self, nbytes: int) -> None:
        """Raised only from 1 (a large frame begins), lowered whenever the rest is smaller than
        it: never above what is still to come, which could leave the frame waiting for bytes
        that are not sent."""
        transport = self.transport
        if transport is None:
            return
        sock = transport.get_extra_info("socket")
        if sock is None or transport.is_closing() or transport.get_extra_info("ssl_object") is not None:
            # (over TLS the socket's bytes are records, not the frame's: left to the TLS layer)
            return
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, nbytes)
        except OSError:
            return                  # a socket being torn down; the next read finds out
        self._lowat = nbytes

    def data_received(self, data: bytes) -> None:
        """The same for bytes handed in whole (a transport that does not read into buffers)."""
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            self.malformed(exc)
            return
        self.frames_received(frames)

    def frames_received(self, frames: Sequence[bytes | bytearray]) -> None:
        raise NotImplementedError

    def malformed(self, exc: ProtocolError) -> None:
        raise NotImplementedError


#: The most a socket is asked to gather before it wakes the loop (its receive buffer grows to it),
#: and the least rest of a frame worth two setsockopt calls.
MAX_RCVLOWAT = 1 << 20
MIN_RCVLOWAT = 64 * 1024

#: Where sockets read (asyncio's own read size); one event loop thread uses it at a time.
_READ_BUFFER = memoryview(bytearray(256 * 1024))
