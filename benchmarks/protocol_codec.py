"""Micro-benchmark of the protocol codec (µs per operation, best of several runs).

    .venv/bin/python benchmarks/protocol_codec.py

* decode a Produce v9 request carrying one 1 MiB batch (and a 16 KiB one): kio alone vs
  decode_request (shape check + kio + header checks)
* encode a Fetch v12 response with 1 MiB of records: kio's writer (generic dict path and
  prebuilt dataclasses) vs the zero-copy fast path (list of buffers)
* encode a Produce v9 response for one partition: generic dict path vs the fast path
"""

from __future__ import annotations

import io
import os
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kio.index import load_request_schema, load_response_schema  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

from strandline.protocol import api  # noqa: E402
from strandline.protocol.api import PartitionData, RequestHeader, build  # noqa: E402


def bench(label: str, fn, number: int, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - started) / number)
    print(f"  {label:<58} {best * 1e6:10.2f} µs")
    return best


def produce_request(version: int, batch: bytes) -> bytes:
    req_cls = load_request_schema(0, version)
    header_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=0, request_api_version=version,
                                              correlation_id=1, client_id="bench"))
    entity_writer(req_cls)(buf, build(req_cls, {"transactional_id": None, "acks": -1, "timeout": 30000,
                                                "topic_data": [{"name": "bench", "partition_data": [
                                                    {"index": 0, "records": batch}]}]}))
    return buf.getvalue()


def main() -> None:
    mib = os.urandom(1 << 20)
    print(f"Python {sys.version.split()[0]}")

    print("decode Produce v9 request (header + body)")
    for size, label in ((1 << 20, "1 MiB"), (16 << 10, "16 KiB")):
        frame = produce_request(9, mib[:size])
        req_cls = load_request_schema(0, 9)
        read_header, read_body = entity_reader(req_cls.__header_schema__), entity_reader(req_cls)

        def kio_only(frame=frame, read_header=read_header, read_body=read_body):
            _, n = read_header(frame, 0)
            return read_body(frame, n)

        n = 200 if size > 100_000 else 20000
        bench(f"kio entity_reader only, {label} batch", kio_only, n)
        bench(f"decode_request (shape check + kio), {label} batch", lambda f=frame: api.decode_request(f), n)

    print("encode Fetch v12 response, 1 partition, 1 MiB of records (framed)")
    header = RequestHeader(1, 12, 1, "bench")
    partition = {"partition_index": 0, "error_code": 0, "high_watermark": 100, "last_stable_offset": 100,
                 "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
                 "records": mib}
    body = {"throttle_time": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": "bench", "partitions": [partition]}]}
    resp_cls = load_response_schema(1, 12)
    prebuilt = build(resp_cls, body)
    topics = [("bench", [PartitionData(0, 0, 100, 100, 0, mib)])]
    assert b"".join(api.encode_fetch_response(header, 0, 0, 0, topics)) == api.encode_response(header, body)
    bench("kio via encode_response(dict)", lambda: api.encode_response(header, body), 300)
    bench("kio via encode_response(prebuilt dataclass)", lambda: api.encode_response(header, prebuilt), 300)
    bench("fast path encode_fetch_response (buffers, no copy)",
          lambda: api.encode_fetch_response(header, 0, 0, 0, topics), 20000)
    big = [("bench", [PartitionData(p, 0, 100, 100, 0, mib[:16384]) for p in range(64)])]
    big_body = {"responses": [{"topic": "bench", "partitions": [
        dict(partition, partition_index=p, records=mib[:16384]) for p in range(64)]}]}
    print("encode Fetch v12 response, 64 partitions x 16 KiB")
    bench("kio via encode_response(dict)", lambda: api.encode_response(header, big_body), 300)
    bench("fast path encode_fetch_response", lambda: api.encode_fetch_response(header, 0, 0, 0, big), 3000)

    print("encode Produce v9 response, 1 partition")
    pheader = RequestHeader(0, 9, 1, "bench")
    pbody = {"responses": [{"name": "bench", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time": -1, "log_start_offset": 0}]}]}
    ptopics = [("bench", [(0, 0, 42, -1, 0)])]
    assert api.encode_produce_response(pheader, ptopics) == api.encode_response(pheader, pbody)
    bench("kio via encode_response(dict)", lambda: api.encode_response(pheader, pbody), 20000)
    bench("fast path encode_produce_response", lambda: api.encode_produce_response(pheader, ptopics), 50000)

    print("frame decoder: 100 MB frame fed in 64 KiB chunks")
    from strandline.protocol.frames import FrameDecoder
    stream = struct.pack(">i", 100_000_000) + bytes(100_000_000)
    chunks = [stream[i:i + 65536] for i in range(0, len(stream), 65536)]

    def feed_all():
        decoder = FrameDecoder(104857600)
        for chunk in chunks:
            decoder.feed(chunk)

    bench("FrameDecoder.feed x 1526 chunks", feed_all, 1, repeat=3)


if __name__ == "__main__":
    main()
