"""TXN: transactions on real processes under the lab's faults, audited for Jepsen's Kafka anomalies.

``strandline lab run TXN [--trials N]`` starts the lab's cluster (ZooKeeper and three brokers, in
network namespaces as root), creates topic ``lab`` with 3 partitions (RF 3,
``min.insync.replicas=2``), and runs two transactional producers (:class:`TxnWorkload`: each
transaction writes to two or three partitions, a fifth aborted on purpose) and three consumers
reading every partition from the beginning, two ``read_committed`` and one ``read_uncommitted``.
Its faults: one transactional fault (the coordinator of a producer's transactional id killed or
paused, or a broker powered off: SIGKILL and its files cut back to what it fsynced), then
:func:`~strandline.lab.faults.safe_trial`'s random mix (kills, controlled shutdowns, pauses,
partitions, controller failovers). Each trial runs with ``log.flush.on.ack`` true or false (its
seed chooses); with it, the power loss may hit every broker at once. After healing the producers
stop, the consumers read until they are at every partition's end, a last read_committed consumer
reads everything from the beginning, and :func:`~strandline.lab.txn_audit.audit_txn` counts the
anomalies; TXN expects none.

The controls: ``TXN-hang`` runs with ``transaction.partition.verification.enable=false`` and
reproduces a hanging transaction (KIP-890): a transactional id's transaction on partition 0 ends
(aborted), then a late transactional Produce of that producer (same producer id and epoch, a
transactional batch, no AddPartitionsToTxn) reaches the partition's leader. The leader appends it:
a transaction no coordinator knows opens and never ends, the partition's last stable offset stops
there, and read_committed readers never read what follows. The audit must find it (the checker can
fail). ``TXN-hang-verified`` plays the same with verification on (Kafka's default): the late
Produce must be refused and the audit find nothing.
"""

from __future__ import annotations

from typing import Any, Callable

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from strandline.errors import StrandlineError
from strandline.lab import history
from strandline.lab.faults import safe_trial
from strandline.lab.run import LAB_BROKER_CONFIG, LabError, Run, SESSION_MS
from strandline.lab.scenarios import Scenario
from strandline.lab.txn_audit import ANOMALIES
from strandline.load.transactions import TxnConsumer, TxnWorkload, read_to_end, txn_value
from strandline.runtime.client import KafkaConnection

TOPIC = "lab"
PARTITIONS = 3
#: the brokers' keys for TXN: no topic created by a client's metadata request (the lab creates its
#: own), 3 partitions of __transaction_state instead of 50 (it is created on the first
#: InitProducerId), and timed-out transactions aborted within 2 s instead of 10 s
TXN_BROKER_CONFIG = {"auto.create.topics.enable": "false",     # the lab creates its topic
                     "transaction.state.log.num.partitions": "3",
                     "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000"}
HANG_TXN_ID = "lab-hang"
HANG_PRODUCER = 9               # the late Produce's value is t9-000000-0 in the history
CONSUMERS = ("read_committed", "read_committed", "read_uncommitted")
DRAIN_S = 40.0

TXN_WRITES = pa.schema([("time_ms", pa.float64()), ("end_ms", pa.float64()), ("producer", pa.int32()),
                        ("transactional_id", pa.string()), ("txn", pa.int64()), ("outcome", pa.string()),
                        ("error", pa.string()), ("value", pa.string()), ("partition", pa.int32()),
                        ("order", pa.int64())])
POLLS = pa.schema([("consumer", pa.int32()), ("isolation", pa.string()), ("seq", pa.int64()), ("time_ms", pa.float64()),
                   ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.string())])
FINAL_READ = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.string())])


@dataclass
class TxnScenario:
    """A transactional scenario: ``control`` ones must make the audit find anomalies."""

    name: str
    summary: str
    drive: Callable[[Run], None]
    control: bool = False
    needs_network: bool = False
    broker_config: dict[str, str] = field(default_factory=dict)
    late_produce_accepted: bool | None = None   # what the hang controls expect of the late Produce

    def as_scenario(self, topic_config: dict[str, str]) -> Scenario:
        """The lab's :class:`Scenario` for its topic creation (min.insync.replicas 2, no unclean election)."""
        return Scenario(self.name, self.summary, "no-loss", "", self.drive, topic_config=topic_config,
                        broker_config=self.broker_config)


