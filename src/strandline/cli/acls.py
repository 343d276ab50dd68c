"""``strandline acls list|add|remove``, in the manner of ``kafka-acls``: ACLs of topics, groups,
transactional ids and the cluster, on a cluster whose brokers run Kafka's ACL authorizer."""

from __future__ import annotations

import argparse

from kio.schema.errors import ErrorCode

from strandline.errors import StrandlineError
from strandline.cli.client_config import KafkaConnection
from strandline.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from strandline.cli.answers import refusal
from strandline.cli.parsers import Subcommands
from kio.schema.describe_acls.v3.response import DescribeAclsResource

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
OPERATIONS = [op.name.lower().replace("_", "-") for op in AclOperation
              if op not in (AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.CREATE_TOKENS,
                            AclOperation.DESCRIBE_TOKENS)]


def add_parser(sub: Subcommands, bootstrap_default: str, bootstrap_help: str) -> None:
    acls = sub.add_parser("acls", help="list, add and remove ACLs (like kafka-acls)")
    asub = acls.add_subparsers(dest="action", required=True)
    listing = asub.add_parser("list", help="the ACLs of a resource, or of every resource")
    add = asub.add_parser("add", help="add ALLOW or DENY ACLs for principals on a resource")
    remove = asub.add_parser("remove", help="remove the ACLs that match (every one of the resource by default)")
    for p in (listing, add, remove):
        p.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
        which = p.add_mutually_exclusive_group(required=p is not listing)
        which.add_argument("--topic", help="a topic (or a prefix, or * for every topic)")
        which.add_argument("--group", help="a consumer group (or a prefix, or *)")
        which.add_argument("--transactional-id", help="a transactional id (or a prefix, or *)")
        which.add_argument("--cluster", action="store_true", help="the cluster")
        p.add_argument("--resource-pattern-type", default=None,
                       choices=["literal", "prefixed"] + ([] if p is add else ["match", "any"]),
                       help="literal (the default) or prefixed; list and remove also take match (every "
                            "pattern that applies to the name) and any (every pattern type, the exact name)")
    for p in (add, remove):
        p.add_argument("--allow-principal", action="append", default=None, metavar="PRINCIPAL",
                       help="User:name or User:* (repeatable)")
        p.add_argument("--deny-principal", action="append", default=None, metavar="PRINCIPAL",
                       help="User:name or User:* (repeatable)")
        p.add_argument("--host", action="append", default=None,
                       help="the client IP address the ACL applies to (repeatable; default *)")
        p.add_argument("--operation", action="append", default=None, choices=OPERATIONS,
                       help="repeatable; add: default all")
    listing.add_argument("--principal", help="only the ACLs of this principal")
    acls.set_defaults(func=run)


def _resource(args: argparse.Namespace) -> tuple[ResourceType, str | None]:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_NAME
    return ResourceType.ANY, None


def _entries(args: argparse.Namespace, adding: bool) -> list[tuple[str, AclPermissionType]]:
    found = [(p, AclPermissionType.ALLOW) for p in args.allow_principal or ()] + \
        [(p, AclPermissionType.DENY) for p in args.deny_principal or ()]
    for principal, _ in found:
        kind, sep, name = principal.partition(":")
        if not (sep and kind and name):
            raise StrandlineError(f"principal {principal!r} is not <type>:<name>, e.g. User:alice")
    if adding and not found:
        raise StrandlineError("name at least one --allow-principal or --deny-principal")
    return found


def _operation(name: str) -> AclOperation:
    return AclOperation[name.upper().replace("-", "_")]


def _checked(code: int, message: str | None, what: str) -> None:
    error = ErrorCode(int(code))
    if error is ErrorCode.security_disabled:
        raise StrandlineError("the brokers have no authorizer: set authorizer.class.name="
                              "kafka.security.authorizer.AclAuthorizer")
    if error is not ErrorCode.none:
        raise refusal(error, what, message)


def _show(resources: list[DescribeAclsResource]) -> None:
    for r in resources:
        print(f"Current ACLs for resource `ResourcePattern(resourceType={ResourceType(r.resource_type).name}, "
              f"name={r.resource_name}, patternType={PatternType(r.pattern_type).name})`:")
        for a in r.acls:
            print(f" \t(principal={a.principal}, host={a.host}, operation={AclOperation(a.operation).name}, "
                  f"permissionType={AclPermissionType(a.permission_type).name})")
        print()


def run(args: argparse.Namespace) -> int:
    resource_type, name = _resource(args)
    pattern_type = PatternType[(args.resource_pattern_type or ("literal" if name is not None else "any")).upper()]
    with KafkaConnection(args.bootstrap_server) as conn:
        if args.action == "list":
            resp = conn.request(DESCRIBE_ACLS, 3, {
                "resource_type_filter": int(resource_type), "resource_name_filter": name,
                "pattern_type_filter": int(pattern_type), "principal_filter": args.principal, "host_filter": None,
                "operation": int(AclOperation.ANY), "permission_type": int(AclPermissionType.ANY)})
            _checked(resp.error_code, resp.error_message, "listing ACLs")
            _show(list(resp.resources))
            return 0
        hosts = args.host or ["*"]
        if args.action == "add":
            ops = [_operation(o) for o in args.operation or ()] or [AclOperation.ALL]
            creations = [{"resource_type": int(resource_type), "resource_name": name,
                          "resource_pattern_type": int(pattern_type), "principal": principal, "host": host,
                          "operation": int(op), "permission_type": int(permission)}
                         for principal, permission in _entries(args, True) for host in hosts for op in ops]
            resp = conn.request(CREATE_ACLS, 3, {"creations": creations})
            for result in resp.results:
                _checked(result.error_code, result.error_message, "adding ACLs")
            print(f"Added {len(creations)} ACL(s) for {resource_type.name} {name} ({pattern_type.name})")
            return 0
        entries: list[tuple[str | None, AclPermissionType]] = list(_entries(args, False)) or [
            (None, AclPermissionType.ANY)]
        ops = [_operation(o) for o in args.operation or ()] or [AclOperation.ANY]
        filters = [{"resource_type_filter": int(resource_type), "resource_name_filter": name,
                    "pattern_type_filter": int(pattern_type), "principal_filter": principal,
                    "host_filter": None if not args.host else host, "operation": int(op),
                    "permission_type": int(permission)}
                   for principal, permission in entries for host in hosts for op in ops]
        resp = conn.request(DELETE_ACLS, 3, {"filters": filters})
        removed = 0
        for result in resp.filter_results:
            _checked(result.error_code, result.error_message, "removing ACLs")
            removed += len(result.matching_acls)
        print(f"Removed {removed} ACL(s)")
        return 0
