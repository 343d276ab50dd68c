"""What TLS and SASL cost: RF=3 acks=all produce over PLAINTEXT and over SASL_SSL, same run.

Two 3-broker clusters, one from ``strandline up`` and one from ``strandline up --security
sasl_ssl`` (TLS, SCRAM-SHA-512, ACLs; brokers replicate over SASL_SSL too), are started one after
the other and kept; then, for ``--rounds`` rounds, interleaved, ``strandline bench produce
--processes 2 --acks all`` sends ``--records`` 1 KiB records to a new RF=3 topic of each (the
secured one with the admin user's ``--command-config``). Prints each run's MB/s and the brokers'
CPU seconds per MB, and the ratio of the medians. A benchmark, not a test:

    .venv/bin/python benchmarks/security_cost.py [--records 300000] [--rounds 3] [--profile]

``--profile`` runs the secured brokers under cProfile (``STRANDLINE_PROFILE``); their profiles are
left in the secured cluster's data directory, which is then kept.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from strandline.launch.up import UpCluster

sys.path.insert(0, os.path.dirname(__file__))
from produce_consume import broker_pids, cpu_seconds  # noqa: E402


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strandline.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def produce(bootstrap: str, records: int, config: list[str], pids: list[int]) -> tuple[float, float]:
    """(MB/s as bench produce reports it, brokers' CPU seconds per MB sent)."""
    topic = f"cost-{uuid.uuid4().hex[:8]}"
    made = cli("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, "--partitions", "6",
               "--replication-factor", "3", *config)
    if made.returncode != 0:
        raise SystemExit(f"cannot create {topic}: {made.stderr.strip()}")
    before = cpu_seconds(pids)
    done = cli("bench", "produce", "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
               "--record-size", "1024", "--acks", "all", "--processes", "2", "--producer-props", "linger.ms=5",
               "batch.size=262144", *config)
    if done.returncode != 0:
        raise SystemExit(f"bench produce failed: {done.stderr.strip()[-500:]}")
    used = cpu_seconds(pids) - before
    m = re.search(r"([\d.]+) MB/sec", done.stdout.strip().splitlines()[-1])
    if m is None:
        raise SystemExit(f"no MB/sec in bench's last line: {done.stdout.strip().splitlines()[-1]}")
    return float(m.group(1)), used / (records * 1024 / 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="strandline-security-cost-"))
    plain = UpCluster(root / "plain", 3, 39300, 39381, console=False, stderr=root / "plain-up.log")
    env = dict(os.environ, STRANDLINE_PROFILE=str(root / "secure" / "broker.prof")) if args.profile else None
    secure = UpCluster(root / "secure", 3, 39400, 39481, console=False, stderr=root / "secure-up.log",
                       security="sasl_ssl", env=env)
    results: dict[str, list[tuple[float, float]]] = {"PLAINTEXT": [], "SASL_SSL": []}
    try:
        plain.start(timeout=300)
        secure.start(timeout=300)
        config = ["--command-config", str(root / "secure" / "security" / "admin.properties")]
        for round_no in range(1, args.rounds + 1):
            for name, cluster, extra in (("PLAINTEXT", plain, []), ("SASL_SSL", secure, config)):
                mb_s, cpu_per_mb = produce(cluster.bootstrap, args.records, extra, broker_pids(str(cluster.data_dir)))
                results[name].append((mb_s, cpu_per_mb))
                print(f"round {round_no} {name:9} {mb_s:7.1f} MB/s, brokers {cpu_per_mb * 1000:6.1f} CPU ms per MB",
                      flush=True)
    finally:
        plain.stop()
        secure.stop()
        if args.profile:
            print(f"profiles of the secured brokers: {root / 'secure'}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    med = {name: (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
           for name, rows in results.items()}
    print(f"median: PLAINTEXT {med['PLAINTEXT'][0]:.1f} MB/s, SASL_SSL {med['SASL_SSL'][0]:.1f} MB/s "
          f"({med['SASL_SSL'][0] / med['PLAINTEXT'][0]:.2f} of it); brokers' CPU per MB "
          f"{med['PLAINTEXT'][1] * 1000:.1f} and {med['SASL_SSL'][1] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
