"""--command-config: Kafka client properties read in one place (strandline.cli.client_config), and
every admin command connecting with them (TLS, client certificates, SASL PLAIN, SCRAM and
OAUTHBEARER) to a broker on a thread; `configs --entity-type users` creating SCRAM credentials
that the SCRAM server then accepts."""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
from pathlib import Path

import pytest
import scramp

from strandline.cli import client_config
from strandline.cli.client_config import ClientSecurity, ScramClient, from_properties, librdkafka, unsecured_token
from strandline.cli.configs import java_double, kafka_style, parse_scram, scram_upsertion
from strandline.cli.main import build_parser, main
from strandline.core.config_key import ConfigError
from strandline.errors import StrandlineError
from strandline.security import oauthbearer, scram
from strandline.security.sasl import SaslContext
from strandline.security.scram_server import ScramServer
from tests.unit.cli.fake_broker import FakeBroker, make_pki

JAAS_SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{pw}";'
JAAS_PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="{pw}";'


@pytest.fixture(autouse=True)
def fresh_settings():
    """Each test starts from no --command-config (main() sets the settings of its command)."""
    saved = client_config._active, client_config._given
    yield
    client_config._active, client_config._given = saved


def write(path: Path, props: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


# --- reading the properties ---------------------------------------------------------------------

def test_plaintext_by_default_and_unknown_keys_warned():
    security, warnings = from_properties({"client.id": "x", "sasl.mechansim": "PLAIN"})
    assert security.protocol == "PLAINTEXT" and not security.tls and not security.sasl
    assert warnings == ["sasl.mechansim is not a client setting Strandline reads; ignored"]


def test_sasl_ssl_with_scram_jaas_and_pem_truststore(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n...\n")
    security, warnings = from_properties({
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": JAAS_SCRAM.format(pw="s3cret"), "ssl.truststore.location": str(ca),
        "ssl.truststore.password": "unused"})
    assert warnings == []
    assert (security.protocol, security.mechanism, security.username, security.password, security.ca_file) == \
        ("SASL_SSL", "SCRAM-SHA-512", "alice", "s3cret", str(ca))
    assert security.check_hostname and security.verify


def test_librdkafka_names():
    security, _ = from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                   "sasl.username": "bob", "sasl.password": "pw"})
    assert librdkafka(security) == {"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                                    "sasl.username": "bob", "sasl.password": "pw"}
    security, _ = from_properties({"security.protocol": "SSL", "ssl.ca.location": "/ca.pem",
                                   "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem",
                                   "ssl.endpoint.identification.algorithm": ""})
    assert librdkafka(security) == {"security.protocol": "ssl", "ssl.ca.location": "/ca.pem",
                                    "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem",
                                    "ssl.endpoint.identification.algorithm": "none"}


@pytest.mark.parametrize("props, message", [
    ({"security.protocol": "TLS"}, "security.protocol=TLS"),
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism=GSSAPI is not supported"),      # Kafka's default
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs a username and a password"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS_SCRAM.format(pw="x")},
     "needs PlainLoginModule"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": "Scram required"},
     "expected ; at the end"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config":
      "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"},
     "unsecuredLoginStringClaim_sub"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/x.jks", "ssl.truststore.type": "JKS"},
     "only PEM stores"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}, "both ssl.certificate.location"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"}, "https, or empty"),
])
def test_bad_settings_are_one_clear_line(props, message):
    with pytest.raises(ConfigError, match=message):
        from_properties(props)


def test_a_jks_truststore_without_type_is_refused(tmp_path):
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    with pytest.raises(ConfigError, match="not a PEM file"):
        from_properties({"security.protocol": "SSL", "ssl.truststore.location": str(jks)})


def test_command_config_on_every_admin_command_and_a_missing_file(capsys, tmp_path):
    parser = build_parser()
    for argv in (["topics", "list"], ["configs", "describe", "--entity-type", "users"], ["acls", "list"],
                 ["groups", "list"], ["cluster", "status"], ["produce", "--topic", "t"]):
        assert parser.parse_args(argv + ["--command-config", "f"]).command_config == "f", argv
    assert main(["topics", "list", "--command-config", str(tmp_path / "none.properties")]) == 2
    assert "cannot read" in capsys.readouterr().err


