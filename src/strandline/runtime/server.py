"""The asyncio shell around the broker core: sockets, the clock, timers and ZooKeeper calls.

Each connection answers its requests strictly in order, one at a time, as Kafka does: while a
request waits in purgatory (acks=all, long-poll fetch) the connection's later requests queue.
Reading pauses when a connection queues too much or its peer stops reading our responses: the
requests a client pipelines then wait in the socket's buffers and in the client, not in the
broker's memory (Kafka reads no further request of a connection while one is in flight).

Every event reaches the core through :meth:`BrokerShell.run`. An exception there, in a task of
the shell or in any callback of the loop is not an outcome the broker can go on from (the core's
expected outcomes are error codes, ZooKeeper's are ``ZkError`` results): :class:`Stopper` logs it
as one ERROR line and the broker stops, exiting non-zero.

A client's request cannot stop the broker that way: the request router
(:meth:`strandline.broker.apis.KafkaApis.handle_request`) answers a request whose handling fails
with UNKNOWN_SERVER_ERROR, or closes its connection when its frame cannot be parsed, and lets
only a :class:`~strandline.errors.BrokenInvariant` of the broker's own state, a failing disk
(``OSError``) or ``MemoryError`` through (``STOPS_THE_BROKER``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import ssl
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from strandline.broker.broker import Broker
from strandline.core.effects import (BrokerSend, Close, FlushFiles, LogLine, ReadClusterState, Send, SetLoggerLevel,
                                       WriteCheckpoint, ZkRequest)
from strandline.coordination.store import OpResult, ZkError
from strandline.log.disk import FileRegion
from strandline.runtime.disk import flush_ledger, fsync_directory
from strandline.runtime.channels import BrokerChannels
from strandline.protocol.frames import FrameDecoder, ProtocolError
from strandline.runtime.framed import FramedProtocol
from strandline.runtime.live_brokers import BrokerListings, read_full_cluster_state
from strandline.runtime.loggers import set_logger_level
from strandline.runtime.monitoring import request_name
from strandline.runtime.tls import peer_dn
from strandline.core.listeners import Listener
from strandline.security.acl import ANONYMOUS
from strandline.security.authenticator import SaslAuthenticator, ssl_principal

#: How soon a ZooKeeper request made while the session has no connection is answered CONNECTION_LOSS.
DISCONNECTED_ZK_ANSWER_S = 0.1

log = logging.getLogger("strandline.broker")
_NUMBERS = re.compile(r"\d+")

#: A connection stops being read while it has this many requests waiting behind the one being
#: answered, or this many bytes of them: a producer pipelining megabyte requests (librdkafka's
#: max.in.flight is 1,000,000) would otherwise have the broker hold 64 of them per connection.
MAX_QUEUED_FRAMES = 64
MAX_QUEUED_BYTES = 1024 * 1024


def _sendfile(sock_fd: int, region: FileRegion) -> int:
    """Bytes of ``region`` the socket took with ``sendfile`` (0 when it takes nothing now)."""
    sent, size, file_fd = 0, region.size, region.fd
    try:
        while sent < size:
            n = os.sendfile(sock_fd, file_fd, region.position + sent, size - sent)
            if n <= 0:
                break
            sent += n
    except (BlockingIOError, InterruptedError):
        pass
    except OSError:
        pass  # the rest goes through the transport, which reports a broken connection its own way
    return sent


def send_now(fd: int, buffers: Any, write: Callable[[Any], Any]) -> None:
    """Write ``buffers`` (bytes-like objects and :class:`FileRegion` s) to the non-blocking socket
    ``fd`` now, as far as it takes them: each run of buffers with one writev, each region with
    ``sendfile``. What it does not take goes, in order, to ``write`` (the transport, which
    buffers it), a region's rest read from its file."""
    i, n = 0, len(buffers)
    while i < n:
        buf = buffers[i]
        if buf.__class__ is FileRegion:
            sent = _sendfile(fd, buf)
            i += 1
            if sent < buf.size:
                write(buf.read(sent))
                break
            continue
        j = i + 1
        while j < n and buffers[j].__class__ is not FileRegion:
            j += 1
        run = buffers[i:j]
        i = j
        try:
            sent = os.writev(fd, run)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            sent = 0  # the transport reports the error on its own write below
        short = False
        for buf in run:
            size = len(buf)
            if sent >= size:
                sent -= size
            else:
                write(memoryview(buf)[sent:] if sent else buf)
                sent = 0
                short = True
        if short:
            break
    for buf in buffers[i:]:
        write(buf.read() if buf.__class__ is FileRegion else buf)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def describe(exc: BaseException) -> str:
    """``Type: message (at file:line in function)`` of where ``exc`` was raised: one line."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name})" \
        if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


class Stopper:
    """Ends the broker: a stop asked for (a signal), or the first failure of the shell's tasks and
    callbacks, reported as one ERROR line naming what failed (the traceback at DEBUG)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.requested = asyncio.Event()
        self.failure: str | None = None
        loop.set_exception_handler(self._on_loop_exception)

    def fail(self, what: str, exc: BaseException | None = None) -> None:
        if self.failure is None:
            self.failure = f"{what} failed: {describe(exc)}" if exc is not None else what
            log.error("Stopping the broker: %s", self.failure)
            if exc is not None:
                log.debug("Traceback of the failure", exc_info=exc)
        self.requested.set()

    def _on_loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        self.fail(context.get("message") or "a callback of the event loop", context.get("exception"))


