"""The server side of SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; Kafka's
``ScramSaslServer``, KIP-84).

Two rounds:

1. client-first ``n,[a=authzid],n=user,r=cnonce[,ext=value...]`` → server-first
   ``r=cnonce+snonce,s=salt,i=iterations`` (salt and iterations from the stored credential of
   :mod:`strandline.security.scram`);
2. client-final ``c=base64(gs2 header),r=nonce,p=proof`` → server-final ``v=ServerSignature``,
   after checking that ``H(ClientProof XOR ClientSignature)`` is the stored key (constant time).
   The nonce must end with ``cnonce+snonce``, as Kafka 3.8.1 to 3.9 check it (CVE-2024-56128):
   librdkafka before 2.6.1 sends ``cnonce+cnonce+snonce`` (librdkafka#4895), and Kafka 4's exact
   comparison refuses those clients (Debian's kcat among them).

As in Kafka, every failure of the exchange answers the client with one message that says nothing
about which check failed (an unknown user looks like a wrong password), except an authorization id
other than the user, which says so. Only the gs2 flag ``n`` is read, as Kafka does: channel binding
(``p=``) is refused, no mechanism being offered with ``-PLUS``, and so is ``y``. Delegation tokens (the ``tokenauth`` extension) are not supported.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, Callable

from strandline.security.sasl import MECHANISMS, AuthenticationFailed, SaslContext

#: each mechanism's digest and minimum iteration count (Kafka's ScramMechanism)
DIGESTS: dict[str, Callable[..., Any]] = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
MIN_ITERATIONS = 4096


def failure_message(mechanism: str) -> str:
    """What the client reads for every failed exchange (Kafka's SaslServerAuthenticator)."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class _Invalid(Exception):
    """A check of the exchange failed; the client gets :func:`failure_message` only."""


@dataclass(frozen=True)
class StoredCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def parse(cls, text: str) -> "StoredCredential":
        """``salt=..,stored_key=..,server_key=..,iterations=N`` (Kafka's ``ScramCredentialUtils``)."""
        fields = dict(item.partition("=")[::2] for item in text.split(","))
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (KeyError, ValueError, binascii.Error) as exc:
            raise _Invalid(f"unreadable stored credential: {exc}") from None


def decode_saslname(text: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is invalid."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            escape = text[i:i + 3]
            if escape not in ("=2C", "=3D"):
                raise _Invalid(f"invalid escape {escape!r} in a name")
            out.append("," if escape == "=2C" else "=")
            i += 3
        elif text[i] == ",":
            raise _Invalid("unescaped , in a name")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _attributes(parts: list[str], what: str) -> list[tuple[str, str]]:
    found = []
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or len(key) != 1 or not key.isalpha():
            raise _Invalid(f"invalid attribute {part!r} in the {what}")
        found.append((key, value))
    return found


def _valid_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(ch) <= 0x7E and ch != "," for ch in nonce)


@dataclass(frozen=True)
class ClientFirst:
    gs2_header: str          # "n,," or "n,a=alice,": what c= of the client-final must carry
    authzid: str
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str                # client-first-message-bare, part of the AuthMessage

    @classmethod
    def parse(cls, text: str) -> "ClientFirst":
        flag, sep1, rest = text.partition(",")
        authz, sep2, bare = rest.partition(",")
        if not sep1 or not sep2:
            raise _Invalid("not a SCRAM client-first message")
        if flag.startswith("p="):
            raise _Invalid("channel binding is not supported")
        if flag != "n":              # Kafka refuses "y" too: only "n" (no channel binding) is read
            raise _Invalid(f"invalid gs2 flag {flag!r}")
        authzid = ""
        if authz:
            if not authz.startswith("a="):
                raise _Invalid("invalid authzid in the gs2 header")
            authzid = decode_saslname(authz[2:])
        parts = bare.split(",")
        if parts[0].startswith("m="):
            raise _Invalid("mandatory extensions are not supported")
        attrs = _attributes(parts, "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise _Invalid("a client-first message is n=user,r=nonce[,extensions]")
        if not _valid_nonce(attrs[1][1]):
            raise _Invalid("invalid client nonce")
        username = decode_saslname(attrs[0][1])
        if not username:
            raise _Invalid("empty user name")
        # Kafka's SCRAM extensions: key=value after the nonce (KIP-48's tokenauth=true)
        extensions: dict[str, str] = {}
        for part in parts[2:]:
            key, _, value = part.partition("=")
            extensions[key] = value
        return cls(f"{flag},{authz},", authzid, username, attrs[1][1], extensions, bare)


@dataclass(frozen=True)
class ClientFinal:
    channel_binding: str
    nonce: str
    proof: bytes
    without_proof: str       # client-final-message-without-proof, part of the AuthMessage

    @classmethod
    def parse(cls, text: str) -> "ClientFinal":
        without_proof, sep, proof_attr = text.rpartition(",")
        if not sep or not proof_attr.startswith("p="):
            raise _Invalid("a client-final message ends with p=proof")
        attrs = _attributes(without_proof.split(","), "client-final message")
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise _Invalid("a client-final message is c=binding,r=nonce[,extensions],p=proof")
        try:
            proof = base64.b64decode(proof_attr[2:], validate=True)
        except (ValueError, binascii.Error):
            raise _Invalid("the proof is not Base64") from None
        return cls(attrs[0][1], attrs[1][1], proof, without_proof)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def server_nonce() -> str:
    """A fresh server nonce: 192 random bits, printable and without commas."""
    return secrets.token_urlsafe(24)


class ScramServer:
    """One SCRAM exchange: a :class:`~strandline.security.sasl.SaslServer`."""

    def __init__(self, context: SaslContext, mechanism: str, nonce: Callable[[], str] = server_nonce) -> None:
        if mechanism not in DIGESTS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._digest = DIGESTS[mechanism]
        self._context = context
        self._nonce = nonce
        self._state = "client-first"
        self._client_first: ClientFirst | None = None
        self._server_first = ""
        self._nonce_full = ""
        self._credential: StoredCredential | None = None
        self._authorization_id = ""

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str:
        if not self.complete:
            raise RuntimeError("SCRAM authentication is not complete")
        return self._authorization_id

    @property
    def session_lifetime_ms(self) -> int | None:
        return None

    def evaluate(self, response: bytes) -> bytes:
        try:
            if self._state == "client-first":
                return self._client_first_message(response)
            if self._state == "client-final":
                return self._client_final_message(response)
            raise _Invalid(f"unexpected SCRAM message in state {self._state}")
        except _Invalid:
            self._state = "failed"
            self._credential = None
            raise AuthenticationFailed(failure_message(self.mechanism)) from None

    def _client_first_message(self, response: bytes) -> bytes:
        try:
            first = ClientFirst.parse(response.decode("utf-8"))
        except UnicodeDecodeError:
            raise _Invalid("not UTF-8") from None
        if first.extensions.get("tokenauth", "").lower() == "true":
            raise _Invalid("delegation tokens are not supported")
        stored = self._context.scram_credential(first.username, self.mechanism)
        if stored is None:
            raise _Invalid("unknown user")
        credential = StoredCredential.parse(stored)
        if first.authzid and first.authzid != first.username:
            self._state = "failed"
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise _Invalid(f"iterations {credential.iterations} below the minimum {MIN_ITERATIONS}")
        self._client_first, self._credential = first, credential
        self._nonce_full = first.nonce + self._nonce()
        self._server_first = f"r={self._nonce_full},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = "client-final"
        return self._server_first.encode("ascii")

    def _client_final_message(self, response: bytes) -> bytes:
        first, credential = self._client_first, self._credential
        assert first is not None and credential is not None
        try:
            final = ClientFinal.parse(response.decode("utf-8"))
        except UnicodeDecodeError:
            raise _Invalid("not UTF-8") from None
        if not final.nonce.endswith(self._nonce_full):      # Kafka 3.9's endsWith: see above
            raise _Invalid("nonce mismatch")
        if final.channel_binding != _b64(first.gs2_header.encode("utf-8")):
            raise _Invalid("channel binding data does not match the gs2 header")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode("utf-8")
        client_signature = hmac.new(credential.stored_key, auth_message, self._digest).digest()
        if len(final.proof) != len(client_signature):
            raise _Invalid("proof of the wrong length")
        client_key = bytes(a ^ b for a, b in zip(final.proof, client_signature))
        if not hmac.compare_digest(self._digest(client_key).digest(), credential.stored_key):
            raise _Invalid("invalid client proof")
        server_signature = hmac.new(credential.server_key, auth_message, self._digest).digest()
        self._authorization_id = first.username
        self._credential = None
        self._state = "complete"
        return f"v={_b64(server_signature)}".encode("ascii")


def _factory(mechanism: str) -> Callable[[SaslContext], ScramServer]:
    def make(context: SaslContext) -> ScramServer:
        return ScramServer(context, mechanism)
    return make


for _mechanism in DIGESTS:
    MECHANISMS[_mechanism] = _factory(_mechanism)
