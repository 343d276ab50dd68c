"""The SCRAM-SHA-256/512 server (RFC 5802, RFC 7677, Kafka's ScramSaslServer): RFC 7677's test
vector, and whole exchanges with two independent clients (scramp, and kafka-python's)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest
import scramp
from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

from strandline.security import scram
from strandline.security.sasl import MECHANISMS, AuthenticationFailed, SaslContext
from strandline.security.scram_server import ScramServer, failure_message

MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


def stored(mechanism: str, password: str, salt: bytes | None = None, iterations: int = 4096) -> str:
    """The credential as AlterUserScramCredentials stores it (the client's PBKDF2, the broker's keys)."""
    salt = os.urandom(16) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(mechanism.split("-", 1)[1].replace("-", "").lower(), password.encode(), salt,
                                 iterations)
    return scram.credential(MECHANISM_TYPES[mechanism], salt, salted, iterations)


def context(users: dict[tuple[str, str], str]) -> SaslContext:
    return SaslContext(listener="SASL_SSL", listener_config={}, scram_credential=lambda u, m: users.get((u, m)), now_ms=0)


def server(mechanism: str, users: dict[tuple[str, str], str], nonce: str | None = None) -> ScramServer:
    if nonce is None:
        return ScramServer(context(users), mechanism)
    return ScramServer(context(users), mechanism, nonce=lambda: nonce)


def test_rfc7677_test_vector():
    """RFC 7677 section 3: user "user", password "pencil", every message byte for byte."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    users = {("user", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pencil", salt, 4096)}
    s = server("SCRAM-SHA-256", users, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert s.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == \
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert not s.complete
    assert s.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                      b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=") == \
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert s.complete and s.authorization_id == "user" and s.session_lifetime_ms is None


def test_rfc7677_vector_with_a_wrong_proof_fails():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    users = {("user", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pencil", salt, 4096)}
    s = server("SCRAM-SHA-256", users, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    s.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(AuthenticationFailed, match="invalid credentials with SASL mechanism SCRAM-SHA-256"):
        s.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                   b"p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert not s.complete


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_exchange_with_scramp(mechanism):
    users = {("alice", mechanism): stored(mechanism, "alice-secret", iterations=8192)}
    s = MECHANISMS[mechanism](context(users))
    client = scramp.ScramClient([mechanism], "alice", "alice-secret")
    client.set_server_first(s.evaluate(client.get_client_first().encode()).decode())
    server_final = s.evaluate(client.get_client_final().encode()).decode()
    client.set_server_final(server_final)          # raises unless ServerSignature is right
    assert s.complete and s.authorization_id == "alice"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_exchange_with_kafka_python(mechanism):
    users = {("bob", mechanism): stored(mechanism, "b0b")}
    s = server(mechanism, users)
    client = KafkaPythonScramClient("bob", "b0b", mechanism)
    client.process_server_first_message(s.evaluate(client.first_message()))
    client.process_server_final_message(s.evaluate(client.final_message()))
    assert s.complete and s.authorization_id == "bob"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_fails_with_kafkas_message(mechanism):
    users = {("alice", mechanism): stored(mechanism, "right")}
    s = server(mechanism, users)
    client = scramp.ScramClient([mechanism], "alice", "wrong")
    client.set_server_first(s.evaluate(client.get_client_first().encode()).decode())
    with pytest.raises(AuthenticationFailed) as failed:
        s.evaluate(client.get_client_final().encode())
    assert str(failed.value) == failure_message(mechanism) == \
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    assert not s.complete
    with pytest.raises(RuntimeError):
        _ = s.authorization_id


def test_unknown_user_fails_as_a_wrong_password_does():
    s = server("SCRAM-SHA-256", {})
    with pytest.raises(AuthenticationFailed) as failed:
        s.evaluate(scramp.ScramClient(["SCRAM-SHA-256"], "nobody", "x").get_client_first().encode())
    assert str(failed.value) == ("Authentication failed during authentication due to invalid credentials with SASL "
                                 "mechanism SCRAM-SHA-256")


def test_credential_of_the_other_mechanism_does_not_count():
    users = {("alice", "SCRAM-SHA-512"): stored("SCRAM-SHA-512", "pw")}
    with pytest.raises(AuthenticationFailed):
        server("SCRAM-SHA-256", users).evaluate(b"n,,n=alice,r=abc")


def test_final_message_with_another_nonce_fails():
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw")}
    s = server("SCRAM-SHA-256", users)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "pw")
    client.set_server_first(s.evaluate(client.get_client_first().encode()).decode())
    final = client.get_client_final()
    nonce = final.split(",")[1]
    tampered = final.replace(nonce, nonce[:-1] + ("A" if nonce[-1] != "A" else "B"))
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        s.evaluate(tampered.encode())


def librdkafka_final(first_bare: str, server_first: str, client_nonce: str, password: str, mechanism: str,
                     nonce: str | None = None) -> bytes:
    """A client-final as librdkafka before 2.6.1 makes it (librdkafka#4895): the nonce is its own
    nonce again before the server's whole nonce, and its proof is over that message."""
    digest = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    without_proof = f"c=biws,r={nonce if nonce is not None else client_nonce + attrs['r']}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    signature = hmac.new(digest(client_key).digest(), auth, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_librdkafka_before_2_6_1_is_served_as_kafka_3_9_serves_it(mechanism):
    """librdkafka before 2.6.1 (Debian's kcat is 2.0.2) puts its nonce twice in the client-final;
    Kafka 3.8.1 to 3.9 take a nonce that ends with the server's (ScramSaslServer's endsWith, the
    fix of CVE-2024-56128 that still serves those clients), and so does Strandline. A nonce that
    does not end with the server's whole nonce is still refused."""
    users = {("alice", mechanism): stored(mechanism, "pw")}
    s = server(mechanism, users)
    server_first = s.evaluate(b"n,,n=alice,r=cnonce").decode()
    answer = s.evaluate(librdkafka_final("n=alice,r=cnonce", server_first, "cnonce", "pw", mechanism))
    assert answer.startswith(b"v=") and s.complete and s.authorization_id == "alice"
    for nonce in ("cnonce", "cnonce" + server_first.split(",")[0][2:-1], "other"):   # no server nonce, cut, other
        s = server(mechanism, users)
        server_first = s.evaluate(b"n,,n=alice,r=cnonce").decode()
        with pytest.raises(AuthenticationFailed, match="invalid credentials"):
            s.evaluate(librdkafka_final("n=alice,r=cnonce", server_first, "cnonce", "pw", mechanism, nonce))


def test_each_exchange_gets_a_fresh_server_nonce():
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw")}
    nonces = {server("SCRAM-SHA-256", users).evaluate(b"n,,n=alice,r=abc").decode().split(",")[0] for _ in range(20)}
    assert len(nonces) == 20
    assert all(n.startswith("r=abc") and len(n) > len("r=abc") + 20 for n in nonces)


def test_authzid_equal_to_the_user_is_accepted():
    """The client-final's c= carries the Base64 of the gs2 header with the authzid; the proof is
    computed here by RFC 5802's formulas, as a client would."""
    salt = os.urandom(16)
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw", salt)}
    s = server("SCRAM-SHA-256", users, nonce="snonce")
    first_bare = "n=alice,r=cnonce1"
    server_first = s.evaluate(("n,a=alice," + first_bare).encode()).decode()
    assert server_first == f"r=cnonce1snonce,s={base64.b64encode(salt).decode()},i=4096"
    without_proof = "c=" + base64.b64encode(b"n,a=alice,").decode() + ",r=cnonce1snonce"
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, hashlib.sha256).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_signature = hmac.new(hmac.new(salted, b"Server Key", hashlib.sha256).digest(), auth, hashlib.sha256)
    assert s.evaluate(f"{without_proof},p={proof}".encode()) == \
        b"v=" + base64.b64encode(server_signature.digest())
    assert s.complete and s.authorization_id == "alice"


def test_a_proof_for_another_gs2_header_fails():
    """A client that said "n,a=alice," but computes its proof over c=biws is refused."""
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw")}
    s = server("SCRAM-SHA-256", users)
    first = s.evaluate(b"n,a=alice,n=alice,r=cnonce1").decode()
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "pw", c_nonce="cnonce1")
    client.get_client_first()
    client.set_server_first(first)
    with pytest.raises(AuthenticationFailed):
        s.evaluate(client.get_client_final().encode())


def test_authzid_other_than_the_user_is_refused_with_its_own_message():
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw")}
    with pytest.raises(AuthenticationFailed) as failed:
        server("SCRAM-SHA-256", users).evaluate(b"n,a=bob,n=alice,r=cnonce1")
    assert str(failed.value) == ("Authentication failed: Client requested an authorization id that is different "
                                 "from username")


def test_channel_binding_data_must_match_the_gs2_header():
    """A client that said "n,," but sends c= of another header fails even with a right password."""
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw")}
    s = server("SCRAM-SHA-256", users)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "pw")
    client.set_server_first(s.evaluate(client.get_client_first().encode()).decode())
    final = client.get_client_final().replace("c=biws", "c=eSws")          # "y,,"
    with pytest.raises(AuthenticationFailed):
        s.evaluate(final.encode())


