"""A data directory serves one cluster: a second `strandline up`, a broker or `cluster start` on
data in use refuses with one line naming the holder and leaves the running cluster alone; Ctrl-C
during start-up stops at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from strandline.coordination import znodes
from strandline.coordination.store import Create, ZkError
from strandline.runtime.client import KafkaConnection
from strandline.runtime.zk import KazooStore
from tests.conftest import cluster_fixture, Cluster, free_ports, pid_alive, poll_until, run_cli, strandline_cmd, wait_for_line
from tests.integration.replication_helpers import METADATA, address

pytestmark = pytest.mark.integration


running = cluster_fixture("inuse", 2)


def pids_and_answers(cluster: Cluster) -> tuple[dict[int, int], list[int]]:
    """Each broker's pid (alive) and which brokers answer Metadata."""
    pids = {b: cluster.broker_pid(b) for b in (1, 2)}
    alive = {b: pid for b, pid in pids.items() if pid_alive(pid)}
    answering = []
    for b in (1, 2):
        with KafkaConnection(address(cluster, b), timeout_s=5) as conn:
            resp = conn.request(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                              "include_cluster_authorized_operations": False,
                                              "include_topic_authorized_operations": False})
        if sorted(n.node_id for n in resp.brokers) == [1, 2]:
            answering.append(b)
    return alive, answering


def processes_using(path) -> list[str]:
    """Command lines of the processes whose arguments name ``path``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace").replace("\0", " ")
        except OSError:
            continue
        if str(path) in cmdline and pid_alive(int(pid)):
            found.append(f"{pid}: {cmdline}")
    return found


@pytest.mark.parametrize("same_ports", [True, False], ids=["same-ports", "other-ports"])
def test_a_second_up_on_a_data_dir_in_use_refuses_and_leaves_the_cluster_alone(running, same_ports):
    before = pids_and_answers(running)
    assert sorted(before[0]) == [1, 2] and before[1] == [1, 2]
    if same_ports:
        base, zk = running.base_port, running.zk_port
    else:
        zk, base = free_ports(3)[:2]
    second = subprocess.Popen(strandline_cmd("up", "--brokers", "2", "--data-dir", str(running.data_dir),
                                             "--base-port", str(base), "--zookeeper-port", str(zk)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = second.communicate(timeout=30)
    finally:
        if second.poll() is None:       # it started a second cluster on the same data: stop it
            second.send_signal(signal.SIGINT)
            second.communicate(timeout=60)
    assert second.returncode != 0 and out == ""
    lines = err.strip().splitlines()
    assert lines == [f"strandline up: data directory {running.data_dir} is in use by another `strandline up` "
                     f"(pid {running.proc.pid})"]
    assert pids_and_answers(running) == before


def test_a_broker_on_another_brokers_log_dir_refuses_naming_the_holder(running):
    config = running.data_dir / "broker-1" / "server.properties"
    port = free_ports(1)[0]
    result = run_cli("broker", "--config", str(config), "--override", "broker.id=9",
                     "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}")
    log_dir = running.data_dir / "broker-1" / "logs"
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"strandline broker: Failed to acquire lock on file .lock in {log_dir}. A Kafka instance in another "
        f"process or thread is using this directory (pid {running.broker_pid(1)})."]
    assert pid_alive(running.broker_pid(1))


def test_cluster_start_of_a_broker_running_outside_cluster_json_refuses(running):
    info_path = running.data_dir / "cluster.json"
    info = json.loads(info_path.read_text())
    pid = next(b["pid"] for b in info["brokers"] if b["id"] == 2)
    forgotten = {**info, "brokers": [{**b, "pid": None} if b["id"] == 2 else b for b in info["brokers"]]}
    info_path.write_text(json.dumps(forgotten))
    result = None
    try:
        result = run_cli("cluster", "start", "2", "--data-dir", str(running.data_dir))
    finally:
        info_path.write_text(json.dumps(info))
        if result is not None and result.returncode == 0:      # a second broker 2 started: stop it
            os.kill(int(result.stdout.split("pid ")[1].split(")")[0]), signal.SIGKILL)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"strandline cluster: broker 2 is already running: {running.data_dir / 'broker-2' / 'logs' / '.lock'} "
        f"is held by pid {pid}"]
    assert pids_and_answers(running)[1] == [1, 2]


def test_ctrl_c_during_start_up_stops_at_once_and_leaves_no_process(tmp_path):
    """Broker 2 finds its id still registered by a live session (as after a SIGKILL), so it waits
    for that session to expire and `up` waits for it: Ctrl-C then stops everything at once."""
    data = tmp_path / "data"
    zk_port, base_port = free_ports(4)[:2]
    zookeeper = subprocess.Popen(strandline_cmd("zookeeper", "--data-dir", str(tmp_path / "zk"), "--port", str(zk_port)),
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    store = None
    try:
        connect = wait_for_line(zookeeper, "zookeeper.connect=", 60).split("=", 1)[1].strip()
        store = KazooStore(connect, 30000)
        store.start()
        [held] = store.execute([Create(znodes.BrokerIdZNode.path(2), znodes.BrokerIdZNode.encode(
            2, "127.0.0.1", base_port + 1, None, int(time.time() * 1000)), ephemeral=True, make_parents=True)])
        assert held.error is ZkError.NONE
        up = subprocess.Popen(strandline_cmd("up", "--brokers", "3", "--data-dir", str(data), "--zookeeper", connect,
                                             "--base-port", str(base_port)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            poll_until(lambda: "still registered" in read(data / "broker-2" / "broker.log"), 60,
                       message="broker 2 waiting for the old registration")
            interrupted = time.monotonic()
            up.send_signal(signal.SIGINT)
            out, err = up.communicate(timeout=60)
            took = time.monotonic() - interrupted
        finally:
            if up.poll() is None:
                up.kill()
                up.wait()
        assert "bootstrap.servers" not in out
        assert took < 5.0, f"`up` took {took:.1f} s to stop after Ctrl-C during start-up"
        assert processes_using(data) == []
    finally:
        if store is not None:
            store.stop()
        zookeeper.send_signal(signal.SIGTERM)
        zookeeper.wait(30)


def read(path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
