"""TLS for the listeners and the broker's own client side, from Kafka's ``ssl.*`` keys.

Key stores: ``ssl.keystore.type=PEM`` (KIP-651) with ``ssl.keystore.location`` a PEM file holding
the private key and the certificate chain, or ``ssl.keystore.key`` and
``ssl.keystore.certificate.chain`` inline; ``PKCS12`` read with ``cryptography`` (password
``ssl.keystore.password``). Trust stores likewise (``ssl.truststore.certificates`` inline for
PEM). ``JKS`` (Kafka's default type) reads a PKCS12 file, as Java 9+ does (its ``keytool`` writes
PKCS12 whatever the file is called, and its JKS key store reads PKCS12: ``keystore.type.compat``);
a file in Java's own JKS (or JCEKS) format is refused with one line saying so. ``ssl.key.password`` decrypts an encrypted
PEM key. ``ssl.enabled.protocols`` bounds the TLS versions, ``ssl.cipher.suites`` the TLS 1.2
suites, ``ssl.client.auth`` asks for client certificates (SSL listeners; a SASL_SSL listener
takes its principal from SASL, as Kafka 2.8).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from strandline.errors import StrandlineError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


class TlsConfigError(StrandlineError):
    """A listener's SSL configuration that cannot be used; one line naming the key."""


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TlsConfigError(f"cannot read {key} {path}: {exc.strerror or exc}") from None


def _password(value: Any) -> bytes | None:
    return str(value).encode() if value else None


def _pkcs12(data: bytes, password: Any, key: str
            ) -> tuple[PrivateKeyTypes | None, x509.Certificate | None, list[x509.Certificate]]:
    try:
        return pkcs12.load_key_and_certificates(data, _password(password))
    except ValueError as exc:
        raise TlsConfigError(f"cannot read the PKCS12 {key}: {exc} (wrong password?)") from None


#: The first bytes of a file in Java's own key store formats, JKS and JCEKS.
_JAVA_MAGIC = (bytes.fromhex("feedfeed"), bytes.fromhex("cececece"))


def _stored(location: str, key: str, kind: str, listener: str) -> bytes:
    """The PKCS12 file of a ``PKCS12`` or ``JKS`` store (Java 9+ reads PKCS12 as JKS too)."""
    data = _read(location, key)
    if kind == "JKS" and data[:4] in _JAVA_MAGIC:
        raise TlsConfigError(f"listener {listener}: {key} {location} is in Java's own JKS format; make it PKCS12 "
                             f"(keytool -importkeystore -srckeystore {location} -deststoretype PKCS12 ...) or PEM")
    return data


def _key_and_chain(conf: dict[str, Any], listener: str) -> tuple[bytes, bytes | None] | None:
    """The key store as PEM: (certificate chain + key, the key's password), None without one."""
    kind = conf["ssl.keystore.type"]
    location = conf["ssl.keystore.location"]
    if kind in ("PKCS12", "JKS"):
        if not location:
            return None
        key, cert, extra = _pkcs12(_stored(location, "ssl.keystore.location", kind, listener),
                                   conf["ssl.keystore.password"], "ssl.keystore.location")
        if key is None or cert is None:
            raise TlsConfigError(f"listener {listener}: the PKCS12 key store {location} has no key and certificate")
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *extra])
        return pem, None
    # PEM
    chain, key_pem = conf["ssl.keystore.certificate.chain"], conf["ssl.keystore.key"]
    if chain or key_pem:
        if location:
            raise TlsConfigError(f"listener {listener}: give ssl.keystore.location or ssl.keystore.key with "
                                 f"ssl.keystore.certificate.chain, not both")
        if not (chain and key_pem):
            raise TlsConfigError(f"listener {listener}: ssl.keystore.key and ssl.keystore.certificate.chain go "
                                 f"together")
        return (str(key_pem).strip() + "\n" + str(chain).strip() + "\n").encode(), _password(conf["ssl.key.password"])
    if location:
        return _read(location, "ssl.keystore.location"), _password(conf["ssl.key.password"])
    return None


