"""A certificate authority and certificates it signs, in PEM: for test clusters and ``strandline up``.

``ca = CertificateAuthority.new("Strandline test CA")``; ``ca.issue("localhost", hosts=["127.0.0.1"])``
gives a broker's key and certificate (the hosts as subject alternative names, so that a client
checking host names accepts it); ``ca.issue("alice", organization="Strandline")`` a client's
(subject ``CN=alice,O=Strandline``). Everything is bytes; writing files is the caller's.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=365)
_EPOCH_SLACK = datetime.timedelta(hours=1)          # clocks a little behind still accept it


@dataclass(frozen=True)
class Issued:
    """A private key and its certificate chain (PEM)."""

    key_pem: bytes
    cert_pem: bytes                 # the certificate, then the CA's
    subject: str                    # the distinguished name (RFC 4514/2253)

    @property
    def pem(self) -> bytes:
        """Key and chain in one PEM file (a ``ssl.keystore.type=PEM`` key store)."""
        return self.key_pem + self.cert_pem

    def pkcs12(self, password: str, name: str = "strandline") -> bytes:
        """The same as a PKCS12 key store (``ssl.keystore.type=PKCS12``)."""
        key = serialization.load_pem_private_key(self.key_pem, None)
        certs = x509.load_pem_x509_certificates(self.cert_pem)
        return pkcs12.serialize_key_and_certificates(
            name.encode(), key, certs[0], certs[1:],  # type: ignore[arg-type]  # an EC key, which PKCS12 takes
            serialization.BestAvailableEncryption(password.encode()))


def _name(common_name: str, organization: str | None) -> x509.Name:
    """``CN=<common_name>,O=<organization>`` as RFC 2253 writes it (the most specific part first;
    in the certificate the organization comes first)."""
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    parts.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(parts)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass(frozen=True)
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def new(cls, common_name: str = "Strandline CA", now: datetime.datetime | None = None) -> "CertificateAuthority":
        now = now or datetime.datetime.now(datetime.timezone.utc)
        key = _key()
        name = _name(common_name, None)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - _EPOCH_SLACK).not_valid_after(now + _VALID)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    @property
    def cert_pem(self) -> bytes:
        """The CA's certificate (a ``ssl.truststore.type=PEM`` trust store)."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, organization: str | None = None, hosts: list[str] | tuple[str, ...] = (),
              now: datetime.datetime | None = None) -> Issued:
        """A key and a certificate for ``CN=<common_name>[,O=<organization>]``, valid for server and
        client use, naming ``hosts`` (names or IP addresses) as subject alternative names."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        key = _key()
        name = _name(common_name, organization)
        builder = (x509.CertificateBuilder().subject_name(name).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - _EPOCH_SLACK).not_valid_after(now + _VALID)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if hosts:
            alt: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    alt.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.cert_pem
        return Issued(_key_pem(key), chain, name.rfc4514_string())
