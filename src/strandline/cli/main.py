"""The ``strandline`` command."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

from strandline.core.config import load_broker_config
from strandline.core.config_key import ConfigError
from strandline.errors import StrandlineError
from strandline.cli.parsers import Parser

#: The brokers of `strandline up` (and `make run`) with its default base port: any one that is up will do.
DEFAULT_BOOTSTRAP = os.environ.get("STRANDLINE_BOOTSTRAP_SERVERS") or "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
DEFAULT_DATA_DIR = os.environ.get("STRANDLINE_DATA_DIR") or "./data"
BOOTSTRAP_HELP = ("host:port[,host:port...]: the first broker that accepts the connection is asked; environment: "
                  "STRANDLINE_BOOTSTRAP_SERVERS (default: %(default)s)")


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None


def cmd_zookeeper(args: argparse.Namespace) -> int:
    from strandline.launch.zookeeper import main_zookeeper

    return main_zookeeper(args.data_dir, args.port) or 0


def cmd_broker(args: argparse.Namespace) -> int:
    from strandline.runtime.broker_main import run_broker

    config = load_broker_config(args.config, args.override or [], reader=_read_text)
    return run_broker(config)


def cmd_up(args: argparse.Namespace) -> int:
    from strandline.core.config import parse_override, BROKER_KEYS
    from strandline.core.security_keys import listener_key
    from strandline.launch.up import run_up

    for item in args.override or []:
        key, _ = parse_override(item)
        per_listener = listener_key(key)
        if key not in BROKER_KEYS and per_listener is None:
            raise ConfigError(f"Unknown configuration key {key!r}")
        (BROKER_KEYS[key] if per_listener is None else per_listener[2]).parse(_)
    if args.brokers < 1:
        raise ConfigError("--brokers must be at least 1")
    racks = args.racks.split(",") if args.racks is not None else None
    if racks is not None and not all(r.strip() for r in racks):
        raise ConfigError(f"--racks {args.racks!r}: a rack name is empty (give names separated by commas)")
    if racks is not None and any(item.startswith("broker.rack=") for item in args.override or []):
        raise ConfigError("--racks and --override broker.rack=... both set the brokers' racks: give one")
    if args.first_broker_id < 0:
        raise ConfigError(f"--first-broker-id {args.first_broker_id}: a broker id is 0 or more")
    host = args.advertised_host
    if host is not None and (not host.strip() or any(c in host for c in " /:,")):
        raise ConfigError(f"--advertised-host {host!r}: give a host name or address, without a port")
    if host is not None and any(item.startswith("advertised.listeners=") for item in args.override or []):
        raise ConfigError("--advertised-host and --override advertised.listeners=... both set what the brokers "
                          "advertise: give one")
    return run_up(args.brokers, args.data_dir, args.base_port, args.zookeeper, args.zookeeper_port,
                  args.override or [], args.console_port, [r.strip() for r in racks] if racks else None,
                  args.first_broker_id, host, args.security, _secure_connections if args.security else None)


def _secure_connections(properties: Path) -> Callable[[str], Any]:
    """Connections to a broker of `up --security` with a client properties file it wrote."""
    from strandline.cli import client_config

    security, _ = client_config.load(str(properties))
    return lambda address: client_config.KafkaConnection(address, timeout_s=5.0, client_id="strandline",
                                                         security=security)


def cmd_topics(args: argparse.Namespace) -> int:
    from strandline.cli import topics

    return topics.run(args)


def cmd_cluster(args: argparse.Namespace) -> int:
    if args.action == "status":
        from strandline.cli import status

        return status.run(args)
    from strandline.launch.up import cluster_action

    if args.broker_id is None:
        raise StrandlineError(f"cluster {args.action} needs the broker's id")
    return cluster_action(args.action, args.broker_id, args.data_dir)


def cmd_leaders(args: argparse.Namespace) -> int:
    from strandline.cli import leaders

    return leaders.run(args)


def cmd_groups(args: argparse.Namespace) -> int:
    from strandline.cli import groups

    return groups.run(args)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("strandline")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="strandline", description="A Kafka-compatible, replicated commit log.",
                    epilog="Exit status: 0 done; 1 the command ran and what it checked or did failed (e.g. `cluster "
                           "status` found a problem); 2 bad usage, bad input or no connection.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    zk = sub.add_parser("zookeeper", help="run a single-node ZooKeeper from the jars in the pyspark wheel")
    zk.add_argument("--data-dir", required=True, help="where ZooKeeper keeps its data")
    zk.add_argument("--port", type=int, default=2181, help="client port")
    zk.set_defaults(func=cmd_zookeeper)

    broker = sub.add_parser("broker", help="run one broker")
    broker.add_argument("--config", help="a server.properties file")
    broker.add_argument("--override", action="append", metavar="KEY=VALUE", help="set a configuration key")
    broker.set_defaults(func=cmd_broker)

    up = sub.add_parser("up", help="run ZooKeeper and a cluster of brokers in the foreground")
    up.add_argument("--brokers", type=int, default=3, help="how many brokers")
    up.add_argument("--first-broker-id", type=int, default=1, metavar="N",
                    help="the brokers' ids are N, N+1, ... (Kafka's own test set-ups start at 0)")
    up.add_argument("--advertised-host", metavar="NAME",
                    help="the host name the brokers advertise to clients (default: 127.0.0.1); they listen on "
                         "127.0.0.1, so NAME must resolve there, e.g. localhost")
    up.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="where ZooKeeper and the brokers keep their data "
                    "(environment: STRANDLINE_DATA_DIR)")
    up.add_argument("--base-port", type=int, default=9092,
                    help="the Kth broker listens on base port + K - 1; its metrics on that + 1000")
    up.add_argument("--zookeeper", metavar="HOST:PORT", help="use this ZooKeeper instead of an embedded one")
    up.add_argument("--zookeeper-port", type=int, default=2181, help="port of the embedded ZooKeeper")
    up.add_argument("--override", action="append", metavar="KEY=VALUE", help="configuration for every broker")
    up.add_argument("--racks", metavar="RACK,RACK,...",
                    help="the Kth broker's broker.rack is the Kth name (the list repeats when shorter)")
    up.add_argument("--console-port", type=int, default=8080,
                    help="port of the web console (another free port if it is taken; 0: no console)")
    up.add_argument("--security", choices=("sasl_ssl", "ssl", "sasl_plaintext"),
                    help="a secured cluster: TLS (a CA and certificates made in DATA_DIR/security) and/or SASL "
                         "SCRAM-SHA-512, ACLs, users admin (a super user) and client, whose client properties "
                         "files (for --command-config) it prints")
    up.set_defaults(func=cmd_up)

    cluster = sub.add_parser("cluster", help="the cluster's health; kill, stop or start again a broker of a running "
                                             "`strandline up`")
    cluster.add_argument("action", choices=("status", "kill", "stop", "start"),
                         help="status: brokers, controller and partitions with a problem (exit status 1 when "
                              "unhealthy); kill: SIGKILL; stop: SIGTERM (controlled shutdown); start: start it again")
    cluster.add_argument("broker_id", type=int, metavar="BROKER_ID", nargs="?", help="the broker to kill, stop or start")
    cluster.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the data directory of `strandline up` "
                         "(environment: STRANDLINE_DATA_DIR)")
    cluster.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP.replace(
        " (default: %(default)s)", "") + " (status only)")
    cluster.set_defaults(func=cmd_cluster)

    leaders = sub.add_parser("leaders", help="leader elections")
    lsub = leaders.add_subparsers(dest="action", required=True)
    elect = lsub.add_parser("elect", help="move leadership back to each partition's preferred (first) replica, "
                                          "or give a leaderless partition a leader even out of its ISR (--unclean)")
    kind = elect.add_mutually_exclusive_group(required=True)
    kind.add_argument("--preferred", action="store_true", help="elect each partition's preferred (first) replica")
    kind.add_argument("--unclean", action="store_true", help="may lose acknowledged writes (SPEC LOSS-*)")
    elect.add_argument("--topic", help="only this topic's partitions (default: all)")
    elect.add_argument("--partition", type=int, help="only this partition (with --topic)")
    elect.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP)
    leaders.set_defaults(func=cmd_leaders)

    groups = sub.add_parser("groups", help="list and describe consumer groups, reset their offsets")
    gsub = groups.add_subparsers(dest="action", required=True)
    glist = gsub.add_parser("list")
    gdesc = gsub.add_parser("describe")
    gdesc.add_argument("group", help="the group id")
    greset = gsub.add_parser("reset-offsets", help="commit new offsets for a group whose consumers are stopped")
    greset.add_argument("group", help="the group id")
    greset.add_argument("--topic", required=True, help="the topic whose offsets to reset")
    to = greset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    to.add_argument("--to-latest", action="store_true", help="to each partition's high watermark")
    to.add_argument("--to-datetime", metavar="ISO-8601", help="e.g. 2026-11-22T10:00:00 (UTC unless an offset is given)")
    greset.add_argument("--execute", action="store_true", help="commit them (without it: a dry run, as Kafka's tool)")
    for p in (glist, gdesc, greset):
        p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP)
    groups.set_defaults(func=cmd_groups)

    from strandline.cli import lab, reference, sim
    sim.add_parser(sub)
    lab.add_parser(sub)
    reference.add_parser(sub)

    topics = sub.add_parser("topics", help="create, list, describe and delete topics")
    tsub = topics.add_subparsers(dest="action", required=True)
    described = {"create": "create a topic (like kafka-topics --create)", "list": "list the topics' names",
                 "describe": "partitions, leaders, replicas, ISR, HW and LEO (like kafka-topics --describe)",
                 "delete": "delete a topic (like kafka-topics --delete)"}
    for action in ("create", "list", "describe", "delete"):
        p = tsub.add_parser(action, help=described[action], description=described[action])
        p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP)
        if action in ("create", "delete"):
            p.add_argument("--topic", required=True, help="the topic")
        if action == "describe":
            p.add_argument("--topic", help="the topic to describe (default: every topic)")
            p.add_argument("--under-replicated-partitions", action="store_true",
                           help="only partitions whose ISR is smaller than their replica set")
            p.add_argument("--unavailable-partitions", action="store_true", help="only partitions without a live leader")
            p.add_argument("--under-min-isr-partitions", action="store_true",
                           help="only partitions whose ISR is below min.insync.replicas")
        if action == "create":
            p.add_argument("--partitions", type=int, default=-1, help="partition count (-1: the broker's num.partitions)")
            p.add_argument("--replication-factor", type=int, default=-1,
                           help="replicas per partition (-1: the broker's default.replication.factor)")
            p.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
    alter = tsub.add_parser("alter", help="add partitions to a topic (like kafka-topics --alter)")
    alter.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP)
    alter.add_argument("--topic", required=True, help="the topic")
    alter.add_argument("--partitions", type=int, required=True, help="the new partition count (only grows)")
    topics.set_defaults(func=cmd_topics)

    from strandline.cli import acls, bench, clients, configs, console, fuzz, partitions, records, transactions
    acls.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    transactions.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    bench.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    clients.add_parsers(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    configs.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    console.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    fuzz.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    partitions.add_parser(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    records.add_parsers(sub, DEFAULT_BOOTSTRAP, BOOTSTRAP_HELP)
    _add_command_config(parser)
    return parser


COMMAND_CONFIG_HELP = ("Kafka client properties: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore."
                       "location (PEM)... (see strandline.cli.client_config)")


def _add_command_config(parser: argparse.ArgumentParser) -> None:
    """``--command-config FILE`` on every (sub)command that talks to the brokers (each one with
    ``--bootstrap-server``), as Kafka's tools take it."""
    options = {s for action in parser._actions for s in action.option_strings}
    if "--bootstrap-server" in options and "--command-config" not in options:
        parser.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_command_config(child)


