"""SCRAM credentials as Kafka stores them (RFC 5802, KIP-84; Kafka's ``ScramFormatter`` and
``ScramCredentialUtils``).

The client side (:class:`ScramClient`) is what the CLI's connections and a broker's connections
to the other brokers (``sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512``) authenticate with.

AlterUserScramCredentials carries the salt and the salted password (the client ran PBKDF2, the
``Hi`` function of RFC 5802); the broker keeps ``salt``, ``stored_key = H(HMAC(salted, "Client
Key"))``, ``server_key = HMAC(salted, "Server Key")`` and the iteration count, each key Base64 (with
padding) in ``salt=...,stored_key=...,server_key=...,iterations=N``. The password itself is never
seen; the stored text is secret enough to stay out of every log line.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any, Callable

from strandline.errors import Refused

#: the mechanisms by the type AlterUserScramCredentials names them with (Kafka's ScramMechanism)
MECHANISMS: dict[int, tuple[str, Callable[..., Any]]] = {1: ("SCRAM-SHA-256", hashlib.sha256),
                                               2: ("SCRAM-SHA-512", hashlib.sha512)}
MIN_ITERATIONS = 4096           # both mechanisms' minIterations
MAX_ITERATIONS = 16384          # ZkAdminManager's maxIterations


def new_salt() -> bytes:
    """A fresh salt as Kafka makes one (``ScramFormatter.secureRandomBytes``, for ``kafka-configs``
    and for the admin client's AlterUserScramCredentials): the ASCII digits of a 130-bit random
    number in base 36."""
    number = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, digit = divmod(number, 36)
        text = digits[digit] + text
        if number == 0:
            return text.encode("ascii")


def credential(mechanism: int, salt: bytes, salted_password: bytes, iterations: int) -> str:
    """The stored form of a credential (``ScramCredentialUtils.credentialToString`` of
    ``ScramFormatter.generateCredential(salt, saltedPassword, iterations)``)."""
    _, digest = MECHANISMS[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")
    return f"salt={b64(salt)},stored_key={b64(stored_key)},server_key={b64(server_key)},iterations={iterations}"


class ScramRefused(Refused):
    """The broker refused a SCRAM exchange, or answered what no broker knowing the password would."""


class ScramClient:
    """The client side of SCRAM-SHA-256/512 (RFC 5802): hashlib's PBKDF2 and HMAC. ``first()``,
    then ``final(server_first)``, then ``check(server_final)``."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self.digest = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}[mechanism]
        self.username, self.password = username, password
        self.nonce = nonce or secrets.token_urlsafe(24)
        self.first_bare = "n=" + username.replace("=", "=3D").replace(",", "=2C") + ",r=" + self.nonce
        self.server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self.first_bare).encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(a.split("=", 1) for a in server_first.decode("utf-8").split(",") if "=" in a)
        if "e" in attrs:
            raise ScramRefused(f"SCRAM: the broker refused: {attrs['e']}")
        try:
            nonce, salt, iterations = attrs.get("r", ""), base64.b64decode(attrs.get("s", "")), int(attrs.get("i", "0"))
        except ValueError:
            raise ScramRefused("SCRAM: the broker's first message is not valid") from None
        if not nonce.startswith(self.nonce) or nonce == self.nonce or iterations < 1:
            raise ScramRefused("SCRAM: the broker's first message is not valid")
        salted = hashlib.pbkdf2_hmac(self.digest().name, self.password.encode("utf-8"), salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self.first_bare},{server_first.decode('utf-8')},{without_proof}".encode("utf-8")
        client_key = hmac.new(salted, b"Client Key", self.digest).digest()
        signature = hmac.new(self.digest(client_key).digest(), auth, self.digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.new(salted, b"Server Key", self.digest).digest()
        self.server_signature = hmac.new(server_key, auth, self.digest).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("utf-8")

    def check(self, server_final: bytes) -> None:
        attrs = dict(a.split("=", 1) for a in server_final.decode("utf-8").split(",") if "=" in a)
        if "e" in attrs:
            raise ScramRefused(f"SCRAM: the broker refused: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs.get("v", ""))
        except ValueError:
            signature = b""
        if not hmac.compare_digest(signature, self.server_signature):
            raise ScramRefused("SCRAM: the broker's signature is wrong: it does not know the password")
