"""Outgoing connections from this broker to the others (controller requests, replica fetching).

One TCP connection per ``(broker, channel)``, opened on first use, to the other broker's
inter-broker listener: over TLS and authenticated with SASL (PLAIN or SCRAM-SHA-256/512) first
when that listener asks for it (:class:`ClientSecurity`; an authentication that fails fails the
connection, and its requests are answered with None like any other failure). Requests go out in order and
answers come back in order; each answer is matched to its request by correlation id and handed
to the core. When a connection fails, or a request gets no answer within its timeout (a peer that
is cut off or frozen), the connection is closed, every request still waiting on it is answered
with None and the next request opens a new connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import Callable, Sequence, cast

from kio.schema.errors import ErrorCode

from strandline.core.effects import BrokerSend
from strandline.errors import Refused
from strandline.protocol.frames import FrameDecoder, ProtocolError
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.runtime.framed import FramedProtocol
from strandline.security.sasl import SaslClient

log = logging.getLogger("strandline.broker")

MAX_RESPONSE_BYTES = 1 << 30
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ClientSecurity:
    """TLS (a client context) and SASL (the mechanism, and what makes a connection's client side of
    the exchange) of the broker's connections to other brokers."""

    ssl_context: ssl.SSLContext | None = None
    sasl: tuple[str, Callable[[], SaslClient]] | None = None


#: correlation ids of the SASL requests (the core's tokens are positive)
_HANDSHAKE_ID, _AUTHENTICATE_ID = -1, -2


