"""``strandline fuzz``: fuzzed frames over many connections against a running cluster, bounded in
time, seeded and recorded, with a check each minute that every broker still answers and that a
normal producer and consumer still work.

Each connection sends its frames (:meth:`FrameMaker.connection`) at once, then waits for the
broker to answer them or close the connection. A request that gets neither within
``--hang-timeout`` is a hang, unless it is one that may wait by design (a JoinGroup or SyncGroup
waiting for its group, a request whose own timeout is longer) or the broker still waits for the
rest of a frame. A broker whose process is gone, or that does not answer ApiVersions and Metadata,
is a death.

On a listener that asks for SASL (``--command-config`` names the listener's settings, which the
fuzzer's own checks use), the fuzzed connections never authenticate: the broker may answer
ApiVersions, SaslHandshake and SaslAuthenticate on them and nothing else; an answer to any other
request is counted as served before authentication, and fails the run. On a TLS listener the
fuzzed connections make their TLS handshake first.

Every connection's bytes are written to the run's record file before they are sent
(``fuzz-<seed>-<time>.rec.gz`` under ``--record-dir``): ``--replay FILE`` sends them again, in
order, one connection at a time, and names the first connection after which a broker no longer
answers.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import random
import ssl
import struct
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Iterator, TextIO

from strandline.fuzz.frames import FrameMaker, frames_seen, well_formed

MAGIC = b"STRANDLINE-FUZZ 1\n"
_RECORD = struct.Struct(">IHI")          # connection number, broker index, stream length
JOIN_GROUP, SYNC_GROUP, PRODUCE = 11, 14, 0
#: what a SASL listener may answer before the connection has authenticated
BEFORE_AUTHENTICATION = frozenset({17, 18, 36})     # SaslHandshake, ApiVersions, SaslAuthenticate
CHECK_MESSAGES = 10


# -- how the brokers are reached ----------------------------------------------------------------

def _plain_connection(address: str, timeout_s: float, client_id: str) -> Any:
    from strandline.runtime.client import KafkaConnection

    return KafkaConnection(address, timeout_s=timeout_s, client_id=client_id)


@dataclass(frozen=True)
class Access:
    """How the fuzzer reaches the listener: ``connect`` opens an authenticated protocol connection
    for its own checks, ``client_conf`` is the check clients' librdkafka security settings,
    ``tls`` the context its fuzzed connections handshake with (None: plain TCP), and ``sasl``
    whether the listener asks for SASL (fuzzed connections never authenticate)."""

    connect: Callable[[str, float, str], Any] = _plain_connection
    client_conf: dict[str, str] = field(default_factory=dict)
    tls: ssl.SSLContext | None = None
    sasl: bool = False


PLAINTEXT = Access()


# -- brokers ------------------------------------------------------------------------------------

@dataclass
class BrokerTarget:
    node_id: int
    host: str
    port: int
    pid: int | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def discover(bootstrap: str, access: Access = PLAINTEXT) -> tuple[list[BrokerTarget], dict[int, tuple[int, int]]]:
    """The cluster's brokers (from Metadata) and the API versions the bootstrap broker advertises."""
    with access.connect(bootstrap, 10, "strandline-fuzz") as conn:
        versions = conn.request(18, 3, {"client_software_name": "strandline-fuzz",
                                        "client_software_version": "1"})
        metadata = conn.request(3, 9, {"topics": [], "allow_auto_topic_creation": False,
                                       "include_cluster_authorized_operations": False,
                                       "include_topic_authorized_operations": False})
    brokers = sorted((BrokerTarget(b.node_id, b.host, b.port) for b in metadata.brokers), key=lambda b: b.node_id)
    for broker in brokers:
        broker.pid = listening_pid(broker.port) if broker.host in ("127.0.0.1", "localhost", "::1") else None
    return brokers, {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}


