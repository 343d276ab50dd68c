"""Size-prefixed frames read off a TCP connection, in both directions of the broker's traffic."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading

from strandline.protocol.frames import FrameDecoder, ProtocolError


class FramedProtocol(asyncio.BufferedProtocol):
    """Feeds what arrives to ``decoder``: ``frames_received`` gets the frames each read completes
    (perhaps none); input that is not a valid frame goes to ``malformed`` instead.

    A read that begins a frame goes into a free buffer of the thread's :class:`FrameBuffers`: a
    large frame that starts there stays there (``FrameDecoder.feed_buffer``), and the rest of it is
    read straight after it (``FrameDecoder.pending_buffer``): no copy, no join, and no buffer of its
    own to allocate and zero. Other reads go into one buffer shared by every connection of the loop
    (the decoder copies what it keeps before the next read).

    While such a rest (of at least ``MIN_RCVLOWAT``) is awaited, the socket's ``SO_RCVLOWAT`` is
    that rest (at most ``MAX_RCVLOWAT``), so the loop is woken once when it has all arrived, not
    for every piece the peer's writes deliver (a megabyte Fetch answer otherwise takes 6-7
    wake-ups, each an ``epoll_wait``, a ``recv`` and the loop's Python). The kernel (Linux 4.18
    on) grows the receive buffer to fit, and still wakes the reader when its receive window is
    full or the peer closes (kernels without the 2020 fixes "tcp: fix SO_RCVLOWAT hangs with fat
    skbs" and "tcp: fix SO_RCVLOWAT possible hangs under high mem pressure" could miss that)."""

    decoder: FrameDecoder
    transport: asyncio.BaseTransport | None = None
    _read_into = -1                 # where the last read went: _DIRECT, _SHARED or a FrameBuffers index
    _lowat = 1                      # the SO_RCVLOWAT this protocol last set on its socket

    def get_buffer(self, sizehint: int) -> memoryview:
        decoder = self.decoder
        view = decoder.pending_buffer()
        if view is not None:
            self._read_into = _DIRECT
            return view
        if not decoder.buffered:
            pool = frame_buffers()
            index = pool.free()
            if index >= 0:
                self._read_into = index
                return memoryview(pool.buffers[index])   # a reader may read into slices of it
        self._read_into = _SHARED
        return _READ_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        into = self._read_into
        try:
            if into == _DIRECT:
                frames = self.decoder.filled(nbytes)
            elif into == _SHARED:
                frames = self.decoder.feed(_READ_BUFFER[:nbytes])
            else:
                frames = self.decoder.feed_buffer(frame_buffers().buffers[into], nbytes)
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
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None or transport.is_closing():
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

    def frames_received(self, frames: list) -> None:
        raise NotImplementedError

    def malformed(self, exc: ProtocolError) -> None:
        raise NotImplementedError


#: The most a socket is asked to gather before it wakes the loop (its receive buffer grows to it),
#: and the least rest of a frame worth two setsockopt calls.
MAX_RCVLOWAT = 1 << 20
MIN_RCVLOWAT = 64 * 1024

#: Where sockets read (asyncio's own read size) when no frame buffer is free; one event loop
#: thread uses it at a time.
_READ_BUFFER = memoryview(bytearray(256 * 1024))


class FrameBuffers:
    """A few read buffers, each large enough for a Produce request or a follower's Fetch answer of
    the default sizes (``message.max.bytes``, ``replica.fetch.max.bytes``: 1 MiB), reused once
    nothing refers to them: a large frame handed out as a view of one keeps it, and it is free
    again when the last view of it goes (its reference count says so). A large frame read this way
    costs neither a buffer of its own (allocated and zeroed: a megabyte per Produce request or
    Fetch answer) nor a copy of its first part out of the shared read buffer."""

    def __init__(self, count: int, size: int) -> None:
        self.buffers = [bytearray(size) for _ in range(count)]

    def free(self) -> int:
        """The index of a buffer nothing else refers to, or -1."""
        buffers = self.buffers
        for index in range(len(buffers)):
            # referred to by the list, the call's argument and nothing else
            if sys.getrefcount(buffers[index]) == 2:
                return index
        return -1


#: Frame buffers per thread, and the size of each: 1 MiB of records and room for the fields of
#: the request or answer around them.
FRAME_BUFFER_COUNT = 4
FRAME_BUFFER_BYTES = (1 << 20) + 64 * 1024

_local = threading.local()


def frame_buffers() -> FrameBuffers:
    """This thread's frame buffers: a read takes one and is done with it (or a frame holds it)
    before the thread's next read, so an event loop in another thread needs its own."""
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = FrameBuffers(FRAME_BUFFER_COUNT, FRAME_BUFFER_BYTES)
    return pool


_DIRECT = -2    # the rest of a large frame, read into place
_SHARED = -1    # _READ_BUFFER