@dataclass
class ListenerSpec:
    """One listener as the shell serves it: where, its TLS context (SSL, SASL_SSL), and for SASL
    listeners the authenticator each connection gets (``authenticator()``), with the principal of
    a client certificate mapped by ``principal_rules``."""

    listener: Listener
    ssl_context: ssl.SSLContext | None = None
    authenticator: Callable[[], SaslAuthenticator] | None = None
    principal_rules: str = "DEFAULT"
    failure_delay_ms: int = 100         # connection.failed.authentication.delay.ms
    max_unauthenticated_bytes: int = 524288     # sasl.server.max.receive.size


PLAINTEXT_SPEC = ListenerSpec(Listener("PLAINTEXT", "127.0.0.1", 0))


class Connection(FramedProtocol):
    def __init__(self, shell: "BrokerShell", conn_id: int, spec: ListenerSpec = PLAINTEXT_SPEC) -> None:
        self.shell = shell
        self.conn_id = conn_id
        self.spec = spec
        self.authenticator: SaslAuthenticator | None = None
        self.decoder = FrameDecoder(shell.max_request_bytes)
        self.queue: collections.deque = collections.deque()
        self.queued_bytes = 0                                       # of the frames in the queue
        self.arrivals: collections.deque = collections.deque()      # when each queued frame came
        self.current: tuple[str, float] | None = None               # the request being answered: API, arrival
        self.busy = False
        self.writable = True
        self.reading = True
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.host = ""
        self.principal = ANONYMOUS              # once the broker knows the connection
        self.fd = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """(Over TLS: once the handshake is done.)"""
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        tls = transport.get_extra_info("ssl_object")
        # the socket is written directly (writev, sendfile) only without TLS
        self.fd = sock.fileno() if sock is not None and tls is None else -1
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = peer[0] if peer else ""
        self.shell.connections[self.conn_id] = self
        if self.spec.authenticator is not None:       # the broker hears of it once authenticated
            self.authenticator = self.spec.authenticator()
            self.decoder.max_frame_bytes = min(self.spec.max_unauthenticated_bytes, self.decoder.max_frame_bytes)
            return
        principal = ssl_principal(peer_dn(tls), self.spec.principal_rules) if tls is not None else ANONYMOUS
        self.opened(principal)

    def opened(self, principal: str) -> None:
        self.principal = principal
        listener = self.spec.listener.name
        self.shell.run(f"accepting a connection from {self.peer}",
                       lambda: self.shell.broker.connection_opened(self.conn_id, self.host, listener, principal))

    def authenticate(self, frame: bytes) -> bool:
        """Hand ``frame`` to the SASL authenticator; False when it is an ordinary request (for the
        broker), True when the authenticator took it."""
        assert self.authenticator is not None
        try:
            step = self.authenticator.receive(frame, now_ms())
        except Exception as exc:        # a bug of a mechanism: this connection fails, the broker serves on
            log.error("SASL authentication of connection %s from %s failed: %s", self.conn_id, self.peer,
                      describe(exc), extra={"kind": "SASL authentication failed"})
            self.close("SASL authentication failed")
            return True
        if step.forward:
            return False
        transport = self.transport
        if step.close is not None and transport is not None:
            # as Kafka: the answer and the close wait connection.failed.authentication.delay.ms,
            # reading nothing more meanwhile
            self.busy = True
            self.queue.clear()
            self.queued_bytes = 0
            self.arrivals.clear()
            if self.reading:
                self.reading = False
                transport.pause_reading()
            reason = step.close

            def fail() -> None:
                if self.transport is not None:
                    for data in step.send:
                        self.transport.write(data)
                    self.close(reason)
            self.shell.loop.call_later(self.spec.failure_delay_ms / 1000, fail)
            return True
        if transport is not None:
            for data in step.send:
                transport.write(data)
        if step.principal is not None:
            self.decoder.max_frame_bytes = self.shell.max_request_bytes
            log.debug("Connection %s from %s on %s authenticated as %s", self.conn_id, self.peer,
                      self.spec.listener.name, step.principal)
            self.opened(step.principal)
        return True

    def malformed(self, exc: ProtocolError) -> None:
        self.close(f"malformed request: {exc}")

    def frames_received(self, frames: list[bytes]) -> None:
        if frames and self.transport is not None and not self.transport.is_closing():
            self.queue.extend(frames)
            self.queued_bytes += sum(map(len, frames))
            if self.shell.request_metrics is not None:
                self.arrivals.extend([time.perf_counter()] * len(frames))
            self.pump()

    def pump(self) -> None:
        shell = self.shell
        while not self.busy and self.writable and self.queue and self.transport is not None:
            frame = self.queue.popleft()
            self.queued_bytes -= len(frame)
            arrival = self.arrivals.popleft() if shell.request_metrics is not None else 0.0
            if self.authenticator is not None and self.authenticate(frame):
                continue                    # (which may have closed the connection and emptied the queue)
            if shell.request_metrics is not None:
                self.current = (request_name(frame), arrival)
            self.busy = True
            shell.run(f"handling a request from {self.peer}",
                      lambda: shell.broker.handle_request(self.conn_id, frame, now_ms()))  # noqa: B023  (run at once)
        if self.transport is None:
            return
        if self.reading:
            if len(self.queue) >= MAX_QUEUED_FRAMES or self.queued_bytes >= MAX_QUEUED_BYTES:
                self.reading = False
                self.transport.pause_reading()
        elif len(self.queue) < MAX_QUEUED_FRAMES // 2 and self.queued_bytes < MAX_QUEUED_BYTES // 2:
            self.reading = True
            self.transport.resume_reading()

    def send(self, buffers: Any, throttle_ms: int = 0) -> None:
        """Write a response. When nothing is buffered before it, it goes straight to the socket:
        runs of buffers with one writev each (the record bytes are not joined or copied, and an
        answer of several buffers costs one system call, not one each) and stored batches
        (:class:`FileRegion`) with ``sendfile``; only what the socket does not take is buffered."""
        transport = self.transport
        if transport is None:
            return
        if self.current is not None and self.shell.request_metrics is not None:
            self.shell.request_metrics.observe(self.current[0], self.current[1], time.perf_counter())
        self.current = None
        try:
            if buffers:
                if self.fd >= 0 and transport.get_write_buffer_size() == 0 and not transport.is_closing():
                    send_now(self.fd, buffers, transport.write)     # one writev for the whole answer
                else:
                    for buf in buffers:
                        transport.write(buf.read() if buf.__class__ is FileRegion else buf)
        except OSError as exc:  # a fetched region the segment no longer holds: no answer can be whole
            self.close(f"cannot send a response: {exc}")
        if throttle_ms > 0:     # over its quota: the next request waits (Kafka mutes the channel)
            self.shell.loop.call_later(throttle_ms / 1000, self.unthrottle)
            return
        self.busy = False

    def unthrottle(self) -> None:
        self.busy = False
        self.pump()

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        self.shell.loop.call_soon(self.pump)

    def close(self, reason: str) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.queue.clear()              # what it sent after is not served
            self.queued_bytes = 0
            self.arrivals.clear()
            who = "" if self.principal == ANONYMOUS else f" ({self.principal})"
            log.info("Closing connection %s from %s%s: %s", self.conn_id, self.peer, who, reason,
                     extra={"kind": "closing a connection: " + _NUMBERS.sub("#", reason.split(":", 1)[0])[:100]})
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.queue.clear()
        self.queued_bytes = 0
        self.arrivals.clear()
        self.shell.connections.pop(self.conn_id, None)

        def closed() -> list:
            self.shell.broker.connection_closed(self.conn_id)
            return []

        self.shell.run(f"closing the connection from {self.peer}", closed)


