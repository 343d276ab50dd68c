"""The OAUTHBEARER server (RFC 7628, KIP-255's unsecured validator, KIP-768's signed tokens over a
JWKS), driven by kafka-python's OAUTHBEARER client where a whole exchange is shown."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from strandline.security import oauthbearer
from strandline.security.oauthbearer import (ConfigError, OAuthBearerServer, client_response, jwks_file_path,
                                             parse_client_response)
from strandline.security.sasl import MECHANISMS, AuthenticationFailed, SaslContext

NOW_MS = 1_800_000_000_000
NOW = NOW_MS // 1000
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"


def b64url(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def unsecured(claims: dict, header: dict | None = None) -> str:
    """A token as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes one."""
    return f"{b64url(header or {'alg': 'none'})}.{b64url(claims)}."


def ctx(config: dict | None = None, now_ms: int = NOW_MS) -> SaslContext:
    return SaslContext(listener="SASL_SSL", listener_config=config or {}, scram_credential=lambda u, m: None,
                       now_ms=now_ms)


def jaas(**options: str) -> dict:
    opts = " ".join(f'{k}="{v}"' for k, v in options.items())
    return {"sasl.jaas.config": f"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required {opts};"}


class Provider(AbstractTokenProvider):
    def __init__(self, token: str, extensions: dict | None = None) -> None:
        self._token, self._extensions = token, extensions or {}

    def token(self) -> str:
        return self._token

    def extensions(self) -> dict:
        return self._extensions


def exchange(server: OAuthBearerServer, token: str, extensions: dict | None = None) -> SaslMechanismOAuth:
    """kafka-python's client against ``server`` until one side is done (AuthenticationFailed propagates)."""
    client = SaslMechanismOAuth(sasl_oauth_token_provider=Provider(token, extensions))
    for _ in range(3):
        client.receive(server.evaluate(client.auth_bytes()))
        if client.is_done():
            return client
    raise AssertionError("the exchange did not end")


# --- RFC 7628's client response ----------------------------------------------------------------

def test_client_response_round_trip_and_kafka_python_format():
    parsed = parse_client_response(b"n,,\x01auth=Bearer abc.def.\x01\x01")
    assert (parsed.authorization_id, parsed.token, parsed.extensions) == ("", "abc.def.", {})
    parsed = parse_client_response(client_response("t0k", "a,b", {"traceId": "123 4"}))
    assert (parsed.authorization_id, parsed.token, parsed.extensions) == ("a,b", "t0k", {"traceId": "123 4"})
    provider_bytes = SaslMechanismOAuth(sasl_oauth_token_provider=Provider("x.y.z", {"k": "v"})).auth_bytes()
    assert parse_client_response(provider_bytes).extensions == {"k": "v"}
    assert parse_client_response(b"n,,\x01auth=bearer x\x01\x01").token == "x"     # scheme: any case


@pytest.mark.parametrize("data", [
    b"", b"n,,", b"y,,\x01auth=Bearer x\x01\x01", b"p=tls,,\x01auth=Bearer x\x01\x01",
    b"n,,\x01auth=Bearer x\x01",                # one \x01 short
    b"n,,\x01\x01",                             # no auth
    b"n,,\x01auth=Basic x\x01\x01",             # another scheme
    b"n,,\x01auth=Bearer x y\x01\x01",          # not a token
    b"n,,\x01auth=Bearer x\x011k=v\x01\x01",    # a key that is not letters
    b"n,,\x01auth=Bearer \xff\x01\x01",
    b"n,b=x,\x01auth=Bearer x\x01\x01",
])
def test_malformed_client_response_fails_with_kafkas_message(data):
    server = OAuthBearerServer(ctx())
    with pytest.raises(AuthenticationFailed) as failed:
        server.evaluate(data)
    assert str(failed.value) == GENERIC
    with pytest.raises(ValueError):
        parse_client_response(data)


# --- the unsecured validator (KIP-255) ---------------------------------------------------------

def test_unsecured_token_authenticates_its_subject_through_kafka_python():
    server = MECHANISMS["OAUTHBEARER"](ctx())
    client = exchange(server, unsecured({"sub": "alice", "iat": NOW - 10, "exp": NOW + 3600}), {"traceId": "7"})
    assert client.is_authenticated()
    assert server.complete and server.authorization_id == "alice"
    assert server.session_lifetime_ms == (NOW + 3600) * 1000        # the token's end, in ms since the epoch