class _Channel(FramedProtocol):
    def __init__(self, channels: "BrokerChannels", key: tuple[int, str], host: str, port: int) -> None:
        self.channels = channels
        self.key = key
        self.address = (host, port)
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(MAX_RESPONSE_BYTES)
        self.waiting: collections.OrderedDict[int, float] = collections.OrderedDict()   # token -> deadline
        self.backlog: list[bytes] = []
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None
        self.authenticated = channels.security is None or channels.security.sasl is None
        self.exchange: SaslClient | None = None

    def connection_made(self, base: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, base)       # a stream connection's (plain or TLS)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.authenticated:
            assert self.channels.security is not None and self.channels.security.sasl is not None
            transport.write(_framed(api.encode_request(ApiKey.SASL_HANDSHAKE, 1, _HANDSHAKE_ID, "strandline-broker",
                                                       {"mechanism": self.channels.security.sasl[0]})))
            self.pending_transport = transport
            return
        self._ready(transport)

    def _ready(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        for data in self.backlog:
            transport.write(data)
        self.backlog.clear()

    def _sasl_answer(self, frame: bytes | bytearray) -> None:
        """The answers to SaslHandshake and SaslAuthenticate, before any request of the core."""
        security = self.channels.security
        assert security is not None and security.sasl is not None
        token = int.from_bytes(frame[:4], "big", signed=True)
        try:
            if token == _HANDSHAKE_ID:
                answer = api.decode_response(ApiKey.SASL_HANDSHAKE, 1, frame)
                if answer.error_code != ErrorCode.none:
                    self.fail(f"SASL handshake refused ({answer.error_code.name}): the broker offers "
                              f"{', '.join(answer.mechanisms)}")
                    return
                self.exchange = security.sasl[1]()
                self._authenticate(self.exchange.first())
            elif token == _AUTHENTICATE_ID and self.exchange is not None:
                answer = api.decode_response(ApiKey.SASL_AUTHENTICATE, 2, frame)
                if answer.error_code != ErrorCode.none:
                    self.fail(f"SASL authentication failed ({answer.error_code.name}): {answer.error_message}")
                    return
                following = self.exchange.answer(bytes(answer.auth_bytes))
                if following is not None:           # SCRAM's client-final
                    self._authenticate(following)
                    return
                self.authenticated = True
                self._ready(self.pending_transport)
            else:
                self.fail(f"unexpected correlation id {token} during SASL authentication")
        except Refused as exc:              # SCRAM: the broker does not know the password
            self.fail(f"SASL authentication failed: {exc}")
        except Exception as exc:            # an answer that cannot be read: this connection fails
            self.fail(f"malformed SASL answer: {exc}")

    def _authenticate(self, auth_bytes: bytes) -> None:
        self.pending_transport.write(_framed(api.encode_request(
            ApiKey.SASL_AUTHENTICATE, 2, _AUTHENTICATE_ID, "strandline-broker", {"auth_bytes": auth_bytes})))

    def send(self, token: int, frame: bytes, timeout_ms: int) -> None:
        loop = self.channels.loop
        self.waiting[token] = loop.time() + timeout_ms / 1000.0
        if self.timer is None:
            self.timer = loop.call_later(timeout_ms / 1000.0, self.check_timeout)
        data = len(frame).to_bytes(4, "big") + frame
        if self.transport is None:
            self.backlog.append(data)
        else:
            self.transport.write(data)

    def malformed(self, exc: ProtocolError) -> None:
        self.fail(f"malformed response: {exc}")

    def frames_received(self, frames: Sequence[bytes | bytearray]) -> None:
        for frame in frames:
            if not self.authenticated:
                self._sasl_answer(frame)
                if self.closed:
                    return
                continue
            token = int.from_bytes(frame[:4], "big", signed=True)
            if token not in self.waiting:
                self.fail(f"unexpected correlation id {token}")
                return
            del self.waiting[token]
            # a large answer arrives as the bytearray it was read into; the core's readers only
            # index and slice it, as they do bytes (copying it to bytes would cost a follower's fetch)
            self.channels.deliver(token, cast(bytes, frame))

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(str(exc) if exc else "closed by the peer")

    def check_timeout(self) -> None:
        """One timer per connection, armed for the oldest request still waiting."""
        self.timer = None
        if self.closed or not self.waiting:
            return
        oldest = next(iter(self.waiting.values()))
        delay = oldest - self.channels.loop.time()
        if delay <= 0:
            self.fail("request timed out")
        else:
            self.timer = self.channels.loop.call_later(delay, self.check_timeout)

    def fail(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        transport = self.transport or getattr(self, "pending_transport", None)
        if transport is not None:
            transport.close()
        self.channels.lost(self, reason)


def _framed(frame: bytes) -> bytes:
    return len(frame).to_bytes(4, "big") + frame


class BrokerChannels:
    """Carries out :class:`BrokerSend` effects; answers go to ``deliver(token, frame | None)``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[int, bytes | None], None],
                 fail: Callable[[str, BaseException], None], security: ClientSecurity | None = None) -> None:
        self.loop = loop
        self.security = security
        self._deliver = deliver
        self._fail = fail   # an unexpected exception of a connection task (the broker stops)
        self.channels: dict[tuple[int, str], _Channel] = {}

    def send(self, effect: BrokerSend) -> None:
        key = (effect.broker_id, effect.channel)
        channel = self.channels.get(key)
        if channel is not None and channel.address != (effect.host, effect.port):
            channel.fail("the broker moved to a new address")
            channel = None
        if channel is None:
            channel = _Channel(self, key, effect.host, effect.port)
            self.channels[key] = channel
            self.loop.create_task(self._connect(channel)).add_done_callback(self._connected)
        channel.send(effect.token, effect.frame, effect.timeout_ms)

    async def _connect(self, channel: _Channel) -> None:
        try:
            ctx = self.security.ssl_context if self.security is not None else None
            await asyncio.wait_for(self.loop.create_connection(
                lambda: channel, *channel.address, ssl=ctx, server_hostname=channel.address[0] if ctx else None),
                CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, ssl.SSLError, ssl.CertificateError) as exc:
            channel.fail(f"cannot connect to {channel.address[0]}:{channel.address[1]}: {exc}")

    def _connected(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._fail("connecting to another broker", exc)

    def deliver(self, token: int, frame: bytes | None) -> None:
        self.loop.call_soon(self._deliver, token, frame)

    def lost(self, channel: _Channel, reason: str) -> None:
        if self.channels.get(channel.key) is channel:
            del self.channels[channel.key]
        if channel.waiting:
            log.info("Connection to broker %d (%s) failed: %s", channel.key[0], channel.key[1], reason,
                     extra={"kind": f"connection to broker {channel.key[0]} ({channel.key[1]}) failed"})
        waiting = list(channel.waiting)
        channel.waiting.clear()
        for token in waiting:
            self.deliver(token, None)

    def close(self) -> None:
        for channel in list(self.channels.values()):
            channel.closed = True
            if channel.timer is not None:
                channel.timer.cancel()
            transport = channel.transport or getattr(channel, "pending_transport", None)
            if transport is not None:
                transport.close()
        self.channels.clear()
