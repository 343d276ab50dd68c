"""The broker core driven directly: requests in, effects out; ZooKeeper and disk in memory.

ACK-1 (acks 0/1/all answers), ACK-2 (min.insync.replicas refusal), REP-2 (long-poll fetch woken
by an append), REP-4 (reads below the HW), EPO-5 (leader-epoch fencing), PRO-1 (idempotence).
"""

from __future__ import annotations

import io
import random
import struct

import pytest
from strandline.protocol.old_versions import request_schema as load_request_schema, response_schema as load_response_schema  # kio's, and the versions kio lacks
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from strandline.broker.broker import Broker
from strandline.core.config import BrokerConfig
from strandline.coordination.cluster_state import read_cluster_state
from strandline.core.effects import BrokerSend, Close, LogLine, ReadClusterState, Send, ZkRequest
from strandline.coordination.znodes import BrokerInfo
from strandline.log.manager import LogManager
from strandline.protocol.api import build
from strandline.sim.disk import MemoryDisk
from strandline.sim.zookeeper import MemoryZooKeeper
from tests.unit.batches import make_batch


class Harness:
    def __init__(self, brokers=(1,), **overrides):
        props = {"broker.id": "1", "zookeeper.connect": "zk:2181", "log.dirs": "/data/logs"}
        props.update(overrides)
        self.config = BrokerConfig.from_properties(props)
        self.disk = MemoryDisk()
        self.now = 1_700_000_000_000
        logs = LogManager(self.disk, ["/data/logs"], self.config.log_config())
        logs.startup(self.now)
        self.broker = Broker(self.config, logs, rng=random.Random(1), now_ms=self.now)
        self.zk = MemoryZooKeeper()
        self.brokers = {b: BrokerInfo(b, "127.0.0.1", 9091 + b) for b in brokers}
        self.correlation = 0
        self.sent: dict[int, list] = {}
        self.logs: list[LogLine] = []
        self.broker_sent: list[BrokerSend] = []
        self.run(self.broker.load_metadata("cluster", self.brokers, {}, 1, 1, self.now))

    def run(self, effects):
        """Carry out effects like the shell; ZooKeeper answers at once."""
        pending = list(effects)
        while pending:
            effect = pending.pop(0)
            if isinstance(effect, ZkRequest):
                pending.extend(self.broker.on_zk_result(
                    effect.token, self.zk.run(effect.ops, effect.transaction), self.now))
            elif isinstance(effect, ReadClusterState):      # the controller reads the cluster
                _, topics = read_cluster_state(self.zk)
                # every broker registered with the epoch the harness's broker has until registered (-1)
                epochs = {b: -1 for b in self.brokers}
                pending.extend(self.broker.on_zk_result(effect.token, (self.brokers, topics, epochs, None), self.now))
            elif isinstance(effect, (Send, Close)):
                self.sent.setdefault(effect.conn_id, []).append(effect)
            elif isinstance(effect, LogLine):
                self.logs.append(effect)
            elif isinstance(effect, BrokerSend):         # to other brokers: kept, not delivered
                self.broker_sent.append(effect)

    def frame(self, api_key, version, body) -> bytes:
        """A request frame (without its size prefix) with the next correlation id."""
        self.correlation += 1
        req_cls = load_request_schema(api_key, version)
        header_cls = req_cls.__header_schema__
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, build(header_cls, {
            "request_api_key": api_key, "request_api_version": version,
            "correlation_id": self.correlation, "client_id": "test"}))
        entity_writer(req_cls)(buf, build(req_cls, body))
        return buf.getvalue()

    def request(self, api_key, version, body, conn=1):
        self.run(self.broker.handle_request(conn, self.frame(api_key, version, body), self.now))
        return self.correlation

    def response(self, api_key, version, conn=1):
        effect = self.sent[conn].pop(0)
        assert isinstance(effect, Send), effect
        frame = b"".join(bytes(b) for b in effect.buffers)
        size = struct.unpack_from(">i", frame)[0]
        assert size == len(frame) - 4
        resp_cls = load_response_schema(api_key, version)
        _, header_size = entity_reader(resp_cls.__header_schema__)(frame, 4)
        body, body_size = entity_reader(resp_cls)(frame, 4 + header_size)
        assert 4 + header_size + body_size == len(frame)
        return body

    def call(self, api_key, version, body, conn=1):
        self.request(api_key, version, body, conn)
        return self.response(api_key, version, conn)

    def tick(self, advance_ms):
        self.now += advance_ms
        self.run(self.broker.tick(self.now))

    def create(self, name, partitions=1, configs=None):
        resp = self.call(19, 4, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                             "assignments": [], "configs": [
                                                 {"name": k, "value": v} for k, v in (configs or {}).items()]}],
                                 "timeout": 1000, "validate_only": False})
        return resp.topics[0]

    def produce(self, topic, records, acks=1, partition=0, conn=1, version=7):
        return self.request(0, version, self.produce_body(topic, records, acks, partition), conn)

    @staticmethod
    def produce_body(topic, records, acks=1, partition=0):
        return {"transactional_id": None, "acks": acks, "timeout": 1000,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": bytes(records)}]}]}

    def fetch_body(self, topic, offset, max_wait=0, min_bytes=1, epoch=-1):
        return {"replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": epoch,
                                                            "fetch_offset": offset, "log_start_offset": -1,
                                                            "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""}


@pytest.fixture
def h():
    return Harness()


def test_create_topic_writes_kafka_znodes(h):
    """CTL-1, CTL-5: assignment, config and partition state znodes; leader = first live replica."""
    assert h.create("orders", partitions=3).error_code == ErrorCode.none
    assert "/brokers/topics/orders" in h.zk.nodes
    assert "/config/topics/orders" in h.zk.nodes
    for p in range(3):
        assert b'"leader":1' in h.zk.nodes[f"/brokers/topics/orders/partitions/{p}/state"][0].replace(b" ", b"")
    assert h.create("orders").error_code == ErrorCode.topic_already_exists
    assert h.create("bad name!").error_code == ErrorCode.invalid_topic_exception


def test_replication_factor_above_live_brokers_is_refused(h):
    """ASG-1"""
    resp = h.call(19, 4, {"topics": [{"name": "rf", "num_partitions": 1, "replication_factor": 3,
                                      "assignments": [], "configs": []}], "timeout": 1000, "validate_only": False})
    assert resp.topics[0].error_code == ErrorCode.invalid_replication_factor


def test_ack_1_produce_and_fetch_round_trip(h):
    """ACK-1, REP-4: offsets assigned from 0; a consumer fetch returns the stored batch bytes."""
    h.create("t")
    batch = make_batch([b"a", b"b", b"c"])
    h.produce("t", batch)
    part = h.response(0, 7).responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.none and part.base_offset == 0
    h.produce("t", make_batch([b"d"]))
    assert h.response(0, 7).responses[0].partition_responses[0].base_offset == 3
    fetched = h.call(1, 11, h.fetch_body("t", 0)).responses[0].partitions[0]
    assert fetched.high_watermark == 4
    stored = bytearray(batch)
    stored[0:8] = (0).to_bytes(8, "big")
    assert fetched.records[:len(batch)][12:] != b"" and fetched.records[16:len(batch)] == bytes(batch)[16:]


def test_acks_0_gets_no_response_and_errors_close_the_connection(h):
    """ACK-1: acks=0 is never answered; a failure closes the connection so the client refreshes."""
    h.create("t")
    h.produce("t", make_batch([b"x"]), acks=0)
    assert h.sent[1] == [Send(1, [])]
    bad = make_batch([b"x"])
    bad[-1] ^= 1
    h.produce("t", bad, acks=0, conn=2)
    assert isinstance(h.sent[2][0], Close)


def test_ack_2_min_insync_replicas_refuses_acks_all(h):
    h.create("safe", configs={"min.insync.replicas": "2"})
    h.produce("safe", make_batch([b"x"]), acks=-1)
    part = h.response(0, 7).responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.not_enough_replicas
    h.produce("safe", make_batch([b"x"]), acks=1)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none


def test_rep_2_long_poll_fetch_is_answered_by_an_append(h):
    h.create("t")
    h.request(1, 11, h.fetch_body("t", 0, max_wait=500), conn=5)
    assert 5 not in h.sent
    h.produce("t", make_batch([b"wake"]))
    h.response(0, 7)
    fetched = h.response(1, 11, conn=5).responses[0].partitions[0]
    assert fetched.error_code == ErrorCode.none and len(fetched.records) > 0


def test_rep_2_long_poll_fetch_expires_empty(h):
    h.create("t")
    h.request(1, 11, h.fetch_body("t", 0, max_wait=500), conn=5)
    h.tick(499)
    assert 5 not in h.sent
    h.tick(1)
    assert h.response(1, 11, conn=5).responses[0].partitions[0].records in (b"", None)


def test_epo_5_fetch_with_stale_or_future_leader_epoch_is_fenced(h):
    h.create("t")
    current = h.broker.partitions[("t", 0)].leader_epoch
    h.broker.partitions[("t", 0)].leader_epoch = current + 2
    assert h.call(1, 11, h.fetch_body("t", 0, epoch=current + 1)).responses[0].partitions[0].error_code == \
        ErrorCode.fenced_leader_epoch
    assert h.call(1, 11, h.fetch_body("t", 0, epoch=current + 3)).responses[0].partitions[0].error_code == \
        ErrorCode.unknown_leader_epoch


def test_pro_1_idempotent_retry_is_deduplicated(h):
    h.create("t")
    resp = h.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                          "producer_id": -1, "producer_epoch": -1})
    pid = resp.producer_id
    assert resp.error_code == ErrorCode.none and pid >= 0
    first = make_batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0)
    h.produce("t", first)
    assert h.response(0, 7).responses[0].partition_responses[0].base_offset == 0
    h.produce("t", first)
    retry = h.response(0, 7).responses[0].partition_responses[0]
    assert retry.error_code == ErrorCode.none and retry.base_offset == 0
    gap = make_batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=5)
    h.produce("t", gap)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == \
        ErrorCode.out_of_order_sequence_number
    assert h.broker.partitions[("t", 0)].log.log_end_offset == 2