# --- SASL clients against Strandline's servers --------------------------------------------------

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_against_the_scram_server(mechanism):
    code = 1 if mechanism == "SCRAM-SHA-256" else 2
    upsertion = scram_upsertion("alice", mechanism, 4096, "pw")
    stored = scram.credential(code, upsertion["salt"], upsertion["salted_password"], 4096)
    server = ScramServer(SaslContext("SASL_SSL", {}, lambda u, m: stored if (u, m) == ("alice", mechanism) else None,
                                     0), mechanism)
    client = ScramClient(mechanism, "alice", "pw")
    client.check(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.authorization_id == "alice"
    wrong = ScramClient(mechanism, "alice", "pw")
    server_first = ScramServer(server._context, mechanism).evaluate(wrong.first())
    wrong.final(server_first)
    with pytest.raises(StrandlineError, match="signature is wrong"):
        wrong.check(b"v=" + base64.b64encode(b"x" * 32))


def test_scram_client_against_scramp_server():
    """scramp's server side checks this client's proof independently of Strandline's server."""
    mech = scramp.ScramMechanism("SCRAM-SHA-256")
    salt, stored_key, server_key, iterations = mech.make_auth_info("pw", iteration_count=4096)
    server = mech.make_server(lambda user: (salt, stored_key, server_key, iterations))
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    server.set_client_first(client.first().decode())
    final = client.final(server.get_server_first().encode())
    server.set_client_final(final.decode())
    client.check(server.get_server_final().encode())


def test_salted_password_is_pbkdf2_of_the_password():
    up = scram_upsertion("alice", "SCRAM-SHA-512", 8192, "pw", salt=b"salt")
    assert up == {"name": "alice", "mechanism": 2, "iterations": 8192, "salt": b"salt",
                  "salted_password": hashlib.pbkdf2_hmac("sha512", b"pw", b"salt", 8192)}
    assert 16 <= len(scram_upsertion("a", "SCRAM-SHA-256", 4096, "pw")["salt"]) <= 26     # 130 bits in base 36
    assert scram_upsertion("a", "SCRAM-SHA-256", 4096, "pw")["salt"] != scram_upsertion(
        "a", "SCRAM-SHA-256", 4096, "pw")["salt"]


def test_unsecured_token_is_accepted_by_the_unsecured_validator():
    token = unsecured_token({"sub": "svc"}, 600, 1_800_000_000.0)
    header, claims, signature = token.split(".")
    assert signature == "" and json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    found = oauthbearer.UnsecuredValidator().validate(token, 1_800_000_000_000)
    assert found.principal == "svc" and found.expiration_ms == 1_800_000_600_000
    # issued at the clock's millisecond, never the next one: a broker reading its clock in the
    # same millisecond takes it (rounding 0.0006 s up to 0.001 s made it "issued in the future")
    late = unsecured_token({"sub": "svc"}, 600, 1_800_000_000.0006)
    assert oauthbearer.UnsecuredValidator().validate(late, 1_800_000_000_000).principal == "svc"


# --- configs --entity-type users: the parsing ---------------------------------------------------

def test_kafka_style_arguments():
    assert kafka_style(["configs", "--entity-type", "users", "--alter", "--add-config", "x=1"]) == \
        ["configs", "alter", "--entity-type", "users", "--add-config", "x=1"]
    assert kafka_style(["configs", "--describe", "--entity-type", "users"]) == \
        ["configs", "describe", "--entity-type", "users"]
    assert kafka_style(["configs", "alter", "--entity-type", "topics"]) == ["configs", "alter", "--entity-type", "topics"]
    assert kafka_style(["topics", "--describe"]) == ["topics", "--describe"]


def test_parse_scram():
    assert parse_scram("SCRAM-SHA-256", "iterations=8192,password=a=b") == (8192, "a=b")
    assert parse_scram("SCRAM-SHA-256", "password=secret") == (4096, "secret")
    for bad, message in (("iterations=8192", "give password"), ("iterations=x,password=p", "not a number"),
                         ("salt=1,password=p", "expected iterations")):
        with pytest.raises(StrandlineError, match=message):
            parse_scram("SCRAM-SHA-256", bad)


@pytest.mark.parametrize("value, text", [(1024.0, "1024.0"), (2e7, "2.0E7"), (0.5, "0.5"), (1.5e-4, "1.5E-4"),
                                         (12345678.0, "1.2345678E7"), (0.0, "0.0"), (9999999.0, "9999999.0")])
def test_java_double(value, text):
    assert java_double(value) == text


# --- whole commands against a broker ------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def server_tls(pki, client_auth: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["broker"])
    if client_auth:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki["ca"])
    return context


@pytest.fixture
def broker_factory():
    brokers = []

    def make(**kwargs) -> FakeBroker:
        brokers.append(FakeBroker(**kwargs))
        return brokers[-1]
    yield make
    for b in brokers:
        b.close()