class CheckpointWriter:
    """Writes checkpoint files (``WriteCheckpoint``) on a worker thread, one at a time and in order,
    so that their fsyncs never hold up the event loop. A write still waiting gives way to a newer
    one of the same path; ``drained`` waits until everything given has been written."""

    def __init__(self, disk: Callable[[], Any], spawn: Callable[[str, Any], None]) -> None:
        self.disk = disk                      # the broker's Disk, asked for when a write starts
        self.spawn = spawn
        self.waiting: dict[str, bytes] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    def write(self, path: str, content: bytes) -> None:
        self.waiting[path] = content          # a newer content takes a waiting older one's place
        if self._idle.is_set():
            self._idle.clear()
            self.spawn("writing a checkpoint file", self._run())

    async def _run(self) -> None:
        try:
            while self.waiting:
                path = next(iter(self.waiting))
                content = self.waiting.pop(path)
                await asyncio.to_thread(self.disk().write_file_atomic, path, content)
        finally:
            self._idle.set()

    async def drained(self) -> None:
        await self._idle.wait()


def _fsync_paths(paths: list[str]) -> list[tuple[str, int]]:
    """Open and fsync each file of ``paths`` that still exists; returns ``(path, size)`` of those.

    A file deleted meanwhile (retention, a truncation) has nothing to keep, but its directory is
    fsynced, so that the deletion is durable before the recovery point passes the file: otherwise a
    power loss could bring back a segment that was never flushed, below where recovery looks. Any
    other error is raised (the broker stops)."""
    done = []
    deleted_from: set[str] = set()
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            deleted_from.add(os.path.dirname(path))
            continue
        try:
            os.fsync(fd)
            done.append((path, os.fstat(fd).st_size))
        finally:
            os.close(fd)
    for directory in sorted(deleted_from):
        try:
            fsync_directory(directory)
        except FileNotFoundError:
            pass                            # the whole log was deleted (its directory goes too)
    return done


