"""Configs, DeleteRecords and unclean ElectLeaders in the core: Kafka's ZooKeeper layout for
config changes, notifications applied live (and purged once old), sources and synonyms as
DescribeConfigs reports them, dynamic broker configs, message.timestamp.difference.max.ms, and
the controller's unclean elections (CTL-8's knob, set while a partition is offline)."""

from __future__ import annotations

import json

import pytest
from kio.schema.errors import ErrorCode

from strandline.broker.dynamic_config import CHANGE_EXPIRATION_MS
from strandline.core.effects import ZkRequest
from strandline.coordination.store import Create, GetChildren, GetData, OpResult, ZkError
from strandline.sim.cluster import SimCluster
from tests.unit.batches import keyed_batch, make_batch
from tests.unit.broker.test_broker_core import Harness
from tests.sim.test_partitions_sim import isolated_leader_with_an_isr_of_one
from tests.sim.test_replication_sim import create, produce

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def alter(h: Harness, rtype: int, name: str, ops: list[tuple[str, int, str | None]]):
    resp = h.call(44, 1, {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": False})
    return resp.responses[0]


def describe(h: Harness, rtype: int, name: str, synonyms: bool = True) -> dict:
    resp = h.call(32, 4, {"resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": None}],
                          "include_synonyms": synonyms, "include_documentation": False})
    [result] = resp.results
    assert result.error_code == ErrorCode.none, result
    return {c.name: c for c in result.configs}


def children(h: Harness) -> list[str]:
    [res] = h.zk.execute([GetChildren("/config/changes")])
    return list(res.children)


def notify(h: Harness) -> None:
    """What the shell's /config/changes watch does."""
    h.run(h.broker.on_config_changes(children(h), h.now))


def test_alter_writes_kafkas_znodes_and_every_broker_applies_the_notification():
    h = Harness()
    assert h.create("orders").error_code == ErrorCode.none
    result = alter(h, TOPIC, "orders", [("retention.ms", SET, "1000"), ("cleanup.policy", SET, "compact,delete")])
    assert result.error_code == ErrorCode.none, result
    [entity] = h.zk.execute([GetData("/config/topics/orders")])
    assert json.loads(entity.data) == {"version": 1, "config": {"cleanup.policy": "compact,delete",
                                                                "retention.ms": "1000"}}
    [change] = children(h)
    assert change.startswith("config_change_") and change[len("config_change_"):].isdigit()
    [note] = h.zk.execute([GetData(f"/config/changes/{change}")])
    assert json.loads(note.data) == {"version": 2, "entity_path": "topics/orders"}
    log = h.broker.partitions[("orders", 0)].log
    assert log.config.retention_ms != 1000            # not before the notification is read
    notify(h)
    assert log.config.retention_ms == 1000 and log.config.cleanup_policy == ("compact", "delete")
    assert log.config.deletes
    alter(h, TOPIC, "orders", [("cleanup.policy", SET, "compact")])
    notify(h)
    assert not log.config.deletes                      # compact alone: retention deletes nothing


def test_old_notifications_are_deleted_by_the_broker_that_reads_them():
    h = Harness()
    h.create("orders")
    h.zk.clock = lambda: h.now - CHANGE_EXPIRATION_MS - 1
    alter(h, TOPIC, "orders", [("retention.ms", SET, "1000")])
    h.zk.clock = lambda: h.now
    alter(h, TOPIC, "orders", [("retention.ms", SET, "2000")])
    old, new = children(h)
    notify(h)
    assert children(h) == [new]
    assert h.broker.partitions[("orders", 0)].log.config.retention_ms == 2000


