"""Client quotas, ZooKeeper era (Kafka 2.8's ZkAdminManager, AdminZkClient and ClientQuotaManager), sans-IO.

Storage, as Kafka 2.8 keeps it: a user's quotas in ``/config/users/<user>``, a client id's in
``/config/clients/<client-id>``, a (user, client id) pair's in
``/config/users/<user>/clients/<client-id>``; names are sanitized (URL-encoded, Kafka's
``Sanitizer``) and ``<default>`` stands for the default entity (a null name on the wire). Each is
a config entity (``{"version":1,"config":{...}}``) with its change notification
``{"version":2,"entity_path":"users/<user>/clients/<client-id>"}`` under ``/config/changes``.

Keys: ``producer_byte_rate`` and ``consumer_byte_rate`` (LONG), ``request_percentage`` and
``controller_mutation_rate`` (DOUBLE); a user also has the SCRAM mechanisms' keys (STRING,
Kafka's ``QuotaConfigs.userConfigs``), which AlterClientQuotas cannot set.

Enforcement (:class:`ClientQuotaManager`): the quota of a (user, client id) is resolved in Kafka's
order, each level with its own sensor tags (who shares the measured rate), and the rate is
Kafka's ``Rate`` over 11 one-second samples; a request that takes the rate over the quota is
throttled by ``(rate - quota) / quota * window`` milliseconds.
"""

from __future__ import annotations

import decimal
import enum
import math
import urllib.parse
from dataclasses import dataclass, field
from typing import TypedDict

from kio.schema.errors import ErrorCode

DEFAULT = "<default>"                      # Kafka's ConfigEntityName.Default
USER, CLIENT_ID, IP = "user", "client-id", "ip"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: the client and user quota keys and their ConfigDef types (Kafka's QuotaConfigs)
QUOTA_KEYS: dict[str, str] = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG",
                              REQUEST_PERCENTAGE: "DOUBLE", CONTROLLER_MUTATION_RATE: "DOUBLE"}
#: SCRAM mechanisms (name -> the type DescribeUserScramCredentials reports)
SCRAM_MECHANISMS: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
USER_KEYS: dict[str, str] = {**{m: "STRING" for m in SCRAM_MECHANISMS}, **QUOTA_KEYS}
CLIENT_KEYS: dict[str, str] = dict(QUOTA_KEYS)

NUM_SAMPLES = 11                           # quota.window.num
WINDOW_MS = 1000                           # quota.window.size.seconds
INACTIVE_SENSOR_MS = 3600 * 1000           # Kafka purges a sensor unused for an hour


