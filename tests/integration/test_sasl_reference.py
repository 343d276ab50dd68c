"""Strandline's SASL mechanisms next to a real Kafka 3.9 (`strandline reference up` with SASL
listeners): the same client messages get the same answers from Kafka's servers and from
Strandline's (SCRAM-SHA-256/512, OAUTHBEARER with Kafka's unsecured validator and with KIP-768's
signed tokens over a JWKS file), and the CLI's clients (--command-config) authenticate to Kafka:
a SCRAM credential made by `strandline configs --entity-type users` is one Kafka accepts, and a
client certificate (PEM keystore) gets the principal ssl.principal.mapping.rules gives it in
both Kafka and Strandline.

Skipped, in one line, where Maven Central cannot be reached (tests/integration/kafka_reference.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import signal
import subprocess
import time

import pytest

from strandline.runtime.client import KafkaConnection
from strandline.security import oauthbearer, scram
from strandline.security.oauthbearer import client_response
from strandline.security.sasl import MECHANISMS, AuthenticationFailed, SaslContext
from strandline.security.scram_server import failure_message
from tests.conftest import free_ports, pid_alive, poll_until, run_cli, strandline_cmd, wait_for_line
from tests.integration.kafka_reference import dist, kafka_lines_or_skip
from tests.unit.cli.fake_broker import make_pki

pytestmark = pytest.mark.integration

KAFKA = kafka_lines_or_skip(("3.9",))
MODULE = "org.apache.kafka.common.security"
UNSECURED_JAAS = f'{MODULE}.oauthbearer.OAuthBearerLoginModule required unsecuredValidatorRequiredScope="admin";'
AUDIENCE, ISSUER = "kafka,other", "https://issuer.example"
MAPPING_RULES = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    root = tmp_path_factory.mktemp("jwks")
    found = {"rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
             "ec": ec.generate_private_key(ec.SECP256R1()),
             "other": rsa.generate_private_key(public_exponent=65537, key_size=2048)}
    jwks = {"keys": [json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(found["rsa"].public_key())) |
                     {"kid": "r1", "use": "sig", "alg": "RS256"},
                     json.loads(jwt.algorithms.ECAlgorithm.to_jwk(found["ec"].public_key())) | {"kid": "e1"}]}
    (root / "jwks.json").write_text(json.dumps(jwks))
    return found | {"jwks_path": root / "jwks.json", "jwks": json.dumps(jwks)}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def kafka(tmp_path_factory, keys, pki):
    """One Kafka 3.9 broker with ACLs (allowed where a resource has none): PLAINTEXT; SASL_PLAINTEXT
    with PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (unsecured validator, scope admin required);
    SIGNED (SASL_PLAINTEXT) with OAUTHBEARER over the JWKS file, expected audience and issuer; SSL
    with client certificates required and :data:`MAPPING_RULES`."""
    kafka_dist = dist(KAFKA, "3.9")
    root = tmp_path_factory.mktemp("kafka-sasl")
    plain, sasl, signed, tls, zk = free_ports(5)
    overrides = [
        f"listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},SIGNED://127.0.0.1:{signed},"
        f"SSL://127.0.0.1:{tls}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},"
        f"SIGNED://127.0.0.1:{signed},SSL://127.0.0.1:{tls}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SIGNED:SASL_PLAINTEXT,"
        "SSL:SSL",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer", "allow.everyone.if.no.acl.found=true",
        "listener.name.ssl.ssl.keystore.type=PEM", f"listener.name.ssl.ssl.keystore.location={pki['broker']}",
        "listener.name.ssl.ssl.truststore.type=PEM", f"listener.name.ssl.ssl.truststore.location={pki['ca']}",
        "listener.name.ssl.ssl.client.auth=required", f"listener.name.ssl.ssl.principal.mapping.rules={MAPPING_RULES}",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        f'listener.name.sasl_plaintext.plain.sasl.jaas.config={MODULE}.plain.PlainLoginModule required '
        f'username="admin" password="admin-secret" user_admin="admin-secret";',
        f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={MODULE}.scram.ScramLoginModule required;",
        f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={MODULE}.scram.ScramLoginModule required;",
        f"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config={UNSECURED_JAAS[:-1]} "
        f'unsecuredLoginStringClaim_sub="broker";',
        "listener.name.signed.sasl.enabled.mechanisms=OAUTHBEARER",
        f'listener.name.signed.oauthbearer.sasl.jaas.config={MODULE}.oauthbearer.OAuthBearerLoginModule required '
        f'unsecuredLoginStringClaim_sub="broker";',
        f"listener.name.signed.oauthbearer.sasl.server.callback.handler.class="
        f"{MODULE}.oauthbearer.OAuthBearerValidatorCallbackHandler",
        f"sasl.oauthbearer.jwks.endpoint.url=file://{keys['jwks_path']}",
        f"sasl.oauthbearer.expected.audience={AUDIENCE}", f"sasl.oauthbearer.expected.issuer={ISSUER}",
    ]
    cmd = strandline_cmd("reference", "up", "--kafka", "3.9", "--brokers", "1", "--data-dir", str(root / "data"),
                         "--base-port", str(plain), "--zookeeper-port", str(zk),
                         *[arg for o in overrides for arg in ("--override", o)])
    log = open(root / "up.log", "ab")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    try:
        wait_for_line(proc, "bootstrap.servers=", 180)
        info = json.loads((root / "data" / "reference.json").read_text())
        yield {"plain": f"127.0.0.1:{plain}", "sasl": f"127.0.0.1:{sasl}", "signed": f"127.0.0.1:{signed}",
               "ssl": f"127.0.0.1:{tls}", "version": kafka_dist.version}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        finally:
            log.close()
        pids = [n["pid"] for n in info["nodes"]] if "info" in locals() else []
        poll_until(lambda: not any(pid_alive(p) for p in pids), 30, message="Kafka's JVMs stopped")


def kafka_answers(address: str, mechanism: str, tokens: list[bytes]) -> list[tuple]:
    """(error code, error message, server token) of each SaslAuthenticate until one fails; ("closed",)
    when Kafka closes the connection instead."""
    out: list[tuple] = []
    with KafkaConnection(address, timeout_s=10, client_id="strandline-sasl-diff") as conn:
        assert int(conn.request(17, 1, {"mechanism": mechanism}).error_code) == 0
        for token in tokens:
            try:
                answer = conn.request(36, 1, {"auth_bytes": token})
            except Exception:          # the broker closed the connection
                out.append(("closed",))
                break
            out.append((int(answer.error_code), answer.error_message or None, bytes(answer.auth_bytes)))
            if int(answer.error_code):
                break
    return out


def our_answers(mechanism: str, tokens: list[bytes], config: dict, credentials: dict | None = None) -> list[tuple]:
    server = MECHANISMS[mechanism](SaslContext("SASL_PLAINTEXT", config,
                                               lambda user, mech: (credentials or {}).get((user, mech)),
                                               int(time.time() * 1000)))
    out: list[tuple] = []
    for token in tokens:
        try:
            out.append((0, None, server.evaluate(token)))
        except AuthenticationFailed as exc:
            out.append((58, str(exc), b""))
            break
    return out


def outcome(answers: list[tuple]) -> str:
    """ACCEPT, the error JSON the server answered with, or the failure's message."""
    first = answers[0]
    if first == ("closed",):
        return "closed"
    if first[0] == 0:
        return "ACCEPT" if first[2] == b"" else first[2].decode()
    return f"failed: {first[1]}"


