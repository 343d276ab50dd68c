"""``strandline topics create|list|describe|delete`` over the Kafka protocol."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v10.response import MetadataResponse

from strandline.core.config import parse_override
from strandline.coordination.znodes import uuid_to_base64
from strandline.errors import StrandlineError
from strandline.cli.answers import NOT_FOUND, error_code, refusal
from strandline.cli.client_config import KafkaConnection

METADATA, LIST_OFFSETS, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DESCRIBE_CONFIGS = 3, 2, 19, 20, 37, 32
CONSUMER, DEBUG_REPLICA = -1, -2
TOPIC_RESOURCE, DYNAMIC_TOPIC_CONFIG = 2, 1


def metadata(conn: KafkaConnection, topics: list[str] | None) -> MetadataResponse:
    body = {"topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False}
    answer: MetadataResponse = conn.request(METADATA, 10, body)
    return answer


def list_offset(address: str, topic: str, partition: int, replica_id: int) -> int:
    """The partition's HW (consumer) or LEO (debug replica id) from its leader; -1 if unreachable."""
    try:
        with KafkaConnection(address, timeout_s=5) as conn:
            resp = conn.request(LIST_OFFSETS, 2, {
                "replica_id": replica_id, "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
    except StrandlineError:
        return -1
    part = resp.topics[0].partitions[0]
    return int(part.offset) if error_code(part.error_code) is ErrorCode.none else -1


def topic_overrides(conn: KafkaConnection, names: list[str]) -> dict[str, str]:
    """Each topic's own configs (set at creation or with ``configs --alter``) as ``k=v,k=v`` in
    name order, as ``kafka-topics --describe`` prints them after ``Configs:``; one DescribeConfigs."""
    if not names:
        return {}
    resp = conn.request(DESCRIBE_CONFIGS, 1, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": None} for name in names],
        "include_synonyms": False})
    return {result.resource_name: ",".join(f"{c.name}={c.value}" for c in sorted(result.configs, key=lambda c: c.name)
                                           if int(c.config_source) == DYNAMIC_TOPIC_CONFIG)
            for result in resp.results if error_code(result.error_code) is ErrorCode.none}


def controller_address(conn: KafkaConnection) -> str:
    """Topics are created and deleted by the controller; other brokers answer NOT_CONTROLLER."""
    resp = metadata(conn, [])
    for b in resp.brokers:
        if b.node_id == resp.controller_id:
            return f"{b.host}:{b.port}"
    raise StrandlineError("no controller is known to the cluster right now; try again")


def leader_isr(address: str, topic: str, partition: int, fallback: list[int]) -> list[int]:
    """The ISR as the partition's leader knows it (it changes the ISR; others hear later)."""
    try:
        with KafkaConnection(address, timeout_s=5) as conn:
            for t in metadata(conn, [topic]).topics:
                for p in t.partitions:
                    if p.partition_index == partition and int(p.leader_id) >= 0:
                        return list(p.isr_nodes)
    except StrandlineError:
        pass      # the leader is down (its death is not yet noticed): show what the others know
    return fallback


def _done(result: Any, topic: str, action: str, done: str) -> int:
    """Report the controller's answer to ``action`` (e.g. "create topic t"): print ``done`` when
    it succeeded; raises StrandlineError on an error."""
    code = error_code(result.error_code)
    if code is not ErrorCode.none:
        raise refusal(code, f"topic {topic}" if code in NOT_FOUND else f"cannot {action}", result.error_message)
    print(done)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action in ("create", "delete", "alter"):
        with KafkaConnection(args.bootstrap_server) as conn:
            address = controller_address(conn)
    else:
        address = args.bootstrap_server
    with KafkaConnection(address) as conn:
        if args.action == "create":
            configs = [dict(zip(("name", "value"), parse_override(c, "--config"))) for c in (args.config or [])]
            resp = conn.request(CREATE_TOPICS, 4, {"topics": [{
                "name": args.topic, "num_partitions": args.partitions,
                "replication_factor": args.replication_factor, "assignments": [], "configs": configs}],
                "timeout": 30000, "validate_only": False})
            return _done(resp.topics[0], args.topic, f"create topic {args.topic}", f"Created topic {args.topic}.")
        if args.action == "alter":
            resp = conn.request(CREATE_PARTITIONS, 1, {"topics": [
                {"name": args.topic, "count": args.partitions, "assignments": None}],
                "timeout": 30000, "validate_only": False})
            return _done(resp.results[0], args.topic, f"add partitions to topic {args.topic}",
                         f"Topic {args.topic} now has {args.partitions} partitions.")
        if args.action == "delete":
            resp = conn.request(DELETE_TOPICS, 5, {"topic_names": [args.topic], "timeout": 30000})
            return _done(resp.responses[0], args.topic, f"delete topic {args.topic}", f"Deleted topic {args.topic}.")
        if args.action == "list":
            resp = metadata(conn, None)
            for topic in sorted(resp.topics, key=lambda t: t.name):
                print(topic.name)
            return 0
        resp = metadata(conn, [args.topic] if args.topic else None)
        overrides = topic_overrides(conn, sorted(t.name for t in resp.topics if error_code(t.error_code) is ErrorCode.none))
    return describe(args, resp, overrides)


FILTERS = (("under_replicated_partitions", "under_replicated"), ("unavailable_partitions", "offline"),
           ("under_min_isr_partitions", "under_min_isr"))


def describe(args: argparse.Namespace, resp: Any, overrides: dict[str, str]) -> int:
    """Kafka's ``kafka-topics --describe`` lines (the topic's own configs after ``Configs:``), with the HW, the leader's LEO and each replica's
    LEO and lag behind it (from the brokers' /status; from ListOffsets when it cannot be read), and
    for a compacted topic the leader's log cleaner state (last cleaned offset, dirty ratio).
    The filters print only the partitions they name, without the topic lines, as Kafka does."""
    from strandline.console.discovery import read_cluster

    try:
        view = read_cluster(args.bootstrap_server)
    except StrandlineError:
        view = None
    merged = {(p["topic"], p["partition"]): p for p in view["partitions"]} if view else {}
    wanted = [key for option, key in FILTERS if getattr(args, option, False)]
    if wanted and view is None:
        raise StrandlineError("cannot read the brokers' status to filter partitions")
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers}
    status = 0
    for topic in sorted(resp.topics, key=lambda t: t.name):
        code = error_code(topic.error_code)
        if code is not ErrorCode.none:
            error = refusal(code, f"topic {topic.name}")
            print(f"strandline topics: {error}", file=sys.stderr)
            status = max(status, error.exit_status)
            continue
        rf = len(topic.partitions[0].replica_nodes) if topic.partitions else 0
        if not wanted:
            print(f"Topic: {topic.name}\tTopicId: {uuid_to_base64(topic.topic_id)}\tPartitionCount: "
                  f"{len(topic.partitions)}\tReplicationFactor: {rf}\tConfigs: {overrides.get(topic.name, '')}")
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            seen = merged.get((topic.name, p.partition_index))
            if wanted and not (seen and any(seen[key] for key in wanted)):
                continue
            leader, isr, epoch = int(p.leader_id), list(p.isr_nodes), p.leader_epoch
            extra = leader_note = ""
            if seen is not None:
                leader, isr = seen["leader"], seen["isr"]
                hw, leo = _shown(seen["high_watermark"]), _shown(seen["log_end_offset"])
                if seen["leader_not_answering"]:
                    leader_note = " (not answering)"
                states = seen["replica_states"]
                extra = ("\tReplicaLEO: " + ",".join(f"{r['broker']}={_shown(r['log_end_offset'])}" for r in states)
                         + "\tReplicaLag: " + ",".join(f"{r['broker']}={_shown(r['lag'])}" for r in states))
                cleaner = seen.get("cleaner")
                if cleaner:
                    extra += (f"\tLastCleanedOffset: {cleaner['last_cleaned_offset']}"
                              f"\tDirtyRatio: {cleaner['dirty_ratio']:.2f}")
            else:
                hw = leo = "-"
                if leader in brokers:
                    isr = leader_isr(brokers[leader], topic.name, p.partition_index, isr)
                    hw = _shown(list_offset(brokers[leader], topic.name, p.partition_index, CONSUMER))
                    leo = _shown(list_offset(brokers[leader], topic.name, p.partition_index, DEBUG_REPLICA))
            print(f"\tTopic: {topic.name}\tPartition: {p.partition_index}"
                  f"\tLeader: {leader if leader >= 0 else 'none'}{leader_note}"
                  f"\tReplicas: {','.join(str(r) for r in p.replica_nodes)}"
                  f"\tIsr: {','.join(str(r) for r in isr)}\tLeaderEpoch: {epoch}"
                  f"\tHW: {hw}\tLEO: {leo}{extra}")
    return status


def _shown(value: int | None) -> str:
    """An offset as printed: ``-`` when it is not known (its broker does not answer)."""
    return "-" if value is None or value < 0 else str(value)
