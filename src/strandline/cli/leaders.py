"""``strandline leaders elect --preferred|--unclean [--topic T [--partition P]]``: preferred leader
election (CTL-10), or an unclean one for partitions without a leader (KIP-460)."""

from __future__ import annotations

import argparse
import sys

from kio.schema.errors import ErrorCode

from strandline.cli.topics import controller_address, metadata
from strandline.errors import StrandlineError
from strandline.cli.client_config import KafkaConnection
from strandline.cli.answers import refusal

ELECT_LEADERS = 43
PREFERRED, UNCLEAN = 0, 1


def run(args: argparse.Namespace) -> int:
    if args.partition is not None and not args.topic:
        raise StrandlineError("--partition needs --topic")
    election = UNCLEAN if args.unclean else PREFERRED
    with KafkaConnection(args.bootstrap_server) as conn:
        address = controller_address(conn)
        partitions = None
        if args.topic:
            topic = metadata(conn, [args.topic]).topics[0]
            if int(topic.error_code) != 0:
                raise refusal(topic.error_code, f"topic {args.topic}")
            indexes = sorted(p.partition_index for p in topic.partitions)
            if args.partition is not None:
                if args.partition not in indexes:
                    raise StrandlineError(f"topic {args.topic} has no partition {args.partition}")
                indexes = [args.partition]
            partitions = [{"topic": args.topic, "partitions": indexes}]
    with KafkaConnection(address) as conn:
        resp = conn.request(ELECT_LEADERS, 1, {"election_type": election, "topic_partitions": partitions,
                                               "timeout": 30000})
    if int(resp.error_code) != 0:
        raise refusal(resp.error_code, "election refused")
    status = 0
    moved = 0
    for topic in sorted(resp.replica_election_results, key=lambda t: t.topic):
        for p in sorted(topic.partition_result, key=lambda p: p.partition_id):
            code = ErrorCode(int(p.error_code))
            if code is ErrorCode.none:
                moved += 1
                print(f"{topic.topic}-{p.partition_id}: " + ("has a leader again (unclean election)" if election
                                                             else "led by its preferred replica"))
            elif code is ErrorCode.election_not_needed:
                print(f"{topic.topic}-{p.partition_id}: " + ("already has a leader" if election
                                                             else "already led by its preferred replica"))
            else:
                status = 1
                print(f"{topic.topic}-{p.partition_id}: {code.name.upper()}"
                      + (f": {p.error_message}" if p.error_message else ""), file=sys.stderr)
    if partitions is None and not resp.replica_election_results:
        print("Every partition has a leader." if election else "Every partition is led by its preferred replica.")
    return status
