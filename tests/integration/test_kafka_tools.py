"""Apache Kafka's own tools, unchanged, against a 3-broker Strandline: each run as Kafka's bin/ script
runs it (``java -cp '<libs>/*' <main class> args...``), with the jars of Kafka 3.9 and of the newest
4.x (fetched once from Maven Central; see strandline.reference). Every test runs once per Kafka line,
against one Strandline cluster for the whole module (started with Kafka's ZooKeeper ACL authorizer,
``allow.everyone.if.no.acl.found=true``, so that kafka-acls has an authorizer to talk to).

What each tool proves, and the differences that are kept, are listed in docs/compatibility.md.
Skipped, in one line, where Maven Central cannot be reached (tests/integration/kafka_reference.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from strandline.reference import KafkaDist
from tests.conftest import cluster_fixture, poll_until
from tests.integration.kafka_reference import LINES, dist, kafka_lines_or_skip

pytestmark = pytest.mark.integration

KAFKA = kafka_lines_or_skip()


cluster = cluster_fixture("kafka-tools", 3, overrides=["authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                                                       "allow.everyone.if.no.acl.found=true",
                                                       "group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=3",
                                                       "transaction.state.log.num.partitions=3",
                                                       # the reassignment test elects leaders itself; the
                                                       # imbalance check (every 300 s) must not beat it
                                                       "auto.leader.rebalance.enable=false"])


@pytest.fixture(scope="module", params=LINES)
def kafka(request) -> KafkaDist:
    return dist(KAFKA, request.param)


@pytest.fixture(scope="module")
def admin(cluster):
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    BOOTSTRAP[id(client)] = cluster.bootstrap
    return client


BOOTSTRAP: dict[int, str] = {}


def admin_bootstrap(admin) -> str:
    return BOOTSTRAP[id(admin)]


def tool(kafka: KafkaDist, name: str, *args: str, input: str | None = None, expect: int = 0,
         timeout: float = 120) -> subprocess.CompletedProcess:
    """One run of a Kafka tool; its exit status must be ``expect``."""
    done = kafka.run_tool(name, list(args), input=input, timeout=timeout)
    assert done.returncode == expect, \
        f"Kafka {kafka.version} {name} {' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def unique(kafka: KafkaDist, base: str) -> str:
    """A name of this test and Kafka line (no '.', which Kafka's tools warn about beside '_')."""
    return f"{base}-{kafka.line.replace('.', '')}-{uuid.uuid4().hex[:6]}"


def create_topic(admin, name: str, partitions: int = 1, replication: int = 3, assignment=None, **configs) -> None:
    """``assignment``: the replicas of each partition in order (kafka-python's admin sends it; confluent-kafka's
    NewTopic does not take one here)."""
    config = {k.replace("_", "."): str(v) for k, v in configs.items()}
    if assignment:
        from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic

        client = KafkaAdminClient(bootstrap_servers=admin_bootstrap(admin))
        try:
            client.create_topics([KNewTopic(name, num_partitions=-1, replication_factor=-1, topic_configs=config,
                                            replica_assignments=dict(enumerate(assignment)))])
        finally:
            client.close()
        poll_until(lambda: name in admin.list_topics(timeout=10).topics, 30, message=f"{name} in the metadata")
        return
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(name, partitions, replication, config=config)])[name].result(30)


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, timestamps: list[int] | None = None,
            **conf) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0, **conf})
    errors = []
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=partition, timestamp=timestamps[i] if timestamps else 0,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and not errors, errors


def partitions_of(admin, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) from the cluster's metadata."""
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    assert meta.error is None, meta.error
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in meta.partitions.values()}


