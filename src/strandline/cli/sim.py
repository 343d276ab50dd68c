"""``strandline sim explore`` and ``strandline sim replay``: the random-fault explorer."""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time

from typing import TYPE_CHECKING

from strandline.sim.configs import CONFIGS

if TYPE_CHECKING:
    from strandline.sim.explore import RunResult

DEFAULT_DURATION_MS = 60000


#: the options of ``sim explore`` that add to a run, as ``run_seed`` names them
RUN_OPTIONS = ("reassign", "add_partitions", "recreate", "rack_reads", "delete_records")


def _run(job: tuple[int, str, int, dict[str, bool]]) -> RunResult:
    from strandline.sim.explore import run_seed

    seed, config, duration_ms, options = job
    return run_seed(seed, config, duration_ms=duration_ms, **options)


def _options(args: argparse.Namespace) -> dict[str, bool]:
    return {name: getattr(args, name) for name in RUN_OPTIONS}


def _flags(args: argparse.Namespace) -> str:
    """The options a replay of a seed needs besides ``--config``."""
    return ("".join(f" --{name.replace('_', '-')}" for name in RUN_OPTIONS if getattr(args, name))
            + (f" --duration-ms {args.duration_ms}" if args.duration_ms != DEFAULT_DURATION_MS else ""))


def _line(result: RunResult, flags: str = "") -> str:
    first_is_loss = result.violation is not None and result.violation.invariant == "acknowledged writes survive"
    lost = f"; {result.lost} acknowledged batch(es) lost" if result.lost and not first_is_loss else ""
    return (f"seed {result.seed} [{result.config}]: {result.violation}{lost} "
            f"(replay: strandline sim replay {result.seed} --config {result.config}{flags})")


def _refused(args: argparse.Namespace) -> str | None:
    """Why this combination of options cannot run, if it cannot."""
    if args.delete_records and CONFIGS[args.config].transactions:
        return "--delete-records runs without transactions (its checks do not follow deleted transactional records)"
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
    busy = 0.0
    pool = multiprocessing.Pool(args.processes) if args.processes > 1 else None
    try:
        results = pool.imap(_run, jobs) if pool is not None else map(_run, jobs)
        for result in results:
            busy += result.wall_s
            if not result.ok:
                violations += 1
                print(_line(result, _flags(args)), flush=True)
    finally:
        if pool is not None:
            pool.terminate()
    elapsed = time.perf_counter() - started
    print(f"{len(jobs)} seeds, {violations} violations")
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
    return 1


def add_parser(sub) -> None:
    sim = sub.add_parser("sim", help="the deterministic simulator: explore random fault schedules")
    ssub = sim.add_subparsers(dest="action", required=True)
    configs = sorted(CONFIGS)
    ex = ssub.add_parser("explore", help="run seeds; print each one that breaks an invariant",
                         description="Each seed is one run of a 3-broker cluster under random faults with "
                                     "producers and a consumer; invariants are checked after every event.")
    ex.add_argument("--seeds", type=int, required=True, help="how many seeds")
    ex.add_argument("--first-seed", type=int, default=1, help="the first seed (default 1)")
    ex.add_argument("--config", choices=configs, default="safe",
                    help="safe (SPEC SAFE-1: must lose nothing), compact (SAFE-1 on a compacted topic), txn "
                         "(SAFE-1 with transactional producers and read_committed readers) or a "
                         "configuration that loses data: acks1, unclean, legacy (default safe)")
    ex.add_argument("--duration-ms", type=int, default=DEFAULT_DURATION_MS,
                    help=f"simulated time of faults per seed (default {DEFAULT_DURATION_MS})")
    ex.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    ex.add_argument("--reassign", action="store_true",
                    help="also move partitions between brokers (four brokers, three replicas; CTL-11)")
    ex.add_argument("--add-partitions", action="store_true",
                    help="also add partitions to the topic now and then (CreatePartitions, up to "
                         "three), racing the faults and any moves")
    ex.add_argument("--recreate", action="store_true",
                    help="also delete a second topic, written all along, and create it again now and then; "
                         "at the end its replicas must hold exactly their leader's log")
    ex.add_argument("--rack-reads", action="store_true",
                    help="put each broker in its own rack and the consumers in racks r2 and r3, with "
                         "replica.selector.class set: they read from followers whenever the leader is "
                         "elsewhere (KIP-392)")
    ex.add_argument("--delete-records", action="store_true",
                    help="also delete records now and then (DeleteRecords below an offset under the high "
                         "watermark); the checks then look only above the highest offset asked")
    ex.set_defaults(func=explore)
    rp = ssub.add_parser("replay", help="run one seed again and print the violation and the last events")
    rp.add_argument("seed", type=int, help="the seed to play again")
    rp.add_argument("--config", choices=configs, default="safe", help="the configuration it ran with")
    rp.add_argument("--duration-ms", type=int, default=DEFAULT_DURATION_MS, help="simulated time of faults")
    rp.add_argument("--reassign", action="store_true", help="with the reassignments of `sim explore --reassign`")
    rp.add_argument("--add-partitions", action="store_true", help="with the partitions `sim explore "
                                                                  "--add-partitions` adds")
    rp.add_argument("--recreate", action="store_true", help="with the topic `sim explore --recreate` deletes "
                                                            "and creates again")
    rp.add_argument("--rack-reads", action="store_true", help="with the consumers of `sim explore --rack-reads`, "
                                                              "reading from followers")
    rp.add_argument("--delete-records", action="store_true", help="with the DeleteRecords of `sim explore "
                                                                  "--delete-records`")
    rp.set_defaults(func=replay)
