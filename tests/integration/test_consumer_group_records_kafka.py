"""Kafka 4.x's own ``kafka-dump-log --offsets-decoder`` reads the consumer group records of the
KIP-848 protocol as Strandline writes them to ``__consumer_offsets``: every key type and field,
and the tombstones, as a segment of the topic's partition."""

from __future__ import annotations

import base64
import json

import pytest

from strandline.group.consumer import records as rec
from strandline.group.records import build_batch
from tests.integration.kafka_reference import dist, kafka_lines_or_skip
from strandline.group.consumer.heartbeat import HeartbeatRequest
from strandline.group.consumer.model import ClassicMemberMetadata
from tests.unit.group.consumer_clients import GROUP, Client, Harness

pytestmark = pytest.mark.integration

KAFKA = kafka_lines_or_skip(("4",))


def kafka_uuid(u) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def partitions(a) -> list[dict]:
    return [{"topicId": kafka_uuid(t), "partitions": sorted(a[t])} for t in sorted(a)]


def kafka_json(record: rec.Record) -> tuple[dict, dict | None]:
    """The record as kafka-dump-log prints it, written out from Kafka's schemas."""
    key, value = record
    data = {"groupId": key.group_id} | ({"memberId": key.member_id} if key.member_id is not None else {}) \
        | ({"regularExpression": key.regex} if key.regex is not None else {})
    printed_key = {"type": str(key.type), "data": data}
    match value:
        case None:
            return printed_key, None
        case rec.GroupEpochValue(epoch):
            fields: dict = {"epoch": epoch}
        case rec.TargetAssignmentEpochValue(epoch):
            fields = {"assignmentEpoch": epoch}
        case rec.PartitionMetadataValue(topics):
            fields = {"topics": [{"topicId": kafka_uuid(t.topic_id), "topicName": t.name, "numPartitions": t.partitions,
                                  "partitionMetadata": []} for t in topics]}
        case rec.MemberMetadataValue():
            fields = {"instanceId": value.instance_id, "rackId": value.rack_id, "clientId": value.client_id,
                      "clientHost": value.client_host, "subscribedTopicNames": list(value.subscribed_topic_names),
                      "subscribedTopicRegex": value.subscribed_topic_regex,
                      "rebalanceTimeoutMs": value.rebalance_timeout_ms, "serverAssignor": value.server_assignor}
            if value.classic is not None:              # tagged field 0: a member of the classic protocol
                fields["classicMemberMetadata"] = {
                    "sessionTimeoutMs": value.classic.session_timeout_ms,
                    "supportedProtocols": [{"name": n, "metadata": base64.b64encode(m).decode()}
                                           for n, m in value.classic.protocols]}
        case rec.TargetAssignmentMemberValue(assigned):
            fields = {"topicPartitions": partitions(assigned)}
        case rec.RegularExpressionValue():
            fields = {"topics": list(value.topics), "version": value.version, "timestamp": value.timestamp_ms}
        case rec.CurrentAssignmentValue():
            fields = {"memberEpoch": value.member_epoch, "previousMemberEpoch": value.previous_member_epoch,
                      "state": int(value.state), "assignedPartitions": partitions(value.assigned),
                      "partitionsPendingRevocation": partitions(value.pending_revocation)}
    return printed_key, {"version": "0", "data": fields}


def test_kafka_dump_log_decodes_a_groups_records_as_strandline_wrote_them(tmp_path):
    kafka = dist(KAFKA, "4")
    h = Harness()
    a, b = Client("a", assignor="range"), Client("b", instance_id="i-b")
    h.clients += [a, b]
    for client in (a, b, a, a, b):
        h.beat(client)
    regex = h.send(HeartbeatRequest(GROUP, "", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=(),
                                    subscribed_topic_regex="pay.*", topic_partitions=()))
    h.leave(Client("c", member_id=regex.member_id))           # the regular expression's tombstone too
    h.leave(b, epoch=-2)
    h.clients.remove(b)
    h.leave(a)
    # a member of the classic protocol (a group being upgraded), its metadata in tagged field 0
    classic = rec.MemberMetadataValue(None, None, "c", "/10.0.0.2", ("t",), None, 30000, None,
                                      ClassicMemberMetadata(45000, (("range", b"\x00\x01sub"), ("roundrobin", b""))))
    h.log.append(rec.encode((rec.Key(rec.MEMBER_METADATA, GROUP, "classic-1"), classic)))
    h.log.append(rec.encode((rec.Key(rec.MEMBER_METADATA, GROUP, "classic-1"), None)))
    segment = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    segment.write_bytes(build_batch(h.log, 1000))

    out = kafka.run_tool("kafka-dump-log", ["--offsets-decoder", "--files", str(segment)])
    assert out.returncode == 0, out.stderr
    printed = []
    for line in out.stdout.splitlines():
        if line.startswith("| offset:"):
            key, payload = line.split(" key: ", 1)[1].split(" payload: ", 1)
            printed.append((json.loads(key), None if payload == "<DELETE>" else json.loads(payload)))
    written = [rec.decode(k, v) for k, v in h.log]
    assert printed == [kafka_json(r) for r in written if r is not None]
    assert {k["type"] for k, _ in printed} == {"3", "4", "5", "6", "7", "8", "16"} and len(printed) == len(h.log)
