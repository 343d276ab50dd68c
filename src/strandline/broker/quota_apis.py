"""DescribeClientQuotas, AlterClientQuotas, DescribeUserScramCredentials and
AlterUserScramCredentials (Kafka 2.8's ZkAdminManager), and the quotas this broker enforces (:mod:`strandline.broker.quotas`).

Any broker serves them, from ZooKeeper: a describe reads every user and client-id entity
(``/config/users``, ``/config/clients`` and each user's ``clients``) and filters as Kafka does; an
alter reads the entity, applies the operations, and writes it with its change notification in one
transaction (compare-and-set on the entity's version, retried on a race; a (user, client id)
entity's missing parents are created with an empty config). Every broker applies a change when
``/config/changes`` names it, and reads every quota when it loads the cluster.

DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster, AlterClientQuotas ALTER_CONFIGS,
DescribeUserScramCredentials DESCRIBE (CLUSTER_AUTHORIZATION_FAILED otherwise).
AlterUserScramCredentials is served by the controller alone (NOT_CONTROLLER first, then ALTER on
the cluster) and writes each user's credentials (:mod:`strandline.security.scram`) into the same
znode as its quotas, with a change notification, as ZkAdminManager.alterUserScramCredentials; no
listener authenticates with them yet (Strandline has no SASL listener).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.security.authorizer import AclAuthorizer
from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.broker.quotas import (CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, ClientQuotaManager, Entity,
                                      QuotaError, QuotaTree, apply_ops, describe, entity_of_path, parse_entity,
                                      parse_filter, sanitize, scram_infos)
from strandline.core.wire import Handler, response
from strandline.coordination import znodes
from strandline.coordination.store import Create, GetChildren, GetData, Op, OpResult, SetData, TransactionOp, ZkError
from strandline.protocol.api import ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security import acl, scram

_NOTIFICATION = znodes.ConfigEntityChangeNotificationSequenceZNode
_ENTITY = znodes.ConfigEntityZNode
RETRY_MS = 1000
TreeDone = Callable[["QuotaTree | None", int], list[Effect]]


class _ZkFailed(Exception):
    pass


def _path(entity_type: str, name: str) -> str:
    return _ENTITY.path(entity_type, name)


def _config(result: Any, where: str) -> dict[str, str]:
    if result.error is ZkError.NO_NODE:
        return {}
    if result.error is not ZkError.NONE:
        raise _ZkFailed(f"ZooKeeper error {result.error.name} reading {where}")
    try:
        return _ENTITY.decode(result.data, "config", where)
    except ValueError:
        return {}               # not a config entity: nothing in it counts


class QuotaApis:
    def __init__(self, outbox: Outbox, authorizer: AclAuthorizer, is_controller: Callable[[], bool]) -> None:
        self.outbox = outbox
        self.authorizer = authorizer
        self.is_controller = is_controller
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE)

    def user(self, conn_id: int) -> str:
        """The user the connection's quotas are kept under: its principal's name."""
        return self.authorizer.session(conn_id).user

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.DESCRIBE_CLIENT_QUOTAS: self._describe_client_quotas,
                ApiKey.ALTER_CLIENT_QUOTAS: self._alter_client_quotas,
                ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self._describe_user_scram_credentials,
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._alter_user_scram_credentials}

    # -- reading every user and client-id entity

    def read_tree(self, done: TreeDone) -> list[Effect]:
        """Read every stored user, client-id and (user, client id) config; ``done(None, t)`` when
        ZooKeeper failed to answer."""
        roots = [GetChildren(znodes.ConfigEntityTypeZNode.path("users")),
                 GetChildren(znodes.ConfigEntityTypeZNode.path("clients"))]

        def on_roots(results: list[OpResult], when_ms: int) -> list[Effect]:
            if any(r.error not in (ZkError.NONE, ZkError.NO_NODE) for r in results):
                return done(None, when_ms)
            users, clients = (list(r.children) if r.error is ZkError.NONE else [] for r in results)
            ops: list[Op] = [GetData(_path("users", u)) for u in users]
            ops += [GetChildren(f"{_path('users', u)}/clients") for u in users]
            ops += [GetData(_path("clients", c)) for c in clients]
            if not ops:
                return done(QuotaTree(), when_ms)

            def on_entities(reads: list[OpResult], at_ms: int) -> list[Effect]:
                tree = QuotaTree()
                try:
                    n = len(users)
                    for u, read in zip(users, reads[:n]):
                        tree.users[u] = _config(read, f"users/{u}")
                    for c, read in zip(clients, reads[2 * n:]):
                        tree.clients[c] = _config(read, f"clients/{c}")
                    pairs = []
                    for u, listing in zip(users, reads[n:2 * n]):
                        if listing.error not in (ZkError.NONE, ZkError.NO_NODE):
                            raise _ZkFailed(listing.error.name)
                        pairs += [(u, c) for c in listing.children]
                except _ZkFailed:
                    return done(None, at_ms)
                if not pairs:
                    return done(tree, at_ms)

                def on_pairs(pair_reads: list[OpResult], end_ms: int) -> list[Effect]:
                    try:
                        for (u, c), read in zip(pairs, pair_reads):
                            if read.error is not ZkError.NO_NODE:
                                tree.pairs[(u, c)] = _config(read, f"users/{u}/clients/{c}")
                    except _ZkFailed:
                        return done(None, end_ms)
                    return done(tree, end_ms)

                return [self.outbox.zk([GetData(_path("users", f"{u}/clients/{c}")) for u, c in pairs], on_pairs)]

            return [self.outbox.zk(ops, on_entities)]

        return [self.outbox.zk(roots, on_roots)]

    # -- enforcement: what this broker applies

    def load(self, now_ms: int) -> list[Effect]:
        """Read every quota (the broker loads the cluster), as Kafka's config handlers do at start."""
        def done(tree: QuotaTree | None, when_ms: int) -> list[Effect]:
            if tree is None:
                return [LogLine("warning", "Could not read the client quotas from ZooKeeper; trying again")] + \
                    self.outbox.after(when_ms + RETRY_MS, self.load)
            for manager in (self.produce, self.fetch):
                manager.overrides.clear()
            for u, props in tree.users.items():
                self._apply(Entity(u, None), props)
            for c, props in tree.clients.items():
                self._apply(Entity(None, c), props)
            for (u, c), props in tree.pairs.items():
                self._apply(Entity(u, c), props)
            return []

        def guarded(tree: QuotaTree | None, when_ms: int) -> list[Effect]:
            try:
                return done(tree, when_ms)
            except QuotaError:
                return [LogLine("warning", "Ignoring unreadable client quotas in ZooKeeper")]

        try:
            return self.read_tree(guarded)
        except QuotaError:
            return [LogLine("warning", "Ignoring unreadable client quotas in ZooKeeper")]

    def _apply(self, entity: Entity, props: dict[str, str]) -> None:
        self.produce.update(entity, props)
        self.fetch.update(entity, props)

    def reload(self, entity_type: str, name: str, now_ms: int) -> list[Effect]:
        """A change notification named ``entity_type/name``: read the entity and apply its quotas."""
        entity = entity_of_path(entity_type, name)
        if entity is None:
            return []

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            [read] = results
            try:
                props = _config(read, f"{entity_type}/{name}")
            except _ZkFailed:
                return self.outbox.after(when_ms + RETRY_MS, lambda t: self.reload(entity_type, name, t))
            self._apply(entity, props)
            shown = ", ".join(f"{k}={v}" for k, v in sorted(props.items())) or "(none)"
            return [LogLine("info", f"Client quotas of {entity_type}/{name} now {shown}")]

        return [self.outbox.zk([GetData(_path(entity_type, name))], on_read)]

    # -- DescribeClientQuotas

    def _describe_client_quotas(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        def answer(code: ErrorCode, message: str | None, entries: list[dict[str, Any]] | None) -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "error_code": code, "error_message": message,
                                               "entries": entries})]

        if not self.authorizer.allows_cluster(conn_id, acl.AclOperation.DESCRIBE_CONFIGS):
            return answer(ErrorCode.cluster_authorization_failed, None, None)
        try:
            user, client = parse_filter([(c.entity_type, c.match_type, c.match) for c in request.components])
        except QuotaError as exc:
            return answer(exc.code, exc.message, None)
        strict = bool(request.strict)

        def done(tree: QuotaTree | None, when_ms: int) -> list[Effect]:
            if tree is None:
                return answer(ErrorCode.unknown_server_error, None, None)
            try:
                found = describe(user, client, strict, tree)
            except QuotaError as exc:
                return answer(exc.code, exc.message, None)
            return answer(ErrorCode.none, None, [
                {"entity": [{"entity_type": t, "entity_name": n} for t, n in parts],
                 "values": [{"key": k, "value": v} for k, v in values.items()]} for parts, values in found])

        try:
            return self.read_tree(done)
        except QuotaError as exc:
            return answer(exc.code, exc.message, None)

    # -- AlterClientQuotas

    def _alter_client_quotas(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        entries = list(request.entries)
        shown = [list(dict((e.entity_type, e.entity_name) for e in entry.entity).items()) for entry in entries]
        outcomes: list[tuple[ErrorCode, str | None] | None] = [None] * len(entries)

        def respond() -> list[Effect]:
            answered: list[dict[str, Any]] = []
            for parts, outcome in zip(shown, outcomes):
                assert outcome is not None, "answered before every entry had its outcome"
                answered.append({"error_code": outcome[0], "error_message": outcome[1],
                                 "entity": [{"entity_type": t, "entity_name": n} for t, n in parts]})
            return [response(conn_id, header, {"throttle_time": 0, "entries": answered})]

        if not self.authorizer.allows_cluster(conn_id, acl.AclOperation.ALTER_CONFIGS):
            outcomes = [(ErrorCode.cluster_authorization_failed, None)] * len(entries)
            return respond()
        validate_only = bool(request.validate_only)
        left = [0]
        starts: list[Callable[[], list[Effect]]] = []

        def finisher(i: int) -> Callable[[ErrorCode, "str | None", int], list[Effect]]:
            def done(code: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
                outcomes[i] = (code, message)
                left[0] -= 1
                return respond() if left[0] == 0 else []
            return done

        for i, entry in enumerate(entries):
            try:
                entity = parse_entity(shown[i])
            except QuotaError as exc:
                outcomes[i] = (exc.code, exc.message)
                continue
            ops = [(op.key, None if op.remove else float(op.value)) for op in entry.ops]
            starts.append(functools.partial(self._change, entity, ops, validate_only, finisher(i)))
        if not starts:
            return respond()
        left[0] = len(starts)
        effects: list[Effect] = []
        for start in starts:
            effects.extend(start())
        return effects

    def _change(self, entity: Entity, ops: list[tuple[str, float | None]], validate_only: bool,
                done: Callable[[ErrorCode, "str | None", int], list[Effect]], attempts: int = 5) -> list[Effect]:
        entity_type, name = entity.config_type, entity.config_name
        path = _path(entity_type, name)
        parents = [] if entity.user is None or entity.client is None else \
            [_path("users", entity.user), f"{_path('users', entity.user)}/clients"]

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            read, parent_reads = results[0], results[1:]
            if any(r.error not in (ZkError.NONE, ZkError.NO_NODE) for r in results):
                return done(ErrorCode.unknown_server_error, None, when_ms)
            try:
                current = _ENTITY.decode(read.data, entity_type, name) if read.error is ZkError.NONE else {}
            except ValueError:
                current = {}                  # unreadable: replaced by what this request sets
            try:
                props = apply_ops(current, ops, entity)
            except QuotaError as exc:
                return done(exc.code, exc.message, when_ms)
            if validate_only:
                return done(ErrorCode.none, None, when_ms)
            data = _ENTITY.encode(props)
            writes: list[TransactionOp] = [Create(p, _ENTITY.encode({})) for p, r in zip(parents, parent_reads)
                            if r.error is ZkError.NO_NODE]
            writes.append(SetData(path, data, read.version) if read.error is ZkError.NONE else Create(path, data))
            writes.append(Create(_NOTIFICATION.create_path(), _NOTIFICATION.encode(entity_type, name), sequential=True))

            def on_written(written: list[OpResult], at_ms: int) -> list[Effect]:
                error = written[0].error
                if error is ZkError.NONE:
                    shown = ", ".join(f"{k}={v}" for k, v in sorted(props.items())) or "(none)"
                    return [LogLine("info", f"Updated client quotas of {entity_type}/{name}: {shown}")] + \
                        done(ErrorCode.none, None, at_ms)
                if error in (ZkError.BAD_VERSION, ZkError.NODE_EXISTS, ZkError.NO_NODE) and attempts > 1:
                    return self._change(entity, ops, validate_only, done, attempts - 1)
                return done(ErrorCode.unknown_server_error, None, at_ms)

            return [self.outbox.zk(writes, on_written, transaction=True)]

        return [self.outbox.zk([GetData(path)] + [GetData(p) for p in parents], on_read)]

    # -- DescribeUserScramCredentials

    def _describe_user_scram_credentials(self, conn_id: int, header: RequestHeader, request: Any,
                                         now_ms: int) -> list[Effect]:
        def answer(code: ErrorCode, message: str | None, results: list[dict[str, Any]]) -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "error_code": code, "error_message": message,
                                               "results": results})]

        if not self.authorizer.allows_cluster(conn_id, acl.AclOperation.DESCRIBE):
            return answer(ErrorCode.cluster_authorization_failed, None, [])
        users = [u.name for u in request.users] if request.users else []
        if not users:                 # every user with a credential, by its stored name, sorted
            def on_all(tree: QuotaTree | None, when_ms: int) -> list[Effect]:
                if tree is None:
                    return answer(ErrorCode.unknown_server_error, None, [])
                results = []
                for user, props in sorted(tree.users.items()):
                    result = _scram_result(user, props, explicit=False)
                    if result is not None:
                        results.append(result)
                return answer(ErrorCode.none, None, results)

            return self.read_tree(on_all)
        counts: dict[str, int] = {}
        for user in users:
            counts[user] = counts.get(user, 0) + 1
        results: dict[str, dict[str, Any]] = {}
        for user in counts:
            if user == "":
                results[user] = _scram_error(user, ErrorCode.resource_not_found, "Username must not be empty")
            elif counts[user] > 1:
                results[user] = _scram_error(user, ErrorCode.duplicate_resource, "Cannot describe SCRAM credentials "
                                             f"for the same user twice in a single request: {user}")
            elif sanitize(user) in (".", ".."):       # no znode can have that name (Kafka: ZooKeeper refuses it)
                results[user] = _scram_error(user, ErrorCode.unknown_server_error, None)
        asked = [u for u in counts if u not in results]

        def on_read(reads: list[OpResult], when_ms: int) -> list[Effect]:
            for user, read in zip(asked, reads):
                try:
                    props = _config(read, f"users/{sanitize(user)}")
                    found = _scram_result(user, props, explicit=True)       # never None when asked by name
                    if found is not None:
                        results[user] = found
                except (_ZkFailed, ValueError, KeyError):
                    results[user] = _scram_error(user, ErrorCode.unknown_server_error, None)
            return answer(ErrorCode.none, None, [results[u] for u in counts])

        if not asked:
            return on_read([], now_ms)
        return [self.outbox.zk([GetData(_path("users", sanitize(u))) for u in asked], on_read)]


    # -- AlterUserScramCredentials

    def _alter_user_scram_credentials(self, conn_id: int, header: RequestHeader, request: Any,
                                      now_ms: int) -> list[Effect]:
        """As Kafka 2.8's ``KafkaApis.handleAlterUserScramCredentialsRequest`` and
        ``ZkAdminManager.alterUserScramCredentials``: one result per user; a user with an invalid
        alteration, or one altering a mechanism twice, changes nothing; the others are written one
        znode each (compare-and-set, retried on a race), deletions before upsertions."""
        deletions = [(d.name, int(d.mechanism)) for d in request.deletions]
        upsertions = [(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
                      for u in request.upsertions]
        results: dict[str, tuple[ErrorCode, str | None]] = {}

        def respond() -> list[Effect]:
            return [response(conn_id, header, {"throttle_time": 0, "results": [
                {"user": user, "error_code": code, "error_message": message}
                for user, (code, message) in results.items()]})]

        def everyone(code: ErrorCode) -> list[Effect]:    # the request's getErrorResponse: each user, sorted
            for user in sorted({d[0] for d in deletions} | {u[0] for u in upsertions}):
                results[user] = (code, None)
            return respond()

        if not self.is_controller():
            return everyone(ErrorCode.not_controller)
        if not self.authorizer.allows_cluster(conn_id, acl.AclOperation.ALTER):
            return everyone(ErrorCode.cluster_authorization_failed)
        results.update(_illegal_scram_alterations(deletions, upsertions))
        pairs = [(d[0], d[1]) for d in deletions if d[0] not in results] + \
            [(u[0], u[1]) for u in upsertions if u[0] not in results]
        for user, mechanism in pairs:
            if pairs.count((user, mechanism)) > 1 and user not in results:
                results[user] = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same "
                                                                "request")
        users = list(dict.fromkeys(user for user, _ in pairs if user not in results))
        if not users:
            return respond()
        left = [len(users)]
        outcomes: dict[str, tuple[ErrorCode, str | None]] = {}

        def finisher(user: str) -> Callable[[ErrorCode, "str | None", int], list[Effect]]:
            def done(code: ErrorCode, message: str | None, when_ms: int) -> list[Effect]:
                outcomes[user] = (code, message)
                left[0] -= 1
                if left[0]:
                    return []
                # Kafka's order: the missing deletions, then the failures, then the successes
                for wanted in (ErrorCode.resource_not_found, None, ErrorCode.none):
                    for u in users:
                        c = outcomes[u][0]
                        if c is wanted or (wanted is None and c not in (ErrorCode.resource_not_found, ErrorCode.none)):
                            results[u] = outcomes[u]
                return respond()
            return done

        effects: list[Effect] = []
        for user in users:
            effects.extend(self._alter_scram(user, [m for u, m in deletions if u == user],
                                             [u[1:] for u in upsertions if u[0] == user], finisher(user)))
        return effects

    def _alter_scram(self, user: str, deletions: list[int], upsertions: list[tuple[int, int, bytes, bytes]],
                     done: Callable[[ErrorCode, "str | None", int], list[Effect]], attempts: int = 5) -> list[Effect]:
        name = sanitize(user)
        path = _path("users", name)
        if name in (".", ".."):          # no znode can have that name (Kafka: ZooKeeper refuses it)
            return done(ErrorCode.unknown_server_error, None, 0)

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            [read] = results
            try:
                current = _config(read, f"users/{name}")
            except _ZkFailed:
                return done(ErrorCode.unknown_server_error, None, when_ms)
            props = dict(current)
            for mechanism in deletions:
                key = scram.MECHANISMS[mechanism][0]
                if key not in props:
                    return done(ErrorCode.resource_not_found, "Attempt to delete a user credential that does not "
                                                              "exist", when_ms)
                del props[key]
            for mechanism, iterations, salt, salted_password in upsertions:
                props[scram.MECHANISMS[mechanism][0]] = scram.credential(mechanism, salt, salted_password, iterations)
            data = _ENTITY.encode(props)
            writes: list[TransactionOp] = [SetData(path, data, read.version) if read.error is ZkError.NONE
                                           else Create(path, data),
                            Create(_NOTIFICATION.create_path(), _NOTIFICATION.encode("users", name), sequential=True)]

            def on_written(written: list[OpResult], at_ms: int) -> list[Effect]:
                error = written[0].error
                if error is ZkError.NONE:
                    changed = sorted({scram.MECHANISMS[m][0] for m in deletions} |
                                     {scram.MECHANISMS[u[0]][0] for u in upsertions})
                    return [LogLine("info", f"Updated SCRAM credentials of users/{name}: {', '.join(changed)}")] + \
                        done(ErrorCode.none, None, at_ms)
                if error in (ZkError.BAD_VERSION, ZkError.NODE_EXISTS, ZkError.NO_NODE) and attempts > 1:
                    return self._alter_scram(user, deletions, upsertions, done, attempts - 1)
                return done(ErrorCode.unknown_server_error, None, at_ms)

            return [self.outbox.zk(writes, on_written, transaction=True)]

        return [self.outbox.zk([GetData(path)], on_read)]


