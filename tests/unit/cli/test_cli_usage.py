"""The command line's manners: a version, help for every option, and a closed pipe is no error."""

from __future__ import annotations

import argparse
import subprocess

from strandline.cli.main import build_parser
from tests.conftest import strandline_cmd


def test_every_option_of_every_command_has_help():
    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not action.help and not isinstance(action, argparse._HelpAction):
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "strandline")
    assert missing == []


def test_help_shows_defaults_and_the_environment():
    text = subprocess.run(strandline_cmd("topics", "describe", "--help"), capture_output=True, text=True,
                          env={"STRANDLINE_BOOTSTRAP_SERVERS": "10.1.1.1:9999", "PATH": "/usr/bin:/bin"}).stdout
    assert "STRANDLINE_BOOTSTRAP_SERVERS" in text and "(default: 10.1.1.1:9999)" in " ".join(text.split())


def test_version():
    done = subprocess.run(strandline_cmd("--version"), capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("strandline ")


def test_a_reader_that_goes_away_is_no_error():
    """`strandline ... | head` once printed a BrokenPipeError traceback."""
    proc = subprocess.Popen(strandline_cmd("sim", "explore", "--seeds", "1", "--first-seed", "5"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(60) == 0
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err
