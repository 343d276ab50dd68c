"""How closely a produce quota holds a producer, on Strandline and on Kafka, with the same client.

For each target and round (targets interleaved), a client id of its own gets
``producer_byte_rate`` (``strandline configs --entity-type clients``, AlterClientQuotas, which
Kafka's brokers serve too); a confluent-kafka producer (acks=1, linger 5 ms, 1,000-byte values)
then produces as fast as the broker lets it for ``--seconds``. Kafka's rate window (11 samples of
1 s) lets a client send 10 s' worth of its quota at once, so the rate is taken over what was
acknowledged after ``--skip`` seconds. Prints, per run, that rate as a fraction of the quota, the
throttled answers and the largest throttle time. A benchmark, not a test:

    .venv/bin/python benchmarks/quota_accuracy.py --target strandline=127.0.0.1:9092 \\
        --target kafka-3.9=127.0.0.1:19092 [--quota 1048576] [--seconds 32] [--skip 12] [--rounds 2]

The clusters are started beforehand (``strandline up --brokers 1``, ``strandline reference up
--kafka 3.9 --brokers 1``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from strandline.load.quota_probe import produce_flat_out


def run_once(bootstrap: str, quota: int, seconds: float, skip: float) -> tuple[float, int, int]:
    """(acknowledged value bytes per second after ``skip``, throttled answers, largest throttle ms)."""
    tag = uuid.uuid4().hex[:8]
    topic, client_id = f"quota-{tag}", f"quota-client-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    done = subprocess.run([sys.executable, "-m", "strandline.cli.main", "configs", "--bootstrap-server", bootstrap,
                           "--entity-type", "clients", "--entity-name", client_id, "--alter", "--add-config",
                           f"producer_byte_rate={quota}"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"cannot set the quota on {bootstrap}: {done.stderr.strip()}")
    # the quota reaches the broker through ZooKeeper's change notification, well within --skip
    seen = produce_flat_out({"bootstrap.servers": bootstrap, "client.id": client_id}, topic, seconds)
    positive = seen.throttled()
    return seen.rate_after(skip), len(positive), max(positive, default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", required=True, metavar="NAME=BOOTSTRAP")
    parser.add_argument("--quota", type=int, default=1024 * 1024, help="producer_byte_rate, bytes/s")
    parser.add_argument("--seconds", type=float, default=32.0)
    parser.add_argument("--skip", type=float, default=12.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    targets = [t.split("=", 1) for t in args.target]
    for round_no in range(1, args.rounds + 1):
        for name, bootstrap in targets:
            rate, throttled, longest = run_once(bootstrap, args.quota, args.seconds, args.skip)
            print(f"round {round_no} {name:12} {rate:>12,.0f} B/s from {args.skip:g} s to {args.seconds:g} s = "
                  f"{rate / args.quota:.2f} of the quota; {throttled} throttled answers, longest {longest} ms",
                  flush=True)


if __name__ == "__main__":
    main()