def test_invalid_token_gets_the_error_json_then_fails_on_the_clients_x01():
    server = OAuthBearerServer(ctx())
    token = unsecured({"sub": "alice", "exp": NOW - 1})                          # expired
    assert server.evaluate(client_response(token)) == b'{"status":"invalid_token"}'
    assert not server.complete
    with pytest.raises(AuthenticationFailed) as failed:
        server.evaluate(b"\x01")
    assert str(failed.value) == '{"status":"invalid_token"}'
    client = SaslMechanismOAuth(sasl_oauth_token_provider=Provider(token))       # kafka-python does the same
    server = OAuthBearerServer(ctx())
    client.receive(server.evaluate(client.auth_bytes()))
    assert client.auth_bytes() == b"\x01"
    with pytest.raises(AuthenticationFailed, match="invalid_token"):
        server.evaluate(client.auth_bytes())


@pytest.mark.parametrize("claims, config, accepted", [
    ({"sub": "a", "exp": NOW + 1}, {}, True),
    ({"sub": "a", "exp": NOW}, {}, False),                                    # exp on now: refused
    ({"sub": "a", "exp": NOW - 5}, jaas(unsecuredValidatorAllowableClockSkewMs="6000"), True),
    ({"sub": "a", "exp": NOW - 5}, jaas(unsecuredValidatorAllowableClockSkewMs="5000"), False),
    ({"sub": "a"}, {}, False),                                                # no exp
    ({"sub": "a", "exp": "later"}, {}, False),
    ({"sub": "a", "exp": True}, {}, False),
    ({"sub": "a", "exp": NOW + 60, "iat": NOW + 10}, {}, False),              # issued in the future
    ({"sub": "a", "exp": NOW + 60, "iat": NOW + 10}, jaas(unsecuredValidatorAllowableClockSkewMs="10000"), True),
    ({"sub": "a", "exp": NOW + 60, "iat": NOW + 60},
     jaas(unsecuredValidatorAllowableClockSkewMs="100000"), False),           # exp not after iat
    ({"exp": NOW + 60}, {}, False),                                           # no principal
    ({"sub": "  ", "exp": NOW + 60}, {}, False),
    ({"sub": 7, "exp": NOW + 60}, {}, False),
    ({"user": "a", "exp": NOW + 60}, jaas(unsecuredValidatorPrincipalClaimName="user"), True),
    ({"sub": "a", "exp": NOW + 60}, jaas(unsecuredValidatorPrincipalClaimName="user"), False),
])
def test_unsecured_validator_claims(claims, config, accepted):
    server = OAuthBearerServer(ctx(config))
    answer = server.evaluate(client_response(unsecured(claims)))
    assert server.complete is accepted
    assert answer == (b"" if accepted else b'{"status":"invalid_token"}')


def test_unsecured_principal_claim_names_the_principal():
    server = OAuthBearerServer(ctx(jaas(unsecuredValidatorPrincipalClaimName="user")))
    server.evaluate(client_response(unsecured({"sub": "ignored", "user": "bob", "exp": NOW + 60})))
    assert server.authorization_id == "bob"


@pytest.mark.parametrize("header, token_suffix", [({"alg": "RS256"}, ""), ({"alg": "none"}, "c2ln")])
def test_unsecured_validator_wants_alg_none_and_no_signature(header, token_suffix):
    server = OAuthBearerServer(ctx())
    token = unsecured({"sub": "a", "exp": NOW + 60}, header) + token_suffix
    assert server.evaluate(client_response(token)) == b'{"status":"invalid_token"}'


def test_required_scope():
    config = jaas(unsecuredValidatorRequiredScope="read write")
    ok = OAuthBearerServer(ctx(config))
    ok.evaluate(client_response(unsecured({"sub": "a", "exp": NOW + 60, "scope": "write admin read"})))
    assert ok.complete
    as_list = OAuthBearerServer(ctx(config))
    as_list.evaluate(client_response(unsecured({"sub": "a", "exp": NOW + 60, "scope": ["read", "write"]})))
    assert as_list.complete
    lacking = OAuthBearerServer(ctx(config))
    answer = lacking.evaluate(client_response(unsecured({"sub": "a", "exp": NOW + 60, "scope": "read"})))
    assert answer == b'{"status":"insufficient_scope", "scope":"[read, write]"}'
    with pytest.raises(AuthenticationFailed, match="insufficient_scope"):
        lacking.evaluate(b"\x01")
    other_claim = OAuthBearerServer(ctx(jaas(unsecuredValidatorRequiredScope="read",
                                             unsecuredValidatorScopeClaimName="scp")))
    other_claim.evaluate(client_response(unsecured({"sub": "a", "exp": NOW + 60, "scp": "read"})))
    assert other_claim.complete


