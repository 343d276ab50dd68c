"""``strandline partitions reassign --generate|--execute|--verify|--cancel`` (like
``kafka-reassign-partitions``): plan a move of topics over a list of brokers, start it, follow
it, cancel it. Plans are Kafka's JSON: ``{"version":1,"partitions":[{"topic","partition","replicas"}]}``.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from kio.schema.errors import ErrorCode

from strandline.cli.topics import controller_address, metadata
from strandline.controller.assignment import InvalidReplicationFactor, assign_replicas
from strandline.errors import StrandlineError
from strandline.cli.client_config import KafkaConnection
from strandline.cli.answers import refusal
from strandline.cli.parsers import Subcommands
from typing import Any

ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46


def add_parser(sub: Subcommands, bootstrap_default: str, bootstrap_help: str) -> None:
    partitions = sub.add_parser("partitions", help="move partitions' replicas between brokers")
    psub = partitions.add_subparsers(dest="action", required=True)
    p = psub.add_parser("reassign", help="plan, start, follow or cancel a reassignment (like kafka-reassign-partitions)")
    p.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true", help="print the current assignment and a plan over --broker-list")
    mode.add_argument("--execute", action="store_true", help="start the moves of --reassignment-json-file")
    mode.add_argument("--verify", action="store_true", help="show whether each move of the file is done")
    mode.add_argument("--cancel", action="store_true", help="cancel the moves of the file still in progress")
    p.add_argument("--topics", help="--generate: the topics to spread, comma-separated")
    p.add_argument("--broker-list", help="--generate: the brokers to spread them over, e.g. 1,2,3")
    p.add_argument("--replication-factor", type=int, help="--generate: a new replication factor (default: unchanged)")
    p.add_argument("--reassignment-json-file", help="the plan (Kafka's JSON format)")
    partitions.set_defaults(func=run)


def _plan_json(assignment: dict[tuple[str, int], list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(assignment.items())]})


def _read_plan(path: str | None) -> dict[tuple[str, int], list[int]]:
    if not path:
        raise StrandlineError("--reassignment-json-file is required")
    try:
        plan = json.loads(Path(path).read_text())
        return {(str(e["topic"]), int(e["partition"])): [int(b) for b in e["replicas"]] for e in plan["partitions"]}
    except OSError as exc:
        raise StrandlineError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise StrandlineError(f"{path} is not a reassignment plan ({{\"version\":1,\"partitions\":[{{\"topic\","
                              f"\"partition\",\"replicas\"}}]}}): {exc}") from None


def _current(conn: KafkaConnection, topics: list[str]) -> dict[tuple[str, int], list[int]]:
    found: dict[tuple[str, int], list[int]] = {}
    for t in metadata(conn, topics).topics:
        code = ErrorCode(int(t.error_code))
        if code is not ErrorCode.none:
            raise refusal(code, f"topic {t.name}")
        for p in t.partitions:
            found[(t.name, p.partition_index)] = list(p.replica_nodes)
    return found


def run(args: argparse.Namespace) -> int:
    with KafkaConnection(args.bootstrap_server) as conn:
        if args.generate:
            return _generate(conn, args)
        plan = _read_plan(args.reassignment_json_file)
        address = controller_address(conn)
        current = _current(conn, sorted({t for t, _ in plan}))
    with KafkaConnection(address) as conn:
        if args.verify:
            return _verify(conn, plan, current)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), replicas in sorted(plan.items()):
            by_topic.setdefault(topic, []).append({"partition_index": index,
                                                   "replicas": None if args.cancel else replicas})
        resp = conn.request(ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": [
            {"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    if int(resp.error_code) != 0:
        raise refusal(resp.error_code, "reassignment refused")
    failed = 0
    for t in resp.responses:
        for p in t.partitions:
            code = ErrorCode(int(p.error_code))
            if code is not ErrorCode.none:
                failed += 1
                print(f"{t.name}-{p.partition_index}: {code.name.upper()}" + (f": {p.error_message}"
                                                                            if p.error_message else ""))
    if args.execute:
        print("Current partition replica assignment\n" + _plan_json({k: current[k] for k in plan if k in current}))
        print(f"Started the reassignment of {len(plan) - failed} partition(s)" + (f"; {failed} refused" if failed else ""))
    else:
        print(f"Cancelled the reassignment of {len(plan) - failed} partition(s)" + (f"; {failed} refused" if failed else ""))
    return 1 if failed else 0


def _generate(conn: KafkaConnection, args: argparse.Namespace) -> int:
    if not args.topics or not args.broker_list:
        raise StrandlineError("--generate needs --topics and --broker-list")
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    try:
        brokers = sorted({int(b) for b in args.broker_list.split(",") if b.strip()})
    except ValueError:
        raise StrandlineError(f"--broker-list {args.broker_list!r}: expected broker ids such as 1,2,3") from None
    current = _current(conn, topics)
    proposed: dict[tuple[str, int], list[int]] = {}
    rng = random.Random()
    for topic in topics:
        indexes = sorted(i for t, i in current if t == topic)
        rf = args.replication_factor or len(current[(topic, indexes[0])])
        try:
            plan = assign_replicas(brokers, len(indexes), rf, rng.randrange(len(brokers)), rng.randrange(len(brokers)))
        except InvalidReplicationFactor as exc:
            raise StrandlineError(f"topic {topic}: {exc}") from None
        for index in indexes:
            proposed[(topic, index)] = plan[index]
    print("Current partition replica assignment\n" + _plan_json(current))
    print("Proposed partition reassignment configuration\n" + _plan_json(proposed))
    return 0


def _verify(conn: KafkaConnection, plan: dict[tuple[str, int], list[int]], current: dict[tuple[str, int], list[int]]) -> int:
    resp = conn.request(LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000, "topics": None})
    moving = {(t.name, p.partition_index) for t in resp.topics for p in t.partitions}
    status = 0
    for key, replicas in sorted(plan.items()):
        name = f"{key[0]}-{key[1]}"
        if key in moving:
            print(f"Reassignment of partition {name} is still in progress.")
            status = 1
        elif current.get(key) == replicas:
            print(f"Reassignment of partition {name} is completed.")
        else:
            print(f"There is no active reassignment of partition {name}, but its replicas are {current.get(key)} "
                  f"rather than {replicas}.")
            status = 1
    return status
