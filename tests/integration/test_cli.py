"""The `strandline` command as a user meets it: clear one-line errors, `up` and its cluster.json,
clean stops with no orphan processes, topics administration, ZooKeeper registration (CTL-1, CTL-2)."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from kazoo.client import KazooClient

from tests.conftest import Cluster, free_ports, pid_alive, poll_until, run_cli, strandline_cmd, wait_for_line

pytestmark = pytest.mark.integration


def test_broker_refuses_an_unknown_key_with_one_line(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("broker.id=1\nzookeeper.connect=127.0.0.1:1\nlog.segmnet.bytes=100\n")
    result = run_cli("broker", "--config", str(props))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "log.segmnet.bytes" in lines[0]


def test_broker_refuses_a_bad_value_with_one_line(tmp_path):
    result = run_cli("broker", "--override", "broker.id=1", "--override", "zookeeper.connect=127.0.0.1:1",
                     "--override", "num.partitions=zero")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "num.partitions" in lines[0]


def test_up_refuses_an_unknown_override():
    result = run_cli("up", "--override", "no.such.key=1", "--data-dir", "/nonexistent/never")
    assert result.returncode == 2 and "no.such.key" in result.stderr


def test_up_refuses_a_cluster_without_brokers(tmp_path):
    result = run_cli("up", "--brokers", "0", "--data-dir", str(tmp_path / "never"))
    assert result.returncode == 2 and "--brokers must be at least 1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_up_refuses_an_empty_rack_name_or_two_ways_of_setting_racks(tmp_path):
    result = run_cli("up", "--racks", "r1,,r3", "--data-dir", str(tmp_path / "never"))
    assert result.returncode == 2 and "--racks 'r1,,r3': a rack name is empty" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run_cli("up", "--racks", "r1", "--override", "broker.rack=r2", "--data-dir", str(tmp_path / "never"))
    assert result.returncode == 2 and "--racks and --override broker.rack" in result.stderr
    assert not (tmp_path / "never").exists()


def test_broker_reports_an_unreachable_zookeeper(tmp_path):
    port = free_ports(1)[0]
    result = run_cli("broker", "--override", "broker.id=1", "--override", f"zookeeper.connect=127.0.0.1:{port}",
                     "--override", "zookeeper.connection.timeout.ms=1500", "--override",
                     f"log.dirs={tmp_path}", timeout=60)
    assert result.returncode != 0
    assert f"cannot connect to ZooKeeper at 127.0.0.1:{port}" in result.stderr


def test_zookeeper_command_reports_missing_java(tmp_path):
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-java"))
    result = subprocess.run(strandline_cmd("zookeeper", "--data-dir", str(tmp_path / "zk"), "--port", "1"),
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert "Java was not found" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_up_writes_cluster_json_registers_in_zookeeper_and_stops_cleanly(tmp_path):
    ports = free_ports(4)      # the last two: nobody listens there
    data = tmp_path / "data"
    c = Cluster(data, 1, ports[1], ports[0]).start()
    try:
        assert c.bootstrap == f"127.0.0.1:{ports[1]}"
        info = json.loads((data / "cluster.json").read_text())
        assert info["zookeeper"]["connect"] == f"127.0.0.1:{ports[0]}"
        [broker] = info["brokers"]
        assert broker["id"] == 1 and broker["port"] == ports[1]
        assert broker["log_dir"] == str(data / "broker-1" / "logs")
        pids = [info["zookeeper"]["pid"], broker["pid"]]
        assert all(pid_alive(p) for p in pids)

        zk = KazooClient(hosts=info["zookeeper"]["connect"])
        zk.start(timeout=10)
        try:
            data_bytes, stat = zk.get("/brokers/ids/1")
            registration = json.loads(data_bytes)
            assert stat.ephemeralOwner != 0                       # CTL-2: an ephemeral node
            assert registration["endpoints"] == [f"PLAINTEXT://127.0.0.1:{ports[1]}"]
            assert registration["version"] == 4
            assert run_cli("topics", "create", "--bootstrap-server", c.bootstrap, "--topic", "layout",
                           "--partitions", "2", "--config", "retention.ms=3600000").returncode == 0
            topic = json.loads(zk.get("/brokers/topics/layout")[0])   # CTL-1: Kafka's znodes
            assert topic["partitions"] == {"0": [1], "1": [1]}
            state = json.loads(zk.get("/brokers/topics/layout/partitions/1/state")[0])
            assert state == {"version": 1, "leader": 1, "leader_epoch": 0, "isr": [1],
                             "controller_epoch": state["controller_epoch"]}
            assert json.loads(zk.get("/config/topics/layout")[0])["config"] == {"retention.ms": "3600000"}
            assert json.loads(zk.get("/controller")[0])["brokerid"] == 1
        finally:
            zk.stop()
            zk.close()

        described = run_cli("topics", "describe", "--bootstrap-server", c.bootstrap, "--topic", "layout")
        assert described.returncode == 0
        rows = [line for line in described.stdout.splitlines() if "Partition:" in line]
        assert len(rows) == 2
        [header] = [line for line in described.stdout.splitlines() if line.startswith("Topic: layout")]
        assert header.endswith("\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: retention.ms=3600000"), header
        for row in rows:
            for field in ("Leader: 1", "Replicas: 1", "Isr: 1", "LeaderEpoch: 0", "HW: 0", "LEO: 0"):
                assert field in row
        assert "layout" in run_cli("topics", "list", "--bootstrap-server", c.bootstrap).stdout
        # a bootstrap list, as Kafka's tools take it: the first broker that is up answers
        listed = run_cli("topics", "list", "--bootstrap-server", f"127.0.0.1:{ports[2]},{c.bootstrap}")
        assert listed.returncode == 0 and "layout" in listed.stdout, listed.stderr
        none_up = run_cli("topics", "list", "--bootstrap-server", f"127.0.0.1:{ports[2]},127.0.0.1:{ports[3]}")
        assert none_up.returncode != 0 and none_up.stdout == ""
        [line] = none_up.stderr.splitlines()
        assert f"127.0.0.1:{ports[2]}" in line and f"127.0.0.1:{ports[3]}" in line
        proc = c.proc
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        c.proc = None
        poll_until(lambda: not any(pid_alive(p) for p in pids), 30, message="every process gone")
    finally:
        c.stop()


def test_zookeeper_command_serves_and_stops(tmp_path):
    port = free_ports(1)[0]
    proc = subprocess.Popen(strandline_cmd("zookeeper", "--data-dir", str(tmp_path / "zk"), "--port", str(port)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = wait_for_line(proc, "zookeeper.connect=", 60)
        assert line.strip() == f"zookeeper.connect=127.0.0.1:{port}"
        zk = KazooClient(hosts=f"127.0.0.1:{port}")
        zk.start(timeout=10)
        zk.stop()
        zk.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0


def test_zookeeper_command_reports_an_old_java(tmp_path):
    java = tmp_path / "old-jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    java.chmod(0o755)
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "old-jdk"))
    result = subprocess.run(strandline_cmd("zookeeper", "--data-dir", str(tmp_path / "zk"), "--port", "1"),
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"strandline zookeeper: Java 17 or newer is required to run ZooKeeper; "
                                     f"found 11.0.2 at {java}")


def test_up_numbers_brokers_from_first_broker_id_and_advertises_the_host_given(tmp_path):
    """Kafka's own test set-ups (and many client suites) expect broker 0 on `localhost`."""
    zk_port, base = free_ports(1)[0], free_ports(2)[0]
    data = tmp_path / "data"
    proc = subprocess.Popen(strandline_cmd("up", "--brokers", "2", "--first-broker-id", "0", "--advertised-host",
                                           "localhost", "--data-dir", str(data), "--base-port", str(base),
                                           "--zookeeper-port", str(zk_port), "--console-port", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = wait_for_line(proc, "bootstrap.servers=", 120)
        assert line.strip() == f"bootstrap.servers=localhost:{base},localhost:{base + 1}"
        info = json.loads((data / "cluster.json").read_text())
        assert [b["id"] for b in info["brokers"]] == [0, 1]
        assert (data / "broker-0" / "server.properties").exists()
        zk = KazooClient(hosts=info["zookeeper"]["connect"])
        zk.start(timeout=10)
        try:
            registration = json.loads(zk.get("/brokers/ids/0")[0])
            assert registration["endpoints"] == [f"PLAINTEXT://localhost:{base}"]
        finally:
            zk.stop()
            zk.close()
        from confluent_kafka.admin import AdminClient

        brokers = AdminClient({"bootstrap.servers": line.split("=", 1)[1].strip()}).list_topics(timeout=10).brokers
        assert sorted((b.id, b.host, b.port) for b in brokers.values()) == [(0, "localhost", base),
                                                                          (1, "localhost", base + 1)]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "strandline up: stopping 2 broker(s) (each moves its leaderships away first: a controlled shutdown) " \
           "and ZooKeeper" in err.decode(), err      # said at once: the stop takes seconds


def test_up_refuses_ports_in_use_naming_each_and_starts_nothing(tmp_path):
    import socket

    zk_port, base = free_ports(1)[0], free_ports(2)[0]
    with socket.socket() as taken, socket.socket() as taken_zk:
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        taken_zk.bind(("127.0.0.1", zk_port))
        taken_zk.listen()
        result = run_cli("up", "--brokers", "2", "--data-dir", str(tmp_path / "data"), "--base-port", str(base),
                         "--zookeeper-port", str(zk_port), "--console-port", "0")
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines() == [
        f"strandline up: port(s) in use on 127.0.0.1: {base + 1} (broker 2), {zk_port} (ZooKeeper); stop what "
        f"listens there or choose others (--base-port, --zookeeper-port)"]
    assert not (tmp_path / "data" / "broker-1").exists() and not (tmp_path / "data" / "zookeeper").exists()


def test_up_refuses_a_negative_first_broker_id_or_a_host_with_a_port():
    for args, words in ((("--first-broker-id", "-1"), "--first-broker-id -1"),
                        (("--advertised-host", "localhost:9092"), "without a port")):
        result = run_cli("up", *args)
        assert result.returncode == 2 and words in result.stderr and result.stderr.count("\n") == 1, result


def test_up_reports_the_exit_of_a_broker_cluster_start_started_again(tmp_path):
    zk_port, base = free_ports(1)[0], free_ports(1)[0]
    data = tmp_path / "data"
    proc = subprocess.Popen(strandline_cmd("up", "--brokers", "1", "--data-dir", str(data), "--base-port", str(base),
                                           "--zookeeper-port", str(zk_port), "--console-port", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_line(proc, "bootstrap.servers=", 120)
        for action in ("stop", "start"):
            done = run_cli("cluster", action, "1", "--data-dir", str(data), timeout=120)
            assert done.returncode == 0, done.stderr
        pid = json.loads((data / "cluster.json").read_text())["brokers"][0]["pid"]
        assert run_cli("cluster", "kill", "1", "--data-dir", str(data)).returncode == 0
        said = f"strandline up: broker 1 (pid {pid}, started again by `strandline cluster start`) exited"
        assert proc.stderr is not None
        os.set_blocking(proc.stderr.fileno(), False)
        err = b""

        def reported() -> bool:
            nonlocal err
            err += proc.stderr.read() or b""
            return said.encode() in err
        poll_until(reported, 30, message="up reporting the exit of the broker started again")
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    lines = err.decode().splitlines()
    assert "strandline up: broker 1 exited with code 0" in lines, lines                     # the stop
    assert said in lines, lines
