"""``strandline bench produce|consume``: load generators (like ``kafka-producer-perf-test`` and
``kafka-consumer-perf-test``), spread over ``--processes`` worker processes."""

from __future__ import annotations

import argparse
import sys

from strandline.cli.clients import properties
from strandline.errors import StrandlineError
from strandline.cli.parsers import Subcommands


def add_parser(sub: Subcommands, bootstrap_default: str, bootstrap_help: str) -> None:
    bench = sub.add_parser("bench", help="load generators: produce or consume as fast as asked, and measure")
    bsub = bench.add_subparsers(dest="action", required=True)
    p = bsub.add_parser("produce", help="send records and report throughput and acknowledgement latency "
                                        "(like kafka-producer-perf-test)")
    p.add_argument("--topic", required=True, help="the topic")
    p.add_argument("--num-records", type=int, required=True, metavar="N", help="records to send, in all")
    p.add_argument("--record-size", type=int, required=True, metavar="BYTES", help="each record's value size")
    p.add_argument("--throughput", type=float, default=-1, metavar="R",
                   help="at most R records/s in all (-1: as fast as possible)")
    p.add_argument("--acks", default="all", choices=("all", "-1", "0", "1"), help="acks of each produce request")
    p.add_argument("--processes", type=int, default=1, metavar="P",
                   help="producer processes, each with its own client, sharing the records and the rate")
    p.add_argument("--producer-props", nargs="+", default=[], metavar="KEY=VALUE",
                   help="librdkafka producer settings (e.g. linger.ms=5 batch.size=131072 compression.type=lz4)")
    c = bsub.add_parser("consume", help="read records already in a topic and report throughput "
                                        "(like kafka-consumer-perf-test)")
    c.add_argument("--topic", required=True, help="the topic")
    c.add_argument("--num-records", type=int, required=True, metavar="N",
                   help="records to read, in all (fewer when the topic holds fewer)")
    c.add_argument("--processes", type=int, default=1, metavar="P",
                   help="consumer processes, each reading its own partitions")
    c.add_argument("--timeout-ms", type=int, default=10000, metavar="MS",
                   help="stop a process that receives nothing for this long")
    c.add_argument("--consumer-props", nargs="+", default=[], metavar="KEY=VALUE", help="librdkafka consumer settings")
    c.add_argument("--client", choices=("confluent", "raw"), default="confluent",
                   help="confluent: librdkafka, every record decoded as an application gets it; raw: Fetch "
                        "requests read as bytes, records counted from batch headers (measures the broker, "
                        "not the client; MB/sec counts whole batches)")
    for parser in (p, c):
        parser.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
        parser.add_argument("--reporting-interval", type=float, default=5.0, metavar="S",
                            help="seconds between progress lines")
    bench.set_defaults(func=run)


def _check_client_props(kind: str, props: dict[str, str]) -> None:
    """A setting librdkafka refuses is one line here, not an error in every worker."""
    from strandline.cli.clients import client

    client(kind, {**({"group.id": "strandline-bench"} if kind == "Consumer" else {}), **props})


def _security() -> dict[str, str]:
    """The librdkafka settings of ``--command-config`` (TLS, SASL), which every worker's client takes;
    ``--producer-props``/``--consumer-props`` override them."""
    from strandline.cli import client_config

    return client_config.librdkafka() if client_config.given() else {}


def run(args: argparse.Namespace) -> int:
    if args.num_records < 1:
        raise StrandlineError("--num-records must be at least 1")
    if args.processes < 1:
        raise StrandlineError("--processes must be at least 1")
    if args.action == "produce":
        from strandline.load import produce

        if args.record_size < 0:
            raise StrandlineError("--record-size must be 0 or more")
        props = {**_security(), **properties(args.producer_props)}
        _check_client_props("Producer", props)
        outcome = produce.run(args.bootstrap_server, args.topic, args.num_records, args.record_size,
                              args.throughput, args.acks, args.processes, props, args.reporting_interval)
        planned = args.num_records
    else:
        from strandline.load import consume

        props = {**_security(), **properties(args.consumer_props)}
        if args.client == "raw" and props.get("security.protocol", "plaintext").lower() != "plaintext":
            raise StrandlineError("--client raw speaks PLAINTEXT only: use --client confluent on a secured listener")
        _check_client_props("Consumer", props)
        outcome, planned = consume.run(args.bootstrap_server, args.topic, args.num_records, args.processes, props,
                                       args.timeout_ms / 1000, args.reporting_interval, args.client)
        if planned < args.num_records:
            print(f"strandline bench consume: the topic holds {planned} records, fewer than {args.num_records}",
                  file=sys.stderr)
    for reason, count in sorted(outcome.failures.items()):
        print(f"strandline bench {args.action}: {count} failed: {reason}", file=sys.stderr)
    if outcome.interrupted:
        return 130
    # offsets that hold no record (compacted away, transaction markers) make fewer records than planned
    return 1 if outcome.failures or (args.action == "produce" and outcome.total.records < planned) else 0