def listening_pid(port: int) -> int | None:
    """The process listening on this machine's TCP ``port`` (Linux /proc), or None."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except OSError:
            continue
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return int(pid)
        except OSError:
            continue
    return None


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def answers(broker: BrokerTarget, timeout_s: float = 10.0, access: Access = PLAINTEXT) -> str | None:
    """None if ``broker`` answers ApiVersions and Metadata, else what went wrong."""
    try:
        with access.connect(broker.address, timeout_s, "strandline-fuzz-check") as conn:
            conn.request(18, 3, {"client_software_name": "strandline-fuzz", "client_software_version": "1"})
            conn.request(3, 9, {"topics": [], "allow_auto_topic_creation": False,
                                "include_cluster_authorized_operations": False,
                                "include_topic_authorized_operations": False})
    except Exception as exc:
        return f"broker {broker.node_id} ({broker.address}) does not answer: {exc}"
    return None


def check_clients(bootstrap: str, topic: str, tag: str, timeout_s: float = 30.0,
                  access: Access = PLAINTEXT) -> str | None:
    """None if a producer (acks=all) delivers CHECK_MESSAGES records to ``topic`` and a consumer
    reads every one of them back, else what went wrong."""
    from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

    producer = Producer({**access.client_conf, "bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": int(timeout_s * 1000), "enable.idempotence": True, "log_level": 0})
    delivered: list[tuple[int, int, bytes | None]] = []
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(str(err))
        elif (p := msg.partition()) is not None and (o := msg.offset()) is not None:
            delivered.append((p, o, msg.value()))

    for i in range(CHECK_MESSAGES):
        producer.produce(topic, value=f"{tag}-{i}".encode(), on_delivery=on_delivery)
    left = producer.flush(timeout_s)
    if left or errors or len(delivered) != CHECK_MESSAGES:
        return f"the producer delivered {len(delivered)} of {CHECK_MESSAGES} records ({'; '.join(errors[:2])})"
    consumer = Consumer({**access.client_conf, "bootstrap.servers": bootstrap, "group.id": f"strandline-fuzz-check-{tag}",
                         "enable.auto.commit": False, "log_level": 0})
    try:
        first: dict[int, int] = {}
        for p, o, _ in delivered:
            first[p] = min(o, first.get(p, o))
        consumer.assign([TopicPartition(topic, p, o) for p, o in sorted(first.items())])
        wanted = {v for _, _, v in delivered}
        deadline = time.monotonic() + timeout_s
        while wanted and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                wanted.discard(msg.value())
        if wanted:
            return f"the consumer read {CHECK_MESSAGES - len(wanted)} of the {CHECK_MESSAGES} records produced"
    finally:
        consumer.close()
    return None


def create_check_topic(bootstrap: str, topic: str, replication: int, access: Access = PLAINTEXT) -> None:
    from kio.schema.errors import ErrorCode

    deadline = time.monotonic() + 30
    while True:
        with access.connect(bootstrap, 30, "strandline-fuzz") as conn:
            metadata = conn.request(3, 9, {"topics": [], "allow_auto_topic_creation": False,
                                           "include_cluster_authorized_operations": False,
                                           "include_topic_authorized_operations": False})
        controller = next((b for b in metadata.brokers if b.node_id == metadata.controller_id), None)
        code = ErrorCode.not_controller
        if controller is not None:
            with access.connect(f"{controller.host}:{controller.port}", 30, "strandline-fuzz") as conn:
                resp = conn.request(19, 4, {"topics": [{"name": topic, "num_partitions": 3,
                                                        "replication_factor": replication,
                                                        "assignments": [], "configs": []}],
                                            "timeout": 30000, "validate_only": False})
            code = resp.topics[0].error_code
        if code in (ErrorCode.none, ErrorCode.topic_already_exists):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"cannot create the check topic {topic}: {code.name}")
        time.sleep(0.5)


# -- recording ----------------------------------------------------------------------------------

class Recorder:
    """Writes each connection's bytes, before they are sent, to a gzip file."""

    def __init__(self, path: str, meta: dict[str, Any]) -> None:
        self.path = path
        self.file = gzip.open(path, "wb", compresslevel=1)
        self.file.write(MAGIC + json.dumps(meta).encode() + b"\n")

    def write(self, conn_no: int, broker_index: int, stream: bytes) -> None:
        self.file.write(_RECORD.pack(conn_no, broker_index, len(stream)) + stream)

    def close(self) -> None:
        self.file.close()


def read_record(path: str) -> tuple[dict[str, Any], Iterator[tuple[int, int, bytes]]]:
    """A record file's header and its connections: (number, broker index, bytes), in order. A
    file cut short (the fuzzer was killed) yields what it holds."""
    f = gzip.open(path, "rb")
    magic = f.read(len(MAGIC))
    if magic != MAGIC:
        raise ValueError(f"{path} is not a strandline fuzz record")
    meta = json.loads(f.readline())

    def connections() -> Iterator[tuple[int, int, bytes]]:
        try:
            while True:
                head = f.read(_RECORD.size)
                if len(head) < _RECORD.size:
                    return
                conn_no, broker_index, size = _RECORD.unpack(head)
                stream = f.read(size)
                if len(stream) < size:
                    return
                yield conn_no, broker_index, stream
        except EOFError:
            return
        finally:
            f.close()

    return meta, connections()


