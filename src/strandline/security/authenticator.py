"""The SASL authentication of one connection of a SASL listener: Kafka's SaslServerAuthenticator.

Pure: the shell hands it each request frame (without its size prefix) with the time and carries
out what it returns, a :class:`Step`: bytes to send (framed), whether to close the connection
afterwards, and once it has succeeded the principal. Until it succeeds no frame reaches the broker.

What a client may send, in order (Kafka 2.8):

1. ``ApiVersions`` (any number of times before the handshake is not allowed: once, as Kafka),
   answered here;
2. ``SaslHandshake`` v0 or v1 naming a mechanism the listener enables (``sasl.enabled.mechanisms``
   that are in :data:`strandline.security.sasl.MECHANISMS`); another mechanism is answered
   UNSUPPORTED_SASL_MECHANISM with the enabled list and the connection closes;
3. the mechanism's tokens: after a v1 handshake in ``SaslAuthenticate`` requests (v0-v2), after a
   v0 one as raw frames without a Kafka header (each answered with a raw frame). A failure is
   answered SASL_AUTHENTICATION_FAILED with the mechanism's message (v1 handshake; after a v0
   one the connection just closes) and the connection closes.

Any other request before success closes the connection unanswered (``IllegalSaslStateException``).
A first frame that is no Kafka request would be a Kafka 0.9 client's GSSAPI token: GSSAPI is not
served, so it closes the connection too.

Re-authentication (KIP-368): a session ends after ``connections.max.reauth.ms`` (> 0) or when its
credential does (OAUTHBEARER's token: ``SaslServer.session_lifetime_ms``, ms since the epoch),
whichever comes first; SaslAuthenticate v1+ answers that lifetime. A request after the end closes
the connection; a new SaslHandshake on an ending session begins a re-authentication, which must
end with the same principal.
"""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.protocol.frames import ProtocolError
from strandline.protocol.header import RequestHeader
from strandline.security.sasl import MECHANISMS, AuthenticationFailed, SaslContext, SaslServer, SaslServerFactory


class SaslState(enum.Enum):
    INITIAL_REQUEST = "initial request"
    HANDSHAKE_OR_VERSIONS_REQUEST = "handshake or versions request"
    HANDSHAKE_REQUEST = "handshake request"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True)
class Step:
    """What the shell does with one frame: send ``send`` (framed responses, in order); then close
    the connection if ``close`` says why; ``principal`` once authentication succeeded (this frame);
    ``forward``: the frame is an ordinary request of an authenticated connection, for the broker."""

    send: tuple[bytes, ...] = ()
    close: str | None = None
    principal: str | None = None
    forward: bool = False


_FORWARD = Step(forward=True)


