"""Size-prefixed frames read off a TCP connection, in both directions of the broker's traffic."""

from __future__ import annotations

import asyncio

from strandline.protocol.frames import FrameDecoder, ProtocolError


class FramedProtocol(asyncio.BufferedProtocol):
    """Feeds what arrives to ``decoder``: ``frames_received`` gets the frames each read completes
    (perhaps none); input that is not a valid frame goes to ``malformed`` instead.

    Reads go into one buffer shared by every connection of the loop (the decoder copies what it
    keeps before the next read), except the rest of a large frame, which the socket reads straight
    into the frame's own buffer (``FrameDecoder.pending_buffer``): no copy, no join."""

    decoder: FrameDecoder
    _direct = False

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
        if frames:
            self.frames_received(frames)

    def data_received(self, data: bytes) -> None:
        """The same for bytes handed in whole (a transport that does not read into buffers)."""
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            self.malformed(exc)
            return
        self.frames_received(frames)

    def frames_received(self, frames: list) -> None:
        raise NotImplementedError

    def malformed(self, exc: ProtocolError) -> None:
        raise NotImplementedError


#: Where sockets read (asyncio's own read size); one event loop thread uses it at a time.
_READ_BUFFER = memoryview(bytearray(256 * 1024))
