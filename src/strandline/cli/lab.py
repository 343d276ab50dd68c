"""``strandline lab``: the seed documents' scenarios on real processes, audited by a Spark job."""

from __future__ import annotations

import argparse

from strandline.cli.parsers import Subcommands

CLUSTERS = ("strandline", "kafka-3.9")     # strandline.lab.kafka.CLUSTERS, without importing the lab


def add_parser(sub: Subcommands) -> None:
    lab = sub.add_parser("lab", help="run the seed scenarios (NET-*, LOSS-*, SAFE, TXN) on real processes",
                         description="Each run starts its own ZooKeeper and 3 brokers (in network namespaces "
                                     "when run as root), writes with confluent-kafka producers while it injects "
                                     "the scenario's faults, heals, reads every replica's log and audits the "
                                     "history with a PySpark job. It ends with one verdict line and exits 0 when "
                                     "the outcome is the one SPEC.md expects, 1 when not, 3 when the scenario "
                                     "cannot run here.")
    lsub = lab.add_subparsers(dest="action", required=True)
    lsub.add_parser("list", help="name every scenario with one line from the seeds")
    runp = lsub.add_parser("run", help="run one scenario (or SAFE trials) and print its verdict")
    runp.add_argument("scenario", metavar="SCENARIO",
                      help="NET-1..NET-8, LOSS-1..LOSS-6, SAFE, or TXN (transactions; controls: TXN-hang, "
                           "TXN-hang-verified; TXN-ELR is TXN --elr)")
    runp.add_argument("--seed", type=int, help="the random choices of the run (default: a fresh one, printed)")
    runp.add_argument("--data-dir", help="where run folders go (default: ./lab-runs)")
    runp.add_argument("--trials", type=int, default=1, help="number of runs (SAFE, TXN: random fault mixes; default 1)")
    runp.add_argument("--elr", action="store_true",
                      help="with eligible leader replicas (KIP-966, eligible.leader.replicas.enable): the "
                           "scenario's ELR variant (LOSS-6: ELR-1, TXN: TXN-ELR)")
    runp.add_argument("--cluster", choices=CLUSTERS, default=CLUSTERS[0],
                      help="whose brokers: Strandline's (default) or Apache Kafka 3.9's, in ZooKeeper mode")
    cmp = lsub.add_parser("compare", help="run one scenario on Strandline and on Kafka 3.9; a verdict line each "
                                          "and both timelines in one image")
    cmp.add_argument("scenario", metavar="SCENARIO", help="a scenario of `strandline lab list`")
    cmp.add_argument("--seed", type=int, help="the random choices of both runs (default: a fresh one, printed)")
    cmp.add_argument("--data-dir", help="where run folders go (default: ./lab-runs)")
    cmp.add_argument("--trials", type=int, default=1, help="runs on each system (default 1)")
    audit = lsub.add_parser("audit", help="audit run folders again with the Spark job (SPK-2)")
    audit.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders of `strandline lab run`")
    lab.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from strandline.errors import StrandlineError
    from strandline.lab import runner, txn

    if args.action == "list":
        return max(runner.list_command(), txn.list_command())
    if args.action == "audit":
        dirs = [Path(d) for d in args.run_dirs]
        transactional = [d for d in dirs if (d / "txn_writes.parquet").exists()]
        others = [str(d) for d in dirs if d not in transactional]
        statuses = ([txn.audit_command(transactional)] if transactional else []) + \
            ([runner.audit_command(others)] if others else [])
        return max(statuses)
    if args.trials < 1:
        raise StrandlineError("--trials must be at least 1")
    scenario = args.scenario
    if getattr(args, "elr", False):
        from strandline.lab.scenarios import ELR_VARIANTS

        if scenario.upper() not in ELR_VARIANTS:
            raise StrandlineError(f"--elr: {scenario} has no variant with eligible leader replicas "
                                  f"(those that have: {', '.join(sorted(ELR_VARIANTS))})")
        scenario = ELR_VARIANTS[scenario.upper()]
    if txn.is_txn(scenario):
        if args.action == "compare" or getattr(args, "cluster", CLUSTERS[0]) != CLUSTERS[0]:
            raise StrandlineError(f"{scenario}: the transactional scenarios run on Strandline's brokers only")
        return txn.run_txn(scenario, args.seed, args.data_dir, args.trials)
    if args.action == "compare":
        from strandline.lab.compare import compare_command

        return compare_command(scenario, args.seed, args.data_dir, args.trials)
    return runner.run_scenario(scenario, args.seed, args.data_dir, args.trials, system=args.cluster)
