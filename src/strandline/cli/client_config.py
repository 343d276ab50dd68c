"""``--command-config FILE``: Kafka client properties for every admin command, in one place.

The file is what Kafka's tools take (``kafka-configs --command-config``), with the names of
Kafka's Java client and of librdkafka both read:

- ``security.protocol``: ``PLAINTEXT`` (the default), ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``;
- ``sasl.mechanism`` (``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``OAUTHBEARER``) with
  ``sasl.jaas.config`` (``PlainLoginModule``/``ScramLoginModule required username="..."
  password="...";``, or ``OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="...";``
  for an unsecured token) or librdkafka's ``sasl.username``/``sasl.password``;
- the brokers' CA: ``ssl.truststore.location`` (PEM), ``ssl.truststore.certificates`` (PEM text)
  or librdkafka's ``ssl.ca.location``;
- a client certificate: ``ssl.keystore.location`` (PEM, key and chain in one file),
  ``ssl.keystore.key`` with ``ssl.keystore.certificate.chain`` (PEM text), or librdkafka's
  ``ssl.certificate.location`` with ``ssl.key.location``; ``ssl.key.password`` when the key is
  encrypted;
- ``ssl.endpoint.identification.algorithm``: ``https`` (the default: the broker's certificate
  must name its host) or empty (``none``) not to check the name.

The protocol's own admin connections (:class:`KafkaConnection`) and the confluent-kafka clients of
``produce``/``consume`` (:func:`librdkafka`) both take their settings from here.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.core.config import parse_properties
from strandline.core.config_key import ConfigError
from strandline.errors import StrandlineError
from strandline.runtime import client as raw_client
from strandline.security import jaas
from strandline.security.scram import ScramClient

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36

#: the keys this module reads
KEYS = {"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username",
        "sasl.password", "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.certificates",
        "ssl.ca.location", "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.key",
        "ssl.keystore.certificate.chain", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
        "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification"}
#: Kafka client keys that do not matter to a command: taken without a word
IGNORED = {"client.id", "request.timeout.ms", "default.api.timeout.ms", "retries", "retry.backoff.ms",
           "connections.max.idle.ms", "metadata.max.age.ms", "ssl.protocol", "ssl.enabled.protocols",
           "ssl.truststore.password", "ssl.keystore.password", "ssl.cipher.suites", "ssl.keymanager.algorithm",
           "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "sasl.login.callback.handler.class",
           "sasl.client.callback.handler.class", "sasl.login.class", "sasl.kerberos.service.name",
           "socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms", "receive.buffer.bytes",
           "send.buffer.bytes", "reconnect.backoff.ms", "reconnect.backoff.max.ms", "bootstrap.servers"}


@dataclass(frozen=True)
class ClientSecurity:
    """How a command connects to the brokers."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    oauth_claims: dict[str, Any] = field(default_factory=dict)   # an unsecured OAUTHBEARER token's claims
    oauth_lifetime_s: int = 3600
    ca_file: str | None = None
    ca_data: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_pem: str | None = None
    key_pem: str | None = None
    key_password: str | None = None
    check_hostname: bool = True
    verify: bool = True
    source: dict[str, str] = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _pem_only(props: dict[str, str], location_key: str, type_key: str) -> str | None:
    """A truststore or keystore location, which must be a PEM file (Kafka's JKS and PKCS12 stores
    are not read)."""
    location = props.get(location_key)
    if not location:
        return None
    kind = props.get(type_key, "").upper()
    if kind and kind != "PEM":
        raise ConfigError(f"{type_key}={kind}: only PEM stores are read (convert with keytool/openssl)")
    if not kind:
        try:
            head = Path(location).read_bytes()[:4096]
        except OSError as exc:
            raise ConfigError(f"{location_key}: cannot read {location}: {exc.strerror}") from None
        if b"-----BEGIN" not in head:
            raise ConfigError(f"{location_key}={location} is not a PEM file (JKS and PKCS12 stores are not read); "
                              f"give a PEM file and {type_key}=PEM")
    return location


def _pem_text(props: dict[str, str], key: str) -> str | None:
    """KIP-651's PEM given as the value itself, with ``\\n`` where its lines end (as Java's
    Properties reads an escaped newline)."""
    value = props.get(key)
    return value.replace("\\n", "\n") if value else None