class SegmentFlusher:
    """Makes rolled segments durable (``FlushFiles``) on a worker thread, one flush at a time and in
    order, then tells the core, so that a roll's fsync (a second for a gigabyte segment on a busy
    disk) never holds up the event loop. The worker opens each file by its path when its turn comes
    (the log may have closed its descriptor meanwhile): one deleted by then is skipped, and
    its directory fsynced."""

    def __init__(self, shell: "BrokerShell") -> None:
        self.shell = shell
        self.waiting: collections.deque = collections.deque()
        self._idle = asyncio.Event()
        self._idle.set()

    def flush(self, effect: FlushFiles) -> None:
        self.waiting.append((effect.token, effect.paths))
        if self._idle.is_set():
            self._idle.clear()
            self.shell.spawn("flushing a rolled log segment", self._run())

    async def _run(self) -> None:
        try:
            while self.waiting:
                token, paths = self.waiting.popleft()
                flushed = await asyncio.to_thread(_fsync_paths, paths)
                ledger = flush_ledger()
                if ledger is not None:
                    for path, size in flushed:
                        ledger.durable(path, size)
                self.shell.run("a rolled log segment flushed",
                               lambda t=token: self.shell.broker.on_files_flushed(t, now_ms()))
        finally:
            self._idle.set()

    async def drained(self) -> None:
        await self._idle.wait()