# -- faults ------------------------------------------------------------------------------------------


def find_coordinator(run: Run, transactional_id: str, timeout_s: float = 30.0) -> int:
    """The broker coordinating ``transactional_id`` (FindCoordinator v3), asked of live brokers."""
    found = [-1]

    def answered() -> bool:
        for b in run.cluster.brokers.values():
            if not b.alive or getattr(b, "paused", False):
                continue
            try:
                with KafkaConnection(b.address, timeout_s=3) as conn:
                    resp = conn.request(10, 3, {"key": transactional_id, "key_type": 1})
            except (OSError, StrandlineError):
                continue
            if resp.error_code == 0 and int(resp.node_id) >= 0:
                found[0] = int(resp.node_id)
                return True
        return False
    run.wait_for(f"the coordinator of {transactional_id}", answered, timeout_s)
    return found[0]


def coordinator_failover(run: Run) -> None:
    """The coordinator of a producer's transactional id killed (SIGKILL) or paused (SIGSTOP) for a
    while: its __transaction_state partition moves to another broker, the producers find it there."""
    tid = f"lab-tx-{run.rng.randrange(2)}"
    coordinator = find_coordinator(run, tid)
    how = run.rng.choice(["kill", "pause"])
    duration = run.rng.uniform(1.0, SESSION_MS / 1000 * 2)
    fault = run.begin(f"{how} broker {coordinator} (coordinator of {tid}) for {duration:.1f} s", [coordinator])
    if how == "kill":
        run.cluster.kill(coordinator)
        run.hold(duration)
        run.cluster.restart(coordinator)
    else:
        run.cluster.pause(coordinator)
        run.hold(duration)
        run.cluster.resume(coordinator)
    run.end(fault)


def power_loss(run: Run, every_broker: bool) -> None:
    """One broker (or, with log.flush.on.ack, possibly every broker at once) loses power: SIGKILL
    and its files cut back to what it fsynced."""
    brokers = list(run.cluster.brokers) if every_broker else [run.rng.choice(list(run.cluster.brokers))]
    fault = run.begin(f"brokers {brokers} lose power" if every_broker else f"broker {brokers[0]} loses power",
                      brokers)
    dropped = sum(run.cluster.power_off(b) for b in brokers)
    run.notes.append(f"{dropped} bytes not fsynced were dropped from the files of brokers {brokers}")
    run.hold(run.rng.uniform(0.5, 3.0))
    for b in brokers:
        run.cluster.restart(b)
    run.end(fault)
    run.wait_for("a leader", lambda: run.leader() >= 0, 60)


def txn_trial(run: Run) -> None:
    """One transactional fault (a coordinator failover, or a power loss), then SAFE's random mix."""
    flush = run.cluster.overrides.get("log.flush.on.ack") == "true"
    if run.rng.random() < 0.5:
        coordinator_failover(run)
    else:
        power_loss(run, every_broker=flush and run.rng.random() < 0.5)
    run.hold(run.rng.uniform(0.5, 2.0))
    safe_trial(run)