def test_scram_user_created_over_tls_and_plain_then_used_to_authenticate(broker_factory, pki, tmp_path, capsys):
    """The admin (SASL/PLAIN over TLS) creates alice's SCRAM credential with kafka-configs' syntax;
    alice then authenticates with SCRAM-SHA-256 and sees her own credential described."""
    broker = broker_factory(tls=server_tls(pki), sasl=True, plain_users={"admin": "admin-secret"})
    admin = write(tmp_path / "admin.properties", {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "ssl.truststore.type": "PEM",
        "sasl.jaas.config": JAAS_PLAIN.format(pw="admin-secret"), "ssl.truststore.location": pki["ca"]})
    assert main(["configs", "--bootstrap-server", broker.address, "--command-config", admin, "--entity-type", "users",
                 "--entity-name", "alice", "--alter", "--add-config",
                 "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]"]) == 0
    assert capsys.readouterr().out == "Completed updating config for user alice.\n"
    assert set(broker.credentials) == {("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512")}
    assert all("password" not in text and "alice-secret" not in text for text in broker.credentials.values())
    assert broker.seen == [(3, "User:admin"), (51, "User:admin")]      # the controller asked for, then told

    alice = write(tmp_path / "alice.properties", {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "ssl.truststore.location": pki["ca"],
        "sasl.jaas.config": JAAS_SCRAM.format(pw="alice-secret")})
    assert main(["configs", "describe", "--bootstrap-server", broker.address, "--command-config", alice,
                 "--entity-type", "users", "--entity-name", "alice"]) == 0
    assert capsys.readouterr().out == \
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, " \
        "SCRAM-SHA-512=iterations=4096\n"
    assert broker.seen[-2:] == [(48, "User:alice"), (50, "User:alice")]

    wrong = write(tmp_path / "wrong.properties", {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.truststore.location": pki["ca"],
        "sasl.jaas.config": JAAS_SCRAM.format(pw="guess")})
    assert main(["configs", "describe", "--bootstrap-server", broker.address, "--command-config", wrong,
                 "--entity-type", "users"]) == 2
    assert capsys.readouterr().err == (
        f"strandline configs: authentication to {broker.address} failed: SASL_AUTHENTICATION_FAILED: Authentication "
        "failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512\n")


