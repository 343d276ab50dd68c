"""The SASL state machine of a SASL listener's connections (Kafka's SaslServerAuthenticator) and
the PLAIN mechanism."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from strandline.core.wire import duration_ms
from strandline.protocol import api
from strandline.protocol.api import ApiKey
from strandline.security.authenticator import SaslAuthenticator, SaslState, ssl_principal
from strandline.security.sasl import (AuthenticationFailed, PlainServer, SaslContext, parse_jaas_config,
                                      plain_client_token)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
CONF = {"plain.sasl.jaas.config": JAAS, "sasl.jaas.config": None}


def authenticator(max_reauth_ms: int = 0, mechanisms=("PLAIN",)) -> SaslAuthenticator:
    return SaslAuthenticator(list(mechanisms), lambda now: SaslContext("SASL_PLAINTEXT", CONF, now_ms=now),
                             max_reauth_ms)


def request(key: int, version: int, body: dict, correlation_id: int = 7) -> bytes:
    return api.encode_request(key, version, correlation_id, "test", body)


def answer(key: int, version: int, framed: bytes):
    return api.decode_response(key, version, framed[4:])


def handshake(auth: SaslAuthenticator, mechanism: str = "PLAIN", version: int = 1):
    step = auth.receive(request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism}), 0)
    return step, answer(ApiKey.SASL_HANDSHAKE, version, step.send[0])


def authenticate(auth: SaslAuthenticator, token: bytes, version: int = 2, now: int = 0):
    step = auth.receive(request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}), now)
    return step, answer(ApiKey.SASL_AUTHENTICATE, version, step.send[0])


def test_api_versions_handshake_and_plain_succeed():
    auth = authenticator()
    step = auth.receive(request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                         "client_software_version": "1"}), 0)
    versions = answer(ApiKey.API_VERSIONS, 3, step.send[0])
    assert versions.error_code == ErrorCode.none and versions.api_keys and step.close is None
    step, shake = handshake(auth)
    assert shake.error_code == ErrorCode.none and list(shake.mechanisms) == ["PLAIN"]
    step, done = authenticate(auth, plain_client_token("alice", "alice-secret"))
    assert done.error_code == ErrorCode.none and step.principal == "User:alice" and step.close is None
    assert auth.complete
    # afterwards every request is the broker's, a SaslHandshake too (ILLEGAL_SASL_STATE there) when
    # sessions do not expire
    assert auth.receive(request(ApiKey.METADATA, 1, {"topics": None}), 1).forward
    assert auth.receive(request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}), 2).forward


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "alice-secret")])
def test_wrong_password_or_unknown_user_fails_and_closes(user, password):
    auth = authenticator()
    handshake(auth)
    step, failed = authenticate(auth, plain_client_token(user, password))
    assert failed.error_code == ErrorCode.sasl_authentication_failed
    assert failed.error_message == "Authentication failed: Invalid username or password"
    assert step.close and step.principal is None and auth.state is SaslState.FAILED
    assert auth.receive(request(ApiKey.METADATA, 1, {"topics": None}), 1).close    # nothing served after


def test_a_request_before_authentication_closes_unanswered():
    auth = authenticator()
    step = auth.receive(request(ApiKey.METADATA, 1, {"topics": None}), 0)
    assert step.close and not step.send and not step.forward
    auth = authenticator()
    handshake(auth)
    step = auth.receive(request(ApiKey.METADATA, 1, {"topics": None}), 0)
    assert step.close and not step.forward


def test_unsupported_mechanism_answers_the_enabled_list_and_closes():
    # GSSAPI is enabled by Kafka's default but not served: only what is served is offered
    auth = authenticator(mechanisms=("GSSAPI", "PLAIN"))
    step, shake = handshake(auth, "SCRAM-SHA-512")
    assert shake.error_code == ErrorCode.unsupported_sasl_mechanism and list(shake.mechanisms) == ["PLAIN"]
    assert step.close


def test_handshake_v0_takes_raw_tokens():
    auth = authenticator()
    step, shake = handshake(auth, version=0)
    assert shake.error_code == ErrorCode.none
    step = auth.receive(plain_client_token("admin", "admin-secret"), 0)
    assert step.send == (b"\0\0\0\0",) and step.principal == "User:admin"
    auth = authenticator()
    handshake(auth, version=0)
    step = auth.receive(plain_client_token("admin", "nope"), 0)
    assert step.close and not step.send             # v0: no error answer, the connection closes


def test_a_second_api_versions_or_a_garbage_first_frame_closes():
    auth = authenticator()
    body = {"client_software_name": "t", "client_software_version": "1"}
    auth.receive(request(ApiKey.API_VERSIONS, 3, body), 0)
    assert auth.receive(request(ApiKey.API_VERSIONS, 3, body), 0).close
    assert authenticator().receive(b"\x60\x01garbage", 0).close


def test_reauthentication_after_the_session_lifetime():
    """KIP-368: the session lifetime is answered; after it only a new handshake keeps the
    connection, and the principal may not change."""
    auth = authenticator(max_reauth_ms=1000)
    handshake(auth)
    step, done = authenticate(auth, plain_client_token("alice", "alice-secret"), now=0)
    assert duration_ms(done.session_lifetime) == 1000 and step.principal == "User:alice"
    assert auth.receive(request(ApiKey.METADATA, 1, {"topics": None}), 999).forward
    handshake(auth)
    step, again = authenticate(auth, plain_client_token("alice", "alice-secret"), now=900)
    assert again.error_code == ErrorCode.none and step.close is None and auth.complete
    assert auth.receive(request(ApiKey.METADATA, 1, {"topics": None}), 1899).forward
    assert auth.receive(request(ApiKey.METADATA, 1, {"topics": None}), 1900).close
    auth = authenticator(max_reauth_ms=1000)
    handshake(auth)
    authenticate(auth, plain_client_token("alice", "alice-secret"))
    handshake(auth)
    step, _ = authenticate(auth, plain_client_token("admin", "admin-secret"))
    assert step.close and "may not change" in step.close


def test_plain_refuses_another_authorization_id_and_bad_messages():
    server = PlainServer(SaslContext("L", CONF))
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        server.evaluate(b"admin\0alice\0alice-secret")
    with pytest.raises(AuthenticationFailed, match="3 tokens"):
        PlainServer(SaslContext("L", CONF)).evaluate(b"alice")
    assert not server.complete


def test_plain_reads_bytes_that_are_not_utf8_as_java_does():
    """Kafka's PlainSaslServer decodes with new String(bytes, UTF_8): a malformed byte becomes
    U+FFFD, so such a password is just a wrong one (test_sasl_reference.py compares with Kafka)."""
    with pytest.raises(AuthenticationFailed, match="^Authentication failed: Invalid username or password$"):
        PlainServer(SaslContext("L", CONF)).evaluate(b"\0alice\0alice-secret\xff")


def test_jaas_config_is_read_as_kafka_does():
    [entry] = parse_jaas_config(JAAS)
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert entry.options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                             "user_alice": "alice-secret"}
    [quoted] = parse_jaas_config(r'a.B required x="semi;colon \"q\"" y=plain;')
    assert quoted.options == {"x": 'semi;colon "q"', "y": "plain"}
    with pytest.raises(ValueError, match="sasl.jaas.config"):
        parse_jaas_config("PlainLoginModule username=x;")


def test_ssl_principal_is_the_distinguished_name():
    assert ssl_principal("CN=alice,O=Strandline") in ("User:CN=alice,O=Strandline", "User:alice")
    assert ssl_principal(None) == "User:ANONYMOUS"


class TwoStep:
    """A mechanism of two rounds (as SCRAM): a challenge, then success; it sees its context."""

    mechanism = "TWO-STEP"

    def __init__(self, context: SaslContext) -> None:
        self.context, self.round, self.user = context, 0, ""

    def evaluate(self, response: bytes) -> bytes:
        self.round += 1
        if self.round == 1:
            self.user = response.decode()
            return b"challenge-for-" + response
        if response != b"proof" or self.context.scram_credential(self.user, "SCRAM-SHA-256") is None:
            raise AuthenticationFailed("Authentication failed during authentication due to invalid credentials "
                                       "with SASL mechanism SCRAM-SHA-256")
        return b"server-final"

    @property
    def complete(self) -> bool:
        return self.round == 2

    @property
    def authorization_id(self) -> str:
        return self.user

    @property
    def session_lifetime_ms(self) -> int | None:
        return 5_000          # (a token's expiry, as OAUTHBEARER's)


def test_a_registered_mechanism_of_several_rounds_with_credentials_and_expiry():
    stored = {("bob", "SCRAM-SHA-256"): "salt=...,stored_key=...,server_key=...,iterations=4096"}
    auth = SaslAuthenticator(["TWO-STEP"], lambda now: SaslContext("L", CONF, lambda u, m: stored.get((u, m)), now),
                             max_reauth_ms=60_000, registry={"TWO-STEP": TwoStep})
    handshake(auth, "TWO-STEP")
    step, first = authenticate(auth, b"bob", now=1_000)
    assert first.auth_bytes == b"challenge-for-bob" and step.principal is None and not auth.complete
    step, last = authenticate(auth, b"proof", now=1_000)
    assert last.auth_bytes == b"server-final" and step.principal == "User:bob"
    assert duration_ms(last.session_lifetime) == 4_000          # the credential's end comes first
    # without connections.max.reauth.ms the credential's end still ends the session (Kafka's ReauthInfo)
    auth = SaslAuthenticator(["TWO-STEP"], lambda now: SaslContext("L", CONF, lambda u, m: stored.get((u, m)), now),
                             registry={"TWO-STEP": TwoStep})
    handshake(auth, "TWO-STEP")
    authenticate(auth, b"bob", now=2_000)
    step, last = authenticate(auth, b"proof", now=2_000)
    assert duration_ms(last.session_lifetime) == 3_000 and auth.session_expires_ms == 5_000
    auth = SaslAuthenticator(["TWO-STEP"], lambda now: SaslContext("L", CONF, lambda u, m: None, now),
                             registry={"TWO-STEP": TwoStep})
    handshake(auth, "TWO-STEP")
    authenticate(auth, b"carol")
    step, failed = authenticate(auth, b"proof")
    assert failed.error_code == ErrorCode.sasl_authentication_failed and "SCRAM-SHA-256" in failed.error_message
    assert step.close