class QuotaError(Exception):
    """A request refused with ``code`` and ``message`` (None: Kafka sends no message)."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


# -- names ----------------------------------------------------------------------------------------

def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: Java's URLEncoder (UTF-8), with ``*`` and space as %2A and %20."""
    return urllib.parse.quote(name, safe="-_.*").replace("*", "%2A").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (Java's URLDecoder)."""
    return urllib.parse.unquote_plus(name)


def entity_name(name: str | None) -> str:
    """A wire name as ZooKeeper keeps it: None (the default entity) is ``<default>``. ``.`` and
    ``..`` (which the encoding keeps) name no znode: ZooKeeper refuses such a path, and Kafka
    answers UNKNOWN_SERVER_ERROR."""
    if name is None:
        return DEFAULT
    stored = sanitize(name)
    if stored in (".", ".."):
        raise QuotaError(ErrorCode.unknown_server_error, None)
    return stored


def wire_name(stored: str) -> str | None:
    return None if stored == DEFAULT else desanitize(stored)


# -- values as Java writes and reads them ---------------------------------------------------------

def java_double(value: float) -> str:
    """Java's ``Double.toString``: ``1000.0``, ``1.0E7``, ``1.5E-4``, ``NaN``, ``Infinity``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(value)
    shortest = decimal.Decimal(repr(abs(value))).normalize()
    sign, digits, exponent = shortest.as_tuple()
    text = "".join(map(str, digits))
    power = len(digits) - 1 + int(exponent)
    return f"{'-' if value < 0 else ''}{text[0]}.{text[1:] or '0'}E{power}"


def _java_long(value: float) -> int:
    """Scala's ``Double.toLong``: NaN is 0, out of range saturates."""
    if math.isnan(value):
        return 0
    if value >= 2 ** 63 - 1:
        return 2 ** 63 - 1
    if value <= -(2 ** 63):
        return -(2 ** 63)
    return int(value)


def stored_value(key: str, value: float, keys: dict[str, str]) -> str:
    """The text Kafka stores for ``key=value`` (ZkAdminManager.alterClientQuotas): a LONG must be a
    whole number (within 1e-6), a DOUBLE is kept as Java prints it."""
    kind = keys.get(key)
    if kind is None:
        raise QuotaError(ErrorCode.invalid_request, f"Invalid configuration key {key}")
    if kind == "DOUBLE":
        return java_double(value)
    if kind == "LONG":
        epsilon = 1e-6
        whole = _java_long(value + epsilon)
        if abs(float(whole) - value) > epsilon:
            raise QuotaError(ErrorCode.invalid_request, f"Configuration {key} must be a {kind} value")
        return str(whole)
    raise QuotaError(ErrorCode.unknown_server_error, None)        # Kafka: "Unexpected config type STRING"


def parse_java_double(text: str) -> float:
    """Java's ``String.toDouble`` for what a quota value can be (raises ValueError otherwise)."""
    t = text.strip()
    if t and t[-1] in "dDfF":
        t = t[:-1]
    if t.lower() in ("nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity") and \
            t not in ("NaN", "Infinity", "+Infinity", "-Infinity"):
        raise ValueError(text)
    return float(t)


# -- entities ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entity:
    """A quota entity as ZooKeeper names it: each part sanitized or ``<default>``, None if absent."""

    user: str | None = None
    client: str | None = None

    @property
    def config_type(self) -> str:
        return "users" if self.user is not None else "clients"

    @property
    def config_name(self) -> str:
        """The entity's name under ``/config/<type>/``: ``u``, ``c`` or ``u/clients/c``."""
        if self.user is not None:
            return self.user if self.client is None else f"{self.user}/clients/{self.client}"
        if self.client is None:
            raise ValueError("a quota entity names a user, a client id or both")
        return self.client

    @property
    def keys(self) -> dict[str, str]:
        """The keys AlterClientQuotas checks values against (Kafka's DynamicConfig.User / Client)."""
        return USER_KEYS if self.user is not None else CLIENT_KEYS

    def wire(self) -> list[tuple[str, str | None]]:
        parts = []
        if self.user is not None:
            parts.append((USER, wire_name(self.user)))
        if self.client is not None:
            parts.append((CLIENT_ID, wire_name(self.client)))
        return parts


def parse_entity(parts: list[tuple[str, str | None]]) -> Entity:
    """An AlterClientQuotas entity (a map: a repeated type keeps its last name), refused with
    Kafka's words: empty, an unknown type, an empty name, IP entities (not kept here)."""
    entries = dict(parts)
    if not entries:
        raise QuotaError(ErrorCode.invalid_request, "Invalid empty client quota entity")
    user = client = ip = None
    for entity_type, name in entries.items():
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaError(ErrorCode.invalid_request, f"Unhandled client quota entity type: {entity_type}")
        stored = entity_name(name)
        if entity_type == USER:
            user = stored
        elif entity_type == CLIENT_ID:
            client = stored
        else:
            ip = stored
        if name is not None and name == "":
            raise QuotaError(ErrorCode.invalid_request, f"Empty {entity_type} not supported")
    if ip is not None:
        if user is not None or client is not None:
            raise QuotaError(ErrorCode.invalid_request, "Invalid quota entity combination, IP entity should not be "
                                                        "used with user/client ID entity.")
        raise QuotaError(ErrorCode.invalid_request, "IP quotas (connection_creation_rate) are not supported by "
                                                    "Strandline")
    return Entity(user, client)


def apply_ops(props: dict[str, str], ops: list[tuple[str, float | None]], entity: Entity) -> dict[str, str]:
    """The entity's config after AlterClientQuotas ``ops`` (key, value or None to remove), in order."""
    props = dict(props)
    for key, value in ops:
        if value is None:
            props.pop(key, None)
        else:
            props[key] = stored_value(key, value, entity.keys)
    return props


def quota_values(props: dict[str, str]) -> dict[str, float]:
    """The quota keys of a stored config as numbers; a value Java cannot read breaks the describe
    (Kafka: "Unexpected client quota configuration value")."""
    values = {}
    for key, text in props.items():
        if key in QUOTA_KEYS:
            try:
                values[key] = parse_java_double(text)
            except ValueError:
                raise QuotaError(ErrorCode.unknown_server_error, None) from None
    return values


# -- DescribeClientQuotas ------------------------------------------------------------------------

class _Match(enum.Enum):
    ANY = "any"


_NO_MATCH = _Match.ANY          # a SPECIFIED component: any name
#: an entity's name in a part: a name, None (the default entity) or _NO_MATCH (any name; no such part)
EntityName = str | None | _Match


@dataclass(frozen=True)
class Component:
    entity_type: str
    match: EntityName


def parse_filter(components: list[tuple[str, int, str | None]]) -> tuple[Component | None, Component | None]:
    """(user component, client-id component) of a DescribeClientQuotas filter, refused as Kafka does."""
    user = client = None
    for entity_type, match_type, match in components:
        if match_type == MATCH_EXACT:
            component = Component(entity_type, match)
        elif match_type == MATCH_DEFAULT:
            component = Component(entity_type, None)
        elif match_type == MATCH_SPECIFIED:
            component = Component(entity_type, _NO_MATCH)
        else:
            raise QuotaError(ErrorCode.unknown_server_error, None)      # Kafka: "Unexpected match type"
        if entity_type == USER:
            if user is not None:
                raise QuotaError(ErrorCode.invalid_request, "Duplicate user filter component entity type")
            user = component
        elif entity_type == CLIENT_ID:
            if client is not None:
                raise QuotaError(ErrorCode.invalid_request, "Duplicate client filter component entity type")
            client = component
        elif entity_type == IP:
            raise QuotaError(ErrorCode.invalid_request, "IP quotas (connection_creation_rate) are not supported "
                                                        "by Strandline")
        elif entity_type == "":
            raise QuotaError(ErrorCode.invalid_request, "Unexpected empty filter component entity type")
        else:
            raise QuotaError(ErrorCode.unsupported_version, f"Custom entity type '{entity_type}' not supported")
    return user, client


@dataclass
class QuotaTree:
    """Every stored user and client-id config: ``users[u]``, ``clients[c]``, ``pairs[(u, c)]``
    (sanitized names, ``<default>`` for the default)."""

    users: dict[str, dict[str, str]] = field(default_factory=dict)
    clients: dict[str, dict[str, str]] = field(default_factory=dict)
    pairs: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)