def topic_configs(admin, kind: str, name: str) -> dict[str, tuple[str, object]]:
    """A topic's or broker's configs: name -> (value, source)."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    resource = ConfigResource(kind, name)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {k: (e.value, ConfigSource(e.source)) for k, e in entries.items()}


# -- kafka-topics ----------------------------------------------------------------------------------


def test_kafka_topics_creates_describes_lists_alters_and_deletes(kafka, cluster, admin):
    topic = unique(kafka, "topics")
    out = tool(kafka, "kafka-topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", topic,
               "--partitions", "2", "--replication-factor", "3", "--config", "retention.ms=3600000").stdout
    assert f"Created topic {topic}." in out
    tool(kafka, "kafka-topics", "--bootstrap-server", cluster.bootstrap, "--alter", "--topic", topic,
         "--partitions", "4")
    described = tool(kafka, "kafka-topics", "--bootstrap-server", cluster.bootstrap, "--describe",
                     "--topic", topic).stdout
    header = described.splitlines()[0]
    assert re.search(r"PartitionCount: 4\s+ReplicationFactor: 3\s+Configs: .*retention.ms=3600000", header), header
    rows = [line for line in described.splitlines() if "Partition: " in line]
    assert [int(re.search(r"Partition: (\d+)", r).group(1)) for r in rows] == [0, 1, 2, 3]
    for row in rows:
        replicas = re.search(r"Replicas: ([\d,]+)", row).group(1).split(",")
        assert sorted(replicas) == ["1", "2", "3"], row
        assert re.search(r"Leader: (\d)", row).group(1) == replicas[0], row      # the preferred replica leads
    listed = tool(kafka, "kafka-topics", "--bootstrap-server", cluster.bootstrap, "--list").stdout.split()
    assert topic in listed
    tool(kafka, "kafka-topics", "--bootstrap-server", cluster.bootstrap, "--delete", "--topic", topic)
    poll_until(lambda: topic not in admin.list_topics(timeout=10).topics, 30, message=f"{topic} deleted")
    refused = tool(kafka, "kafka-topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", topic,
                   "--partitions", "1", "--replication-factor", "5", expect=1)
    assert "InvalidReplicationFactorException" in refused.stdout + refused.stderr
    assert "larger than available brokers: 3" in refused.stdout + refused.stderr


# -- kafka-configs ---------------------------------------------------------------------------------


def test_kafka_configs_alters_and_describes_topics_and_brokers(kafka, cluster, admin):
    from confluent_kafka.admin import ConfigSource

    topic = unique(kafka, "configs")
    create_topic(admin, topic)
    base = ["--bootstrap-server", cluster.bootstrap]
    tool(kafka, "kafka-configs", *base, "--entity-type", "topics", "--entity-name", topic, "--alter",
         "--add-config", "retention.ms=12345,cleanup.policy=[compact,delete]")
    tool(kafka, "kafka-configs", *base, "--entity-type", "topics", "--entity-name", topic, "--alter",
         "--delete-config", "retention.ms")
    out = tool(kafka, "kafka-configs", *base, "--entity-type", "topics", "--entity-name", topic, "--describe").stdout
    assert f"Dynamic configs for topic {topic} are:" in out
    assert "cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete" \
        in out, out
    assert "retention.ms" not in out
    assert topic_configs(admin, "topic", topic)["cleanup.policy"][0] == "compact,delete"

    tool(kafka, "kafka-configs", *base, "--entity-type", "brokers", "--entity-name", "2", "--alter",
         "--add-config", "log.cleaner.threads=2")
    tool(kafka, "kafka-configs", *base, "--entity-type", "brokers", "--entity-default", "--alter",
         "--add-config", "log.cleaner.threads=3")
    out = tool(kafka, "kafka-configs", *base, "--entity-type", "brokers", "--entity-name", "2", "--describe").stdout
    assert ("log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.cleaner.threads=2, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=3, DEFAULT_CONFIG:log.cleaner.threads=1}") in out, out
    assert topic_configs(admin, "broker", "1")["log.cleaner.threads"] == ("3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    tool(kafka, "kafka-configs", *base, "--entity-type", "brokers", "--entity-name", "2", "--alter",
         "--delete-config", "log.cleaner.threads")
    tool(kafka, "kafka-configs", *base, "--entity-type", "brokers", "--entity-default", "--alter",
         "--delete-config", "log.cleaner.threads")
    poll_until(lambda: topic_configs(admin, "broker", "2")["log.cleaner.threads"] == ("1", ConfigSource.DEFAULT_CONFIG),
               10, message="broker 2's log.cleaner.threads back to its default")


def quota_lines(out: str) -> dict[str, dict[str, str]]:
    """kafka-configs' "Quota configs for <entity> are k=v, k=v" lines: entity -> {k: v}."""
    found = {}
    for line in out.splitlines():
        m = re.fullmatch(r"Quota configs for (.+) are (.*)", line.strip())
        if m:
            found[m.group(1)] = dict(kv.split("=", 1) for kv in m.group(2).split(", "))
    return found


