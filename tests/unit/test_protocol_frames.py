"""FrameDecoder: whole, byte by byte, random splits, any buffer type; size limits; a 100 MB frame
in 64 KiB chunks is assembled in linear time."""

from __future__ import annotations

import collections
import random
import struct
import time

import pytest

from strandline.protocol import frames as frames_module
from strandline.protocol.frames import LARGE_FRAME_BYTES, FrameDecoder, ProtocolError, SpareBuffers

from .test_protocol_samples import framed

PAYLOADS = [b"", b"a", b"\x00" * 3, b"\xff" * 4, bytes(range(256)) * 5, b"x" * 70000, b"tail"]
STREAM = b"".join(framed(p) for p in PAYLOADS)


def feed_in(decoder: FrameDecoder, stream: bytes, next_size) -> list:
    out, pos = [], 0
    while pos < len(stream):
        size = next_size()
        out += decoder.feed(stream[pos:pos + size])
        pos += size
    return out


def test_whole_stream():
    decoder = FrameDecoder(1 << 20)
    assert decoder.feed(STREAM) == PAYLOADS
    assert decoder.buffered == 0
    assert decoder.feed(b"") == []


def test_byte_by_byte():
    decoder = FrameDecoder(1 << 20)
    out = []
    for i in range(len(STREAM)):
        out += decoder.feed(STREAM[i:i + 1])
        if i < len(STREAM) - 1:
            assert len(out) < len(PAYLOADS)
    assert out == PAYLOADS
    assert decoder.buffered == 0


def test_random_splits():
    rng = random.Random(1)
    for _ in range(60):
        choices = rng.sample((1, 2, 3, 4, 5, 7, 100, 4096, 65536), 3)
        assert feed_in(FrameDecoder(1 << 20), STREAM, lambda: rng.choice(choices)) == PAYLOADS


def test_every_single_split_point():
    stream = framed(b"abcdefgh") + framed(b"") + framed(b"ij")
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder(100)
        assert decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) == [b"abcdefgh", b"", b"ij"]


@pytest.mark.parametrize("kind", [bytearray, memoryview, lambda b: memoryview(bytearray(b))])
def test_other_buffer_types_are_copied_not_kept(kind):
    rng = random.Random(2)
    decoder = FrameDecoder(1 << 20)
    out, pos = [], 0
    while pos < len(STREAM):
        size = rng.randrange(1, 9000)
        chunk = bytearray(STREAM[pos:pos + size])
        out += decoder.feed(kind(chunk))
        chunk[:] = b"\xee" * len(chunk)  # the caller reuses its buffer
        pos += size
    assert out == PAYLOADS
    assert all(type(f) is (bytearray if len(f) >= LARGE_FRAME_BYTES else bytes) for f in out)


def test_frames_are_bytes_except_large_spanning_ones_assembled_in_place():
    decoder = FrameDecoder(1 << 20)
    frames = feed_in(decoder, STREAM, lambda: 3)
    assert [type(f) for f in frames] == [bytearray if len(p) >= LARGE_FRAME_BYTES else bytes for p in PAYLOADS]


def test_a_large_frame_is_read_straight_into_its_own_buffer():
    """A socket reads the rest of a large frame into ``pending_buffer``; ``filled`` hands the very
    same bytearray out once it is whole, and small frames go on through ``feed``."""
    payload = bytes(range(256)) * 400                     # 102,400 bytes
    stream = framed(payload) + framed(b"next")
    decoder = FrameDecoder(1 << 20)
    assert decoder.pending_buffer() is None
    assert decoder.feed(stream[:1000]) == []
    target = decoder.pending_buffer()
    assert target is not None and len(target) == len(payload) - 996
    frame_buffer = target.obj
    assert decoder.filled(0) == []
    target[:50000] = stream[1000:51000]                   # a short read
    assert decoder.filled(50000) == []
    assert decoder.buffered == 4 + 996 + 50000
    target = decoder.pending_buffer()
    target[:] = stream[51000:4 + len(payload)]
    (frame,) = decoder.filled(len(target))
    assert frame is frame_buffer and frame == payload
    assert decoder.pending_buffer() is None and decoder.buffered == 0
    assert decoder.feed(stream[4 + len(payload):]) == [b"next"]
    with pytest.raises(ValueError):
        decoder.filled(1)                                 # nothing is pending


def read_like_a_socket(decoder: FrameDecoder, stream: bytes, piece: int = 30000) -> list:
    """Feed the first piece, then read the rest of a large frame into ``pending_buffer`` as a
    socket does (the view released after each read)."""
    out = decoder.feed(stream[:piece])
    pos = piece
    while pos < len(stream):
        target = decoder.pending_buffer()
        if target is None:
            out += decoder.feed(stream[pos:])
            break
        n = min(len(target), piece)
        target[:n] = stream[pos:pos + n]
        del target
        out += decoder.filled(n)
        pos += n
    return out