def test_list_offsets_earliest_latest_and_by_timestamp(h):
    h.create("t")
    for i in range(3):
        h.produce("t", make_batch([b"x"] * 2, timestamp_ms=1000 * (i + 1)))
        h.response(0, 7)
    offsets = [h.call(2, 4, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": t}]}]}).topics[0].partitions[0].offset
        for t in (-2, -1, 2000, 9999)]
    assert offsets == [0, 6, 2, -1]


def test_metadata_auto_creates_topics(h):
    resp = h.call(3, 8, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True,
                         "include_cluster_authorized_operations": False,
                         "include_topic_authorized_operations": False})
    topic = resp.topics[0]
    assert topic.error_code == ErrorCode.none and len(topic.partitions) == 1
    assert topic.partitions[0].leader_id == 1


def test_metadata_answers_a_failed_auto_creation_with_the_creations_error():
    """As Kafka's auto-creation: a topic the broker tried and failed to create is answered with
    the creation's error; UNKNOWN_TOPIC_OR_PARTITION would tell the client that auto-creation is off."""
    h = Harness(brokers=())
    resp = h.call(3, 8, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True,
                         "include_cluster_authorized_operations": False,
                         "include_topic_authorized_operations": False})
    assert resp.topics[0].error_code == ErrorCode.broker_not_available