class BrokerShell:
    """Runs one :class:`Broker` core on an asyncio loop."""

    def __init__(self, broker: Broker, store: Any, max_request_bytes: int, stopper: Stopper,
                 monitoring: Any = None, client_security: Any = None) -> None:
        self.broker = broker
        self.monitoring = monitoring      # runtime.monitoring.Monitoring, or None without an endpoint
        self.request_metrics = monitoring.requests if monitoring is not None else None
        self.timeline = monitoring.timeline if monitoring is not None else None
        self.store = store
        self.broker_listings = BrokerListings(store)      # every read of /brokers/ids, numbered
        self.stopper = stopper
        self.max_request_bytes = max_request_bytes
        self.loop = asyncio.get_running_loop()
        self.connections: dict[int, Connection] = {}
        self._next_conn = 1
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self.server: asyncio.base_events.Server | None = None     # the first listener's
        self.servers: list[asyncio.base_events.Server] = []
        self.channels = BrokerChannels(self.loop, self._on_broker_response, stopper.fail, client_security)
        self.controlled_shutdown_done = asyncio.Event()
        self.checkpoints = CheckpointWriter(lambda: broker.logs.disk, self.spawn)
        self.segment_flusher = SegmentFlusher(self)
        self.closing = False                  # close() began: the core gets no more events or ticks

    def protocol_factory(self, spec: ListenerSpec = PLAINTEXT_SPEC) -> Connection:
        conn = Connection(self, self._next_conn, spec)
        self._next_conn += 1
        return conn

    async def listen(self, host: str, port: int, spec: ListenerSpec = PLAINTEXT_SPEC) -> int:
        """Serve a listener (each its own server socket); returns the port it listens on."""
        server = await self.loop.create_server(lambda: self.protocol_factory(spec), host, port,
                                               reuse_address=True, backlog=1024, ssl=spec.ssl_context,
                                               ssl_handshake_timeout=10.0 if spec.ssl_context else None)
        self.servers.append(server)
        if self.server is None:
            self.server = server
        self.reschedule()
        return server.sockets[0].getsockname()[1]

    def run(self, what: str, event: Callable[[], list]) -> None:
        """Hand one event to the core (``event()`` returns its effects) and carry them out; any
        exception stops the broker. Once it is stopping or closing, events are dropped."""
        if self.stopper.failure is not None or self.closing:
            return
        try:
            self.apply(event())
        except Exception as exc:
            self.stopper.fail(what, exc)

    def apply(self, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                conn = self.connections.get(effect.conn_id)
                if conn is not None:
                    conn.send(effect.buffers, effect.throttle_ms)
                    if conn.queue:
                        self.loop.call_soon(conn.pump)
            elif isinstance(effect, Close):
                conn = self.connections.get(effect.conn_id)
                if conn is not None:
                    conn.close(effect.reason)
            elif isinstance(effect, BrokerSend):
                self.channels.send(effect)
            elif isinstance(effect, ReadClusterState):
                self.spawn("reading the cluster state from ZooKeeper", self._read_cluster_state(effect.token))
            elif isinstance(effect, ZkRequest):
                self.spawn("a ZooKeeper request", self._run_zk(effect))
            elif isinstance(effect, WriteCheckpoint):
                self.checkpoints.write(effect.path, effect.content)
            elif isinstance(effect, FlushFiles):
                self.segment_flusher.flush(effect)
            elif isinstance(effect, SetLoggerLevel):
                set_logger_level(effect)
            elif isinstance(effect, LogLine):
                log.log(logging.getLevelName(effect.level.upper()), "%s", effect.message,
                        extra={"kind": effect.kind} if effect.kind else None)
                if effect.event is not None and self.timeline is not None:
                    self.timeline.record(effect.event, effect.message, effect.partition, effect.level)
            else:
                raise TypeError(f"unknown effect {effect!r}")
        if self.broker.controlled_shutdown_done:
            self.controlled_shutdown_done.set()
        self.reschedule()

    def spawn(self, what: str, coro) -> None:
        """Run ``coro`` as a task of the shell; if it raises, the broker stops."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)

        def done(task: asyncio.Task) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                self.stopper.fail(what, task.exception())

        task.add_done_callback(done)

    async def _read_cluster_state(self, token: int) -> None:
        try:
            state = await asyncio.to_thread(read_full_cluster_state, self.store, self.broker_listings)
        except Exception as exc:  # ZooKeeper unreachable: the controller cannot start; say so, try later
            log.warning("Reading the cluster state from ZooKeeper failed: %s", exc)
            self.loop.call_later(1.0, lambda: self.spawn("reading the cluster state from ZooKeeper",
                                                         self._read_cluster_state(token)))
            return
        self.run("applying the cluster state read from ZooKeeper",
                 lambda: self.broker.on_zk_result(token, state, now_ms()))

    async def _run_zk(self, request: ZkRequest) -> None:
        ops = list(request.ops)
        if not self.store.connected:
            # Kazoo would queue it until the connection returns, and the core would wait that long
            # without knowing whether ZooKeeper has it. Kafka's leader blocks its appends during such
            # a write; ours learns within DISCONNECTED_ZK_ANSWER_S that the outcome is unknown and
            # acts on it (NET-4). The pause keeps a caller that retries at once from spinning.
            await asyncio.sleep(DISCONNECTED_ZK_ANSWER_S)
            results = [OpResult(ZkError.CONNECTION_LOSS) for _ in ops]
        elif request.transaction:
            results = await asyncio.to_thread(self.store.transaction, ops)
        else:
            results = await asyncio.to_thread(self.store.execute, ops)
        self.run("applying a ZooKeeper result", lambda: self.broker.on_zk_result(request.token, results, now_ms()))

    def _on_broker_response(self, token: int, frame: bytes | None) -> None:
        self.run("handling another broker's answer", lambda: self.broker.on_broker_response(token, frame, now_ms()))

    def reschedule(self) -> None:
        if self.closing:
            return
        deadline = self.broker.next_deadline_ms()
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            delay = max(0.0, (deadline - now_ms()) / 1000.0)
            self._timer = self.loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self.run("the broker's timers", lambda: self.broker.tick(now_ms()))

    async def close(self) -> None:
        self.closing = True
        self.channels.close()
        for server in self.servers:
            server.close()
        for conn in list(self.connections.values()):
            if conn.transport is not None:
                conn.transport.close()
        for server in self.servers:
            await server.wait_closed()
        if self._timer is not None:
            self._timer.cancel()
        # Before the clean shutdown writes the checkpoints itself, so no older write lands after it.
        await self.checkpoints.drained()
        for task in list(self._tasks):
            task.cancel()
