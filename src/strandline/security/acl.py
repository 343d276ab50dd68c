"""Kafka's ACL model and its authorization rule (Kafka's ``AclAuthorizer``, KIP-290 prefixes).

An ACL binds a *resource pattern* (a resource type, a name, and whether the name is literal or
a prefix) to an *access control entry*: a principal (``User:alice``, ``User:*`` for everyone), a
host (an IP address, ``*`` for any), an operation and a permission (allow or deny).

:class:`AclCache` decides a request as Kafka does:

- a super user may do anything;
- the ACLs that apply to a resource are those of its exact name, of the literal wildcard ``*``,
  and of every prefix pattern its name starts with;
- with none at all, ``allow.everyone.if.no.acl.found`` decides;
- otherwise a matching DENY refuses, and else a matching ALLOW permits; ALLOW of READ, WRITE,
  DELETE or ALTER implies DESCRIBE, and ALLOW of ALTER_CONFIGS implies DESCRIBE_CONFIGS.

The enum values are Kafka's wire codes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, TypeVar


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1          # filters only: any pattern type, exact name
    MATCH = 2        # filters only: every pattern that applies to the name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1          # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1          # filters only
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
#: The principal of every connection of a PLAINTEXT listener.
ANONYMOUS = "User:ANONYMOUS"

#: The operations each resource type supports (Kafka's ``AclEntry.supportedOperations``); what a
#: KIP-430 "authorized operations" bit field covers.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

_IMPLIED_BY: dict[AclOperation, tuple[AclOperation, ...]] = {
    AclOperation.DESCRIBE: (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                            AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}


class AclError(ValueError):
    """An ACL a client asked for that Kafka refuses (INVALID_REQUEST), with Kafka's message."""


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


_E = TypeVar("_E", bound=enum.IntEnum)


def _enum(kind: type[_E], value: int) -> _E:
    try:
        return kind(value)
    except ValueError:
        return kind(0)                   # UNKNOWN, as Kafka reads a code it does not know


def binding_from_request(resource_type: int, name: str, pattern_type: int, principal: str, host: str,
                         operation: int, permission: int) -> AclBinding:
    """A CreateAcls creation as an :class:`AclBinding`; :class:`AclError` with Kafka's message
    for one Kafka refuses."""
    binding = AclBinding(ResourcePattern(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type)),
                         AccessControlEntry(principal, host, _enum(AclOperation, operation),
                                            _enum(AclPermissionType, permission)))
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or \
            p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED) or \
            e.operation in (AclOperation.UNKNOWN, AclOperation.ANY) or \
            e.permission in (AclPermissionType.UNKNOWN, AclPermissionType.ANY):
        raise AclError(f"Invalid ACL creation: {_describe(binding)}")
    if p.resource_type is ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not p.name:
        raise AclError("Invalid empty resource name")
    if "/" in p.name:
        raise AclError(f"Invalid resource name {p.name!r}: ACLs are kept in ZooKeeper, whose paths cannot hold /")
    kind, sep, who = principal.partition(":")
    if not sep or not kind or not who:
        raise AclError(f"Could not parse principal {principal!r}: expected <type>:<name>, e.g. User:alice")
    if not host:
        raise AclError("Invalid empty host: use * for any host")
    return binding


