"""Record batches v2 decoded into Arrow columns on Spark executors (gzip, snappy, lz4, zstd).

A Spark task decodes every fetched record, once, straight into the lists that become one
``pyarrow.RecordBatch`` per fetch (decompression and varints are protocol.records').
"""

from __future__ import annotations

from typing import Any

from strandline.protocol.records import BatchHeader, Buffer, decompress, iter_batches, iter_records, read_varint


class Columns:
    """Growing columns of one fetch: keys, values, offsets, timestamps, timestamp types, headers."""

    __slots__ = ("keys", "values", "offsets", "timestamps", "types", "headers")

    def __init__(self) -> None:
        self.keys: list[Buffer | None] = []
        self.values: list[Buffer | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, Any]]] = []


def decode_into(data: Buffer, columns: Columns, start: int, end: int, with_headers: bool,
                aborted: list[tuple[int, int]] | None = None) -> int:
    """Append the records with ``start <= offset < end``; returns the offset after the last batch seen.

    ``aborted``: a read_committed fetch's aborted transactions ``(producer id, first offset)``; their
    records are skipped as Kafka's consumer skips them (a producer's transactional batches from the
    transaction's first offset until its abort marker).

    The loop reads one- and two-byte varints inline (nearly all of them are): this is the hot path
    of a Spark read."""
    keys, values, offsets, stamps, types, headers = (columns.keys, columns.values, columns.offsets,
                                                    columns.timestamps, columns.types, columns.headers)
    pending = sorted(aborted or (), key=lambda a: a[1])
    skipping: set[int] = set()
    next_offset = start
    for pos, h in iter_batches(data):
        next_offset = max(next_offset, h.last_offset + 1)
        while pending and pending[0][1] <= h.last_offset:
            skipping.add(pending.pop(0)[0])
        if h.attributes & 0x20:                       # control batch (transactions): not user data
            if h.producer_id in skipping and _is_abort_marker(data, pos, h):
                skipping.discard(h.producer_id)
            continue
        if h.attributes & 0x10 and h.producer_id in skipping:
            continue                                  # an aborted transaction's records
        if h.last_offset < start or h.base_offset >= end:
            continue
        buf = bytes(data[pos + 61:pos + 12 + h.batch_length])
        codec = h.attributes & 0x07
        if codec:
            buf = decompress(codec, buf)
        log_append = bool(h.attributes & 0x08)
        base_ts, base_offset = h.base_timestamp, h.base_offset
        whole = h.base_offset >= start and h.last_offset < end
        count = h.records_count
        p = 0
        first = len(offsets)
        for _ in range(count):
            b = buf[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                b2 = buf[p + 1]
                if b2 < 0x80:
                    raw = (b & 0x7F) | (b2 << 7)
                    length = (raw >> 1) ^ -(raw & 1)
                    p += 2
                else:
                    length, p = read_varint(buf, p)
            rec_end = p + length
            p += 1                                    # attributes
            b = buf[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                ts_delta, p = read_varint(buf, p)
            b = buf[p]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                off_delta, p = read_varint(buf, p)
            b = buf[p]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                klen, p = read_varint(buf, p)
            if klen >= 0:
                key = buf[p:p + klen]
                p += klen
            else:
                key = None
            b = buf[p]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                b2 = buf[p + 1]
                if b2 < 0x80:
                    raw = (b & 0x7F) | (b2 << 7)
                    vlen = (raw >> 1) ^ -(raw & 1)
                    p += 2
                else:
                    vlen, p = read_varint(buf, p)
            if vlen >= 0:
                value = buf[p:p + vlen]
                p += vlen
            else:
                value = None
            if whole or start <= base_offset + off_delta < end:
                keys.append(key)
                values.append(value)
                offsets.append(base_offset + off_delta)
                stamps.append(base_ts + ts_delta)
                if with_headers:
                    hs = []
                    n_headers, p = read_varint(buf, p)
                    for _h in range(n_headers):
                        hk, p = read_varint(buf, p)
                        hkey = buf[p:p + hk].decode() if hk >= 0 else None
                        p += max(hk, 0)
                        hv, p = read_varint(buf, p)
                        hs.append({"key": hkey, "value": buf[p:p + hv] if hv >= 0 else None})
                        p += max(hv, 0)
                    headers.append(hs)
            p = rec_end
        added = len(offsets) - first
        if added:
            types.extend([1 if log_append else 0] * added)
            if log_append:
                stamps[first:] = [h.max_timestamp] * added
    return next_offset


def _is_abort_marker(data: Buffer, pos: int, h: BatchHeader) -> bool:
    """Whether a control batch holds an abort marker (its one record's key: version 0, type 0)."""
    for record in iter_records(data, pos, h):
        return record.key is not None and bytes(record.key[:4]) == b"\x00\x00\x00\x00"
    return False
