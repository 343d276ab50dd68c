"""A broker's timeline of cluster events outlives its process: kept in a ring file in its log dir."""

from __future__ import annotations

import json

from strandline.runtime import monitoring
from strandline.runtime.monitoring import Timeline


def test_events_are_read_back_after_a_restart_and_numbered_on(tmp_path):
    path = str(tmp_path / monitoring.EVENTS_FILE)
    first = Timeline(3, path)
    first.record("controlled_shutdown", "Controlled shutdown of broker 3", None, "info")
    first.record("leader", "t-0 led by 1", ("t", 0), "info")
    second = Timeline(3, path)                        # the next process (the first one killed: not closed)
    assert [(e["seq"], e["kind"], e["topic"]) for e in second.since(0)] == [(1, "controlled_shutdown", None),
                                                                          (2, "leader", "t")]
    second.record("broker_joined", "broker 2 joined", None, "info")
    assert [e["seq"] for e in second.since(2)] == [3]
    assert second.started_ms >= first.started_ms
    first.close()
    second.close()


def test_the_file_is_a_ring_and_a_cut_line_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(monitoring, "EVENTS_KEPT", 4)
    path = tmp_path / monitoring.EVENTS_FILE
    timeline = Timeline(1, str(path))
    for i in range(20):
        timeline.record("leader", f"m{i}", ("t", 0), "info")
        assert len(path.read_text().splitlines()) < 8
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["message"] == "m19"
    with open(path, "a") as f:
        f.write('{"seq": 99, "time_')                  # a crash in the middle of a line
    timeline.close()
    again = Timeline(1, str(path))
    assert again.since(0)[-1]["message"] == "m19" and again.seq == 20


def test_a_file_that_cannot_be_written_costs_only_the_persistence(tmp_path):
    timeline = Timeline(1, str(tmp_path / "missing-dir" / monitoring.EVENTS_FILE))
    timeline.record("leader", "m", ("t", 0), "info")
    assert timeline.path is None and [e["message"] for e in timeline.since(0)] == ["m"]