def _credentials(props: dict[str, str], mechanism: str) -> tuple[str | None, str | None, dict[str, Any], int]:
    """(username, password, unsecured token claims, token lifetime) from the JAAS text or
    librdkafka's keys."""
    text = props.get("sasl.jaas.config")
    if not text:
        return props.get("sasl.username"), props.get("sasl.password"), {}, 3600
    try:
        module = jaas.single(text)
    except jaas.JaasError as exc:
        raise ConfigError(f"sasl.jaas.config: {exc}") from None
    name = module.name.rsplit(".", 1)[-1]
    expected = {"PLAIN": "PlainLoginModule", "SCRAM-SHA-256": "ScramLoginModule", "SCRAM-SHA-512": "ScramLoginModule",
                "OAUTHBEARER": "OAuthBearerLoginModule"}[mechanism]
    if name != expected:
        raise ConfigError(f"sasl.jaas.config names {module.name}; sasl.mechanism={mechanism} needs {expected}")
    opts = module.options
    if mechanism != "OAUTHBEARER":
        return opts.get("username"), opts.get("password"), {}, 3600
    claims: dict[str, Any] = {}
    for key, value in opts.items():
        if key.startswith("unsecuredLoginStringClaim_"):
            claims[key.removeprefix("unsecuredLoginStringClaim_")] = value
        elif key.startswith("unsecuredLoginNumberClaim_"):
            claims[key.removeprefix("unsecuredLoginNumberClaim_")] = float(value) if "." in value else int(value)
        elif key.startswith("unsecuredLoginListClaim_"):
            sep, items = value[:1], value[1:]       # Kafka: the first character is the separator
            claims[key.removeprefix("unsecuredLoginListClaim_")] = [i for i in items.split(sep) if i] if sep else []
    principal_claim = opts.get("unsecuredLoginPrincipalClaimName", "sub")
    if not isinstance(claims.get(principal_claim), str):
        raise ConfigError(f"sasl.jaas.config: OAuthBearerLoginModule needs unsecuredLoginStringClaim_{principal_claim}"
                          f"=\"<principal>\" (an unsecured token; signed tokens come from an identity provider)")
    lifetime = opts.get("unsecuredLoginLifetimeSeconds", "3600")
    if not lifetime.isdigit():
        raise ConfigError(f"unsecuredLoginLifetimeSeconds={lifetime!r}: a number of seconds")
    return None, None, claims, int(lifetime)


def from_properties(props: dict[str, str]) -> tuple[ClientSecurity, list[str]]:
    """The settings of a client properties file, and a warning for each key that is not read;
    :class:`ConfigError` for settings that cannot work."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"security.protocol={protocol}: one of {', '.join(PROTOCOLS)}")
    warnings = [f"{key} is not a client setting Strandline reads; ignored" for key in sorted(props)
                if key not in KEYS and key not in IGNORED]
    mechanism = username = password = None
    claims: dict[str, Any] = {}
    lifetime = 3600
    if protocol.startswith("SASL_"):
        mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").strip().upper()
        if mechanism not in MECHANISMS:
            raise ConfigError(f"sasl.mechanism={mechanism} is not supported: one of {', '.join(MECHANISMS)}")
        username, password, claims, lifetime = _credentials(props, mechanism)
        if mechanism != "OAUTHBEARER" and (not username or password is None):
            raise ConfigError(f"SASL/{mechanism} needs a username and a password: sasl.jaas.config="
                              f"\"...LoginModule required username=\\\"...\\\" password=\\\"...\\\";\" "
                              f"(or sasl.username and sasl.password)")
    ca_file = _pem_only(props, "ssl.truststore.location", "ssl.truststore.type") or props.get("ssl.ca.location")
    keystore = _pem_only(props, "ssl.keystore.location", "ssl.keystore.type")
    cert_file = keystore or props.get("ssl.certificate.location")
    key_file = keystore or props.get("ssl.key.location")
    if bool(cert_file) != bool(key_file):
        raise ConfigError("a client certificate needs both ssl.certificate.location and ssl.key.location")
    cert_pem, key_pem = _pem_text(props, "ssl.keystore.certificate.chain"), _pem_text(props, "ssl.keystore.key")
    if bool(cert_pem) != bool(key_pem):
        raise ConfigError("ssl.keystore.key and ssl.keystore.certificate.chain go together")
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", "", "none"):
        raise ConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: https, or empty not to check")
    verify = props.get("enable.ssl.certificate.verification", "true").strip().lower() != "false"
    security = ClientSecurity(protocol, mechanism, username, password, claims, lifetime, ca_file,
                              _pem_text(props, "ssl.truststore.certificates"), cert_file, key_file, cert_pem, key_pem,
                              props.get("ssl.key.password"), algorithm == "https" and verify, verify, dict(props))
    return security, warnings


def load(path: str) -> tuple[ClientSecurity, list[str]]:
    """:func:`from_properties` of a file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"--command-config: cannot read {path}: {exc.strerror}") from None
    return from_properties(parse_properties(text, path))


_active = ClientSecurity()
_given = False


def use(security: ClientSecurity) -> None:
    """The settings every connection of this command makes from now on."""
    global _active, _given
    _active, _given = security, True


def given() -> bool:
    """Whether the command was given settings (``--command-config``)."""
    return _given


def active() -> ClientSecurity:
    return _active


