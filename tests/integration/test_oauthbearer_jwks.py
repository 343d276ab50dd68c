"""OAUTHBEARER with signed tokens (KIP-768) whose JWKS the broker fetches over HTTPS: a real HTTPS
server on the loopback (its certificate from a test CA, which the listener's OAUTHBEARER JAAS
config gives as ``ssl.truststore.*`` options) serves a JWKS made with ``cryptography``.

A token signed by a key of that JWKS is accepted; after the keys rotate, a token with the new key
id makes the broker fetch the JWKS again (Kafka's ``RefreshingHttpsJwks``) and is then accepted;
a listener whose JWKS URL does not answer refuses signed tokens (``invalid_token``), its broker
logs why and serves on. Each client that can send a signed token round-trips a record with one:
confluent-kafka, kafka-python and aiokafka from their token callbacks, kcat from librdkafka's
OIDC client-credentials flow against a token endpoint of the same test server."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import threading
import time
import uuid

import pytest

from strandline.runtime.client import KafkaConnection
from strandline.security.oauthbearer import client_response
from tests.conftest import free_ports, new_cluster, poll_until
from tests.unit.cli.fake_broker import make_pki

pytestmark = pytest.mark.integration

MODULE = "org.apache.kafka.common.security.oauthbearer"


class Jwks:
    """Signing keys (``cryptography``) and the JWKS of those that are published."""

    def __init__(self) -> None:
        self.keys: dict[str, object] = {}
        self.published: list[str] = []

    def new_key(self, kid: str) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def document(self) -> bytes:
        import jwt

        return json.dumps({"keys": [json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.keys[kid].public_key())) |
                                    {"kid": kid, "use": "sig", "alg": "RS256"} for kid in self.published]}).encode()

    def token(self, kid: str, sub: str = "carol", lifetime_s: int = 600) -> str:
        import jwt

        now = int(time.time())
        return jwt.encode({"sub": sub, "iat": now - 5, "exp": now + lifetime_s}, self.keys[kid], algorithm="RS256",
                          headers={"kid": kid})


class IdentityProvider:
    """``GET /jwks`` (the published keys) over HTTPS; ``POST /token`` over plain HTTP on another
    port (librdkafka's OIDC client-credentials flow: a signed token for the client id)."""

    def __init__(self, jwks: Jwks, pki: dict[str, str]) -> None:
        self.jwks = jwks
        self.jwks_requests = 0
        self.token_kid = ""
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/jwks":
                    self.send_error(404)
                    return
                provider.jwks_requests += 1
                self._send(provider.jwks.document())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                basic = self.headers.get("Authorization", "")
                client_id = base64.b64decode(basic.split(" ", 1)[1]).decode().split(":")[0] if " " in basic else ""
                if self.path != "/token" or "grant_type=client_credentials" not in body or not client_id:
                    self.send_error(400)
                    return
                token = provider.jwks.token(provider.token_kid, sub=client_id)
                self._send(json.dumps({"access_token": token, "token_type": "bearer", "expires_in": 600}).encode())

            def _send(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.https = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki["broker"])                  # a certificate for 127.0.0.1 from the test CA
        self.https.socket = ctx.wrap_socket(self.https.socket, server_side=True)
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.jwks_url = f"https://127.0.0.1:{self.https.server_address[1]}/jwks"
        self.token_url = f"http://127.0.0.1:{self.http.server_address[1]}/token"
        self.threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (self.https, self.http)]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        for s in (self.https, self.http):
            s.shutdown()
            s.server_close()


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    jwks = Jwks()
    jwks.new_key("k1")
    jwks.published = ["k1"]
    provider = IdentityProvider(jwks, pki)
    provider.pki = pki
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, idp):
    """One broker: SIGNED (SASL_PLAINTEXT, OAUTHBEARER over the HTTPS JWKS) and UNREACHABLE
    (the same, its JWKS URL a loopback port nothing listens on)."""
    c = new_cluster(tmp_path_factory.mktemp("oauthbearer-jwks"), 1)
    signed, unreachable, nobody = free_ports(3)
    trust = f'ssl.truststore.type="PEM" ssl.truststore.location="{idp.pki["ca"]}"'
    c.overrides += [
        f"listeners=PLAINTEXT://127.0.0.1:{c.base_port},SIGNED://127.0.0.1:{signed},"
        f"UNREACHABLE://127.0.0.1:{unreachable}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SIGNED:SASL_PLAINTEXT,UNREACHABLE:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=OAUTHBEARER",
        f"listener.name.signed.oauthbearer.sasl.jaas.config={MODULE}.OAuthBearerLoginModule required {trust};",
        f"listener.name.signed.sasl.oauthbearer.jwks.endpoint.url={idp.jwks_url}",
        f"listener.name.unreachable.oauthbearer.sasl.jaas.config={MODULE}.OAuthBearerLoginModule required {trust};",
        f"listener.name.unreachable.sasl.oauthbearer.jwks.endpoint.url=https://127.0.0.1:{nobody}/jwks",
        "listener.name.unreachable.sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms=300",
        "offsets.topic.num.partitions=1", "group.initial.rebalance.delay.ms=0"]
    c.signed, c.unreachable, c.nobody = f"127.0.0.1:{signed}", f"127.0.0.1:{unreachable}", nobody
    c.start(90)
    yield c
    c.stop()


