"""``strandline produce`` and ``strandline consume``: the console producer and consumer (like
``kafka-console-producer``/``kafka-console-consumer`` and kcat's ``-P``/``-C``), on librdkafka.

The producer sends each line of standard input as one record; the consumer prints each record in
a kcat format or as JSON. Both use Kafka's defaults where the Java console tools do: acks=all and
Java's key partitioner (murmur2) for the producer, so a keyed record lands where a Java producer
would put it; the consumer starts at the end unless told otherwise.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from strandline.cli.record_format import (DEFAULT_FORMAT, FormatError, InputError, LineParser, Record,
                                          compile_format, parse_header, render_json)
from strandline.errors import NotFound, Refused, StrandlineError, Unreachable, UsageError
from strandline.cli.parsers import Subcommands

if TYPE_CHECKING:       # confluent-kafka is imported when a command needs it (the CLI starts faster)
    from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

CONNECT_TIMEOUT_S = 10.0
REACH_TIMEOUT_S = 2.0


def add_parsers(sub: Subcommands, bootstrap_default: str, bootstrap_help: str) -> None:
    p = sub.add_parser("produce", help="send each line of standard input as a record (like kafka-console-producer, "
                                       "kcat -P)")
    p.add_argument("--topic", required=True, help="the topic")
    p.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
    p.add_argument("--partition", type=int, help="send every record to this partition (default: by key, as Java's "
                                                 "producer does; records without a key spread over the partitions)")
    p.add_argument("--key-delimiter", "-K", metavar="DELIM",
                   help="split each line at the first DELIM into key and value (default: no key, the line is the value)")
    p.add_argument("--header", "-H", action="append", metavar="NAME=VALUE", help="a header on every record (repeatable)")
    p.add_argument("--null-marker", metavar="TEXT", help="a key or value equal to TEXT is sent as null (a value: a "
                                                         "tombstone)")
    p.add_argument("--acks", default="all", choices=("all", "-1", "0", "1"), help="acks of each produce request")
    p.add_argument("--compression-type", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"),
                   help="compression of the record batches")
    p.add_argument("--producer-property", "-X", action="append", metavar="KEY=VALUE",
                   help="any other librdkafka producer setting (repeatable)")
    p.add_argument("--no-create", action="store_true",
                   help="refuse a topic that does not exist (default: the brokers create it, as "
                        "auto.create.topics.enable does for any producer, and the command says so)")
    p.set_defaults(func=run_produce)

    c = sub.add_parser("consume", help="print a topic's records (like kafka-console-consumer, kcat -C)")
    c.add_argument("--topic", required=True, help="the topic")
    c.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
    c.add_argument("--group", help="consume as this consumer group: its committed offsets, committed as it goes "
                                   "(default: no group, every partition read directly)")
    c.add_argument("--partition", type=int, help="only this partition (not with --group)")
    where = c.add_mutually_exclusive_group()
    where.add_argument("--offset", "-o", default="end", metavar="beginning|end|N|-N",
                       help="where to start: the first record, the end, offset N, or N records before the end "
                            "(with --group: only where the group has committed nothing; beginning or end)")
    where.add_argument("--from-beginning", action="store_const", dest="offset", const="beginning",
                       help="the same as --offset beginning")
    c.add_argument("--exit-at-end", "-e", action="store_true",
                   help="exit once every partition is read to its end (its high watermark)")
    c.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    c.add_argument("--timeout-ms", type=int, metavar="MS", help="exit when no record arrives for MS milliseconds")
    out = c.add_mutually_exclusive_group()
    out.add_argument("--format", "-f", default=DEFAULT_FORMAT,
                     help="kcat's -f tokens: %%t topic, %%p partition, %%o offset, %%T timestamp, %%k key, "
                          "%%K key length, %%s value, %%S value length, %%h headers, \\n \\t")
    out.add_argument("--json", "-J", action="store_true", help="one JSON object per record instead")
    c.add_argument("--consumer-property", "-X", action="append", metavar="KEY=VALUE",
                   help="any other librdkafka consumer setting (repeatable)")
    c.set_defaults(func=run_consume)


def properties(items: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` client settings (``-X``, ``--producer-props``) as a dict."""
    props = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise StrandlineError(f"{item!r}: expected KEY=VALUE")
        props[key] = value
    return props