def _trusted(conf: dict[str, Any], listener: str) -> bytes | None:
    """The trust store's certificates as PEM, None without one."""
    kind = conf["ssl.truststore.type"]
    location = conf["ssl.truststore.location"]
    if kind in ("PKCS12", "JKS"):
        if not location:
            return None
        _, cert, extra = _pkcs12(_stored(location, "ssl.truststore.location", kind, listener),
                                 conf["ssl.truststore.password"], "ssl.truststore.location")
        certs = ([cert] if cert is not None else []) + list(extra)
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    inline = conf["ssl.truststore.certificates"]
    if inline:
        if location:
            raise TlsConfigError(f"listener {listener}: give ssl.truststore.location or "
                                 f"ssl.truststore.certificates, not both")
        return str(inline).encode()
    return _read(location, "ssl.truststore.location") if location else None


def _load_chain(ctx: ssl.SSLContext, pem: bytes, password: bytes | None, listener: str) -> None:
    """``load_cert_chain`` reads files only: the PEM goes through a private temporary file."""
    fd, path = tempfile.mkstemp(prefix="strandline-key-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
        os.close(fd)
        ctx.load_cert_chain(path, password=password)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"listener {listener}: cannot use the key store: {exc.reason or exc}") from None
    finally:
        os.unlink(path)


def _common(ctx: ssl.SSLContext, conf: dict[str, Any], listener: str) -> None:
    versions = sorted((_VERSIONS[v] for v in conf["ssl.enabled.protocols"]), key=lambda v: v.value)
    if not versions:
        raise TlsConfigError(f"listener {listener}: ssl.enabled.protocols names no protocol")
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    if conf["ssl.cipher.suites"]:
        try:
            ctx.set_ciphers(":".join(conf["ssl.cipher.suites"]))
        except ssl.SSLError:
            raise TlsConfigError(f"listener {listener}: no cipher of ssl.cipher.suites "
                                 f"{','.join(conf['ssl.cipher.suites'])} is available") from None
    trusted = _trusted(conf, listener)
    if trusted is not None:
        try:
            ctx.load_verify_locations(cadata=trusted.decode("ascii", "replace"))
        except ssl.SSLError as exc:
            raise TlsConfigError(f"listener {listener}: cannot use the trust store: {exc.reason or exc}") from None


def server_context(conf: dict[str, Any], listener: str, protocol: str) -> ssl.SSLContext:
    """The TLS context of an SSL or SASL_SSL listener (``conf``: its listener config)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    stored = _key_and_chain(conf, listener)
    if stored is None:
        raise TlsConfigError(f"listener {listener} ({protocol}) needs a key store: ssl.keystore.location (PEM or "
                             f"PKCS12) or ssl.keystore.key and ssl.keystore.certificate.chain")
    _load_chain(ctx, stored[0], stored[1], listener)
    _common(ctx, conf, listener)
    ctx.verify_mode = _CLIENT_AUTH[conf["ssl.client.auth"]] if protocol == "SSL" else ssl.CERT_NONE
    if ctx.verify_mode != ssl.CERT_NONE and _trusted(conf, listener) is None:
        raise TlsConfigError(f"listener {listener}: ssl.client.auth={conf['ssl.client.auth']} needs a trust store "
                             f"(ssl.truststore.location or ssl.truststore.certificates)")
    return ctx


def client_context(conf: dict[str, Any], listener: str) -> ssl.SSLContext:
    """The TLS context of the broker's connections to other brokers' ``listener``: their
    certificates checked against the trust store (the system's without one), their host name
    too with ``ssl.endpoint.identification.algorithm=https``; the key store, if any, as our
    certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(ctx, conf, listener)
    if _trusted(conf, listener) is None:
        ctx.load_default_certs()
    ctx.check_hostname = str(conf["ssl.endpoint.identification.algorithm"] or "").lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    stored = _key_and_chain(conf, listener)
    if stored is not None:
        _load_chain(ctx, stored[0], stored[1], listener)
    return ctx


def peer_dn(ssl_object: Any) -> str | None:
    """The distinguished name (RFC 2253) of the peer's certificate, None without one."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
