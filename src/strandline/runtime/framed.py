"""Size-prefixed frames read off a TCP connection, in both directions of the broker's traffic."""

from __future__ import annotations

import asyncio

from strandline.protocol.frames import FrameDecoder, ProtocolError


class FramedProtocol(asyncio.Protocol):
    """Feeds what arrives to ``decoder``: ``frames_received`` gets the frames each read completes
    (perhaps none); input that is not a valid frame goes to ``malformed`` instead."""

    decoder: FrameDecoder

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            self.malformed(exc)
            return
        self.frames_received(frames)

    def frames_received(self, frames: list[bytes]) -> None:
        raise NotImplementedError

    def malformed(self, exc: ProtocolError) -> None:
        raise NotImplementedError