def test_incremental_operations_and_what_is_refused():
    h = Harness()
    h.create("orders")
    ok = alter(h, TOPIC, "orders", [("cleanup.policy", APPEND, "compact")])
    assert ok.error_code == ErrorCode.none
    assert describe(h, TOPIC, "orders")["cleanup.policy"].value == "delete,compact"
    assert alter(h, TOPIC, "orders", [("cleanup.policy", SUBTRACT, "delete")]).error_code == ErrorCode.none
    assert describe(h, TOPIC, "orders")["cleanup.policy"].value == "compact"
    refused = {
        "append to a number": ([("retention.ms", APPEND, "5")], ErrorCode.invalid_request),
        "unknown key": ([("retention.mss", SET, "5")], ErrorCode.invalid_config),
        "bad value": ([("min.insync.replicas", SET, "0")], ErrorCode.invalid_request),
        "duplicate key": ([("retention.ms", SET, "5"), ("retention.ms", DELETE, None)], ErrorCode.invalid_request),
        "null value": ([("retention.ms", SET, None)], ErrorCode.invalid_request),
        "unknown codec": ([("compression.type", SET, "brotli")], ErrorCode.invalid_request),
        "compaction lags crossed": ([("min.compaction.lag.ms", SET, "10"), ("max.compaction.lag.ms", SET, "5")],
                                    ErrorCode.invalid_request),
    }
    for case, (ops, code) in refused.items():
        assert alter(h, TOPIC, "orders", ops).error_code == code, case
    assert describe(h, TOPIC, "orders")["cleanup.policy"].value == "compact"
    assert alter(h, TOPIC, "missing", [("retention.ms", SET, "5")]).error_code == ErrorCode.unknown_topic_or_partition
    assert alter(h, BROKER, "1", [("broker.id", SET, "2")]).error_code == ErrorCode.invalid_request
    assert alter(h, BROKER, "2", [("num.io.threads", SET, "2")]).error_code == ErrorCode.invalid_request


def test_describe_reports_sources_and_synonyms_in_precedence_order():
    h = Harness(**{"log.segment.bytes": "5000000"})
    h.create("orders", configs={"retention.ms": "1000"})
    topic = describe(h, TOPIC, "orders")
    assert (topic["retention.ms"].value, topic["retention.ms"].config_source) == ("1000", 1)
    assert (topic["segment.bytes"].value, topic["segment.bytes"].config_source) == ("5000000", 4)
    assert [(s.name, s.value, s.source) for s in topic["segment.bytes"].synonyms] == [
        ("log.segment.bytes", "5000000", 4), ("log.segment.bytes", "1073741824", 5)]
    assert (topic["min.insync.replicas"].value, topic["min.insync.replicas"].config_source) == ("1", 5)
    assert len(topic) == 28 and not any(c.read_only for c in topic.values())
    assert describe(h, TOPIC, "orders", synonyms=False)["segment.bytes"].synonyms == ()

    broker = describe(h, BROKER, "1")
    assert broker["broker.id"].read_only and not broker["log.retention.ms"].read_only
    assert broker["log.segment.bytes"].config_source == 4
    # the cluster default, then this broker's own entry, each over the one below
    assert alter(h, BROKER, "", [("log.segment.bytes", SET, "6000000")]).error_code == ErrorCode.none
    assert alter(h, BROKER, "1", [("log.segment.bytes", SET, "7000000")]).error_code == ErrorCode.none
    notify(h)
    broker = describe(h, BROKER, "1")
    assert [(s.name, s.value, s.source) for s in broker["log.segment.bytes"].synonyms] == [
        ("log.segment.bytes", "7000000", 2), ("log.segment.bytes", "6000000", 3),
        ("log.segment.bytes", "5000000", 4), ("log.segment.bytes", "1073741824", 5)]
    assert h.config["log.segment.bytes"] == 7000000
    assert h.broker.partitions[("orders", 0)].log.config.segment_bytes == 7000000
    default = describe(h, BROKER, "")
    assert list(default) == ["log.segment.bytes"] and default["log.segment.bytes"].value == "6000000"


def test_a_dynamic_broker_entry_another_tool_wrote_is_applied_without_its_bad_keys():
    h = Harness()
    h.zk.execute([Create("/config/brokers/<default>", json.dumps({"version": 1, "config": {
        "log.retention.ms": "5000", "broker.id": "7", "num.partitions": "many"}}).encode()),
        Create("/config/changes/config_change_", b'{"version":2,"entity_path":"brokers/<default>"}', sequential=True)])
    notify(h)
    assert h.config["log.retention.ms"] == 5000 and h.config["broker.id"] == 1 and h.config["num.partitions"] == 1


def test_message_timestamp_difference_max_ms_refuses_a_batch_too_far_from_the_broker_clock():
    h = Harness()
    h.create("clock", configs={"message.timestamp.difference.max.ms": "60000"})
    h.produce("clock", make_batch([b"late"], timestamp_ms=h.now - 120_000))
    late = h.response(0, 7).responses[0].partition_responses[0]
    assert late.error_code == ErrorCode.invalid_timestamp
    h.produce("clock", make_batch([b"now"], timestamp_ms=h.now - 1000))
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none


