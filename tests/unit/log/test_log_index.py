"""Sparse offset/time indexes and single segments: lookups, reads, truncation, recovery."""

from __future__ import annotations

import struct

import pytest

from strandline.log.config import LogConfig
from strandline.log.index import IndexOffsetOverflow, OffsetIndex, TimeIndex
from strandline.log.segment import BatchInfo, LogSegment
from strandline.protocol.records import iter_batches, stamp
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import make_batch


# -- OffsetIndex / TimeIndex ---------------------------------------------------------------------

def test_offset_index_lookup_truncate_and_file_layout(disk_root):
    disk, root = disk_root
    path = f"{root}/00000000000000000100.index"
    index = OffsetIndex(disk, path, 100)
    assert index.lookup(150) == (100, 0)               # empty: (base, 0)
    for offset, position in [(110, 500), (120, 1000), (135, 1700)]:
        index.append(offset, position)
    index.write_pending()
    assert disk.read_file(path) == struct.pack(">iiiiii", 10, 500, 20, 1000, 35, 1700)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 500)
    assert index.lookup(134) == (120, 1000)
    assert index.lookup(10**12) == (135, 1700)
    with pytest.raises(ValueError):
        index.append(135, 1800)                         # offsets must increase
    with pytest.raises(IndexOffsetOverflow):
        index.append(100 + 2**31, 1800)
    index.truncate_to(120)
    assert index.entry_list() == [(110, 500)] and disk.file_size(path) == 8
    index.close()
    again = OffsetIndex(disk, path, 100)
    assert again.load(segment_size=2000)
    assert again.entry_list() == [(110, 500)]
    assert not OffsetIndex(disk, path, 100).load(segment_size=400)   # position beyond the segment


def test_offset_index_sanity_check_rejects_bad_files(disk_root):
    disk, root = disk_root
    path = f"{root}/0.index"
    disk.write_file_atomic(path, struct.pack(">ii", 1, 10) + b"\x00")          # not a multiple of 8
    assert not OffsetIndex(disk, path, 0).load(1000)
    disk.write_file_atomic(path, struct.pack(">iiii", 5, 10, 3, 20))           # offsets go back
    assert not OffsetIndex(disk, path, 0).load(1000)
    disk.write_file_atomic(path, struct.pack(">iiii", 3, 10, 5, 10))           # positions repeat
    assert not OffsetIndex(disk, path, 0).load(1000)
    disk.write_file_atomic(path, struct.pack(">iiii", 3, 10, 5, 20))
    good = OffsetIndex(disk, path, 0)
    assert good.load(1000) and good.entries == 2


def test_offset_index_capacity(disk_root):
    disk, root = disk_root
    index = OffsetIndex(disk, f"{root}/0.index", 0, max_index_size=24)
    for i in range(3):
        assert not index.is_full
        index.append(i + 1, (i + 1) * 10)
    assert index.is_full


def test_time_index_only_increasing_timestamps(disk_root):
    disk, root = disk_root
    path = f"{root}/00000000000000000050.timeindex"
    index = TimeIndex(disk, path, 50)
    assert index.lookup(5) == (-1, 50)
    assert index.maybe_append(1000, 52)
    assert not index.maybe_append(1000, 55)             # not above the last timestamp
    assert not index.maybe_append(900, 56)
    assert index.maybe_append(2000, 60)
    assert index.maybe_append(3000, 70)
    index.write_pending()
    assert disk.read_file(path) == struct.pack(">qiqiqi", 1000, 2, 2000, 10, 3000, 20)
    assert index.lookup(999) == (-1, 50)
    assert index.lookup(1500) == (1000, 52)
    assert index.lookup(3000) == (3000, 70)
    assert index.last_entry == (3000, 70)
    index.truncate_to(70)
    assert index.entry_list() == [(1000, 52), (2000, 60)]
    index.close()
    again = TimeIndex(disk, path, 50)
    assert again.load() and again.entry_list() == [(1000, 52), (2000, 60)]
    disk.write_file_atomic(path, struct.pack(">qiqi", 2000, 2, 1000, 3))       # timestamps go back
    assert not TimeIndex(disk, path, 50).load()


# -- LogSegment --------------------------------------------------------------------------------

def _append(segment: LogSegment, next_offset: int, batch: bytearray, epoch: int = 0, now_ms: int = 0) -> int:
    h = next(iter_batches(batch))[1]
    stamp(batch, 0, next_offset, epoch)
    last = next_offset + h.last_offset_delta
    segment.append(batch, [BatchInfo(0, len(batch), next_offset, last, h.max_timestamp)], now_ms)
    return last + 1


def _filled_segment(disk, root, base=1000, n=60, interval=300):
    config = LogConfig(index_interval_bytes=interval)
    segment = LogSegment.create(disk, root, base, config, now_ms=0)
    offset = base
    for i in range(n):
        values = [b"v" * 50] * (1 + i % 3)
        offset = _append(segment, offset, make_batch(values, timestamp_ms=10_000 + 10 * i))
    return segment, offset