def late_produce(run: Run) -> int:
    """A transaction of ``lab-hang`` on partition 0 ends (aborted by its producer), then a
    transactional Produce of that producer (same producer id and epoch, sequence 0) reaches the
    partition's leader without an AddPartitionsToTxn: a Produce held on its way and delivered
    late. Returns the leader's error code for it (0: appended)."""
    from strandline.group.records import build_batch

    coordinator = find_coordinator(run, HANG_TXN_ID)
    address = run.cluster.brokers[coordinator].address
    with KafkaConnection(address, timeout_s=15) as conn:
        init = conn.request(22, 1, {"transactional_id": HANG_TXN_ID, "transaction_timeout": 10000})
        if init.error_code != 0:
            raise LabError(f"InitProducerId for {HANG_TXN_ID}: error {init.error_code}")
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        add = {"v3_and_below_transactional_id": HANG_TXN_ID, "v3_and_below_producer_id": pid,
               "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}
        added = conn.request(24, 1, add)
        code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        if code != 0:
            raise LabError(f"AddPartitionsToTxn for {HANG_TXN_ID}: error {code}")
        ended = conn.request(26, 1, {"transactional_id": HANG_TXN_ID, "producer_id": pid, "producer_epoch": epoch,
                                     "committed": False})
        if ended.error_code != 0:
            raise LabError(f"EndTxn (abort) for {HANG_TXN_ID}: error {ended.error_code}")

        def completed() -> bool:        # EndTxn is answered before the markers are written
            [state] = conn.request(65, 0, {"transactional_ids": [HANG_TXN_ID]}).transaction_states
            return bool(state.transaction_state == "CompleteAbort")
        run.wait_for(f"{HANG_TXN_ID}'s abort marker written (CompleteAbort)", completed, 30)
    leader = run.leader(0)
    started = run.now_ms()
    value = txn_value(HANG_PRODUCER, 0, 0)
    batch = build_batch([(b"", value.encode())], int(time.time() * 1000), pid, epoch, 0, transactional=True)
    with KafkaConnection(run.cluster.brokers[leader].address, timeout_s=30) as conn:
        resp = conn.request(0, 3, {"transactional_id": HANG_TXN_ID, "acks": -1, "timeout": 30000,
                                   "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0,
                                                                                      "records": bytes(batch)}]}]})
    answer = resp.responses[0].partition_responses[0]
    error = int(answer.error_code)
    name = getattr(answer.error_code, "name", str(error)).upper()
    run.measured.update(late_produce_error=error, late_produce_answer=name)
    run.notes.append(f"late transactional Produce of {HANG_TXN_ID} (producer id {pid}, epoch {epoch}) to leader "
                     f"{leader} of {TOPIC}-0: {name}" + (f" at offset {answer.base_offset}" if error == 0 else ""))
    # its transaction was aborted by its producer: its value must never be read_committed
    if isinstance(run.workload, TxnWorkload):
        run.workload.record(started, HANG_PRODUCER, HANG_TXN_ID, 0, "aborted", f"late Produce: {name}", [(value, 0)])
    return error


def hang(run: Run) -> None:
    """The late Produce, then 5 s of transactions: with verification off, those on partition 0
    stand behind a transaction that never ends."""
    run.wait_acks(20)
    fault = run.begin("late transactional Produce without AddPartitionsToTxn", [run.leader(0)])
    late_produce(run)
    run.hold(5.0)
    run.end(fault)


SCENARIOS: dict[str, TxnScenario] = {s.name: s for s in [
    TxnScenario("TXN", "transactions over 3 partitions (some aborted on purpose), read_committed and read_uncommitted "
                "consumers, under random faults (coordinator failover, power loss, kills, pauses, partitions)",
                txn_trial),
    TxnScenario("TXN-ELR", "TXN with eligible leader replicas (KIP-966, eligible.leader.replicas.enable): a broker "
                "back from an unclean shutdown is taken out of every ISR before it may lead",
                txn_trial, broker_config={"eligible.leader.replicas.enable": "true"}),
    TxnScenario("TXN-hang", "the control: transaction.partition.verification.enable=false and a late transactional "
                "Produce: a hanging transaction the audit must find", hang, control=True,
                broker_config={"transaction.partition.verification.enable": "false"}, late_produce_accepted=True),
    TxnScenario("TXN-hang-verified", "the same late Produce with verification on (KIP-890, the default): refused, "
                "no anomaly", hang, late_produce_accepted=False),
]}


# -- one run -----------------------------------------------------------------------------------------


def _write(path: Path, schema: pa.Schema, rows: list[tuple[Any, ...]]) -> None:
    history._write(path, schema, rows)