def b64url(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def unsecured(claims: dict) -> str:
    return f"{b64url({'alg': 'none'})}.{b64url(claims)}."


def test_scram_credentials_made_by_strandline_authenticate_to_kafka(kafka, tmp_path):
    """`strandline configs --alter` (PBKDF2 here) writes alice's credentials into Kafka; the CLI's
    SCRAM clients then authenticate to Kafka with them, and a wrong password gets Kafka's message,
    which is the one Strandline's SCRAM server gives."""
    base = ["configs", "--entity-type", "users", "--entity-name", "alice"]
    done = run_cli(*base, "--bootstrap-server", kafka["plain"], "--alter", "--add-config",
                   "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]")
    assert (done.returncode, done.stdout) == (0, "Completed updating config for user alice.\n"), done.stderr
    for mechanism, password, status in (("SCRAM-SHA-256", "alice-secret", 0), ("SCRAM-SHA-512", "alice-secret", 0),
                                        ("SCRAM-SHA-256", "wrong", 2)):
        props = tmp_path / f"{mechanism}-{password}.properties"
        props.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\nsasl.jaas.config="
                         f'{MODULE}.scram.ScramLoginModule required username="alice" password="{password}";\n')
        done = run_cli(*base, "--bootstrap-server", kafka["sasl"], "--command-config", str(props), "--describe")
        assert done.returncode == status, done.stderr
        if status == 0:
            assert done.stdout == "SCRAM credential configs for user-principal 'alice' are " \
                                  "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n"
        else:
            assert done.stderr == f"strandline configs: authentication to {kafka['sasl']} failed: " \
                                  f"SASL_AUTHENTICATION_FAILED: {failure_message(mechanism)}\n"