@pytest.mark.parametrize("first", [
    b"p=tls-unique,,n=alice,r=abc",          # channel binding asked for
    b"n,,n=alice,r=abc,tokenauth=true",      # a delegation token
    b"n,,m=ext,n=alice,r=abc",               # a mandatory extension
    b"n,,n=al=2Xice,r=abc",                  # a bad saslname escape
    b"n,,r=abc,n=alice",                     # attributes out of order
    b"n,,n=alice",                           # no nonce
    b"n,,n=alice,r=",                        # empty nonce
    b"n,,n=,r=abc",                          # empty user
    b"x,,n=alice,r=abc",                     # not a gs2 flag
    b"y,,n=alice,r=abc",                     # "y": Kafka reads "n" only
    b"n,b=alice,n=alice,r=abc",              # not an authzid
    b"garbage",
    b"",
    b"n,,n=\xff,r=abc",                      # not UTF-8
])
def test_malformed_client_first_fails(first):
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw")}
    s = server("SCRAM-SHA-256", users)
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        s.evaluate(first)
    assert not s.complete


@pytest.mark.parametrize("final", [
    b"c=biws,r=abcNONCE",                      # no proof
    b"c=biws,r=abcNONCE,p=!!!",               # proof not Base64
    b"c=biws,r=abcNONCE,p=AAAA",              # proof of the wrong length
    b"r=abcNONCE,c=biws,p=AAAA",              # out of order
    b"garbage",
])
def test_malformed_client_final_fails(final):
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw")}
    s = server("SCRAM-SHA-256", users, nonce="NONCE")
    s.evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        s.evaluate(final)