def _raw(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


class SaslAuthenticator:
    """One connection's authentication. ``mechanisms``: the listener's enabled mechanisms, in
    ``sasl.enabled.mechanisms`` order; ``context(now_ms)``: the :class:`SaslContext` a mechanism is
    made with; ``max_reauth_ms``: ``connections.max.reauth.ms`` (0: sessions do not expire);
    ``versions(version, request)``: the body of the broker's ApiVersions answer, which a client may
    ask for before it authenticates (librdkafka takes its API versions from that answer); without
    it, every API this package serves, with no features."""

    def __init__(self, mechanisms: list[str], context: Callable[[int], SaslContext], max_reauth_ms: int = 0,
                 registry: dict[str, SaslServerFactory] | None = None,
                 versions: Callable[[int, Any], dict[str, Any]] | None = None) -> None:
        self.registry = MECHANISMS if registry is None else registry
        self.versions = versions
        self.mechanisms = [m for m in mechanisms if m in self.registry]
        self.context = context
        self.max_reauth_ms = max_reauth_ms
        self.state = SaslState.INITIAL_REQUEST
        self.server: SaslServer | None = None
        self.mechanism = ""                                  # the handshake's
        self.handshake_version = 1
        self.principal: str | None = None
        self.session_expires_ms: int | None = None          # when the session ends (KIP-368)
        self.reauthenticating = False

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    # -- the frames

    def receive(self, frame: bytes | bytearray, now_ms: int) -> Step:
        """Handle one frame of the connection."""
        if self.state is SaslState.COMPLETE:
            return self._after_authentication(frame, now_ms)
        if self.state is SaslState.FAILED:
            return Step(close="authentication failed")
        if self.state is SaslState.AUTHENTICATE:
            return self._token(frame, now_ms)
        return self._handshake_phase(frame, now_ms)

    def _after_authentication(self, frame: bytes | bytearray, now_ms: int) -> Step:
        key = int.from_bytes(frame[:2], "big") if len(frame) >= 2 else -1
        if self.session_expires_ms is not None:
            if key == ApiKey.SASL_HANDSHAKE:       # KIP-368: the client re-authenticates
                self.state = SaslState.HANDSHAKE_REQUEST
                self.reauthenticating = True
                return self._handshake_phase(frame, now_ms)
            if now_ms >= self.session_expires_ms:
                self.state = SaslState.FAILED
                return Step(close="the SASL session expired (connections.max.reauth.ms) and the client did not "
                                  "re-authenticate")
        return _FORWARD

    def _handshake_phase(self, frame: bytes | bytearray, now_ms: int) -> Step:
        try:
            header, request = api.decode_request(frame)
        except api.UnsupportedApiVersions as exc:
            if self.state is SaslState.HANDSHAKE_REQUEST and not self.reauthenticating:
                return self._fail(f"Unexpected ApiVersions request during SASL authentication state {self.state.value}")
            self._leave_initial()
            return Step(send=(api.api_versions_fallback(exc.correlation_id),))
        except ProtocolError as exc:
            if self.state is SaslState.INITIAL_REQUEST:
                # a Kafka 0.9 client's GSSAPI token without a handshake: GSSAPI is not served
                return self._fail("the first packet is not a Kafka request (a GSSAPI token?); GSSAPI is not enabled")
            return self._fail(f"malformed request during SASL handshake: {exc}")
        self._leave_initial()
        if header.api_key == ApiKey.API_VERSIONS:
            if self.state is not SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
                return self._fail(f"Unexpected ApiVersions request during SASL authentication state {self.state.value}")
            body = self.versions(header.api_version, request) if self.versions else api.api_versions_body()
            if body["error_code"] == ErrorCode.none:
                # refused (a malformed client software name), the client may ask again, as in Kafka
                self.state = SaslState.HANDSHAKE_REQUEST
            return Step(send=(api.encode_response(header, body),))
        if header.api_key != ApiKey.SASL_HANDSHAKE:
            return self._fail(f"Unexpected Kafka request of type {api.api_name(header.api_key)} during SASL handshake")
        return self._handshake(header, request, now_ms)

    def _leave_initial(self) -> None:
        if self.state is SaslState.INITIAL_REQUEST:
            self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST

    def _handshake(self, header: RequestHeader, request: Any, now_ms: int) -> Step:
        mechanism = request.mechanism
        if mechanism not in self.mechanisms:
            answer = api.encode_response(header, {"error_code": ErrorCode.unsupported_sasl_mechanism,
                                                  "mechanisms": list(self.mechanisms)})
            self.state = SaslState.FAILED
            return Step(send=(answer,), close=f"unsupported SASL mechanism {mechanism!r} "
                                              f"(enabled: {', '.join(self.mechanisms) or 'none'})")
        # the mechanism's server is made with the first token, at that token's time (as Kafka's
        # validators read the clock when they validate): a client may make its token after the
        # handshake (kafka-python and aiokafka do)
        self.mechanism = mechanism
        self.server = None
        self.handshake_version = header.api_version
        self.state = SaslState.AUTHENTICATE
        return Step(send=(api.encode_response(header, {"error_code": ErrorCode.none,
                                                       "mechanisms": list(self.mechanisms)}),))

    def _token(self, frame: bytes | bytearray, now_ms: int) -> Step:
        if self.server is None:
            self.server = self.registry[self.mechanism](self.context(now_ms))
        if self.handshake_version == 0:             # raw tokens, no Kafka header
            try:
                challenge = self.server.evaluate(bytes(frame))
            except AuthenticationFailed as exc:
                return self._fail(f"authentication failed: {exc}")
            lifetime = self._session_lifetime(now_ms) if self.server.complete else 0
            return self._maybe_done((_raw(challenge),), now_ms, lifetime)
        try:
            header, request = api.decode_request(frame)
        except (ProtocolError, api.UnsupportedApiVersions) as exc:
            return self._fail(f"malformed request during SASL authentication: {exc}")
        if header.api_key != ApiKey.SASL_AUTHENTICATE:
            return self._fail(f"Unexpected Kafka request of type {api.api_name(header.api_key)} during SASL "
                              f"authentication")
        try:
            challenge = self.server.evaluate(bytes(request.auth_bytes))
        except AuthenticationFailed as exc:
            message = str(exc) or f"Authentication failed with SASL mechanism {self.server.mechanism}"
            answer = api.encode_response(header, {"error_code": ErrorCode.sasl_authentication_failed,
                                                  "error_message": message, "auth_bytes": b"", "session_lifetime": 0})
            self.state = SaslState.FAILED
            return Step(send=(answer,), close=f"authentication failed: {message}")
        # the session ends for every client; v1+ are told when (v0 ones are just closed then)
        lifetime = self._session_lifetime(now_ms) if self.server.complete else 0
        answer = api.encode_response(header, {"error_code": ErrorCode.none, "error_message": None,
                                              "auth_bytes": challenge, "session_lifetime": lifetime})
        return self._maybe_done((answer,), now_ms, lifetime)

    def _session_lifetime(self, now_ms: int) -> int:
        """KIP-368: how long the session lasts, 0 for ever."""
        assert self.server is not None
        limits = []
        if self.max_reauth_ms > 0:
            limits.append(self.max_reauth_ms)
        expiry = self.server.session_lifetime_ms        # the credential's end, whatever max.reauth says
        if expiry is not None:
            limits.append(max(0, expiry - now_ms))
        return min(limits) if limits else 0

    def _maybe_done(self, send: tuple[bytes, ...], now_ms: int, lifetime: int) -> Step:
        assert self.server is not None
        if not self.server.complete:
            return Step(send=send)
        principal = f"User:{self.server.authorization_id}"
        if self.reauthenticating and principal != self.principal:
            self.state = SaslState.FAILED
            return Step(send=send, close=f"re-authentication as {principal} by a connection of {self.principal}: "
                                         f"the principal may not change")
        first = self.principal is None
        self.principal = principal
        self.state = SaslState.COMPLETE
        self.session_expires_ms = now_ms + lifetime if lifetime > 0 else None
        self.reauthenticating = False
        self.server = None
        return Step(send=send, principal=principal if first else None)

    def _fail(self, reason: str) -> Step:
        self.state = SaslState.FAILED
        return Step(close=reason)


def ssl_principal(dn: str | None, rules: str = "DEFAULT") -> str:
    """The principal of a client certificate's distinguished name: ``User:<name>``, the name mapped
    by ``ssl.principal.mapping.rules`` (KIP-371) when :mod:`strandline.security.principal` is there,
    else the whole DN (Kafka's DEFAULT rule); ``User:ANONYMOUS`` without a certificate."""
    if not dn:
        return "User:ANONYMOUS"
    try:        # the KIP-371 rules, where that module is present
        module = importlib.import_module("strandline.security.principal")
    except ImportError:
        return f"User:{dn}"
    name = str(module.ssl_principal(dn, rules))
    return name if name.startswith("User:") else f"User:{name}"