def test_plain_and_unsecured_oauthbearer_clients_authenticate_to_kafka(kafka, tmp_path):
    cases = {
        "PLAIN": f'{MODULE}.plain.PlainLoginModule required username="admin" password="admin-secret";',
        "OAUTHBEARER": f'{MODULE}.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="svc" '
                       f'unsecuredLoginListClaim_scope=",admin";'}
    for mechanism, jaas in cases.items():
        props = tmp_path / f"{mechanism}.properties"
        props.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\nsasl.jaas.config={jaas}\n")
        done = run_cli("topics", "list", "--bootstrap-server", kafka["sasl"], "--command-config", str(props))
        assert done.returncode == 0, (mechanism, done.stderr)


def test_plain_answers_as_kafka(kafka):
    """PLAIN (RFC 4616: authzid NUL user NUL password) against the listener's PlainLoginModule users."""
    config = {"sasl.jaas.config": f'{MODULE}.plain.PlainLoginModule required username="admin" '
                                  f'password="admin-secret" user_admin="admin-secret";'}
    cases = [b"\0admin\0admin-secret", b"admin\0admin\0admin-secret", b"other\0admin\0admin-secret",
             b"\0admin\0wrong", b"\0nobody\0admin-secret", b"\0admin\0", b"\0\0admin-secret",
             b"admin-secret", b"\0admin\0admin-secret\0extra", b"\0admin\0admin-secret\xff"]
    for token in cases:
        theirs = outcome(kafka_answers(kafka["sasl"], "PLAIN", [token]))
        ours = outcome(our_answers("PLAIN", [token], config))
        assert ours == theirs, (token, theirs, ours)
    assert outcome(our_answers("PLAIN", [cases[0]], config)) == "ACCEPT"