def _describe(binding: AclBinding) -> str:
    p, e = binding.pattern, binding.entry
    return (f"(pattern=ResourcePattern(resourceType={p.resource_type.name}, name={p.name}, "
            f"patternType={p.pattern_type.name}), entry=(principal={e.principal}, host={e.host}, "
            f"operation={e.operation.name}, permissionType={e.permission.name}))")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls' and DeleteAcls' filter: ``None`` names and ANY codes match everything."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def from_request(cls, f: Any, pattern_type: int | None = None) -> "AclBindingFilter":
        """From a request's filter (``resource_type_filter``, ``resource_name_filter``, ...);
        :class:`AclError` for one with UNKNOWN elements, which Kafka refuses."""
        found = cls(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                    _enum(PatternType, getattr(f, "pattern_type_filter", PatternType.LITERAL)
                          if pattern_type is None else pattern_type),
                    f.principal_filter, f.host_filter, _enum(AclOperation, f.operation),
                    _enum(AclPermissionType, f.permission_type))
        if found.resource_type is ResourceType.UNKNOWN or found.pattern_type is PatternType.UNKNOWN or \
                found.operation is AclOperation.UNKNOWN or found.permission is AclPermissionType.UNKNOWN:
            raise AclError("The filter contains UNKNOWN elements")
        return found

    def exact_patterns(self) -> list[ResourcePattern]:
        """The patterns this filter names exactly (Kafka's ``matchesAtMostOne``, and ANY as both
        LITERAL and PREFIXED): a deletion reads them even if this broker has not heard of them."""
        if self.resource_type is ResourceType.ANY or self.name is None:
            return []
        if self.pattern_type is PatternType.ANY:
            return [ResourcePattern(self.resource_type, self.name, t) for t in (PatternType.LITERAL, PatternType.PREFIXED)]
        if self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            return [ResourcePattern(self.resource_type, self.name, self.pattern_type)]
        return []

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``."""
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type is not pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:           # MATCH
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        """Kafka's ``AccessControlEntryFilter.matches``."""
        return (self.principal is None or self.principal == entry.principal) and \
            (self.host is None or self.host == entry.host) and \
            (self.operation is AclOperation.ANY or self.operation is entry.operation) and \
            (self.permission is AclPermissionType.ANY or self.permission is entry.permission)

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (``User:admin;User:ops``)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


class AclCache:
    """Every ACL of the cluster, by resource pattern, and the authorization rule over them."""

    def __init__(self, super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}

    def set(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the ACLs of ``pattern`` (none: forget it)."""
        entries = frozenset(entries)
        if entries:
            self.acls[pattern] = entries
        else:
            self.acls.pop(pattern, None)
        if pattern.pattern_type is PatternType.PREFIXED:
            by_prefix = self._prefixed.setdefault(pattern.resource_type, {})
            if entries:
                by_prefix[pattern.name] = entries
            else:
                by_prefix.pop(pattern.name, None)

    def bindings(self, flt: AclBindingFilter | None = None) -> Iterator[AclBinding]:
        """Every ACL (that ``flt`` matches), in a stable order."""
        for pattern in sorted(self.acls):
            if flt is not None and not flt.matches_pattern(pattern):
                continue
            for entry in sorted(self.acls[pattern]):
                if flt is None or flt.matches_entry(entry):
                    yield AclBinding(pattern, entry)

    def _applying(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        found: list[AccessControlEntry] = []
        for literal in (name, WILDCARD_RESOURCE):
            found.extend(self.acls.get(ResourcePattern(resource_type, literal, PatternType.LITERAL), ()))
        for prefix, entries in self._prefixed.get(resource_type, {}).items():
            if name.startswith(prefix):
                found.extend(entries)
        return found

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """May ``principal`` connected from ``host`` do ``operation`` on the resource?"""
        if principal in self.super_users:
            return True
        acls = self._applying(resource_type, name)
        if not acls:
            return self.allow_if_no_acl

        def matching(entry: AccessControlEntry, op: AclOperation, permission: AclPermissionType) -> bool:
            return entry.permission is permission and entry.principal in (principal, WILDCARD_PRINCIPAL) and \
                entry.operation in (op, AclOperation.ALL) and entry.host in (host, WILDCARD_HOST)

        if any(matching(e, operation, AclPermissionType.DENY) for e in acls):
            return False
        return any(matching(e, op, AclPermissionType.ALLOW) for op in _IMPLIED_BY.get(operation, (operation,))
                   for e in acls)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """KIP-430: a bit field with bit ``op`` set for each supported operation allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << int(op)
        return bits
