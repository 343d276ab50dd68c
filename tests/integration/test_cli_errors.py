"""Bad input, one rule: every `strandline` command that talks to a cluster answers a malformed
broker address, an address where nothing listens and a topic that does not exist within 2 s, with
one line naming what is wrong and the same exit status for the same kind of error (the table in
docs/operations.md): 2 bad input, 3 no broker answered, 4 what the command names does not exist,
1 the cluster refused."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.conftest import Cluster, cluster_fixture, free_ports, strandline_cmd

pytestmark = pytest.mark.integration

BAD_INPUT, REFUSED, UNREACHABLE, NOT_FOUND = 2, 1, 3, 4
WITHIN_S = 2.0

#: each command that takes --bootstrap-server, with what else it needs; "{topic}" is a topic name
COMMANDS = [
    ("topics", "list"), ("topics", "describe", "--topic", "{topic}"),
    ("topics", "create", "--topic", "{topic}"), ("topics", "delete", "--topic", "{topic}"),
    ("topics", "alter", "--topic", "{topic}", "--partitions", "5"),
    ("produce", "--topic", "{topic}", "--no-create"), ("consume", "--topic", "{topic}", "--exit-at-end"),
    ("configs", "describe", "--entity-type", "topics", "--entity-name", "{topic}"),
    ("groups", "list"), ("acls", "list"), ("transactions", "list"),
    ("leaders", "elect", "--preferred", "--topic", "{topic}"),
    ("records", "delete", "--topic", "{topic}", "--partition", "0", "--before", "1"),
    ("offsets", "get", "--topic", "{topic}"),
]
#: the commands that name a topic, and refuse one that does not exist
NAMING_A_TOPIC = [c for c in COMMANDS if "{topic}" in c and c[:2] != ("topics", "create")]


def run_cli(*args: str, input: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(strandline_cmd(*args), input=input, capture_output=True, text=True, timeout=60)


def invoke(command: tuple[str, ...], bootstrap: str, topic: str = "no-such-topic") -> tuple[int, list[str], float]:
    args = [a.format(topic=topic) for a in command]
    started = time.monotonic()
    result = run_cli(*args, "--bootstrap-server", bootstrap, input="")
    return result.returncode, result.stderr.strip().splitlines(), time.monotonic() - started


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("address", ["localhost:notaport", "127.0.0.1", "127.0.0.1:70000", "127.0.0.1:9092,"])
def test_a_malformed_broker_address_is_one_line_and_status_2(command, address):
    status, lines, took = invoke(command, address)
    assert status == BAD_INPUT, (status, lines)
    assert len(lines) == 1 and "bad broker address" in lines[0] and "host:port" in lines[0], lines
    assert took < WITHIN_S + 1.5, took      # the interpreter's start-up is part of it


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_nothing_listening_is_one_line_and_status_3_within_2_seconds(command):
    nobody = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    status, lines, took = invoke(command, nobody)
    assert status == UNREACHABLE, (status, lines)
    assert len(lines) == 1 and "cannot connect" in lines[0] and "refused" in lines[0].lower(), lines
    assert took < WITHIN_S + 1.5, took


one = cluster_fixture("cli-errors", 1)


@pytest.mark.parametrize("command", NAMING_A_TOPIC, ids=" ".join)
def test_a_topic_that_does_not_exist_is_one_line_and_status_4(one: Cluster, command):
    status, lines, took = invoke(command, one.bootstrap)
    assert status == NOT_FOUND, (status, lines)
    assert len(lines) == 1 and "no-such-topic does not exist" in lines[0], lines
    assert took < WITHIN_S + 1.5, took


def test_produce_says_the_brokers_made_the_topic_it_names(one: Cluster):
    made = run_cli("produce", "--topic", "made-by-producing", "--bootstrap-server", one.bootstrap, input="a\nb\n")
    assert made.returncode == 0, made.stderr
    [line] = made.stderr.strip().splitlines()
    assert line.startswith("strandline produce: topic made-by-producing did not exist: the brokers created it "
                           "with 1 partition(s)"), line
    again = run_cli("produce", "--topic", "made-by-producing", "--bootstrap-server", one.bootstrap, input="c\n")
    assert again.returncode == 0 and again.stderr == "", again.stderr


def test_a_malformed_topic_config_names_the_option(one: Cluster):
    result = run_cli("topics", "create", "--topic", "t", "--config", "min.insync.replicas",
                     "--bootstrap-server", one.bootstrap)
    assert result.returncode == BAD_INPUT
    assert result.stderr.strip().splitlines() == [
        "strandline topics: --config 'min.insync.replicas': expected KEY=VALUE (e.g. min.insync.replicas=2)"]


def test_a_refusal_of_the_cluster_is_status_1(one: Cluster):
    result = run_cli("topics", "create", "--topic", "too-many-replicas", "--replication-factor", "3",
                     "--bootstrap-server", one.bootstrap)
    assert result.returncode == REFUSED, result
    [line] = result.stderr.strip().splitlines()
    assert "INVALID_REPLICATION_FACTOR" in line, line