def test_scram_and_unsecured_oauthbearer_answer_as_kafka(kafka):
    up = {"name": "bob", "salt": b"0123456789abcdef", "iterations": 4096}
    salted = hashlib.pbkdf2_hmac("sha256", b"bob-pw", up["salt"], 4096)
    done = run_cli("configs", "--bootstrap-server", kafka["plain"], "--entity-type", "users", "--entity-name", "bob",
                   "--alter", "--add-config", "SCRAM-SHA-256=[password=bob-pw]")
    assert done.returncode == 0, done.stderr
    credentials = {("bob", "SCRAM-SHA-256"): scram.credential(1, up["salt"], salted, 4096)}
    now = int(time.time())
    config = {"sasl.jaas.config": UNSECURED_JAAS}
    cases = [
        ("SCRAM-SHA-256", [b"n,a=alice,n=bob,r=abc"]),           # authzid other than the user
        ("SCRAM-SHA-256", [b"n,,n=nobody,r=abc"]),               # unknown user
        ("SCRAM-SHA-256", [b"p=tls-unique,,n=bob,r=abc"]),       # channel binding
        ("SCRAM-SHA-256", [b"y,,n=bob,r=abc"]),
        ("SCRAM-SHA-256", [b"garbage"]),
        ("SCRAM-SHA-256", [b"n,,n=bob,r=abc,tokenauth=true"]),   # a delegation token
        ("OAUTHBEARER", [client_response(unsecured({"sub": "svc", "exp": now + 600, "scope": "admin"}))]),
        ("OAUTHBEARER", [client_response(unsecured({"sub": "svc", "exp": now + 600, "scope": "admin"}), "other")]),
        ("OAUTHBEARER", [client_response(unsecured({"sub": "svc", "exp": now - 60, "scope": "admin"})), b"\x01"]),
        ("OAUTHBEARER", [client_response(unsecured({"sub": "svc", "exp": now + 600, "iat": now + 300,
                                                    "scope": "admin"})), b"\x01"]),
        ("OAUTHBEARER", [client_response(unsecured({"exp": now + 600, "scope": "admin"})), b"\x01"]),
        ("OAUTHBEARER", [client_response(unsecured({"sub": "svc", "exp": now + 600, "scope": "read"})), b"\x01"]),
        ("OAUTHBEARER", [client_response(unsecured({"sub": "svc", "exp": now + 600, "scope": "admin"}) + "x"),
                         b"\x01"]),
        ("OAUTHBEARER", [b"\x01"]),
        ("OAUTHBEARER", [client_response(unsecured({"sub": "svc", "exp": now + 600, "scope": ["admin"]}),
                                         extensions={"traceId": "1"})]),
    ]
    cases += [("SCRAM-SHA-512", tokens) for mechanism, tokens in cases if mechanism == "SCRAM-SHA-256"]
    for mechanism, tokens in cases:
        theirs = kafka_answers(kafka["sasl"], mechanism, tokens)
        ours = our_answers(mechanism, tokens, config, credentials)
        assert [outcome([a]) for a in ours] == [outcome([a]) for a in theirs], (mechanism, tokens[0])