def test_strandline_configs_speaks_kafka_configs_lines_for_client_and_user_client_quotas(kafka, cluster):
    """`strandline configs --entity-type clients` and `--entity-type users ... --entity-type clients ...`
    (a user's client id): what it writes, Kafka's kafka-configs describes back, and both tools
    describe it in the same lines; its alter messages are kafka-configs' (as Kafka 3.9 prints them)."""
    from tests.conftest import run_cli

    user, client = unique(kafka, "user"), unique(kafka, "client")
    base = ["--bootstrap-server", cluster.bootstrap]
    users = ["--entity-type", "users", "--entity-name", user]
    clients = ["--entity-type", "clients", "--entity-name", client]

    def ours(*args: str) -> str:
        done = run_cli("configs", *base, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert ours(*clients, "--alter", "--add-config", "producer_byte_rate=4096") == \
        f"Completed updating config for client {client}.\n"
    assert ours(*users, *clients, "--alter", "--add-config", "consumer_byte_rate=2048,request_percentage=12.5") == \
        f"Completed updating config for user {user}.\n"
    for entity in (clients, [*users, *clients]):
        theirs = tool(kafka, "kafka-configs", *base, *entity, "--describe").stdout
        assert quota_lines(theirs), theirs
        assert quota_lines(ours(*entity, "--describe")) == quota_lines(theirs), theirs
    assert quota_lines(ours(*clients, "--describe")) == {f"client-id '{client}'": {"producer_byte_rate": "4096.0"}}
    assert ours(*users, *clients, "--alter", "--delete-config", "consumer_byte_rate,request_percentage") == \
        f"Completed updating config for user {user}.\n"
    assert quota_lines(tool(kafka, "kafka-configs", *base, *users, *clients, "--describe").stdout) == {}
    refused = run_cli("configs", *base, *clients, "--alter", "--add-config", "retention.ms=1")
    assert (refused.returncode, refused.stdout) == (2, ""), refused
    assert refused.stderr.count("\n") == 1 and "not a quota of client-id" in refused.stderr, refused.stderr


def test_kafka_configs_adds_describes_and_deletes_user_and_client_quotas(kafka, cluster, admin):
    """kafka-configs --entity-type users / clients / users+clients (DescribeClientQuotas,
    AlterClientQuotas, DescribeUserScramCredentials, AlterUserScramCredentials): each quota and
    SCRAM credential lands where Kafka 2.8 keeps it in ZooKeeper, is described back by Kafka's
    tool, and is deleted."""
    from kazoo.client import KazooClient

    user, client = unique(kafka, "user"), unique(kafka, "client app")
    base = ["--bootstrap-server", cluster.bootstrap]
    users = ["--entity-type", "users", "--entity-name", user]
    clients = ["--entity-type", "clients", "--entity-name", client]
    out = tool(kafka, "kafka-configs", *base, *users, "--alter",
               "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048").stdout
    assert f"Completed updating config for user {user}." in out, out
    out = tool(kafka, "kafka-configs", *base, *clients, "--alter", "--add-config", "producer_byte_rate=4096").stdout
    assert f"Completed updating config for client {client}." in out, out
    tool(kafka, "kafka-configs", *base, *users, *clients, "--alter", "--add-config", "request_percentage=25.5")
    tool(kafka, "kafka-configs", *base, "--entity-type", "users", "--entity-default", "--alter",
         "--add-config", "controller_mutation_rate=1000")

    zk = KazooClient(hosts=f"127.0.0.1:{cluster.zk_port}")
    zk.start(timeout=10)
    try:
        stored = {path: json.loads(zk.get(path)[0]) for path in (
            f"/config/users/{user}", f"/config/clients/{client.replace(' ', '%20')}",
            f"/config/users/{user}/clients/{client.replace(' ', '%20')}", "/config/users/<default>")}
    finally:
        zk.stop()
    assert list(stored.values()) == [
        {"version": 1, "config": {"consumer_byte_rate": "2048", "producer_byte_rate": "1024"}},
        {"version": 1, "config": {"producer_byte_rate": "4096"}},
        {"version": 1, "config": {"request_percentage": "25.5"}},
        {"version": 1, "config": {"controller_mutation_rate": "1000.0"}}], stored

    user_entity, client_entity = f"user-principal '{user}'", f"client-id '{client}'"
    out = tool(kafka, "kafka-configs", *base, *users, "--describe").stdout
    assert quota_lines(out) == {user_entity: {"producer_byte_rate": "1024.0", "consumer_byte_rate": "2048.0"}}, out
    assert "SCRAM" not in out                   # alice has no credentials: nothing to say, as Kafka
    out = tool(kafka, "kafka-configs", *base, *clients, "--describe").stdout
    assert quota_lines(out) == {client_entity: {"producer_byte_rate": "4096.0"}}, out
    out = tool(kafka, "kafka-configs", *base, *users, *clients, "--describe").stdout
    assert quota_lines(out) == {f"{user_entity}, {client_entity}": {"request_percentage": "25.5"}}, out
    out = tool(kafka, "kafka-configs", *base, "--entity-type", "users", "--describe").stdout
    listed = quota_lines(out)
    assert listed[user_entity] == {"producer_byte_rate": "1024.0", "consumer_byte_rate": "2048.0"}, out
    assert listed["the default user-principal"] == {"controller_mutation_rate": "1000.0"}, out
    out = tool(kafka, "kafka-configs", *base, "--entity-type", "users", "--entity-type", "clients",
               "--describe").stdout
    assert quota_lines(out)[f"{user_entity}, {client_entity}"] == {"request_percentage": "25.5"}, out

    if kafka.zookeeper:
        # Kafka's own ZooKeeper code (3.9's AdminZkClient, the layout of 2.8) reads what Strandline
        # wrote, and writes SCRAM credentials that Strandline then describes
        zk_base = ["--zookeeper", f"127.0.0.1:{cluster.zk_port}"]
        out = tool(kafka, "kafka-configs", *zk_base, *users, "--describe").stdout     # 3.9: users or brokers only
        line = next(x for x in out.splitlines() if x.startswith(f"Configs for user-principal '{user}' are "))
        assert sorted(line.rsplit(" are ", 1)[1].split(",")) == ["consumer_byte_rate=2048",
                                                                "producer_byte_rate=1024"], out
        scrammed = unique(kafka, "scram")
        tool(kafka, "kafka-configs", *zk_base, "--entity-type", "users", "--entity-name", scrammed, "--alter",
             "--add-config", "SCRAM-SHA-512=[iterations=8192,password=pw]")
        out = tool(kafka, "kafka-configs", *base, "--entity-type", "users", "--entity-name", scrammed,
                   "--describe").stdout
        assert f"SCRAM credential configs for user-principal '{scrammed}' are SCRAM-SHA-512=iterations=8192" in out, out
        assert quota_lines(out) == {}
    tool(kafka, "kafka-configs", *base, *users, "--alter", "--delete-config", "producer_byte_rate")
    tool(kafka, "kafka-configs", *base, *clients, "--alter", "--delete-config", "producer_byte_rate")
    tool(kafka, "kafka-configs", *base, *users, *clients, "--alter", "--delete-config", "request_percentage")
    tool(kafka, "kafka-configs", *base, "--entity-type", "users", "--entity-default", "--alter",
         "--delete-config", "controller_mutation_rate")
    assert quota_lines(tool(kafka, "kafka-configs", *base, *users, "--describe").stdout) == {
        user_entity: {"consumer_byte_rate": "2048.0"}}
    assert quota_lines(tool(kafka, "kafka-configs", *base, *clients, "--describe").stdout) == {}
    assert quota_lines(tool(kafka, "kafka-configs", *base, *users, *clients, "--describe").stdout) == {}
    tool(kafka, "kafka-configs", *base, *users, "--alter", "--delete-config", "consumer_byte_rate")
    out = tool(kafka, "kafka-configs", *base, "--entity-type", "users", "--describe").stdout
    assert user_entity not in quota_lines(out) and "the default user-principal" not in quota_lines(out), out
    # a key that is no quota, refused by the tool; deleting one that is not set, by the tool after a describe
    refused = tool(kafka, "kafka-configs", *base, *clients, "--alter", "--delete-config", "consumer_byte_rate",
                   expect=1)
    assert "Invalid config(s): consumer_byte_rate" in refused.stdout + refused.stderr
    # SCRAM credentials (AlterUserScramCredentials): written where Kafka 2.8 keeps them, derived
    # from the password the tool salted (checked here with hashlib), described, deleted
    out = tool(kafka, "kafka-configs", *base, *users, "--alter", "--add-config", "SCRAM-SHA-256=[password=pw]").stdout
    assert f"Completed updating config for user {user}." in out, out
    zk = KazooClient(hosts=f"127.0.0.1:{cluster.zk_port}")
    zk.start(timeout=10)
    try:
        config = json.loads(zk.get(f"/config/users/{user}")[0])["config"]
    finally:
        zk.stop()
    assert list(config) == ["SCRAM-SHA-256"], config
    stored = dict(part.split("=", 1) for part in config["SCRAM-SHA-256"].split(","))
    assert stored["iterations"] == "4096", stored
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", base64.b64decode(stored["salt"]), 4096)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    assert base64.b64decode(stored["stored_key"]) == hashlib.sha256(client_key).digest()
    assert base64.b64decode(stored["server_key"]) == hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    out = tool(kafka, "kafka-configs", *base, *users, "--describe").stdout
    assert f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=4096" in out, out
    tool(kafka, "kafka-configs", *base, *users, "--alter", "--delete-config", "SCRAM-SHA-256")
    assert "SCRAM" not in tool(kafka, "kafka-configs", *base, *users, "--describe").stdout


# -- kafka-console-producer / kafka-console-consumer --------------------------------------------------


def test_console_producer_and_consumer_with_keys_headers_and_read_committed(kafka, cluster, admin):
    from confluent_kafka import Producer

    topic = unique(kafka, "console")
    create_topic(admin, topic)
    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"tx-{topic}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, key=b"kc", value=b"committed", partition=0)
    txn.commit_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, key=b"ka", value=b"aborted", partition=0)
    assert txn.flush(30) == 0                   # written to the log, then aborted
    txn.abort_transaction(30)

    # 3.9 reads the reader's settings with --property; 4.x with --reader-property (--property is deprecated)
    reader = "--property" if kafka.zookeeper else "--reader-property"
    tool(kafka, "kafka-console-producer", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
         reader, "parse.key=true", reader, "key.separator=\t", reader, "parse.headers=true",
         reader, "headers.delimiter=|", input="h1:a,h2:b|k1\tv1\nh3:c|k2\tv2\n")
    formatter = "--property" if kafka.zookeeper else "--formatter-property"
    out = tool(kafka, "kafka-console-consumer", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
               "--from-beginning", "--isolation-level", "read_committed", "--max-messages", "3",
               "--timeout-ms", "30000", formatter, "print.key=true", formatter, "print.headers=true",
               formatter, "print.offset=true").stdout
    assert out.splitlines() == ["Offset:0\tNO_HEADERS\tkc\tcommitted", "Offset:4\th1:a,h2:b\tk1\tv1",
                                "Offset:5\th3:c\tk2\tv2"], out


