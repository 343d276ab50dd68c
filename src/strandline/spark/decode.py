"""Record batches v2 decoded into Arrow columns on Spark executors (gzip, snappy, lz4, zstd).

The broker never decodes records; a Spark task does, once, straight into the lists that become
one ``pyarrow.RecordBatch`` per fetch.
"""

from __future__ import annotations

import struct
from typing import Iterator

import cramjam

from strandline.protocol.records import iter_batches

_XERIAL = b"\x82SNAPPY\x00"


def decompress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return bytes(cramjam.gzip.decompress(data))
    if codec == 2:
        if data.startswith(_XERIAL):                 # snappy-java's framing (Java producers)
            out = bytearray()
            pos = 16
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                out += bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + n]))
                pos += 4 + n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec {codec}")


class Columns:
    """Growing columns of one fetch: keys, values, offsets, timestamps, timestamp types, headers."""

    __slots__ = ("keys", "values", "offsets", "timestamps", "types", "headers")

    def __init__(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list = []


def decode_into(data, columns: Columns, start: int, end: int, with_headers: bool) -> int:
    """Append the records with ``start <= offset < end``; returns the offset after the last batch seen."""
    keys, values, offsets, stamps, types, headers = (columns.keys, columns.values, columns.offsets,
                                                    columns.timestamps, columns.types, columns.headers)
    next_offset = start
    for pos, h in iter_batches(data):
        next_offset = max(next_offset, h.last_offset + 1)
        if h.last_offset < start or h.base_offset >= end:
            continue
        if h.attributes & 0x20:                       # control batch (transactions): not user data
            continue
        payload = bytes(data[pos + 61:pos + 12 + h.batch_length])
        codec = h.attributes & 0x07
        if codec:
            payload = decompress(codec, payload)
        log_append = bool(h.attributes & 0x08)
        ts_type = 1 if log_append else 0
        base_ts, base_offset = h.base_timestamp, h.base_offset
        p = 0
        buf = payload
        for _ in range(h.records_count):
            # varint length
            shift = raw = 0
            while True:
                b = buf[p]
                p += 1
                raw |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
            length = (raw >> 1) ^ -(raw & 1)
            rec_end = p + length
            p += 1                                    # attributes
            fields = []
            for _f in range(4):                       # timestamp delta, offset delta, key length, ...
                shift = raw = 0
                while True:
                    b = buf[p]
                    p += 1
                    raw |= (b & 0x7F) << shift
                    shift += 7
                    if b < 0x80:
                        break
                value = (raw >> 1) ^ -(raw & 1)
                fields.append(value)
                if _f == 2:                           # key length: the key, then the value length
                    key = buf[p:p + value] if value >= 0 else None
                    p += max(value, 0)
            ts_delta, off_delta, _, vlen = fields
            value_bytes = buf[p:p + vlen] if vlen >= 0 else None
            p += max(vlen, 0)
            offset = base_offset + off_delta
            if start <= offset < end:
                keys.append(key)
                values.append(value_bytes)
                offsets.append(offset)
                stamps.append(h.max_timestamp if log_append else base_ts + ts_delta)
                types.append(ts_type)
                if with_headers:
                    hs = []
                    shift = raw = 0
                    while True:
                        b = buf[p]
                        p += 1
                        raw |= (b & 0x7F) << shift
                        shift += 7
                        if b < 0x80:
                            break
                    for _h in range((raw >> 1) ^ -(raw & 1)):
                        pair = []
                        for _x in range(2):
                            shift = raw = 0
                            while True:
                                b = buf[p]
                                p += 1
                                raw |= (b & 0x7F) << shift
                                shift += 7
                                if b < 0x80:
                                    break
                            n = (raw >> 1) ^ -(raw & 1)
                            pair.append(buf[p:p + n] if n >= 0 else None)
                            p += max(n, 0)
                        hs.append({"key": pair[0].decode() if pair[0] is not None else None, "value": pair[1]})
                    headers.append(hs)
            p = rec_end
    return next_offset


def batches_in(data) -> Iterator[tuple[int, int]]:
    """(base offset, last offset) of each batch."""
    for _, h in iter_batches(data):
        yield h.base_offset, h.last_offset