def test_delete_scram_and_user_quotas(broker_factory, tmp_path, capsys):
    broker = broker_factory()
    base = ["--bootstrap-server", broker.address, "--entity-type", "users"]
    assert main(["configs", "alter", *base, "--entity-name", "bob", "--add-config",
                 "SCRAM-SHA-512=[password=x],producer_byte_rate=1024,consumer_byte_rate=2e7"]) == 0
    assert main(["configs", "alter", *base, "--entity-default", "--add-config", "request_percentage=50"]) == 0
    capsys.readouterr()
    assert main(["configs", "describe", *base, "--entity-name", "bob"]) == 0
    assert capsys.readouterr().out == (
        "Quota configs for user-principal 'bob' are consumer_byte_rate=2.0E7, producer_byte_rate=1024.0\n"
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=4096\n")
    assert main(["configs", "describe", *base, "--entity-default"]) == 0
    assert capsys.readouterr().out == "Quota configs for the default user-principal are request_percentage=50.0\n"
    assert main(["configs", "alter", *base, "--entity-name", "bob", "--delete-config",
                 "SCRAM-SHA-512,producer_byte_rate"]) == 0
    capsys.readouterr()
    assert main(["configs", "describe", *base, "--entity-name", "bob"]) == 0
    assert capsys.readouterr().out == "Quota configs for user-principal 'bob' are consumer_byte_rate=2.0E7\n"
    assert broker.credentials == {}                 # no credentials: no SCRAM line, as Kafka's tool


@pytest.mark.parametrize("argv, message", [
    (["--entity-name", "bob", "--add-config", "segment.bytes=1"], "not a user config: segment.bytes"),
    (["--entity-default", "--add-config", "SCRAM-SHA-256=[password=x]"], "belong to one user"),
    (["--entity-name", "bob", "--add-config", "SCRAM-SHA-256=[iterations=8192]"], "give password"),
    (["--entity-name", "bob", "--add-config", "producer_byte_rate=fast"], "is not a number"),
    (["--entity-name", "bob"], "nothing to alter"),
    ([], "needs --entity-name or --entity-default"),
])
def test_bad_user_alterations(broker_factory, capsys, argv, message):
    broker = broker_factory()
    assert main(["configs", "alter", "--bootstrap-server", broker.address, "--entity-type", "users", *argv]) == 2
    assert message in capsys.readouterr().err
    assert broker.seen == [] and broker.credentials == {}


def test_mutual_tls_principal_from_the_client_certificate(broker_factory, pki, tmp_path, capsys):
    """ssl.keystore.location (PEM) presents the client certificate; the broker maps its DN with
    ssl.principal.mapping.rules (Kafka's example rule: CN of a ServiceUsers OU, lower-cased)."""
    broker = broker_factory(tls=server_tls(pki, client_auth=True),
                            mapping_rules="RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT")
    props = write(tmp_path / "mtls.properties", {
        "security.protocol": "SSL", "ssl.truststore.location": pki["ca"], "ssl.truststore.type": "PEM",
        "ssl.keystore.location": pki["client_keystore"], "ssl.keystore.type": "PEM"})
    assert main(["configs", "describe", "--bootstrap-server", broker.address, "--command-config", props,
                 "--entity-type", "users"]) == 0
    assert broker.seen == [(48, "User:duke"), (50, "User:duke")]
    separate = write(tmp_path / "mtls2.properties", {
        "security.protocol": "SSL", "ssl.ca.location": pki["ca"], "ssl.certificate.location": pki["client_cert"],
        "ssl.key.location": pki["client_key"]})
    assert main(["configs", "describe", "--bootstrap-server", broker.address, "--command-config", separate,
                 "--entity-type", "users"]) == 0
    assert broker.seen[-1] == (50, "User:duke")
    inline = write(tmp_path / "mtls3.properties", {
        "security.protocol": "SSL", "ssl.truststore.certificates": Path(pki["ca"]).read_text().replace("\n", "\\n"),
        "ssl.keystore.key": Path(pki["client_key"]).read_text().replace("\n", "\\n"),
        "ssl.keystore.certificate.chain": Path(pki["client_cert"]).read_text().replace("\n", "\\n")})
    assert main(["configs", "describe", "--bootstrap-server", broker.address, "--command-config", inline,
                 "--entity-type", "users"]) == 0
    assert broker.seen[-1] == (50, "User:duke") and len(broker.seen) == 6
    capsys.readouterr()


def test_a_truststore_replaces_the_systems_cas(pki):
    """As Kafka's truststore (and librdkafka's ssl.ca.location): only the CA given is trusted."""
    security, _ = from_properties({"security.protocol": "SSL", "ssl.truststore.location": pki["ca"]})
    trusted = client_config.ssl_context(security).get_ca_certs()
    assert [dict(rdn for rdns in c["subject"] for rdn in rdns)["commonName"] for c in trusted] == ["Strandline Test CA"]


def test_tls_to_a_broker_whose_certificate_is_not_trusted(broker_factory, pki, tmp_path, capsys):
    broker = broker_factory(tls=server_tls(pki))
    props = write(tmp_path / "ssl.properties", {"security.protocol": "SSL"})       # the system's CAs only
    assert main(["topics", "list", "--bootstrap-server", broker.address, "--command-config", props]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"strandline topics: TLS connection to {broker.address} failed: ") and \
        "CERTIFICATE_VERIFY_FAILED" in err and err.count("\n") == 1


def test_oauthbearer_unsecured_token(broker_factory, tmp_path, capsys):
    broker = broker_factory(sasl=True, config={"sasl.jaas.config":
                                               "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                                               "required unsecuredValidatorRequiredScope=\"admin\";"})
    jaas = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'unsecuredLoginStringClaim_sub="svc-1" unsecuredLoginListClaim_scope=",admin,read";')
    props = write(tmp_path / "oauth.properties", {"security.protocol": "SASL_PLAINTEXT",
                                                  "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": jaas})
    assert main(["configs", "describe", "--bootstrap-server", broker.address, "--command-config", props,
                 "--entity-type", "users"]) == 0
    assert broker.seen == [(48, "User:svc-1"), (50, "User:svc-1")]
    no_scope = write(tmp_path / "weak.properties", {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": jaas.replace(",admin,read", ",read")})
    assert main(["configs", "describe", "--bootstrap-server", broker.address, "--command-config", no_scope,
                 "--entity-type", "users"]) == 2
    assert 'SASL_AUTHENTICATION_FAILED: {"status":"insufficient_scope", "scope":"[admin]"}' in capsys.readouterr().err


def test_a_mechanism_the_broker_does_not_offer(broker_factory, tmp_path, capsys):
    broker = broker_factory(sasl=True)
    props = write(tmp_path / "x.properties", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                              "sasl.username": "u", "sasl.password": "p"})
    assert main(["acls", "list", "--bootstrap-server", broker.address, "--command-config", props]) == 2
    assert "SASL_AUTHENTICATION_FAILED: Authentication failed: Invalid username or password" in capsys.readouterr().err


def test_no_command_config_changes_nothing():
    assert client_config.active() == ClientSecurity() and not client_config.given()


def test_a_fresh_salt_is_ascii_as_kafka_makes_it():
    """`strandline configs --entity-type users` (and `up --security`) salt a credential as Kafka's
    ScramFormatter does: the base-36 digits of a 130-bit random number."""
    salts = [scram_upsertion("alice", "SCRAM-SHA-512", 4096, "pw")["salt"] for _ in range(200)]
    assert all(s and s.isascii() and s.decode().isalnum() and s.decode() == s.decode().lower() for s in salts)
    assert len(set(salts)) == 200 and max(len(s) for s in salts) <= 26
