"""A small broker on a thread for the CLI's security tests: TLS (with client certificates and
ssl.principal.mapping.rules), SASL through Strandline's mechanisms (PLAIN checked here), and the
user APIs (SCRAM credentials stored as the real broker stores them, user quotas). Every request
after authentication is recorded with the connection's principal."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import struct
import threading
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.protocol.api import decode_request, encode_response
from strandline.security import oauthbearer, scram, scram_server  # noqa: F401  (they register their mechanisms)
from strandline.security.principal import ssl_principal
from strandline.security.sasl import MECHANISMS, AuthenticationFailed, SaslContext


def make_pki(root: Path) -> dict[str, str]:
    """A CA, a broker certificate for 127.0.0.1 (key and chain in one PEM) and a client certificate
    for CN=Duke,OU=ServiceUsers,O=Org,C=US, as PEM files under ``root``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject: x509.Name, key: Any, issuer: x509.Name, issuer_key: Any, ca: bool, san: Any = None) -> Any:
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    def pem(key: Any) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Strandline Test CA")])
    ca = cert(ca_name, ca_key, ca_name, ca_key, True)
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker = cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker")]), broker_key, ca_name, ca_key, False,
                  [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = cert(x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                             x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Org"),
                             x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"),
                             x509.NameAttribute(NameOID.COMMON_NAME, "Duke")]), client_key, ca_name, ca_key, False)
    files = {"ca": ca.public_bytes(serialization.Encoding.PEM),
             "broker": pem(broker_key) + broker.public_bytes(serialization.Encoding.PEM),
             "client_cert": client.public_bytes(serialization.Encoding.PEM), "client_key": pem(client_key),
             "client_keystore": pem(client_key) + client.public_bytes(serialization.Encoding.PEM)}
    paths = {}
    for name, data in files.items():
        (root / f"{name}.pem").write_bytes(data)
        paths[name] = str(root / f"{name}.pem")
    return paths


def rfc2253(cert: dict) -> str:
    """The subject of ``SSLSocket.getpeercert()`` as Java's X500Principal.getName() writes it."""
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
             "localityName": "L", "stateOrProvinceName": "ST"}
    return ",".join("+".join(f"{short.get(k, k)}={v}" for k, v in rdn) for rdn in reversed(cert["subject"]))


