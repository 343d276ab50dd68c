"""The server side of SASL/OAUTHBEARER (RFC 7628; Kafka's KIP-255 and KIP-768).

The client's one message is RFC 7628's initial response, ``n,[a=authzid],\\x01auth=Bearer
<token>\\x01[key=value\\x01...]\\x01``. The token is validated by one of Kafka's two validators:

- the *unsecured* validator (Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``, the default):
  an unsigned JWS (``alg: none``, empty signature) whose principal claim (``sub``, or the login
  module option ``unsecuredValidatorPrincipalClaimName``) names the user, with ``exp`` required and
  ``iat`` optional, both checked against the clock with ``unsecuredValidatorAllowableClockSkewMs``,
  and every scope of ``unsecuredValidatorRequiredScope`` in the scope claim;
- the *signed* validator of KIP-768 (Kafka's ``OAuthBearerValidatorCallbackHandler``, chosen by
  ``sasl.server.callback.handler.class`` or by setting ``sasl.oauthbearer.jwks.endpoint.url``): a
  JWT signed with RS/PS/ES 256/384/512 by a key of the JWKS, with ``exp`` and ``iat`` required
  (``exp`` not before ``iat``),
  ``sasl.oauthbearer.expected.audience`` and ``sasl.oauthbearer.expected.issuer`` checked when set
  (an ``aud`` claim with no expected audience is refused, as jose4j does), the principal from
  ``sasl.oauthbearer.sub.claim.name`` and ``sasl.oauthbearer.clock.skew.seconds`` of skew.

The JWKS is not read here: the listener config holds it under :data:`JWKS`, as JSON text or as a
function returning it (the shell reads the file a ``file:`` endpoint URL names, or keeps the last
JWKS an ``http:``/``https:`` one served; see :func:`jwks_endpoint`). A token whose key id no key
has is told to the function under :data:`JWKS_KEY_ID_MISSING`, if any: the shell then fetches the
JWKS again at once (Kafka's ``RefreshingHttpsJwks.maybeExpediteRefresh``); the token itself is
refused, as in Kafka.

A token that fails validation is answered, as Kafka does, with RFC 7628's error JSON
(``{"status":"invalid_token"}``); the client then sends ``\\x01`` and the exchange fails with that
JSON as the error message.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import unquote, urlparse

import jwt

from strandline.security import jaas
from strandline.security.sasl import MECHANISMS, AuthenticationFailed, SaslContext

MECHANISM = "OAUTHBEARER"

# the unsecured validator's options, in the OAuthBearerLoginModule's JAAS entry
PRINCIPAL_CLAIM_OPTION = "unsecuredValidatorPrincipalClaimName"
SCOPE_CLAIM_OPTION = "unsecuredValidatorScopeClaimName"
REQUIRED_SCOPE_OPTION = "unsecuredValidatorRequiredScope"
CLOCK_SKEW_OPTION = "unsecuredValidatorAllowableClockSkewMs"

# KIP-768's listener configs
CALLBACK_HANDLER_CLASS = "sasl.server.callback.handler.class"
JWKS_ENDPOINT_URL = "sasl.oauthbearer.jwks.endpoint.url"
JWKS_REFRESH_MS = "sasl.oauthbearer.jwks.endpoint.refresh.ms"
JWKS_RETRY_BACKOFF_MS = "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"
JWKS_RETRY_BACKOFF_MAX_MS = "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"
EXPECTED_AUDIENCE = "sasl.oauthbearer.expected.audience"
EXPECTED_ISSUER = "sasl.oauthbearer.expected.issuer"
SUB_CLAIM_NAME = "sasl.oauthbearer.sub.claim.name"
SCOPE_CLAIM_NAME = "sasl.oauthbearer.scope.claim.name"
CLOCK_SKEW_SECONDS = "sasl.oauthbearer.clock.skew.seconds"
JAAS_CONFIG = "sasl.jaas.config"
#: the JWKS of the signed validator: JSON text, or a function of no arguments returning it (which
#: may raise :class:`InvalidToken`: no JWKS to check the token with)
JWKS = "strandline.oauthbearer.jwks"
#: a function told the key id of a token no key of the JWKS has (a JWKS fetched over HTTP(S) is
#: fetched again)
JWKS_KEY_ID_MISSING = "strandline.oauthbearer.jwks.key.id.missing"

#: the JWS algorithms the signed validator accepts: public-key signatures only (never ``none``,
#: never an HMAC whose key a JWKS would publish)
SIGNED_ALGORITHMS = {"RS256": "RSA", "RS384": "RSA", "RS512": "RSA", "PS256": "RSA", "PS384": "RSA", "PS512": "RSA",
                     "ES256": "EC", "ES384": "EC", "ES512": "EC"}

_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_AUTH = re.compile(r"(\w+) +([-_.a-zA-Z0-9]+)")


def failure_message() -> str:
    """What the client reads for a malformed client response (Kafka's SaslServerAuthenticator)."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {MECHANISM}"


class ConfigError(ValueError):
    """A listener's OAUTHBEARER configuration that cannot be used, with what is wrong."""


class InvalidToken(Exception):
    """A token the validator refuses: RFC 7628's error status, and the scope it lacked."""

    def __init__(self, reason: str, status: str = "invalid_token", scope: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.scope = scope

    def json(self) -> str:
        """Kafka's ``OAuthBearerSaslServer.jsonErrorResponse``."""
        text = f'{{"status":"{self.status}"'
        if self.scope is not None:
            text += f', "scope":"{self.scope}"'
        return text + "}"


@dataclass(frozen=True)
class Token:
    principal: str
    expiration_ms: int
    scope: frozenset[str]
    claims: Mapping[str, Any]


@dataclass(frozen=True)
class ClientResponse:
    authorization_id: str
    token: str
    extensions: dict[str, str]


def parse_client_response(data: bytes) -> ClientResponse:
    """RFC 7628's initial client response as Kafka's ``OAuthBearerClientInitialResponse`` reads
    it; :class:`ValueError` for anything else."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    if not text.startswith("n,"):
        raise ValueError("an OAUTHBEARER client response starts with the gs2 header n,")
    authz, sep, rest = text[2:].partition(",")
    if not sep:
        raise ValueError("no end to the gs2 header")
    authzid = ""
    if authz:
        if not authz.startswith("a=") or len(authz) == 2:
            raise ValueError("invalid authzid in the gs2 header")
        authzid = authz[2:].replace("=2C", ",").replace("=3D", "=")
    if not rest.startswith("\x01") or not rest.endswith("\x01\x01"):
        raise ValueError("key=value pairs are separated by \\x01 and end with \\x01\\x01")
    pairs: dict[str, str] = {}
    for item in rest[1:-2].split("\x01") if rest != "\x01\x01" else []:
        key, eq, value = item.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
            raise ValueError(f"invalid key=value pair {item!r}")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise ValueError("'auth' not specified")
    match = _AUTH.fullmatch(auth)
    if match is None or match.group(1).lower() != "bearer":
        raise ValueError("invalid scheme in the auth value: Bearer <token>")
    return ClientResponse(authzid, match.group(2), pairs)


def client_response(token: str, authorization_id: str = "", extensions: Mapping[str, str] | None = None) -> bytes:
    """RFC 7628's initial client response (what Kafka's OAuthBearerSaslClient sends)."""
    authz = "a=" + authorization_id.replace("=", "=3D").replace(",", "=2C") if authorization_id else ""
    pairs = "".join(f"{k}={v}\x01" for k, v in (extensions or {}).items())
    return f"n,{authz},\x01auth=Bearer {token}\x01{pairs}\x01".encode("utf-8")


def _b64url_json(part: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (ValueError, binascii.Error):
        raise InvalidToken(f"the {what} is not Base64URL-encoded JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken(f"the {what} is not a JSON object")
    return value


def _time_ms(claims: Mapping[str, Any], name: str, required: bool) -> int | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise InvalidToken(f"no {name} claim")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidToken(f"the {name} claim is not a number")
    return round(float(value) * 1000)


def _scope(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    """A scope claim: one space-delimited string or a list of strings."""
    value = claims.get(name)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value):
        return frozenset(v.strip() for v in value)
    raise InvalidToken(f"the {name} claim is neither a string nor a list of strings")


def _principal(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidToken(f"no principal: the {name} claim is missing, not a string or blank")
    return value.strip()


@dataclass(frozen=True)
class UnsecuredValidator:
    """Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "UnsecuredValidator":
        skew = options.get(CLOCK_SKEW_OPTION, "").strip() or "0"
        if not skew.isdigit():
            raise ConfigError(f"{CLOCK_SKEW_OPTION}={skew!r}: a non-negative number of milliseconds")
        return cls(options.get(PRINCIPAL_CLAIM_OPTION, "").strip() or "sub",
                   options.get(SCOPE_CLAIM_OPTION, "").strip() or "scope",
                   tuple(options.get(REQUIRED_SCOPE_OPTION, "").split()), int(skew))

    def validate(self, token: str, now_ms: int) -> Token:
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("an unsecured JWS has 3 dot-separated Base64URL-encoded values")
        if parts[2]:
            raise InvalidToken("an unsecured JWS has an empty signature")
        header = _b64url_json(parts[0], "JOSE header")
        if header.get("alg") != "none":
            raise InvalidToken("an unsecured JWS has the algorithm none")
        claims = _b64url_json(parts[1], "claims")
        principal = _principal(claims, self.principal_claim)
        issued_ms = _time_ms(claims, "iat", required=False)
        if issued_ms is not None and now_ms + self.clock_skew_ms < issued_ms:
            raise InvalidToken(f"the Issued At time ({issued_ms} ms) is after now ({now_ms} ms) plus the allowable "
                               f"clock skew ({self.clock_skew_ms} ms)")
        expiration_ms = _time_ms(claims, "exp", required=True)
        assert expiration_ms is not None
        if now_ms - self.clock_skew_ms >= expiration_ms:
            raise InvalidToken(f"now ({now_ms} ms) minus the allowable clock skew ({self.clock_skew_ms} ms) is on or "
                               f"after the Expiration Time ({expiration_ms} ms)")
        if issued_ms is not None and expiration_ms <= issued_ms:
            raise InvalidToken("the Expiration Time is not after the Issued At time")
        scope = _scope(claims, self.scope_claim)
        missing = [s for s in self.required_scope if s not in scope]
        if missing:
            raise InvalidToken(f"the scope lacks {missing[0]}", "insufficient_scope",
                               "[" + ", ".join(self.required_scope) + "]")
        return Token(principal, expiration_ms, scope, claims)


def _audience(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(str(a).strip() for a in items if str(a).strip())


@dataclass(frozen=True)
class SignedValidator:
    """KIP-768's ``OAuthBearerValidatorCallbackHandler`` over a JWKS."""

    jwks: Callable[[], str]
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    key_id_missing: Callable[[str], None] | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "SignedValidator":
        source = config.get(JWKS)
        if source is None:
            raise ConfigError(f"the JWKS of {config.get(JWKS_ENDPOINT_URL)!r} was not loaded")
        jwks: Callable[[], str] = source if callable(source) else (lambda: str(source))
        skew = str(config.get(CLOCK_SKEW_SECONDS, 30)).strip()
        if not skew.isdigit():
            raise ConfigError(f"{CLOCK_SKEW_SECONDS}={skew!r}: a non-negative number of seconds")
        issuer = config.get(EXPECTED_ISSUER)
        missing = config.get(JWKS_KEY_ID_MISSING)
        return cls(jwks, _audience(config.get(EXPECTED_AUDIENCE)), str(issuer) if issuer else None,
                   str(config.get(SUB_CLAIM_NAME) or "sub"), str(config.get(SCOPE_CLAIM_NAME) or "scope"), int(skew),
                   missing if callable(missing) else None)

    def _keys(self, header: Mapping[str, Any]) -> list[jwt.PyJWK]:
        """The JWKS's keys that may have signed a token with this header (jose4j's
        ``VerificationJwkSelector``: by key id, key type, use and algorithm)."""
        try:
            document = json.loads(self.jwks())
        except ValueError:
            raise InvalidToken("the JWKS is not JSON") from None
        keys = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(keys, list):
            raise InvalidToken("the JWKS has no keys")
        alg, kid = header.get("alg"), header.get("kid")
        found = []
        for key in keys:
            # as jose4j's selector, a key's own "alg" does not restrict it: an RSA key verifies
            # RS256, RS384, PS256... alike
            if not isinstance(key, dict) or key.get("kty") != SIGNED_ALGORITHMS[str(alg)] or \
                    key.get("use", "sig") != "sig" or (kid is not None and key.get("kid") != kid):
                continue
            try:
                found.append(jwt.PyJWK(key, algorithm=str(alg)))
            except jwt.PyJWTError:
                continue
        return found

    def validate(self, token: str, now_ms: int) -> Token:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"not a JWS: {exc}") from None
        alg = header.get("alg")
        if alg not in SIGNED_ALGORITHMS:
            raise InvalidToken(f"the algorithm {alg!r} is not accepted")
        keys = self._keys(header)
        if not keys:
            kid = header.get("kid")
            if self.key_id_missing is not None and isinstance(kid, str):
                self.key_id_missing(kid)
            raise InvalidToken("no key of the JWKS can verify this token")
        claims: dict[str, Any] | None = None
        for key in keys:
            try:
                claims = jwt.decode(token, key, algorithms=[str(alg)], audience=list(self.expected_audience) or None,
                                    issuer=self.expected_issuer,
                                    options={"verify_exp": False, "verify_iat": False, "verify_nbf": False})
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as exc:
                raise InvalidToken(str(exc)) from None
        if claims is None:
            raise InvalidToken("the signature does not verify with any key of the JWKS")
        skew_ms = self.clock_skew_s * 1000
        expiration_ms = _time_ms(claims, "exp", required=True)
        issued_ms = _time_ms(claims, "iat", required=True)
        not_before_ms = _time_ms(claims, "nbf", required=False)
        assert expiration_ms is not None and issued_ms is not None
        if now_ms - skew_ms >= expiration_ms:
            raise InvalidToken("the token has expired")
        if expiration_ms < issued_ms:
            raise InvalidToken("the Expiration Time is before the Issued At time")
        if not_before_ms is not None and now_ms + skew_ms < not_before_ms:
            raise InvalidToken("the token is not valid yet (nbf)")
        return Token(_principal(claims, self.sub_claim), expiration_ms, self._scope(claims), claims)

    def _scope(self, claims: Mapping[str, Any]) -> frozenset[str]:
        """Kafka's ``ValidatorAccessTokenValidator``: a string is one scope (not split), a list its
        items, anything else none; a blank scope is refused."""
        value = claims.get(self.scope_claim)
        items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        if not all(isinstance(v, str) and v.strip() for v in items):
            raise InvalidToken(f"the {self.scope_claim} claim has a blank scope")
        return frozenset(v.strip() for v in items)


Validator = UnsecuredValidator | SignedValidator


def validator(config: Mapping[str, Any]) -> Validator:
    """The validator a listener's config chooses; :class:`ConfigError` for one that cannot work."""
    handler = str(config.get(CALLBACK_HANDLER_CLASS) or "")
    if handler.endswith(".OAuthBearerValidatorCallbackHandler") or config.get(JWKS_ENDPOINT_URL):
        if not config.get(JWKS_ENDPOINT_URL):
            raise ConfigError(f"{handler} needs {JWKS_ENDPOINT_URL}")
        return SignedValidator.from_config(config)
    if handler and not handler.endswith(".OAuthBearerUnsecuredValidatorCallbackHandler"):
        raise ConfigError(f"{CALLBACK_HANDLER_CLASS}={handler}: not a validator Strandline has")
    text = config.get(JAAS_CONFIG)
    options: dict[str, str] = {}
    if text:
        try:
            options = jaas.single(str(text)).options
        except jaas.JaasError as exc:
            raise ConfigError(f"{JAAS_CONFIG}: {exc}") from None
    return UnsecuredValidator.from_options(options)


def listener_validation_config(context: SaslContext) -> dict[str, Any]:
    """The listener's configuration as :func:`validator` reads it: its keys, and OAUTHBEARER's
    JAAS config (``listener.name.<l>.oauthbearer.sasl.jaas.config`` first) as ``sasl.jaas.config``."""
    return {**context.listener_config, JAAS_CONFIG: context.jaas_config(MECHANISM)}


def jwks_endpoint(url: str) -> tuple[str, str]:
    """Where a JWKS endpoint URL points: ``("file", the path)`` for a ``file:`` URL (the shell
    reads it at each authentication), ``("http", url)`` for an ``http:`` or ``https:`` one (the
    shell fetches it, again every ``sasl.oauthbearer.jwks.endpoint.refresh.ms``);
    :class:`ConfigError` for another."""
    parsed = urlparse(url)
    if parsed.scheme in ("http", "https"):
        if not parsed.hostname:
            raise ConfigError(f"{JWKS_ENDPOINT_URL}={url!r}: no host")
        return "http", url
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost") or not parsed.path:
        raise ConfigError(f"{JWKS_ENDPOINT_URL}={url!r}: a file:, http: or https: URL")
    return "file", unquote(parsed.path)


def jwks_file_path(url: str) -> str:
    """The file a ``file:`` JWKS endpoint URL names; :class:`ConfigError` for another scheme."""
    kind, where = jwks_endpoint(url)
    if kind != "file":
        raise ConfigError(f"{JWKS_ENDPOINT_URL}={url!r}: not a file: URL")
    return where


#: Kafka's ``RefreshingHttpsJwks``: a key id no key has asks for a refresh at most this often,
#: and key ids longer than this are not asked for
MISSING_KEY_ID_INTERVAL_MS = 60_000
MISSING_KEY_ID_MAX_LENGTH = 1000
MISSING_KEY_ID_MAX_ENTRIES = 16


class MissingKeyIds:
    """Which unknown key ids asked for a refresh lately (Kafka's ``maybeExpediteRefresh``): each
    may ask again :data:`MISSING_KEY_ID_INTERVAL_MS` after it last did."""

    def __init__(self) -> None:
        self._next_ms: dict[str, int] = {}

    def should_refresh(self, kid: str, now_ms: int) -> bool:
        if len(kid) > MISSING_KEY_ID_MAX_LENGTH:
            return False
        next_ms = self._next_ms.get(kid)
        if next_ms is not None and next_ms > now_ms:
            return False
        self._next_ms.pop(kid, None)
        self._next_ms[kid] = now_ms + MISSING_KEY_ID_INTERVAL_MS
        while len(self._next_ms) > MISSING_KEY_ID_MAX_ENTRIES:      # the oldest goes (an LRU map)
            del self._next_ms[next(iter(self._next_ms))]
        return True


def retry_waits_ms(backoff_ms: int, backoff_max_ms: int) -> list[int]:
    """The waits between the attempts of one JWKS fetch (Kafka's ``Retry``: doubling from
    ``retry.backoff.ms``, until ``retry.backoff.max.ms`` have passed in all)."""
    waits: list[int] = []
    total, wait = 0, max(1, backoff_ms)
    while total < backoff_max_ms:
        step = min(wait, backoff_max_ms - total)
        waits.append(step)
        total += step
        wait *= 2
    return waits


class OAuthBearerServer:
    """One OAUTHBEARER exchange (Kafka's ``OAuthBearerSaslServer``): a
    :class:`~strandline.security.sasl.SaslServer`."""

    mechanism = MECHANISM

    def __init__(self, context: SaslContext, check: Validator | None = None) -> None:
        self._context = context
        self._validator = check
        if check is None:
            try:
                self._validator = validator(listener_validation_config(context))
            except ConfigError:
                self._validator = None          # every exchange fails; the broker checks its config at start
        self._error: str | None = None
        self._token: Token | None = None

    @property
    def complete(self) -> bool:
        return self._token is not None

    @property
    def authorization_id(self) -> str:
        if self._token is None:
            raise RuntimeError("OAUTHBEARER authentication is not complete")
        return self._token.principal

    @property
    def session_lifetime_ms(self) -> int | None:
        if self._token is None:
            return None
        return self._token.expiration_ms

    @property
    def token(self) -> Token | None:
        return self._token

    def evaluate(self, response: bytes) -> bytes:
        if response == b"\x01" and self._error is not None:
            raise AuthenticationFailed(self._error)
        if self._token is not None:
            raise AuthenticationFailed(failure_message())
        self._error = None
        try:
            parsed = parse_client_response(response)
        except ValueError:
            raise AuthenticationFailed(failure_message()) from None
        if self._validator is None:
            raise AuthenticationFailed(failure_message())
        try:
            token = self._validator.validate(parsed.token, self._context.now_ms)
        except InvalidToken as exc:
            self._error = exc.json()
            return self._error.encode("utf-8")
        if parsed.authorization_id and parsed.authorization_id != token.principal:
            raise AuthenticationFailed(f"Authentication failed: Client requested an authorization id "
                                       f"({parsed.authorization_id}) that is different from the token's principal "
                                       f"name ({token.principal})")
        self._token = token
        return b""


def _factory(context: SaslContext) -> OAuthBearerServer:
    return OAuthBearerServer(context)


MECHANISMS[MECHANISM] = _factory