def authenticate(address: str, token: str) -> str:
    """SaslHandshake and SaslAuthenticate (v1) with ``token``: "ACCEPT", or the broker's answer."""
    with KafkaConnection(address, timeout_s=10, client_id="jwks-test") as conn:
        assert int(conn.request(17, 1, {"mechanism": "OAUTHBEARER"}).error_code) == 0
        answer = conn.request(36, 1, {"auth_bytes": client_response(token)})
        if int(answer.error_code):
            return f"error {int(answer.error_code)}: {answer.error_message}"
        return "ACCEPT" if bytes(answer.auth_bytes) == b"" else bytes(answer.auth_bytes).decode()


def test_a_token_signed_by_a_key_the_https_jwks_publishes_is_accepted(cluster, idp):
    assert authenticate(cluster.signed, idp.jwks.token("k1")) == "ACCEPT"
    assert idp.jwks_requests >= 1
    unpublished = Jwks()
    unpublished.new_key("k1")                            # the same key id, another key: the signature fails
    assert authenticate(cluster.signed, unpublished.token("k1")) == '{"status":"invalid_token"}'


def test_after_the_keys_rotate_a_new_key_id_fetches_the_jwks_again(cluster, idp):
    """The broker fetched k1's JWKS at start-up (refreshed hourly); the provider rotates to k2. A
    k2 token is refused while the broker lacks the key, and makes it fetch the JWKS at once."""
    assert authenticate(cluster.signed, idp.jwks.token("k1")) == "ACCEPT"
    fetched = idp.jwks_requests
    idp.jwks.new_key("k2")
    idp.jwks.published = ["k2"]
    token = idp.jwks.token("k2")
    assert authenticate(cluster.signed, token) == '{"status":"invalid_token"}'      # as Kafka: refused, then fetched
    poll_until(lambda: authenticate(cluster.signed, token) == "ACCEPT", 15,
               message="a k2 token accepted after the JWKS was fetched again")
    assert idp.jwks_requests > fetched
    assert authenticate(cluster.signed, idp.jwks.token("k1")) == '{"status":"invalid_token"}'   # k1 is gone


def test_an_unreachable_jwks_url_refuses_signed_tokens_and_the_broker_serves_on(cluster, idp):
    log = cluster.data_dir / "broker-1" / "broker.log"
    expected = f"cannot fetch the JWKS from https://127.0.0.1:{cluster.nobody}/jwks"
    poll_until(lambda: expected in log.read_text(errors="replace"), 30, message="the failed fetch logged")
    line = next(l for l in log.read_text(errors="replace").splitlines() if expected in l)
    assert "Connection refused" in line and "signed OAUTHBEARER tokens are refused" in line, line
    kid = idp.jwks.published[0]
    assert authenticate(cluster.unreachable, idp.jwks.token(kid)) == '{"status":"invalid_token"}'
    assert authenticate(cluster.signed, idp.jwks.token(kid)) == "ACCEPT"          # the broker serves on
    from tests.integration.security_clients import Auth, round_trip

    round_trip("confluent-kafka", Auth(f"127.0.0.1:{cluster.base_port}", "PLAINTEXT"))


def current_kid(cluster, idp) -> str:
    """A published key id the broker has fetched (a token of it is accepted)."""
    kid = idp.jwks.published[-1]
    poll_until(lambda: authenticate(cluster.signed, idp.jwks.token(kid)) == "ACCEPT", 15,
               message=f"a {kid} token accepted")
    return kid


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka", "kcat"])
def test_each_client_round_trips_with_a_signed_token(cluster, idp, client):
    """confluent-kafka, kafka-python and aiokafka send the token their callback gives; kcat has
    none: librdkafka's OIDC flow gets it from the provider's token endpoint (client credentials)."""
    from tests.integration.security_clients import Auth, round_trip

    kid = current_kid(cluster, idp)
    user = f"svc-{uuid.uuid4().hex[:6]}"
    if client == "kcat":
        import shutil
        import subprocess

        if shutil.which("kcat") is None:
            pytest.skip("kcat is not installed (make kcat installs it)")
        probe = subprocess.run(["kcat", "-X", "sasl.oauthbearer.method=oidc", "-V"], capture_output=True, text=True,
                               timeout=30)
        if "not supported in this build" in probe.stderr:    # Debian's kcat 1.7.1 (librdkafka 2.0.2)
            pytest.skip(f"this kcat cannot send a signed token: {probe.stderr.strip()[2:]}")
        idp.token_kid = kid
        auth = Auth(cluster.signed, "SASL_PLAINTEXT", "OAUTHBEARER", user, "secret", token_endpoint=idp.token_url)
    else:
        auth = Auth(cluster.signed, "SASL_PLAINTEXT", "OAUTHBEARER", user, token=idp.jwks.token(kid, sub=user))
    round_trip(client, auth)
