"""Unsigned varints of Kafka's flexible versions (array and string lengths, tagged fields), for the
formats Strandline encodes by hand: the controller's requests, the internal topics' records."""

from __future__ import annotations

from strandline.protocol.frames import ProtocolError

_Buffer = bytes | bytearray | memoryview


def write_uvarint(n: int, out: bytearray) -> None:
    """Append ``n`` (>= 0) as an unsigned varint."""
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_uvarint(buf: _Buffer, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it; ProtocolError if it is truncated
    or longer than five bytes."""
    n = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ProtocolError("truncated or oversized varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, pos
        shift += 7


def skip_tagged_fields(buf: _Buffer, pos: int) -> int:
    """The position after the tagged fields at ``pos`` (their count, then each tag and size)."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolError("truncated tagged field")
    return pos