# -- kafka-consumer-groups -------------------------------------------------------------------------


def test_kafka_consumer_groups_lists_describes_resets_and_deletes(kafka, cluster, admin):
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    topic = unique(kafka, "groups")
    group = f"g-{topic}"
    create_topic(admin, topic, partitions=2)
    produce(cluster.bootstrap, topic, [b"a%d" % i for i in range(6)], partition=0)
    produce(cluster.bootstrap, topic, [b"b%d" % i for i in range(4)], partition=1)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "client.id": "groups-client",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen += 1
        assert seen == 10
        consumer.commit(asynchronous=False)
        base = ["--bootstrap-server", cluster.bootstrap]
        assert group in tool(kafka, "kafka-consumer-groups", *base, "--list").stdout.split()
        members = tool(kafka, "kafka-consumer-groups", *base, "--describe", "--group", group, "--members").stdout
        [row] = [line.split() for line in members.splitlines() if line.startswith(group)]
        assert row[3] == "groups-client" and row[4] == "2", members        # CLIENT-ID, #PARTITIONS
    finally:
        consumer.close()
    out = tool(kafka, "kafka-consumer-groups", *base, "--describe", "--group", group).stdout
    rows = {int(r[2]): r for r in (line.split() for line in out.splitlines()) if r and r[0] == group}
    assert {p: (r[3], r[4], r[5]) for p, r in rows.items()} == {0: ("6", "6", "0"), 1: ("4", "4", "0")}, out
    tool(kafka, "kafka-consumer-groups", *base, "--group", group, "--topic", topic, "--reset-offsets",
         "--to-earliest", "--execute")
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 0), (1, 0)]
    tool(kafka, "kafka-consumer-groups", *base, "--group", group, "--topic", f"{topic}:1", "--delete-offsets")
    wanted = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])[group].result(30)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 0), (1, -1001)]
    tool(kafka, "kafka-consumer-groups", *base, "--delete", "--group", group)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}


