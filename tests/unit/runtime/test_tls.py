"""TLS contexts from Kafka's ssl.* keys: PEM files, inline PEM (KIP-651) and PKCS12 key and trust
stores (under the JKS type too, as Java 9+ reads them), ssl.client.auth, ssl.enabled.protocols,
host name checks; a handshake over a socket pair."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from strandline.core.security_keys import SECURITY_KEYS
from strandline.runtime import tls
from strandline.security.authenticator import ssl_principal
from strandline.security.certs import CertificateAuthority

CA = CertificateAuthority.new("unit CA")
SERVER = CA.issue("localhost", hosts=["127.0.0.1", "localhost"])
CLIENT = CA.issue("alice", organization="Strandline")
OTHER = CertificateAuthority.new("other CA").issue("mallory")


def conf(**keys) -> dict:
    c = {k: v.default for k, v in SECURITY_KEYS.items()}
    c.update({k.replace("_", "."): v for k, v in keys.items()})
    return c


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, hostname: str = "127.0.0.1"):
    """(the server's view of the client's DN or the server's error, the client's error or None)"""
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    result: dict = {}

    def serve():
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                result["dn"] = tls.peer_dn(s)
                s.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            result["server"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=hostname) as c:
            result["read"] = c.recv(2)
    except (ssl.SSLError, OSError) as exc:
        result["client"] = exc
    thread.join(10)
    return result


@pytest.fixture
def stores(tmp_path):
    (tmp_path / "server.pem").write_bytes(SERVER.pem)
    (tmp_path / "server.p12").write_bytes(SERVER.pkcs12("p12-secret"))
    (tmp_path / "ca.pem").write_bytes(CA.cert_pem)
    return tmp_path


def client(**keys) -> ssl.SSLContext:
    return tls.client_context(conf(ssl_truststore_type="PEM", ssl_truststore_certificates=CA.cert_pem.decode(),
                                   **keys), "T")


def test_pem_file_key_store_and_a_required_client_certificate_names_the_principal(stores):
    server = tls.server_context(conf(ssl_keystore_type="PEM", ssl_keystore_location=str(stores / "server.pem"),
                                     ssl_truststore_type="PEM", ssl_truststore_location=str(stores / "ca.pem"),
                                     ssl_client_auth="required"), "SSL", "SSL")
    got = handshake(server, client(ssl_keystore_type="PEM", ssl_keystore_key=CLIENT.key_pem.decode(),
                                   ssl_keystore_certificate_chain=CLIENT.cert_pem.decode()))
    assert got.get("read") == b"ok" and got["dn"] == "CN=alice,O=Strandline"
    assert ssl_principal(got["dn"]) in ("User:CN=alice,O=Strandline", "User:alice")
    # a certificate of another CA, and none, are refused by the server
    refused = handshake(server, client(ssl_keystore_type="PEM", ssl_keystore_key=OTHER.key_pem.decode(),
                                       ssl_keystore_certificate_chain=OTHER.cert_pem.decode()))
    assert "server" in refused and "dn" not in refused
    assert "server" in handshake(server, client())


def test_pkcs12_key_store_and_requested_client_auth(stores):
    server = tls.server_context(conf(ssl_keystore_type="PKCS12", ssl_keystore_location=str(stores / "server.p12"),
                                     ssl_keystore_password="p12-secret", ssl_truststore_type="PEM",
                                     ssl_truststore_location=str(stores / "ca.pem"), ssl_client_auth="requested"),
                                "SSL", "SSL")
    got = handshake(server, client())               # no certificate: served, anonymous
    assert got.get("read") == b"ok" and got["dn"] is None
    with pytest.raises(tls.TlsConfigError, match="PKCS12"):
        tls.server_context(conf(ssl_keystore_type="PKCS12", ssl_keystore_location=str(stores / "server.p12"),
                                ssl_keystore_password="wrong"), "SSL", "SSL")


def test_the_client_checks_the_host_name_unless_told_not_to(stores):
    server = tls.server_context(conf(ssl_keystore_type="PEM", ssl_keystore_location=str(stores / "server.pem")),
                                "SSL", "SSL")
    assert "client" in handshake(server, client(), hostname="broker.example")
    assert handshake(server, client(ssl_endpoint_identification_algorithm=""),
                     hostname="broker.example").get("read") == b"ok"


def test_enabled_protocols_bound_the_version(stores):
    server = tls.server_context(conf(ssl_keystore_type="PEM", ssl_keystore_location=str(stores / "server.pem"),
                                     ssl_enabled_protocols=["TLSv1.3"]), "SSL", "SSL")
    assert handshake(server, client(ssl_enabled_protocols=["TLSv1.2"])).get("client") is not None
    assert handshake(server, client()).get("read") == b"ok"


def test_a_jks_store_that_is_pkcs12_is_read_as_java_reads_it(stores):
    """Java 9+'s keytool writes PKCS12 whatever the file is called, and Java's JKS key store type
    (Kafka's default ssl.keystore.type and ssl.truststore.type) reads PKCS12 files too
    (keystore.type.compat): `keytool -keystore server.jks -genkey ...` is a working JKS store."""
    (stores / "server.jks").write_bytes(SERVER.pkcs12("jks-secret"))
    ca_only = pkcs12.serialize_key_and_certificates(None, None, None, [x509.load_pem_x509_certificate(CA.cert_pem)],
                                                    serialization.BestAvailableEncryption(b"trust-secret"))
    (stores / "truststore.jks").write_bytes(ca_only)
    keys = conf(ssl_keystore_location=str(stores / "server.jks"), ssl_keystore_password="jks-secret",
                ssl_truststore_location=str(stores / "truststore.jks"), ssl_truststore_password="trust-secret",
                ssl_client_auth="required")
    assert keys["ssl.keystore.type"] == keys["ssl.truststore.type"] == "JKS"          # Kafka's defaults
    server = tls.server_context(keys, "SSL", "SSL")
    got = handshake(server, client(ssl_keystore_type="PEM", ssl_keystore_key=CLIENT.key_pem.decode(),
                                   ssl_keystore_certificate_chain=CLIENT.cert_pem.decode()))
    assert got.get("read") == b"ok" and got["dn"] == "CN=alice,O=Strandline"
    assert "server" in handshake(server, client())              # the trust store's CA is required


def test_a_jks_file_in_java_s_own_format_is_refused_in_one_line(stores):
    (stores / "real.jks").write_bytes(bytes.fromhex("feedfeed00000002") + bytes(64))
    with pytest.raises(tls.TlsConfigError, match="Java's own JKS format.*keytool -importkeystore"):
        tls.server_context(conf(ssl_keystore_location=str(stores / "real.jks"), ssl_keystore_password="x"),
                           "SSL", "SSL")


@pytest.mark.parametrize("keys,message", [
    ({}, "needs a key store"),
    ({"ssl_keystore_type": "JKS", "ssl_keystore_location": "/no/such.jks"}, "cannot read ssl.keystore.location"),
    ({"ssl_keystore_type": "PEM", "ssl_keystore_key": "k"}, "go together"),
    ({"ssl_keystore_type": "PEM", "ssl_keystore_location": "/no/such.pem"}, "cannot read ssl.keystore.location"),
])
def test_unusable_stores_are_named(keys, message):
    with pytest.raises(tls.TlsConfigError, match=message):
        tls.server_context(conf(**keys), "SSL", "SSL")
