"""The broker's authorizer: Kafka's ``AclAuthorizer`` on ZooKeeper, and the ACL APIs.

``authorizer.class.name=kafka.security.authorizer.AclAuthorizer`` (or the older
``kafka.security.auth.SimpleAclAuthorizer``) turns it on; without it every request is allowed and
the ACL APIs answer SECURITY_DISABLED, as Kafka does.

ACLs live where Kafka keeps them: ``/kafka-acl/<Type>/<name>`` for literal patterns and
``/kafka-acl-extended/prefixed/<Type>/<name>`` for prefixes, each change followed by a sequential
notification under ``/kafka-acl-changes`` or ``/kafka-acl-extended-changes``. The shell reads every
ACL before the broker serves a client (:meth:`AclAuthorizer.load`) and then feeds the notification
paths' children to :meth:`AclAuthorizer.on_acl_changes`, which re-reads each changed resource.

Each connection has a session (:class:`Session`): the principal it authenticated as (``User:ANONYMOUS``
on a PLAINTEXT listener or SSL without a client certificate, ``User:<name>`` after SASL,
``User:<distinguished name>`` for a client certificate), the client's IP address and the listener it
came in on; ``super.users`` and host-based rules apply to them as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.config import ACL_AUTHORIZERS
from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.core.wire import response
from strandline.coordination.store import Create, Delete, GetData, OpResult, SetData, ZkError
from strandline.coordination.acl_znodes import AclChangeNotificationZNode, AclZNode
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security.acl import (
    ANONYMOUS, AccessControlEntry, AclBinding, AclBindingFilter, AclCache, AclError, AclOperation, PatternType,
    ResourcePattern, ResourceType, SUPPORTED_OPERATIONS, binding_from_request, parse_super_users)

NO_AUTHORIZER = "No Authorizer is configured on the broker"
#: Kafka's ``changeExpirationMs`` for ACL change notifications.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
_WRITE_ATTEMPTS = 10
RETRY_MS = 1000
#: The entries of one resource pattern.
ACEs = frozenset[AccessControlEntry]


def _binding_fields(binding: AclBinding) -> dict[str, Any]:
    p, e = binding.pattern, binding.entry
    return {"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type),
            "principal": e.principal, "host": e.host, "operation": int(e.operation),
            "permission_type": int(e.permission)}


@dataclass(frozen=True)
class Session:
    """Who a connection is: its principal (``User:name``), its client's address, its listener."""

    principal: str = ANONYMOUS
    host: str = ""
    listener: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"         # the listener's security protocol

    @property
    def user(self) -> str:
        """The principal's name (the quotas' user)."""
        return self.principal.partition(":")[2]


_NO_SESSION = Session()


