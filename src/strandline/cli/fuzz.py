"""``strandline fuzz``: send a running cluster fuzzed requests for a bounded time, and check that
every broker still answers and that clients still work (see :mod:`strandline.fuzz.run`)."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from strandline.errors import StrandlineError
from strandline.cli.parsers import Subcommands

if TYPE_CHECKING:
    from strandline.fuzz import run as fuzz_run


def add_parser(sub: Subcommands, bootstrap_default: str, bootstrap_help: str) -> None:
    p = sub.add_parser("fuzz", help="send a running cluster structured, mutated and random request frames over "
                                    "many connections for a bounded time, recorded so that a crash replays; "
                                    "exits non-zero when a broker dies, a request hangs or a client check fails")
    p.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
    p.add_argument("--minutes", type=float, default=1.0, metavar="M", help="how long to fuzz")
    p.add_argument("--max-frames", type=int, default=None, metavar="N",
                   help="stop once N frames are sent, if that comes before --minutes")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="the run's seed (default: a new one, printed)")
    p.add_argument("--record-dir", default="fuzz-records", metavar="DIR",
                   help="where the run's record file (every connection's bytes) goes")
    p.add_argument("--replay", metavar="FILE", help="send the connections of a record file again, in order, "
                                                     "instead of fuzzing")
    p.add_argument("--connection", type=int, metavar="N", help="with --replay: only connection N")
    p.add_argument("--concurrency", type=int, default=32, metavar="C", help="connections open at once")
    p.add_argument("--hang-timeout", type=float, default=10.0, metavar="S",
                   help="a request with no answer and no close within S seconds is a hang")
    p.add_argument("--max-request-bytes", type=int, default=104857600, metavar="BYTES",
                   help="the brokers' socket.request.max.bytes (a larger frame size closes the connection)")
    p.add_argument("--inter-broker", action="store_true",
                   help="also send well-formed LeaderAndIsr, UpdateMetadata, StopReplica and ControlledShutdown "
                        "requests (they change the cluster)")
    p.set_defaults(func=run)


def access() -> "fuzz_run.Access":
    """The listener's settings from ``--command-config``: the fuzzer's own checks authenticate with
    them; its fuzzed connections make only the TLS handshake."""
    from strandline.cli import client_config
    from strandline.fuzz import run as fuzz

    if not client_config.given():
        return fuzz.PLAINTEXT
    security = client_config.active()

    def connect(address: str, timeout_s: float, client_id: str) -> client_config.KafkaConnection:
        return client_config.KafkaConnection(address, timeout_s, client_id, security)

    return fuzz.Access(connect=connect, client_conf=client_config.librdkafka(security),
                       tls=client_config.ssl_context(security) if security.tls else None, sasl=security.sasl)


def run(args: argparse.Namespace) -> int:
    from strandline.fuzz import run as fuzz

    if args.replay:
        return asyncio.run(fuzz.replay(args.bootstrap_server, args.replay, args.hang_timeout, args.connection,
                                       access=access()))
    if args.minutes <= 0:
        raise StrandlineError("--minutes must be above 0")
    if args.concurrency < 1:
        raise StrandlineError("--concurrency must be at least 1")
    seed = args.seed if args.seed is not None else fuzz.new_seed()
    return asyncio.run(fuzz.fuzz(args.bootstrap_server, args.minutes, seed, args.record_dir, args.concurrency,
                                 args.hang_timeout, args.max_request_bytes, args.inter_broker,
                                 args.max_frames, access=access()))
