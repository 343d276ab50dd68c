"""A malformed request never stops a broker: ``strandline fuzz`` against a 3-broker cluster for
about 27 s ends with no broker death, no hang and working clients; its record replays; and the
brokers' logs stay small however many connections they refuse."""

from __future__ import annotations

import re
import socket
import struct
import time

import pytest

from tests.conftest import cluster_fixture, Cluster, pid_alive, run_cli

pytestmark = pytest.mark.integration

FUZZ_MINUTES = 0.45
SEED = 20261206


three = cluster_fixture("fuzz", 3)


@pytest.fixture(scope="module")
def fuzz_run(three, tmp_path_factory):
    records = tmp_path_factory.mktemp("fuzz-records")
    result = run_cli("fuzz", "--bootstrap-server", three.bootstrap, "--minutes", str(FUZZ_MINUTES), "--seed",
                     str(SEED), "--record-dir", str(records), "--concurrency", "16", timeout=FUZZ_MINUTES * 60 + 240)
    return result, records


def test_fuzzing_stops_no_broker_hangs_no_request_and_clients_still_work(three, fuzz_run):
    result, _ = fuzz_run
    assert result.returncode == 0, result.stdout + result.stderr
    final = result.stdout.strip().splitlines()[-1]
    m = re.search(r"fuzz: OK: ([\d,]+) frames .*, ([\d,]+) connections in .* \(([\d,]+) frames/s\), "
                  r"0 broker deaths, 0 hangs, 0 failed checks", final)
    assert m, final
    assert int(m.group(1).replace(",", "")) > 10_000, final
    assert all(pid_alive(three.broker_pid(b)) for b in (1, 2, 3))
    assert re.search(r"RSS broker 1 \d+ MB, broker 2 \d+ MB, broker 3 \d+ MB", final), final


def test_the_record_of_a_run_replays(three, fuzz_run):
    _, records = fuzz_run
    (record,) = records.glob(f"fuzz-{SEED}-*.rec.gz")
    result = run_cli("fuzz", "--bootstrap-server", three.bootstrap, "--replay", str(record), "--connection", "7",
                     timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "replay: 1 connections sent again, every broker answers, 0 hangs" in result.stdout


def _log_lines(cluster: Cluster, broker: int) -> list[str]:
    return (cluster.data_dir / f"broker-{broker}" / "broker.log").read_text(errors="replace").splitlines()


def test_ten_thousand_refused_connections_write_a_bounded_number_of_lines(three):
    """Each connection sends a frame of negative size and is closed; the log keeps the first such
    line and, when its window is over, one line counting the others."""
    port = int(three.bootstrap.split(",")[1].rsplit(":", 1)[1])          # broker 2
    before = len(_log_lines(three, 2))
    deadline = time.monotonic() + 120
    sent = 0
    while sent < 10_000 and time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(struct.pack(">i", -7))
            assert sock.recv(1) == b""                                       # closed by the broker
        sent += 1
    assert sent == 10_000
    new = _log_lines(three, 2)[before:]
    # the first line of the kind (unless the fuzzer's frames of negative size opened its window)
    # and at most one line counting the others
    assert len([line for line in new if "negative frame size -7" in line]) <= 2, new[:20]
    closing = [line for line in new if "Closing connection" in line and " more like " not in line]
    assert len(closing) <= 10, closing[:20]
    assert len(new) < 1000
    assert pid_alive(three.broker_pid(2))