# -- kafka-reassign-partitions, kafka-leader-election -------------------------------------------------


def test_kafka_reassign_partitions_with_throttles_then_kafka_leader_election(kafka, cluster, admin, tmp_path):
    topic = unique(kafka, "move")
    create_topic(admin, topic, assignment=[[1, 2], [2, 3]])
    produce(cluster.bootstrap, topic, [b"x" * 100] * 20, partition=0)
    produce(cluster.bootstrap, topic, [b"y" * 100] * 20, partition=1)
    base = ["--bootstrap-server", cluster.bootstrap]
    (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    out = tool(kafka, "kafka-reassign-partitions", *base, "--generate", "--broker-list", "1,3",
               "--topics-to-move-json-file", str(tmp_path / "topics.json")).stdout
    lines = out.splitlines()
    current = json.loads(lines[lines.index("Current partition replica assignment") + 1])
    proposed = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    assert sorted((p["partition"], p["replicas"]) for p in current["partitions"]) == [(0, [1, 2]), (1, [2, 3])]
    assert all(sorted(p["replicas"]) == [1, 3] for p in proposed["partitions"]), proposed

    plan = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 1]},
                                         {"topic": topic, "partition": 1, "replicas": [1, 3]}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = tool(kafka, "kafka-reassign-partitions", *base, "--execute", "--reassignment-json-file",
               str(tmp_path / "plan.json"), "--throttle", "50000000").stdout
    assert "The inter-broker throttle limit was set to 50000000 B/s" in out
    assert "Successfully started partition reassignments" in out
    configs = topic_configs(admin, "topic", topic)
    assert configs["leader.replication.throttled.replicas"][0] == "0:1,0:2,1:2,1:3"
    assert configs["follower.replication.throttled.replicas"][0] == "0:3,1:1"
    assert topic_configs(admin, "broker", "3")["follower.replication.throttled.rate"][0] == "50000000"
    poll_until(lambda: {p: (r, i) for p, (_, r, i) in partitions_of(admin, topic).items()}
               == {0: ([3, 1], [1, 3]), 1: ([1, 3], [1, 3])}, 60, message="the moves done")
    out = tool(kafka, "kafka-reassign-partitions", *base, "--verify", "--reassignment-json-file",
               str(tmp_path / "plan.json")).stdout
    assert f"Reassignment of partition {topic}-0 is completed" in out
    assert f"Reassignment of partition {topic}-1 is completed" in out
    assert "Clearing broker-level throttles on brokers 1,2,3" in out
    assert "leader.replication.throttled.replicas" not in topic_configs(admin, "topic", topic) or \
        topic_configs(admin, "topic", topic)["leader.replication.throttled.replicas"][0] == ""
    assert topic_configs(admin, "broker", "3")["follower.replication.throttled.rate"][0] == str(2 ** 63 - 1)

    # partition 0 kept its leader (1) through the move; its preferred replica is now 3
    assert partitions_of(admin, topic)[0][0] == 1
    out = tool(kafka, "kafka-leader-election", *base, "--election-type", "preferred", "--topic", topic,
               "--partition", "0").stdout
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in out
    assert partitions_of(admin, topic)[0][0] == 3
    out = tool(kafka, "kafka-leader-election", *base, "--election-type", "unclean", "--topic", topic,
               "--partition", "1").stdout
    assert f"Valid replica already elected for partitions {topic}-1" in out


# -- kafka-delete-records, kafka-get-offsets ----------------------------------------------------------


