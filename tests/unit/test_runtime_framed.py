"""FramedProtocol on a real loopback connection: frames of every size, large ones read straight
into their own buffer, arrive whole and in order however the sender splits them."""

from __future__ import annotations

import asyncio
import random
import socket
import struct

from strandline.protocol.frames import LARGE_FRAME_BYTES, FrameDecoder, ProtocolError
from strandline.runtime.framed import FramedProtocol


class Collector(FramedProtocol):
    def __init__(self, done: asyncio.Future, want: int) -> None:
        self.decoder = FrameDecoder(1 << 24)
        self.frames: list = []
        self.done, self.want = done, want

    def frames_received(self, frames: list) -> None:
        self.frames += frames
        if len(self.frames) >= self.want and not self.done.done():
            self.done.set_result(None)

    def malformed(self, exc: ProtocolError) -> None:
        self.done.set_exception(exc)


def test_frames_of_every_size_arrive_whole_over_a_real_socket():
    rng = random.Random(7)
    payloads = [bytes([i % 256]) * rng.choice((0, 1, 100, 5000, LARGE_FRAME_BYTES - 1, LARGE_FRAME_BYTES,
                                                 300_000, 2_000_000)) for i in range(40)]
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)

    async def run() -> list:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        server_sock, client_sock = socket.socketpair()
        transport, protocol = await loop.connect_accepted_socket(lambda: Collector(done, len(payloads)), server_sock)
        client_sock.setblocking(False)
        pos = 0
        while pos < len(stream):
            size = rng.choice((1, 3, 4096, 70_000, 1 << 20))
            await loop.sock_sendall(client_sock, stream[pos:pos + size])
            pos += size
        await asyncio.wait_for(done, 10)
        transport.close()
        client_sock.close()
        return protocol.frames

    frames = asyncio.run(run())
    assert [bytes(f) for f in frames] == payloads
    assert any(type(f) is bytearray for f in frames)
