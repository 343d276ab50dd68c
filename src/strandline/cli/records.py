"""``strandline records delete`` (like ``kafka-delete-records``) and ``strandline offsets get``
(like ``kafka-get-offsets``), each asked of the partition's leader."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

from kio.schema.errors import ErrorCode

from strandline.cli.topics import metadata
from strandline.errors import StrandlineError
from strandline.cli.client_config import KafkaConnection
from strandline.cli.answers import refusal
from strandline.cli.parsers import Subcommands

LIST_OFFSETS, DELETE_RECORDS = 2, 21
EARLIEST, LATEST = -2, -1


def add_parsers(sub: Subcommands, bootstrap_default: str, bootstrap_help: str) -> None:
    records = sub.add_parser("records", help="delete a partition's records below an offset")
    rsub = records.add_subparsers(dest="action", required=True)
    delete = rsub.add_parser("delete", help="move the partition's log start offset up (DeleteRecords)")
    delete.add_argument("--topic", required=True, help="the topic")
    delete.add_argument("--partition", type=int, required=True, help="the partition")
    delete.add_argument("--before", type=int, required=True, metavar="OFFSET",
                        help="delete every record below this offset (-1: below the high watermark)")
    offsets = sub.add_parser("offsets", help="partition offsets by time")
    osub = offsets.add_subparsers(dest="action", required=True)
    get = osub.add_parser("get", help="each partition's offset at a time (like kafka-get-offsets)")
    get.add_argument("--topic", required=True, help="the topic")
    get.add_argument("--time", default="latest", help="earliest, latest, or an ISO-8601 time (UTC unless given)")
    for p in (delete, get):
        p.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
    records.set_defaults(func=run_records)
    offsets.set_defaults(func=run_offsets)


def _leaders(bootstrap: str, topic: str) -> dict[int, str]:
    """Each partition's leader address."""
    with KafkaConnection(bootstrap) as conn:
        resp = metadata(conn, [topic])
    brokers: dict[int, str] = {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers}
    t = resp.topics[0]
    code = ErrorCode(int(t.error_code))
    if code is not ErrorCode.none:
        raise refusal(code, f"topic {topic}")
    return {p.partition_index: brokers.get(int(p.leader_id), "") for p in t.partitions}


def run_records(args: argparse.Namespace) -> int:
    leaders = _leaders(args.bootstrap_server, args.topic)
    if args.partition not in leaders:
        raise StrandlineError(f"topic {args.topic} has no partition {args.partition}")
    if not leaders[args.partition]:
        raise StrandlineError(f"{args.topic}-{args.partition} has no leader right now; try again")
    with KafkaConnection(leaders[args.partition]) as conn:
        resp = conn.request(DELETE_RECORDS, 1, {"topics": [{"name": args.topic, "partitions": [
            {"partition_index": args.partition, "offset": args.before}]}], "timeout": 30000})
    part = resp.topics[0].partitions[0]
    code = ErrorCode(int(part.error_code))
    if code is not ErrorCode.none:
        raise StrandlineError(f"cannot delete records of {args.topic}-{args.partition} before {args.before}: "
                              f"{code.name.upper()}")
    print(f"{args.topic}-{args.partition}: records below offset {part.low_watermark} deleted "
          f"(low watermark {part.low_watermark}).")
    return 0


def _timestamp(text: str) -> int:
    if text == "earliest":
        return EARLIEST
    if text == "latest":
        return LATEST
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise StrandlineError(f"--time {text!r}: expected earliest, latest or an ISO-8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def run_offsets(args: argparse.Namespace) -> int:
    timestamp = _timestamp(args.time)
    leaders = _leaders(args.bootstrap_server, args.topic)
    status = 0
    for index, address in sorted(leaders.items()):
        if not address:
            print(f"{args.topic}:{index}:no leader")
            status = 1
            continue
        with KafkaConnection(address) as conn:
            resp = conn.request(LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": args.topic, "partitions": [{"partition_index": index, "timestamp": timestamp}]}]})
        part = resp.topics[0].partitions[0]
        code = ErrorCode(int(part.error_code))
        if code is not ErrorCode.none:
            print(f"{args.topic}:{index}:{code.name.upper()}")
            status = 1
        else:
            print(f"{args.topic}:{index}:{part.offset}")
    return status
