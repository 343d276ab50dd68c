"""UpdateFeatures (KIP-584, KIP-778) and the finalized ``transaction.version``: ALTER on the
cluster, then the controller alone (NOT_CONTROLLER elsewhere, as Kafka's ZooKeeper-mode broker);
each update checked as Kafka 4.x's controller checks it, then written to ``/feature``, which every
broker reads and reports in ApiVersions v3+."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.coordination import znodes
from strandline.coordination.store import GetData
from strandline.security.acl import AccessControlEntry, AclOperation, AclPermissionType, PatternType
from strandline.security.acl import ResourcePattern, ResourceType
from strandline.sim.cluster import SimCluster
from tests.unit.broker.test_broker_core import Harness

UPGRADE, SAFE_DOWNGRADE = 1, 2


def update_v0(h: Harness, *updates: tuple[str, int, bool]):
    return h.call(57, 0, {"timeout": 30000, "feature_updates": [
        {"feature": f, "max_version_level": level, "allow_downgrade": down} for f, level, down in updates]})


def update(c: SimCluster, broker: int, *updates: tuple[str, int, int], version: int = 2, validate_only=False):
    return c.call(broker, 57, version, {"timeout": 30000, "validate_only": validate_only, "feature_updates": [
        {"feature": f, "max_version_level": level, "upgrade_type": kind} for f, level, kind in updates]})


def finalized(c: SimCluster, broker: int) -> tuple[int, dict[str, int]]:
    body = c.call(broker, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
    return body.finalized_features_epoch, {f.name: f.max_version_level for f in body.finalized_features}


def test_an_upgrade_and_a_downgrade_reach_every_brokers_api_versions():
    """``transaction.version`` starts at the brokers' key (2 by default, epoch 0); a safe downgrade
    to 1 is written to ``/feature`` in Kafka's version 2 layout and every broker reports it, in
    a newer epoch; an upgrade back to 2 follows. Level 0 leaves the feature out, as Kafka does."""
    c = SimCluster((1, 2, 3))
    assert all(finalized(c, b) == (0, {"transaction.version": 2}) for b in (1, 2, 3))
    body = update(c, c.controller_id, ("transaction.version", 1, SAFE_DOWNGRADE))
    assert (body.error_code, body.error_message) == (ErrorCode.none, None)
    c.advance(100)
    [res] = c.tool_zk([GetData(znodes.FeatureZNode.path())])
    assert res.data == b'{"version":2,"status":1,"features":{"transaction.version":{"max_version_level":1}}}'
    assert all(finalized(c, b) == (1, {"transaction.version": 1}) for b in (1, 2, 3))
    assert update(c, c.controller_id, ("transaction.version", 2, UPGRADE), version=1).results[0].error_code \
        == ErrorCode.none
    c.advance(100)
    assert all(finalized(c, b) == (2, {"transaction.version": 2}) for b in (1, 2, 3))
    assert update(c, c.controller_id, ("transaction.version", 0, SAFE_DOWNGRADE)).error_code == ErrorCode.none
    c.advance(100)
    assert all(finalized(c, b) == (3, {}) for b in (1, 2, 3))
    c.crash(2)
    c.start(2)                                      # a broker starting reads the level too
    c.advance(2000)
    assert finalized(c, 2) == (3, {})


def test_a_refused_update_refuses_the_whole_request_and_writes_nothing():
    c = SimCluster((1, 2, 3))
    ctl = c.controller_id
    cases = [
        (("transaction.version", 1, UPGRADE), "Invalid update version 1 for feature transaction.version. Can't "
         "downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."),
        (("transaction.version", 3, UPGRADE), "Invalid update version 3 for feature transaction.version. The "
         "broker only supports versions 0-2."),
        (("metadata.version", 1, UPGRADE), "Invalid update version 1 for feature metadata.version. The broker "
         "does not support the given feature."),
    ]
    for wrong, message in cases:
        body = update(c, ctl, ("transaction.version", 2, UPGRADE), wrong, version=1)
        assert (body.error_code, body.error_message) == (ErrorCode.invalid_update_version, message)
        assert {r.error_code for r in body.results} == {ErrorCode.invalid_update_version}
    assert update(c, ctl, ("transaction.version", 1, SAFE_DOWNGRADE), validate_only=True).error_code == ErrorCode.none
    c.advance(100)
    [res] = c.tool_zk([GetData(znodes.FeatureZNode.path())])
    assert res.data is None and finalized(c, ctl) == (0, {"transaction.version": 2})
    other = next(b for b in (1, 2, 3) if b != ctl)
    body = update(c, other, ("transaction.version", 1, SAFE_DOWNGRADE))
    assert (body.error_code, body.error_message) == (
        ErrorCode.not_controller, "This is not the correct controller for this cluster.")


def test_v0s_allow_downgrade_is_a_safe_downgrade():
    h = Harness()
    assert h.broker.controller.is_active
    body = update_v0(h, ("transaction.version", 1, False))
    assert body.error_code == ErrorCode.invalid_update_version and len(body.results) == 1
    body = update_v0(h, ("transaction.version", 1, True))
    assert (body.error_code, [(r.feature, r.error_code) for r in body.results]) == (
        ErrorCode.none, [("transaction.version", ErrorCode.none)])


def test_an_empty_list_changes_nothing_and_is_answered_without_error():
    body = update_v0(Harness())
    assert (body.error_code, body.error_message, body.results) == (ErrorCode.none, None, ())


def test_a_broker_that_is_not_the_controller_answers_not_controller():
    h = Harness()
    h.run(h.broker.controller.resign("a test"))
    body = update_v0(h, ("transaction.version", 1, True))
    assert (body.error_code, body.error_message, body.results) == (
        ErrorCode.not_controller, "This is not the correct controller for this cluster.", ())


def test_alter_on_the_cluster_is_required_first():
    h = Harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    h.broker.connection_opened(1, "127.0.0.1")
    assert update_v0(h).error_code == ErrorCode.none
    h.broker.authorizer.load({ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL): frozenset(
        {AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALTER, AclPermissionType.DENY)})})
    h.run(h.broker.controller.resign("a test"))      # the authorization is checked before the controller
    body = update_v0(h, ("x", 1, False))
    assert (body.error_code, body.error_message, body.results) == (
        ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", ())
