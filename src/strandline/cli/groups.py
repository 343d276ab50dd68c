"""``strandline groups list|describe|reset-offsets`` over the Kafka protocol."""

from __future__ import annotations

import argparse
import struct
import sys
from datetime import datetime, timezone
from typing import Any

from kio.schema.errors import ErrorCode

from strandline.cli.topics import metadata
from strandline.errors import Refused, StrandlineError
from strandline.cli.client_config import KafkaConnection
from strandline.cli.answers import error_code, refusal

LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS, LIST_GROUPS = 2, 8, 9, 10, 15, 16
API_VERSIONS, CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE = 18, 69, 77
EARLIEST, LATEST = -2, -1


def _coordinator(conn: KafkaConnection, group: str) -> str:
    resp = conn.request(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    if error_code(resp.error_code) is not ErrorCode.none:
        raise refusal(resp.error_code, f"no coordinator for group {group}")
    return f"{resp.host}:{resp.port}"


def _assigned_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """Partitions in a consumer protocol assignment (version, [topic, [partition]], user data)."""
    out: list[tuple[str, int]] = []
    try:
        pos = 2
        (topics,) = struct.unpack_from(">i", assignment, pos)
        pos += 4
        for _ in range(max(topics, 0)):
            (n,) = struct.unpack_from(">h", assignment, pos)
            topic = assignment[pos + 2:pos + 2 + n].decode()
            pos += 2 + n
            (count,) = struct.unpack_from(">i", assignment, pos)
            pos += 4
            for p in struct.unpack_from(f">{max(count, 0)}i", assignment, pos):
                out.append((topic, p))
            pos += 4 * max(count, 0)
    except (struct.error, UnicodeDecodeError):
        return []
    return out


def _offsets(bootstrap: str, partitions: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
    """ListOffsets at each partition's leader (EARLIEST, LATEST or a timestamp in ms)."""
    with KafkaConnection(bootstrap) as conn:
        meta = metadata(conn, sorted({t for t, _ in partitions}))
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}
    leaders: dict[tuple[str, int], int] = {(t.name, p.partition_index): int(p.leader_id) for t in meta.topics
                                           for p in t.partitions}
    result: dict[tuple[str, int], int] = {}
    for (topic, index) in partitions:
        leader = leaders.get((topic, index), -1)
        if leader not in brokers:
            result[(topic, index)] = -1
            continue
        with KafkaConnection(brokers[leader]) as conn:
            resp = conn.request(LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": index, "timestamp": timestamp}]}]})
        part = resp.topics[0].partitions[0]
        result[(topic, index)] = int(part.offset) if error_code(part.error_code) is ErrorCode.none else -1
    return result


def list_groups(bootstrap: str) -> int:
    with KafkaConnection(bootstrap) as conn:
        brokers = [f"{b.host}:{b.port}" for b in metadata(conn, []).brokers]
    names: set[tuple[str, str]] = set()
    for address in brokers:
        with KafkaConnection(address) as conn:
            resp = conn.request(LIST_GROUPS, 4, {"states_filter": []})
        names.update((g.group_id, g.group_state) for g in resp.groups)
    for name, state in sorted(names):
        print(f"{name}\t{state}")
    return 0


def _described(conn: KafkaConnection, api_key: int, version: int, group: str) -> Any | None:
    """The group as ConsumerGroupDescribe (KIP-848) or ShareGroupDescribe (KIP-932) tells it, when
    it is a group of that kind and the broker serves that API; None otherwise."""
    served = {int(k.api_key) for k in conn.request(API_VERSIONS, 0, {}).api_keys}
    if api_key not in served:
        return None
    desc = conn.request(api_key, version, {"group_ids": [group], "include_authorized_operations": False}).groups[0]
    return desc if error_code(desc.error_code) is ErrorCode.none else None


def _print_consumer_group(group: str, desc: Any, owners: dict[tuple[str, int], str]) -> None:
    print(f"Group: {group}\tState: {desc.group_state}\tProtocol: consumer/{desc.assignor_name}"
          f"\tMembers: {len(desc.members)}\tEpoch: {desc.group_epoch}")
    for m in desc.members:
        parts = [(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions]
        for tp in parts:
            owners[tp] = m.member_id
        shown = ",".join(f"{t}-{p}" for t, p in parts) or "-"
        subscribed = ",".join(m.subscribed_topic_names) + (f" /{m.subscribed_topic_regex}/"
                                                           if m.subscribed_topic_regex else "")
        print(f"\tMember: {m.member_id}\tClient: {m.client_id}\tHost: {m.client_host}\tEpoch: {m.member_epoch}"
              f"\tPartitions: {shown}\tSubscribed: {subscribed.strip() or '-'}"
              f"\tSpeaks: {'classic' if m.member_type == 0 else 'consumer'}")


def _print_share_group(group: str, desc: Any) -> None:
    """A share group's members and the partitions each reads (a partition may be read by many)."""
    print(f"Group: {group}\tState: {desc.group_state}\tProtocol: share/{desc.assignor_name}"
          f"\tMembers: {len(desc.members)}\tEpoch: {desc.group_epoch}")
    for m in desc.members:
        shown = ",".join(f"{t.topic_name}-{p}" for t in m.assignment.topic_partitions for p in t.partitions) or "-"
        print(f"\tMember: {m.member_id}\tClient: {m.client_id}\tHost: {m.client_host}\tEpoch: {m.member_epoch}"
              f"\tPartitions: {shown}\tSubscribed: {','.join(m.subscribed_topic_names) or '-'}")


def describe_group(bootstrap: str, group: str) -> int:
    with KafkaConnection(bootstrap) as conn:
        address = _coordinator(conn, group)
    with KafkaConnection(address) as conn:
        shared = _described(conn, SHARE_GROUP_DESCRIBE, 1, group)
        if shared is not None:
            _print_share_group(group, shared)
            return 0
        modern = _described(conn, CONSUMER_GROUP_DESCRIBE, 1, group)
        desc = conn.request(DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}).groups[0]
        fetched = conn.request(OFFSET_FETCH, 7, {"group_id": group, "topics": None, "require_stable": False})
    owners: dict[tuple[str, int], str] = {}
    if modern is not None:
        _print_consumer_group(group, modern, owners)
    elif error_code(desc.error_code) is not ErrorCode.none:
        raise refusal(desc.error_code, f"group {group}")
    else:
        print(f"Group: {group}\tState: {desc.group_state}\tProtocol: {desc.protocol_type}/{desc.protocol_data}"
              f"\tMembers: {len(desc.members)}")
    for m in desc.members if modern is None else ():
        parts = _assigned_partitions(bytes(m.member_assignment)) if desc.protocol_type == "consumer" else []
        for tp in parts:
            owners[tp] = m.member_id
        shown = ",".join(f"{t}-{p}" for t, p in parts) or "-"
        print(f"\tMember: {m.member_id}\tClient: {m.client_id}\tHost: {m.client_host}\tPartitions: {shown}")
    committed = {(t.name, p.partition_index): int(p.committed_offset) for t in fetched.topics for p in t.partitions}
    partitions = sorted(set(committed) | set(owners))
    ends = _offsets(bootstrap, partitions, LATEST) if partitions else {}
    for tp in partitions:
        offset = committed.get(tp, -1)
        end = ends.get(tp, -1)
        lag = end - offset if offset >= 0 and end >= 0 else "-"
        print(f"\tTopic: {tp[0]}\tPartition: {tp[1]}\tCommitted: {offset}\tHW: {end}\tLag: {lag}"
              f"\tMember: {owners.get(tp, '-')}")
    return 0


def reset_offsets(bootstrap: str, group: str, topic: str, target: str, when: str | None, execute: bool) -> int:
    with KafkaConnection(bootstrap) as conn:
        meta = metadata(conn, [topic])
        address = _coordinator(conn, group)
    t = meta.topics[0]
    if error_code(t.error_code) is not ErrorCode.none:
        raise refusal(t.error_code, f"topic {topic}")
    partitions: list[tuple[str, int]] = [(topic, p.partition_index)
                                         for p in sorted(t.partitions, key=lambda p: p.partition_index)]
    if target == "earliest":
        wanted = _offsets(bootstrap, partitions, EARLIEST)
    elif target == "latest":
        wanted = _offsets(bootstrap, partitions, LATEST)
    else:
        try:
            moment = datetime.fromisoformat(when or "")
        except ValueError:
            raise StrandlineError(f"--to-datetime: {when!r} is not an ISO 8601 date and time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        wanted = _offsets(bootstrap, partitions, int(moment.timestamp() * 1000))
        latest = _offsets(bootstrap, partitions, LATEST)
        wanted = {tp: (o if o >= 0 else latest[tp]) for tp, o in wanted.items()}   # after the last record
    with KafkaConnection(address) as conn:
        desc = conn.request(DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}).groups[0]
        if desc.group_state not in ("Empty", "Dead"):
            raise Refused(f"group {group} is {desc.group_state}: stop its consumers before resetting offsets")
        for (name, index), offset in wanted.items():
            print(f"{name}\t{index}\t{offset}")
        if not execute:
            print("(dry run: add --execute to commit these offsets)")
            return 0
        resp = conn.request(OFFSET_COMMIT, 7, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": i, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
                for (_, i), o in wanted.items() if o >= 0]}]})
    failed = [(p.partition_index, error_code(p.error_code).name) for tp in resp.topics for p in tp.partitions
              if error_code(p.error_code) is not ErrorCode.none]
    if failed:
        print(f"strandline groups: some offsets were not committed: {failed}", file=sys.stderr)
        return 1
    print(f"Offsets of group {group} on {topic} reset.")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        return list_groups(args.bootstrap_server)
    if args.action == "describe":
        return describe_group(args.bootstrap_server, args.group)
    target = "earliest" if args.to_earliest else "latest" if args.to_latest else "datetime"
    return reset_offsets(args.bootstrap_server, args.group, args.topic, target, args.to_datetime, args.execute)