def test_authzid_must_be_the_tokens_principal():
    token = unsecured({"sub": "alice", "exp": NOW + 60})
    same = OAuthBearerServer(ctx())
    assert same.evaluate(client_response(token, "alice")) == b"" and same.authorization_id == "alice"
    with pytest.raises(AuthenticationFailed) as failed:
        OAuthBearerServer(ctx()).evaluate(client_response(token, "bob"))
    assert str(failed.value) == ("Authentication failed: Client requested an authorization id (bob) that is "
                                 "different from the token's principal name (alice)")


def test_no_second_exchange_after_success_and_no_x01_without_an_error():
    server = OAuthBearerServer(ctx())
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        server.evaluate(b"\x01")
    server.evaluate(client_response(unsecured({"sub": "a", "exp": NOW + 60})))
    with pytest.raises(AuthenticationFailed):
        server.evaluate(client_response(unsecured({"sub": "b", "exp": NOW + 60})))
    assert server.authorization_id == "a"


def test_bad_listener_config_fails_every_exchange_and_says_why():
    bad = jaas(unsecuredValidatorAllowableClockSkewMs="soon")
    with pytest.raises(ConfigError, match="unsecuredValidatorAllowableClockSkewMs"):
        oauthbearer.validator(bad)
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        OAuthBearerServer(ctx(bad)).evaluate(client_response(unsecured({"sub": "a", "exp": NOW + 60})))
    with pytest.raises(ConfigError, match="sasl.jaas.config"):
        oauthbearer.validator({"sasl.jaas.config": "OAuthBearerLoginModule required"})   # no ;
    with pytest.raises(ConfigError, match="jwks.endpoint.url"):
        oauthbearer.validator({"sasl.server.callback.handler.class":
                               "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"})
    with pytest.raises(ConfigError, match="not loaded"):
        oauthbearer.validator({"sasl.oauthbearer.jwks.endpoint.url": "file:///etc/jwks.json"})


# --- KIP-768: signed tokens over a JWKS --------------------------------------------------------

@pytest.fixture(scope="module")
def keys():
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key())) | {"kid": "r1", "use": "sig",
                                                                                      "alg": "RS256"}
    ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key())) | {"kid": "e1"}
    return {"rsa": rsa_key, "ec": ec_key, "other": other, "jwks": json.dumps({"keys": [rsa_jwk, ec_jwk]})}


def signed_config(keys, **extra) -> dict:
    return {"sasl.oauthbearer.jwks.endpoint.url": "file:///etc/strandline/jwks.json",
            oauthbearer.JWKS: keys["jwks"]} | extra


def claims(**extra) -> dict:
    return {"sub": "carol", "iat": NOW - 5, "exp": NOW + 600} | extra


def sign(keys, payload: dict, key: str = "rsa", alg: str = "RS256", kid: str | None = "r1") -> str:
    return jwt.encode(payload, keys[key], algorithm=alg, headers={"kid": kid} if kid else None)


def hs256(payload: dict, secret: bytes) -> str:
    """An HS256 JWT (by hand: PyJWT refuses to key an HMAC with a JWK, the confusion attack shown here)."""
    signing_input = f"{b64url({'alg': 'HS256', 'typ': 'JWT', 'kid': 'r1'})}.{b64url(payload)}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + base64.urlsafe_b64encode(mac).decode().rstrip("=")


def test_rs256_token_signed_by_a_jwks_key(keys):
    server = OAuthBearerServer(ctx(signed_config(keys)))
    client = exchange(server, sign(keys, claims()))
    assert client.is_authenticated() and server.authorization_id == "carol"
    assert server.session_lifetime_ms == (NOW + 600) * 1000          # the token's end, in ms since the epoch


def test_es256_token_and_a_token_without_kid(keys):
    server = OAuthBearerServer(ctx(signed_config(keys)))
    assert server.evaluate(client_response(sign(keys, claims(), "ec", "ES256", "e1"))) == b""
    assert server.authorization_id == "carol"
    no_kid = OAuthBearerServer(ctx(signed_config(keys)))
    assert no_kid.evaluate(client_response(sign(keys, claims(), kid=None))) == b""


def test_the_jwks_may_be_a_loader(keys):
    loads = []

    def load() -> str:
        loads.append(1)
        return keys["jwks"]
    server = OAuthBearerServer(ctx(signed_config(keys) | {oauthbearer.JWKS: load}))
    assert server.evaluate(client_response(sign(keys, claims()))) == b"" and loads == [1]


