"""Fetch reads as file regions: a large read of a segment's tail from a real file is a FileRegion
(sent with sendfile), everything else stays bytes; ``send_now`` writes buffers and regions in
order to a real socket and hands what the socket does not take to the transport."""

from __future__ import annotations

import os
import socket

import pytest

from strandline.log.config import LogConfig
from strandline.log.disk import FileRegion
from strandline.log.log import Log
from strandline.log.segment import REGION_MIN_BYTES
from strandline.runtime.disk import OsDisk
from strandline.runtime.connection import send_now
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import make_batch

VALUE = b"v" * 1000


def filled_log(disk, root: str, batches: int) -> Log:
    log = Log.open(disk, f"{root}/t-0", "t", 0, LogConfig(segment_bytes=1 << 30), needs_recovery=False, now_ms=0)
    for i in range(batches):
        log.append_as_leader(make_batch([VALUE] * 10, timestamp_ms=1000 + i), 0, 1000 + i)
    return log


def test_a_large_tail_read_of_a_real_file_is_a_region_of_the_same_bytes(tmp_path):
    log = filled_log(OsDisk(), str(tmp_path), 40)              # 40 batches of ~10 KB
    whole = log.read(0, 1 << 20)
    region = log.read(0, 1 << 20, regions=True)
    assert isinstance(region, FileRegion) and len(region) == len(whole) >= REGION_MIN_BYTES
    assert bytes(region) == whole and region.read(100) == whole[100:]
    tail = log.read(300, 1 << 20, regions=True)                 # from a later batch: still to the end
    assert isinstance(tail, FileRegion) and bytes(tail) == log.read(300, 1 << 20)


def test_reads_that_need_cutting_or_are_small_or_in_memory_stay_bytes(tmp_path):
    log = filled_log(OsDisk(), str(tmp_path), 40)
    assert type(log.read(0, 50_000, regions=True)) is bytes    # cut at max_bytes: whole batches
    assert type(log.read(0, 1 << 20, max_offset=200, regions=True)) is bytes   # below a high watermark
    assert type(log.read(380, 1 << 20, regions=True)) is bytes  # two batches: under REGION_MIN_BYTES
    memory = filled_log(MemoryDisk(), "/m", 40)
    assert type(memory.read(0, 1 << 20, regions=True)) is bytes


def test_a_region_whose_bytes_are_gone_is_an_error_not_short_data(tmp_path):
    log = filled_log(OsDisk(), str(tmp_path), 40)
    region = log.read(0, 1 << 20, regions=True)
    log.truncate_to(50)
    with pytest.raises(OSError):
        region.read()


@pytest.mark.parametrize("sndbuf", [4096, 1 << 20])
def test_send_now_writes_buffers_and_regions_in_order_and_hands_on_the_rest(tmp_path, sndbuf):
    log = filled_log(OsDisk(), str(tmp_path), 40)
    region = log.read(0, 1 << 20, regions=True)
    second = log.read(200, 1 << 20, regions=True)
    buffers = [b"head", region, b"m" * 70_000, memoryview(b"n" * 10), second, b"", b"tail"]
    expected = b"".join(bytes(b) for b in buffers)
    sender, receiver = socket.socketpair()
    with sender, receiver:
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
        sender.setblocking(False)
        handed: list = []
        send_now(sender.fileno(), buffers, handed.append)
        sender.shutdown(socket.SHUT_WR)
        received = bytearray()
        receiver.settimeout(5)
        while chunk := receiver.recv(1 << 16):
            received += chunk
    assert all(not isinstance(b, FileRegion) for b in handed)
    assert bytes(received) + b"".join(bytes(b) for b in handed) == expected
    if sndbuf == 4096:
        assert handed, "a small socket buffer takes only part of the answer"


def test_send_now_on_a_closed_socket_hands_everything_to_the_transport(tmp_path):
    log = filled_log(OsDisk(), str(tmp_path), 40)
    buffers = [b"head", log.read(0, 1 << 20, regions=True), b"tail"]
    sender, receiver = socket.socketpair()
    receiver.close()
    with sender:
        sender.setblocking(False)
        handed: list = []
        send_now(sender.fileno(), buffers, handed.append)
    assert b"".join(bytes(b) for b in handed) == b"".join(bytes(b) for b in buffers)
    assert os.path.exists(tmp_path / "t-0")


def test_a_region_outlives_the_deletion_of_its_segment_and_the_descriptor_cache(tmp_path):
    """The region holds a descriptor of its own: retention deleting the segment, or the cache of
    open files closing the file's descriptor, in the same event as the read does not stop the
    answer from being sent."""
    disk = OsDisk(max_open_files=1)
    log = filled_log(disk, str(tmp_path), 40)
    whole = log.read(0, 1 << 20)
    region = log.read(0, 1 << 20, regions=True)
    other = disk.open(str(tmp_path / "other"))          # evicts the segment's own descriptor
    other.append(b"x")
    segment = log.segments[0]
    segment.log.close()
    os.remove(segment.log.path)
    assert bytes(region) == whole
    fd = region.fd
    del region                                          # dropping the region releases its descriptor
    with pytest.raises(OSError):
        os.fstat(fd)


def test_without_a_spare_descriptor_the_read_is_bytes(tmp_path, monkeypatch):
    """Thousands of partitions hold many descriptors: when the process has none left to give a
    region, the Fetch read is made as bytes instead of failing."""
    log = filled_log(OsDisk(), str(tmp_path), 40)
    whole = log.read(0, 1 << 20)

    def no_more(fd):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "dup", no_more)
    read = log.read(0, 1 << 20, regions=True)
    assert type(read) is bytes and read == whole