def delete_records(c: SimCluster, broker: int, topic: str, offset: int, timeout_ms: int = 1000):
    body = {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}],
            "timeout": timeout_ms}
    return c.call(broker, 21, 2, body, within_ms=timeout_ms + 500).topics[0].partitions[0]


def test_delete_records_answers_once_every_live_replica_moved_its_log_start_offset():
    c = SimCluster((1, 2, 3), latency_ms=1)
    create(c, "d", [1, 2, 3])
    for i in range(5):
        assert produce(c, 1, "d", [b"v%d" % i]).error_code == ErrorCode.none
    c.advance(600)
    done = delete_records(c, 1, "d", 3)
    assert (done.error_code, done.low_watermark) == (ErrorCode.none, 3)
    assert [c.partition(b, "d").log.log_start_offset for b in (1, 2, 3)] == [3, 3, 3]
    assert delete_records(c, 1, "d", 99).error_code == ErrorCode.offset_out_of_range
    assert delete_records(c, 2, "d", 4).error_code == ErrorCode.not_leader_or_follower
    c.pause(3)                          # alive, but it fetches no more: the leader cannot see it move
    late = delete_records(c, 1, "d", 4, timeout_ms=300)
    assert (late.error_code, late.low_watermark) == (ErrorCode.request_timed_out, 3)
    assert c.partition(1, "d").log.log_start_offset == 4


def test_delete_records_of_a_compacted_topic_is_a_policy_violation():
    c = SimCluster((1,))
    create(c, "table", [1], configs={"cleanup.policy": "compact"})
    create(c, "both", [1], configs={"cleanup.policy": "compact,delete"})
    for topic in ("table", "both"):
        c.request(1, 0, 7, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": bytes(keyed_batch(
                [(b"k%d" % i, b"v%d" % i) for i in range(3)]))}]}]}, "producer")
        c.advance(10)
        assert c.response(1, 0, 7, "producer").responses[0].partition_responses[0].error_code == ErrorCode.none
    refused = delete_records(c, 1, "table", 2)
    assert (refused.error_code, refused.low_watermark) == (ErrorCode.policy_violation, -1)
    assert c.partition(1, "table").log.log_start_offset == 0
    assert delete_records(c, 1, "both", 2).error_code == ErrorCode.none
    assert c.partition(1, "both").log.log_start_offset == 2


def test_a_follower_starting_again_at_a_log_start_offset_inside_a_batch_catches_up():
    """DeleteRecords moved the log start offset into a batch (offsets 6-8, start 7) while broker 3
    was down, below it. Back, broker 3 starts its log again at the leader's log start offset and
    fetches from there; the leader answers with the whole batch, which begins below it. Before,
    the follower refused that batch on every fetch and never rejoined the ISR; now its empty log
    starts at the batch's base offset instead (Kafka's KAFKA-6975)."""
    c = SimCluster((1, 2, 3), latency_ms=1, **{"replica.lag.time.max.ms": "10000"})
    create(c, "d", [1, 2, 3])
    assert produce(c, 1, "d", [b"a0", b"a1", b"a2"]).error_code == ErrorCode.none
    c.advance(600)
    c.crash(3, lose_unflushed=False)
    for i in range(3):
        assert produce(c, 1, "d", [b"b%d_%d" % (i, j) for j in range(3)], within_ms=20000).error_code == \
            ErrorCode.none
    assert delete_records(c, 1, "d", 7, timeout_ms=100).error_code == ErrorCode.request_timed_out   # 3 is down
    c.start(3)
    c.advance(5000)
    assert set(c.state("d").isr) == {1, 2, 3}
    assert [c.partition(b, "d").log.log_start_offset for b in (1, 2, 3)] == [7, 7, 7]
    assert c.log_bytes(3, "d") == c.log_bytes(1, "d")
    assert produce(c, 1, "d", [b"c"]).error_code == ErrorCode.none
    c.advance(600)
    assert c.log_bytes(3, "d") == c.log_bytes(1, "d")


