"""A broker whose own code fails stops: one ERROR line naming what failed, a non-zero exit, and
`strandline up` reports it. Never a broker that stays up and answers nothing."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from strandline.runtime.client import KafkaConnection
from tests.conftest import Cluster, free_ports, pid_alive, poll_until, run_cli
from tests.integration.replication_helpers import METADATA, address

pytestmark = pytest.mark.integration


def error_lines(cluster: Cluster, broker_id: int) -> tuple[list[str], str]:
    text = (cluster.data_dir / f"broker-{broker_id}" / "broker.log").read_text(errors="replace")
    return [line for line in text.splitlines() if " ERROR " in line], text


def up_output(cluster: Cluster) -> str:
    return (cluster.data_dir.parent / f"{cluster.data_dir.name}-up.log").read_text(errors="replace")


def test_a_broker_out_of_file_descriptors_exits_with_one_line_instead_of_staying_half_alive(tmp_path):
    ports = free_ports(2)
    c = Cluster(tmp_path / "data", 1, ports[1], ports[0])
    c.data_dir.mkdir()
    c.start()
    try:
        pid = c.broker_pid(1)
        limit = len(os.listdir(f"/proc/{pid}/fd")) + 60
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
        for i in range(10):          # three files per partition: a few topics use up the limit
            created = run_cli("topics", "create", "--bootstrap-server", c.bootstrap, "--topic", f"t{i}",
                              "--partitions", "10")
            if created.returncode != 0 or not pid_alive(pid):
                break
        poll_until(lambda: not pid_alive(pid), 30, message="the broker's exit")
        errors, text = error_lines(c, 1)
        assert len(errors) == 1 and "Too many open files" in errors[0], errors
        assert "Traceback" not in text and "never retrieved" not in text
        poll_until(lambda: "strandline up: broker 1 exited with code 1" in up_output(c), 5,
                   message="`up` reporting the exit")
    finally:
        c.stop()


def test_an_exception_raised_by_the_core_on_a_request_stops_the_broker(tmp_path):
    """A malformed replication-offset-checkpoint (read when the broker first hosts a partition)
    makes the core raise while applying the controller's LeaderAndIsr, as Kafka takes the log dir
    offline and halts. The other broker keeps serving."""
    ports = free_ports(3)
    c = Cluster(tmp_path / "data", 2, ports[1], ports[0],
                overrides=["replica.high.watermark.checkpoint.interval.ms=3600000"])
    c.data_dir.mkdir()
    c.start()
    try:
        with KafkaConnection(address(c, 1), timeout_s=5) as conn:
            controller = conn.request(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                                    "include_cluster_authorized_operations": False,
                                                    "include_topic_authorized_operations": False}).controller_id
        victim = 2 if controller == 1 else 1
        log_dir = Path(next(b["log_dir"] for b in c.info["brokers"] if b["id"] == victim))
        (log_dir / "replication-offset-checkpoint").write_text("0\n2\nonly-one-entry 0 5\n")
        pid = c.broker_pid(victim)
        run_cli("topics", "create", "--bootstrap-server", address(c, controller), "--topic", "t",
                "--partitions", "2", "--replication-factor", "2")
        poll_until(lambda: not pid_alive(pid), 30, message="the broker's exit")
        errors, text = error_lines(c, victim)
        assert len(errors) == 1 and "malformed checkpoint file" in errors[0], errors
        assert "Traceback" not in text
        poll_until(lambda: f"strandline up: broker {victim} exited with code 1" in up_output(c), 5,
                   message="`up` reporting the exit")
        assert pid_alive(c.broker_pid(controller))
        with KafkaConnection(address(c, controller), timeout_s=5) as conn:
            resp = conn.request(METADATA, 9, {"topics": [{"name": "t"}], "allow_auto_topic_creation": False,
                                              "include_cluster_authorized_operations": False,
                                              "include_topic_authorized_operations": False})
        assert [b.node_id for b in resp.brokers] == [controller]
    finally:
        c.stop()
