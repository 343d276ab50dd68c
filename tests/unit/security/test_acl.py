"""Kafka's ACL rule (AclAuthorizer), its filters, its znodes, and the broker's authorizer keeping
in step with ZooKeeper."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from strandline.security.authorizer import AclAuthorizer
from strandline.core.config import BrokerConfig
from strandline.core.effects import Send, ZkRequest
from strandline.core.outbox import Outbox
from strandline.coordination.cluster_state import read_acls
from strandline.coordination.store import Create
from strandline.coordination.acl_znodes import ACL_PATHS, AclChangeNotificationZNode, AclZNode
from strandline.security.acl import (
    AccessControlEntry as Ace, AclBindingFilter, AclCache, AclError, AclOperation as Op, AclPermissionType as Perm,
    PatternType, ResourcePattern, ResourceType, binding_from_request)
from strandline.sim.zookeeper import MemoryZooKeeper

ALICE, BOB, ANON = "User:alice", "User:bob", "User:ANONYMOUS"
HOST = "127.0.0.1"


def topic(name: str, pattern: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, pattern)


def allow(principal: str, op: Op, host: str = "*") -> Ace:
    return Ace(principal, host, op, Perm.ALLOW)


def deny(principal: str, op: Op, host: str = "*") -> Ace:
    return Ace(principal, host, op, Perm.DENY)


def may(cache: AclCache, principal: str, op: Op, name: str, host: str = HOST) -> bool:
    return cache.authorize(principal, host, op, ResourceType.TOPIC, name)


def test_a_resource_without_acls_follows_allow_everyone_if_no_acl_found():
    assert not may(AclCache(allow_if_no_acl=False), ALICE, Op.READ, "t")
    assert may(AclCache(allow_if_no_acl=True), ALICE, Op.READ, "t")


def test_any_acl_closes_the_resource_to_principals_no_allow_names():
    cache = AclCache(allow_if_no_acl=True)
    cache.set(topic("t"), [allow(ALICE, Op.READ)])
    assert may(cache, ALICE, Op.READ, "t")
    assert not may(cache, BOB, Op.READ, "t")
    assert not may(cache, ALICE, Op.WRITE, "t")
    assert may(cache, BOB, Op.READ, "other")          # another resource still has none


def test_deny_wins_over_allow_and_all_covers_every_operation():
    cache = AclCache()
    cache.set(topic("t"), [allow("User:*", Op.ALL), deny(BOB, Op.WRITE)])
    assert may(cache, BOB, Op.READ, "t") and may(cache, ALICE, Op.WRITE, "t")
    assert not may(cache, BOB, Op.WRITE, "t")


def test_read_write_delete_alter_imply_describe_and_alter_configs_implies_describe_configs():
    cache = AclCache()
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        cache.set(topic("t"), [allow(ALICE, op)])
        assert may(cache, ALICE, Op.DESCRIBE, "t"), op
    cache.set(topic("t"), [allow(ALICE, Op.CREATE)])
    assert not may(cache, ALICE, Op.DESCRIBE, "t")
    cache.set(topic("t"), [allow(ALICE, Op.ALTER_CONFIGS)])
    assert may(cache, ALICE, Op.DESCRIBE_CONFIGS, "t")
    # a DENY applies to its own operation only: denying READ does not deny DESCRIBE
    cache.set(topic("t"), [allow(ALICE, Op.WRITE), deny(ALICE, Op.READ)])
    assert may(cache, ALICE, Op.DESCRIBE, "t") and not may(cache, ALICE, Op.READ, "t")


def test_prefixes_the_literal_wildcard_and_hosts_apply():
    cache = AclCache()
    cache.set(topic("orders-", PatternType.PREFIXED), [allow(ALICE, Op.READ)])
    cache.set(topic("*"), [allow(BOB, Op.READ, host="10.0.0.1")])
    assert may(cache, ALICE, Op.READ, "orders-eu") and not may(cache, ALICE, Op.READ, "order")
    assert may(cache, BOB, Op.READ, "anything", host="10.0.0.1")
    assert not may(cache, BOB, Op.READ, "anything", host=HOST)
    cache.set(topic("orders-", PatternType.PREFIXED), ())
    assert not may(cache, ALICE, Op.READ, "orders-eu")


def test_super_users_may_do_anything():
    cache = AclCache(super_users=frozenset({"User:admin"}))
    cache.set(topic("t"), [deny("User:*", Op.ALL)])
    assert may(cache, "User:admin", Op.WRITE, "t")
    assert not may(cache, ALICE, Op.WRITE, "t")


def test_authorized_operations_is_kip_430s_bit_field():
    cache = AclCache()
    cache.set(topic("t"), [allow(ALICE, Op.READ)])
    bits = cache.authorized_operations(ALICE, HOST, ResourceType.TOPIC, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


def filt(resource_type=ResourceType.ANY, name=None, pattern_type=PatternType.ANY, principal=None, host=None,
         operation=Op.ANY, permission=Perm.ANY) -> AclBindingFilter:
    return AclBindingFilter(resource_type, name, pattern_type, principal, host, operation, permission)


def test_filters_match_as_kafkas_resource_pattern_filter():
    literal, wildcard, prefixed = topic("orders-eu"), topic("*"), topic("orders-", PatternType.PREFIXED)
    match = filt(ResourceType.TOPIC, "orders-eu", PatternType.MATCH)
    assert [match.matches_pattern(p) for p in (literal, wildcard, prefixed, topic("orders"))] == \
        [True, True, True, False]
    exact = filt(ResourceType.TOPIC, "orders-", PatternType.ANY)
    assert [exact.matches_pattern(p) for p in (literal, prefixed)] == [False, True]
    assert filt(ResourceType.GROUP).matches_pattern(literal) is False
    assert filt(principal=ALICE, operation=Op.READ).matches_entry(allow(ALICE, Op.READ))
    assert not filt(principal=ALICE, operation=Op.READ).matches_entry(allow(ALICE, Op.WRITE))
    with pytest.raises(AclError):
        AclBindingFilter.from_request(SimpleNamespace(
            resource_type_filter=2, resource_name_filter=None, pattern_type_filter=0, principal_filter=None,
            host_filter=None, operation=1, permission_type=1))


@pytest.mark.parametrize("args, message", [
    ((4, "my-cluster", 3, ALICE, "*", 7, 3), "kafka-cluster"),
    ((2, "", 3, ALICE, "*", 3, 3), "empty resource name"),
    ((2, "t", 3, "alice", "*", 3, 3), "principal"),
    ((2, "t", 2, ALICE, "*", 3, 3), "Invalid ACL creation"),          # MATCH is for filters only
    ((2, "t", 3, ALICE, "*", 1, 3), "Invalid ACL creation"),          # ANY operation
    ((1, "t", 3, ALICE, "*", 3, 3), "Invalid ACL creation"),          # ANY resource type
])
def test_creations_kafka_refuses_are_refused_with_its_message(args, message):
    with pytest.raises(AclError, match=message):
        binding_from_request(*args)


def test_acl_znodes_are_kafkas():
    entries = [allow(ALICE, Op.IDEMPOTENT_WRITE), deny(BOB, Op.DESCRIBE_CONFIGS, "10.0.0.1")]
    written = json.loads(AclZNode.encode(entries))
    assert written == {"version": 1, "acls": [
        {"principal": ALICE, "permissionType": "Allow", "operation": "IdempotentWrite", "host": "*"},
        {"principal": BOB, "permissionType": "Deny", "operation": "DescribeConfigs", "host": "10.0.0.1"}]}
    # what Kafka's tools write, keys in any order
    kafkas = b'{"version":1,"acls":[{"host":"*","operation":"Read","permissionType":"Allow","principal":"User:a"}]}'
    assert AclZNode.decode(kafkas) == frozenset({allow("User:a", Op.READ)})
    assert AclZNode.path(topic("t")) == "/kafka-acl/Topic/t"
    assert AclZNode.path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.PREFIXED)) == \
        "/kafka-acl-extended/prefixed/TransactionalId/tx"
    assert AclChangeNotificationZNode.encode(topic("t")) == b"TOPIC:t"
    assert json.loads(AclChangeNotificationZNode.encode(topic("p", PatternType.PREFIXED))) == \
        {"version": 1, "resourceType": "TOPIC", "name": "p", "patternType": "PREFIXED"}
    assert AclChangeNotificationZNode.decode(AclChangeNotificationZNode.LITERAL, b"Topic:a:b") == topic("a:b")
    with pytest.raises(ValueError):
        AclZNode.decode(b'{"version":1,"acls":[{"principal":"User:a","host":"*","operation":"Fly",'
                        b'"permissionType":"Allow"}]}')


def authorizer(**overrides: str) -> AclAuthorizer:
    config = BrokerConfig.from_properties({
        "broker.id": "1", "zookeeper.connect": "127.0.0.1:2181",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "true", **overrides})
    return AclAuthorizer(config, Outbox(config))


def run(auth: AclAuthorizer, zk: MemoryZooKeeper, effects: list) -> list:
    """Carry out the authorizer's ZooKeeper requests on ``zk`` until none is left; the other effects."""
    others = []
    while effects:
        effect = effects.pop(0)
        if isinstance(effect, ZkRequest):
            effects.extend(auth.outbox.on_zk_result(effect.token, zk.run(effect.ops, effect.transaction), 0))
        else:
            others.append(effect)
    return others