def test_kafka_delete_records_and_kafka_get_offsets(kafka, cluster, admin, tmp_path):
    topic = unique(kafka, "offsets")
    create_topic(admin, topic, partitions=2)
    now = int(time.time() * 1000)
    produce(cluster.bootstrap, topic, [b"p0-%d" % i for i in range(5)], partition=0,
            timestamps=[now, now + 1, now + 2, now + 50, now + 3])
    produce(cluster.bootstrap, topic, [b"p1-%d" % i for i in range(3)], partition=1)
    base = ["--bootstrap-server", cluster.bootstrap]
    (tmp_path / "delete.json").write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 3}]}))
    out = tool(kafka, "kafka-delete-records", *base, "--offset-json-file", str(tmp_path / "delete.json")).stdout
    assert f"partition: {topic}-0\tlow_watermark: 3" in out, out

    def offsets(*args: str) -> list[str]:
        return sorted(tool(kafka, "kafka-get-offsets", *base, "--topic", topic, *args).stdout.split())

    assert offsets("--time", "-2") == [f"{topic}:0:3", f"{topic}:1:0"]               # earliest
    assert offsets() == [f"{topic}:0:5", f"{topic}:1:3"]                             # latest
    assert offsets("--time", "-3", "--partitions", "0") == [f"{topic}:0:3"]          # max timestamp
    assert offsets("--time", str(now + 3), "--partitions", "0") == [f"{topic}:0:3"]  # the first at or after


# -- kafka-acls --------------------------------------------------------------------------------------


def test_kafka_acls_adds_lists_and_removes(kafka, cluster, admin):
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, \
        ResourceType

    topic = unique(kafka, "acl")
    base = ["--bootstrap-server", cluster.bootstrap]
    tool(kafka, "kafka-acls", *base, "--add", "--allow-principal", "User:alice", "--operation", "Read",
         "--topic", topic, "--group", f"{topic}-", "--resource-pattern-type", "prefixed")
    tool(kafka, "kafka-acls", *base, "--add", "--allow-principal", "User:carol", "--producer", "--topic", topic,
         "--transactional-id", f"tx-{topic}")
    out = tool(kafka, "kafka-acls", *base, "--list", "--topic", topic).stdout
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in out, out
    for op in ("WRITE", "DESCRIBE", "CREATE"):
        assert f"(principal=User:carol, host=*, operation={op}, permissionType=ALLOW)" in out, out
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)

    def ours() -> set[tuple[str, str, str, str]]:
        return {(b.restype.name, b.name, b.principal, b.operation.name, b.resource_pattern_type.name)
                for b in admin.describe_acls(everything).result(30) if topic in b.name}

    # every broker applies an ACL change when ZooKeeper tells it (as Kafka's AclAuthorizer): poll
    expected = {("TOPIC", topic, "User:alice", "READ", "PREFIXED"), ("GROUP", f"{topic}-", "User:alice", "READ", "PREFIXED"),
                ("TOPIC", topic, "User:carol", "WRITE", "LITERAL"), ("TOPIC", topic, "User:carol", "DESCRIBE", "LITERAL"),
                ("TOPIC", topic, "User:carol", "CREATE", "LITERAL"),
                ("TRANSACTIONAL_ID", f"tx-{topic}", "User:carol", "WRITE", "LITERAL"),
                ("TRANSACTIONAL_ID", f"tx-{topic}", "User:carol", "DESCRIBE", "LITERAL")}
    poll_until(lambda: ours() == expected, 10, message=f"the ACLs {expected}")
    tool(kafka, "kafka-acls", *base, "--remove", "--force", "--topic", topic, "--transactional-id", f"tx-{topic}")
    tool(kafka, "kafka-acls", *base, "--remove", "--force", "--topic", topic, "--group", f"{topic}-",
         "--resource-pattern-type", "prefixed")
    poll_until(lambda: ours() == set(), 10, message="no ACL left")


# -- kafka-transactions ------------------------------------------------------------------------------