def test_signed_oauthbearer_tokens_answer_as_kafka(kafka, keys):
    """KIP-768 tokens over the JWKS: Kafka's OAuthBearerValidatorCallbackHandler (jose4j) and
    Strandline's validator accept and refuse the same ones."""
    import jwt

    config = {"sasl.server.callback.handler.class": f"{MODULE}.oauthbearer.OAuthBearerValidatorCallbackHandler",
              "sasl.oauthbearer.jwks.endpoint.url": f"file://{keys['jwks_path']}", oauthbearer.JWKS: keys["jwks"],
              "sasl.oauthbearer.expected.audience": AUDIENCE, "sasl.oauthbearer.expected.issuer": ISSUER}
    now = int(time.time())

    def claims(**changes) -> dict:
        found = {"sub": "carol", "iat": now - 5, "exp": now + 600, "aud": "kafka", "iss": ISSUER} | changes
        return {k: v for k, v in found.items() if v is not None}

    def sign(payload: dict, key: str = "rsa", alg: str = "RS256", kid: str | None = "r1", **headers) -> str:
        return jwt.encode(payload, keys[key], algorithm=alg, headers=({"kid": kid} if kid else {}) | headers or None)

    def hs256(payload: dict) -> str:
        signing_input = f"{b64url({'alg': 'HS256', 'kid': 'r1'})}.{b64url(payload)}"
        mac = hmac.new(keys["jwks"].encode(), signing_input.encode(), hashlib.sha256).digest()
        return signing_input + "." + base64.urlsafe_b64encode(mac).decode().rstrip("=")

    cases = {
        "rs256": sign(claims()), "es256": sign(claims(), "ec", "ES256", "e1"), "no kid": sign(claims(), kid=None),
        "unknown kid": sign(claims(), kid="zz"), "other key": sign(claims(), "other"),
        "other key, no kid": sign(claims(), "other", kid=None), "expired beyond the skew": sign(claims(exp=now - 60)),
        "expired within the skew": sign(claims(iat=now - 100, exp=now - 15)),
        "exp before iat": sign(claims(iat=now - 5, exp=now - 15)), "no iat": sign(claims(iat=None)),
        "no exp": sign(claims(exp=None)), "iat ahead, exp later": sign(claims(iat=now + 300)),
        "exp == iat": sign(claims(iat=now + 600)), "no aud": sign(claims(aud=None)),
        "aud list": sign(claims(aud=["x", "other"])), "wrong aud": sign(claims(aud="web")),
        "no iss": sign(claims(iss=None)), "wrong iss": sign(claims(iss="https://elsewhere")),
        "nbf ahead beyond the skew": sign(claims(nbf=now + 90)), "nbf within the skew": sign(claims(nbf=now + 10)),
        "no sub": sign(claims(sub=None)), "blank sub": sign(claims(sub=" ")), "sub a number": sign(claims(sub=5)),
        "scope list": sign(claims(scope=["a", "b"])), "scope a number": sign(claims(scope=5)),
        "scope empty": sign(claims(scope="")), "scope blank item": sign(claims(scope=["a", " "])),
        "alg none": unsecured(claims()), "hs256 keyed with the jwks": hs256(claims()),
        "rsa alg, ec kid": sign(claims(), kid="e1"), "ec alg, rsa kid": sign(claims(), "ec", "ES256", "r1"),
        "rs384 on an RS256 jwk": sign(claims(), alg="RS384"), "ps256": sign(claims(), alg="PS256"),
        "tampered": sign(claims())[:-6] + "AAAAAA", "exp a string": sign(claims(exp="soon")),
        "fractional times": sign(claims(iat=now - 5.5, exp=now + 600.7)), "typ at+jwt": sign(claims(), typ="at+jwt"),
        "crit header": sign(claims(), crit=["x"], x=1),
    }
    differences = {}
    for name, token in cases.items():
        tokens = [client_response(token), b"\x01"]
        theirs, ours = outcome(kafka_answers(kafka["signed"], "OAUTHBEARER", tokens)), \
            outcome(our_answers("OAUTHBEARER", tokens, config))
        if theirs != ours:
            differences[name] = (theirs, ours)
    assert differences == {}
    assert outcome(our_answers("OAUTHBEARER", [client_response(cases["rs256"])], config)) == "ACCEPT"


def test_a_client_certificate_gets_the_mapped_principal_in_kafka_and_in_strandline(kafka, pki, tmp_path):
    """Only User:duke may describe topic `secret`: the CLI over SSL with the client certificate
    (ssl.keystore.location, PEM) may, so Kafka mapped CN=Duke,OU=ServiceUsers,O=Org,C=US to duke,
    which is what Strandline's ssl_principal gives; PLAINTEXT (User:ANONYMOUS) may not, and a
    client without a certificate is refused."""
    from strandline.security.principal import ssl_principal

    assert ssl_principal("CN=Duke,OU=ServiceUsers,O=Org,C=US", MAPPING_RULES) == "duke"
    assert run_cli("topics", "create", "--bootstrap-server", kafka["plain"], "--topic", "secret", "--partitions", "1",
                   "--replication-factor", "1").returncode == 0
    done = run_cli("acls", "add", "--bootstrap-server", kafka["plain"], "--topic", "secret", "--allow-principal",
                   "User:duke", "--operation", "describe")
    assert done.returncode == 0, done.stderr
    mtls = tmp_path / "mtls.properties"
    mtls.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={pki['ca']}\n"
                    f"ssl.keystore.type=PEM\nssl.keystore.location={pki['client_keystore']}\n")

    def describe(address: str, props=None) -> subprocess.CompletedProcess:
        return run_cli("topics", "describe", "--bootstrap-server", address, "--topic", "secret",
                       *(["--command-config", str(props)] if props else []))
    poll_until(lambda: describe(kafka["ssl"], mtls).returncode == 0, 30, message="User:duke describes secret")
    as_duke = describe(kafka["ssl"], mtls)
    assert as_duke.stdout.startswith("Topic: secret\t"), as_duke
    anonymous = describe(kafka["plain"])
    assert (anonymous.returncode, anonymous.stderr) == (1, "strandline topics: topic secret: TOPIC_AUTHORIZATION_FAILED\n")
    no_cert = tmp_path / "nocert.properties"
    no_cert.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={pki['ca']}\n")
    refused = describe(kafka["ssl"], no_cert)
    assert refused.returncode == 2 and "bad certificate" in refused.stderr, refused     # TLS 1.3: at the first request
    assert len(refused.stderr.strip().splitlines()) == 1, refused