def creation(resource_type: ResourceType, name: str, pattern: PatternType, op: Op, permission: Perm):
    return SimpleNamespace(resource_type=int(resource_type), resource_name=name, resource_pattern_type=int(pattern),
                           principal=ANON, host="*", operation=int(op), permission_type=int(permission))


def test_a_broker_loads_every_acl_at_start_and_follows_the_change_notifications():
    zk = MemoryZooKeeper()
    zk.execute([Create(path, make_parents=True) for path in ACL_PATHS])
    writer, reader = authorizer(), authorizer()
    writer.connection_opened(1, HOST)
    reader.connection_opened(7, HOST)
    header = SimpleNamespace(api_key=30, api_version=3, correlation_id=1)
    request = SimpleNamespace(creations=[
        creation(ResourceType.TOPIC, "t", PatternType.LITERAL, Op.WRITE, Perm.DENY),
        creation(ResourceType.GROUP, "g-", PatternType.PREFIXED, Op.READ, Perm.DENY)])
    answered = run(writer, zk, writer.handlers()[30](1, header, request, 0))
    sends = [e for e in answered if isinstance(e, Send)]
    assert len(sends) == 1                           # one CreateAcls response, once both are written
    assert not writer.allows(1, Op.WRITE, ResourceType.TOPIC, "t")       # the writer knows at once
    # a broker starting now loads both from ZooKeeper
    fresh = authorizer()
    fresh.connection_opened(3, HOST)
    fresh.load(read_acls(zk))
    assert not fresh.allows(3, Op.WRITE, ResourceType.TOPIC, "t")
    assert not fresh.allows(3, Op.READ, ResourceType.GROUP, "g-1")
    # a running broker learns of them from the notifications
    assert reader.allows(7, Op.WRITE, ResourceType.TOPIC, "t")
    for root in (AclChangeNotificationZNode.LITERAL, AclChangeNotificationZNode.EXTENDED):
        children = zk.children(root)
        assert len(children) == 1
        run(reader, zk, reader.on_acl_changes(root, children, 0))
    assert not reader.allows(7, Op.WRITE, ResourceType.TOPIC, "t")
    assert not reader.allows(7, Op.READ, ResourceType.GROUP, "g-1")
    assert reader.allows(7, Op.READ, ResourceType.GROUP, "h")       # no ACL: allow.everyone.if.no.acl.found
    # a notification already processed is not read again
    assert reader.on_acl_changes(AclChangeNotificationZNode.LITERAL, zk.children(AclChangeNotificationZNode.LITERAL),
                                 0) == []