# -- one connection -----------------------------------------------------------------------------

@dataclass
class Outcome:
    hang: str | None = None             # what hung, if something did
    parked: bool = False                # a request that may wait by design was still waiting
    refused: bool = False               # the broker did not accept the connection
    served: str | None = None           # what a SASL listener answered before authentication


def _may_wait(frame: bytes, hang_timeout_s: float) -> bool:
    """A request a broker may hold longer than the hang timeout by design."""
    request = well_formed(frame)
    if request is None:
        return False
    api_key = struct.unpack_from(">h", frame)[0]
    if api_key in (JOIN_GROUP, SYNC_GROUP):
        return True
    if isinstance(request, dict):
        return False
    for name in ("timeout", "timeout_ms", "max_wait", "max_wait_ms", "rebalance_timeout", "session_timeout"):
        value = getattr(request, name, None)
        if isinstance(value, timedelta):
            value = value.total_seconds() * 1000
        if isinstance(value, (int, float)) and value >= hang_timeout_s * 1000 * 0.5:
            return True
        if isinstance(value, (int, float)) and value < 0 and api_key != PRODUCE:
            return True                 # a negative timeout: the broker may take it as "forever"
    return False


def _silent(frame: bytes) -> bool:
    """An acks=0 Produce: the broker answers nothing."""
    if len(frame) < 2 or struct.unpack_from(">h", frame)[0] != PRODUCE:
        return False
    request = well_formed(frame)
    return request is not None and getattr(request, "acks", None) == 0


