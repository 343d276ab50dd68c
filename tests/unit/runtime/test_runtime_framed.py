"""FramedProtocol on a real loopback connection: frames of every size, large ones read straight
into their own buffer, arrive whole and in order however the sender splits them."""

from __future__ import annotations

import asyncio
import random
import socket
import struct

from strandline.protocol.frames import LARGE_FRAME_BYTES, FrameDecoder, ProtocolError
from strandline.runtime.framed import MAX_RCVLOWAT, FramedProtocol


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


class Counting(Collector):
    """A Collector on a TCP socket, counting the reads the loop hands it and the low-water marks
    it sets."""

    reads = 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.lowats: list[int] = []

    def buffer_updated(self, nbytes: int) -> None:
        self.reads += 1
        super().buffer_updated(nbytes)

    def _set_lowat(self, nbytes: int) -> None:
        self.lowats.append(nbytes)
        super()._set_lowat(nbytes)


def deliver(pieces: list[bytes], want: int, pause_s: float, every: int = 1) -> "Counting":
    """Send ``pieces`` over a real loopback TCP connection to a :class:`Counting` protocol, pausing
    ``pause_s`` after every ``every``-th one; returns the protocol once ``want`` frames arrived.
    Before each piece its ``snapshots`` get the reads so far and the socket's SO_RCVLOWAT."""

    async def run() -> Counting:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        listener.close()
        client.setblocking(False)
        transport, protocol = await loop.connect_accepted_socket(lambda: Counting(done, want), accepted)
        sock = transport.get_extra_info("socket")
        protocol.snapshots = []
        for i, piece in enumerate(pieces):
            protocol.snapshots.append((protocol.reads, sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)))
            await loop.sock_sendall(client, piece)
            if i % every == 0:
                await asyncio.sleep(pause_s)
        await asyncio.wait_for(done, 5)
        transport.close()
        client.close()
        return protocol

    return asyncio.run(run())


def test_the_rest_of_a_large_frame_is_read_in_one_wake_up_however_it_is_sent():
    """A 900 KB frame sent in 16 pieces a few milliseconds apart reaches the protocol in a couple of
    reads, not one per piece (SO_RCVLOWAT is the rest of the frame), and the socket's SO_RCVLOWAT
    is back to 1 once the frame is whole, so the next small frame is read at once."""
    payload = bytes(range(256)) * 3600                        # 921,600 bytes
    stream = struct.pack(">i", len(payload)) + payload
    piece = len(stream) // 16 + 1
    pieces = [stream[pos:pos + piece] for pos in range(0, len(stream), piece)]
    protocol = deliver(pieces + [struct.pack(">i", 5) + b"small"], 2, 0.005)
    reads, lowat_after = protocol.snapshots[-1]               # before the small frame was sent
    assert [bytes(f) for f in protocol.frames] == [payload, b"small"]
    assert reads <= 3, f"{reads} reads for one frame sent in 16 pieces"
    assert lowat_after == 1
    assert len(protocol.lowats) == 2 and protocol.lowats[-1] == 1     # set once, reset once


def test_small_frames_cost_no_setsockopt():
    """The low-water mark stays 1 for frames too small to gain from it: no system call per read."""
    payloads = [bytes([i]) * size for i, size in enumerate((5, 100, 5000, 60_000) * 25)]
    protocol = deliver([struct.pack(">i", len(p)) + p for p in payloads], len(payloads), 0.002, every=10)
    assert [bytes(f) for f in protocol.frames] == payloads
    assert protocol.reads >= 10 and protocol.lowats == []


def test_a_frame_larger_than_the_low_water_mark_and_a_sender_that_stalls_mid_frame_arrive_whole():
    """A 3 MiB frame (over MAX_RCVLOWAT) whose sender stops for 200 ms a few bytes short of a low
    water mark and of the frame's end: nothing waits for bytes that are not coming."""
    payload = bytes(range(251)) * 12533                       # 3,145,783 bytes
    stream = struct.pack(">i", len(payload)) + payload + struct.pack(">i", 2) + b"ok"
    cuts = [0, 70_000, MAX_RCVLOWAT + 60_000, len(payload) - 10, len(stream)]
    protocol = deliver([stream[a:b] for a, b in zip(cuts, cuts[1:])], 2, 0.2)
    assert [bytes(f) for f in protocol.frames] == [payload, b"ok"]