def test_without_an_authorizer_everything_is_allowed_and_acl_apis_say_security_disabled():
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"})
    auth = AclAuthorizer(config, Outbox(config))
    assert auth.allows(1, Op.WRITE, ResourceType.TOPIC, "t")
    assert auth.on_acl_changes(AclChangeNotificationZNode.LITERAL, ["acl_changes_0000000001"], 0) == []


def test_delete_acls_finds_an_acl_written_through_another_broker_by_its_exact_pattern():
    """DeleteAcls with a filter naming one pattern reads it from ZooKeeper even when this broker
    has not yet heard of it (Kafka's matchesAtMostOne)."""
    zk = MemoryZooKeeper()
    zk.execute([Create(path, make_parents=True) for path in ACL_PATHS])
    writer, other = authorizer(), authorizer()
    header = SimpleNamespace(api_key=30, api_version=3, correlation_id=1)
    run(writer, zk, writer.handlers()[30](1, header, SimpleNamespace(creations=[
        creation(ResourceType.TOPIC, "t", PatternType.LITERAL, Op.WRITE, Perm.DENY)]), 0))
    exact = SimpleNamespace(resource_type_filter=2, resource_name_filter="t", pattern_type_filter=3,
                            principal_filter=None, host_filter=None, operation=1, permission_type=1)
    delete_header = SimpleNamespace(api_key=31, api_version=3, correlation_id=2)
    [sent] = [e for e in run(other, zk, other.handlers()[31](1, delete_header, SimpleNamespace(filters=[exact]), 0))
              if isinstance(e, Send)]
    assert read_acls(zk) == {}
    assert b"User:ANONYMOUS" in b"".join(bytes(b) for b in sent.buffers)     # the deleted ACL is reported


