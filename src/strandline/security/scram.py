"""SCRAM credentials as Kafka stores them (RFC 5802, KIP-84; Kafka's ``ScramFormatter`` and
``ScramCredentialUtils``).

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
from typing import Any, Callable

#: the mechanisms by the type AlterUserScramCredentials names them with (Kafka's ScramMechanism)
MECHANISMS: dict[int, tuple[str, Callable[..., Any]]] = {1: ("SCRAM-SHA-256", hashlib.sha256),
                                               2: ("SCRAM-SHA-512", hashlib.sha512)}
MIN_ITERATIONS = 4096           # both mechanisms' minIterations
MAX_ITERATIONS = 16384          # ZkAdminManager's maxIterations


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
