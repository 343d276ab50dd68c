"""Bad input gets Kafka's answer and loses nothing; junk closes one connection, never the broker."""

from __future__ import annotations

import fcntl
import random
import re
import select
import socket
import struct
import termios
import time

import pytest
from kio.schema.errors import ErrorCode

from strandline.protocol.api import encode_request
from strandline.runtime.client import KafkaConnection
from tests.conftest import Cluster, free_ports
from tests.unit.batches import make_batch

pytestmark = pytest.mark.integration

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    ports = free_ports(2)
    data = tmp_path_factory.mktemp("strict") / "data"
    data.mkdir()
    c = Cluster(data, 1, ports[1], ports[0], overrides=["auto.create.topics.enable=false",
                                                        "message.max.bytes=10000",
                                                        "socket.request.max.bytes=1000000"])
    c.start()
    with KafkaConnection(c.bootstrap) as conn:
        resp = conn.request(19, 4, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                "assignments": [], "configs": []}],
                                    "timeout": 10000, "validate_only": False})
        assert resp.topics[0].error_code == ErrorCode.none
    yield c
    c.stop()


def produce(conn: KafkaConnection, records: bytes, topic: str = "t", acks: int = 1):
    resp = conn.request(PRODUCE, 7, {"transactional_id": None, "acks": acks, "timeout": 5000,
                                     "topic_data": [{"name": topic, "partition_data": [
                                         {"index": 0, "records": records}]}]})
    return resp.responses[0].partition_responses[0]