def test_delete_topic_removes_znodes_and_log(h):
    h.create("gone")
    resp = h.call(20, 4, {"topic_names": ["gone"], "timeout": 1000})
    assert resp.responses[0].error_code == ErrorCode.none
    assert not any(p.startswith("/brokers/topics/gone") for p in h.zk.nodes)
    assert ("gone", 0) not in h.broker.partitions


def restart_after_power_loss(h: Harness) -> Harness:
    """Every broker of the partition loses power at once: the disk keeps only what was fsynced."""
    topics = dict(h.broker.metadata.topics)
    h.disk.crash()
    again = Harness.__new__(Harness)
    again.config, again.disk, again.now, again.zk = h.config, h.disk, h.now + 1000, h.zk
    logs = LogManager(h.disk, ["/data/logs"], h.config.log_config())
    logs.startup(again.now)
    again.broker = Broker(h.config, logs, rng=random.Random(2), now_ms=again.now)
    again.correlation, again.sent, again.logs, again.brokers = 0, {}, [], {1: BrokerInfo(1, "127.0.0.1", 9092)}
    again.run(again.broker.load_metadata("cluster", again.brokers, topics, 1, 1, again.now))
    return again


def test_ack_3_and_loss_5_acks_do_not_wait_for_fsync_so_power_loss_loses_acknowledged_records(h):
    """ACK-3: an acknowledged write is in the page cache only. LOSS-5: when every replica loses
    power before the data reaches disk, acknowledged records are lost."""
    h.create("volatile")
    h.produce("volatile", make_batch([b"acked-1", b"acked-2"]), acks=-1)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none
    assert h.broker.partitions[("volatile", 0)].log.log_end_offset == 2
    after = restart_after_power_loss(h)
    assert after.broker.partitions[("volatile", 0)].log.log_end_offset == 0  # both acknowledged records lost


