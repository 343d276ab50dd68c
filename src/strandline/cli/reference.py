"""``strandline reference``: Apache Kafka itself, fetched on demand, to run next to Strandline.

``fetch`` brings a Kafka line's jars from Maven Central into ``~/.cache/strandline`` (once);
``up`` runs a real Kafka cluster in the foreground, as ``strandline up`` runs Strandline's;
``tool`` runs one of Kafka's tools, unchanged, as its script in Kafka's ``bin/`` would.
"""

from __future__ import annotations

import argparse
import os
import sys

from strandline.cli.parsers import Subcommands

KAFKA_HELP = "the Kafka line: 3.9 (the last with ZooKeeper) or 4 (4.x, KRaft; the newest its pom pins)"


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("reference", help="Apache Kafka itself, next to Strandline: fetch its jars, run a real Kafka "
                                         "cluster, or run one of Kafka's tools")
    rsub = p.add_subparsers(dest="action", required=True)

    fetch = rsub.add_parser("fetch", help="fetch a Kafka line's jars from Maven Central (once) and print where "
                                          "they are")
    fetch.add_argument("--kafka", required=True, help=KAFKA_HELP)

    up = rsub.add_parser("up", help="run a real Kafka cluster in the foreground until Ctrl-C")
    up.add_argument("--kafka", required=True, help=KAFKA_HELP)
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (ids 1..N)")
    up.add_argument("--data-dir", help="where the brokers (and the embedded ZooKeeper) keep their data "
                                       "(default: ./kafka-<version>-data)")
    up.add_argument("--base-port", type=int, default=19092,
                    help="broker N listens on base port + N - 1; on KRaft its controller on base port + brokers + "
                         "N - 1")
    up.add_argument("--zookeeper", metavar="HOST:PORT", help="Kafka 3.9: use this ZooKeeper (e.g. a Strandline "
                    "cluster's) instead of an embedded one; the brokers keep to the chroot /kafka-3.9")
    up.add_argument("--zookeeper-port", type=int, default=12181, help="Kafka 3.9: port of the embedded ZooKeeper")
    up.add_argument("--override", action="append", metavar="KEY=VALUE",
                    help="a line for every broker's server.properties (Kafka's keys)")

    tool = rsub.add_parser("tool", help="run one of Kafka's tools (the name of its script without .sh), e.g. "
                                        "`strandline reference tool --kafka 4 kafka-topics --bootstrap-server "
                                        "127.0.0.1:9092 --list`")
    tool.add_argument("--kafka", required=True, help=KAFKA_HELP)
    tool.add_argument("name", help="kafka-topics, kafka-configs, kafka-dump-log, ...")
    tool.add_argument("args", nargs=argparse.REMAINDER, help="the tool's own arguments")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strandline.errors import StrandlineError
    from strandline.reference import ensure_kafka

    if args.action == "fetch":
        dist = ensure_kafka(args.kafka)
        print(f"kafka={dist.version}")
        print(f"classpath={dist.classpath}")
        return 0
    if args.action == "tool":
        dist = ensure_kafka(args.kafka)
        cmd = dist.tool_command(args.name, args.args)
        sys.stdout.flush()
        os.execv(cmd[0], cmd)       # the tool's own exit status, output and signals
    if args.action == "up":
        from strandline.reference.cluster import run_reference_up

        from strandline.reference import normalize_line

        if args.brokers < 1:
            raise StrandlineError("--brokers must be at least 1")
        if args.zookeeper and normalize_line(args.kafka) != "3.9":
            raise StrandlineError("--zookeeper is for Kafka 3.9: Kafka 4.x runs on KRaft, without ZooKeeper")
        return run_reference_up(args.kafka, args.brokers, args.data_dir, args.base_port, args.zookeeper,
                                args.zookeeper_port, args.override or [])
    raise StrandlineError(f"unknown action {args.action}")
