"""The CPU per replicated MB that no broker gets below on this machine: the kernel's copies and the CRC.

Four processes on loopback do only what an RF=3 acks=all write must do to every byte, the way
Kafka's brokers and Strandline's do it, with no protocol, no event loop and no bookkeeping:

- a producer sends size-prefixed frames of ``--frame-kib`` KiB (one record batch each, as a
  saturated producer's Produce request carries) to the leader;
- the leader reads each into a buffer of its own, checks its CRC-32C, appends it to a segment
  file with ``pwrite`` and sends it from the file with ``sendfile`` to each of two followers;
- each follower reads it into a buffer of its own, checks its CRC-32C and appends it with ``pwrite``.

It prints each one's CPU time (user + system, from ``getrusage``) per MB, which
``replication_cpu.py``'s figures for Strandline's brokers can be set against: the difference is
what the broker adds. System time is mostly the kernel's copies (socket to buffer, buffer to page
cache), whose cost this VM varies severalfold (``page_cache_write.py``), so compare a floor with
broker runs made just before or after it. A benchmark, not a test:

    .venv/bin/python benchmarks/replication_floor.py [--mb 1000] [--frame-kib 870] [--runs 3] [--dir DIR]

The segment files go in ``--dir`` (default: a new temporary directory, removed afterwards); put it
on the file system of the log dirs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time

import crc32c

_SIZE = struct.Struct(">i")


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def read_exactly(sock: socket.socket, view: memoryview) -> None:
    while view:
        n = sock.recv_into(view, len(view), socket.MSG_WAITALL)
        if not n:
            raise ConnectionError("the peer closed the connection mid-frame")
        view = view[n:]


def receive(sock: socket.socket) -> bytearray | None:
    """The next frame, in a buffer of its own (None at the end of the stream)."""
    prefix = bytearray(4)
    n = sock.recv_into(prefix, 4, socket.MSG_WAITALL)
    if n == 0:
        return None
    read_exactly(sock, memoryview(prefix)[n:])
    frame = bytearray(_SIZE.unpack(prefix)[0])
    read_exactly(sock, memoryview(frame))
    return frame


def check_and_append(frame: bytearray, crc: int, fd: int, position: int) -> int:
    if crc32c.crc32c(frame) != crc:
        raise ValueError("CRC mismatch")
    view = memoryview(frame)
    while view:
        written = os.pwrite(fd, view, position)
        position += written
        view = view[written:]
    return position


def follower(listener: socket.socket, path: str, crc: int, out) -> None:
    conn, _ = listener.accept()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start, position = cpu(), 0
    while (frame := receive(conn)) is not None:
        position = check_and_append(frame, crc, fd, position)
    used = [after - before for after, before in zip(cpu(), start)]
    os.close(fd)
    out.send((used, position))


def leader(listener: socket.socket, follower_ports: list[int], path: str, crc: int, out) -> None:
    followers = [socket.create_connection(("127.0.0.1", port)) for port in follower_ports]
    conn, _ = listener.accept()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    start, position = cpu(), 0
    while (frame := receive(conn)) is not None:
        at = position
        position = check_and_append(frame, crc, fd, position)
        for f in followers:
            f.sendall(_SIZE.pack(len(frame)))
            sent = 0
            while sent < len(frame):
                sent += os.sendfile(f.fileno(), fd, at + sent, len(frame) - sent)
    used = [after - before for after, before in zip(cpu(), start)]
    for f in followers:
        f.close()
    os.close(fd)
    out.send((used, position))


def one_run(args: argparse.Namespace, directory: str) -> dict:
    frame = os.urandom(args.frame_kib * 1024)
    crc = crc32c.crc32c(frame)
    frames = max(1, args.mb * 1024 // args.frame_kib)
    listeners = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        listeners.append(s)
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for i, s in enumerate(listeners[1:], start=1):
        here, there = ctx.Pipe()
        procs.append(ctx.Process(target=follower, args=(s, os.path.join(directory, f"follower-{i}.log"), crc, there)))
        pipes.append(here)
    here, there = ctx.Pipe()
    procs.insert(0, ctx.Process(target=leader, args=(listeners[0], [s.getsockname()[1] for s in listeners[1:]],
                                                     os.path.join(directory, "leader.log"), crc, there)))
    pipes.insert(0, here)
    for p in procs:
        p.start()
    producer = socket.create_connection(("127.0.0.1", listeners[0].getsockname()[1]))
    prefix = _SIZE.pack(len(frame))
    t0 = time.monotonic()
    for _ in range(frames):
        producer.sendall(prefix)
        producer.sendall(frame)
    producer.close()
    results = [pipe.recv() for pipe in pipes]
    wall = time.monotonic() - t0
    for p in procs:
        p.join()
    for s in listeners:
        s.close()
    mb = frames * len(frame) / 1024 / 1024
    for (_, position) in results:
        if position != frames * len(frame):
            raise RuntimeError(f"a replica wrote {position} bytes, not {frames * len(frame)}")
    return {"mb_s": mb / wall, "leader": [t / mb * 1000 for t in results[0][0]],
            "followers": [[t / mb * 1000 for t in r[0]] for r in results[1:]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1000, help="MB produced per run")
    parser.add_argument("--frame-kib", type=int, default=870, help="KiB per frame (a saturated Produce's batch)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--dir", help="where the segment files go (default: a new temporary directory)")
    args = parser.parse_args()
    if args.mb <= 0 or args.frame_kib <= 0:
        parser.error("--mb and --frame-kib must be positive")
    rows = []
    for i in range(args.runs):
        directory = tempfile.mkdtemp(prefix="strandline-floor-", dir=args.dir)
        try:
            row = one_run(args, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        rows.append(row)

        def split(t: list[float]) -> str:
            return f"{sum(t):.2f} ms/MB = {t[0]:.2f} user + {t[1]:.2f} system"

        print(f"  run {i + 1}: {row['mb_s']:.0f} MB/s; leader {split(row['leader'])}; "
              + "; ".join(f"follower {split(f)}" for f in row["followers"]), flush=True)
    if args.runs > 1:
        print(f"  median: leader {statistics.median(sum(r['leader']) for r in rows):.2f} ms/MB, followers "
              f"{statistics.median(sum(f) for r in rows for f in r['followers']):.2f} ms/MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