class FakeBroker:
    def __init__(self, tls: ssl.SSLContext | None = None, sasl: bool = False, config: dict | None = None,
                 plain_users: dict[str, str] | None = None, mapping_rules: str | None = None) -> None:
        self.tls, self.sasl, self.config = tls, sasl, config or {}
        self.plain_users = plain_users or {}
        self.mapping_rules = mapping_rules
        self.credentials: dict[tuple[str, str], str] = {}      # (user, mechanism) -> stored text
        self.iterations: dict[tuple[str, str], int] = {}
        self.quotas: dict[str | None, dict[str, float]] = {}
        self.seen: list[tuple[int, str]] = []                    # (api key, principal)
        self.failures: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=5)
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket, n: int) -> bytes:
        data = b""
        deadline = time.monotonic() + 10
        while len(data) < n and time.monotonic() < deadline:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def _connection(self, raw: socket.socket) -> None:
        conn: Any = raw
        raw.settimeout(10)
        principal = "User:ANONYMOUS"
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(raw, server_side=True)
                peer = conn.getpeercert()
                if peer:
                    principal = "User:" + ssl_principal(rfc2253(peer), self.mapping_rules)
            authenticated, server = not self.sasl, None
            while True:
                size = struct.unpack(">i", self._read(conn, 4))[0]
                header, request = decode_request(self._read(conn, size))
                key = int(header.api_key)
                if key == 17:
                    mechanism = request.mechanism
                    enabled = sorted(set(MECHANISMS) | {"PLAIN"})
                    if mechanism in MECHANISMS and mechanism != "PLAIN":      # PLAIN: this broker's own users
                        server = MECHANISMS[mechanism](SaslContext(
                            "SASL_SSL" if self.tls else "SASL_PLAINTEXT", self.config,
                            lambda user, mech: self.credentials.get((user, mech)), int(time.time() * 1000)))
                    elif mechanism != "PLAIN":
                        conn.sendall(encode_response(header, {"error_code": ErrorCode.unsupported_sasl_mechanism,
                                                              "mechanisms": enabled}))
                        return
                    conn.sendall(encode_response(header, {"error_code": ErrorCode.none, "mechanisms": enabled}))
                elif key == 36:
                    token = bytes(request.auth_bytes)
                    try:
                        if server is None:            # PLAIN
                            _, user, password = token.split(b"\0")
                            if self.plain_users.get(user.decode()) != password.decode():
                                raise AuthenticationFailed("Authentication failed: Invalid username or password")
                            answer, name = b"", user.decode()
                        else:
                            answer = server.evaluate(token)
                            name = server.authorization_id if server.complete else ""
                    except AuthenticationFailed as exc:
                        self.failures.append(str(exc))
                        conn.sendall(encode_response(header, {
                            "error_code": ErrorCode.sasl_authentication_failed, "error_message": str(exc),
                            "auth_bytes": b"", "session_lifetime_ms": 0}))
                        return
                    if name:
                        authenticated, principal = True, f"User:{name}"
                    conn.sendall(encode_response(header, {"error_code": ErrorCode.none, "error_message": None,
                                                          "auth_bytes": answer, "session_lifetime_ms": 0}))
                elif not authenticated:
                    return                            # Kafka closes a connection that skips SASL
                else:
                    self.seen.append((key, principal))
                    conn.sendall(encode_response(header, self._answer(key, request)))
        except (ConnectionError, OSError, struct.error, ssl.SSLError):
            pass
        finally:
            conn.close()

    def _answer(self, key: int, request: Any) -> dict:
        if key == 3:                                    # Metadata: this broker, the controller
            return {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.port, "rack": None}],
                    "cluster_id": "fake", "controller_id": 1, "topics": []}
        if key == 51:                                   # AlterUserScramCredentials
            results = []
            for d in request.deletions:
                name = scram.MECHANISMS[int(d.mechanism)][0]
                self.credentials.pop((d.name, name), None)
                results.append({"user": d.name, "error_code": ErrorCode.none, "error_message": None})
            for u in request.upsertions:
                name = scram.MECHANISMS[int(u.mechanism)][0]
                self.credentials[(u.name, name)] = scram.credential(int(u.mechanism), bytes(u.salt),
                                                                    bytes(u.salted_password), int(u.iterations))
                self.iterations[(u.name, name)] = int(u.iterations)
                results.append({"user": u.name, "error_code": ErrorCode.none, "error_message": None})
            return {"throttle_time_ms": 0, "results": results}
        if key == 50:                                   # DescribeUserScramCredentials
            users = [u.name for u in request.users] if request.users is not None else \
                sorted({u for u, _ in self.credentials})
            results = []
            for user in users:
                infos = [{"mechanism": code, "iterations": self.iterations[(user, name)]}
                         for code, (name, _) in sorted(scram.MECHANISMS.items()) if (user, name) in self.credentials]
                results.append({"user": user, "error_code": ErrorCode.none if infos else ErrorCode.resource_not_found,
                                "error_message": None if infos else "Attempt to describe a user credential that "
                                                                    "does not exist", "credential_infos": infos})
            return {"throttle_time_ms": 0, "error_code": ErrorCode.none, "error_message": None, "results": results}
        if key == 49:                                   # AlterClientQuotas
            entries = []
            for entry in request.entries:
                user = entry.entity[0].entity_name
                for op in entry.ops:
                    if op.remove:
                        self.quotas.get(user, {}).pop(op.key, None)
                    else:
                        self.quotas.setdefault(user, {})[op.key] = float(op.value)
                entries.append({"error_code": ErrorCode.none, "error_message": None, "entity": [
                    {"entity_type": "user", "entity_name": user}]})
            return {"throttle_time_ms": 0, "entries": entries}
        if key == 48:                                   # DescribeClientQuotas
            c = request.components[0]
            users = [c.match] if int(c.match_type) == 0 else [None] if int(c.match_type) == 1 else \
                sorted(u for u in self.quotas if u is not None)
            return {"throttle_time_ms": 0, "error_code": ErrorCode.none, "error_message": None, "entries": [
                {"entity": [{"entity_type": "user", "entity_name": u}],
                 "values": [{"key": k, "value": v} for k, v in sorted(self.quotas[u].items())]}
                for u in users if self.quotas.get(u)]}
        raise AssertionError(f"the fake broker does not answer API key {key}")