@pytest.mark.parametrize("make", [
    lambda k: sign(k, claims(), key="other"),                              # a key not in the JWKS
    lambda k: sign(k, claims(), key="other", kid=None),
    lambda k: sign(k, claims(), kid="unknown"),
    lambda k: sign(k, claims(), "ec", "ES256", "r1"),                      # kid of a key of another type
    lambda k: unsecured(claims()),                                         # alg none
    lambda k: hs256(claims(), k["jwks"].encode()),                          # HMAC keyed with the public JWKS
    lambda k: sign(k, claims(exp=NOW - 31)),                               # expired beyond the 30 s skew
    lambda k: sign(k, {"sub": "carol", "exp": NOW + 60}),                  # no iat
    lambda k: sign(k, {"sub": "carol", "iat": NOW}),                       # no exp
    lambda k: sign(k, claims(sub=None)),                                   # no principal
    lambda k: sign(k, claims(nbf=NOW + 31)),                               # not valid yet
    lambda k: sign(k, claims(aud="kafka")),                                # aud, none expected
    lambda k: sign(k, claims(iat=NOW + 60, exp=NOW + 30)),                 # exp before iat
    lambda k: sign(k, claims(iat=NOW - 10, exp=NOW - 20)),                 # exp before iat, within the skew
    lambda k: sign(k, claims(scope="")),                                   # a blank scope
    lambda k: sign(k, claims(scope=["a", " "])),
    lambda k: sign(k, claims())[:-4] + "AAAA",                             # signature tampered
    lambda k: "not-a-jwt",
])
def test_signed_validator_refuses(keys, make):
    server = OAuthBearerServer(ctx(signed_config(keys)))
    assert server.evaluate(client_response(make(keys))) == b'{"status":"invalid_token"}'
    with pytest.raises(AuthenticationFailed, match="invalid_token"):
        server.evaluate(b"\x01")


def test_jwk_alg_does_not_restrict_an_rsa_key_and_odd_claims_kafka_takes(keys):
    """As Kafka 3.9 (jose4j) does: the JWK says RS256, yet RS384 and PS256 tokens signed by its key
    are accepted; iat may lie in the future when exp is later; a scope that is neither a string
    nor a list is no scope, and a string is one scope, not split."""
    config = signed_config(keys)
    for token in (sign(keys, claims(), alg="RS384"), sign(keys, claims(), alg="PS256"),
                  sign(keys, claims(iat=NOW + 300)), sign(keys, claims(iat=NOW + 600))):
        assert OAuthBearerServer(ctx(config)).evaluate(client_response(token)) == b""
    odd = OAuthBearerServer(ctx(config))
    assert odd.evaluate(client_response(sign(keys, claims(scope=5)))) == b"" and odd.token.scope == frozenset()
    spaced = OAuthBearerServer(ctx(config))
    assert spaced.evaluate(client_response(sign(keys, claims(scope="a b")))) == b"" and spaced.token.scope == {"a b"}


def test_clock_skew_seconds(keys):
    token = sign(keys, claims(iat=NOW - 100, exp=NOW - 20))
    assert OAuthBearerServer(ctx(signed_config(keys))).evaluate(client_response(token)) == b""  # default 30 s
    strict = signed_config(keys, **{"sasl.oauthbearer.clock.skew.seconds": "10"})
    assert OAuthBearerServer(ctx(strict)).evaluate(client_response(token)) == b'{"status":"invalid_token"}'


def test_expected_audience_and_issuer(keys):
    config = signed_config(keys, **{"sasl.oauthbearer.expected.audience": "kafka,other",
                                    "sasl.oauthbearer.expected.issuer": "https://issuer.example"})
    good = sign(keys, claims(aud=["kafka"], iss="https://issuer.example"))
    assert OAuthBearerServer(ctx(config)).evaluate(client_response(good)) == b""
    for bad in (claims(aud="web", iss="https://issuer.example"), claims(iss="https://issuer.example"),
                claims(aud="kafka", iss="https://elsewhere.example"), claims(aud="kafka")):
        assert OAuthBearerServer(ctx(config)).evaluate(client_response(sign(keys, bad))) == \
            b'{"status":"invalid_token"}', bad


def test_sub_and_scope_claim_names(keys):
    config = signed_config(keys, **{"sasl.oauthbearer.sub.claim.name": "client_id",
                                    "sasl.oauthbearer.scope.claim.name": "scp"})
    server = OAuthBearerServer(ctx(config))
    assert server.evaluate(client_response(sign(keys, claims(client_id="svc-1", scp=["a", "b"])))) == b""
    assert server.authorization_id == "svc-1" and server.token is not None and server.token.scope == {"a", "b"}
    missing = OAuthBearerServer(ctx(config))
    assert missing.evaluate(client_response(sign(keys, claims()))) == b'{"status":"invalid_token"}'


