"""Kafka 2.8's admin surface against a real 3-broker cluster, with confluent-kafka's AdminClient,
kafka-python's admin client and the ``strandline`` commands: configs (topic overrides and dynamic
broker configs, applied live and kept across a restart), CreatePartitions, DeleteRecords,
DescribeLogDirs, OffsetDelete, and the bad cases with Kafka's error codes."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.conftest import cluster_fixture, poll_until, run_cli

pytestmark = pytest.mark.integration

DEFAULT_CONFIG, DYNAMIC_TOPIC, DYNAMIC_DEFAULT_BROKER = 5, 1, 3


cluster = cluster_fixture("admin", 3, overrides=["group.initial.rebalance.delay.ms=0",
                                                 "offsets.topic.num.partitions=3"])


@pytest.fixture(scope="module")
def admin(cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def new_topic(admin, partitions: int = 1, rf: int = 3, config: dict | None = None) -> str:
    from confluent_kafka.admin import NewTopic

    name = f"t-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, rf, config=config or {})])[name].result(30)
    return name


def error_of(future) -> str:
    try:
        future.result(30)
    except Exception as exc:          # a KafkaException carrying the broker's error
        return exc.args[0].name()
    return "NONE"


def topic_configs(admin, name: str) -> dict:
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("topic", name)
    return admin.describe_configs([resource])[resource].result(30)


def test_topic_configs_are_described_altered_and_applied_live(cluster, admin):
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    name = new_topic(admin)
    before = topic_configs(admin, name)
    assert before["retention.ms"].value == "604800000" and before["retention.ms"].source == DEFAULT_CONFIG
    assert before["cleanup.policy"].value == "delete"
    assert len(before) >= 26                       # every Kafka 2.8 topic key

    def alter(*ops):
        resource = ConfigResource("topic", name, incremental_configs=list(ops))
        return admin.incremental_alter_configs([resource])[resource]

    set_ = AlterConfigOpType.SET
    assert error_of(alter(ConfigEntry("max.message.bytes", "2000", incremental_operation=set_),
                          ConfigEntry("retention.ms", "60000", incremental_operation=set_))) == "NONE"
    after = topic_configs(admin, name)
    assert after["retention.ms"].value == "60000" and after["retention.ms"].source == DYNAMIC_TOPIC
    # applied live (each broker applies the change notification on its own, so poll): the leader
    # refuses a batch above the new max.message.bytes, and takes it again once the override goes
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                         "message.max.bytes": 100000, "retries": 0})

    def produce_outcome() -> str:
        outcome = []
        producer.produce(name, b"x" * 5000, on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(30)
        return outcome[0].name() if outcome[0] is not None else "NONE"
    poll_until(lambda: produce_outcome() == "MSG_SIZE_TOO_LARGE", 10, message="max.message.bytes=2000 applied")

    assert error_of(alter(ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE))) \
        == "NONE"
    poll_until(lambda: produce_outcome() == "NONE", 10, message="max.message.bytes back to the default")
    assert topic_configs(admin, name)["max.message.bytes"].source == DEFAULT_CONFIG

    # the bad cases change nothing
    assert error_of(alter(ConfigEntry("retention.ms", "soon", incremental_operation=set_))) == "INVALID_REQUEST"
    assert error_of(alter(ConfigEntry("no.such.key", "1", incremental_operation=set_))) == "INVALID_CONFIG"
    assert error_of(alter(ConfigEntry("cleanup.policy", "shred", incremental_operation=set_))) == "INVALID_REQUEST"
    assert topic_configs(admin, name)["retention.ms"].value == "60000"
    missing = ConfigResource("topic", "no-such-topic")
    with pytest.raises(KafkaException) as info:
        admin.describe_configs([missing])[missing].result(30)
    assert info.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"

    # list keys take APPEND; compaction keys are accepted and stored (cleaning is not implemented)
    assert error_of(alter(ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND))) \
        == "NONE"
    assert topic_configs(admin, name)["cleanup.policy"].value == "delete,compact"


def test_kafka_python_reads_the_same_configs(cluster, admin):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    name = new_topic(admin, config={"retention.ms": "123456", "min.insync.replicas": "2"})
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        found = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])["topic"][name]
    finally:
        client.close()
    assert found["retention.ms"]["value"] == "123456" and found["min.insync.replicas"]["value"] == "2"
    assert found["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"


def broker_value(admin, broker_id: int, key: str):
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("broker", str(broker_id))
    entry = admin.describe_configs([resource])[resource].result(30)[key]
    return entry.value, entry.source, entry.is_read_only


def test_dynamic_broker_default_reaches_every_broker_and_survives_a_restart(cluster, admin):
    from confluent_kafka.admin import ConfigResource

    result = run_cli("configs", "alter", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers",
                     "--entity-default", "--add-config", "log.retention.ms=7200000")
    assert result.returncode == 0, result.stderr
    for broker_id in (1, 2, 3):
        poll_until(lambda b=broker_id: broker_value(admin, b, "log.retention.ms")[:2] == ("7200000",
                                                                                          DYNAMIC_DEFAULT_BROKER),
                   20, message=f"broker {broker_id} applies the dynamic default")
    # a topic without its own retention.ms falls back to it
    name = new_topic(admin)
    entry = topic_configs(admin, name)["retention.ms"]
    assert (entry.value, entry.source) == ("7200000", DYNAMIC_DEFAULT_BROKER)

    # read-only keys are refused with Kafka's error, and nothing changes
    assert broker_value(admin, 2, "broker.id")[2] is True
    resource = ConfigResource("broker", "2", set_config={"broker.id": "9"})
    assert error_of(admin.alter_configs([resource])[resource]) == "INVALID_REQUEST"
    bad = run_cli("configs", "alter", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers",
                  "--entity-name", "2", "--add-config", "zookeeper.connect=elsewhere:2181")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "Cannot update these configs dynamically" \
        in bad.stderr, bad.stderr

    # a restarted broker reads the dynamic configs from ZooKeeper before it opens its logs
    for action in ("stop", "start"):
        done = run_cli("cluster", action, "3", "--data-dir", str(cluster.data_dir), timeout=120)
        assert done.returncode == 0, done.stderr
    poll_until(lambda: _describes(admin, 3), 60, message="broker 3 serves again")
    assert broker_value(admin, 3, "log.retention.ms")[:2] == ("7200000", DYNAMIC_DEFAULT_BROKER)

    result = run_cli("configs", "alter", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers",
                     "--entity-default", "--delete-config", "log.retention.ms")
    assert result.returncode == 0, result.stderr
    poll_until(lambda: broker_value(admin, 1, "log.retention.ms")[1] != DYNAMIC_DEFAULT_BROKER, 20,
               message="the default removed")


def _describes(admin, broker_id: int) -> bool:
    try:
        broker_value(admin, broker_id, "broker.id")
        return True
    except Exception:
        return False


def test_create_partitions_grows_a_topic_and_refuses_what_kafka_refuses(cluster, admin):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewPartitions

    name = new_topic(admin, partitions=2, rf=2)

    def grow(count, assignment=None):
        wanted = NewPartitions(name, count) if assignment is None else \
            NewPartitions(name, count, replica_assignment=assignment)
        return admin.create_partitions([wanted])[name]

    assert error_of(grow(1)) == "INVALID_PARTITIONS"
    assert error_of(grow(2)) == "INVALID_PARTITIONS"
    assert error_of(grow(3, [[1, 9]])) == "INVALID_REPLICA_ASSIGNMENT"
    assert error_of(grow(3, [[1, 2, 3]])) == "INVALID_REPLICA_ASSIGNMENT"
    missing = admin.create_partitions([NewPartitions("no-such-topic", 3)])["no-such-topic"]
    assert error_of(missing) == "UNKNOWN_TOPIC_OR_PART"
    # (the broker the client asks may hear of the new topic a moment after the controller answered)
    poll_until(lambda: len(admin.list_topics(name, timeout=10).topics[name].partitions) == 2, 20,
               message="the topic keeps its 2 partitions")

    assert error_of(grow(4)) == "NONE"
    result = run_cli("topics", "alter", "--bootstrap-server", cluster.bootstrap, "--topic", name, "--partitions", "5")
    assert result.returncode == 0, result.stderr
    assert error_of(grow(6, [[3, 1]])) == "NONE"

    def leaders():
        parts = admin.list_topics(name, timeout=10).topics[name].partitions
        return len(parts) == 6 and all(p.leader >= 0 and len(p.isrs) == 2 for p in parts.values()) and parts
    parts = poll_until(leaders, 30, message="every new partition has a leader and a full ISR")
    assert parts[5].replicas == [3, 1]

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for p in range(6):
        producer.produce(name, f"to-{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{name}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(name, p, 0) for p in range(6)])
    got = set()
    for _ in range(100):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.add((msg.partition(), msg.value()))
        if len(got) == 6:
            break
    consumer.close()
    assert got == {(p, f"to-{p}".encode()) for p in range(6)}


def test_delete_records_moves_the_log_start_offset_on_every_replica(cluster, admin):
    from confluent_kafka import Producer, TopicPartition

    from strandline.runtime.client import KafkaConnection

    name = new_topic(admin, partitions=1, rf=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce(name, str(i).encode(), partition=0)
    assert producer.flush(30) == 0

    [result] = admin.delete_records([TopicPartition(name, 0, 100)]).values()
    assert result.result(30).low_watermark == 100
    beyond = list(admin.delete_records([TopicPartition(name, 0, 10_000)]).values())[0]
    assert error_of(beyond) == "OFFSET_OUT_OF_RANGE"

    def start_offsets() -> list[int]:
        offsets = []
        for b in cluster.info["brokers"]:
            with KafkaConnection(f"127.0.0.1:{b['port']}") as conn:
                resp = conn.request(2, 2, {"replica_id": -2, "isolation_level": 0, "topics": [
                    {"name": name, "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
            offsets.append(int(resp.topics[0].partitions[0].offset))
        return offsets
    assert start_offsets() == [100, 100, 100]

    result = run_cli("records", "delete", "--bootstrap-server", cluster.bootstrap, "--topic", name,
                     "--partition", "0", "--before", "-1")
    assert result.returncode == 0 and "low watermark 300" in result.stdout, result.stdout + result.stderr
    earliest = run_cli("offsets", "get", "--bootstrap-server", cluster.bootstrap, "--topic", name, "--time", "earliest")
    assert earliest.stdout.strip() == f"{name}:0:300", earliest.stdout


def test_describe_log_dirs_reports_each_replica(cluster, admin):
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient

    name = new_topic(admin, partitions=1, rf=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for _i in range(50):
        producer.produce(name, b"v" * 100, partition=0)
    assert producer.flush(30) == 0
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        answers = client.describe_log_dirs()
    finally:
        client.close()
    sizes = {a["broker"]: p["partition_size"] for a in answers for d in a["log_dirs"] for t in d["topics"]
             if t["name"] == name for p in t["partitions"]}
    assert sorted(sizes) == [1, 2, 3] and all(size > 5000 for size in sizes.values()), sizes


def test_offset_delete_refuses_a_subscribed_topic_then_deletes(cluster, admin):
    from confluent_kafka import Consumer, Producer, TopicPartition

    name = new_topic(admin, partitions=1, rf=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce(name, str(i).encode())
    assert producer.flush(30) == 0
    group = f"g-{name}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([name])
    seen = 0
    for _ in range(200):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen += 1
            if seen == 10:
                consumer.commit(message=msg, asynchronous=False)
                break
    assert seen == 10

    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaTopicPartition

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        def delete_offsets() -> list[str]:
            answer = client.delete_group_offsets(group, [KafkaTopicPartition(name, 0)])
            return [error.__name__ for error in answer.values()]

        assert delete_offsets() == ["GroupSubscribedToTopicError"]
        consumer.close()
        assert delete_offsets() == ["NoError"]
    finally:
        client.close()
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        [committed] = check.committed([TopicPartition(name, 0)], timeout=10)
    finally:
        check.close()
    assert committed.offset < 0


def test_fetch_v13_and_later_address_topics_by_id(cluster, admin):
    """KIP-516: Fetch 13-16 name topics by id; an unknown id is UNKNOWN_TOPIC_ID. (librdkafka 2.16
    consumes with Fetch 16: the confluent-kafka round trips of test_clients.py use it.)"""
    from confluent_kafka import Producer

    from strandline.runtime.client import KafkaConnection

    name = new_topic(admin, partitions=1, rf=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(name, b"by-id", partition=0)
    assert producer.flush(30) == 0
    with KafkaConnection(cluster.bootstrap) as conn:
        meta = conn.request(3, 12, {"topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
        topic_id = meta.topics[0].topic_id
        leader = next(b for b in meta.brokers if b.node_id == meta.topics[0].partitions[0].leader_id)
    assert topic_id.int != 0
    with KafkaConnection(f"{leader.host}:{leader.port}") as conn:
        for version in (13, 16):
            body = {"replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait": 0,
                    "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                    "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                    "topics": [{"topic_id": t, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                               "fetch_offset": 0, "last_fetched_epoch": -1,
                                                               "log_start_offset": -1,
                                                               "partition_max_bytes": 1 << 20}]}
                               for t in (topic_id, uuid.uuid4())]}
            resp = conn.request(1, version, body)
            known, missing = resp.responses
            assert known.topic_id == topic_id and b"by-id" in bytes(known.partitions[0].records)
            assert missing.partitions[0].error_code == 100       # UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_topic_compression_type_recompresses_and_every_client_reads_it(cluster, admin, codec):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KafkaTopicPartition

    from tests.integration.test_clients import CODECS, stored_codecs

    name = new_topic(admin, partitions=1, rf=3, config={"compression.type": codec})
    values = [b"value-%d-" % i + b"z" * (i % 300) for i in range(500)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "compression.type": "none",
                         "linger.ms": 20})
    for v in values:
        producer.produce(name, v, partition=0)
    assert producer.flush(30) == 0
    assert stored_codecs(cluster, name) == {CODECS[codec]}

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{name}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(name, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    assert got == values

    reader = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    reader.assign([KafkaTopicPartition(name, 0)])
    reader.seek(KafkaTopicPartition(name, 0), 0)
    try:
        assert [m.value for m in reader][:len(values)] == values
    finally:
        reader.close()
