"""SaslHandshake v0-1, SaslAuthenticate v0-2 and the delegation token APIs (38-41, v0-2) as a
Kafka 2.8.2 broker answers them on a PLAINTEXT listener with no ``delegation.token.master.key``
(``KafkaApis.handleSaslHandshakeRequest``, ``handleSaslAuthenticateRequest``,
``allowTokenRequests``)."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from strandline.protocol.api import SUPPORTED
from tests.unit.broker.test_broker_core import Harness

HMAC = b"\x01\x02\x03"


@pytest.mark.parametrize("version", [0, 1])
def test_sasl_handshake_is_an_illegal_sasl_state_without_mechanisms(version):
    body = Harness().call(17, version, {"mechanism": "PLAIN"})
    assert (body.error_code, body.mechanisms) == (ErrorCode.illegal_sasl_state, ())


@pytest.mark.parametrize("version", [0, 1, 2])
def test_sasl_authenticate_is_an_illegal_sasl_state_with_kafkas_message(version):
    body = Harness().call(36, version, {"auth_bytes": b"\0user\0secret"})
    assert (body.error_code, body.error_message, body.auth_bytes) == (
        ErrorCode.illegal_sasl_state, "SaslAuthenticate request received after successful authentication", b"")


def raw(h: Harness, api_key: int, version: int, body: dict) -> bytes:
    """The response frame after its size and correlation id (and, flexible, the header's tags)."""
    h.request(api_key, version, body)
    frame = b"".join(bytes(b) for b in h.sent[1].pop(0).buffers)
    assert struct.unpack(">ii", frame[:8]) == (len(frame) - 4, h.correlation)
    if version >= 2:
        assert frame[8] == 0            # no tagged fields in the header
        return frame[9:]
    return frame[8:]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_create_delegation_token_is_not_allowed_on_plaintext(version):
    """Laid out by hand (kio refuses to read a negative timestamp): the error, the connection's
    principal, three -1 timestamps, an empty token id and hmac, the throttle time."""
    data = raw(Harness(), 38, version, {"renewers": [{"principal_type": "User", "principal_name": "alice"}],
                                        "max_lifetime": -1})
    error = struct.pack(">h", int(ErrorCode.delegation_token_request_not_allowed))
    stamps = struct.pack(">qqq", -1, -1, -1)
    if version < 2:
        expected = (error + struct.pack(">h", 4) + b"User" + struct.pack(">h", 9) + b"ANONYMOUS" + stamps
                    + struct.pack(">h", 0) + struct.pack(">i", 0) + struct.pack(">i", 0))
    else:                                   # compact strings and bytes (length + 1), trailing tags
        expected = error + b"\x05User" + b"\x0aANONYMOUS" + stamps + b"\x01" + b"\x01" + struct.pack(">i", 0) + b"\0"
    assert data == expected


@pytest.mark.parametrize("api_key", [39, 40])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_renew_and_expire_are_not_allowed_with_the_error_timestamp(api_key, version):
    period = "renew_period" if api_key == 39 else "expiry_time_period"
    data = raw(Harness(), api_key, version, {"hmac": HMAC, period: 1000})
    expected = struct.pack(">hqi", int(ErrorCode.delegation_token_request_not_allowed), -1, 0)
    assert data == expected + (b"\0" if version >= 2 else b"")


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("owners", [None, [], [{"principal_type": "User", "principal_name": "alice"}]])
def test_describe_is_not_allowed_before_token_auth_is_checked(version, owners):
    """allowTokenRequests is checked first: not DELEGATION_TOKEN_AUTH_DISABLED."""
    body = Harness().call(41, version, {"owners": owners})
    assert (body.error_code, body.tokens) == (ErrorCode.delegation_token_request_not_allowed, ())


def test_the_versions_kafka_2_8_serves_are_advertised():
    assert {k: SUPPORTED[k] for k in (17, 36, 38, 39, 40, 41)} == {
        17: (0, 1), 36: (0, 2), 38: (0, 2), 39: (0, 2), 40: (0, 2), 41: (0, 2)}