def test_dur_2_flush_on_ack_topics_survive_power_loss(h):
    """DUR-2: with flush.on.ack=true the broker fsyncs before answering, closing LOSS-5's hole."""
    h.create("durable", configs={"flush.on.ack": "true"})
    h.produce("durable", make_batch([b"acked-1", b"acked-2"]), acks=-1)
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.none
    after = restart_after_power_loss(h)
    partition = after.broker.partitions[("durable", 0)]
    assert partition.log.log_end_offset == 2
    fetched = after.call(1, 11, after.fetch_body("durable", 0)).responses[0].partitions[0]
    assert fetched.high_watermark == 2 and len(fetched.records) > 0


def test_dur_2_flush_on_ack_also_covers_the_brokers_own_writes(h):
    """DUR-2 for what the broker appends itself (transaction markers, ``__consumer_offsets``,
    ``__transaction_state``): flushed before it counts as written. Unflushed, a leader's power
    loss took back a commit marker the high watermark had passed (sim explore --config txn seed 4)."""
    from strandline.protocol.markers import build_marker

    h.create("durable-internal", configs={"flush.on.ack": "true"})
    answers = []
    h.run(h.broker.replica_manager.writes.append_internal(
        "durable-internal", 0, build_marker(7, 0, True, 0, h.now), 30000,
        lambda error, now_ms: answers.append(error) or [], h.now))
    assert answers == [ErrorCode.none]
    after = restart_after_power_loss(h)
    assert after.broker.partitions[("durable-internal", 0)].log.log_end_offset == 1


def test_retention_never_deletes_a_leaders_segments_above_its_high_watermark():
    """As Kafka's deletableSegments: retention (here by time, of records with old timestamps)
    deletes only segments below the high watermark. It ran without the high watermarks and
    deleted what the follower had not fetched yet (acks=all data not yet replicated), and moved
    the log start offset above the high watermark (a review finding)."""
    h = Harness(brokers=(1, 2), **{"log.retention.check.interval.ms": "1000"})
    resp = h.call(19, 4, {"topics": [{"name": "old", "num_partitions": 1, "replication_factor": 2,
                                      "assignments": [], "configs": [
                                          {"name": "retention.ms", "value": "1000"},
                                          {"name": "segment.bytes", "value": "300"}]}],
                          "timeout": 1000, "validate_only": False})
    assert resp.topics[0].error_code == ErrorCode.none
    partition = h.broker.partitions[("old", 0)]
    for _ in range(6):                                  # a day old: due for retention at once
        h.produce("old", make_batch([b"v" * 150], timestamp_ms=h.now - 86_400_000), acks=1)
    assert len(partition.log.segments) > 3 and partition.high_watermark == 0      # broker 2 fetched nothing
    h.tick(2000)
    assert partition.log.log_start_offset == 0 and partition.last_stable_offset() <= partition.high_watermark


