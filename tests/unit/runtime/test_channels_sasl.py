"""A broker's connections to the other brokers authenticate with SASL before the core's first
request: PLAIN in one token, SCRAM-SHA-256/512 in two (client-first, client-final) with the
server's signature checked. Against a small asyncio server that answers SaslHandshake and
SaslAuthenticate with Strandline's own mechanism servers, then echoes each other frame's
correlation id."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from strandline.core.effects import BrokerSend
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.runtime.channels import BrokerChannels, ClientSecurity
from strandline.security import scram
from strandline.security.sasl import AuthenticationFailed, PlainServer, SaslContext, client_exchange
from strandline.security.scram_server import ScramServer

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_broker="broker-secret";'


def stored(mechanism: str, password: str) -> str:
    salt = os.urandom(16)
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, 4096)
    return scram.credential(1 if mechanism == "SCRAM-SHA-256" else 2, salt, salted, 4096)


class FakeBroker(asyncio.Protocol):
    """Answers the SASL requests with ``make_server()``; counts the frames that came after."""

    def __init__(self, mechanism: str, make_server, seen: list[str]) -> None:
        self.mechanism, self.make_server, self.seen = mechanism, make_server, seen
        self.buffer = b""
        self.server = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4 and len(self.buffer) >= 4 + int.from_bytes(self.buffer[:4], "big"):
            size = int.from_bytes(self.buffer[:4], "big")
            frame, self.buffer = self.buffer[4:4 + size], self.buffer[4 + size:]
            self.frame(frame)

    def frame(self, frame: bytes) -> None:
        key = int.from_bytes(frame[:2], "big")
        if key == ApiKey.SASL_HANDSHAKE:
            header, request = api.decode_request(frame)
            self.seen.append(f"handshake {request.mechanism}")
            self.server = self.make_server()
            self.transport.write(api.encode_response(header, {"error_code": 0, "mechanisms": [self.mechanism]}))
        elif key == ApiKey.SASL_AUTHENTICATE:
            header, request = api.decode_request(frame)
            try:
                answer = self.server.evaluate(bytes(request.auth_bytes))
                body = {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime_ms": 0}
                self.seen.append("authenticate")
            except AuthenticationFailed as exc:
                body = {"error_code": 58, "error_message": str(exc), "auth_bytes": b"", "session_lifetime_ms": 0}
                self.seen.append("refused")
            self.transport.write(api.encode_response(header, body))
        else:
            self.seen.append("request")
            correlation = frame[4:8]
            self.transport.write((4).to_bytes(4, "big") + correlation)


async def one_request(mechanism: str, make_server, user: str, password: str) -> tuple[bytes | None, list[str]]:
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    server = await loop.create_server(lambda: FakeBroker(mechanism, make_server, seen), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    answered: asyncio.Future = loop.create_future()
    channels = BrokerChannels(loop, lambda token, frame: answered.set_result((token, frame)),
                              lambda what, exc: answered.set_exception(exc),
                              ClientSecurity(None, (mechanism, client_exchange(mechanism, user, password))))
    frame = api.encode_request(ApiKey.API_VERSIONS, 0, 7, "strandline-broker", {})
    channels.send(BrokerSend(7, 2, "127.0.0.1", port, "fetcher", frame, 5000))
    try:
        token, got = await asyncio.wait_for(answered, 10)
    finally:
        channels.close()
        server.close()
    assert token == 7
    return got, seen


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_authenticates_in_two_rounds_before_the_first_request(mechanism):
    credential = stored(mechanism, "broker-secret")
    context = SaslContext("SASL_SSL", {}, lambda u, m: credential if (u, m) == ("broker", mechanism) else None, 0)
    got, seen = asyncio.run(one_request(mechanism, lambda: ScramServer(context, mechanism), "broker",
                                        "broker-secret"))
    assert got is not None and got[:4] == (7).to_bytes(4, "big")
    assert seen == [f"handshake {mechanism}", "authenticate", "authenticate", "request"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_fails_the_connection_and_no_request_goes_out(mechanism):
    if mechanism == "PLAIN":
        context = SaslContext("SASL_SSL", {"plain.sasl.jaas.config": PLAIN_JAAS}, lambda u, m: None, 0)
        make = lambda: PlainServer(context)     # noqa: E731
    else:
        credential = stored(mechanism, "broker-secret")
        context = SaslContext("SASL_SSL", {}, lambda u, m: credential, 0)
        make = lambda: ScramServer(context, mechanism)      # noqa: E731
    got, seen = asyncio.run(one_request(mechanism, make, "broker", "wrong"))
    assert got is None                          # the request is answered with None: the connection failed
    # SCRAM refuses the client-final (its proof), PLAIN its one token
    assert seen == [f"handshake {mechanism}"] + ["authenticate"] * (mechanism != "PLAIN") + ["refused"]


def test_plain_authenticates_in_one_round():
    context = SaslContext("SASL_SSL", {"plain.sasl.jaas.config": PLAIN_JAAS}, lambda u, m: None, 0)
    got, seen = asyncio.run(one_request("PLAIN", lambda: PlainServer(context), "broker", "broker-secret"))
    assert got is not None and seen == ["handshake PLAIN", "authenticate", "request"]


def test_a_server_signature_that_does_not_match_fails_the_connection():
    """A server that does not know the password (its signature is wrong) is not trusted: SCRAM
    authenticates the server too."""
    mechanism = "SCRAM-SHA-512"
    credential = stored(mechanism, "broker-secret")
    context = SaslContext("SASL_SSL", {}, lambda u, m: credential, 0)

    class Impostor(ScramServer):
        def evaluate(self, response: bytes) -> bytes:
            answer = super().evaluate(response)
            return b"v=" + b"A" * 88 if answer.startswith(b"v=") else answer
    got, seen = asyncio.run(one_request(mechanism, lambda: Impostor(context, mechanism), "broker", "broker-secret"))
    assert got is None
    assert seen == [f"handshake {mechanism}", "authenticate", "authenticate"]
