"""The cluster's finalized features (KIP-584) and UpdateFeatures (KIP-584, KIP-778).

Strandline supports one feature, ``transaction.version`` (0-2, KIP-890 part 2). Its finalized
level is cluster-wide, in ZooKeeper's ``/feature`` (Kafka's ``FeatureZNode``, version 2); every
broker watches it (:meth:`FinalizedFeatures.on_znode`) and reports it in ApiVersions v3+, with the
znode's version plus one as the epoch. Until an update writes ``/feature`` the level is the
broker's ``transaction.version`` key, epoch 0.

The controller serves UpdateFeatures (NOT_CONTROLLER elsewhere, as Kafka's ZooKeeper-mode broker;
Kafka's admin client sends it to the controller Metadata names) with a compare-and-set on
``/feature``, retried on a race: ALTER on the cluster, then every update is checked as Kafka
4.x's controller checks it
(INVALID_UPDATE_VERSION for an unknown feature, a level the broker does not support, or a
downgrade without a downgrade type; an update refused refuses the whole request, as there), and,
unless ``validate_only``, written. v0's ``allow_downgrade`` stands for v1's safe downgrade.
"""

from __future__ import annotations

from typing import Any, Callable

from kio.schema.errors import ErrorCode

from strandline.core.effects import Effect, LogLine
from strandline.core.outbox import Outbox
from strandline.core.wire import Handler, response
from strandline.coordination import znodes
from strandline.coordination.store import Create, GetData, OpResult, SetData, ZkError
from strandline.protocol.api import TRANSACTION_VERSION, TRANSACTION_VERSIONS, ApiKey
from strandline.protocol.header import RequestHeader
from strandline.security.acl import AclOperation
from strandline.security.authorizer import AclAuthorizer

#: the levels this broker supports, per feature
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: TRANSACTION_VERSIONS}
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
#: compare-and-set attempts on ``/feature`` before an update gives up on a busy znode
WRITE_ATTEMPTS = 5


class FinalizedFeatures:
    """The finalized levels as this broker last read ``/feature``."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.levels: dict[str, int] | None = None      # None: no /feature yet
        self.epoch = 0

    def level(self, name: str) -> int:
        if self.levels is None:
            return self.key_levels().get(name, 0)
        return self.levels.get(name, 0)

    @property
    def transaction_version(self) -> int:
        return self.level(TRANSACTION_VERSION)

    def key_levels(self) -> dict[str, int]:
        """The levels before ``/feature`` exists: the broker's keys."""
        return {name: int(self.config[name]) for name in SUPPORTED_FEATURES}

    def current(self) -> dict[str, int]:
        """Every supported feature's level now (0: not finalized)."""
        return {name: self.level(name) for name in SUPPORTED_FEATURES}

    def on_znode(self, data: bytes | None, version: int) -> list[Effect]:
        """``/feature`` now holds ``data`` at ``version`` (None: it does not exist)."""
        before = self.current()
        if data is None:
            self.levels, self.epoch = None, 0
        else:
            try:
                levels = znodes.FeatureZNode.decode(data)
            except ValueError as exc:
                return [LogLine("warning", f"Ignoring {znodes.FeatureZNode.path()}: {exc}")]
            self.levels, self.epoch = levels, version + 1
        now = self.current()
        if now == before:
            return []
        return [LogLine("info", "Finalized features now " + ", ".join(f"{n}={v}" for n, v in sorted(now.items()))
                        + f" (epoch {self.epoch})")]


def update_error(name: str, level: int, upgrade_type: int, current: int) -> str | None:
    """Why Kafka's controller refuses to set feature ``name`` to ``level`` from ``current``
    (INVALID_UPDATE_VERSION); None when it may."""
    prefix = f"Invalid update version {level} for feature {name}."
    supported = SUPPORTED_FEATURES.get(name)
    if supported is None:
        return f"{prefix} The broker does not support the given feature."
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return f"{prefix} Unknown upgrade type {upgrade_type}."
    lo, hi = supported
    if not lo <= level <= hi:
        return f"{prefix} The broker only supports versions {lo}-{hi}."
    if level < current and upgrade_type == UPGRADE:
        return (f"{prefix} Can't downgrade the version of this feature without setting the upgrade type to "
                "either safe or unsafe downgrade.")
    return None


