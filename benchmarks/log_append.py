"""Storage engine throughput: Log.append_as_leader and Log.read on the real disk (OsDisk).

Appends 1 MiB buffers made of batches of 1 KiB records to a fresh log in a temporary directory
for about ``--seconds`` seconds, then reads the log back from the start in 1 MiB fetches.
Prints MB/s (1 MB = 10^6 bytes) for both. The page cache absorbs the writes: no fsync is made
except at segment rolls (like Kafka). A benchmark, not a test:

    .venv/bin/python benchmarks/log_append.py [--seconds 5] [--records-per-batch 16] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time

import crc32c

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from strandline.group.records import varint  # noqa: E402
from strandline.log.config import LogConfig  # noqa: E402
from strandline.log.log import Log  # noqa: E402
from strandline.runtime.disk import OsDisk  # noqa: E402

RECORD = 1024
MIB = 1 << 20


def make_batch(count: int, value: bytes, timestamp_ms: int) -> bytes:
    records = bytearray()
    for i in range(count):
        body = b"\x00" + varint(0) + varint(i) + varint(-1) + varint(len(value)) + value + varint(0)
        records += varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, timestamp_ms, timestamp_ms, -1, -1, -1, count) + records
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc)) + after_crc


def one_mib_buffer(records_per_batch: int) -> tuple[bytearray, int]:
    buf = bytearray()
    batch = make_batch(records_per_batch, os.urandom(RECORD), 1_700_000_000_000)
    while len(buf) + len(batch) <= MIB:
        buf += batch
    return buf, len(buf) // len(batch)


def run(seconds: float, records_per_batch: int, directory: str | None, segment_bytes: int) -> None:
    root = tempfile.mkdtemp(prefix="strandline-bench-", dir=directory)
    try:
        disk = OsDisk()
        log = Log.open(disk, os.path.join(root, "bench-0"), "bench", 0,
                       LogConfig(segment_bytes=segment_bytes), needs_recovery=False, now_ms=0)
        buf, batches = one_mib_buffer(records_per_batch)
        appended = 0
        appends = 0
        start = time.perf_counter()
        deadline = start + seconds
        now_ms = 0
        while True:
            log.append_as_leader(buf, 0, now_ms)   # stamping in place: the same buffer can be reused
            appended += len(buf)
            appends += 1
            if appends % 16 == 0 and time.perf_counter() >= deadline:
                break
        append_s = time.perf_counter() - start
        print(f"append: {appended / append_s / 1e6:8.1f} MB/s  ({appends} appends of {len(buf)} bytes = "
              f"{batches} batches x {records_per_batch} x {RECORD} B records, {len(log.segments)} segments, "
              f"{log.log_end_offset} offsets, {append_s:.2f} s)")

        read = 0
        fetches = 0
        offset = log.log_start_offset
        start = time.perf_counter()
        while offset < log.log_end_offset:
            data = log.read(offset, MIB)
            read += len(data)
            fetches += 1
            # next offset from the last batch's header (what a consumer does)
            pos = 0
            last = None
            while pos < len(data):
                base, length = struct.unpack_from(">qi", data, pos)
                last = (pos, base)
                pos += 12 + length
            offset = last[1] + struct.unpack_from(">i", data, last[0] + 23)[0] + 1
        read_s = time.perf_counter() - start
        print(f"read:   {read / read_s / 1e6:8.1f} MB/s  ({fetches} fetches of up to {MIB} bytes, "
              f"{read} bytes, {read_s:.2f} s)")
        start = time.perf_counter()
        log.flush()
        print(f"flush:  {time.perf_counter() - start:.3f} s for the unflushed tail")
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--records-per-batch", type=int, default=16)
    parser.add_argument("--segment-bytes", type=int, default=LogConfig().segment_bytes)
    parser.add_argument("--dir", default=None, help="parent of the temporary log directory")
    args = parser.parse_args()
    run(args.seconds, args.records_per_batch, args.dir, args.segment_bytes)


if __name__ == "__main__":
    main()