def test_produce_and_consume_take_the_command_config(kafka, pki, tmp_path):
    """`strandline produce`/`consume` hand --command-config to librdkafka under its own names:
    records go in over SASL_PLAINTEXT/SCRAM-SHA-512 and come back over SSL with the client
    certificate."""
    done = run_cli("configs", "--bootstrap-server", kafka["plain"], "--entity-type", "users", "--entity-name",
                   "writer", "--alter", "--add-config", "SCRAM-SHA-512=[password=writer-pw]")
    assert done.returncode == 0, done.stderr
    assert run_cli("topics", "create", "--bootstrap-server", kafka["plain"], "--topic", "sasl-records",
                   "--partitions", "1", "--replication-factor", "1").returncode == 0
    scram_props = tmp_path / "writer.properties"
    scram_props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config="
                           f'{MODULE}.scram.ScramLoginModule required username="writer" password="writer-pw";\n')
    produced = subprocess.run(strandline_cmd("produce", "--bootstrap-server", kafka["sasl"], "--topic", "sasl-records",
                                             "--command-config", str(scram_props)),
                              input="one\ntwo\n", capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    mtls = tmp_path / "reader.properties"
    mtls.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={pki['ca']}\n"
                    f"ssl.keystore.type=PEM\nssl.keystore.location={pki['client_keystore']}\n")
    consumed = run_cli("consume", "--bootstrap-server", kafka["ssl"], "--topic", "sasl-records", "--offset",
                       "beginning", "--exit-at-end", "--command-config", str(mtls))
    assert (consumed.returncode, consumed.stdout) == (0, "one\ntwo\n"), consumed.stderr


def test_kcat_of_an_old_librdkafka_authenticates_with_scram_to_kafka_as_to_strandline(kafka):
    """librdkafka before 2.6.1 (Debian's kcat: 2.0.2) sends its nonce twice in the SCRAM
    client-final (librdkafka#4895). Kafka 3.9 takes it, its nonce ending with the server's; so does
    Strandline (the kcat cells of tests/integration/test_up_security.py and test_sasl_mechanisms.py)."""
    import re
    import shutil

    from tests.conftest import missing_prerequisite

    if shutil.which("kcat") is None:
        missing_prerequisite("kcat is not installed (make kcat installs it)")
    version = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", subprocess.run(["kcat", "-V"], capture_output=True,
                                                                          text=True).stdout)
    made = run_cli("configs", "--entity-type", "users", "--entity-name", "kim", "--bootstrap-server", kafka["plain"],
                   "--alter", "--add-config", "SCRAM-SHA-512=[password=kim-secret]")
    assert made.returncode == 0, made.stderr
    for password, ok in (("kim-secret", True), ("wrong", False)):
        listed = subprocess.run(["kcat", "-b", kafka["sasl"], "-X", "security.protocol=SASL_PLAINTEXT",
                                 "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=kim",
                                 "-X", f"sasl.password={password}", "-L", "-m", "5"],
                                capture_output=True, text=True, timeout=30)
        assert (listed.returncode == 0) == ok, (version and version.groups(), listed.stderr)
        assert ok or "Authentication failed" in listed.stderr