def describe(user_c: Component | None, client_c: Component | None, strict: bool, tree: QuotaTree
             ) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
    """The entities a filter matches, with their quota values (Kafka's handleDescribeClientQuotas).
    Entities without a quota key are left out."""

    def exact(c: Component | None) -> bool:
        return c is not None and c.match is not _NO_MATCH

    def excluded(c: Component | None) -> bool:
        return strict and c is None

    def matches(c: Component | None, name: EntityName) -> bool:
        """``name``: the entity's wire name, or _NO_MATCH when the entity has no such part."""
        if c is None:
            return name is _NO_MATCH or not strict
        if c.match is _NO_MATCH:
            return name is not _NO_MATCH
        return name is not _NO_MATCH and name == c.match

    found: list[tuple[EntityName, EntityName, dict[str, str]]] = []
    if not (excluded(user_c) or exact(client_c)) or (exact(user_c) and excluded(client_c)):
        found += [(wire_name(u), _NO_MATCH, props) for u, props in sorted(tree.users.items())]
    if not (exact(user_c) or excluded(client_c)) or (excluded(user_c) and exact(client_c)):
        found += [(_NO_MATCH, wire_name(c), props) for c, props in sorted(tree.clients.items())]
    if not (excluded(user_c) or excluded(client_c)):
        found += [(wire_name(u), wire_name(c), props) for (u, c), props in sorted(tree.pairs.items())]
    entries: list[tuple[list[tuple[str, str | None]], dict[str, float]]] = []
    for u, c, props in found:
        values = quota_values(props)
        if values and matches(user_c, u) and matches(client_c, c):
            parts: list[tuple[str, str | None]] = []
            if not isinstance(u, _Match):
                parts.append((USER, u))
            if not isinstance(c, _Match):
                parts.append((CLIENT_ID, c))
            entries.append((parts, values))
    return entries


# -- DescribeUserScramCredentials ----------------------------------------------------------------

def scram_iterations(text: str) -> int:
    """The iterations of a stored SCRAM credential (``salt=...,stored_key=...,server_key=...,iterations=N``)."""
    fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    return int(fields["iterations"])


class ScramInfo(TypedDict):
    """One stored SCRAM credential as DescribeUserScramCredentials names it."""

    mechanism: int
    iterations: int


def scram_infos(props: dict[str, str]) -> list[ScramInfo] | None:
    """The (mechanism, iterations) of a user's stored credentials; None when it has none."""
    present = [m for m in SCRAM_MECHANISMS if m in props]
    if not present:
        return None
    return [{"mechanism": SCRAM_MECHANISMS[m], "iterations": scram_iterations(props[m])} for m in present]


# -- enforcement: Kafka's Rate and ClientQuotaManager --------------------------------------------

