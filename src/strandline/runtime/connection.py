"""One client connection of the shell (Kafka's network processor's part for one channel): its
frames reach the broker core one request at a time, in order, and its answers go straight to the
socket where they can.

Each connection answers its requests strictly in order, one at a time, as Kafka does: while a
request waits in purgatory (acks=all, long-poll fetch) the connection's later requests queue.
Reading pauses when a connection queues too much or its peer stops reading our responses: the
requests a client pipelines then wait in the socket's buffers and in the client, not in the
broker's memory (Kafka reads no further request of a connection while one is in flight). On a
SASL listener the frames go to the connection's authenticator until it has authenticated.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import ssl
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, cast

from strandline.broker.broker import Broker
from strandline.core.listeners import Listener
from strandline.errors import describe_exception
from strandline.log.disk import FileRegion
from strandline.protocol.frames import FrameDecoder, ProtocolError
from strandline.runtime.clock import now_ms
from strandline.runtime.framed import FramedProtocol
from strandline.runtime.monitoring import request_name
from strandline.runtime.tls import peer_dn
from strandline.security.acl import ANONYMOUS
from strandline.security.authenticator import SaslAuthenticator, ssl_principal
from strandline.core.effects import Effect

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



class Shell(Protocol):
    """What a connection needs of the shell that serves it (:class:`strandline.runtime.server.BrokerShell`)."""

    broker: Broker
    loop: asyncio.AbstractEventLoop
    connections: dict[int, Connection]
    max_request_bytes: int
    request_metrics: Any

    def run(self, what: str, event: Callable[[], list[Effect]]) -> None: ...


class Connection(FramedProtocol):
    def __init__(self, shell: Shell, conn_id: int, spec: ListenerSpec = PLAINTEXT_SPEC) -> None:
        self.shell = shell
        self.conn_id = conn_id
        self.spec = spec
        self.authenticator: SaslAuthenticator | None = None
        self.decoder = FrameDecoder(shell.max_request_bytes)
        self.queue: collections.deque[bytes | bytearray] = collections.deque()
        self.queued_bytes = 0                                       # of the frames in the queue
        self.arrivals: collections.deque[float] = collections.deque()      # when each queued frame came
        self.current: tuple[str, float] | None = None               # the request being answered: API, arrival
        self.busy = False
        self.writable = True
        self.reading = True
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.host = ""
        self.principal = ANONYMOUS              # once the broker knows the connection
        self.fd = -1

    def connection_made(self, base: asyncio.BaseTransport) -> None:
        """(Over TLS: once the handshake is done.)"""
        transport = self.transport = cast(asyncio.Transport, base)     # a stream connection's (plain or TLS)
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

    def authenticate(self, frame: bytes | bytearray) -> bool:
        """Hand ``frame`` to the SASL authenticator; False when it is an ordinary request (for the
        broker), True when the authenticator took it."""
        assert self.authenticator is not None
        try:
            step = self.authenticator.receive(frame, now_ms())
        except Exception as exc:        # a bug of a mechanism: this connection fails, the broker serves on
            log.error("SASL authentication of connection %s from %s failed: %s", self.conn_id, self.peer,
                      describe_exception(exc), extra={"kind": "SASL authentication failed"})
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

    def frames_received(self, frames: Sequence[bytes | bytearray]) -> None:
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

        def closed() -> list[Effect]:
            self.shell.broker.connection_closed(self.conn_id)
            return []

        self.shell.run(f"closing the connection from {self.peer}", closed)