# -- every API checks what Kafka checks (the broker core, one broker, ACLs loaded directly)

def acl_harness(*acls: tuple[ResourcePattern, list[Ace]]):
    from tests.unit.broker.test_broker_core import Harness

    h = Harness(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found": "true"})
    h.create("open")
    h.create("closed")
    h.broker.connection_opened(1, HOST)
    h.broker.authorizer.load(dict((p, frozenset(e)) for p, e in acls))
    return h


CLUSTER = ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL)


def fetch_errors(h, replica_id: int) -> dict[str, int]:
    body = h.fetch_body("open", 0)
    body["replica_id"] = replica_id
    body["topics"].append({**body["topics"][0], "topic": "closed"})
    return {t.topic: t.partitions[0].error_code for t in h.call(1, 11, body).responses}


def test_a_consumer_fetch_needs_read_on_each_topic_and_a_follower_fetch_cluster_action():
    from kio.schema.errors import ErrorCode

    h = acl_harness((topic("closed"), [deny(ANON, Op.READ)]))
    assert fetch_errors(h, -1) == {"open": ErrorCode.none, "closed": ErrorCode.topic_authorization_failed}
    # any ACL on the cluster closes it: a follower then needs an ALLOW of CLUSTER_ACTION
    h.broker.authorizer.load({CLUSTER: frozenset({deny(ANON, Op.IDEMPOTENT_WRITE)})})
    errors = fetch_errors(h, 2)
    assert set(errors.values()) == {ErrorCode.topic_authorization_failed}
    h.broker.authorizer.load({CLUSTER: frozenset({deny(ANON, Op.IDEMPOTENT_WRITE), allow(ANON, Op.ALL)})})
    assert fetch_errors(h, 2)["open"] == ErrorCode.none