def _illegal_scram_alterations(deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
                               ) -> dict[str, tuple[ErrorCode, str]]:
    """ZkAdminManager's first check: an empty user name, an unknown mechanism, iterations out of
    bounds; a user's upsertion's message wins over its deletion's, as Kafka's map."""
    messages: dict[str, str] = {}
    for user, mechanism in deletions:
        if user == "":
            messages[user] = "Username must not be empty"
        elif mechanism not in scram.MECHANISMS:
            messages[user] = "Unknown SCRAM mechanism"
    for user, mechanism, iterations, _, _ in upsertions:
        if user == "":
            messages[user] = "Username must not be empty"
        elif mechanism not in scram.MECHANISMS:
            messages[user] = "Unknown SCRAM mechanism"
        elif iterations > scram.MAX_ITERATIONS:
            messages[user] = "Too many iterations"
        elif iterations < scram.MIN_ITERATIONS:
            messages[user] = "Too few iterations"
    return {user: (ErrorCode.unsupported_sasl_mechanism if message == "Unknown SCRAM mechanism"
                   else ErrorCode.unacceptable_credential, message) for user, message in messages.items()}


def _scram_error(user: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


def _scram_result(user: str, props: dict[str, str], explicit: bool) -> dict[str, Any] | None:
    """Kafka's addToResultsIfHasScramCredential: the user's credentials; for a user asked by name
    that has none, RESOURCE_NOT_FOUND."""
    try:
        infos = scram_infos(props)
    except (ValueError, KeyError):
        return _scram_error(user, ErrorCode.unknown_server_error, None)
    if infos is None:
        if not explicit:
            return None
        return _scram_error(user, ErrorCode.resource_not_found,
                            f"Attempt to describe a user credential that does not exist: {user}")
    return {"user": user, "error_code": ErrorCode.none, "error_message": None, "credential_infos": infos}


__all__ = ["QuotaApis", "DEFAULT"]