def execute_txn(scenario: TxnScenario, run_dir: Path, seed: int, network_ok: bool = True) -> dict[str, Any]:
    """Run ``scenario`` once in ``run_dir``, in a process of its own (forked), and return run.json's
    content. A librdkafka client of a run may outlive it (one replaced after a fatal error goes on
    connecting to the run's addresses until it is destroyed), and the next run on this machine's
    same subnet listens on the same addresses: its metadata requests would auto-create the topic
    there. The run's process ends with the run, and every client with it."""
    import multiprocessing
    import os

    def trial() -> None:
        import signal

        def on_term(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, on_term)      # the run's clean-up runs on SIGTERM too
        code = 1
        try:
            _execute(scenario, run_dir, seed, network_ok)
            code = 0
        finally:
            os._exit(code)      # no client's destructor may hold the process

    process = multiprocessing.get_context("fork").Process(target=trial, name=f"lab-{scenario.name}")
    process.start()
    try:
        process.join()
    except BaseException:
        process.terminate()     # SIGTERM: the run's own clean-up stops its cluster and network
        process.join(60)
        raise
    if not (run_dir / "run.json").exists():
        raise LabError(f"{scenario.name}: the run's process ended ({process.exitcode}) without writing run.json")
    return history.read_run(run_dir)


def _execute(scenario: TxnScenario, run_dir: Path, seed: int, network_ok: bool = True) -> dict[str, Any]:
    """One run in this process (:func:`execute_txn` forks for it); the history is written in ``run_dir``."""
    from strandline.lab.cluster import LabCluster
    from strandline.lab.network import LabNetwork
    from strandline.lab.replicas import Sampler
    from strandline.lab.runner import _converged, _converged_isr, _create_topic, _heal

    run_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    flush = scenario.drive is txn_trial and rng.random() < 0.5
    network = LabNetwork(list(range(1, 4))) if network_ok else None
    config = {**LAB_BROKER_CONFIG, **TXN_BROKER_CONFIG, **scenario.broker_config,
              "log.flush.on.ack": "true" if flush else "false"}
    cluster = LabCluster(run_dir, 3, config, network)
    info: dict[str, Any] = {
        "scenario": scenario.name, "cluster": "strandline", "summary": scenario.summary,
        "run_dir": str(run_dir.resolve()), "expect": "anomalies" if scenario.control else "no-anomalies",
        "seed": seed, "min.insync.replicas": 2, "unclean.leader.election.enable": False, "broker_config": config,
        "topic_config": {}, "partitions": PARTITIONS, "topic": TOPIC, "log.flush.on.ack": flush,
        "network": "namespaces" if network else "loopback", "faults": [], "notes": [], "error": None,
        "late_produce_error": None}
    workload: TxnWorkload | None = None
    consumers: list[TxnConsumer] = []
    final_reader: TxnConsumer | None = None
    sampler = run = None
    try:
        cluster.start()
        sampler = Sampler(cluster, TOPIC, PARTITIONS)
        sampler.start()
        workload = TxnWorkload(cluster.bootstrap, TOPIC, PARTITIONS, seed=seed)
        run = Run(cluster, network, workload, sampler, TOPIC, rng)
        _create_topic(cluster, run, scenario.as_scenario({}), PARTITIONS)
        info["started_ms"] = run.now_ms()
        consumers = [TxnConsumer(i, cluster.bootstrap, TOPIC, PARTITIONS, iso) for i, iso in enumerate(CONSUMERS)]
        for c in consumers:
            c.start()
        workload.start()
        run.wait_acks(20, timeout_s=60)
        try:
            scenario.drive(run)
        except LabError as exc:
            info["error"] = str(exc)
        info["late_produce_error"] = run.measured.get("late_produce_error")
        info["late_produce_answer"] = run.measured.get("late_produce_answer")
        _heal(run)
        run.wait_for("every replica back in the ISR", lambda: _converged_isr(run, PARTITIONS), 90)
        workload.stop()
        answered = run.now_ms()
        run.wait_for("every replica at the same log end offset", lambda: bool(_converged(run, PARTITIONS, answered)),
                     60)
        for c in consumers:
            if not read_to_end(c, DRAIN_S):
                run.notes.append(f"consumer {c.index} ({c.isolation}) did not reach the end within {DRAIN_S:.0f} s")
        final_reader = TxnConsumer(len(consumers), cluster.bootstrap, TOPIC, PARTITIONS, "read_committed")
        final_reader.start()
        if not read_to_end(final_reader, DRAIN_S):
            raise LabError(f"the final read_committed read did not reach the end within {DRAIN_S:.0f} s")
        info["ended_ms"] = run.now_ms()
    except (StrandlineError, OSError) as exc:      # recorded: the run did not go as written
        if not info["error"]:
            info["error"] = str(exc) if isinstance(exc, LabError) else f"{type(exc).__name__}: {exc}"
    finally:
        if workload is not None:
            workload.stop()
        for c in consumers + ([final_reader] if final_reader else []):
            c.stop()
        if sampler is not None:
            sampler.stop()
        cluster.close()
    if run is not None:
        info["faults"] = run.faults
        info["notes"] = run.notes + [f"fatal client error: {e}" for e in (workload.fatal if workload else [])[:20]]
        info["consumer_errors"] = {c.index: sorted(set(c.errors))[:10] for c in consumers if c.errors}
    _write(run_dir / "txn_writes.parquet", TXN_WRITES, sorted(workload.writes) if workload else [])
    _write(run_dir / "polls.parquet", POLLS, [p for c in consumers for p in c.polls])
    _write(run_dir / "final_read.parquet", FINAL_READ,
           [(p, o, v) for _, _, _, _, p, o, v in (final_reader.polls if final_reader else [])])
    history.write_replicas(run_dir, sampler.views if sampler else [])
    history.write_run(run_dir, info)
    return info