async def exchange(host: str, port: int, stream: bytes, max_frame_bytes: int, hang_timeout_s: float,
                   access: Access = PLAINTEXT) -> Outcome:
    """Send ``stream`` on a new connection; wait until the broker answered every frame, closed the
    connection, or ``hang_timeout_s`` passed. On a SASL listener, an answer to a request other than
    ApiVersions, SaslHandshake and SaslAuthenticate is recorded in :attr:`Outcome.served`."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=access.tls, server_hostname=host if access.tls else None),
            hang_timeout_s)
    except (OSError, ssl.SSLError, asyncio.TimeoutError):
        return Outcome(refused=True)
    seen, ending = frames_seen(stream, max_frame_bytes)
    silent = [_silent(e.frame) for e in seen]
    last_index = -1
    index_of = {e.correlation_id: i for i, e in enumerate(seen) if e.correlation_id is not None}
    apis_of: dict[int, set[int]] = {}
    for e in seen:
        if e.correlation_id is not None and len(e.frame) >= 2:
            apis_of.setdefault(e.correlation_id, set()).add(struct.unpack_from(">h", e.frame)[0])
    served: str | None = None
    closed = False
    try:
        writer.write(stream)
        deadline = time.monotonic() + hang_timeout_s
        while True:
            waiting = [i for i in range(last_index + 1, len(seen)) if not silent[i]]
            if not waiting and ending != "bad size":
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                head = await asyncio.wait_for(reader.readexactly(4), left)
                (size,) = struct.unpack(">i", head)
                body = await asyncio.wait_for(reader.readexactly(size), max(deadline - time.monotonic(), 0.001))
            except asyncio.TimeoutError:       # first: in Python 3.11 it is an OSError
                break
            except (asyncio.IncompleteReadError, OSError):
                closed = True
                break
            if len(body) >= 4:
                (corr,) = struct.unpack_from(">i", body)
                if corr in index_of:
                    last_index = max(last_index, index_of[corr])
                apis = apis_of.get(corr, set())
                if access.sasl and served is None and apis and not apis & BEFORE_AUTHENTICATION:
                    served = f"API {sorted(apis)} answered before authentication (correlation id {corr})"
    finally:
        writer.transport.abort()
    if served is not None:
        return Outcome(served=served)
    if closed:
        return Outcome()
    waiting = [i for i in range(last_index + 1, len(seen)) if not silent[i]]
    if not waiting:
        if ending == "bad size":
            return Outcome(hang=f"no close within {hang_timeout_s:g} s after a frame size the broker must refuse")
        return Outcome()
    blocker = seen[waiting[0]]
    if _may_wait(blocker.frame, hang_timeout_s):
        return Outcome(parked=True)
    return Outcome(hang=f"no answer and no close within {hang_timeout_s:g} s to frame {blocker.frame.hex()}")


# -- the run ------------------------------------------------------------------------------------

@dataclass
class Totals:
    frames: int = 0
    connections: int = 0
    refused: int = 0
    parked: int = 0
    hangs: list[str] = field(default_factory=list)
    unauthenticated: list[str] = field(default_factory=list)   # answers before authentication
    kinds: dict[str, int] = field(default_factory=lambda: {"structured": 0, "mutated": 0, "random": 0})


def _connection_rng(seed: int, conn_no: int) -> random.Random:
    return random.Random(seed * 1_000_003 + conn_no)


async def fuzz(bootstrap: str, minutes: float, seed: int, record_dir: str, concurrency: int = 32,
               hang_timeout_s: float = 10.0, max_frame_bytes: int = 104857600, inter_broker: bool = False,
               max_frames: int | None = None, out: TextIO = sys.stdout, access: Access = PLAINTEXT) -> int:
    """Fuzz for ``minutes`` (or until ``max_frames`` are sent); 0 when no broker died, no request
    hung and every check passed, else 1."""
    brokers, versions = await asyncio.to_thread(discover, bootstrap, access)
    check_topic = f"strandline-fuzz-check-{seed}"
    await asyncio.to_thread(create_check_topic, bootstrap, check_topic, min(3, len(brokers)), access)
    maker = FrameMaker(versions, seed, inter_broker=inter_broker)
    os.makedirs(record_dir, exist_ok=True)
    path = os.path.join(record_dir, f"fuzz-{seed}-{time.strftime('%Y%m%d-%H%M%S')}.rec.gz")
    recorder = Recorder(path, {"seed": seed, "bootstrap": bootstrap, "started": time.time(),
                               "brokers": [b.address for b in brokers], "max_frame_bytes": max_frame_bytes})
    print(f"fuzz: seed {seed}, {len(brokers)} brokers ({', '.join(b.address for b in brokers)}), "
          f"{len(maker.versions)} APIs, recording to {path}", file=out, flush=True)
    totals = Totals()
    dead: dict[int, str] = {}
    failed_checks: list[str] = []
    started = time.monotonic()
    stop_at = started + minutes * 60
    next_conn = 0

    async def worker() -> None:
        nonlocal next_conn
        nonlocal stop_at
        while time.monotonic() < stop_at:
            if max_frames is not None and totals.frames >= max_frames:
                stop_at = time.monotonic()
                break
            conn_no = next_conn
            next_conn += 1
            rng = _connection_rng(seed, conn_no)
            stream, kinds = maker.connection(rng)
            index = conn_no % len(brokers)
            broker = brokers[index]
            if broker.node_id in dead:
                continue
            recorder.write(conn_no, index, stream)
            outcome = await exchange(broker.host, broker.port, stream, max_frame_bytes, hang_timeout_s, access)
            totals.connections += 1
            totals.frames += sum(kinds.values())
            for kind, n in kinds.items():
                totals.kinds[kind] += n
            if outcome.refused:
                totals.refused += 1
            if outcome.parked:
                totals.parked += 1
            if outcome.hang:
                totals.hangs.append(f"connection {conn_no} to broker {broker.node_id}: {outcome.hang}")
                print(f"fuzz: HANG on connection {conn_no} to broker {broker.node_id}: {outcome.hang[:300]}",
                      file=out, flush=True)
            if outcome.served:
                totals.unauthenticated.append(f"connection {conn_no} to broker {broker.node_id}: {outcome.served}")
                print(f"fuzz: SERVED BEFORE AUTHENTICATION on connection {conn_no} to broker {broker.node_id}: "
                      f"{outcome.served}", file=out, flush=True)

    async def check(label: str) -> None:
        for broker in brokers:
            if broker.node_id in dead:
                continue
            gone = broker.pid is not None and not pid_alive(broker.pid)
            problem = f"broker {broker.node_id} (pid {broker.pid}) is gone" if gone else \
                await asyncio.to_thread(answers, broker, 10.0, access)
            if problem:
                # a second chance for a slow answer
                if gone or (await asyncio.to_thread(answers, broker, 10.0, access)) is not None:
                    dead[broker.node_id] = problem
                    print(f"fuzz: DEATH: {problem}", file=out, flush=True)
        problem = await asyncio.to_thread(check_clients, bootstrap, check_topic, f"{seed}-{label}", 30.0, access)
        if problem:
            failed_checks.append(f"{label}: {problem}")
            print(f"fuzz: CHECK FAILED after {label}: {problem}", file=out, flush=True)

    def rss_text() -> str:
        return ", ".join(f"broker {b.node_id} {_mb(rss_mb(b.pid))}" for b in brokers)

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    minute = 0
    last_frames = 0
    try:
        while time.monotonic() < stop_at:
            minute_end = time.monotonic() + 60.0
            while time.monotonic() < min(minute_end, stop_at):
                await asyncio.sleep(min(1.0, max(min(minute_end, stop_at) - time.monotonic(), 0.0)))
            if time.monotonic() < minute_end:   # stopped before the minute was over: checked below
                break
            minute += 1
            frames_now = totals.frames
            elapsed = time.monotonic() - started
            await check(f"minute {minute}")
            print(f"fuzz: minute {minute}: {totals.frames:,} frames ({(frames_now - last_frames) / 60:,.0f}/s "
                  f"this minute), {totals.connections:,} connections, {len(dead)} deaths, {len(totals.hangs)} hangs, "
                  f"{totals.parked} parked, {len(failed_checks)} failed checks, RSS {rss_text()} "
                  f"({elapsed:,.0f} s)", file=out, flush=True)
            last_frames = frames_now
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        recorder.close()
    if time.monotonic() - started - minute * 60 > 1:         # a last check for the part after the last minute
        await check("the end")
    elapsed = time.monotonic() - started
    ok = not dead and not totals.hangs and not failed_checks and not totals.unauthenticated
    before = f"{len(totals.unauthenticated)} answers before authentication, " if access.sasl else ""
    print(f"fuzz: {'OK' if ok else 'FAILED'}: {totals.frames:,} frames ({totals.kinds['structured']:,} structured, "
          f"{totals.kinds['mutated']:,} mutated, {totals.kinds['random']:,} random), {totals.connections:,} "
          f"connections in {elapsed:,.0f} s ({totals.frames / max(elapsed, 1e-9):,.0f} frames/s), "
          f"{len(dead)} broker deaths, {len(totals.hangs)} hangs, {len(failed_checks)} failed checks, {before}"
          f"{totals.parked} parked, {totals.refused} refused connections; RSS {rss_text()}; seed {seed}; "
          f"record {path}", file=out, flush=True)
    return 0 if ok else 1


def _mb(value: float | None) -> str:
    return "? MB" if value is None else f"{value:.0f} MB"


async def replay(bootstrap: str, path: str, hang_timeout_s: float = 10.0, only: int | None = None,
                 check_every: int = 1000, out: TextIO = sys.stdout, access: Access = PLAINTEXT) -> int:
    """Send a record's connections again, in order, one at a time; 1 if a broker stopped
    answering or a request hung (naming the connection), else 0."""
    brokers, _ = await asyncio.to_thread(discover, bootstrap, access)
    meta, connections = read_record(path)
    max_frame_bytes = meta.get("max_frame_bytes", 104857600)
    sent = 0
    recent: list[int] = []
    hangs = 0
    for conn_no, index, stream in connections:
        if only is not None and conn_no != only:
            continue
        broker = brokers[index % len(brokers)]
        outcome = await exchange(broker.host, broker.port, stream, max_frame_bytes, hang_timeout_s, access)
        sent += 1
        recent = (recent + [conn_no])[-check_every:]
        if outcome.hang:
            hangs += 1
            print(f"replay: HANG on connection {conn_no} to broker {broker.node_id}: {outcome.hang[:300]}",
                  file=out, flush=True)
        if outcome.served:
            hangs += 1
            print(f"replay: SERVED BEFORE AUTHENTICATION on connection {conn_no} to broker {broker.node_id}: "
                  f"{outcome.served}", file=out, flush=True)
        if only is not None or sent % check_every == 0 or outcome.refused:
            for b in brokers:
                problem = await asyncio.to_thread(answers, b, hang_timeout_s, access)
                if problem:
                    print(f"replay: {problem}, after connection {conn_no} (one of connections "
                          f"{recent[0]}-{recent[-1]})", file=out, flush=True)
                    return 1
    for b in brokers:
        problem = await asyncio.to_thread(answers, b, hang_timeout_s, access)
        if problem:
            print(f"replay: {problem} after the last connection", file=out, flush=True)
            return 1
    print(f"replay: {sent:,} connections sent again, every broker answers, {hangs} hangs", file=out, flush=True)
    return 1 if hangs else 0


def new_seed() -> int:
    return uuid.uuid4().int % 1_000_000_000