class QuotaRate:
    """Kafka's ``Rate`` over a ``WindowedSum`` of :data:`NUM_SAMPLES` samples of
    :data:`WINDOW_MS`: the sum of the kept samples over the time they span, at least 10 windows."""

    __slots__ = ("samples", "current", "last_record_ms")

    def __init__(self, now_ms: int) -> None:
        self.samples: list[list[float]] = [[now_ms, 0.0]]       # [window start, sum]
        self.current = 0
        self.last_record_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        for sample in self.samples:
            if now_ms - sample[0] >= NUM_SAMPLES * WINDOW_MS:
                sample[0], sample[1] = now_ms, 0.0

    def record(self, value: float, now_ms: int) -> None:
        sample = self.samples[self.current]
        if now_ms - sample[0] >= WINDOW_MS:
            self.current = (self.current + 1) % NUM_SAMPLES
            if self.current >= len(self.samples):
                sample = [now_ms, 0.0]
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample[0], sample[1] = now_ms, 0.0
        sample[1] += value
        self.last_record_ms = now_ms

    def window_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        elapsed = now_ms - int(min(s[0] for s in self.samples))
        full = elapsed // WINDOW_MS
        if full < NUM_SAMPLES - 1:
            elapsed += (NUM_SAMPLES - 1 - full) * WINDOW_MS
        return elapsed

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        return sum(s[1] for s in self.samples) / (self.window_ms(now_ms) / 1000.0)


class ClientQuotaManager:
    """One quota type's (``producer_byte_rate`` or ``consumer_byte_rate``) overrides and sensors."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.overrides: dict[Entity, float] = {}
        self.sensors: dict[tuple[str, str], QuotaRate] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.overrides)

    def update(self, entity: Entity, props: dict[str, str]) -> None:
        """An entity's stored config changed: take its value of this manager's key, or drop it."""
        text = props.get(self.key)
        value = None
        if text is not None:
            try:
                value = parse_java_double(text)
            except ValueError:
                value = None
        if value is None:
            self.overrides.pop(entity, None)
        else:
            self.overrides[entity] = value

    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        """(sensor tags, quota) of a sanitized user and a client id, in Kafka's order:
        /config/users/<user>/clients/<client-id>, .../users/<user>/clients/<default>,
        .../users/<user>, .../users/<default>/clients/<client-id>, .../users/<default>/clients/<default>,
        .../users/<default>, .../clients/<client-id>, .../clients/<default>. The tags say who shares
        the measured rate: a user's quota is shared by all its client ids, a client id's by all
        users."""
        o = self.overrides
        client = sanitize(client_id)
        for entity, tags in ((Entity(user, client), (user, client_id)), (Entity(user, DEFAULT), (user, client_id)),
                             (Entity(user, None), (user, "")), (Entity(DEFAULT, client), (user, client_id)),
                             (Entity(DEFAULT, DEFAULT), (user, client_id)), (Entity(DEFAULT, None), (user, "")),
                             (Entity(None, client), ("", client_id)), (Entity(None, DEFAULT), ("", client_id))):
            quota = o.get(entity)
            if quota is not None:
                return tags, quota
        return ("", client_id), None

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for the client and return its throttle time in ms (0: within its quota)."""
        if not self.overrides:
            return 0
        tags, quota = self.resolve(user, client_id)
        sensor = self.sensors.get(tags)
        if sensor is None:
            if len(self.sensors) > 1000:
                self.sensors = {t: s for t, s in self.sensors.items() if now_ms - s.last_record_ms < INACTIVE_SENSOR_MS}
            sensor = self.sensors[tags] = QuotaRate(now_ms)
        sensor.record(value, now_ms)
        if quota is None:
            return 0
        rate = sensor.measure(now_ms)
        if rate <= quota:
            return 0
        if quota <= 0:
            return 2 ** 31 - 1
        return min(2 ** 31 - 1, round((rate - quota) / quota * sensor.window_ms(now_ms)))

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back ``value`` (a throttled fetch answers nothing), as Kafka records its negative."""
        if self.overrides:
            sensor = self.sensors.get(self.resolve(user, client_id)[0])
            if sensor is not None:
                sensor.record(-value, now_ms)

    def max_window_bytes(self, user: str, client_id: str) -> float:
        """The most a fetch may ask for without being throttled for sure (quota times 10 windows)."""
        if not self.overrides:
            return math.inf
        quota = self.resolve(user, client_id)[1]
        return math.inf if quota is None else quota * (NUM_SAMPLES - 1) * WINDOW_MS / 1000


def entity_of_path(entity_type: str, name: str) -> Entity | None:
    """The entity of a change notification's ``entity_path`` (``users/u``, ``users/u/clients/c``,
    ``clients/c``), or None when it names no user or client-id entity."""
    if entity_type == "clients" and "/" not in name:
        return Entity(None, name)
    if entity_type == "users":
        parts = name.split("/")
        if len(parts) == 1:
            return Entity(parts[0], None)
        if len(parts) == 3 and parts[1] == "clients":
            return Entity(parts[0], parts[2])
    return None
