"""The embedded ZooKeeper and the kazoo-backed store, against one real ZooKeeper (SPEC CTL-1, CTL-2).

One ZooKeeper serves the whole module; each test works under its own paths or broker ids.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from strandline.coordination import znodes
from strandline.coordination.store import CheckVersion, Create, Delete, GetChildren, GetData, OpResult, SetData, ZkError
from strandline.errors import StrandlineError
from strandline.runtime.zk import KazooStore
from strandline.launch.zookeeper import (EmbeddedZooKeeper, check_java, four_letter_word, parse_java_version,
                                          zookeeper_classpath)
from tests.conftest import free_ports, pid_alive, poll_until

pytestmark = pytest.mark.integration

SHORT_SESSION_MS = 2000


@pytest.fixture(scope="module")
def zk(tmp_path_factory):
    [port] = free_ports(1)
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"), port)
    server.start()
    yield server
    pid = server.pid
    server.stop()
    assert pid is None or not pid_alive(pid)


@pytest.fixture
def store(zk):
    s = KazooStore(zk.connect_string, 6000, 5000)
    s.start(10)
    yield s
    s.stop()


def test_starts_and_answers_ruok(zk):
    assert zk.running and pid_alive(zk.pid)
    assert four_letter_word("127.0.0.1", zk.port, "ruok") == "imok"
    assert four_letter_word("127.0.0.1", zk.port, "srvr").startswith("Zookeeper version: 3.9")
    assert zk.connect_string == f"127.0.0.1:{zk.port}"
    assert zk.startup_s is not None and zk.startup_s < 30
    cfg = zk.config_path.read_text()
    for line in (f"clientPort={zk.port}", "clientPortAddress=127.0.0.1", "tickTime=500", "minSessionTimeout=1000",
                 "maxSessionTimeout=60000", "admin.enableServer=false", "4lw.commands.whitelist=ruok,srvr,stat",
                 f"dataDir={zk.data_dir / 'data'}"):
        assert line in cfg.splitlines()
    # ZooKeeper's own logging goes to zookeeper.log, not to the console (zookeeper.out)
    assert "binding to port" in zk.log_path.read_text()
    assert "INFO" not in zk.out_path.read_text()
    print(f"\nZooKeeper start-up: {zk.startup_s:.2f} s")


def test_create_get_set_with_versions(store):
    """CTL-1: a partition state's version is its zk_version; a stale version is a result, not an exception."""
    path = znodes.TopicPartitionStateZNode.path("versions", 0)
    state = znodes.LeaderAndIsr(1, 0, (1, 2), 1)
    [created] = store.execute([Create(path, znodes.TopicPartitionStateZNode.encode(state), make_parents=True)])
    assert created == OpResult(ZkError.NONE, version=0, path=path)
    [got] = store.execute([GetData(path)])
    assert got.error is ZkError.NONE and got.version == 0 and got.ephemeral_owner == 0
    assert znodes.TopicPartitionStateZNode.decode(got.data, got.version) == state

    shrunk = znodes.LeaderAndIsr(1, 0, (1,), 1, 1)
    ok, stale, missing = store.execute([SetData(path, znodes.TopicPartitionStateZNode.encode(shrunk), 0),
                                        SetData(path, b"zombie", 0),
                                        SetData(path + "-missing", b"", 0)])
    assert ok == OpResult(ZkError.NONE, version=1)
    assert stale.error is ZkError.BAD_VERSION and missing.error is ZkError.NO_NODE
    [got] = store.execute([GetData(path)])
    assert znodes.TopicPartitionStateZNode.decode(got.data, got.version) == shrunk
    assert [r.error for r in store.execute([Create(path), CheckVersion(path, 1), CheckVersion(path, 0),
                                            Delete(path, version=0), Delete(path, version=1), GetData(path)])] == [
        ZkError.NODE_EXISTS, ZkError.NONE, ZkError.BAD_VERSION, ZkError.BAD_VERSION, ZkError.NONE, ZkError.NO_NODE]