# -- verdict and the command -------------------------------------------------------------------------


def txn_verdict(scenario: TxnScenario, info: dict[str, Any], result: dict[str, Any]) -> tuple[bool, str]:
    """Whether the run's outcome is the one expected, and the one line that says it."""
    if info.get("error"):
        return False, f"{scenario.name}: the run did not go as written ({info['error']}); not audited"
    t = result["transactions"]
    detail = (f"{t.get('committed', 0)} transactions committed, {t.get('aborted', 0)} aborted, "
              f"{t.get('unknown', 0)} unknown; " + ", ".join(f"{result[a]} {a.replace('_', ' ')}" for a in ANOMALIES))
    problems = []
    if t.get("committed", 0) == 0:
        problems.append("no transaction committed")
    late = info.get("late_produce_error")
    if scenario.late_produce_accepted is not None:
        answer = info.get("late_produce_answer") or f"error {late}"
        detail += "; the late Produce was " + ("appended" if late == 0 else f"refused ({answer})")
        if late is None:
            problems.append("the late Produce was not sent")
        elif (late == 0) != scenario.late_produce_accepted:
            problems.append("the late Produce should have been " +
                            ("appended" if scenario.late_produce_accepted else "refused"))
    if scenario.control:
        if result["anomalies"] == 0:
            problems.append("the checker found no anomaly in a run with a hanging transaction")
        tail = "the checker can fail, as expected" if not problems else f"NOT as expected: {'; '.join(problems)}"
        return not problems, f"{scenario.name}: expected anomalies (a hanging transaction): {detail} - {tail}"
    if result["anomalies"]:
        problems.append(f"{result['anomalies']} anomalies")
    tail = "as expected" if not problems else f"NOT as expected: {'; '.join(problems)}"
    return not problems, f"{scenario.name}: no anomaly expected: {detail} - {tail}"