class AclAuthorizer:
    """Every ACL of the cluster (kept in step with ZooKeeper), who may do what, and the ACL APIs."""

    def __init__(self, config: Any, outbox: Outbox) -> None:
        self.enabled = config["authorizer.class.name"] in ACL_AUTHORIZERS
        self.outbox = outbox
        self.cache = AclCache(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])
        self._sessions: dict[int, Session] = {}
        self._last_seen: dict[str, int] = {AclChangeNotificationZNode.LITERAL: -1,
                                           AclChangeNotificationZNode.EXTENDED: -1}

    # -- who is asking

    def connection_opened(self, conn_id: int, host: str, listener: str = "PLAINTEXT",
                          principal: str = ANONYMOUS, protocol: str = "PLAINTEXT") -> None:
        self._sessions[conn_id] = Session(principal, host, listener, protocol)

    def connection_closed(self, conn_id: int) -> None:
        self._sessions.pop(conn_id, None)

    def session(self, conn_id: int) -> Session:
        return self._sessions.get(conn_id, _NO_SESSION)

    def listener(self, conn_id: int) -> str:
        """The name of the listener connection ``conn_id`` came in on."""
        return self._sessions.get(conn_id, _NO_SESSION).listener

    def allows(self, conn_id: int, operation: AclOperation, resource_type: ResourceType, name: str | None) -> bool:
        """May the client of ``conn_id`` do ``operation`` on the resource? (Always, without an
        authorizer; never on a resource without a name, with one.)"""
        if not self.enabled:
            return True
        if name is None:
            return False
        session = self._sessions.get(conn_id, _NO_SESSION)
        return self.cache.authorize(session.principal, session.host, operation, resource_type, name)

    def allows_topic(self, conn_id: int, operation: AclOperation, name: str | None) -> bool:
        """May the client do ``operation`` on the topic ``name``? Never on a topic without a name
        (one named only by an id this broker does not know)."""
        return name is not None and self.allows(conn_id, operation, ResourceType.TOPIC, name)

    def allows_cluster(self, conn_id: int, operation: AclOperation) -> bool:
        return self.allows(conn_id, operation, ResourceType.CLUSTER, "kafka-cluster")

    def authorized_operations(self, conn_id: int, resource_type: ResourceType, name: str) -> int:
        """KIP-430's bit field of the operations allowed on the resource."""
        if not self.enabled:
            return _all_supported(resource_type)
        session = self._sessions.get(conn_id, _NO_SESSION)
        return self.cache.authorized_operations(session.principal, session.host, resource_type, name)

    # -- keeping in step with ZooKeeper

    def load(self, acls: dict[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        """Every ACL, read by the shell before the broker serves clients."""
        for pattern, entries in acls.items():
            self.cache.set(pattern, entries)

    def on_acl_changes(self, root: str, children: list[str], now_ms: int) -> list[Effect]:
        """The children of ``/kafka-acl-changes`` or ``/kafka-acl-extended-changes`` (the shell's
        watch): re-read each resource a new notification names."""
        if not self.enabled:
            return []
        new = sorted((seq, child) for child in children
                     if (seq := AclChangeNotificationZNode.sequence(child)) is not None and seq > self._last_seen[root])
        if not new:
            return []
        self._last_seen[root] = new[-1][0]

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            effects: list[Effect] = []
            patterns: dict[ResourcePattern, None] = {}
            expired = []
            unread = False
            for (seq, child), result in zip(new, results):
                if result.error is ZkError.NO_NODE:
                    continue
                if result.error is not ZkError.NONE:
                    self._last_seen[root] = min(self._last_seen[root], seq - 1)
                    unread = True
                    continue
                try:
                    patterns[AclChangeNotificationZNode.decode(root, result.data, child)] = None
                except ValueError as exc:
                    effects.append(LogLine("warning", f"Ignoring ACL change notification {child}: {exc}"))
                if result.ctime_ms and when_ms - result.ctime_ms > CHANGE_EXPIRATION_MS:
                    expired.append(Delete(f"{root}/{child}"))
            if expired:
                effects.append(self.outbox.zk(expired, lambda results, t: []))
            if patterns:
                effects.append(self._reload(list(patterns)))
            if unread:              # ZooKeeper failed us: read them again shortly, as Kafka retries
                effects.extend(self.outbox.after(when_ms + RETRY_MS,
                                                 lambda t: self.on_acl_changes(root, children, t)))
            return effects

        return [self.outbox.zk([GetData(f"{root}/{child}") for _, child in new], on_read)]

    def _reload(self, patterns: list[ResourcePattern]) -> Any:
        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            effects: list[Effect] = []
            unread = []
            for pattern, result in zip(patterns, results):
                if result.error is ZkError.NO_NODE:
                    self.cache.set(pattern, ())
                elif result.error is ZkError.NONE:
                    try:
                        self.cache.set(pattern, AclZNode.decode(result.data, AclZNode.path(pattern)))
                    except ValueError as exc:
                        effects.append(LogLine("warning", f"Ignoring the ACLs of {AclZNode.path(pattern)}: {exc}"))
                else:
                    unread.append(pattern)
            if unread:              # read again shortly, as Kafka retries until ZooKeeper answers
                effects.append(LogLine("warning", f"Could not read the ACLs of {len(unread)} resource(s) from ZooKeeper "
                                              f"({results[0].error.name}); trying again"))
                effects.extend(self.outbox.after(when_ms + RETRY_MS, lambda t: [self._reload(unread)]))
            return effects

        return self.outbox.zk([GetData(AclZNode.path(p)) for p in patterns], on_read)

    def _update(self, pattern: ResourcePattern, change: Callable[[ACEs], ACEs],
                done: Callable[[ErrorCode, str | None, ACEs, int], list[Effect]], now_ms: int,
                attempts: int = _WRITE_ATTEMPTS) -> list[Effect]:
        """Kafka's ``updateResourceAcls``: read the resource's ACLs, write ``change(current)`` back
        if it differs (conditionally on the version read, again on a race), with a change
        notification in the same transaction. ``done(error, message, current, now_ms)``."""
        path = AclZNode.path(pattern)

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            [read] = results
            if read.error not in (ZkError.NONE, ZkError.NO_NODE):
                return done(ErrorCode.unknown_server_error, f"ZooKeeper error {read.error.name}", frozenset(), when_ms)
            try:
                current = AclZNode.decode(read.data, path) if read.error is ZkError.NONE else frozenset()
            except ValueError:
                current = frozenset()          # unreadable: replaced by what this request leaves
            wanted = frozenset(change(current))
            if wanted == current:
                self.cache.set(pattern, current)
                return done(ErrorCode.none, None, current, when_ms)
            if not wanted:
                write: Any = Delete(path, read.version)
            elif read.error is ZkError.NONE:
                write = SetData(path, AclZNode.encode(wanted), read.version)
            else:
                write = Create(path, AclZNode.encode(wanted))
            notify = Create(AclChangeNotificationZNode.create_path(pattern.pattern_type),
                            AclChangeNotificationZNode.encode(pattern), sequential=True)

            def on_written(written: list[OpResult], at_ms: int) -> list[Effect]:
                error = written[0].error
                if error is ZkError.NONE:
                    self.cache.set(pattern, wanted)
                    return done(ErrorCode.none, None, current, at_ms)
                if error in (ZkError.BAD_VERSION, ZkError.NODE_EXISTS, ZkError.NO_NODE) and attempts > 1:
                    return self._update(pattern, change, done, at_ms, attempts - 1)
                return done(ErrorCode.unknown_server_error, f"ZooKeeper error {error.name}", current, at_ms)

            return [self.outbox.zk([write, notify], on_written, transaction=True)]

        return [self.outbox.zk([GetData(path)], on_read)]

    # -- the ACL APIs

    def handlers(self) -> dict[int, Callable[[int, RequestHeader, Any, int], list[Effect]]]:
        return {ApiKey.DESCRIBE_ACLS: self._describe_acls, ApiKey.CREATE_ACLS: self._create_acls,
                ApiKey.DELETE_ACLS: self._delete_acls}

    def _pattern_type_of(self, header: RequestHeader) -> int | None:
        """Version 0 has no pattern types: every pattern is literal."""
        return int(PatternType.LITERAL) if header.api_version == 0 else None

    def _describe_acls(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def answer(code: ErrorCode, message: str | None, resources: list[dict[str, Any]]) -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "error_code": code, "error_message": message,
                                               "resources": resources})]

        if not self.enabled:
            return answer(ErrorCode.security_disabled, NO_AUTHORIZER, [])
        if not self.allows_cluster(conn_id, AclOperation.DESCRIBE):
            return answer(ErrorCode.cluster_authorization_failed, None, [])
        try:
            flt = AclBindingFilter.from_request(request, self._pattern_type_of(header))
        except AclError as exc:
            return answer(ErrorCode.invalid_request, str(exc), [])
        grouped: dict[ResourcePattern, list[dict[str, Any]]] = {}
        for binding in self.cache.bindings(flt):
            e = binding.entry
            grouped.setdefault(binding.pattern, []).append(
                {"principal": e.principal, "host": e.host, "operation": int(e.operation),
                 "permission_type": int(e.permission)})
        return answer(ErrorCode.none, None, [
            {"resource_type": int(p.resource_type), "resource_name": p.name, "pattern_type": int(p.pattern_type),
             "acls": acls} for p, acls in grouped.items()])

    def _create_acls(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        results: list[dict[str, Any] | None] = [None] * len(request.creations)

        def respond() -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "results": results})]

        if not self.enabled or not self.allows_cluster(conn_id, AclOperation.ALTER):
            code = ErrorCode.security_disabled if not self.enabled else ErrorCode.cluster_authorization_failed
            results[:] = [{"error_code": code, "error_message": NO_AUTHORIZER if not self.enabled else None}
                          for _ in request.creations]
            return respond()
        wanted: dict[ResourcePattern, list[tuple[int, AccessControlEntry]]] = {}
        for i, c in enumerate(request.creations):
            try:
                binding = binding_from_request(c.resource_type, c.resource_name,
                                               getattr(c, "resource_pattern_type", PatternType.LITERAL),
                                               c.principal, c.host, c.operation, c.permission_type)
            except AclError as exc:
                results[i] = {"error_code": ErrorCode.invalid_request, "error_message": str(exc)}
                continue
            wanted.setdefault(binding.pattern, []).append((i, binding.entry))
        if not wanted:
            return respond()
        pending = set(wanted)
        effects: list[Effect] = []

        def finisher(pattern: ResourcePattern) -> Callable[[ErrorCode, str | None, ACEs, int], list[Effect]]:
            def done(code: ErrorCode, message: str | None, _: ACEs, when_ms: int) -> list[Effect]:
                for i, _entry in wanted[pattern]:
                    results[i] = {"error_code": code, "error_message": message}
                pending.discard(pattern)
                out: list[Effect] = []
                if code is ErrorCode.none:
                    out.append(LogLine("info", f"Added ACLs for {AclZNode.path(pattern)}: " + ", ".join(
                        f"{e.permission.name} {e.principal} {e.operation.name} from {e.host}"
                        for _, e in wanted[pattern])))
                return out + (respond() if not pending else [])
            return done

        for pattern, entries in wanted.items():
            added = frozenset(e for _, e in entries)
            effects.extend(self._update(pattern, _adding(added), finisher(pattern),
                                        now_ms))
        return effects

    def _delete_acls(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        results: list[dict[str, Any]] = [{"error_code": ErrorCode.none, "error_message": None, "matching_acls": []}
                               for _ in request.filters]

        def respond() -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "filter_results": results})]

        if not self.enabled or not self.allows_cluster(conn_id, AclOperation.ALTER):
            code = ErrorCode.security_disabled if not self.enabled else ErrorCode.cluster_authorization_failed
            for r in results:
                r["error_code"], r["error_message"] = code, (NO_AUTHORIZER if not self.enabled else None)
            return respond()
        filters: list[tuple[int, AclBindingFilter]] = []
        for i, f in enumerate(request.filters):
            try:
                filters.append((i, AclBindingFilter.from_request(f, self._pattern_type_of(header))))
            except AclError as exc:
                results[i]["error_code"], results[i]["error_message"] = ErrorCode.invalid_request, str(exc)
        # the patterns any filter may touch: those known, and the one a filter names exactly (which
        # may have been written through another broker a moment ago), as Kafka looks them up
        candidates = dict.fromkeys(self.cache.acls)
        candidates.update(dict.fromkeys(p for _, f in filters for p in f.exact_patterns()))
        patterns = {p: [(i, f) for i, f in filters if f.matches_pattern(p)] for p in candidates}
        patterns = {p: fs for p, fs in patterns.items() if fs}
        if not patterns:
            return respond()
        pending = set(patterns)
        effects: list[Effect] = []

        def remover(pattern: ResourcePattern) -> Callable[[ACEs], ACEs]:
            def change(current: ACEs) -> ACEs:
                return frozenset(e for e in current if not any(f.matches_entry(e) for _, f in patterns[pattern]))
            return change

        def finisher(pattern: ResourcePattern) -> Callable[[ErrorCode, str | None, ACEs, int], list[Effect]]:
            def done(code: ErrorCode, message: str | None, before: ACEs, when_ms: int) -> list[Effect]:
                for entry in sorted(before):
                    # each deleted ACL is reported under the first filter that matched it, as Kafka
                    owner = next((i for i, f in patterns[pattern] if f.matches_entry(entry)), None)
                    if owner is None:
                        continue
                    results[owner]["matching_acls"].append(
                        {"error_code": code, "error_message": message, **_binding_fields(AclBinding(pattern, entry))})
                pending.discard(pattern)
                return respond() if not pending else []
            return done

        for pattern in patterns:
            effects.extend(self._update(pattern, remover(pattern), finisher(pattern), now_ms))
        return effects


def _all_supported(resource_type: ResourceType) -> int:
    bits = 0
    for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
        bits |= 1 << int(op)
    return bits


def _adding(added: ACEs) -> Callable[[ACEs], ACEs]:
    return lambda current: current | added