def test_children_sequential_and_recursive_delete(store):
    results = store.execute([Create("/seqtest/n_", b"a", sequential=True, make_parents=True),
                             Create("/seqtest/n_", b"b", sequential=True),
                             Create("/seqtest/deep/er/node", b"", make_parents=True)])
    assert [r.path for r in results] == ["/seqtest/n_0000000000", "/seqtest/n_0000000001", "/seqtest/deep/er/node"]
    [children] = store.execute([GetChildren("/seqtest")])
    assert children.children == ("deep", "n_0000000000", "n_0000000001")
    not_empty, gone, missing = store.execute([Delete("/seqtest"), Delete("/seqtest", recursive=True),
                                              GetChildren("/seqtest")])
    assert (not_empty.error, gone.error, missing.error) == (ZkError.NOT_EMPTY, ZkError.NONE, ZkError.NO_NODE)


def test_transactions_are_all_or_nothing(store):
    """CTL-1/CTL-4: a multi guarded by the controller epoch's version applies everything or nothing."""
    store.execute([Create("/txn/epoch", b"1", make_parents=True)])
    failed = store.transaction([Create("/txn/a", b"a"), SetData("/txn/epoch", b"2", version=5), Create("/txn/b")])
    assert [r.error for r in failed] == [ZkError.BAD_VERSION] * 3
    assert [r.error for r in store.execute([GetData("/txn/a"), GetData("/txn/b")])] == [ZkError.NO_NODE] * 2

    done = store.transaction([CheckVersion("/txn/epoch", 0), Create("/txn/a", b"a"), Create("/txn/b/c", make_parents=True),
                              SetData("/txn/epoch", b"2", version=0)])
    assert [r.error for r in done] == [ZkError.NONE] * 4
    assert done[1].path == "/txn/a" and done[3].version == 1
    exists = store.transaction([Create("/txn/new"), Create("/txn/a")])
    assert [r.error for r in exists] == [ZkError.NODE_EXISTS] * 2
    assert store.execute([GetData("/txn/new")])[0].error is ZkError.NO_NODE

    removed = store.transaction([Delete("/txn/b", recursive=True), SetData("/txn/epoch", b"3", version=1)])
    assert [r.error for r in removed] == [ZkError.NONE, ZkError.NONE]
    assert store.execute([GetChildren("/txn")])[0].children == ("a", "epoch")
    with pytest.raises(TypeError):
        store.transaction([GetData("/txn/a")])


def test_ensure_persistent_paths(store):
    """CTL-1: Kafka's startup paths exist, and creating them again is harmless."""
    store.ensure_persistent_paths()
    store.ensure_persistent_paths()
    results = store.execute([GetData(p) for p in znodes.PERSISTENT_PATHS])
    assert all(r.error is ZkError.NONE and r.ephemeral_owner == 0 for r in results)


def test_async_helpers(store):
    async def main():
        [created] = await store.aexecute([Create("/async-node", b"x")])
        results = await store.atransaction([SetData("/async-node", b"y", 0), Delete("/async-node", version=1)])
        return [created.error] + [r.error for r in results]

    assert asyncio.run(main()) == [ZkError.NONE] * 3


def test_ephemeral_node_vanishes_when_the_session_closes(zk, store):
    """CTL-2: a broker's registration lives exactly as long as its session."""
    other = KazooStore(zk.connect_string, 6000)
    other.start(10)
    epoch = other.register_broker(41, "127.0.0.1", 19041, None)
    [got] = store.execute([GetData(znodes.BrokerIdZNode.path(41))])
    assert got.ephemeral_owner == other.session_id != store.session_id
    assert epoch > 0
    assert znodes.BrokerIdZNode.decode(got.data, 41) == znodes.BrokerInfo(41, "127.0.0.1", 19041, None)
    other.stop()
    other.stop()  # idempotent
    assert store.execute([GetData(znodes.BrokerIdZNode.path(41))])[0].error is ZkError.NO_NODE
    assert other.execute([GetData("/")])[0].error is ZkError.SESSION_EXPIRED


