"""One lab run from start to verdict: cluster, topic, workload, faults, healing, history, audit.

``run_scenario`` returns the exit status of ``strandline lab run``: 0 when the outcome is the one
SPEC.md expects, 1 when it is not, 3 when the scenario could not run on this machine (the reason
is printed). Every process started is stopped by PID and every namespace and rule removed before
it returns, also when the run fails or is interrupted.
"""

from __future__ import annotations

from typing import Any

import random
import signal
import time
from types import FrameType
from pathlib import Path

from strandline.errors import StrandlineError
from strandline.lab import history, timeline
from strandline.lab.cluster import LabCluster
from strandline.lab.kafka import STRANDLINE, make_cluster, unplayable
from strandline.lab.network import LabNetwork, unavailable_reason
from strandline.lab.scenarios import LAB_BROKER_CONFIG, SAFE, SCENARIOS, LabError, Run, Scenario
from strandline.lab.replicas import Sampler, StoredBatch, read_replica_logs
from strandline.load.history import Workload
from strandline.runtime.client import KafkaConnection

TOPIC = "lab"
NOT_RUN = 3


def _say(line: str) -> None:
    print(line, flush=True)


def _create_topic(cluster: LabCluster, run: Run, scenario: Scenario, partitions: int) -> None:
    """Replicas ``[leader, controller, the rest]``: the preferred leader is not the controller where
    possible, so that killing a leader is not also a controller failover unless asked, and the
    controller is the next in line (Kafka elects the first live ISR member in assignment order)."""
    ids = sorted(cluster.brokers)
    deadline = time.monotonic() + 30
    controller = -1
    while True:      # until a controller is elected and knows every broker (else: INVALID_REPLICA_ASSIGNMENT)
        with KafkaConnection(cluster.bootstrap, timeout_s=5) as conn:
            meta = conn.request(3, 9, {"topics": [], "allow_auto_topic_creation": False,
                                       "include_cluster_authorized_operations": False,
                                       "include_topic_authorized_operations": False})
        controller = int(meta.controller_id)
        if controller >= 0 and {int(b.node_id) for b in meta.brokers} >= set(ids):
            break
        if time.monotonic() > deadline:
            raise LabError("the brokers did not all register with a controller within 30 s")
        time.sleep(0.1)
    leaders = [b for b in ids if b != controller] or ids
    assignment: list[dict[str, Any]] = []
    for p in range(partitions):
        first = leaders[p % len(leaders)]
        rest = [controller] if controller != first else []
        rest += [b for b in ids if b not in (first, controller)]
        assignment.append({"partition_index": p, "broker_ids": [first] + rest})
    configs = {"min.insync.replicas": str(scenario.min_isr),
               "unclean.leader.election.enable": "true" if scenario.unclean else "false", **scenario.topic_config}
    address = cluster.brokers[controller].address
    with KafkaConnection(address, timeout_s=30) as conn:
        resp = conn.request(19, 4, {"topics": [{"name": TOPIC, "num_partitions": -1, "replication_factor": -1,
                                                "assignments": assignment,
                                                "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                                    "timeout": 30000, "validate_only": False})
    if resp.topics[0].error_code != 0:
        raise LabError(f"creating topic {TOPIC}: error {resp.topics[0].error_code}")
    for p in range(partitions):
        leader = assignment[p]["broker_ids"][0]
        run.wait_isr(leader, set(ids), timeout_s=30, partition=p)


def _heal(run: Run) -> None:
    """Undo every fault still in place: heal the network, resume paused brokers, restart dead ones."""
    if run.has_network:
        run.network.heal()
    for b in run.cluster.brokers.values():
        if b.paused:
            run.cluster.resume(b.id)
    for b in run.cluster.brokers.values():
        if not b.alive:
            run.cluster.restart(b.id)
    for f in run.faults:
        if f["end_ms"] is None:
            run.end(f)


def _converged(run: Run, partitions: int, after_ms: float) -> list[tuple[int, int, int]] | None:
    """``[(partition, leader, high watermark)]`` once every partition has a leader whose ISR is
    every broker and every replica's LEO equals that HW, in one snapshot of views all sampled after
    ``after_ms`` (when the last write had its answer); None until then."""
    ids = set(run.cluster.brokers)
    views = run.sampler.latest()
    final = []
    for p in range(partitions):
        leaders = {v.leader for b in ids if (v := views.get((b, p))) is not None}
        if len(leaders) != 1 or (leader := leaders.pop()) < 0:
            return None
        lv = views.get((leader, p))
        if lv is None or lv.time_ms <= after_ms or lv.state != "up" or lv.leader != leader \
                or {int(x) for x in lv.isr.split(",") if x} != ids or lv.hw != lv.leo:
            return None
        for b in ids:
            v = views[(b, p)]
            if v.time_ms <= after_ms or v.state != "up" or v.leo != lv.leo:
                return None
        final.append((p, leader, lv.hw))
    return final


def execute(scenario: Scenario, run_dir: Path, seed: int, partitions: int = 1, network_ok: bool = True,
            system: str = STRANDLINE) -> dict[str, Any]:
    """Run ``scenario`` once in ``run_dir`` on ``system`` (Strandline's brokers or Kafka 3.9's,
    :mod:`strandline.lab.kafka`); the history is written there. Returns run.json's content."""
    run_dir.mkdir(parents=True, exist_ok=True)
    network = LabNetwork(list(range(1, 4))) if network_ok else None
    config = {**LAB_BROKER_CONFIG, **scenario.broker_config}
    cluster = make_cluster(system, run_dir, 3, config, network)
    info = {"scenario": scenario.name, "cluster": system, "summary": scenario.summary, "run_dir": str(run_dir.resolve()), "expect": scenario.expect, "seed": seed,
            "acks": scenario.acks, "enable.idempotence": scenario.idempotence,
            "min.insync.replicas": scenario.min_isr, "unclean.leader.election.enable": scenario.unclean,
            "broker_config": config, "topic_config": scenario.topic_config, "partitions": partitions, "topic": TOPIC,
            "network": "namespaces" if network else "loopback", "faults": [], "notes": [], "error": None}
    workload = sampler = run = final = None
    logs: dict[int, list[StoredBatch]] = {}
    try:
        cluster.start()
        sampler = Sampler(cluster, TOPIC, partitions)
        sampler.start()
        workload = Workload(cluster.bootstrap, TOPIC, partitions, acks=scenario.acks,
                            idempotence=scenario.idempotence, extra_config=scenario.producer_config)
        run = Run(cluster, network, workload, sampler, TOPIC, random.Random(seed))
        _create_topic(cluster, run, scenario, partitions)
        info["started_ms"] = run.now_ms()
        workload.start()
        run.wait_acks(100, timeout_s=30)
        try:
            scenario.drive(run)
        except LabError as exc:
            info["error"] = str(exc)
        _heal(run)
        run.wait_for("every replica back in the ISR", lambda: _converged_isr(run, partitions), 90)
        workload.stop()
        answered = run.now_ms()
        converged: list[list[tuple[int, int, int]] | None] = [None]

        def settled() -> bool:
            converged[0] = _converged(run, partitions, answered)
            return bool(converged[0])

        run.wait_for("every replica at the same log end offset", settled, 60)
        final = converged[0]
        info["ended_ms"] = run.now_ms()
    except (StrandlineError, OSError) as exc:      # recorded: the run did not go as written
        if not info["error"]:
            info["error"] = str(exc) if isinstance(exc, LabError) else f"{type(exc).__name__}: {exc}"
        final = None
    finally:
        if workload is not None:
            workload.stop()
        if sampler is not None:
            sampler.stop()
        try:
            if final is not None:
                logs = {b.id: read_replica_logs(b.log_dir, TOPIC, partitions) for b in cluster.brokers.values()}
        finally:
            cluster.close()
    if run is not None:
        info["faults"] = run.faults
        info["notes"] = run.notes + [f"fatal client error: {e}" for e in (workload.fatal if workload else [])]
    history.write_ops(run_dir, workload.ops if workload else [])
    history.write_replicas(run_dir, sampler.views if sampler else [])
    history.write_logs(run_dir, logs)
    history.write_final(run_dir, final or [])
    history.write_run(run_dir, info)
    return info


def _converged_isr(run: Run, partitions: int) -> bool:
    ids = set(run.cluster.brokers)
    return all(run.leader(p) >= 0 and run.isr(run.leader(p), p) == ids for p in range(partitions))


def verdict(scenario: Scenario, info: dict[str, Any], result: dict[str, Any], views: list[dict[str, Any]] | None = None
            ) -> tuple[bool, str]:
    """Whether the run's outcome is the one SPEC.md expects, and the one line that says it."""
    lost, divergent = result["lost"], result["divergent_batches"]
    if info.get("error"):
        return False, f"{scenario.name}: the run did not go as written ({info['error']}); not audited"
    if scenario.expect == "loss":
        expected_ok = lost > 0
    elif scenario.expect == "divergence":
        expected_ok = divergent > 0
    elif scenario.expect == "no-divergence":
        expected_ok = divergent == 0
    else:
        expected_ok = lost == 0 and divergent == 0
    broken = [f"{result[k]} {k}" for k in scenario.promised_zero() if result[k]]
    finding = scenario.check(info, result, views) if scenario.check is not None else None
    acked = result["ops"].get("ok", 0)
    detail = f"{lost} lost of {acked} acknowledged"
    if lost and scenario.bound:
        detail += f" ({scenario.bound})"
    if divergent:
        detail += f", {divergent} divergent batches on {', '.join(result['divergent_replicas'])}"
    detail += f", {result['duplicated']} duplicated, {result['reordered']} reordered, {result['unexpected']} unexpected"
    if finding is not None:
        detail += f"; {finding.words}"
    problems = []
    if not expected_ok:
        problems.append("expected " + {"loss": "a loss", "no-loss": "no loss", "divergence": "divergent replicas",
                                       "no-divergence": "identical replicas"}[scenario.expect])
    if broken:
        promise = "every record read was sent" + (", once and in its producer's order" if scenario.idempotence else "")
        problems.append(f"{', '.join(broken)}, where the scenario promises {promise}")
    if finding is not None and finding.problem:
        problems.append(finding.problem)
    ok = not problems
    tail = "as the seed says" if ok else f"NOT as the seed says: {'; '.join(problems)}"
    return ok, f"{scenario.name}: {scenario.expectation}: {detail} - {tail}"


def _runs_root(data_dir: str | None) -> Path:
    return Path(data_dir or "lab-runs").resolve()


def _interruptible() -> None:
    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)


def find_scenario(name: str) -> Scenario:
    scenario = SAFE if name.upper() == "SAFE" else {k.upper(): v for k, v in SCENARIOS.items()}.get(name.upper())
    if scenario is None:
        raise StrandlineError(f"no scenario {name!r}; `strandline lab list` names them")
    return scenario


def run_scenario(name: str, seed: int | None, data_dir: str | None, trials: int = 1,
                 system: str = STRANDLINE) -> int:
    scenario = find_scenario(name)
    cannot = unplayable(scenario, system)
    if cannot:
        _say(cannot)
        return NOT_RUN
    reason = unavailable_reason()
    if scenario.needs_network and reason:
        _say(f"{scenario.name}: skipped: {reason}")
        return NOT_RUN
    if scenario is SAFE and reason:
        _say(f"{scenario.name}: no network partitions among the faults: {reason}")
    _interruptible()
    seed = seed if seed is not None else random.randrange(1 << 31)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = _runs_root(data_dir)
    run_dirs = []
    on = "" if system == STRANDLINE else f"-{system}"
    for trial in range(trials):
        run_dir = root / (f"{scenario.name}{on}-{stamp}" + (f"-{trial:03d}" if trials > 1 else ""))
        _say(f"{scenario.name}: run {trial + 1}/{trials} in {run_dir} (seed {seed + trial})")
        info = execute(scenario, run_dir, seed + trial, network_ok=reason is None, system=system)
        for f in info["faults"]:
            _say(f"  fault: {f['label']}")
        if info.get("error"):
            _say(f"  error: {info['error']}")
        run_dirs.append(run_dir)
    from strandline.lab.audit import audit

    results = audit(run_dirs)
    all_ok = True
    for run_dir, result in zip(run_dirs, results):
        info = history.read_run(run_dir)
        views = history.read_views(run_dir)
        ok, line = verdict(scenario, info, result, views)
        all_ok &= ok
        png, page = timeline.draw(run_dir, info, views, result, line)
        _say(f"  timeline: {page}\n  timeline: {png}")
        if system != STRANDLINE:
            line = f"{system}: {line}"
        if trials > 1:
            line = f"{run_dir.name}: {line}"
        _say(line)
    if trials > 1:
        _say(summary_table(scenario, run_dirs, results))
    return 0 if all_ok else 1


def summary_table(scenario: Scenario, run_dirs: list[Path], results: list[dict[str, Any]]) -> str:
    """Totals over the trials that ran as written (the others are counted, not audited)."""
    infos = [history.read_run(d) for d in run_dirs]
    done = [(d, i, r) for d, i, r in zip(run_dirs, infos, results) if not i.get("error")]
    bad = sum(1 for d, i, r in done if not verdict(scenario, i, r, history.read_views(d))[0])
    rows = [("trials", len(results)), ("trials that did not go as written", len(results) - len(done)),
            ("acknowledged writes", sum(r["ops"].get("ok", 0) for _, _, r in done)),
            ("lost", sum(r["lost"] for _, _, r in done)),
            ("divergent batches", sum(r["divergent_batches"] for _, _, r in done)),
            ("duplicated", sum(r["duplicated"] for _, _, r in done)),
            ("reordered", sum(r["reordered"] for _, _, r in done)),
            ("unexpected", sum(r["unexpected"] for _, _, r in done)), ("audited trials not as expected", bad)]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def audit_command(run_dirs: list[str]) -> int:
    from strandline.lab.audit import audit

    dirs = [Path(d) for d in run_dirs]
    for d in dirs:
        if not (d / "run.json").exists():
            raise StrandlineError(f"{d} is not a lab run folder (no run.json)")
    results = audit(dirs)
    all_ok = True
    by_scenario: dict[str, list[tuple[Scenario, Path, dict[str, Any]]]] = {}
    for d, result in zip(dirs, results):
        info = history.read_run(d)
        scenario = SAFE if info["scenario"] == "SAFE" else SCENARIOS[info["scenario"]]
        views = history.read_views(d)
        ok, line = verdict(scenario, info, result, views)
        all_ok &= ok
        timeline.draw(d, info, views, result, line)
        _say(f"{d.name}: {line}")
        by_scenario.setdefault(scenario.name, []).append((scenario, d, result))
    for name, runs in by_scenario.items():
        if len(runs) > 1:
            _say(f"{name}, {len(runs)} runs:\n" + summary_table(runs[0][0], [d for _, d, _ in runs], [r for _, _, r in runs]))
    return 0 if all_ok else 1


def list_command() -> int:
    scenarios = [*SCENARIOS.values(), SAFE]
    width = max(len(s.name) for s in scenarios)
    for s in scenarios:
        _say(f"{s.name:<{width}}  {s.summary}" + ("  [needs root: partitions]" if s.needs_network else ""))
    return 0