def test_metadata_hides_what_may_not_be_described_and_reports_authorized_operations():
    from kio.schema.errors import ErrorCode

    h = acl_harness((topic("closed"), [deny(ANON, Op.DESCRIBE)]), (topic("open"), [allow(ANON, Op.READ)]))
    every = h.call(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": True})
    assert [t.name for t in every.topics] == ["open"]
    assert every.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    named = h.call(3, 12, {"topics": [{"name": "closed", "topic_id": None}], "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False})
    assert named.topics[0].error_code == ErrorCode.topic_authorization_failed


def test_an_idempotent_batch_needs_idempotent_write_on_the_cluster_and_a_plain_one_write_on_the_topic():
    from kio.schema.errors import ErrorCode
    from tests.unit.batches import make_batch

    h = acl_harness((CLUSTER, [deny(ANON, Op.IDEMPOTENT_WRITE), allow(ANON, Op.ALL)]),
                    (topic("closed"), [deny(ANON, Op.WRITE)]))
    h.produce("open", make_batch([b"v"], producer_id=7, producer_epoch=0, base_sequence=0))
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.cluster_authorization_failed
    h.produce("open", make_batch([b"v"]))
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none
    h.produce("closed", make_batch([b"v"]))
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
    refused = h.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                             "producer_epoch": -1})
    assert refused.error_code == ErrorCode.cluster_authorization_failed


def test_a_produce_with_a_malformed_batch_length_is_refused_not_spun_on():
    """A batch length below the batch overhead must not stall the idempotence check."""
    from kio.schema.errors import ErrorCode
    from tests.unit.batches import make_batch

    h = acl_harness()
    batch = make_batch([b"v"])
    batch[8:12] = (-20).to_bytes(4, "big", signed=True)
    h.produce("open", batch)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code != ErrorCode.none


def test_a_fetch_session_stops_serving_a_topic_whose_read_is_revoked():
    from kio.schema.errors import ErrorCode
    from tests.unit.batches import make_batch

    h = acl_harness()
    h.produce("open", make_batch([b"v"]))
    h.response(0, 7)
    body = h.fetch_body("open", 0)
    body.update(session_id=0, session_epoch=0)               # open a session
    first = h.call(1, 11, body)
    assert first.session_id > 0 and first.responses[0].partitions[0].error_code == ErrorCode.none
    h.broker.authorizer.load({topic("open"): frozenset({deny(ANON, Op.READ)})})
    incremental = h.fetch_body("open", 1)
    incremental.update(session_id=first.session_id, session_epoch=1, topics=[])
    answer = h.call(1, 11, incremental)
    assert [(t.topic, t.partitions[0].error_code) for t in answer.responses] == \
        [("open", ErrorCode.topic_authorization_failed)]


def test_names_a_request_leaves_null_never_reach_the_acl_rule():
    """Metadata v12 and DeleteTopics v6 may name topics by id only (a null name)."""
    from kio.schema.errors import ErrorCode

    h = acl_harness((topic("o", PatternType.PREFIXED), [allow(ANON, Op.ALL)]))
    by_id = h.call(3, 12, {"topics": [{"name": None, "topic_id": "00000000-0000-0000-0000-000000000001"}],
                           "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    assert by_id.topics[0].error_code != ErrorCode.none
    assert not h.logs or all("Traceback" not in log.message for log in h.logs)


def test_produce_creates_a_topic_only_with_create_permission():
    from tests.unit.batches import make_batch

    # CREATE on the cluster or on the topic (here: on neither; the prefix still lets it write)
    h = acl_harness((CLUSTER, [allow(ANON, Op.ALL), deny(ANON, Op.CREATE)]),
                    (topic("fr", PatternType.PREFIXED), [deny(ANON, Op.CREATE), allow(ANON, Op.WRITE)]))
    h.produce("fresh", make_batch([b"v"]))
    h.response(0, 7)
    assert not any(path.startswith("/brokers/topics/fresh") for path in h.zk.nodes)
    h.broker.authorizer.load({CLUSTER: frozenset({allow(ANON, Op.ALL)})})
    h.produce("fresh", make_batch([b"v"]))
    h.response(0, 7)
    assert any(path.startswith("/brokers/topics/fresh") for path in h.zk.nodes)       # the check can pass


def test_transactional_id_and_prefixed_notifications_decode():
    for pattern in (ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.LITERAL),
                    ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx-", PatternType.PREFIXED),
                    ResourcePattern(ResourceType.DELEGATION_TOKEN, "d", PatternType.LITERAL)):
        root = AclChangeNotificationZNode.root(pattern.pattern_type)
        assert AclChangeNotificationZNode.decode(root, AclChangeNotificationZNode.encode(pattern)) == pattern


def test_a_resource_name_with_a_slash_is_refused():
    with pytest.raises(AclError, match="cannot hold /"):
        binding_from_request(3, "team/a", 3, ALICE, "*", 3, 3)