HOLDER = textwrap.dedent("""
    import sys, time
    from kazoo.client import KazooClient
    client = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[3]))
    client.start(timeout=10)
    client.create(sys.argv[2], b'{"version":4}', ephemeral=True, makepath=True)
    print("0x%x" % client.client_id[0], flush=True)
    time.sleep(600)
""")


def test_register_broker_waits_for_the_session_of_a_killed_broker(zk, store, caplog):
    """CTL-2: a broker restarted after SIGKILL finds its old registration, waits for that session to
    expire (about one session timeout), then registers."""
    path = znodes.BrokerIdZNode.path(42)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, zk.connect_string, path, str(SHORT_SESSION_MS / 1000)],
                              stdout=subprocess.PIPE, text=True)
    try:
        old_session = int(holder.stdout.readline().strip(), 16)
        [got] = store.execute([GetData(path)])
        assert got.ephemeral_owner == old_session
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed_at = time.monotonic()
        caplog.set_level(logging.INFO, logger="strandline.zookeeper")
        epoch = store.register_broker(42, "127.0.0.1", 19042, "rack-a", wait_s=SHORT_SESSION_MS / 1000 + 5)
        waited = time.monotonic() - killed_at
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    [got] = store.execute([GetData(path)])
    assert got.ephemeral_owner == store.session_id
    assert znodes.BrokerIdZNode.decode(got.data, 42) == znodes.BrokerInfo(42, "127.0.0.1", 19042, "rack-a")
    assert epoch > 0
    assert 0.5 < waited < SHORT_SESSION_MS / 1000 + 3, waited
    waiting = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(waiting) == 1 and "Broker id 42" in waiting[0]
    print(f"\nregister_broker waited {waited:.2f} s for a {SHORT_SESSION_MS} ms session to expire")
    # registering again from the same session is a no-op
    assert store.register_broker(42, "127.0.0.1", 19042, "rack-a", wait_s=1) == epoch


def test_register_broker_refuses_an_id_held_by_a_live_session(zk, store):
    """CTL-2: two brokers with one broker.id: the second fails with one clear line naming the id."""
    other = KazooStore(zk.connect_string, 6000)
    other.start(10)
    try:
        other.register_broker(43, "127.0.0.1", 19043, None)
        began = time.monotonic()
        with pytest.raises(StrandlineError, match="broker id 43 is already registered") as info:
            store.register_broker(43, "127.0.0.1", 19999, None, wait_s=1.0)
        assert 0.9 < time.monotonic() - began < 5
        assert len(str(info.value).splitlines()) == 1
    finally:
        other.stop()


def test_state_listener_and_watches(zk, store):
    changes: queue.Queue = queue.Queue()
    data_changes: queue.Queue = queue.Queue()
    store.execute([Create("/watched/kids", make_parents=True)])
    store.watch_children("/watched/kids", lambda children: changes.put(children))
    store.watch_data("/watched/value", lambda data, version: data_changes.put((data, version)))
    assert changes.get(timeout=5) == []
    assert data_changes.get(timeout=5) == (None, -1)
    store.execute([Create("/watched/kids/b"), Create("/watched/kids/a"), Create("/watched/value", b"1")])
    assert data_changes.get(timeout=5) == (b"1", 0)
    poll_until(lambda: changes.get(timeout=5) == ["a", "b"], 10, message="children watch")
    store.execute([SetData("/watched/value", b"2")])
    assert data_changes.get(timeout=5) == (b"2", 1)

    states: queue.Queue = queue.Queue()
    other = KazooStore(zk.connect_string, 6000)
    other.add_listener(states.put)
    other.start(10)
    assert states.get(timeout=5) == "CONNECTED"
    other.stop()
    assert states.empty()  # our own close is not reported as a session loss