def test_a_large_frame_buffer_is_reused_once_nothing_holds_it():
    """The buffer of a large frame nobody refers to any more takes the next large frame, resized
    in place to the new size (smaller, then up to an eighth larger), of the same decoder or
    another: exactly the new frame's bytes, none of the old ones (it would otherwise be
    zero-filled anew every time). A frame its allocation cannot hold gets a new buffer (growing
    it would copy it)."""
    spares = SpareBuffers()
    assert spares.free_references > 0
    decoder = FrameDecoder(1 << 20, spares)
    (first,) = read_like_a_socket(decoder, framed(b"a" * 300000))
    buffer_id = id(first)
    del first
    (smaller,) = read_like_a_socket(decoder, framed(b"b" * 200000))
    assert id(smaller) == buffer_id and smaller == b"b" * 200000
    del smaller
    (larger,) = read_like_a_socket(FrameDecoder(1 << 20, spares), framed(bytes(range(256)) * 1300))
    assert id(larger) == buffer_id and larger == bytes(range(256)) * 1300
    del larger
    (much_larger,) = read_like_a_socket(decoder, framed(b"c" * 400000))
    assert id(much_larger) != buffer_id and much_larger == b"c" * 400000
    assert buffer_id in map(id, spares.pool)


@pytest.mark.parametrize("hold", ["frame", "view", "list", "queue"])
def test_a_large_frame_still_held_is_never_overwritten(hold):
    """A frame still referred to (by a name, a memoryview of its records, a list of frames, a
    connection's queue of requests) keeps its bytes: the next large frame gets a buffer of its own."""
    decoder = FrameDecoder(1 << 20, SpareBuffers())
    (first,) = read_like_a_socket(decoder, framed(b"a" * 300000))
    kept = {"frame": first, "view": memoryview(first)[100:200], "list": [first],
            "queue": collections.deque([first])}[hold]
    del first
    (second,) = read_like_a_socket(decoder, framed(b"b" * 300000))
    assert second == b"b" * 300000
    old = kept.obj if hold == "view" else kept if hold == "frame" else kept[0]
    assert old is not second and old == b"a" * 300000


def test_the_spare_buffers_are_bounded_in_number_and_bytes():
    spares = SpareBuffers()
    decoder = FrameDecoder(20 << 20, spares)
    held = [read_like_a_socket(decoder, framed(bytes(100000)))[0] for _ in range(12)]
    assert len(spares.pool) == frames_module.SPARE_BUFFERS
    del held
    big = read_like_a_socket(decoder, framed(bytes(10 << 20)), piece=1 << 20)
    assert sum(map(len, spares.pool)) <= frames_module.SPARE_BYTES
    del big
    read_like_a_socket(decoder, framed(bytes(12 << 20)), piece=1 << 20)
    assert [len(b) for b in spares.pool] == [12 << 20]


def test_buffered_counts_held_back_bytes():
    decoder = FrameDecoder(100)
    assert decoder.feed(b"\x00\x00") == [] and decoder.buffered == 2
    assert decoder.feed(b"\x00\x05ab") == [] and decoder.buffered == 6
    assert decoder.feed(b"cde\x00") == [b"abcde"] and decoder.buffered == 1


def test_size_limit_is_inclusive():
    assert FrameDecoder(5).feed(framed(b"12345")) == [b"12345"]
    with pytest.raises(ProtocolError, match="frame size 6 exceeds socket.request.max.bytes 5"):
        FrameDecoder(5).feed(framed(b"123456"))


@pytest.mark.parametrize("prefix", [struct.pack(">i", -1), struct.pack(">i", -2**31), b"\xff\xff\xff\xfe"])
def test_negative_sizes_are_refused(prefix):
    (size,) = struct.unpack(">i", prefix)
    with pytest.raises(ProtocolError, match=f"negative frame size {size}"):
        FrameDecoder(100).feed(prefix)
    decoder = FrameDecoder(100)  # the prefix split across chunks, after a good frame
    assert decoder.feed(framed(b"ok") + prefix[:1]) == [b"ok"]
    with pytest.raises(ProtocolError, match="negative"):
        for b in prefix[1:]:
            decoder.feed(bytes([b]))


def test_oversized_frame_is_refused_before_its_payload_arrives():
    decoder = FrameDecoder(104857600)
    with pytest.raises(ProtocolError, match="frame size 104857601 exceeds socket.request.max.bytes 104857600"):
        decoder.feed(struct.pack(">i", 104857601))
    with pytest.raises(ProtocolError, match="2147483647"):
        FrameDecoder(1000).feed(b"\x7f\xff\xff\xff" + b"x" * 10)


def test_default_limit_is_kafkas():
    assert FrameDecoder().max_frame_bytes == 104857600


def test_100_mb_frame_in_64_kib_chunks_is_linear():
    payload = bytes(range(256)) * (100 * 1024 * 1024 // 256)
    stream = framed(payload) + framed(b"next")
    chunks = [stream[pos:pos + 65536] for pos in range(0, len(stream), 65536)]
    decoder = FrameDecoder(104857600)
    started = time.perf_counter()
    out = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    elapsed = time.perf_counter() - started
    assert len(out) == 2 and out[1] == b"next"
    assert out[0] == payload
    # one join of 100 MB takes ~0.05 s; a quadratic decoder would copy ~80 GB
    assert elapsed < 2.0, elapsed
