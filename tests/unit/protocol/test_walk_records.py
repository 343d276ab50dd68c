"""walk_records, which decodes one-byte varints itself, against a plain reading with read_varint:
the same records, and the same error where the bytes are cut short."""

from __future__ import annotations

import random

import pytest

from strandline.protocol.records import read_varint, walk_records, write_varint


def reference(data, p, stop, count):
    """Every varint read with read_varint."""
    for _ in range(count):
        start = p
        length, p = read_varint(data, p)
        end = p + length
        if length <= 0 or end > stop:
            raise ValueError(f"a record of {length} bytes at {p} does not fit in the batch")
        timestamp_delta, p = read_varint(data, p + 1)
        offset_delta, p = read_varint(data, p)
        key_length, p = read_varint(data, p)
        key = bytes(data[p:p + key_length]) if key_length >= 0 else None
        value_length, p = read_varint(data, p + max(key_length, 0))
        yield start, end, timestamp_delta, offset_delta, key, p, value_length
        p = end


def records(rng: random.Random) -> tuple[bytes, int]:
    """A records section of 1-4 records, with varints of one byte and of several, null keys and
    values, empty ones and long ones."""
    out = bytearray()
    count = rng.randint(1, 4)
    for i in range(count):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.choice((0, 1, 5, 63, 64, 200)))
        value = None if rng.random() < 0.2 else rng.randbytes(rng.choice((0, 3, 64, 300)))
        body = (b"\0" + write_varint(rng.choice((0, 5, -3, 63, -64, 100, 10**6, -10**9)))
                + write_varint(rng.choice((0, i, 63, 64, 1000)))
                + (write_varint(-1) if key is None else write_varint(len(key)) + key)
                + (write_varint(-1) if value is None else write_varint(len(value)) + value) + write_varint(0))
        out += write_varint(len(body)) + body
    return bytes(out), count


def outcome(data, count: int):
    try:
        return list(walk_records(data, 0, len(data), count))
    except (IndexError, ValueError) as exc:
        return type(exc)


def expected(data, count: int):
    try:
        return list(reference(data, 0, len(data), count))
    except (IndexError, ValueError) as exc:
        return type(exc)


@pytest.mark.parametrize("seed", range(5))
def test_walk_records_reads_as_read_varint_does(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        data, count = records(rng)
        for buf in (data, bytearray(data), memoryview(data)):
            assert outcome(buf, count) == expected(buf, count)
        cut = data[:rng.randrange(len(data))]
        assert outcome(cut, count) == expected(cut, count)