def test_a_paused_zookeeper_gives_connection_loss_not_a_hang(zk):
    """A request never blocks longer than the connection timeout: it is CONNECTION_LOSS, then recovers."""
    s = KazooStore(zk.connect_string, 6000, 1000)
    s.start(10)
    try:
        os.kill(zk.pid, signal.SIGSTOP)
        try:
            began = time.monotonic()
            [result] = s.execute([GetData("/")])
            [failed] = s.transaction([Create("/paused-node")])
            elapsed = time.monotonic() - began
        finally:
            os.kill(zk.pid, signal.SIGCONT)
        assert result.error is ZkError.CONNECTION_LOSS and failed.error is ZkError.CONNECTION_LOSS
        assert elapsed < 4, elapsed
        poll_until(lambda: s.execute([GetData("/")])[0].error is ZkError.NONE, 15, message="store usable again")
    finally:
        s.stop()


def test_cannot_connect_is_one_clear_line():
    [port] = free_ports(1)
    s = KazooStore(f"127.0.0.1:{port}", 2000, 1000)
    began = time.monotonic()
    with pytest.raises(StrandlineError, match=f"^cannot connect to ZooKeeper at 127.0.0.1:{port}"):
        s.start(1.0)
    assert time.monotonic() - began < 5
    s.stop()


def test_a_second_server_on_the_same_port_is_refused(zk, tmp_path):
    other = EmbeddedZooKeeper(tmp_path / "zk2", zk.port)
    with pytest.raises(StrandlineError, match=f"port {zk.port} on 127.0.0.1 is already in use"):
        other.start()
    assert other.pid is None


def test_a_server_that_exits_while_starting_reports_why(tmp_path):
    [port] = free_ports(1)
    broken = EmbeddedZooKeeper(tmp_path / "broken", port, jvm_args=["-XX:+NoSuchStrandlineOption"])
    with pytest.raises(StrandlineError) as info:
        broken.start(timeout_s=30)
    message = str(info.value)
    assert message.startswith("ZooKeeper exited with code 1 while starting")
    assert "NoSuchStrandlineOption" in message and len(message.splitlines()) == 1
    assert broken.pid is None


def test_data_persists_across_restart_and_stop_leaves_no_java(zk):
    """CTL-1: the cluster state survives a ZooKeeper restart on the same data dir."""
    writer = KazooStore(zk.connect_string, 6000)
    writer.start(10)
    writer.execute([Create("/persisted/topic", znodes.TopicZNode.encode({0: [1]}), make_parents=True)])
    writer.stop()
    pid = zk.pid
    zk.stop()
    assert not pid_alive(pid)
    assert zk.pid is None and not zk.running and zk.stop_s is not None
    zk.stop()  # idempotent
    with pytest.raises(OSError):
        four_letter_word("127.0.0.1", zk.port, "ruok", timeout_s=1)
    print(f"\nZooKeeper stop: {zk.stop_s:.2f} s")

    zk.start()
    assert zk.pid != pid
    reader = KazooStore(zk.connect_string, 6000)
    reader.start(10)
    try:
        [got] = reader.execute([GetData("/persisted/topic")])
        assert got.error is ZkError.NONE and tuple(znodes.TopicZNode.decode(got.data)) == ({0: (1,)}, None)
    finally:
        reader.stop()
    print(f"ZooKeeper restart: {zk.startup_s:.2f} s")


# -- Java and the classpath (no server needed)


def _fake_java(home: Path, version_line: str) -> Path:
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java


def test_check_java_reports_an_old_java(tmp_path, monkeypatch):
    java = _fake_java(tmp_path / "jdk11", 'openjdk version "11.0.2" 2019-01-15')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk11"))
    with pytest.raises(StrandlineError) as info:
        check_java()
    assert str(info.value) == f"Java 17 or newer is required to run ZooKeeper; found 11.0.2 at {java}"


def test_check_java_honours_java_home(tmp_path, monkeypatch):
    java = _fake_java(tmp_path / "jdk21", 'openjdk version "21.0.1" 2023-10-17')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk21"))
    assert check_java() == str(java)
    _fake_java(tmp_path / "jdk8", 'java version "1.8.0_292"')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk8"))
    with pytest.raises(StrandlineError, match="found 1.8.0_292"):
        check_java()