class FeatureApis:
    def __init__(self, outbox: Outbox, authorizer: AclAuthorizer, features: FinalizedFeatures,
                 is_controller: Callable[[], bool]) -> None:
        self.outbox = outbox
        self.is_controller = is_controller
        self.authorizer = authorizer
        self.features = features

    def handlers(self) -> dict[int, Handler]:
        return {ApiKey.UPDATE_FEATURES: self._update_features}

    def _update_features(self, conn_id: int, header: RequestHeader, request: Any, now_ms: int) -> list[Effect]:
        version = header.api_version
        wanted: dict[str, tuple[int, int]] = {}
        for update in request.feature_updates:
            kind = int(getattr(update, "upgrade_type", UPGRADE))
            if version == 0:
                kind = SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
            wanted[update.feature] = (int(update.max_version_level), kind)

        def respond(error: ErrorCode, message: str | None, per_feature: bool = True) -> list[Effect]:
            """v0-1 repeat the outcome for each feature, except a refusal of the whole request."""
            body: dict[str, Any] = {"throttle_time": 0, "error_code": error, "error_message": message}
            if version < 2:
                body["results"] = [{"feature": name, "error_code": error, "error_message": message}
                                   for name in wanted] if per_feature else []
            return [response(conn_id, header, body)]

        if not self.authorizer.allows_cluster(conn_id, AclOperation.ALTER):
            return respond(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", False)
        if not self.is_controller():
            return respond(ErrorCode.not_controller, "This is not the correct controller for this cluster.", False)
        if not wanted:
            return respond(ErrorCode.none, None)
        validate_only = bool(getattr(request, "validate_only", False))
        return self._read(wanted, validate_only, respond, WRITE_ATTEMPTS, now_ms)

    def _read(self, wanted: dict[str, tuple[int, int]], validate_only: bool,
              respond: Callable[[ErrorCode, str | None], list[Effect]], attempts: int, now_ms: int) -> list[Effect]:
        path = znodes.FeatureZNode.path()

        def on_read(results: list[OpResult], when_ms: int) -> list[Effect]:
            [res] = results
            if res.error is ZkError.NO_NODE:
                current, zk_version = self.features.key_levels(), None
            elif res.error is ZkError.NONE:
                try:
                    current, zk_version = znodes.FeatureZNode.decode(res.data), res.version
                except ValueError as exc:
                    return respond(ErrorCode.feature_update_failed, str(exc))
            else:
                return respond(ErrorCode.request_timed_out, f"ZooKeeper did not answer ({res.error.name})")
            for name, (level, kind) in wanted.items():
                refused = update_error(name, level, kind, current.get(name, 0))
                if refused is not None:
                    return respond(ErrorCode.invalid_update_version, refused)
            if validate_only:
                return respond(ErrorCode.none, None)
            levels = {**current, **{name: level for name, (level, _) in wanted.items()}}
            data = znodes.FeatureZNode.encode(levels)
            op = Create(path, data) if zk_version is None else SetData(path, data, zk_version)

            def written(results: list[OpResult], at_ms: int) -> list[Effect]:
                error = results[0].error
                if error is ZkError.NONE:
                    return [LogLine("info", "Finalized features set: " +
                                    ", ".join(f"{n}={v}" for n, (v, _) in sorted(wanted.items())))] + \
                        respond(ErrorCode.none, None)
                if error in (ZkError.BAD_VERSION, ZkError.NODE_EXISTS) and attempts > 1:
                    return self._read(wanted, validate_only, respond, attempts - 1, at_ms)
                return respond(ErrorCode.request_timed_out if error not in (ZkError.BAD_VERSION, ZkError.NODE_EXISTS)
                               else ErrorCode.feature_update_failed,
                               f"Could not write {path} ({error.name})")
            return [self.outbox.zk([op], written)]

        return [self.outbox.zk([GetData(path)], on_read)]
