"""The ``strandline`` command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from strandline.broker.config import ConfigError, load_broker_config
from strandline.errors import StrandlineError

#: The brokers of `strandline up` (and `make run`) with its default base port: any one that is up will do.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
BOOTSTRAP_HELP = "host:port[,host:port...]: the first broker that accepts the connection is asked (default: %(default)s)"


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None


def cmd_zookeeper(args: argparse.Namespace) -> int:
    from strandline.runtime.zookeeper import main_zookeeper

    return main_zookeeper(args.data_dir, args.port) or 0


def cmd_broker(args: argparse.Namespace) -> int:
    from strandline.runtime.broker_main import run_broker

    config = load_broker_config(args.config, args.override or [], reader=_read_text)
    return run_broker(config)


def cmd_up(args: argparse.Namespace) -> int:
    from strandline.broker.config import parse_override, BROKER_KEYS
    from strandline.runtime.cluster import run_up

    for item in args.override or []:
        key, _ = parse_override(item)
        if key not in BROKER_KEYS:
            raise ConfigError(f"Unknown configuration key {key!r}")
        BROKER_KEYS[key].parse(_)
    if args.brokers < 1:
        raise ConfigError("--brokers must be at least 1")
    return run_up(args.brokers, args.data_dir, args.base_port, args.zookeeper, args.zookeeper_port,
                  args.override or [], args.console_port)


def cmd_topics(args: argparse.Namespace) -> int:
    from strandline.cli import topics

    return topics.run(args)


def cmd_cluster(args: argparse.Namespace) -> int:
    from strandline.runtime.cluster import cluster_action

    return cluster_action(args.action, args.broker_id, args.data_dir)


def cmd_leaders(args: argparse.Namespace) -> int:
    from strandline.cli import leaders

    return leaders.run(args)


def cmd_groups(args: argparse.Namespace) -> int:
    from strandline.cli import groups

    return groups.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="strandline", description="A Kafka-compatible, replicated commit log.")
    sub = parser.add_subparsers(dest="command", required=True)

    zk = sub.add_parser("zookeeper", help="run a single-node ZooKeeper from the jars in the pyspark wheel")
    zk.add_argument("--data-dir", required=True)
    zk.add_argument("--port", type=int, default=2181)
    zk.set_defaults(func=cmd_zookeeper)

    broker = sub.add_parser("broker", help="run one broker")
    broker.add_argument("--config", help="a server.properties file")
    broker.add_argument("--override", action="append", metavar="KEY=VALUE", help="set a configuration key")
    broker.set_defaults(func=cmd_broker)

    up = sub.add_parser("up", help="run ZooKeeper and a cluster of brokers in the foreground")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--data-dir", default="./data")
    up.add_argument("--base-port", type=int, default=9092)
    up.add_argument("--zookeeper", metavar="HOST:PORT", help="use this ZooKeeper instead of an embedded one")
    up.add_argument("--zookeeper-port", type=int, default=2181, help="port of the embedded ZooKeeper")
    up.add_argument("--override", action="append", metavar="KEY=VALUE", help="configuration for every broker")
    up.add_argument("--console-port", type=int, default=8080,
                    help="port of the web console (another free port if it is taken; 0: no console)")
    up.set_defaults(func=cmd_up)

    cluster = sub.add_parser("cluster", help="kill, stop or start again a broker of a running `strandline up`")
    cluster.add_argument("action", choices=("kill", "stop", "start"),
                         help="kill: SIGKILL; stop: SIGTERM (controlled shutdown); start: start it again")
    cluster.add_argument("broker_id", type=int, metavar="BROKER_ID")
    cluster.add_argument("--data-dir", default="./data")
    cluster.set_defaults(func=cmd_cluster)

    leaders = sub.add_parser("leaders", help="leader elections")
    lsub = leaders.add_subparsers(dest="action", required=True)
    elect = lsub.add_parser("elect", help="move leadership back to each partition's preferred (first) replica, "
                                          "or give a leaderless partition a leader even out of its ISR (--unclean)")
    kind = elect.add_mutually_exclusive_group(required=True)
    kind.add_argument("--preferred", action="store_true")
    kind.add_argument("--unclean", action="store_true", help="may lose acknowledged writes (SPEC LOSS-*)")
    elect.add_argument("--topic", help="only this topic's partitions (default: all)")
    elect.add_argument("--partition", type=int, help="only this partition (with --topic)")
    elect.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP)
    leaders.set_defaults(func=cmd_leaders)

    groups = sub.add_parser("groups", help="list and describe consumer groups, reset their offsets")
    gsub = groups.add_subparsers(dest="action", required=True)
    glist = gsub.add_parser("list")
    gdesc = gsub.add_parser("describe")
    gdesc.add_argument("group")
    greset = gsub.add_parser("reset-offsets", help="commit new offsets for a group whose consumers are stopped")
    greset.add_argument("group")
    greset.add_argument("--topic", required=True)
    to = greset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-datetime", metavar="ISO-8601", help="e.g. 2026-11-22T10:00:00 (UTC unless an offset is given)")
    greset.add_argument("--execute", action="store_true", help="commit them (without it: a dry run, as Kafka's tool)")
    for p in (glist, gdesc, greset):
        p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP)
    groups.set_defaults(func=cmd_groups)

    from strandline.cli import lab, sim
    sim.add_parser(sub)
    lab.add_parser(sub)

    topics = sub.add_parser("topics", help="create, list, describe and delete topics")
    tsub = topics.add_subparsers(dest="action", required=True)
    for action in ("create", "list", "describe", "delete"):
        p = tsub.add_parser(action)
        p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP)
        if action in ("create", "delete"):
            p.add_argument("--topic", required=True)
        if action == "describe":
            p.add_argument("--topic")
        if action == "create":
            p.add_argument("--partitions", type=int, default=-1)
            p.add_argument("--replication-factor", type=int, default=-1)
            p.add_argument("--config", action="append", metavar="KEY=VALUE")
    alter = tsub.add_parser("alter", help="add partitions to a topic (like kafka-topics --alter)")
    alter.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP)
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, required=True, help="the new partition count (only grows)")
    topics.set_defaults(func=cmd_topics)

    from strandline.cli import configs, console, partitions, records
    configs.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    console.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    partitions.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    records.add_parsers(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except (ConfigError, StrandlineError) as exc:
        print(f"strandline {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