def test_cli_1_metadata_names_the_leader_and_cli_2_a_follower_refuses_clients(h):
    """CLI-1: metadata says which broker leads each partition. CLI-2: produce and fetch sent to a
    replica that is not the leader get NOT_LEADER_OR_FOLLOWER, so clients refresh and retry."""
    h.create("routed", partitions=2)
    md = h.call(3, 8, {"topics": [{"name": "routed"}], "allow_auto_topic_creation": False,
                       "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
    assert [(p.partition_index, p.leader_id) for p in md.topics[0].partitions] == [(0, 1), (1, 1)]
    assert [(b.node_id, b.host, b.port) for b in md.brokers] == [(1, "127.0.0.1", 9092)]
    from strandline.coordination.metadata import LeaderAndIsr
    partition = h.broker.partitions[("routed", 0)]
    partition.make_follower(LeaderAndIsr(2, 1, (2, 1)), (2, 1))
    h.produce("routed", make_batch([b"x"]))
    assert h.response(0, 7).responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
    fetched = h.call(1, 11, h.fetch_body("routed", 0)).responses[0].partitions[0]
    assert fetched.error_code == ErrorCode.not_leader_or_follower


def test_the_high_watermark_checkpoint_is_not_written_before_a_partition_has_read_it():
    """A broker restarted after a SIGKILL can wait a whole ZooKeeper session before it registers
    and learns its partitions; meanwhile the 5 s checkpoint task wrote an empty
    replication-offset-checkpoint, erasing every high watermark before anything had read it. It
    starts once a partition has been opened (Kafka: at the first LeaderAndIsr)."""
    from strandline.core.effects import WriteCheckpoint
    from strandline.log import checkpoint

    disk = MemoryDisk()
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "zk:2181",
                                           "log.dirs": "/data/logs"})
    now = 1_700_000_000_000
    disk.makedirs("/data/logs")
    checkpoint.write_offsets(disk, "/data/logs/replication-offset-checkpoint", {("t", 0): 42})
    logs = LogManager(disk, ["/data/logs"], config.log_config())
    logs.startup(now)
    broker = Broker(config, logs, rng=random.Random(1), now_ms=now)

    def hw_writes(at_ms):
        return [e for e in broker.tick(at_ms) if isinstance(e, WriteCheckpoint)
                and e.path.endswith("replication-offset-checkpoint")]

    assert hw_writes(now + 5_000) == [] and hw_writes(now + 10_000) == []
    h = Harness()
    h.create("t")
    writes = []
    for _ in range(3):
        h.now += 5_000
        writes += [e for e in h.broker.tick(h.now) if isinstance(e, WriteCheckpoint)
                   and e.path.endswith("replication-offset-checkpoint")]
    assert writes
    assert writes[-1].content.startswith(b"0\n1\nt 0 ")


def test_a_deleted_log_has_its_checkpoint_entries_rewritten_at_the_next_tick():
    """Kafka checkpoints a log dir when it deletes a log: an entry left behind would apply to a log
    created again under the same name after a crash (a stale log start empties it)."""
    from strandline.core.effects import WriteCheckpoint

    disk = MemoryDisk()
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "zk:2181",
                                           "log.dirs": "/data/logs"})
    now = 1_700_000_000_000
    logs = LogManager(disk, ["/data/logs"], config.log_config())
    logs.startup(now)
    broker = Broker(config, logs, rng=random.Random(1), now_ms=now)
    logs.get_or_create_log("t", 0, now_ms=now)
    assert not any(isinstance(e, WriteCheckpoint) for e in broker.tick(now))
    logs.delete_log("t", 0)
    assert broker.next_deadline_ms() <= now
    written = {e.path.rsplit("/", 1)[1]: e.content for e in broker.tick(now) if isinstance(e, WriteCheckpoint)}
    assert written["recovery-point-offset-checkpoint"] == b"0\n0\n"
    assert written["log-start-offset-checkpoint"] == b"0\n0\n"
    assert not any(isinstance(e, WriteCheckpoint) for e in broker.tick(now + 1))
