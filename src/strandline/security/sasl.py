"""The SASL mechanism interface: what a listener's per-connection SASL state machine drives.

A mechanism is a factory (:data:`SaslServerFactory`) registered in :data:`MECHANISMS` under its
name; the connection makes one :class:`SaslServer` per authentication and feeds it each client
token of SaslAuthenticate, answering with the token it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol


class AuthenticationFailed(Exception):
    """message goes to the client in SaslAuthenticate's error_message"""


@dataclass(frozen=True)
class SaslContext:
    listener: str                      # listener name, e.g. "SASL_SSL"
    config: Mapping[str, Any]          # the listener's effective config (jaas text, oauth keys...)
    scram_credential: Callable[[str, str], str | None]  # (user, "SCRAM-SHA-256") -> stored "salt=..,stored_key=..,server_key=..,iterations=N" or None
    now_ms: int


class SaslServer(Protocol):
    mechanism: str

    def evaluate(self, response: bytes) -> bytes: ...   # one client token in, one server token out; raises AuthenticationFailed

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...             # principal is User:<this>

    @property
    def session_lifetime_ms(self) -> int | None: ...   # OAUTHBEARER token expiry - now; else None


SaslServerFactory = Callable[[SaslContext], SaslServer]
MECHANISMS: dict[str, SaslServerFactory] = {}          # registry; your modules register into it
