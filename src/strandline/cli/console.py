"""``strandline console``: serve the live web console of a running cluster."""

from __future__ import annotations

import argparse
import asyncio
import signal

from strandline.errors import StrandlineError
from strandline.cli.parsers import Subcommands


def add_parser(sub: Subcommands, bootstrap_default: str, bootstrap_help: str) -> None:
    p = sub.add_parser("console", help="serve a live web page of the cluster (brokers, partitions with every "
                                       "replica's LEO, HW and lag, groups, events, lab runs)")
    p.add_argument("--bootstrap-server", default=bootstrap_default, help=bootstrap_help)
    p.add_argument("--host", default="127.0.0.1", help="address to serve the page on")
    p.add_argument("--port", type=int, default=8080, help="port to serve the page on (0: any free port)")
    p.add_argument("--lab-dir", default="lab-runs", help="where `strandline lab run` keeps its runs, shown on the page")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strandline.console.server import serve

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None                 # main() runs as asyncio.run's task
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await serve(args.bootstrap_server, args.host, args.port, args.lab_dir,
                        ready=lambda url: print(f"console={url}", flush=True))
        except OSError as exc:
            raise StrandlineError(f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}") from None

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        pass
    return 0