def _use_command_config(args: argparse.Namespace) -> None:
    path = getattr(args, "command_config", None)
    if not path:
        return
    from strandline.cli import client_config

    security, warnings = client_config.load(path)
    for warning in warnings:
        print(f"strandline {args.command}: warning: {path}: {warning}", file=sys.stderr)
    client_config.use(security)


def main(argv: list[str] | None = None) -> int:
    command = "?"
    try:
        try:
            from strandline.cli.configs import kafka_style

            args = build_parser().parse_args(kafka_style(sys.argv[1:] if argv is None else list(argv)))
            command = args.command
            _use_command_config(args)
            code = args.func(args) or 0
        finally:
            sys.stdout.flush()      # here, where a closed pipe is caught, not at exit
        return code
    except ConfigError as exc:
        print(f"strandline {command}: {exc}", file=sys.stderr)
        return 2
    except StrandlineError as exc:
        print(f"strandline {command}: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError as exc:
        if _stdout_closed():
            # the reader of our output went away (`... | head`): not an error of ours; no traceback,
            # and what is left to write goes nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        print(f"strandline {command}: {exc}", file=sys.stderr)     # another pipe or socket broke
        return 2


def _stdout_closed() -> bool:
    """Whether nobody reads our standard output any more (a pipe whose reader closed it)."""
    import select

    poller = select.poll()
    poller.register(sys.stdout.fileno(), select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


if __name__ == "__main__":
    sys.exit(main())