def latest(conn: KafkaConnection, topic: str = "t", replica_id: int = -1) -> int:
    resp = conn.request(LIST_OFFSETS, 2, {"replica_id": replica_id, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return resp.topics[0].partitions[0].offset


def still_serving(cluster) -> bool:
    with KafkaConnection(cluster.bootstrap) as conn:
        resp = conn.request(METADATA, 4, {"topics": None, "allow_auto_topic_creation": False})
        return any(t.name == "t" for t in resp.topics)


def test_good_batch_is_appended(strict):
    with KafkaConnection(strict.bootstrap) as conn:
        before = latest(conn)
        part = produce(conn, bytes(make_batch([b"a", b"b", b"c"])))
        assert part.error_code == ErrorCode.none and part.base_offset == before
        assert latest(conn) == before + 3


def test_crc_mismatch_is_corrupt_message_and_nothing_is_appended(strict):
    batch = make_batch([b"hello", b"world"])
    batch[-1] ^= 0xFF
    with KafkaConnection(strict.bootstrap) as conn:
        before = latest(conn, replica_id=-2)
        assert produce(conn, bytes(batch)).error_code == ErrorCode.corrupt_message
        assert latest(conn, replica_id=-2) == before


def test_batch_over_message_max_bytes_is_message_too_large(strict):
    with KafkaConnection(strict.bootstrap) as conn:
        before = latest(conn, replica_id=-2)
        part = produce(conn, bytes(make_batch([b"x" * 20000])))
        assert part.error_code == ErrorCode.message_too_large
        assert latest(conn, replica_id=-2) == before


def test_unknown_topic_without_auto_create(strict):
    with KafkaConnection(strict.bootstrap) as conn:
        assert produce(conn, bytes(make_batch([b"x"])), topic="nope").error_code == \
            ErrorCode.unknown_topic_or_partition
        resp = conn.request(METADATA, 4, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": True})
        assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    client_id = b"raw"
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def recv_frame(sock: socket.socket) -> bytes | None:
    def read(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = read(4)
    if head is None:
        return None
    return read(struct.unpack(">i", head)[0])


def connection_closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return recv_frame(sock) is None
    except (ConnectionResetError, socket.timeout):
        return False


def unsent(sock: socket.socket) -> int:
    """Bytes in a socket's send queue (SIOCOUTQ), not yet taken by the peer's kernel."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]


def unread(local_port: int, remote_port: int) -> int:
    """Bytes received by the loopback TCP socket ``local_port`` <- ``remote_port`` that its process has
    not read yet (rx_queue in /proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote, queues = fields[1], fields[2], fields[4]
            if int(local.split(":")[1], 16) == local_port and int(remote.split(":")[1], 16) == remote_port:
                return int(queues.split(":")[1], 16)
    raise AssertionError(f"no TCP socket {local_port} <- {remote_port}")


def test_a_busy_connection_is_not_read_past_a_megabyte_of_waiting_requests(strict):
    """A client pipelining large requests behind one that waits (a long-poll Fetch) finds the broker
    stops reading its connection after about a megabyte, as Kafka does, instead of holding 64
    requests in memory (32 MB here); every request is answered in order once the Fetch returns.
    What the broker read is what was sent less what the two kernels still hold (their buffers
    grow to megabytes of their own)."""
    with KafkaConnection(strict.bootstrap) as conn:
        end = latest(conn)
    frame_of = lambda key, version, cid, body: (lambda f: struct.pack(">i", len(f)) + f)(  # noqa: E731
        encode_request(key, version, cid, "pipeline", body))
    fetch = frame_of(FETCH, 4, 1, {"replica_id": -1, "max_wait": 1500, "min_bytes": 1, "max_bytes": 1 << 20,
                                   "isolation_level": 0, "topics": [{"topic": "t", "partitions": [
                                       {"partition": 0, "fetch_offset": end, "partition_max_bytes": 1 << 20}]}]})
    # over this cluster's message.max.bytes: each is answered MESSAGE_TOO_LARGE and appends nothing;
    # what counts here is only how much of them the broker reads while the Fetch waits
    records = bytes(make_batch([b"x" * 500_000]))
    produces = [frame_of(PRODUCE, 7, 2 + i, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": records}]}]}) for i in range(64)]
    stream = b"".join([fetch, *produces])
    with socket.create_connection(("127.0.0.1", strict.base_port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 256 * 1024)
        sock.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 1.2      # within the Fetch's wait: the connection stays busy
        while sent < len(stream) and time.monotonic() < deadline:
            try:
                sent += sock.send(stream[sent:sent + (1 << 20)])
            except BlockingIOError:
                select.select([], [sock], [], 0.05)
        read = sent - unsent(sock) - unread(strict.base_port, sock.getsockname()[1])
        assert read < 4 * (1 << 20), f"the broker read {read >> 20} MB of a connection with a request in flight"
        sock.setblocking(True)
        sock.settimeout(20)
        sock.sendall(stream[sent:])
        answered = [struct.unpack(">i", recv_frame(sock)[:4])[0] for _ in range(1 + len(produces))]
    assert answered == list(range(1, 2 + len(produces)))


def test_unsupported_api_versions_version_gets_v0_answer_with_the_list(strict):
    with socket.create_connection(("127.0.0.1", strict.base_port)) as sock:
        sock.sendall(raw_frame(API_VERSIONS, 99, 7))
        frame = recv_frame(sock)
        correlation, error = struct.unpack_from(">ih", frame, 0)
        assert correlation == 7 and error == ErrorCode.unsupported_version
        count = struct.unpack_from(">i", frame, 6)[0]
        keys = {struct.unpack_from(">h", frame, 10 + 6 * i)[0] for i in range(count)}
        assert {0, 1, 2, 3, 18, 19, 22, 23} <= keys


def test_unsupported_version_of_another_api_closes_only_that_connection(strict):
    with socket.create_connection(("127.0.0.1", strict.base_port)) as sock:
        sock.sendall(raw_frame(PRODUCE, 99, 1, b"\x00" * 16))
        assert connection_closed(sock)
    assert still_serving(strict)


@pytest.mark.parametrize("junk", [
    struct.pack(">i", -5) + b"abcd",                                   # negative length
    struct.pack(">i", 50_000_000) + b"\x00" * 64,                       # over socket.request.max.bytes
    struct.pack(">i", 3) + b"\x00\x03\x00",                             # shorter than a header
    raw_frame(METADATA, 4, 3, b"\x7f\xff\xff\xff"),                     # truncated body
    raw_frame(PRODUCE, 7, 4, b"\xff" * 40),                             # garbage body
    raw_frame(1234, 0, 5),                                              # unknown API key
], ids=["negative", "oversized", "short", "truncated", "garbage", "unknown-api"])
def test_malformed_frames_close_that_connection_and_the_broker_serves_others(strict, junk):
    bystander = KafkaConnection(strict.bootstrap)
    with socket.create_connection(("127.0.0.1", strict.base_port)) as sock:
        sock.sendall(junk)
        assert connection_closed(sock)
    assert latest(bystander) >= 0
    bystander.close()
    assert still_serving(strict)


def test_fuzzed_frames_never_take_the_broker_down(strict):
    """Random bytes and mutated valid frames: at worst that connection closes."""
    rng = random.Random(20261122)
    with KafkaConnection(strict.bootstrap) as conn:
        before = latest(conn, replica_id=-2)
    valid = [raw_frame(METADATA, 4, 1, struct.pack(">i", -1) + b"\x00"),
             raw_frame(API_VERSIONS, 0, 2),
             raw_frame(LIST_OFFSETS, 2, 3, struct.pack(">ib", -1, 0) + struct.pack(">i", 1)
                       + struct.pack(">h", 1) + b"t" + struct.pack(">iiq", 1, 0, -1))]
    for case in range(300):
        if rng.random() < 0.3:
            data = rng.randbytes(rng.randrange(1, 200))
        else:
            data = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                kind = rng.randrange(3)
                if kind == 0 and data:
                    i = rng.randrange(len(data))
                    data[i] ^= 1 << rng.randrange(8)
                elif kind == 1 and len(data) > 1:
                    data = data[:rng.randrange(1, len(data))]
                else:
                    data += rng.randbytes(rng.randrange(1, 20))
            data = bytes(data)
        with socket.create_connection(("127.0.0.1", strict.base_port)) as sock:
            sock.settimeout(5)
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            try:
                while sock.recv(65536):
                    pass
            except (ConnectionResetError, socket.timeout):
                pass
        if case % 50 == 0:
            assert still_serving(strict), f"broker stopped serving after fuzz case {case}"
    assert still_serving(strict)
    with KafkaConnection(strict.bootstrap) as conn:
        assert latest(conn, replica_id=-2) == before  # nothing junk was appended


def test_the_largest_topic_the_broker_accepts_is_created_in_zookeeper_and_deleted(strict):
    """A topic's znodes are created in one ZooKeeper multi: the broker refuses a topic one partition
    too big for it at once (INVALID_PARTITIONS, naming the limit), and the real ZooKeeper accepts the
    largest one it lets through (a bigger request would close its connection: jute.maxbuffer). A
    long name keeps the limit, and the test, small."""
    name = "big-" + "x" * 236

    def create(conn: KafkaConnection, partitions: int):
        return conn.request(19, 5, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                                "assignments": [], "configs": []}],
                                    "timeout": 60000, "validate_only": False}).topics[0]

    with KafkaConnection(strict.bootstrap, timeout_s=120) as conn:
        refused = create(conn, 1_000_000)
        assert refused.error_code == ErrorCode.invalid_partitions
        limit = int(re.search(r"above the limit of (\d+)", refused.error_message).group(1))
        assert create(conn, limit + 1).error_code == ErrorCode.invalid_partitions
        assert create(conn, limit).error_code == ErrorCode.none
        resp = conn.request(METADATA, 4, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
        assert len(resp.topics[0].partitions) == limit
        deleted = conn.request(20, 4, {"topic_names": [name], "timeout": 60000})
        assert deleted.responses[0].error_code == ErrorCode.none
    assert still_serving(strict)
