"""SASL mechanisms on the broker's side: the interface each implements, the registry, PLAIN.

A SASL listener offers the mechanisms of its ``sasl.enabled.mechanisms`` that are registered in
:data:`MECHANISMS`. For each authentication the :class:`~strandline.security.authenticator.
SaslAuthenticator` makes a :class:`SaslServer` with the mechanism's factory and feeds it the
client's tokens until it is ``complete``; its ``authorization_id`` then names the principal
``User:<id>``. A mechanism refuses by raising :class:`AuthenticationFailed`, whose message goes to
the client (SASL_AUTHENTICATION_FAILED), as Kafka's ``SaslAuthenticationException``.

PLAIN (RFC 4616) is Kafka's ``PlainSaslServer`` with the users of ``PlainLoginModule``'s JAAS
options (``user_<name>="<password>"``), from ``listener.name.<l>.plain.sasl.jaas.config`` or
``sasl.jaas.config``.
"""

from __future__ import annotations

import hmac
import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from strandline.security.scram import ScramClient


class AuthenticationFailed(Exception):
    """The client did not authenticate; the message is the one the client gets."""


class SaslServer(Protocol):
    mechanism: str

    def evaluate(self, response: bytes) -> bytes:
        """The client's next token in, the challenge (or the final answer) out; raises
        :class:`AuthenticationFailed`."""
        ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user's name: the principal is ``User:<it>``."""
        ...

    @property
    def session_lifetime_ms(self) -> int | None:
        """When the credential expires (OAUTHBEARER's token), in ms since the epoch; else None."""
        ...


@dataclass(frozen=True)
class SaslContext:
    """What a mechanism may use: the listener, its security configuration (``listener_config``:
    every SSL/SASL key as :meth:`strandline.core.config.BrokerConfig.listener_config` gives it, the
    JAAS configs as ``<mechanism>.sasl.jaas.config`` and ``sasl.jaas.config``), the SCRAM
    credentials as stored in ``/config/users/<user>`` (``scram_credential(user, mechanism)``,
    None when there is none) and the time."""

    listener: str
    listener_config: dict[str, Any]
    scram_credential: Callable[[str, str], str | None] = lambda user, mechanism: None
    now_ms: int = 0

    def jaas_config(self, mechanism: str) -> str | None:
        """The mechanism's JAAS config: ``listener.name.<l>.<mechanism>.sasl.jaas.config`` first,
        then ``sasl.jaas.config`` (listener-prefixed or not)."""
        return self.listener_config.get(f"{mechanism.lower()}.sasl.jaas.config") or \
            self.listener_config.get("sasl.jaas.config")


SaslServerFactory = Callable[[SaslContext], SaslServer]


# -- JAAS configuration ---------------------------------------------------------------------------

_JAAS_TOKEN = re.compile(r'\s*(?:(")((?:[^"\\]|\\.)*)"|([;=])|([^\s;="]+))')


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


_FLAGS = ("required", "requisite", "sufficient", "optional")


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> list[JaasEntry]:
    """Kafka's ``JaasConfig`` syntax: ``<LoginModule> <flag> name="value" name=value ...;`` (one
    or more entries; quoted values may hold ``;`` and ``\\"``). Raises ValueError naming ``key``."""
    tokens: list[tuple[str, str]] = []          # (kind: word/quoted/punct, text)
    pos, text = 0, text.strip()
    while pos < len(text):
        match = _JAAS_TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"{key}: cannot read {text[pos:pos + 40]!r}")
        if match.group(1):
            tokens.append(("quoted", re.sub(r"\\(.)", r"\1", match.group(2))))
        elif match.group(3):
            tokens.append(("punct", match.group(3)))
        elif match.group(4):
            tokens.append(("word", match.group(4)))
        pos = match.end()
    usage = "expected '<LoginModuleClass> <ControlFlag> *(<OptionName>=<OptionValue>);'"
    entries, i = [], 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][1] not in _FLAGS:
            raise ValueError(f"{key}: {usage}")
        module, flag, options = tokens[i][1], tokens[i + 1][1], {}
        i += 2
        while i < len(tokens) and tokens[i] != ("punct", ";"):
            if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1] != ("punct", "=") or \
                    tokens[i + 2][0] == "punct":
                raise ValueError(f"{key}: {usage}: cannot read the option at {tokens[i][1]!r}")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ValueError(f"{key}: {usage}: the entry of {module} does not end with ;")
        entries.append(JaasEntry(module, flag, options))
        i += 1
    if not entries:
        raise ValueError(f"{key}: no login module")
    return entries


PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def jaas_options(context: SaslContext, mechanism: str) -> dict[str, str]:
    """The options of the mechanism's JAAS config's first login module ({} without one)."""
    text = context.jaas_config(mechanism)
    if not text:
        return {}
    return dict(parse_jaas_config(text)[0].options)


# -- PLAIN ----------------------------------------------------------------------------------------

class PlainServer:
    """RFC 4616: one message ``[authzid] NUL authcid NUL passwd``; the password is the JAAS config's
    ``user_<authcid>`` (compared in constant time). An authorization id other than the user is
    refused, as Kafka's ``PlainSaslServer``."""

    mechanism = "PLAIN"

    def __init__(self, context: SaslContext) -> None:
        self._users = {k[len("user_"):]: v for k, v in jaas_options(context, "PLAIN").items() if k.startswith("user_")}
        self._complete = False
        self._authorization_id = ""

    def evaluate(self, response: bytes) -> bytes:
        if self._complete:
            raise AuthenticationFailed("Authentication is already complete")
        text = response.decode("utf-8", errors="replace")      # as Java's new String(bytes, UTF_8)
        parts = text.split("\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)))
        authzid, username, password = parts
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compare whatever the user: an unknown user costs the same as a wrong password
        ok = hmac.compare_digest(password.encode(), (expected or "\0" + password).encode())
        if expected is None or not ok:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self._authorization_id = username
        self._complete = True
        return b""

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        return self._authorization_id

    @property
    def session_lifetime_ms(self) -> int | None:
        return None


def plain_client_token(username: str, password: str) -> bytes:
    """What a PLAIN client sends (no authorization id)."""
    return b"\0" + username.encode() + b"\0" + password.encode()


class SaslClient(Protocol):
    """The client side of one exchange (a broker's connection to another broker): ``first()`` is
    the first SaslAuthenticate token; ``answer(server_token)`` the next one, or None once the
    mechanism is done. A token that shows the server does not know the password raises."""

    def first(self) -> bytes: ...

    def answer(self, server_token: bytes) -> bytes | None: ...


class PlainClient:
    """PLAIN: one token, its answer empty."""

    def __init__(self, username: str, password: str) -> None:
        self.token = plain_client_token(username, password)

    def first(self) -> bytes:
        return self.token

    def answer(self, server_token: bytes) -> bytes | None:
        return None


class ScramExchange:
    """SCRAM-SHA-256/512: client-first, client-final, then the server's signature checked."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.client = ScramClient(mechanism, username, password)
        self.rounds = 0

    def first(self) -> bytes:
        return self.client.first()

    def answer(self, server_token: bytes) -> bytes | None:
        self.rounds += 1
        if self.rounds == 1:
            return self.client.final(server_token)
        self.client.check(server_token)
        return None


#: the mechanisms a broker authenticates to the others with (``sasl.mechanism.inter.broker.protocol``)
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def client_exchange(mechanism: str, username: str, password: str) -> Callable[[], SaslClient]:
    """A fresh client exchange for each connection (SCRAM's nonce is new each time)."""
    if mechanism == "PLAIN":
        return lambda: PlainClient(username, password)
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        return lambda: ScramExchange(mechanism, username, password)
    raise ValueError(f"no client side for SASL mechanism {mechanism}")


#: The mechanisms a broker can serve, by name; other modules add theirs.
MECHANISMS: dict[str, SaslServerFactory] = {"PLAIN": PlainServer}

#: Modules that register mechanisms in :data:`MECHANISMS` when imported (those present are).
MECHANISM_MODULES = ("strandline.security.scram_server", "strandline.security.oauthbearer")


def load_mechanisms() -> dict[str, SaslServerFactory]:
    """Import the mechanism modules that are there; every mechanism then registered."""
    for name in MECHANISM_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise               # the module is there but something it needs is not: say so
    return MECHANISMS