def test_kafka_transactions_lists_describes_finds_hanging_and_aborts(kafka, cluster, admin):
    from confluent_kafka import IsolationLevel, Producer, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    topic = unique(kafka, "txn")
    tid = f"tx-{topic}"
    create_topic(admin, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    assert producer.flush(30) == 0
    base = ["--bootstrap-server", cluster.bootstrap]
    try:
        listed = tool(kafka, "kafka-transactions", *base, "list").stdout
        [row] = [line.split() for line in listed.splitlines() if line.startswith(tid)]
        assert row[3] == "Ongoing", listed
        producer_id = row[2]
        described = tool(kafka, "kafka-transactions", *base, "describe", "--transactional-id", tid).stdout
        [row] = [line.split() for line in described.splitlines()[1:]]
        assert row[1:5] == [tid, producer_id, "0", "Ongoing"] and row[-1] == f"{topic}-0", described
        producers = tool(kafka, "kafka-transactions", *base, "describe-producers", "--topic", topic,
                         "--partition", "0").stdout
        [row] = [line.split() for line in producers.splitlines()[1:]]
        assert row[0] == producer_id and row[-1] == "0", producers          # CurrentTransactionStartOffset
        # every broker holds a replica of the topic, most of them as followers: each answers DescribeProducers
        # (the transaction is younger than --max-transaction-timeout, 15 minutes: not hanging, no row)
        for broker in ("1", "2", "3"):
            hanging = tool(kafka, "kafka-transactions", *base, "find-hanging", "--broker-id", broker)
            assert hanging.stdout.split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                                              "StartOffset", "LastTimestamp", "Duration(min)"], hanging
            assert hanging.stderr == "", hanging.stderr
        out = tool(kafka, "kafka-transactions", *base, "abort", "--topic", topic, "--partition", "0",
                   "--start-offset", "0")
        assert out.stdout.strip() == "" and "Exception" not in out.stderr, out
        stable = TopicPartition(topic, 0)

        def last_stable() -> int:
            result = admin.list_offsets({stable: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED)
            return result[stable].result(30).offset

        poll_until(lambda: last_stable() == 2, 10, message="the open transaction aborted: LSO 2")
    finally:
        producer.abort_transaction(30)


# -- kafka-log-dirs, kafka-broker-api-versions ----------------------------------------------------------


def test_kafka_log_dirs_describes_every_replica(kafka, cluster, admin):
    topic = unique(kafka, "dirs")
    create_topic(admin, topic, partitions=2)
    produce(cluster.bootstrap, topic, [b"z" * 50] * 10, partition=1)
    out = tool(kafka, "kafka-log-dirs", "--bootstrap-server", cluster.bootstrap, "--describe", "--topic-list",
               topic, "--broker-list", "1,2,3").stdout
    report = json.loads(out.splitlines()[-1])
    dirs = {b["id"]: b["log_dir"] for b in cluster.info["brokers"]}
    seen = {}
    for broker in report["brokers"]:
        [log_dir] = broker["logDirs"]
        assert log_dir["error"] is None and log_dir["logDir"] == dirs[broker["broker"]]
        for p in log_dir["partitions"]:
            seen[(broker["broker"], p["partition"])] = p["size"]
    assert set(seen) == {(b, f"{topic}-{p}") for b in (1, 2, 3) for p in (0, 1)}
    assert all(size == 0 for (_, name), size in seen.items() if name.endswith("-0"))
    leader = partitions_of(admin, topic)[1][0]
    assert seen[(leader, f"{topic}-1")] > 500


def test_kafka_broker_api_versions_lists_every_broker(kafka, cluster):
    out = tool(kafka, "kafka-broker-api-versions", "--bootstrap-server", cluster.bootstrap).stdout
    for broker in cluster.info["brokers"]:
        assert f"127.0.0.1:{broker['port']} (id: {broker['id']} rack: null" in out, out
    assert re.search(r"Produce\(0\): \d+ to \d+ \[usable: \d+\]", out), out
    assert re.search(r"Fetch\(1\): \d+ to \d+ \[usable: \d+\]", out), out


def test_kafka_features_downgrades_describes_and_upgrades_transaction_version(kafka, cluster):
    """UpdateFeatures (its v1 from 3.9's tool, v2 from 4.x's) at the controller, the level read
    back from every broker's ApiVersions: a downgrade of ``transaction.version`` to 1, a refused
    upgrade past what the brokers support, and the upgrade back to 2 (the cluster's level again)."""
    def run(*args: str, expect: int = 0) -> str:
        return tool(kafka, "kafka-features", "--bootstrap-server", cluster.bootstrap, *args, expect=expect).stdout

    assert "transaction.version was downgraded to 1." in run("downgrade", "--feature", "transaction.version=1")
    try:
        described = run("describe")
        assert re.search(r"Feature: transaction.version\s+SupportedMinVersion: 0\s+SupportedMaxVersion: 2\s+"
                         r"FinalizedVersionLevel: 1\s+Epoch: [1-9]", described), described
        refused = run("upgrade", "--feature", "transaction.version=3", expect=1)
        assert "Invalid update version 3 for feature transaction.version" in refused, refused
    finally:
        assert "transaction.version was upgraded to 2." in run("upgrade", "--feature", "transaction.version=2")


# -- kafka-producer-perf-test, kafka-consumer-perf-test, kafka-verifiable-producer/consumer ------------


def test_kafka_producer_and_consumer_perf_tests(kafka, cluster, admin):
    topic = unique(kafka, "perf")
    create_topic(admin, topic, partitions=3)
    out = tool(kafka, "kafka-producer-perf-test", "--topic", topic, "--num-records", "5000", "--record-size", "100",
               "--throughput", "-1", "--producer-props", f"bootstrap.servers={cluster.bootstrap}", "acks=all").stdout
    assert re.search(r"^5000 records sent, ", out, re.M), out
    count = "--messages" if kafka.zookeeper else "--num-records"
    out = tool(kafka, "kafka-consumer-perf-test", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
               count, "5000", "--timeout", "30000", "--group", f"g-{topic}").stdout
    header, values = out.strip().splitlines()[-2:]
    stats = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in values.split(",")]))
    assert stats["data.consumed.in.nMsg"] == "5000", out


