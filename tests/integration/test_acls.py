"""ACLs against a real 3-broker cluster started with Kafka's ZooKeeper authorizer
(``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``,
``allow.everyone.if.no.acl.found=true``): CreateAcls, DescribeAcls and DeleteAcls with kafka-python's
and confluent-kafka's admin clients, ACLs kept in Kafka's znodes, and every broker enforcing them
on produce, fetch, metadata, groups and the idempotent producer."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.conftest import cluster_fixture, poll_until, run_cli

pytestmark = pytest.mark.integration

ANON = "User:ANONYMOUS"


cluster = cluster_fixture("acls", 3, overrides=["authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                                                "allow.everyone.if.no.acl.found=true",
                                                "group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3"])


@pytest.fixture(scope="module")
def admin(cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def new_topic(admin, partitions: int = 3) -> str:
    from confluent_kafka.admin import NewTopic

    name = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(30)
    return name


def binding(resource: str, name: str, operation: str, permission: str, principal: str = ANON,
            pattern: str = "LITERAL", host: str = "*"):
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    resource = {"CLUSTER": "BROKER"}.get(resource, resource)     # confluent-kafka names the cluster BROKER
    return AclBinding(ResourceType[resource], name, ResourcePatternType[pattern], principal, host,
                      AclOperation[operation], AclPermissionType[permission])


def create(admin, *bindings) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


def delete(admin, *bindings) -> int:
    from confluent_kafka.admin import AclBindingFilter

    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]
    return sum(len(f.result(30)) for f in admin.delete_acls(filters).values())


def produce_errors(bootstrap: str, topic: str, partitions: int = 3, **conf) -> list[str]:
    """Produce one record to each partition; the error of each delivery ("NO_ERROR" if none)."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000, "retries": 0, **conf})
    errors: list[str] = []
    for p in range(partitions):
        producer.produce(topic, b"v", partition=p,
                         on_delivery=lambda err, msg: errors.append(err.name() if err else "NO_ERROR"))
    try:
        producer.flush(15)
    except (KafkaException, SystemError) as exc:
        # a fatal error (the idempotent producer's) is raised from flush(); a delivery report handled
        # in the same call then fails with a SystemError chained to it ("returned a result with an
        # exception set")
        fatal = exc if isinstance(exc, KafkaException) else exc.__cause__
        if not isinstance(fatal, KafkaException):
            raise
        errors.append(fatal.args[0].name())
    return errors