def elect_unclean(c: SimCluster, topic: str):
    body = {"election_type": 1, "topic_partitions": [{"topic": topic, "partitions": [0]}], "timeout": 1000}
    return c.call(c.controller_id, 43, 2, body).replica_election_results[0].partition_result[0]


def test_unclean_elect_leaders_gives_an_offline_partition_a_leader_outside_its_isr():
    c, acked = isolated_leader_with_an_isr_of_one(unclean=False)
    assert c.state("z").leader == -1
    result = elect_unclean(c, "z")
    assert result.error_code == ErrorCode.none, result
    c.advance(1000)
    assert c.state("z").leader in (3, 4)
    assert elect_unclean(c, "z").error_code == ErrorCode.election_not_needed


def test_enabling_unclean_election_on_the_topic_elects_its_offline_partition_at_once():
    c, acked = isolated_leader_with_an_isr_of_one(unclean=False)
    assert c.state("z").leader == -1
    body = {"resources": [{"resource_type": TOPIC, "resource_name": "z", "configs": [
        {"name": "unclean.leader.election.enable", "config_operation": SET, "value": "true"}]}],
        "validate_only": False}
    assert c.call(3, 44, 1, body).responses[0].error_code == ErrorCode.none
    c.advance(1000)
    assert c.state("z").leader in (3, 4)


def test_retention_deletes_nothing_from_a_compact_only_topic():
    h = Harness(**{"log.retention.check.interval.ms": "1000"})
    h.create("table", configs={"segment.bytes": "100", "retention.ms": "1", "cleanup.policy": "compact"})
    for i in range(5):
        h.produce("table", keyed_batch([(b"key%d" % i, b"row%d" % i * 20)], timestamp_ms=h.now))
        h.response(0, 7)
    log = h.broker.partitions[("table", 0)].log
    assert len(log.segments) > 3
    h.tick(5000)
    assert log.log_start_offset == 0
    alter(h, TOPIC, "table", [("cleanup.policy", SET, "delete")])
    notify(h)
    h.tick(5000)
    assert log.log_start_offset > 0


def stored_batches(h: Harness, topic: str):
    from strandline.protocol.records import iter_batches, iter_records

    log = h.broker.partitions[(topic, 0)].log
    data = log.read(log.log_start_offset, 1 << 30, max_offset=log.log_end_offset)
    return [(header.compression, [r.value for r in iter_records(data, pos, header)])
            for pos, header in iter_batches(data)]


def test_compression_type_makes_the_leader_recompress_batches_of_another_codec():
    h = Harness()
    h.create("z", configs={"compression.type": "gzip"})
    for codec in (0, 3, 1):                  # none and lz4 are recompressed; gzip is kept as sent
        h.produce("z", make_batch([b"a%d" % codec, b"b" * 300], compression=codec, producer_id=5,
                                  producer_epoch=0, base_sequence=2 * [0, 3, 1].index(codec)))
        assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none
    assert stored_batches(h, "z") == [(1, [b"a0", b"b" * 300]), (1, [b"a3", b"b" * 300]), (1, [b"a1", b"b" * 300])]
    # the producer's sequence survives: a retry of the last batch is answered as a duplicate
    h.produce("z", make_batch([b"a1", b"b" * 300], compression=1, producer_id=5, producer_epoch=0, base_sequence=4))
    duplicate = h.response(0, 7).responses[0].partition_responses[0]
    assert (duplicate.error_code, duplicate.base_offset) == (ErrorCode.none, 4)
    alter(h, TOPIC, "z", [("compression.type", SET, "uncompressed")])
    notify(h)
    h.produce("z", make_batch([b"plain"], compression=4))
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none
    assert stored_batches(h, "z")[-1] == (0, [b"plain"])


def test_a_batch_that_cannot_be_decompressed_is_refused_when_recompressing():
    import struct

    from strandline.protocol.records import compute_crc

    h = Harness()
    h.create("z", configs={"compression.type": "zstd"})
    batch = make_batch([b"x" * 200], compression=1)
    batch[70:80] = b"\xff" * 10                            # garbage inside the gzip stream
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    h.produce("z", batch)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
    assert stored_batches(h, "z") == []


