"""The znodes of Kafka's ACL authorizer (``AclAuthorizer``: ``ZkAclStore``, ``ZkAclChangeStore``),
one class per znode like ``coordination.znodes``: each resource pattern's ACLs, and the change
notifications that tell every broker to read them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from strandline.coordination.znode_json import (
    SequentialZNode as _SequentialZNode, decode_json as _decode, json_bytes as _json, json_int as _int,
    json_object as _object)
from strandline.security.acl import (
    AccessControlEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern, ResourceType)

__all__ = ["ACL_PATHS", "AclChangeNotificationZNode", "AclZNode", "acl_resource_type_name"]

_ACL_TYPE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
                   ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
                   ResourceType.USER: "User"}
_ACL_OPERATION_NAMES = {op: "".join(w.capitalize() for w in op.name.split("_"))
                        for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
_ACL_PERMISSION_NAMES = {AclPermissionType.ALLOW: "Allow", AclPermissionType.DENY: "Deny"}


_T = TypeVar("_T")


def _by_name(names: Mapping[_T, str], text: Any, what: str) -> _T:
    """Kafka's ``fromString``: case-insensitive, underscores ignored."""
    wanted = str(text).replace("_", "").lower()
    for value, name in names.items():
        if name.replace("_", "").lower() == wanted:
            return value
    raise ValueError(f"unknown {what} {text!r}")


def acl_resource_type_name(resource_type: ResourceType) -> str:
    """Kafka's ``SecurityUtils.resourceTypeName``: ``Topic``, ``Group``, ``Cluster``, ..."""
    return _ACL_TYPE_NAMES[resource_type]


class AclZNode:
    """``/kafka-acl/<Type>/<name>`` (literal patterns) and ``/kafka-acl-extended/prefixed/<Type>/<name>``
    (prefixed ones): ``{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow",
    "operation":"Read","host":"*"}]}``."""

    LITERAL_ROOT = "/kafka-acl"
    EXTENDED_ROOT = "/kafka-acl-extended"

    @staticmethod
    def root(pattern_type: PatternType) -> str:
        if pattern_type is PatternType.LITERAL:
            return AclZNode.LITERAL_ROOT
        return f"{AclZNode.EXTENDED_ROOT}/{pattern_type.name.lower()}"

    @staticmethod
    def type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
        return f"{AclZNode.root(pattern_type)}/{acl_resource_type_name(resource_type)}"

    @staticmethod
    def path(pattern: ResourcePattern) -> str:
        return f"{AclZNode.type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"

    @staticmethod
    def resource_type(type_name: str) -> ResourceType:
        return _by_name(_ACL_TYPE_NAMES, type_name, "ACL resource type")

    @staticmethod
    def encode(entries: Iterable[AccessControlEntry]) -> bytes:
        return _json({"version": 1, "acls": [
            {"principal": e.principal, "permissionType": _ACL_PERMISSION_NAMES[e.permission],
             "operation": _ACL_OPERATION_NAMES[e.operation], "host": e.host} for e in sorted(entries)]})

    @staticmethod
    def decode(data: bytes | None, path: str = "/kafka-acl/<type>/<name>") -> frozenset[AccessControlEntry]:
        """An empty node holds no ACLs."""
        if not data:
            return frozenset()

        def parse(obj: Any) -> frozenset[AccessControlEntry]:
            return frozenset(AccessControlEntry(
                str(a["principal"]), str(a["host"]), _by_name(_ACL_OPERATION_NAMES, a["operation"], "ACL operation"),
                _by_name(_ACL_PERMISSION_NAMES, a["permissionType"], "ACL permission type"))
                for a in _object(obj)["acls"])

        return _decode(path, data, parse)


class AclChangeNotificationZNode(_SequentialZNode):
    """``/kafka-acl-changes/acl_changes_<n>`` (literal patterns; data ``TOPIC:<name>``) and
    ``/kafka-acl-extended-changes/acl_changes_<n>`` (others; data ``{"version":1,"resourceType":
    "TOPIC","name":"<name>","patternType":"PREFIXED"}``), written after every ACL change."""

    LITERAL = "/kafka-acl-changes"
    EXTENDED = "/kafka-acl-extended-changes"
    PREFIX = "acl_changes_"

    @staticmethod
    def root(pattern_type: PatternType) -> str:
        return AclChangeNotificationZNode.LITERAL if pattern_type is PatternType.LITERAL \
            else AclChangeNotificationZNode.EXTENDED

    @staticmethod
    def create_path(pattern_type: PatternType) -> str:
        return f"{AclChangeNotificationZNode.root(pattern_type)}/{AclChangeNotificationZNode.PREFIX}"

    @staticmethod
    def encode(pattern: ResourcePattern) -> bytes:
        if pattern.pattern_type is PatternType.LITERAL:
            return f"{pattern.resource_type.name}:{pattern.name}".encode("utf-8")
        return _json({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                      "patternType": pattern.pattern_type.name})

    @staticmethod
    def decode(root: str, data: bytes | None, child: str = "<child>") -> ResourcePattern:
        path = f"{root}/{child}"
        types = {t: t.name for t in _ACL_TYPE_NAMES}
        if root == AclChangeNotificationZNode.LITERAL:
            text = (data or b"").decode("utf-8", "replace")
            type_name, sep, name = text.partition(":")
            if not sep:
                raise ValueError(f"malformed data in znode {path}: expected ResourceType:ResourceName, got {text!r}")
            return ResourcePattern(_by_name(types, type_name, "ACL resource type"), name, PatternType.LITERAL)

        def parse(obj: Any) -> ResourcePattern:
            obj = _object(obj)
            if _int(obj.get("version", 1)) > 1:
                raise ValueError(f"unsupported version {obj['version']}")
            pattern_type = _by_name({PatternType.PREFIXED: "PREFIXED"}, obj["patternType"], "ACL pattern type")
            return ResourcePattern(_by_name(types, obj["resourceType"], "ACL resource type"), str(obj["name"]),
                                   pattern_type)

        return _decode(path, data, parse)


#: What Kafka's ACL authorizer creates when it starts (``AclAuthorizer.configure``).
ACL_PATHS: tuple[str, ...] = (
    *(AclZNode.type_path(PatternType.LITERAL, t) for t in _ACL_TYPE_NAMES),
    *(AclZNode.type_path(PatternType.PREFIXED, t) for t in _ACL_TYPE_NAMES),
    AclChangeNotificationZNode.LITERAL,
    AclChangeNotificationZNode.EXTENDED,
)
