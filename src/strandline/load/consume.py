"""``strandline bench consume``: the consumer load generator (like ``kafka-consumer-perf-test``).

The parent reads each partition's log start and high watermark once and gives every worker
process a set of partitions with an end offset, so that together they read ``--num-records``
records that are already there (or every record there is, when fewer). Each worker assigns its
partitions directly (no group, no rebalance time in the figures) and reads them to their end
offsets. The latency is each record's age when it arrives: the time since its producer's
timestamp, which is how late a consumer keeping up with producers is.

Two clients: ``confluent`` (librdkafka, every record decoded and handed to Python, as an
application sees them; about 100 MB/s of 1 KiB records per process on this machine) and
``raw``, which measures the broker rather than a client: Fetch requests (v5) go straight to
each partition's leader and the answers are read into one reused buffer; records are counted
from the batch headers and never decoded, the bytes counted are the record batches' (headers
included), and the latency is each batch's age (its newest timestamp), one sample per batch.
"""

from __future__ import annotations

import time
from collections import Counter
import socket
import struct
from typing import Any, Iterator

from strandline.load.stats import Sampler
from strandline.load.workers import Outcome, Reporter, run_workers
from strandline.errors import NotFound, StrandlineError

BATCH = 1000
FETCH_MAX_BYTES = 64 << 20
PARTITION_MAX_BYTES = 16 << 20


def plan(ranges: dict[int, tuple[int, int]], num_records: int) -> dict[int, tuple[int, int]]:
    """Each partition's [start, end) offsets, together ``num_records`` (or all there are), spread
    as evenly as the partitions' sizes allow."""
    sizes = {p: max(0, high - low) for p, (low, high) in ranges.items()}
    take = {p: 0 for p in sizes}
    left = num_records
    open_parts = sorted(sizes, key=lambda p: sizes[p])
    while left > 0 and open_parts:
        share = max(1, left // len(open_parts))
        still = []
        for p in open_parts:
            more = min(share, sizes[p] - take[p], left)
            take[p] += more
            left -= more
            if take[p] < sizes[p]:
                still.append(p)
            if left == 0:
                break
        open_parts = still
    return {p: (ranges[p][0], ranges[p][0] + n) for p, n in take.items() if n > 0}


def split(work: dict[int, tuple[int, int]], processes: int) -> list[dict[int, tuple[int, int]]]:
    """Partitions dealt to at most ``processes`` workers, the largest first, each to the least loaded."""
    loads = [0] * min(processes, len(work))
    parts: list[dict[int, tuple[int, int]]] = [{} for _ in loads]
    for p, (start, end) in sorted(work.items(), key=lambda kv: kv[1][0] - kv[1][1]):
        i = loads.index(min(loads))
        parts[i][p] = (start, end)
        loads[i] += end - start
    return parts


def worker(index: int, queue: Any, go: Any, config: dict[str, Any], topic: str, work: dict[int, tuple[int, int]],
           idle_timeout_s: float) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    try:
        consumer = Consumer(config)
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in work.items()])
    except KafkaException as exc:
        queue.put(("error", index, f"consumer: {exc.args[0].str() if exc.args else exc}"))
        return
    reporter = Reporter(index, queue)
    sampler = Sampler(sum(end - start for start, end in work.values()))
    failures: Counter[str] = Counter()
    left = {p: end for p, (_, end) in work.items()}
    queue.put(("ready", index))
    go.wait()
    last = time.monotonic()
    window = reporter.window
    while left:
        batch = consumer.consume(BATCH, 0.5)
        now_ms = time.time() * 1000
        window = reporter.window
        for msg in batch:
            err = msg.error()
            p, offset = msg.partition(), msg.offset()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    failures[err.str()] += 1
                elif p is not None and offset is not None and p in left and offset >= left[p]:
                    del left[p]      # at its end though the last offsets held no record
                continue
            end = left.get(p) if p is not None else None
            if p is None or offset is None or end is None or offset >= end:
                continue
            age_ms = max(0.0, now_ms - msg.timestamp()[1])
            value, key = msg.value(), msg.key()
            window.record((len(value) if value else 0) + (len(key) if key else 0), age_ms)
            sampler.add(age_ms)
            if offset >= end - 1:
                del left[p]
        if batch:
            last = time.monotonic()
        elif time.monotonic() - last > idle_timeout_s:
            failures[f"no record for {idle_timeout_s:.0f} s; stopped with {len(left)} partition(s) unread"] += 1
            break
        reporter.tick()
    reporter.done(sampler.values, failures)
    consumer.close()


