"""``strandline sim explore`` and ``strandline sim replay``: the random-fault explorer."""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time

from typing import Any, TYPE_CHECKING

from strandline.sim.configs import CONFIGS
from strandline.sim.menu import EVERYTHING, KEYWORDS, run_options
from strandline.cli.parsers import Subcommands

if TYPE_CHECKING:
    from strandline.sim.explore import RunResult

DEFAULT_DURATION_MS = 60000
DEFAULT_LOAD = "mixed"


#: the opt-in flags of earlier versions (a run then has exactly the admin requests and workload
#: options named), kept so that their replay lines replay the same runs
OPT_IN_FLAGS = ("reassign", "add_partitions", "recreate", "rack_reads", "delete_records")


def _run(job: tuple[int, str, int, dict[str, Any]]) -> RunResult:
    from strandline.sim.explore import run_seed

    seed, config, duration_ms, options = job
    return run_seed(seed, config, duration_ms=duration_ms, **options)


def _without(args: argparse.Namespace) -> set[str]:
    """What the run leaves out of the menu: ``--without``, or, with the opt-in flags of earlier
    versions, every admin request and workload option not named."""
    without = {name.strip() for part in args.without or () for name in part.split(",") if name.strip()}
    if any(getattr(args, flag) for flag in OPT_IN_FLAGS):
        without |= {name for name, keyword in KEYWORDS.items() if not getattr(args, keyword)}
    return without


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {**run_options(_without(args)), "load": args.load, "isr_writes": args.inter_broker_protocol,
            "elr": args.elr, "txn_v2": args.txn_v2, "unclean_recovery": args.unclean_recovery,
            "consumer_groups": args.consumer_groups, "share_groups": args.share_groups,
            "classic_members": args.classic_members}


def _flags(args: argparse.Namespace) -> str:
    """The options a replay of a seed needs besides ``--config``."""
    without = sorted(_without(args), key=EVERYTHING.index)
    return ((f" --without {','.join(without)}" if without else "")
            + (f" --load {args.load}" if args.load != DEFAULT_LOAD else "")
            + (f" --inter-broker-protocol {args.inter_broker_protocol}" if args.inter_broker_protocol != "mixed"
               else "")
            + (f" --elr {args.elr}" if args.elr != "off" else "")
            + (f" --unclean-recovery {args.unclean_recovery}" if args.unclean_recovery != "Balanced" else "")
            + (" --txn-v2" if args.txn_v2 else "")
            + (" --consumer-groups" if args.consumer_groups else "")
            + (" --classic-members" if args.classic_members else "")
            + (" --share-groups" if args.share_groups else "")
            + (f" --duration-ms {args.duration_ms}" if args.duration_ms != DEFAULT_DURATION_MS else ""))


def _line(result: RunResult, flags: str = "") -> str:
    first_is_loss = result.violation is not None and result.violation.invariant == "acknowledged writes survive"
    lost = f"; {result.lost} acknowledged batch(es) lost" if result.lost and not first_is_loss else ""
    return (f"seed {result.seed} [{result.config}]: {result.violation}{lost} "
            f"(replay: strandline sim replay {result.seed} --config {result.config}{flags})")


def _refused(args: argparse.Namespace) -> str | None:
    """Why this combination of options cannot run, if it cannot."""
    try:
        _options(args)
    except ValueError as exc:
        return f"--without: {exc}"
    if getattr(args, "spark", False) and args.processes > 1:
        return "--spark and --processes are two ways to run seeds at once: give one"
    if getattr(args, "master", None) and not args.spark:
        return "--master goes with --spark"
    return None


def explore(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        print("strandline sim explore: --seeds must be at least 1", file=sys.stderr)
        return 2
    if (why := _refused(args)) is not None:
        print(f"strandline sim explore: {why}", file=sys.stderr)
        return 2
    jobs = [(seed, args.config, args.duration_ms, _options(args))
            for seed in range(args.first_seed, args.first_seed + args.seeds)]
    started = time.perf_counter()
    violations = 0
    waited = 0
    busy = 0.0
    pool = multiprocessing.Pool(args.processes) if args.processes > 1 else None
    try:
        if args.spark:
            from strandline.sim import on_spark
            results = on_spark.run(jobs, args.master)
        else:
            results = pool.imap(_run, jobs) if pool is not None else map(_run, jobs)
        for result in results:
            busy += result.wall_s
            waited += bool(result.waiting_offline)
            if not result.ok:
                violations += 1
                print(_line(result, _flags(args)), flush=True)
    finally:
        if pool is not None:
            pool.terminate()
    elapsed = time.perf_counter() - started
    print(f"{len(jobs)} seeds, {violations} violations")
    if waited:
        print(f"{waited} seeds ended with partitions waiting offline, their ISR and ELR empty (eligible leader "
              f"replicas: every eligible replica came back from an unclean shutdown)")
    print(f"{elapsed:.1f} s, {len(jobs) / busy:.2f} seeds per second per core "
          f"({args.duration_ms / 1000:g} simulated seconds each, config {args.config})", file=sys.stderr)
    return 1 if violations else 0


def replay(args: argparse.Namespace) -> int:
    from strandline.sim.explore import run_seed

    if (why := _refused(args)) is not None:
        print(f"strandline sim replay: {why}", file=sys.stderr)
        return 2
    result = run_seed(args.seed, args.config, duration_ms=args.duration_ms, **_options(args))
    print(f"seed {result.seed} [{result.config}]: {result.acked} acknowledged batches, {result.faults} faults, "
          f"{result.events} events, {result.simulated_ms / 1000:.1f} simulated s in {result.wall_s:.2f} s")
    if result.waiting_offline:
        print("waiting offline (ISR and ELR empty): " + ", ".join(result.waiting_offline))
    if result.transactions:
        print("transactions: " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(result.transactions.items())))
    if result.ok:
        print("no violation")
        return 0
    for violation in result.all_violations:
        print(f"violation: {violation}")
    print("the events before the first violation:")
    for line in result.trace:
        print("  " + line)
    if result.pending:
        print("what the brokers waited for then:")
        for line in result.pending:
            print("  " + line)
    return 1