def test_check_java_reports_a_missing_java(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(StrandlineError, match="^Java was not found: JAVA_HOME=.*nowhere has no bin/java"):
        check_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StrandlineError) as info:
        check_java()
    assert str(info.value) == "Java was not found: install Java 17+ or set JAVA_HOME"


def test_the_real_java_is_new_enough(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert os.path.basename(check_java()) == "java"


@pytest.mark.parametrize("output,expected", [
    ('openjdk version "17.0.15" 2025-04-15', ("17.0.15", 17)),
    ('java version "1.8.0_292"', ("1.8.0_292", 8)),
    ('openjdk version "21" 2023-09-19', ("21", 21)),
    ('openjdk version "22-ea" 2024-03-19', ("22-ea", 22)),
    ("no version here", None),
])
def test_parse_java_version(output, expected):
    assert parse_java_version(output) == expected


def test_zookeeper_classpath_is_the_pyspark_jars():
    classpath = zookeeper_classpath()
    assert classpath.endswith(os.path.join("pyspark", "jars", "*"))
    assert list(Path(classpath[:-1]).glob("zookeeper-3.*.jar"))


def test_a_batch_of_reads_goes_in_multireads_and_answers_each_read(store, monkeypatch):
    """A controller loading thousands of partition states reads them in ZooKeeper's multiRead
    (1,000 a request), each answered on its own (data, version, children, a missing node), in
    order; without multiRead, one request each, all sent before the first answer is awaited."""
    from strandline.runtime import zk as runtime_zk

    store.execute([Create(f"/many/n{i}", b"%d" % i, make_parents=True) for i in range(300)])
    store.execute([SetData("/many/n7", b"seven", 0)])
    ops = [GetData(f"/many/n{i}") for i in range(300)] + [GetData("/many/missing"), GetChildren("/many")]
    calls = []
    real_call = store.client._call
    monkeypatch.setattr(store.client, "_call", lambda request, answer: calls.append(request.type)
                        or real_call(request, answer))
    monkeypatch.setattr(runtime_zk, "MULTI_READ_OPS", 120)
    results = store.execute(ops)
    assert calls == [22, 22, 22]                             # 302 reads in multiReads of 120
    assert [r.data for r in results[:300]] == [b"seven" if i == 7 else b"%d" % i for i in range(300)]
    assert results[7].version == 1 and results[8].version == 0
    assert results[300].error is ZkError.NO_NODE
    assert len(results[301].children) == 300

    monkeypatch.setattr(store, "_multi_read", False)         # as with a server older than 3.6
    sent, sent_at_first_wait = [], []
    real_get = store.client.get_async

    class Awaited:
        def __init__(self, answer):
            self.answer = answer

        def get(self, timeout=None):
            sent_at_first_wait.append(len(sent))
            return self.answer.get(timeout=timeout)

    monkeypatch.setattr(store.client, "get_async", lambda path: sent.append(path) or Awaited(real_get(path)))
    again = store.execute(ops)
    assert [(r.error, r.data, r.version, r.children) for r in again] == \
        [(r.error, r.data, r.version, r.children) for r in results]
    assert sent_at_first_wait[0] == len(sent) == 301         # all sent before the first answer is awaited


def test_a_server_that_garbles_multiread_is_read_one_request_each(store, monkeypatch, caplog):
    """A ZooKeeper older than 3.6 may answer a multiRead with something that is no multiRead
    answer: the reads are done one request each from then on, with a warning, not failed."""
    import struct

    from strandline.runtime import zk as runtime_zk

    store.execute([Create("/garbled/a", b"A", make_parents=True), Create("/garbled/b", b"B")])

    def garbled(cls, data, offset):
        raise struct.error("unpack requires a buffer of 9 bytes")

    monkeypatch.setattr(runtime_zk._MultiRead, "deserialize", classmethod(garbled))
    results = store.execute([GetData("/garbled/a"), GetData("/garbled/b"), GetChildren("/garbled")])
    assert [r.data for r in results[:2]] == [b"A", b"B"] and results[2].children == ("a", "b")
    assert store._multi_read is False
    assert "did not answer a multiRead" in caplog.text