def test_jwks_endpoint_urls():
    assert jwks_file_path("file:///etc/kafka/jwks%20a.json") == "/etc/kafka/jwks a.json"
    assert oauthbearer.jwks_endpoint("https://idp.example/jwks") == ("http", "https://idp.example/jwks")
    assert oauthbearer.jwks_endpoint("http://127.0.0.1:8080/k") == ("http", "http://127.0.0.1:8080/k")
    with pytest.raises(ConfigError, match="not a file: URL"):
        jwks_file_path("https://idp.example/jwks")
    for bad in ("ftp://idp.example/jwks", "https:///jwks", "jwks.json"):
        with pytest.raises(ConfigError, match="jwks.endpoint.url"):
            oauthbearer.jwks_endpoint(bad)


def test_a_token_whose_key_id_no_key_has_asks_for_a_refresh(keys):
    """Kafka's RefreshingHttpsJwksVerificationKeyResolver: no key for the token's kid asks the JWKS
    to be fetched again (the token itself is refused); a kid the JWKS has, or no kid, does not."""
    asked: list[str] = []
    config = signed_config(keys) | {oauthbearer.JWKS_KEY_ID_MISSING: asked.append}
    unknown = OAuthBearerServer(ctx(config))
    assert unknown.evaluate(client_response(sign(keys, claims(), key="other", kid="r2"))) == \
        b'{"status":"invalid_token"}'
    assert asked == ["r2"]
    assert OAuthBearerServer(ctx(config)).evaluate(client_response(sign(keys, claims()))) == b""
    wrong_key = OAuthBearerServer(ctx(config))      # the kid is known: a bad signature asks for nothing
    assert wrong_key.evaluate(client_response(sign(keys, claims(), key="other"))) == b'{"status":"invalid_token"}'
    assert asked == ["r2"]


def test_a_jwks_that_cannot_be_had_refuses_the_token(keys):
    def unreachable() -> str:
        raise oauthbearer.InvalidToken("no JWKS from https://idp.example/jwks: connection refused")
    server = OAuthBearerServer(ctx(signed_config(keys) | {oauthbearer.JWKS: unreachable}))
    assert server.evaluate(client_response(sign(keys, claims()))) == b'{"status":"invalid_token"}'


def test_missing_key_ids_ask_once_a_minute_each():
    missing = oauthbearer.MissingKeyIds()
    assert missing.should_refresh("a", 0) and not missing.should_refresh("a", 59_999)
    assert missing.should_refresh("b", 1) and missing.should_refresh("a", 60_000)
    assert not missing.should_refresh("x" * 1001, 0)
    for i in range(20):                                 # at most 16 remembered: the oldest go first
        missing.should_refresh(f"k{i}", 100)
    assert missing.should_refresh("a", 101)


def test_jwks_fetch_retries_double_until_the_maximum():
    assert oauthbearer.retry_waits_ms(100, 10_000) == [100, 200, 400, 800, 1600, 3200, 3700]
    assert oauthbearer.retry_waits_ms(100, 0) == []


def test_registered():
    assert MECHANISMS["OAUTHBEARER"](ctx()).mechanism == "OAUTHBEARER"


def test_a_token_made_after_the_handshake_is_validated_at_its_own_time():
    """kafka-python and aiokafka make their token after SaslHandshake was answered: the validator
    reads the time when the token comes (as Kafka's validators read the clock then), so a token
    issued between the handshake and the SaslAuthenticate is not "issued in the future"."""
    from strandline.protocol import api
    from strandline.protocol.api import ApiKey
    from strandline.security.authenticator import SaslAuthenticator

    auth = SaslAuthenticator(["OAUTHBEARER"], lambda now: ctx(jaas(), now_ms=now))
    shake = auth.receive(api.encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "t", {"mechanism": "OAUTHBEARER"}), NOW_MS)
    assert shake.close is None
    token = unsecured({"sub": "dave", "iat": (NOW_MS + 500) / 1000, "exp": NOW + 3600})
    step = auth.receive(api.encode_request(ApiKey.SASL_AUTHENTICATE, 2, 2, "t", {"auth_bytes": client_response(token)}),
                        NOW_MS + 800)
    assert step.close is None and step.principal == "User:dave", step