def ssl_context(security: ClientSecurity) -> ssl.SSLContext:
    """A client TLS context: the truststore's CAs only when one is given (as Kafka's truststore and
    librdkafka's ssl.ca.location replace the system's), else the system's."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = security.check_hostname
    if not security.verify:
        context.verify_mode = ssl.CERT_NONE
    try:
        if security.ca_file or security.ca_data:
            context.load_verify_locations(cafile=security.ca_file, cadata=security.ca_data)
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if security.cert_file and security.key_file:
            context.load_cert_chain(security.cert_file, security.key_file, security.key_password)
        if security.cert_pem and security.key_pem:
            with tempfile.TemporaryDirectory() as tmp:          # the ssl module loads a chain from files only
                chain = os.path.join(tmp, "chain.pem")
                fd = os.open(chain, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(security.key_pem + "\n" + security.cert_pem + "\n")
                context.load_cert_chain(chain, None, security.key_password)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"TLS settings of --command-config: {exc}") from None
    return context


# --- SASL clients (SCRAM's: strandline.security.scram.ScramClient) ------------------------------

def unsecured_token(claims: dict[str, Any], lifetime_s: int, now_s: float) -> str:
    """An unsecured JWS (``alg: none``) as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")
    now_ms = int(now_s * 1000)          # whole milliseconds, never rounded up past the clock (Java's millis)
    body = {"iat": now_ms / 1000, "exp": (now_ms + lifetime_s * 1000) / 1000, **claims}
    return f"{part({'alg': 'none'})}.{part(body)}."


def _exchange(conn: raw_client.KafkaConnection, security: ClientSecurity) -> None:
    """SaslHandshake v1 and SaslAuthenticate v1 rounds until the mechanism is done."""
    mechanism = security.mechanism or ""
    # the token is made before the exchange starts, as Kafka's login does: a broker that takes
    # the time at the handshake must not see it issued after then
    token = unsecured_token(security.oauth_claims, security.oauth_lifetime_s, time.time()) \
        if mechanism == "OAUTHBEARER" else ""
    resp = conn.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if ErrorCode(int(resp.error_code)) is not ErrorCode.none:
        offered = ", ".join(resp.mechanisms) or "none"
        raise StrandlineError(f"broker {conn.address} does not accept SASL/{mechanism} "
                              f"({ErrorCode(int(resp.error_code)).name.upper()}; it offers {offered})")

    def authenticate(token: bytes) -> bytes:
        answer = conn.request(SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        code = ErrorCode(int(answer.error_code))
        if code is not ErrorCode.none:
            raise StrandlineError(f"authentication to {conn.address} failed: {code.name.upper()}"
                                  + (f": {answer.error_message}" if answer.error_message else ""))
        return bytes(answer.auth_bytes)

    if mechanism == "PLAIN":
        authenticate(b"\0" + (security.username or "").encode() + b"\0" + (security.password or "").encode())
    elif mechanism.startswith("SCRAM-"):
        scram = ScramClient(mechanism, security.username or "", security.password or "")
        first = authenticate(scram.first())
        scram.check(authenticate(scram.final(first)))
    else:
        answer = authenticate(f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        if answer:              # RFC 7628's error JSON: the broker fails the exchange on our \x01
            try:
                authenticate(b"\x01")
            except StrandlineError as exc:
                raise StrandlineError(f"{exc} (the token was refused)") from None
            raise StrandlineError(f"authentication to {conn.address} failed: {answer.decode(errors='replace')}")


class KafkaConnection(raw_client.KafkaConnection):
    """A blocking protocol connection with the command's security settings: TLS, then SASL."""

    def __init__(self, address: str, timeout_s: float = 30.0, client_id: str = "strandline-cli",
                 security: ClientSecurity | None = None) -> None:
        super().__init__(address, timeout_s, client_id)
        security = security or _active
        try:
            if security.tls:
                host = self.address.rpartition(":")[0] or "127.0.0.1"
                self.sock = ssl_context(security).wrap_socket(self.sock, server_hostname=host)
            if security.sasl:
                _exchange(self, security)
        except (ssl.SSLError, ssl.CertificateError, socket.timeout, OSError) as exc:
            self.close()
            raise StrandlineError(f"TLS connection to {self.address} failed: {exc}") from None
        except BaseException:
            self.close()
            raise


def librdkafka(security: ClientSecurity | None = None) -> dict[str, str]:
    """The same settings with librdkafka's names, for confluent-kafka clients."""
    s = security or _active
    conf: dict[str, str] = {"security.protocol": s.protocol.lower()}
    if s.sasl and s.mechanism:
        conf["sasl.mechanisms"] = s.mechanism
        if s.mechanism == "OAUTHBEARER":
            principal = next((v for k, v in s.oauth_claims.items() if k == "sub"), None) or \
                next(iter(s.oauth_claims.values()), "")
            conf["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
            conf["sasl.oauthbearer.config"] = f"principal={principal} lifeSeconds={s.oauth_lifetime_s}"
        else:
            conf["sasl.username"], conf["sasl.password"] = s.username or "", s.password or ""
    if s.tls:
        for key, value in (("ssl.ca.location", s.ca_file), ("ssl.ca.pem", s.ca_data),
                           ("ssl.certificate.location", s.cert_file), ("ssl.key.location", s.key_file),
                           ("ssl.certificate.pem", s.cert_pem), ("ssl.key.pem", s.key_pem),
                           ("ssl.key.password", s.key_password)):
            if value:
                conf[key] = value
        conf["ssl.endpoint.identification.algorithm"] = "https" if s.check_hostname else "none"
        if not s.verify:
            conf["enable.ssl.certificate.verification"] = "false"
    return conf