def test_acls_are_answered_as_by_a_kafka_without_an_authorizer_and_log_dir_moves_are_checked():
    h = Harness()
    h.create("orders")
    acls = h.call(29, 2, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                          "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    assert acls.error_code == ErrorCode.security_disabled
    created = h.call(30, 2, {"creations": [{"resource_type": 2, "resource_name": "orders", "resource_pattern_type": 3,
                                            "principal": "User:x", "host": "*", "operation": 3,
                                            "permission_type": 3}]})
    assert [r.error_code for r in created.results] == [ErrorCode.security_disabled]

    def move(path: str) -> ErrorCode:
        resp = h.call(34, 2, {"dirs": [{"path": path, "topics": [{"name": "orders", "partitions": [0]}]}]})
        return resp.results[0].partitions[0].error_code
    assert move("/data/logs") == ErrorCode.none
    assert move("/elsewhere") == ErrorCode.log_dir_not_found
    dirs = h.call(35, 4, {"topics": None}).results
    assert [(d.log_dir, [t.name for t in d.topics]) for d in dirs] == [("/data/logs", ["orders"])]


def test_list_offsets_v11_answers_the_tiered_storage_timestamps_as_kafka_without_it():
    h = Harness()
    h.create("o")
    for i in range(3):
        h.produce("o", make_batch([b"r%d" % i]))
        h.response(0, 7)

    def offset(ts: int) -> int:
        resp = h.call(2, 11, {"replica_id": -1, "isolation_level": 0, "timeout": 1000, "topics": [
            {"name": "o", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]})
        return resp.topics[0].partitions[0].offset
    assert [offset(ts) for ts in (-1, -2, -4, -5, -6)] == [3, 0, 0, -1, -1]
    meta = h.call(3, 13, {"topics": None, "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    assert meta.error_code == ErrorCode.none and [t.name for t in meta.topics] == ["o"]


def test_create_partitions_with_fewer_live_brokers_than_replicas_is_refused_and_changes_nothing():
    c = SimCluster((1, 2, 3), latency_ms=1)
    create(c, "g", [1, 2, 3])
    c.crash(3)
    c.advance(20_000)
    body = {"topics": [{"name": "g", "count": 2, "assignments": None}], "timeout": 1000, "validate_only": False}
    result = c.call(c.controller_id, 37, 3, body).results[0]
    assert result.error_code == ErrorCode.invalid_replication_factor, result
    [res] = c.zk.execute([GetData("/brokers/topics/g")])
    assert list(json.loads(res.data)["partitions"]) == ["0"]


@pytest.mark.parametrize("read", ["/config/changes/", "/config/topics/m", "/config/brokers/"])
def test_a_config_read_zookeeper_did_not_answer_is_made_again(read):
    """A broker reads each change notification, then the entity it names: a read whose answer is
    lost is made again (as Kafka's ZooKeeper client resends it), or that broker keeps the old
    value (here the topic's ``min.insync.replicas``, which decides what acks=all waits for, or the
    cluster-wide ``log.retention.ms``) until the next change."""
    c = SimCluster((1, 2, 3), latency_ms=1)
    create(c, "m", [1, 2, 3])
    faults = iter(["not-applied"])
    c.zk_fault = lambda b, ops: next(faults, None) if b == 2 and any(
        isinstance(op, GetData) and read in op.path for op in ops) else None
    if read == "/config/brokers/":
        rtype, name, key, value = BROKER, "", "log.retention.ms", 1000
    else:
        rtype, name, key, value = TOPIC, "m", "min.insync.replicas", 3
    body = {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
        {"name": key, "config_operation": SET, "value": str(value)}]}], "validate_only": False}
    assert c.call(1, 44, 1, body).responses[0].error_code == ErrorCode.none
    c.advance(5000)
    assert next(faults, "used") == "used"
    cores = [c.brokers[b].core for b in (1, 2, 3)]
    assert [core.config.topic_value(core.metadata.topics["m"].configs, key) if rtype == TOPIC
            else core.config[key] for core in cores] == [value] * 3


def test_a_dynamic_broker_config_takes_custom_keys_as_kafka_does():
    """Kafka accepts keys that are no broker config in a dynamic broker config (its
    customPropsAllowed): they are stored and left unused. A read-only key is still refused."""
    h = Harness()
    assert alter(h, BROKER, "1", [("cleanup.policy", SET, "delete"), ("log.retention.ms", SET, "5000")]) \
        .error_code == ErrorCode.none
    assert alter(h, BROKER, "", [("my.custom.key", SET, "x")]).error_code == ErrorCode.none
    [entity] = h.zk.execute([GetData("/config/brokers/1")])
    assert json.loads(entity.data)["config"] == {"cleanup.policy": "delete", "log.retention.ms": "5000"}
    notify(h)
    assert h.config["log.retention.ms"] == 5000
    assert alter(h, BROKER, "1", [("my.key", SET, "y"), ("broker.id", SET, "2")]).error_code == \
        ErrorCode.invalid_request


def test_describe_configs_lists_custom_broker_keys_as_kafka_does():
    """A custom entry of a dynamic broker config is described as Kafka describes a key it has no
    type for: sensitive (no value), read-only, type UNKNOWN, with the layer it is set in."""
    h = Harness()
    assert alter(h, BROKER, "1", [("cleanup.policy", SET, "delete")]).error_code == ErrorCode.none
    assert alter(h, BROKER, "", [("my.custom.key", SET, "x"), ("log.retention.ms", SET, "5000")]).error_code \
        == ErrorCode.none
    notify(h)
    broker = describe(h, BROKER, "1")
    for name, source in (("cleanup.policy", 2), ("my.custom.key", 3)):
        entry = broker[name]
        assert (entry.value, entry.is_sensitive, entry.read_only, entry.config_source, entry.config_type) == \
            (None, True, True, source, 0), entry
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [(name, None, source)]
    assert broker["log.retention.ms"].value == "5000"
    default = describe(h, BROKER, "")
    assert sorted(default) == ["log.retention.ms", "my.custom.key"]
    assert (default["my.custom.key"].value, default["my.custom.key"].config_source) == (None, 3)


def test_a_config_notification_whose_reads_kept_failing_is_read_once_zookeeper_answers():
    """Two change notifications, each first read in its own watch event, both unanswered; the
    second's read then succeeds first. The first must still be read: no retry may skip it as
    already seen."""
    h = Harness()
    h.create("a")
    h.create("b")
    manager = h.broker.dynamic_config
    reads: list = []                        # (token, paths) of the notification reads sent

    def send(effects):
        for effect in effects:
            if isinstance(effect, ZkRequest) and any("/config/changes/" in op.path for op in effect.ops):
                reads.append((effect.token, [op.path for op in effect.ops]))
            else:
                h.run([effect])

    def answer(token_paths, lost: bool):
        token, paths = token_paths
        results = [OpResult(ZkError.CONNECTION_LOSS)] * len(paths) if lost else h.zk.execute(
            [GetData(p) for p in paths])
        send(h.broker.outbox.on_zk_result(token, results, h.now))

    for name, value in (("a", "1000"), ("b", "2000")):
        assert alter(h, TOPIC, name, [("retention.ms", SET, value)]).error_code == ErrorCode.none
    first, second = children(h)
    send(manager.on_config_changes([first], h.now))            # the first watch event
    send(manager.on_config_changes([first, second], h.now))    # the second, before the first's answer
    answer(reads.pop(0), lost=True)
    h.now += 500
    answer(reads.pop(0), lost=True)
    lost_again = 1                      # the first's retry is lost once more, the second's is answered
    for _ in range(10):
        h.now += 500
        send(h.broker.outbox.tick(h.now))
        while reads:
            token, paths = reads.pop(0)
            lose = paths == [f"/config/changes/{first}"] and lost_again > 0
            lost_again -= lose
            answer((token, paths), lost=lose)
    assert h.broker.partitions[("a", 0)].log.config.retention_ms == 1000
    assert h.broker.partitions[("b", 0)].log.config.retention_ms == 2000


def test_a_custom_key_set_for_the_cluster_and_a_broker_is_described_for_the_cluster_as_a_default():
    """Describing the cluster-wide default entity shows the default layer only, even when the
    broker's own layer holds the same entries (the layers were told apart by value)."""
    h = Harness()
    assert alter(h, BROKER, "", [("my.custom.key", SET, "x")]).error_code == ErrorCode.none
    assert alter(h, BROKER, "1", [("my.custom.key", SET, "x")]).error_code == ErrorCode.none
    notify(h)
    entry = describe(h, BROKER, "")["my.custom.key"]
    assert entry.config_source == 3 and [(s.name, s.source) for s in entry.synonyms] == [("my.custom.key", 3)]
