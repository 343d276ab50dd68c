"""UpdateFeatures v0 (KIP-584) as a Kafka 2.8.2 broker in ZooKeeper mode answers it
(``KafkaApis.handleUpdateFeatures``, ``KafkaController.validateFeatureUpdate``): ALTER on the
cluster, then the controller alone, and every update refused, as Strandline's brokers support no
feature and none is finalized."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.security.acl import AccessControlEntry, AclOperation, AclPermissionType, PatternType
from strandline.security.acl import ResourcePattern, ResourceType
from tests.unit.broker.test_broker_core import Harness

UNSUPPORTED = "Could not apply finalized feature update because the provided feature is not supported."


def update(h: Harness, *updates: tuple[str, int, bool]):
    return h.call(57, 0, {"timeout": 30000, "feature_updates": [
        {"feature": f, "max_version_level": level, "allow_downgrade": down} for f, level, down in updates]})


def test_each_update_is_refused_as_an_unsupported_feature_on_the_controller():
    h = Harness()
    assert h.broker.controller.is_active
    body = update(h, ("metadata.version", 1, False), ("", 1, False), ("x", 0, False), ("y", 0, True),
                  ("x", 2, False))
    assert (body.error_code, body.error_message) == (ErrorCode.none, None)
    assert [(r.feature, r.error_code, r.error_message) for r in body.results] == [
        ("metadata.version", ErrorCode.invalid_request, UNSUPPORTED),
        ("", ErrorCode.invalid_request, "Feature name can not be empty."),
        ("x", ErrorCode.invalid_request, UNSUPPORTED),           # one result per feature: the last update's
        ("y", ErrorCode.invalid_request, "Can not delete non-existing finalized feature.")]
    body = update(h, ("x", 0, False))
    assert [(r.error_code, r.error_message) for r in body.results] == [(
        ErrorCode.invalid_request,
        "Can not provide maxVersionLevel: 0 less than 1 without setting the allowDowngrade flag to true in the request.")]


def test_an_empty_list_changes_nothing_and_is_answered_without_error():
    body = update(Harness())
    assert (body.error_code, body.error_message, body.results) == (ErrorCode.none, None, ())


def test_a_broker_that_is_not_the_controller_answers_not_controller():
    h = Harness()
    h.run(h.broker.controller.resign("a test"))
    body = update(h, ("metadata.version", 1, False))
    assert (body.error_code, body.error_message, body.results) == (
        ErrorCode.not_controller, "This is not the correct controller for this cluster.", ())


def test_alter_on_the_cluster_is_required_first():
    h = Harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    h.broker.connection_opened(1, "127.0.0.1")
    assert update(h, ("x", 1, False)).error_code == ErrorCode.none
    h.broker.authorizer.load({ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL): frozenset(
        {AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALTER, AclPermissionType.DENY)})})
    h.run(h.broker.controller.resign("a test"))      # the authorization is checked before the controller
    body = update(h, ("x", 1, False))
    assert (body.error_code, body.error_message, body.results) == (
        ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", ())
