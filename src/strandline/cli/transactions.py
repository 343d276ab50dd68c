"""``strandline transactions list|describe``, in the manner of ``kafka-transactions``."""

from __future__ import annotations

import argparse
import struct
import time

from kio.schema.errors import ErrorCode

from strandline.cli.topics import metadata
from strandline.errors import StrandlineError
from strandline.cli.client_config import KafkaConnection
from strandline.cli.answers import error_code, refusal
from strandline.cli.parsers import Subcommands
from typing import TypedDict

FIND_COORDINATOR, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 10, 65, 66
TRANSACTION_KEY = 1


def add_parser(sub: Subcommands, bootstrap_default: str, bootstrap_help: str) -> None:
    txn = sub.add_parser("transactions", help="list and describe transactions (like kafka-transactions)")
    tsub = txn.add_subparsers(dest="action", required=True)
    listing = tsub.add_parser("list", help="every transactional id of every coordinator, with its state")
    listing.add_argument("--state", action="append", default=None,
                         help="only these states: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
                              "CompleteAbort (repeatable)")
    describe = tsub.add_parser("describe", help="one transactional id's state, as its coordinator has it")
    describe.add_argument("--transactional-id", required=True, help="the producer's transactional.id")
    for p in (listing, describe):
        p.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
    txn.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(args)
    return _describe(args)


def _list(args: argparse.Namespace) -> int:
    with KafkaConnection(args.bootstrap_server) as conn:
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata(conn, []).brokers}
    rows = []
    unreachable = []
    for broker_id, address in sorted(brokers.items()):
        try:
            with KafkaConnection(address, timeout_s=10) as conn:
                resp = conn.request(LIST_TRANSACTIONS, 0, {"state_filters": args.state or [],
                                                            "producer_id_filters": []})
        except (OSError, StrandlineError):
            unreachable.append(broker_id)
            continue
        if resp.unknown_state_filters:
            raise StrandlineError(f"unknown transaction state(s): {', '.join(resp.unknown_state_filters)}")
        for s in resp.transaction_states:
            rows.append((s.transactional_id, broker_id, s.producer_id, s.transaction_state))
    print(f"{'TransactionalId':30s} {'Coordinator':>11s} {'ProducerId':>10s} TransactionState")
    for transactional_id, coordinator, producer_id, state in sorted(rows):
        print(f"{transactional_id:30s} {coordinator:>11d} {producer_id:>10d} {state}")
    if unreachable:
        raise StrandlineError(f"broker(s) {', '.join(map(str, unreachable))} did not answer: the list is incomplete")
    return 0


def _describe(args: argparse.Namespace) -> int:
    with KafkaConnection(args.bootstrap_server) as conn:
        found = conn.request(FIND_COORDINATOR, 3, {"key": args.transactional_id, "key_type": TRANSACTION_KEY})
    if error_code(found.error_code) is not ErrorCode.none:
        raise refusal(found.error_code, f"no coordinator for transactional id {args.transactional_id}")
    with KafkaConnection(f"{found.host}:{found.port}") as conn:
        frame = conn.raw_request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [args.transactional_id]})
    [state] = _describe_response(frame)
    if error_code(state["error_code"]) is not ErrorCode.none:
        raise refusal(state["error_code"], f"transactional id {args.transactional_id}")
    start = state["start_ms"]
    duration = int(time.time() * 1000) - start if start >= 0 else -1
    partitions = ",".join(f"{t}-{p}" for t, ps in state["topics"] for p in ps) or "-"
    for label, value in (("CoordinatorId", found.node_id), ("TransactionalId", state["transactional_id"]),
                         ("ProducerId", state["producer_id"]), ("ProducerEpoch", state["producer_epoch"]),
                         ("TransactionState", state["state"]), ("TransactionTimeoutMs", state["timeout_ms"]),
                         ("CurrentTransactionStartTimeMs", start), ("TransactionDurationMs", duration),
                         ("TopicPartitions", partitions)):
        print(f"{label:30s} {value}")
    return 0


class _TxnState(TypedDict):
    """One transaction of a DescribeTransactions v0 answer."""

    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    topics: list[tuple[str, list[int]]]

def _describe_response(frame: bytes) -> list[_TxnState]:
    """DescribeTransactions v0 (flexible), read by hand: its start time is -1 when no transaction
    is open, which kio's timestamp reader refuses."""
    pos = 0

    def uvarint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            b = frame[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def fixed(fmt: str) -> int:
        nonlocal pos
        value: int
        (value,) = struct.unpack_from(fmt, frame, pos)
        pos += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = uvarint() - 1
        value = frame[pos:pos + n].decode()
        pos += n
        return value

    def tags() -> None:
        nonlocal pos
        for _ in range(uvarint()):
            uvarint()
            pos += uvarint()

    fixed(">i")                                 # correlation id
    tags()
    fixed(">i")                                 # throttle time
    states: list[_TxnState] = []
    for _ in range(uvarint() - 1):
        state: _TxnState = {"error_code": fixed(">h"), "transactional_id": string(), "state": string(),
                 "timeout_ms": fixed(">i"), "start_ms": fixed(">q"), "producer_id": fixed(">q"),
                 "producer_epoch": fixed(">h"), "topics": []}
        for _ in range(uvarint() - 1):
            topic = string()
            state["topics"].append((topic, [fixed(">i") for _ in range(uvarint() - 1)]))
            tags()
        tags()
        states.append(state)
    return states