def test_segment_files_and_sparse_index(disk_root):
    disk, root = disk_root
    segment, next_offset = _filled_segment(disk, root)
    assert sorted(disk.listdir(root)) == ["00000000000000001000.index", "00000000000000001000.log",
                                          "00000000000000001000.timeindex"]
    assert segment.next_offset == next_offset == 1000 + sum(1 + i % 3 for i in range(60))
    entries = segment.offset_index.entry_list()
    assert 5 < len(entries) < 60                               # sparse
    gaps = [b[1] - a[1] for a, b in zip(entries, entries[1:])]
    assert all(g > 300 for g in gaps)                          # at least index.interval.bytes apart
    data = disk.read_file(segment.log_path)
    starts = {h.base_offset: p for p, h in iter_batches(data)}
    for offset, position in entries:
        assert starts[offset] == position                      # every entry points at a batch start
    for offset in range(1000, next_offset):
        pos, header = segment.translate_offset(offset)
        assert header.base_offset <= offset <= header.last_offset and starts[header.base_offset] == pos
    assert segment.translate_offset(next_offset) is None
    assert segment.max_timestamp == 10_000 + 590


def test_segment_read_bounds(disk_root):
    disk, root = disk_root
    segment, end = _filled_segment(disk, root, n=20)
    data = disk.read_file(segment.log_path)
    batches = list(iter_batches(data))
    everything, exhausted = segment.read(1000, 1 << 20)
    assert everything == data and exhausted
    # from the middle of a batch: starts at that batch
    p2, h2 = batches[2]
    got, exhausted = segment.read(h2.base_offset + h2.last_offset_delta, 1 << 20)
    assert got == data[p2:] and exhausted
    # max_bytes cuts at a batch boundary, min_one_batch returns at least one whole batch
    got, exhausted = segment.read(1000, batches[3][0] + 5)
    assert got == data[:batches[3][0]] and not exhausted
    got, _ = segment.read(1000, 1)
    assert got == data[:batches[1][0]]
    assert segment.read(1000, 1, min_one_batch=False) == (b"", False)
    # max_offset: only batches with base offset below it
    got, exhausted = segment.read(1000, 1 << 20, max_offset=batches[5][1].base_offset)
    assert got == data[:batches[5][0]] and not exhausted
    assert segment.read(batches[5][1].base_offset, 1 << 20, max_offset=batches[5][1].base_offset) == (b"", False)
    assert segment.read(end, 100) == (b"", True)


def test_segment_time_lookup(disk_root):
    disk, root = disk_root
    segment, _ = _filled_segment(disk, root, n=40)
    assert len(segment.time_index) > 2
    batches = list(iter_batches(disk.read_file(segment.log_path)))
    for i, (_, h) in enumerate(batches):
        assert segment.find_offset_by_timestamp(10_000 + 10 * i) == (h.base_offset, 10_000 + 10 * i)
        assert segment.find_offset_by_timestamp(10_000 + 10 * i - 5) == (h.base_offset, 10_000 + 10 * i)
    assert segment.find_offset_by_timestamp(0) == (1000, 10_000)
    assert segment.find_offset_by_timestamp(10_000 + 10 * 40) is None


def test_segment_truncate_to(disk_root):
    disk, root = disk_root
    segment, _ = _filled_segment(disk, root, n=40)
    data = disk.read_file(segment.log_path)
    batches = list(iter_batches(data))
    pos, h = batches[25]
    removed = segment.truncate_to(h.base_offset + h.last_offset_delta)   # inside batch 25: it goes too
    assert removed == len(data) - pos
    assert segment.size == pos and segment.next_offset == h.base_offset
    assert all(o < h.base_offset for o, _ in segment.offset_index.entry_list())
    assert all(o < h.base_offset for _, o in segment.time_index.entry_list())
    assert segment.max_timestamp == batches[24][1].max_timestamp
    assert segment.truncate_to(10**9) == 0
    assert segment.truncate_to(0) == pos and segment.size == 0 and segment.next_offset == 1000


def test_segment_reopen_rebuilds_a_corrupt_index(disk_root):
    disk, root = disk_root
    segment, end = _filled_segment(disk, root, n=40)
    entries = segment.offset_index.entry_list()
    segment.close()
    index_path = f"{root}/00000000000000001000.index"
    disk.write_file_atomic(index_path, disk.read_file(index_path)[:-3])   # torn index
    again = LogSegment.open(disk, root, 1000, LogConfig(index_interval_bytes=300))
    assert again.next_offset == end
    assert again.offset_index.entry_list() == entries and again.index_rebuilds == 1


def test_segment_recover_cuts_at_the_first_bad_batch(disk_root):
    disk, root = disk_root
    segment, end = _filled_segment(disk, root, n=30)
    data = disk.read_file(segment.log_path)
    batches = list(iter_batches(data))
    assert segment.recover() == 0 and segment.recovered_batches == 30 and segment.next_offset == end
    pos, h = batches[17]
    segment.log.append(b"\x00" * 7)                               # a torn tail
    assert segment.recover() == 7 and segment.next_offset == end
    flip = bytes([data[pos + 70] ^ 0xFF])
    if isinstance(disk, MemoryDisk):
        disk.corrupt(segment.log_path, pos + 70, flip)
    else:
        with open(segment.log_path, "r+b") as f:
            f.seek(pos + 70)
            f.write(flip)
    assert segment.recover() == len(data) - pos
    assert segment.recovered_batches == 17
    assert segment.size == pos and segment.next_offset == h.base_offset
    assert all(p < pos for _, p in segment.offset_index.entry_list())
