"""The explorer's speed (seeds per second per core) per configuration, and digests that pin its runs.

Each seed runs as ``strandline sim explore`` runs it (the full menu, the mixed load, 60 simulated
seconds unless told otherwise), in this process, one after the other. The speed is seeds over the
seconds the runs took (``RunResult.wall_s``), as ``sim explore`` prints it. A benchmark, not a test:

    .venv/bin/python benchmarks/explorer_speed.py [--configs safe,txn,compact] [--first-seed 2990000]
        [--seeds 20] [--write digests.json | --compare digests.json] [--processes 1]

With ``--write`` or ``--compare`` it also takes a digest of each run: the explorer's outcome (every
violation, acknowledged and lost batches, events, faults, simulated time, transactions), the
trace's last lines, the final state of every broker's replicas (leader, epoch, ISR, log start, high
watermark, log end and a hash of the log's bytes), a hash of every broker's log lines and the
final states of the run's random generators. An optimization of the simulator must leave every
digest as it was: ``--compare`` prints each seed whose digest differs and exits 1 if any does.
``--processes N`` runs the seeds of a digest in N processes (the speed it prints is then per core).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import sys
import time
from typing import Any

from strandline.cli.sim import DEFAULT_LOAD
from strandline.sim.configs import CONFIGS
from strandline.sim.explore import Explorer
from strandline.sim.menu import FULL_MENU


def _hash(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def run(job: tuple[int, str, int, bool]) -> tuple[int, float, dict[str, Any] | None]:
    """One seed: (seed, seconds it took, its digest if asked)."""
    seed, config, duration_ms, digest = job
    explorer = Explorer(seed, CONFIGS[config], duration_ms=duration_ms, load=DEFAULT_LOAD, **FULL_MENU)
    result = explorer.run()
    if not digest:
        return seed, result.wall_s, None
    sim = explorer.sim
    replicas = {}
    for broker_id, node in sorted(sim.brokers.items()):
        if node.core is None:
            continue
        for (topic, index), p in sorted(node.core.partitions.items()):
            log = p.log
            data = sim.log_bytes(broker_id, topic, index)
            replicas[f"{broker_id}/{topic}-{index}"] = (
                p.leader_id, p.leader_epoch, list(p.isr), log.log_start_offset, p.high_watermark,
                log.log_end_offset, _hash(data))
    brokers = {str(b): _hash(node.log, node.events, node.incarnation, node.session)
               for b, node in sorted(sim.brokers.items())}
    history = explorer.history
    return seed, result.wall_s, _plain({
        "outcome": [str(result.violation) if result.violation else None, result.all_violations, result.acked,
                    result.lost, result.events, result.faults, result.simulated_ms, result.transactions],
        "trace": _hash(result.trace),
        "replicas": replicas,
        "broker_logs": brokers,
        "history": _hash([(a.producer, a.partition, a.base_offset, a.crc, a.values, a.acks, a.at_ms) for a in history.acked],
                         sorted((p, sorted(c.items())) for p, c in history.consumed.items())),
        "random": _hash(explorer.rng.getstate(), sim.rng.getstate()),
        "nemesis": dict(explorer.nemesis.drawn),
    })


def _plain(digest: dict[str, Any]) -> dict[str, Any]:
    """The digest as it reads back from JSON (tuples as lists), so that a fresh one compares equal."""
    result: dict[str, Any] = json.loads(json.dumps(digest, sort_keys=True))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="safe,txn,compact")
    parser.add_argument("--first-seed", type=int, default=2990000)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--duration-ms", type=int, default=60000)
    parser.add_argument("--processes", type=int, default=1)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", metavar="FILE", help="write each seed's digest to FILE (JSON)")
    what.add_argument("--compare", metavar="FILE", help="compare each seed's digest with FILE's")
    args = parser.parse_args()
    digest = bool(args.write or args.compare)
    expected = {}
    if args.compare:
        with open(args.compare) as f:
            expected = json.load(f)
    digests: dict[str, dict[str, Any]] = {}
    differ = 0
    pool = multiprocessing.Pool(args.processes) if args.processes > 1 else None
    try:
        for config in args.configs.split(","):
            jobs = [(seed, config, args.duration_ms, digest)
                    for seed in range(args.first_seed, args.first_seed + args.seeds)]
            started = time.perf_counter()
            results = list(pool.imap(run, jobs) if pool is not None else map(run, jobs))
            elapsed = time.perf_counter() - started
            busy = sum(wall for _, wall, _ in results)
            for seed, _, d in results:
                key = f"{config}/{seed}"
                if d is None:
                    continue
                digests[key] = d
                if args.compare:
                    want = expected.get(key)
                    if want is None:
                        print(f"{key}: no digest in {args.compare}")
                        differ += 1
                    elif want != d:
                        differ += 1
                        parts = sorted(k for k in d if d[k] != want.get(k))
                        print(f"{key}: differs in {', '.join(parts)}")
            print(f"{config}: {len(jobs)} seeds, {len(jobs) / busy:.2f} seeds per second per core "
                  f"({elapsed:.1f} s wall, {args.duration_ms / 1000:g} simulated s each)", flush=True)
    finally:
        if pool is not None:
            pool.terminate()
    if args.write:
        with open(args.write, "w") as f:
            json.dump(digests, f, indent=1, sort_keys=True)
        print(f"{len(digests)} digests written to {args.write}")
    if args.compare:
        print(f"{len(digests) - differ} of {len(digests)} digests identical to {args.compare}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