def test_kafka_python_creates_describes_and_deletes_an_acl_as_its_own_suite_does(cluster):
    """kafka-python's test_create_describe_delete_acls, and the znodes Kafka's tools would read."""
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, KafkaAdminClient, ResourcePattern,
                             ResourceType)
    from kafka.errors import NoError

    topic = f"kp-{uuid.uuid4().hex[:6]}"
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        pattern = ResourcePattern(ResourceType.TOPIC, topic)
        everything = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                               permission_type=ACLPermissionType.ANY, resource_pattern=pattern)
        assert client.describe_acls(everything) == ([], NoError)
        acl = ACL(principal="User:test", host="*", operation=ACLOperation.READ,
                  permission_type=ACLPermissionType.ALLOW, resource_pattern=pattern)
        result = client.create_acls([acl])
        assert len(result["succeeded"]) == 1 and result["failed"] == []
        acls, error = client.describe_acls(everything)
        assert error is NoError and len(acls) == 1
        assert (acls[0].principal, acls[0].operation, acls[0].permission_type) == \
            ("User:test", ACLOperation.READ, ACLPermissionType.ALLOW)

        from kazoo.client import KazooClient
        zk = KazooClient(hosts=f"127.0.0.1:{cluster.zk_port}")
        zk.start(10)
        try:
            data, _ = zk.get(f"/kafka-acl/Topic/{topic}")
            assert json.loads(data) == {"version": 1, "acls": [
                {"principal": "User:test", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
            changes = [zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")]
            assert f"TOPIC:{topic}".encode() in changes
        finally:
            zk.stop()

        deleted = client.delete_acls([ACLFilter(principal="User:test", host="*", operation=ACLOperation.READ,
                                                permission_type=ACLPermissionType.ALLOW, resource_pattern=pattern)])
        assert len(deleted) == 1 and len(deleted[0][1]) == 1
        assert client.describe_acls(everything) == ([], NoError)
    finally:
        client.close()


def test_confluent_kafka_manages_prefixed_acls_and_bad_ones_are_refused_with_kafkas_error(admin):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, \
        ResourceType

    prefix = f"pre-{uuid.uuid4().hex[:6]}-"
    create(admin, binding("TOPIC", prefix, "WRITE", "ALLOW", "User:alice", "PREFIXED"),
           binding("TOPIC", "*", "DESCRIBE", "ALLOW", "User:bob"))
    # MATCH: every pattern that applies to one name (its prefix, the wildcard), nothing else
    match = AclBindingFilter(ResourceType.TOPIC, prefix + "orders", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(match).result(30)
    assert sorted((b.name, b.principal, b.resource_pattern_type.name) for b in found) == \
        [("*", "User:bob", "LITERAL"), (prefix, "User:alice", "PREFIXED")]
    assert delete(admin, binding("TOPIC", prefix, "WRITE", "ALLOW", "User:alice", "PREFIXED"),
                  binding("TOPIC", "*", "DESCRIBE", "ALLOW", "User:bob")) == 2
    assert admin.describe_acls(match).result(30) == []

    for bad, message in ((binding("CLUSTER", "my-cluster", "ALTER", "ALLOW"), "kafka-cluster"),
                         (binding("TOPIC", "t", "READ", "ALLOW", principal="alice"), "principal")):
        with pytest.raises(KafkaException) as caught:
            create(admin, bad)
        assert caught.value.args[0].name() == "INVALID_REQUEST" and message in caught.value.args[0].str()


def test_a_deny_acl_stops_produce_on_every_leader_and_deleting_it_lets_produce_through(cluster, admin):
    topic = new_topic(admin)      # three partitions: each broker leads one
    # ACLs the previous test deleted reach every broker a moment later (its "*" one closed every topic)
    poll_until(lambda: produce_errors(cluster.bootstrap, topic) == ["NO_ERROR"] * 3, 20,
               message="every leader accepts the write")
    deny = binding("TOPIC", topic, "WRITE", "DENY")
    create(admin, deny)
    # every broker learns of it through /kafka-acl-changes
    poll_until(lambda: produce_errors(cluster.bootstrap, topic) == ["TOPIC_AUTHORIZATION_FAILED"] * 3, 20,
               message="every leader refuses the write")
    assert delete(admin, deny) == 1
    poll_until(lambda: produce_errors(cluster.bootstrap, topic) == ["NO_ERROR"] * 3, 20,
               message="every leader accepts the write again")


def test_read_describe_and_group_acls_are_enforced_on_consumers_and_metadata(cluster, admin):
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    readable, hidden = new_topic(admin, 1), new_topic(admin, 1)
    poll_until(lambda: produce_errors(cluster.bootstrap, readable, 1) == ["NO_ERROR"], 20,
               message="the new topic takes writes")
    group = f"g-{uuid.uuid4().hex[:6]}"
    # a resource with any ACL is closed to whoever no ALLOW names (allow.everyone... no longer
    # applies): the readable topic may be described but not read
    create(admin, binding("TOPIC", readable, "DESCRIBE", "ALLOW", "User:*"), binding("TOPIC", readable, "READ", "DENY"),
           binding("TOPIC", hidden, "DESCRIBE", "DENY"), binding("GROUP", group, "READ", "DENY"))

    def listed() -> set:
        return set(admin.list_topics(timeout=10).topics)

    poll_until(lambda: hidden not in listed(), 20, message="the hidden topic leaves the metadata")
    assert readable in listed()

    def consume_error(conf: dict, assign: bool) -> str | None:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": conf.get("group.id", "plain"),
                             "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
        try:
            if assign:
                consumer.assign([TopicPartition(readable, 0, 0)])
            else:
                consumer.subscribe([readable])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is not None and \
                        msg.error().code() != KafkaError._PARTITION_EOF:
                    return msg.error().name()
                if msg is not None and msg.error() is None:
                    return "READ"
            return None
        finally:
            consumer.close()

    # the partition's leader may learn of the ACL a moment after the broker that answered the metadata
    poll_until(lambda: consume_error({}, assign=True) == "TOPIC_AUTHORIZATION_FAILED", 30,
               message="the fetch is refused")
    assert consume_error({"group.id": group}, assign=False) == "GROUP_AUTHORIZATION_FAILED"
    missing = f"none-{uuid.uuid4().hex[:6]}"

    def delete_groups() -> dict:
        outcomes = {}
        for name, future in admin.delete_consumer_groups([group, missing], request_timeout=30).items():
            try:
                future.result(30)
                outcomes[name] = "NONE"
            except KafkaException as exc:
                outcomes[name] = exc.args[0].name()
        return outcomes

    # __consumer_offsets was created a moment ago: its leaders may still be taking office
    outcomes = poll_until(lambda: (lambda o: o if "NOT_COORDINATOR" not in o.values() and
                                   "COORDINATOR_LOAD_IN_PROGRESS" not in o.values() else None)(delete_groups()),
                          30, interval=0.5, message="the group coordinators answer")
    assert outcomes == {group: "GROUP_AUTHORIZATION_FAILED", missing: "GROUP_ID_NOT_FOUND"}
    assert delete(admin, binding("TOPIC", readable, "READ", "DENY"),
                  binding("TOPIC", readable, "DESCRIBE", "ALLOW", "User:*")) == 2    # no ACL left: open again
    poll_until(lambda: consume_error({}, assign=True) == "READ", 30, message="the topic is readable again")


def test_an_allow_acl_closes_the_resource_to_everyone_it_does_not_name(cluster, admin):
    """allow.everyone.if.no.acl.found opens only resources without ACLs: once alice may write a
    topic, the anonymous client may not."""
    topic = new_topic(admin, 1)
    create(admin, binding("TOPIC", topic, "WRITE", "ALLOW", "User:alice"))
    poll_until(lambda: produce_errors(cluster.bootstrap, topic, 1) == ["TOPIC_AUTHORIZATION_FAILED"], 20,
               message="the anonymous producer is refused")
    create(admin, binding("TOPIC", topic, "WRITE", "ALLOW", "User:*", host="127.0.0.1"))
    poll_until(lambda: produce_errors(cluster.bootstrap, topic, 1) == ["NO_ERROR"], 20,
               message="a wildcard principal from this host may write")


def test_idempotent_write_is_a_cluster_permission_and_replication_keeps_going(cluster, admin):
    """DENY IDEMPOTENT_WRITE on the cluster refuses idempotent producers (CLUSTER_AUTHORIZATION_FAILED)
    while plain ones write; ALLOW ALL on the cluster keeps followers fetching (CLUSTER_ACTION)."""
    topic = new_topic(admin, 3)
    rules = (binding("CLUSTER", "kafka-cluster", "ALL", "ALLOW", "User:*"),
             binding("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE", "DENY"))
    create(admin, *rules)
    try:
        poll_until(lambda: "CLUSTER_AUTHORIZATION_FAILED" in produce_errors(
            cluster.bootstrap, topic, 3, **{"enable.idempotence": True, "retries": 3}), 30,
            message="the idempotent producer is refused")
        assert produce_errors(cluster.bootstrap, topic, 3, acks="all") == ["NO_ERROR"] * 3
        # the followers still fetch (CLUSTER_ACTION comes with ALL): every replica stays in the ISR
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        assert [len(p.isrs) for p in partitions] == [3, 3, 3]
    finally:
        assert delete(admin, *rules) == 2


def test_the_acls_command_adds_lists_and_removes_acls_like_kafka_acls(cluster, admin):
    topic = new_topic(admin, 1)

    def acls(*args: str):
        return run_cli("acls", *args, "--bootstrap-server", cluster.bootstrap)

    added = acls("add", "--topic", topic, "--allow-principal", "User:alice", "--deny-principal", "User:bob",
                 "--operation", "read", "--operation", "describe")
    assert added.returncode == 0, added.stderr
    assert "Added 4 ACL(s)" in added.stdout
    listed = acls("list", "--topic", topic)
    assert listed.returncode == 0, listed.stderr
    assert f"resourceType=TOPIC, name={topic}, patternType=LITERAL" in listed.stdout
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed.stdout
    assert "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=DENY)" in listed.stdout
    assert f"name={topic}," in acls("list").stdout                    # every resource
    # the anonymous client is no longer let in: the topic has ACLs, none for it
    poll_until(lambda: produce_errors(cluster.bootstrap, topic, 1) == ["TOPIC_AUTHORIZATION_FAILED"], 20,
               message="the topic closes")
    one = acls("remove", "--topic", topic, "--deny-principal", "User:bob", "--operation", "describe")
    assert one.returncode == 0 and "Removed 1 ACL(s)" in one.stdout, one.stderr
    rest = acls("remove", "--topic", topic)
    assert rest.returncode == 0 and "Removed 3 ACL(s)" in rest.stdout, rest.stderr
    assert f"name={topic}," not in acls("list").stdout

    bad = acls("add", "--topic", topic, "--operation", "read")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--allow-principal" in bad.stderr, bad.stderr
    refused = acls("add", "--topic", topic, "--allow-principal", "alice")
    assert refused.returncode == 2 and "User:alice" in refused.stderr, refused.stderr
