"""``kafka-run-class.sh kafka.Kafka <server.properties>`` of the KAFKA_ROOT shim: a Strandline broker.

kafka-python's test fixture starts a broker as Kafka's scripts do: a properties file, and the JVM
system property ``-Djava.security.auth.login.config=<file>`` in ``KAFKA_OPTS`` for SASL. This runs
``strandline broker --config <file>`` with the properties file unchanged and translates what is
not a broker key:

- the JAAS file's ``KafkaServer`` section (the static JAAS configuration a Kafka broker reads when
  no ``sasl.jaas.config`` key is set) becomes, for every SASL listener and enabled mechanism, the
  key Kafka gives the same configuration with,
  ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, holding that mechanism's login module;
- the fixture waits for two lines of Kafka's log: ``[KafkaServer id=N] started`` and, with SCRAM,
  ``Removing Produce quota for user <user>`` (Kafka logs it when it has read a user's config from
  ZooKeeper). When Strandline's broker prints its ready line, the shim prints the first, and the
  second for each user with a config under ``/config/users`` (Strandline reads a user's SCRAM
  credential from ZooKeeper at each authentication, so a credential written before start-up is in
  effect once the broker serves).

The broker's output is passed through line by line. SIGTERM and SIGINT are passed on to the broker,
and the broker is asked to die with the shim (PR_SET_PDEATHSIG) should the shim be killed.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import signal
import subprocess
import sys
import threading

from strandline.core.config import parse_properties
from strandline.security import jaas

#: strandline.runtime.broker_main.READY_PREFIX, not imported from there: importing the broker
#: would cost every start of the shim a second or two (tests/unit/project/test_kafka_python_shim.py
#: checks that the two are the same).
READY_PREFIX = "strandline broker ready"

#: The login module each SASL mechanism takes from a JAAS section.
MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def jaas_file(kafka_opts: str) -> str | None:
    """The file of ``-Djava.security.auth.login.config=<file>`` in ``KAFKA_OPTS``."""
    for word in shlex.split(kafka_opts):
        if word.startswith("-Djava.security.auth.login.config="):
            return word.split("=", 1)[1]
    return None


def jaas_section(text: str, name: str) -> str | None:
    """The body of the JAAS file's section ``name { ... };``; None without one."""
    match = re.search(r"(?:^|[\s;}])" + re.escape(name) + r"\s*\{(.*?)\}\s*;", text, re.S)
    return match.group(1) if match else None


def module_text(module: jaas.LoginModule) -> str:
    """One login module as ``sasl.jaas.config`` text."""
    options = "".join(f' {k}="' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for k, v in module.options.items())
    return f"{module.name} {module.flag}{options};"


def listener_protocols(props: dict[str, str]) -> dict[str, str]:
    """Each listener's name -> its security protocol (Kafka's default map unless one is given)."""
    protocol_map = {p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    for item in filter(None, (s.strip() for s in props.get("listener.security.protocol.map", "").split(","))):
        name, _, protocol = item.partition(":")
        protocol_map[name.strip().upper()] = protocol.strip().upper()
    out = {}
    for item in filter(None, (s.strip() for s in props.get("listeners", "").split(","))):
        name = item.split("://", 1)[0].strip().upper()
        out[name] = protocol_map.get(name, name)
    return out


def jaas_overrides(props: dict[str, str], kafka_opts: str) -> list[str]:
    """``listener.name.<l>.<mechanism>.sasl.jaas.config=...`` from the JAAS file's ``KafkaServer``
    section (or ``<listener>.KafkaServer``, which Kafka reads first), for each SASL listener."""
    path = jaas_file(kafka_opts)
    if path is None:
        return []
    with open(path) as f:
        text = f.read()
    mechanisms = [m.strip().upper() for m in props.get("sasl.enabled.mechanisms", "GSSAPI").split(",") if m.strip()]
    out = []
    for listener, protocol in listener_protocols(props).items():
        if protocol not in SASL_PROTOCOLS:
            continue
        body = jaas_section(text, f"{listener.lower()}.KafkaServer") or jaas_section(text, "KafkaServer")
        if body is None:
            continue
        modules = jaas.parse(body)
        for mechanism in mechanisms:
            for module in modules:
                if module.name == MODULES.get(mechanism):
                    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
                    if key not in props:
                        out.append(f"{key}={module_text(module)}")
                    break
    return out


def users_with_configs(zookeeper_connect: str) -> list[str]:
    """The users under ``/config/users`` of the broker's ZooKeeper (chroot included)."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zookeeper_connect, timeout=10)
    zk.start(timeout=10)
    try:
        if not zk.exists("/config/users"):
            return []
        return sorted(zk.get_children("/config/users"))
    finally:
        zk.stop()
        zk.close()


def die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)           # PR_SET_PDEATHSIG


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: kafka-run-class.sh kafka.Kafka <server.properties>", file=sys.stderr)
        return 2
    properties = argv[0]
    with open(properties) as f:
        props = parse_properties(f.read(), source=properties)
    broker_id = props.get("broker.id", "0")
    overrides = jaas_overrides(props, os.environ.get("KAFKA_OPTS", ""))
    cmd = [sys.executable, "-m", "strandline.cli.main", "broker", "--config", properties]
    for item in overrides:
        cmd += ["--override", item]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1, text=True,
                             preexec_fn=die_with_parent)

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)

    def ready() -> None:
        print(f"[KafkaServer id={broker_id}] started (kafka-python shim: Strandline's broker is ready)", flush=True)
        if "zookeeper.connect" in props:
            try:
                users = users_with_configs(props["zookeeper.connect"])
            except Exception as exc:            # the line is only missing; the broker serves on
                print(f"kafka-python shim: cannot list /config/users: {exc}", flush=True)
                return
            for user in users:
                print(f"Removing Produce quota for user {user} (kafka-python shim: /config/users/{user} "
                      f"is in ZooKeeper, which Strandline reads at each authentication)", flush=True)

    assert child.stdout is not None
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.startswith(READY_PREFIX):
            threading.Thread(target=ready, daemon=True).start()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