def raw_worker(index: int, queue: Any, go: Any, leaders: dict[int, str], topic: str,
               work: dict[int, tuple[int, int]], idle_timeout_s: float) -> None:
    """The ``raw`` client: one connection per leader, one Fetch in flight on each."""
    from strandline.protocol.records import iter_batches

    by_leader: dict[str, list[int]] = {}
    for p in work:
        by_leader.setdefault(leaders[p], []).append(p)
    try:
        socks = {}
        for address in by_leader:
            host, _, port = address.rpartition(":")
            socks[address] = socket.create_connection((host, int(port)), timeout=idle_timeout_s)
            socks[address].setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError as exc:
        queue.put(("error", index, f"cannot connect to a leader: {exc}"))
        return
    reporter = Reporter(index, queue)
    sampler = Sampler(sum(end - start for start, end in work.values()) // 16)
    failures: Counter[str] = Counter()
    offsets = {p: start for p, (start, _) in work.items()}
    ends = {p: end for p, (_, end) in work.items()}
    buf = bytearray(FETCH_MAX_BYTES + (1 << 20))
    view = memoryview(buf)
    name = topic.encode()
    correlation = 0
    queue.put(("ready", index))
    go.wait()
    last = time.monotonic()
    while any(p in ends for parts in by_leader.values() for p in parts):
        got_any = False
        for address, parts in by_leader.items():
            wanted = [p for p in parts if p in ends]
            if not wanted:
                continue
            correlation += 1
            sock = socks[address]
            try:
                sock.sendall(_fetch_request(correlation, name, [(p, offsets[p]) for p in wanted]))
                size = _read_frame(sock, view)
            except OSError as exc:
                failures[f"fetch from {address}: {exc}"] += 1
                for p in wanted:
                    ends.pop(p, None)
                continue
            now_ms = time.time() * 1000
            window = reporter.window
            for p, error, records in _fetch_partitions(buf, size):
                if p not in ends:
                    continue
                if error:
                    failures[f"partition {p}: error {error}"] += 1
                    del ends[p]
                    continue
                fetch_offset, end = offsets[p], ends[p]
                for _, h in iter_batches(records):
                    first = max(h.base_offset, fetch_offset)
                    last_in = min(h.base_offset + h.last_offset_delta, end - 1)
                    offsets[p] = max(offsets[p], h.base_offset + h.last_offset_delta + 1)
                    got_any = True
                    if h.attributes & 0x20 or last_in < first:
                        continue                       # a transaction marker, or outside the plan
                    age_ms = max(0.0, now_ms - h.max_timestamp)
                    window.record_many(min(last_in - first + 1, h.records_count), h.size, age_ms)
                    sampler.add(age_ms)
                if offsets[p] >= end:
                    del ends[p]
        if got_any:
            last = time.monotonic()
        elif time.monotonic() - last > idle_timeout_s:
            failures[f"no record for {idle_timeout_s:.0f} s; stopped with {len(ends)} partition(s) unread"] += 1
            break
        reporter.tick()
    reporter.done(sampler.values, failures)
    for sock in socks.values():
        sock.close()


def _fetch_request(correlation: int, topic: bytes, partitions: list[tuple[int, int]]) -> bytes:
    """A Fetch v5 request frame: replica -1, max wait 100 ms, min 1 byte, read_uncommitted."""
    body = struct.pack(">iiiib", -1, 100, 1, FETCH_MAX_BYTES, 0)
    body += struct.pack(">ih", 1, len(topic)) + topic + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">iqqi", p, offset, -1, PARTITION_MAX_BYTES) for p, offset in partitions)
    client_id = b"strandline-bench"
    payload = struct.pack(">hhih", 1, 5, correlation, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: socket.socket, view: memoryview) -> int:
    """Read one response frame into ``view``; returns its size (after the 4-byte length)."""
    got = 0
    while got < 4:
        n = sock.recv_into(view[got:], 4 - got)
        if not n:
            raise OSError("connection closed")
        got += n
    size: int = struct.unpack_from(">i", view, 0)[0]
    if size + 4 > len(view):
        raise OSError(f"a response of {size} bytes is larger than the buffer")
    while got < size + 4:
        n = sock.recv_into(view[got:size + 4], size + 4 - got)
        if not n:
            raise OSError("connection closed")
        got += n
    return size


