"""A connection's session in the core: its listener decides the endpoints Metadata answers, its
principal what the authorizer, super.users and the delegation token APIs see."""

from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from strandline.coordination.znodes import BrokerInfo
from tests.unit.broker.test_broker_core import Harness
from tests.unit.broker.test_sasl_apis import raw
from tests.unit.protocol.test_control_old_versions import EPOCH, leader_and_isr, send

LISTENERS = {"listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093,INTERNAL://127.0.0.1:9094",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,INTERNAL:SSL"}
SECURED = {**LISTENERS, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
           "super.users": "User:admin"}


def brokers() -> dict:
    return {b: BrokerInfo.of(b, [("PLAINTEXT", "10.0.0.%d" % b, 9092, "PLAINTEXT"),
                                 ("SASL_SSL", "broker%d.example" % b, 9093, "SASL_SSL")])
            for b in (1, 2)} | {3: BrokerInfo.of(3, [("PLAINTEXT", "10.0.0.3", 9092, "PLAINTEXT")])}


def test_metadata_and_describe_cluster_answer_the_clients_listener():
    h = Harness(**LISTENERS)
    h.broker.metadata.brokers = brokers()
    h.broker.connection_opened(1, "127.0.0.1", "PLAINTEXT")
    h.broker.connection_opened(2, "127.0.0.1", "SASL_SSL", "User:alice")
    plain = h.call(3, 9, {"topics": [], "allow_auto_topic_creation": False}, conn=1)
    assert sorted((b.node_id, b.host, b.port) for b in plain.brokers) == [
        (1, "10.0.0.1", 9092), (2, "10.0.0.2", 9092), (3, "10.0.0.3", 9092)]
    secure = h.call(3, 9, {"topics": [], "allow_auto_topic_creation": False}, conn=2)
    # broker 3 has no SASL_SSL listener: left out, as Kafka's MetadataCache.getAliveEndpoints
    assert sorted((b.node_id, b.host, b.port) for b in secure.brokers) == [
        (1, "broker1.example", 9093), (2, "broker2.example", 9093)]
    cluster = h.call(60, 0, {"include_cluster_authorized_operations": False}, conn=2)
    assert sorted(b.host for b in cluster.brokers) == ["broker1.example", "broker2.example"]


def test_control_requests_need_cluster_action_of_the_authenticated_principal():
    """A super user (the brokers' own principal) is served; another principal gets
    CLUSTER_AUTHORIZATION_FAILED, as Kafka's KafkaApis."""
    h = Harness(**SECURED)
    h.run(h.broker.on_registered(EPOCH, h.now))
    h.broker.connection_opened(7, "127.0.0.1", "SASL_SSL", "User:alice")
    h.broker.connection_opened(8, "127.0.0.1", "INTERNAL", "User:admin")
    assert send(h, leader_and_isr(3, 5), conn=7)["error_code"] == ErrorCode.cluster_authorization_failed
    h.run(h.broker.handle_request(8, leader_and_isr(3, 5), h.now))
    [answer] = h.sent[8]
    data = b"".join(bytes(b) for b in answer.buffers)
    assert struct.unpack_from(">h", data, 8)[0] == ErrorCode.none     # after size and correlation id


def test_delegation_tokens_are_disabled_rather_than_not_allowed_for_an_authenticated_principal():
    """allowTokenRequests: not on PLAINTEXT, nor for SSL's anonymous clients; then no
    delegation.token.master.key: DELEGATION_TOKEN_AUTH_DISABLED, with the connection's principal."""
    h = Harness(**LISTENERS)
    h.broker.connection_opened(1, "127.0.0.1", "SASL_SSL", "User:alice")
    h.broker.connection_opened(2, "127.0.0.1", "INTERNAL", "User:ANONYMOUS")
    h.broker.connection_opened(3, "127.0.0.1", "INTERNAL", "User:CN=bob,O=Strandline")
    data = raw(h, 38, 1, {"renewers": [], "max_lifetime": -1})      # (on connection 1)
    assert data[:15] == struct.pack(">h", int(ErrorCode.delegation_token_auth_disabled)) + \
        struct.pack(">h", 4) + b"User" + struct.pack(">h", 5) + b"alice"
    assert h.call(41, 1, {"owners": None}, conn=2).error_code == ErrorCode.delegation_token_request_not_allowed
    assert h.call(41, 1, {"owners": None}, conn=3).error_code == ErrorCode.delegation_token_auth_disabled


def test_quotas_are_kept_under_the_principals_user():
    h = Harness(**LISTENERS)
    h.broker.connection_opened(1, "127.0.0.1", "SASL_SSL", "User:alice")
    h.broker.connection_opened(2, "127.0.0.1", "PLAINTEXT")
    assert h.broker.apis.quota_apis.user(1) == "alice" and h.broker.apis.quota_apis.user(2) == "ANONYMOUS"