def add_parser(sub: Subcommands) -> None:
    sim = sub.add_parser("sim", help="the deterministic simulator: explore random fault schedules")
    ssub = sim.add_subparsers(dest="action", required=True)
    configs = sorted(CONFIGS)
    ex = ssub.add_parser("explore", help="run seeds; print each one that breaks an invariant",
                         description="Each seed is one run of a cluster (four brokers, three replicas per "
                                     "partition) under random faults and an operator's requests, with producers "
                                     "and consumers; invariants are checked after every event. Every family of "
                                     "faults and requests is on unless --without names it.")
    ex.add_argument("--seeds", type=int, required=True, help="how many seeds")
    ex.add_argument("--first-seed", type=int, default=1, help="the first seed (default 1)")
    ex.add_argument("--config", choices=configs, default="safe",
                    help="safe (SPEC SAFE-1: must lose nothing), compact (SAFE-1 on a compacted topic), txn "
                         "(SAFE-1 with transactional producers and read_committed readers) or a "
                         "configuration that loses data: acks1, unclean, legacy (default safe)")
    ex.add_argument("--duration-ms", type=int, default=DEFAULT_DURATION_MS,
                    help=f"simulated time of faults per seed (default {DEFAULT_DURATION_MS})")
    ex.add_argument("--processes", type=int, default=1, help="worker processes on this machine (default 1)")
    ex.add_argument("--spark", action="store_true",
                    help="run the seeds as Spark tasks: local mode on every core, or the cluster --master names")
    ex.add_argument("--master", help="with --spark: the Spark master URL (default local[*])")
    _menu_arguments(ex)
    ex.set_defaults(func=explore)
    rp = ssub.add_parser("replay", help="run one seed again and print the violation and the last events")
    rp.add_argument("seed", type=int, help="the seed to play again")
    rp.add_argument("--config", choices=configs, default="safe", help="the configuration it ran with")
    rp.add_argument("--duration-ms", type=int, default=DEFAULT_DURATION_MS, help="simulated time of faults")
    _menu_arguments(rp)
    rp.set_defaults(func=replay)


def _menu_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--load", choices=("mixed", "heavy", "medium", "light"), default=DEFAULT_LOAD,
                        help="how hard the clients write: heavy (a batch every 10-120 ms per producer), medium "
                             "(30-360 ms), light (90-1080 ms), or mixed (default: each seed draws one, a quarter "
                             "heavy, a quarter medium, half light)")
    parser.add_argument("--inter-broker-protocol", choices=("mixed", "2.8", "2.6"), default="mixed",
                        help="the brokers' inter.broker.protocol.version: 2.8, leaders propose ISR changes to the "
                             "controller (AlterIsr); 2.6, leaders write them to ZooKeeper (the legacy mode); mixed "
                             "(default): each seed draws one, half and half")
    parser.add_argument("--elr", choices=("off", "on", "mixed"), default="off",
                        help="eligible.leader.replicas.enable (KIP-966; in effect with inter.broker.protocol 2.8): "
                             "off (default), on, or mixed: each seed draws it, half and half")
    parser.add_argument("--unclean-recovery", choices=("Balanced", "Aggressive", "None", "mixed"), default="Balanced",
                        help="with --elr: unclean.recovery.strategy, what the controller does with a partition whose "
                             "ISR and ELR are empty: Balanced (default) elects the newest, longest log of its "
                             "replicas once all are back, Aggressive that of the live replicas that answer, None "
                             "leaves it offline; mixed: each seed draws one")
    parser.add_argument("--txn-v2", action="store_true",
                        help="with --config txn: the transactional producers use transactions v2 (KIP-890 part 2, "
                             "as Kafka's 4.x client with transaction.version 2: no AddPartitionsToTxn, Produce v12, "
                             "EndTxn v5 bumping the epoch at each commit and abort)")
    parser.add_argument("--consumer-groups", action="store_true",
                        help="three consumers of the consumer group protocol (KIP-848) in one group on the topic, "
                             "leaving and stalling now and then; checked: no partition owned by two members at one "
                             "epoch, and the group settles once the faults heal")
    parser.add_argument("--classic-members", action="store_true",
                        help="with --consumer-groups: consumers of the classic protocol in the same group, as "
                             "Kafka 4.x serves them there (each seed draws three of the consumer protocol and one "
                             "classic, or one and two classic, whose group turns classic when the one leaves and "
                             "back when it returns); the same checks")
    parser.add_argument("--share-groups", action="store_true",
                        help="three consumers of one share group (KIP-932) on the topic, acknowledging what they "
                             "are handed (accepting, releasing, rejecting, leaving some to their lock's end), "
                             "leaving and stalling now and then; checked: no record delivered past "
                             "group.share.delivery.count.limit, none settled twice, and every one settled (or "
                             "archived at the limit) once the faults heal")
    parser.add_argument("--without", action="append", metavar="NAME[,NAME...]",
                        help="leave out of the run: " + ", ".join(EVERYTHING) + " (a run has all of them "
                             "by default: faults of the machines, an operator's requests, consumers reading "
                             "from followers)")
    for flag in OPT_IN_FLAGS:        # earlier versions' opt-in form: exactly the requests named
        parser.add_argument(f"--{flag.replace('_', '-')}", action="store_true", help=argparse.SUPPRESS)