def test_kafka_verifiable_producer_and_consumer(kafka, cluster, admin):
    topic = unique(kafka, "verifiable")
    create_topic(admin, topic, partitions=2)
    out = tool(kafka, "kafka-verifiable-producer", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
               "--max-messages", "300", "--acks", "-1", "--throughput", "-1").stdout
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    sent = [e for e in events if e["name"] == "producer_send_success"]
    assert len(sent) == 300 and not [e for e in events if e["name"] == "producer_send_error"]
    [data] = [e for e in events if e["name"] == "tool_data"]
    assert data["sent"] == data["acked"] == 300
    out = tool(kafka, "kafka-verifiable-consumer", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
               "--group-id", f"g-{topic}", "--max-messages", "300", "--reset-policy", "earliest").stdout
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    consumed = sum(p["count"] for e in events if e["name"] == "records_consumed" for p in e["partitions"])
    assert consumed == 300, events
    committed = [e for e in events if e["name"] == "offsets_committed"]
    assert committed and all(e["success"] for e in committed)
    final = {o["partition"]: o["offset"] for e in committed for o in e["offsets"]}
    by_partition = {}
    for e in sent:
        by_partition[e["partition"]] = max(by_partition.get(e["partition"], -1), e["offset"])
    assert final == {p: last + 1 for p, last in by_partition.items()}


# -- kafka-dump-log on Strandline's own files --------------------------------------------------------


def test_kafka_dump_log_reads_strandline_segments_indexes_and_snapshots(kafka, cluster, admin):
    """The on-disk format proven by Kafka's own reader: a rolled segment of Strandline's (.log), its
    offset and time indexes, its producer snapshot and its transaction index, as broker 1 wrote them."""
    from confluent_kafka import Producer

    topic = unique(kafka, "dump")
    create_topic(admin, topic, assignment=[[1]], segment_bytes=1024, index_interval_bytes=1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 0})
    producer.init_transactions(30)
    for i in range(6):
        producer.begin_transaction()
        producer.produce(topic, key=b"k%d" % i, value=b"v%d-" % i + b"." * 200, partition=0,
                         headers=[("n", b"%d" % i)])
        assert producer.flush(30) == 0
        (producer.abort_transaction if i == 2 else producer.commit_transaction)(30)
    log_dir = Path(next(b["log_dir"] for b in cluster.info["brokers"] if b["id"] == 1)) / f"{topic}-0"
    poll_until(lambda: len(list(log_dir.glob("*.log"))) >= 3 and list(log_dir.glob("*.snapshot")), 30,
               message="segments rolled and a producer snapshot written")
    segments = sorted(log_dir.glob("*.log"))
    first = segments[0].stem
    files = [log_dir / f"{first}.log", log_dir / f"{first}.index", log_dir / f"{first}.timeindex",
             sorted(log_dir.glob("*.snapshot"))[0]]
    files += sorted(log_dir.glob("*.txnindex"))[:1]
    assert all(f.exists() for f in files), sorted(p.name for p in log_dir.iterdir())
    out = tool(kafka, "kafka-dump-log", "--files", ",".join(map(str, files)), "--deep-iteration",
               "--print-data-log").stdout
    for f in files:
        assert f"Dumping {f}" in out
    assert "isvalid: true" in out and "isvalid: false" not in out
    assert re.search(r"\| offset: 0 CreateTime: \d+ keySize: 2 valueSize: 203 sequence: 0 headerKeys: \[n\] "
                     r"key: k0 payload: v0-\.+", out), out
    assert "endTxnMarker: COMMIT coordinatorEpoch:" in out
    # each offset index entry names a batch of the segment: its last offset and its position
    batches = {int(m.group(2)): int(m.group(3)) for m in re.finditer(
        r"^baseOffset: (\d+) lastOffset: (\d+) .* position: (\d+) ", out, re.M)}
    index = [(int(m.group(1)), int(m.group(2))) for m in re.finditer(r"^offset: (\d+) position: (\d+)$", out, re.M)]
    assert index and all(batches.get(offset) == position for offset, position in index), (batches, index)
    assert re.search(r"^timestamp: \d+ offset: \d+$", out, re.M), out           # the time index
    # the first segment rolled at offset 5, inside the aborted transaction that began at 4
    assert files[3].name == "00000000000000000005.snapshot"
    assert re.search(r"^producerId: \d+ producerEpoch: 0 coordinatorEpoch: 0 currentTxnFirstOffset: OptionalLong\[4\] "
                     r"lastTimestamp: \d+ firstSequence: 2 lastSequence: 2 lastOffset: 4 offsetDelta: 0 timestamp: \d+$",
                     out, re.M), out
    assert files[4].name == "00000000000000000005.txnindex"
    assert re.search(r"^version: 0 producerId: \d+ firstOffset: 4 lastOffset: 5 lastStableOffset: \d+$", out, re.M), out
    assert "Exception" not in out
    checked = tool(kafka, "kafka-dump-log", "--files", f"{files[1]},{files[2]}", "--index-sanity-check").stdout
    assert f"{files[1]} passed sanity check." in checked and f"{files[2]} passed sanity check." in checked
    verified = tool(kafka, "kafka-dump-log", "--files", f"{files[1]},{files[2]}", "--verify-index-only").stdout
    assert "mismatch" not in verified.lower() and "Exception" not in verified, verified