def _fetch_partitions(buf: bytearray, size: int) -> Iterator[tuple[int, int, memoryview]]:
    """``(partition, error code, records view)`` of each partition of a Fetch v5 response."""
    view = memoryview(buf)
    pos = 4 + 4 + 4                                  # size, correlation id, throttle time
    (ntopics,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    for _ in range(ntopics):
        (nlen,) = struct.unpack_from(">h", buf, pos)
        pos += 2 + nlen
        (nparts,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        for _ in range(nparts):
            p, error, _, _, _, aborted = struct.unpack_from(">ihqqqi", buf, pos)
            pos += 34 + max(aborted, 0) * 16
            (rlen,) = struct.unpack_from(">i", buf, pos)
            pos += 4
            yield p, error, view[pos:pos + max(rlen, 0)]
            pos += max(rlen, 0)


def leaders_of(bootstrap: str, topic: str, props: dict[str, str]) -> dict[int, str]:
    """Each partition's leader, ``host:port``."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, **props}).list_topics(topic, timeout=10)
    brokers = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
    parts = md.topics[topic].partitions
    missing = [p for p, m in parts.items() if m.leader not in brokers]
    if missing:
        raise StrandlineError(f"partitions {missing} of {topic} have no leader")
    return {p: brokers[m.leader] for p, m in parts.items()}


def ranges_of(bootstrap: str, topic: str, props: dict[str, str]) -> dict[int, tuple[int, int]]:
    """Each partition's log start offset and high watermark, asked once."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "strandline-bench", "log_level": 0, **props})
    try:
        try:
            md = consumer.list_topics(topic, timeout=10)
        except KafkaException:
            raise StrandlineError(f"no broker of {bootstrap} answered within 10 s") from None
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise NotFound(f"topic {topic} does not exist (UNKNOWN_TOPIC_OR_PARTITION)")
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in sorted(t.partitions)}
    finally:
        consumer.close()


def run(bootstrap: str, topic: str, num_records: int, processes: int, props: dict[str, str],
        idle_timeout_s: float = 10.0, progress_s: float = 5.0, client: str = "confluent") -> tuple[Outcome, int]:
    """Reads ``num_records`` (or all there are); returns the outcome and how many were planned."""
    work = plan(ranges_of(bootstrap, topic, props), num_records)
    planned = sum(end - start for start, end in work.values())
    parts = split(work, processes)
    if not parts:
        raise StrandlineError(f"topic {topic} has no records to read")
    if client == "raw":
        leaders = leaders_of(bootstrap, topic, {})
        return run_workers(raw_worker, [(leaders, topic, part, idle_timeout_s) for part in parts],
                           "consumed", progress_s), planned
    config = {"bootstrap.servers": bootstrap, "group.id": "strandline-bench", "enable.auto.commit": False,
              "enable.partition.eof": True, "log_level": 0, **props}
    jobs = [(config, topic, part, idle_timeout_s) for part in parts]
    return run_workers(worker, jobs, "consumed", progress_s), planned