def test_saslname_escapes_name_the_user():
    users = {("a,b=c", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw")}
    s = server("SCRAM-SHA-256", users)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "a,b=c", "pw")
    first = client.get_client_first()
    assert "n=a=2Cb=3Dc" in first
    client.set_server_first(s.evaluate(first.encode()).decode())
    client.set_server_final(s.evaluate(client.get_client_final().encode()).decode())
    assert s.authorization_id == "a,b=c"


def test_too_few_iterations_are_refused():
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw", iterations=1000)}
    with pytest.raises(AuthenticationFailed):
        server("SCRAM-SHA-256", users).evaluate(b"n,,n=alice,r=abc")


def test_a_message_after_completion_or_failure_fails():
    users = {("alice", "SCRAM-SHA-256"): stored("SCRAM-SHA-256", "pw")}
    s = server("SCRAM-SHA-256", users)
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "pw")
    client.set_server_first(s.evaluate(client.get_client_first().encode()).decode())
    s.evaluate(client.get_client_final().encode())
    with pytest.raises(AuthenticationFailed):
        s.evaluate(b"n,,n=alice,r=abc")
    failed = server("SCRAM-SHA-256", {})
    with pytest.raises(AuthenticationFailed):
        failed.evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed):
        failed.evaluate(b"c=biws,r=abc,p=AAAA")


def test_both_mechanisms_are_registered():
    assert {"SCRAM-SHA-256", "SCRAM-SHA-512"} <= set(MECHANISMS)
    assert MECHANISMS["SCRAM-SHA-512"](context({})).mechanism == "SCRAM-SHA-512"