def client(kind: str, config: dict[str, Any]) -> Any:
    """A librdkafka client; a setting librdkafka refuses is one line naming it. librdkafka's own
    log (a line per failed connection attempt) stays quiet unless ``-X log_level=N`` or
    ``-X debug=...`` asks for it: failures are reported once, by this command."""
    import confluent_kafka

    from strandline.cli import client_config

    if client_config.given():           # --command-config; -X settings still win
        config = {**client_config.librdkafka(), **config}
    if "debug" not in config:
        config.setdefault("log_level", 0)
    try:
        return getattr(confluent_kafka, kind)(config)
    except (confluent_kafka.KafkaException, ValueError, TypeError) as exc:
        reason = exc.args[0] if exc.args else exc
        raise StrandlineError(f"bad client setting: {reason.str() if hasattr(reason, 'str') else reason}") from None


def reachable(bootstrap: str) -> None:
    """Refuse at once, in one line, a malformed broker list (UsageError) or one where no broker
    accepts a connection within REACH_TIMEOUT_S (Unreachable), before librdkafka, which would try
    again for its whole timeout."""
    from strandline.cli.client_config import KafkaConnection

    with KafkaConnection(bootstrap, timeout_s=REACH_TIMEOUT_S):
        pass


def _topic_partitions(client: Any, bootstrap: str, topic: str, must_exist: bool) -> list[int]:
    """The topic's partitions; none (and no error) when it does not exist and need not. Refuses
    at once, in one line, when no broker answers or the topic does not exist."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        md = client.list_topics(timeout=CONNECT_TIMEOUT_S)
    except KafkaException:
        raise Unreachable(f"no broker of {bootstrap} answered within {CONNECT_TIMEOUT_S:.0f} s") from None
    t = md.topics.get(topic)
    if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        if must_exist:
            raise NotFound(f"topic {topic} does not exist (UNKNOWN_TOPIC_OR_PARTITION)")
        return []
    if t.error is not None:
        raise Refused(f"topic {topic}: {t.error.str()}")
    return sorted(t.partitions)


def run_produce(args: argparse.Namespace) -> int:
    try:
        headers = [parse_header(h) for h in args.header or []]
    except InputError as exc:
        raise StrandlineError(str(exc)) from None
    parser = LineParser(args.key_delimiter.encode() if args.key_delimiter else None,
                        args.null_marker.encode() if args.null_marker is not None else None)
    config = {"bootstrap.servers": args.bootstrap_server, "acks": args.acks, "compression.type": args.compression_type,
              "partitioner": "murmur2_random", "linger.ms": 5, "message.timeout.ms": 120000,
              **properties(args.producer_property)}
    reachable(args.bootstrap_server)
    producer = client("Producer", config)
    partitions = _topic_partitions(producer, args.bootstrap_server, args.topic, must_exist=args.no_create)
    if args.partition is not None and partitions and args.partition not in partitions:
        raise NotFound(f"topic {args.topic} has no partition {args.partition}")
    failures: list[str] = []
    delivered = 0

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failures.append(err.str())

    extra = {"headers": headers} if headers else {}
    if args.partition is not None:
        extra["partition"] = args.partition
    bad_input: str | None = None
    try:
        for number, raw in enumerate(sys.stdin.buffer, 1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if not line:
                continue
            try:
                key, value = parser.parse(line, number)
            except InputError as exc:
                bad_input = str(exc)
                break
            while True:
                try:
                    producer.produce(args.topic, value=value, key=key, on_delivery=on_delivery, **extra)
                    break
                except BufferError:      # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
    finally:
        left = producer.flush(config_timeout_s(config))
    for reason in sorted(set(failures)):
        print(f"strandline produce: {failures.count(reason)} record(s) not delivered: {reason}", file=sys.stderr)
    if left:
        print(f"strandline produce: {left} record(s) not delivered in time", file=sys.stderr)
    if not partitions and delivered:
        made = _topic_partitions(producer, args.bootstrap_server, args.topic, must_exist=False)
        print(f"strandline produce: topic {args.topic} did not exist: the brokers created it with "
              f"{len(made)} partition(s) (auto.create.topics.enable; --no-create refuses instead)", file=sys.stderr)
    if bad_input:
        raise UsageError(f"{bad_input}; the {delivered} record(s) before it were sent, nothing after it")
    return 1 if failures or left else 0


def config_timeout_s(config: dict[str, Any]) -> float:
    """How long a flush may wait: the delivery timeout and a little more."""
    try:
        return int(config.get("message.timeout.ms", 120000)) / 1000 + 5
    except ValueError:
        return 125.0


def _start_offset(text: str) -> tuple[str, int]:
    """``beginning``/``end``/``N``/``-N`` as (kind, number)."""
    if text in ("beginning", "end"):
        return text, 0
    try:
        n = int(text)
    except ValueError:
        raise StrandlineError(f"--offset {text!r}: expected beginning, end, N or -N") from None
    return ("absolute", n) if n >= 0 else ("tail", -n)


def run_consume(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, TopicPartition

    try:
        render = render_json if args.json else compile_format(args.format)
    except FormatError as exc:
        raise StrandlineError(str(exc)) from None
    kind, number = _start_offset(args.offset)
    if args.group and (args.partition is not None or kind not in ("beginning", "end")):
        raise StrandlineError("--group reads every partition from the group's offsets: it takes neither --partition "
                              "nor an --offset other than beginning or end")
    if args.max_messages is not None and args.max_messages < 0:
        raise StrandlineError("--max-messages must be 0 or more")
    config = {"bootstrap.servers": args.bootstrap_server, "group.id": args.group or "strandline-consume",
              "enable.auto.commit": bool(args.group), "enable.partition.eof": True,
              "auto.offset.reset": "earliest" if kind == "beginning" else "latest",
              **properties(args.consumer_property)}
    reachable(args.bootstrap_server)
    consumer = client("Consumer", config)
    out = sys.stdout.buffer
    count = 0
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        partitions = _topic_partitions(consumer, args.bootstrap_server, args.topic, must_exist=True)
        if args.partition is not None and args.partition not in partitions:
            raise NotFound(f"topic {args.topic} has no partition {args.partition}")
        assigned: set[int] = set()
        if args.group:
            def on_assign(c: Consumer, tps: list[TopicPartition]) -> None:
                assigned.update(tp.partition for tp in tps)

            def on_revoke(c: Consumer, tps: list[TopicPartition]) -> None:
                assigned.difference_update(tp.partition for tp in tps)

            consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
        else:
            chosen = [args.partition] if args.partition is not None else partitions
            tps = []
            for p in chosen:
                if kind == "tail":
                    low, high = consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=CONNECT_TIMEOUT_S)
                    offset = max(low, high - number)
                else:
                    offset = {"beginning": OFFSET_BEGINNING, "end": OFFSET_END}.get(kind, number)
                tps.append(TopicPartition(args.topic, p, offset))
            consumer.assign(tps)
            assigned.update(chosen)
        at_end: set[int] = set()
        last_record = time.monotonic()
        while not stop and (args.max_messages is None or count < args.max_messages):
            want = 500 if args.max_messages is None else min(500, args.max_messages - count)
            if want == 0:
                break
            batch = consumer.consume(want, 0.2)
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    if err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
                        raise StrandlineError(f"consuming {args.topic}: {err.str()}")
                    print(f"strandline consume: {err.str()}", file=sys.stderr)
                    continue
                at_end.discard(msg.partition())
                out.write(render(Record(msg.topic(), msg.partition(), msg.offset(), msg.timestamp()[1], msg.key(),
                                        msg.value(), [(n, v) for n, v in msg.headers() or []])))
                count += 1
                last_record = time.monotonic()
            out.flush()
            if args.exit_at_end and assigned and assigned <= at_end:
                break
            if args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                break
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
