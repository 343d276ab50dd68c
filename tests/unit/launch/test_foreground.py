"""A cluster run in the foreground: a signal during start-up interrupts the waiting, a signal after
it ends the supervision, and the handlers in place before come back."""

from __future__ import annotations

import json
import os
import signal

import pytest

from strandline.errors import StrandlineError
from strandline.launch.foreground import Foreground, lock_data_dir, write_json


def test_a_signal_during_start_up_interrupts_and_after_it_stops_the_run():
    before = signal.getsignal(signal.SIGTERM)
    run = Foreground()
    run.catch_signals()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
        run.started()
        run.stopping = False
        os.kill(os.getpid(), signal.SIGINT)      # read "bootstrap.servers=", then Ctrl-C: a clean stop
        assert run.stopping
        reported: list[tuple[int, int]] = []
        run.supervise([(1, None)], lambda member, code: reported.append((member, code)))   # returns at once
        assert reported == []
    finally:
        run.ignore_signals()
        run.restore_signals()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_run_on_the_same_data_dir_is_refused_in_one_line(tmp_path):
    lock = lock_data_dir(tmp_path, "strandline up")
    try:
        with pytest.raises(StrandlineError, match=r"^data directory .* is in use by another `strandline up` \("):
            lock_data_dir(tmp_path, "strandline up")
    finally:
        lock.release()
    lock_data_dir(tmp_path, "strandline up").release()


def test_the_description_is_replaced_whole(tmp_path):
    write_json(tmp_path / "cluster.json", {"brokers": [1]})
    write_json(tmp_path / "cluster.json", {"brokers": [1, 2]})
    assert json.loads((tmp_path / "cluster.json").read_text()) == {"brokers": [1, 2]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]