def summary_table(scenario: TxnScenario, infos: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    """Totals over the trials that ran as written (the others are counted, not audited)."""
    done = [(i, r) for i, r in zip(infos, results) if not i.get("error")]
    bad = sum(1 for i, r in done if not txn_verdict(scenario, i, r)[0])
    seconds = [(i["ended_ms"] - i["started_ms"]) / 1000 for i, _ in done if i.get("ended_ms")]
    rows: list[tuple[str, Any]] = [
        ("trials", len(results)), ("trials that did not go as written", len(results) - len(done)),
        ("trials with flush.on.ack", sum(1 for i, _ in done if i.get("log.flush.on.ack"))),
        ("transactions committed", sum(r["transactions"].get("committed", 0) for _, r in done)),
        ("transactions aborted", sum(r["transactions"].get("aborted", 0) for _, r in done)),
        ("transactions unknown", sum(r["transactions"].get("unknown", 0) for _, r in done)),
        ("records polled", sum(v for _, r in done for k, v in r["reads"].items() if k != "final")),
        *[(a.replace("_", " "), sum(r[a] for _, r in done)) for a in ANOMALIES],
        ("audited trials not as expected", bad)]
    if seconds:
        rows.append(("seconds per trial (workload start to final read)", f"{sum(seconds) / len(seconds):.1f}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def is_txn(name: str) -> bool:
    return name.upper() in {k.upper() for k in SCENARIOS}


def list_command() -> int:
    """The transactional scenarios' lines of ``strandline lab list``, aligned with the others'."""
    from strandline.lab.runner import _say
    from strandline.lab.scenarios import SAFE, SCENARIOS as OTHERS

    width = max(len(n) for n in [*OTHERS, SAFE.name, *SCENARIOS])
    for t in SCENARIOS.values():
        # TXN's random mix has network partitions where root can make them, and runs without
        # them (saying so) elsewhere; the controls have none
        _say(f"{t.name:<{width}}  {t.summary}" + ("" if t.control or t.drive is hang else "  [partitions need root]"))
    return 0


def audit_command(run_dirs: list[Path]) -> int:
    """``strandline lab audit`` of TXN run folders: the audit again, a verdict line each, a table
    per scenario with several runs."""
    from strandline.lab.txn_audit import audit_txn

    all_ok = True
    names = {d: history.read_run(d)["scenario"] for d in run_dirs}
    for name in sorted(set(names.values())):
        group = [d for d in run_dirs if names[d] == name]
        all_ok &= report(SCENARIOS[name], group, audit_txn(group)) == 0
    return 0 if all_ok else 1


def run_txn(name: str, seed: int | None, data_dir: str | None, trials: int = 1) -> int:
    """``strandline lab run TXN|TXN-hang|TXN-hang-verified``: the exit status of the command."""
    from strandline.lab.network import unavailable_reason
    from strandline.lab.runner import NOT_RUN, _interruptible, _runs_root, _say
    from strandline.lab.txn_audit import audit_txn

    scenario = SCENARIOS[{k.upper(): k for k in SCENARIOS}[name.upper()]]
    reason = unavailable_reason()
    if reason and scenario.needs_network:
        _say(f"{scenario.name}: skipped: {reason}")
        return NOT_RUN
    if reason:
        _say(f"{scenario.name}: no network partitions among the faults: {reason}")
    _interruptible()
    seed = seed if seed is not None else random.randrange(1 << 31)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = _runs_root(data_dir)
    run_dirs = []
    for trial in range(trials):
        run_dir = root / (f"{scenario.name}-{stamp}" + (f"-{trial:03d}" if trials > 1 else ""))
        _say(f"{scenario.name}: run {trial + 1}/{trials} in {run_dir} (seed {seed + trial})")
        info = execute_txn(scenario, run_dir, seed + trial, network_ok=reason is None)
        for f in info["faults"]:
            _say(f"  fault: {f['label']}")
        for n in info["notes"]:
            if n.startswith("late"):
                _say(f"  {n}")
        if info.get("error"):
            _say(f"  error: {info['error']}")
        run_dirs.append(run_dir)
    results = audit_txn(run_dirs)
    return report(scenario, run_dirs, results)


def report(scenario: TxnScenario, run_dirs: list[Path], results: list[dict[str, Any]]) -> int:
    from strandline.lab.runner import _say

    all_ok = True
    infos = []
    for run_dir, result in zip(run_dirs, results):
        info = history.read_run(run_dir)
        infos.append(info)
        ok, line = txn_verdict(scenario, info, result)
        all_ok &= ok
        if len(run_dirs) > 1:
            line = f"{run_dir.name}: {line}"
        _say(line)
        for anomaly, examples in result["examples"].items():
            _say(f"  {anomaly}: {'; '.join(examples[:3])}")
    if len(run_dirs) > 1:
        _say(summary_table(scenario, infos, results))
    return 0 if all_ok else 1
