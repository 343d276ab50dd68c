"""The explorer's bug-finding rate, measured on known bugs put back (mutants), per load.

Each mutant turns a fix of the broker back off for the run (a bug the explorer or a test once
found), or, for ``legacy-truncation``, runs the configuration that loses data by design. For each
mutant and each client load (``heavy``, ``medium``, ``light``; see ``strandline.sim.workload``),
it runs the same seeds with the explorer's whole menu and prints how many seeds caught the
mutant, the CPU seconds they took, and the rate that matters: mutants caught per CPU minute. A
load that catches as many per seed in less time finds bugs faster. A benchmark, not a test:

    .venv/bin/python benchmarks/explorer_mutants.py [--seeds 40] [--first-seed 2000000]
                     [--loads heavy,light] [--mutants all]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pytest  # noqa: E402  (its MonkeyPatch undoes each mutant)

from strandline.sim.explore import run_seed  # noqa: E402
from strandline.sim.menu import FULL_MENU  # noqa: E402


def _follower_keeps_records_below_leader_start(mp: pytest.MonkeyPatch) -> None:
    from strandline.replication import fetcher
    mp.setattr(fetcher, "_all_below_leader_start", lambda log, start: False)


def _log_start_ignores_epochs(mp: pytest.MonkeyPatch) -> None:
    from strandline.log.log import Log
    mp.setattr(Log, "_epochs_cut_above_start", lambda self: False)


def _follower_refuses_batch_across_leader_start(mp: pytest.MonkeyPatch) -> None:
    from strandline.replication import fetcher
    mp.setattr(fetcher, "_starts_inside", lambda log, records: None)


def _followers_serve_past_their_hw(mp: pytest.MonkeyPatch) -> None:
    from strandline.replication.partition import Partition
    read = Partition.read_records

    def past_the_hw(self, *args, committed_only, leader_only=True, **kw):
        return read(self, *args, committed_only=committed_only and (self.is_leader or leader_only),
                    leader_only=leader_only, **kw)
    mp.setattr(Partition, "read_records", past_the_hw)


def _no_topic_ids(mp: pytest.MonkeyPatch) -> None:
    from strandline.controller.deletion import TopicDeletions
    from strandline.coordination import zk_layout, znodes
    from strandline.replication import controller_requests, replica_manager
    from strandline.sim.explore import Explorer
    mp.setattr(TopicDeletions, "resume", lambda self, ctx, now_ms: [])
    mp.setattr(Explorer, "_deletions", lambda self: [])
    creation = zk_layout.create_topic_ops
    mp.setattr(zk_layout, "create_topic_ops", lambda topic, epoch: [
        op for op in creation(topic, epoch) if op.path != znodes.DeleteTopicsTopicZNode.path(topic.name)])
    mp.setattr(replica_manager.ReplicaManager, "forget_deleted_topics", lambda self, now_ms: [])
    mp.setattr(controller_requests, "other_topic", lambda known, topic_state: False)
    mp.setattr(controller_requests, "stale_log", lambda log_topic_id, topic: False)
    mp.setattr(replica_manager, "stale_log", lambda log_topic_id, topic: False)


def _moves_wait_for_notifications(mp: pytest.MonkeyPatch) -> None:
    from strandline.controller.reassignment import PartitionReassignments
    complete = PartitionReassignments.maybe_complete

    def only_from_notifications(self, ctx, keys, now_ms):
        caller = sys._getframe(1).f_code.co_filename
        return [] if caller.endswith("elections.py") else complete(self, ctx, keys, now_ms)
    mp.setattr(PartitionReassignments, "maybe_complete", only_from_notifications)


#: name -> (configuration, how to put the bug back)
MUTANTS: dict[str, tuple[str, Callable[[pytest.MonkeyPatch], None] | None]] = {
    "follower-keeps-records-below-leader-start": ("safe", _follower_keeps_records_below_leader_start),
    "log-start-ignores-epochs": ("safe", _log_start_ignores_epochs),
    "follower-refuses-batch-across-leader-start": ("safe", _follower_refuses_batch_across_leader_start),
    "followers-serve-past-their-hw": ("safe", _followers_serve_past_their_hw),
    "no-topic-ids": ("safe", _no_topic_ids),
    "moves-wait-for-notifications": ("acks1", _moves_wait_for_notifications),
    "legacy-truncation": ("legacy", None),
}


@contextlib.contextmanager
def mutant(name: str) -> Iterator[str]:
    config, apply = MUTANTS[name]
    with pytest.MonkeyPatch.context() as mp:
        if apply is not None:
            apply(mp)
        yield config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--first-seed", type=int, default=2_000_000)
    parser.add_argument("--loads", default="heavy,light")
    parser.add_argument("--mutants", default="all", help=f"comma-separated, of: {', '.join(MUTANTS)}")
    args = parser.parse_args()
    names = list(MUTANTS) if args.mutants == "all" else args.mutants.split(",")
    loads = args.loads.split(",")
    print(f"{'mutant':44} {'load':6} {'caught':>7} {'cpu s':>7} {'per cpu min':>11}")
    totals = {load: [0, 0.0] for load in loads}
    for name in names:
        for load in loads:
            caught, started = 0, time.process_time()
            with mutant(name) as config:
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    result = run_seed(seed, config, load=load, **FULL_MENU)
                    caught += not result.ok
            cpu = time.process_time() - started
            totals[load][0] += caught
            totals[load][1] += cpu
            print(f"{name:44} {load:6} {caught:4}/{args.seeds:<3}{cpu:7.0f} {60 * caught / cpu:11.2f}", flush=True)
    for load, (caught, cpu) in totals.items():
        print(f"{'all':44} {load:6} {caught:7} {cpu:7.0f} {60 * caught / cpu:11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
