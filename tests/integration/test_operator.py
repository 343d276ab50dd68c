"""The operator's view on real broker processes: each broker's /metrics (Prometheus text with
Kafka's names) and /status, checked against known actions (records produced, a follower killed
and started again).

One 3-broker cluster for the module. replica.lag.time.max.ms is short and the ZooKeeper session
long, so the leader itself drops a killed follower from the ISR (its ISR-shrink counter) before
the controller hears of the death, as with Kafka's defaults on a follower that hangs.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import cluster_fixture, Cluster, poll_until, run_cli, strandline_cmd
from tests.integration.replication_helpers import create_topic
from tests.integration.browser import headless_chromium

LAG_MS = 1500
SESSION_MS = 15000


op = cluster_fixture("operator", 3, console=True, overrides=[f"zookeeper.session.timeout.ms={SESSION_MS}",
                                               f"replica.lag.time.max.ms={LAG_MS}"])


def metrics_url(c: Cluster, broker_id: int) -> str:
    return next(b["metrics"] for b in c.info["brokers"] if b["id"] == broker_id)


def scrape(c: Cluster, broker_id: int) -> dict[tuple[str, tuple], float]:
    """Every sample of a broker's /metrics, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(metrics_url(c, broker_id) + "/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(c: Cluster, broker_id: int, name: str, **labels: str) -> float:
    """A sample's value, 0.0 when the broker exports no such sample (a counter of a topic not yet
    written); :func:`sample` where the sample must be there."""
    return scrape(c, broker_id).get((name, tuple(sorted(labels.items()))), 0.0)


def sample(c: Cluster, broker_id: int, name: str, **labels: str) -> float:
    """A sample the broker must export: absent, the test fails (where :func:`value` reads 0.0)."""
    samples = scrape(c, broker_id)
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"broker {broker_id} exports no {name}{labels or ''}"
    return samples[key]


def replicas_held(c: Cluster) -> dict[int, int]:
    """Broker -> how many partitions it holds a replica of, as the cluster's metadata says."""
    from strandline.runtime.client import KafkaConnection

    with KafkaConnection(c.bootstrap.split(",")[0], timeout_s=5) as conn:
        meta = conn.request(3, 9, {"topics": None, "allow_auto_topic_creation": False,
                                   "include_cluster_authorized_operations": False,
                                   "include_topic_authorized_operations": False})
    replicas = [int(r) for t in meta.topics for p in t.partitions for r in p.replica_nodes]
    return {b: replicas.count(b) for b in (1, 2, 3)}


def broker_status(c: Cluster, broker_id: int, since: int = 0) -> dict:
    with urllib.request.urlopen(f"{metrics_url(c, broker_id)}/status?since={since}", timeout=5) as resp:
        return json.loads(resp.read())


def test_up_prints_and_records_each_brokers_metrics_address(op):
    urls = [metrics_url(op, b) for b in (1, 2, 3)]
    assert urls == [f"http://127.0.0.1:{op.base_port + 1000 + i}" for i in range(3)]
    up_out = (op.data_dir.parent / f"{op.data_dir.name}-up.log").read_text()
    assert "Traceback" not in up_out
    # every broker exports its partition count: the partitions it holds a replica of
    assert {b: sample(op, b, "kafka_server_replicamanager_partitioncount") for b in (1, 2, 3)} == replicas_held(op)


def test_each_broker_shows_its_process_and_its_garbage_collector(op):
    """A broker's own resources by prometheus_client's names, and its collector's pauses: start-up's
    objects were collected once (a generation-2 pause) and then frozen out of later collections."""
    for b in (1, 2, 3):
        samples = scrape(op, b)
        assert samples[("process_resident_memory_bytes", ())] > 10_000_000
        assert samples[("process_cpu_seconds_total", ())] > 0
        assert samples[("python_gc_frozen_objects", ())] > 10_000
        assert samples[("python_gc_collection_seconds_count", (("generation", "2"),))] >= 1
        assert samples[("python_gc_collection_seconds_sum", (("generation", "2"),))] > 0


def test_produced_records_are_counted_once_by_their_leaders(op):
    create_topic(op, "counted", partitions=3, min_isr=2)
    # each broker counts the partitions it holds a replica of (the 3 of counted, with replication factor 3);
    # the broker asked for metadata may hear of the new topic a moment after the controller answered
    held: dict[int, int] = {}

    def every_broker_holds_three() -> bool:
        held.update(replicas_held(op))
        return all(held[b] >= 3 for b in (1, 2, 3))
    poll_until(every_broker_holds_three, 10, message="the new topic's replicas in the metadata")
    poll_until(lambda: {b: sample(op, b, "kafka_server_replicamanager_partitioncount") for b in (1, 2, 3)} == held,
               10, message=f"partition counts {held}")
    before = sum(value(op, b, "kafka_server_brokertopicmetrics_messagesin_total", topic="counted") for b in (1, 2, 3))
    producer = Producer({"bootstrap.servers": op.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(500):
        producer.produce("counted", value=b"v" * 100, key=str(i).encode())
    assert producer.flush(30) == 0
    total = sum(value(op, b, "kafka_server_brokertopicmetrics_messagesin_total", topic="counted") for b in (1, 2, 3))
    assert total - before == 500
    bytes_in = sum(value(op, b, "kafka_server_brokertopicmetrics_bytesin_total", topic="counted") for b in (1, 2, 3))
    assert bytes_in > 500 * 100
    # each follower takes in, by replication, what its leaders took in from producers (RF=3)
    replicated = sum(value(op, b, "kafka_server_brokertopicmetrics_replicationbytesin_total", topic="counted")
                     for b in (1, 2, 3))
    poll_until(lambda: sum(value(op, b, "kafka_server_brokertopicmetrics_replicationbytesin_total", topic="counted")
                           for b in (1, 2, 3)) == 2 * bytes_in, 10, message=f"2 x {bytes_in} bytes replicated "
                                                                            f"(saw {replicated})")
    ends = [value(op, b, "kafka_log_log_logendoffset", topic="counted", partition=str(p))
            for b in (1, 2, 3) for p in range(3)]
    assert sum(ends) == 3 * 500                          # every replica of every partition has them all
    produce_requests = sum(value(op, b, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
                           for b in (1, 2, 3))
    assert produce_requests >= 3         # at least one per partition leader
    for b in (1, 2, 3):                  # each replica's segment had its blocks reserved ahead of the appends
        assert sample(op, b, "strandline_log_segment_preallocated_bytes_total") > 0
        assert sample(op, b, "strandline_log_segment_preallocation_failures_total") == 0


def test_a_killed_follower_shows_as_an_isr_shrink_and_under_replicated_partitions_then_recovers(op):
    """Metrics, /status, `cluster status`, `topics describe`, the countdown of `cluster start`, and the
    brokers' WARN lines (issue 14) for an ISR shrink and, from the controller, a broker's death."""
    create_topic(op, "watched", assignment={0: [1, 2, 3]}, min_isr=2)
    controller = next(b for b in (1, 2, 3) if value(op, b, "kafka_controller_kafkacontroller_activecontrollercount"))
    victim = 2 if controller == 3 else 3                 # a follower of watched-0, not the controller
    survivors = ",".join(str(b) for b in (1, 2, 3) if b != victim)
    producer = Producer({"bootstrap.servers": op.bootstrap, "acks": "all"})
    producer.produce("watched", b"before")
    assert producer.flush(10) == 0
    shrinks = value(op, 1, "kafka_server_replicamanager_isrshrinks_total")
    expands = value(op, 1, "kafka_server_replicamanager_isrexpands_total")
    seq = max([e["seq"] for e in broker_status(op, 1)["events"]], default=0)
    assert value(op, 1, "kafka_cluster_partition_underreplicated", topic="watched", partition="0") == 0
    assert run_cli("cluster", "kill", str(victim), "--data-dir", str(op.data_dir)).returncode == 0
    killed_at = time.monotonic()
    # writes keep coming: a follower that has everything stays in the ISR however long it is silent
    producer.produce("watched", b"during")
    producer.poll(0)
    poll_until(lambda: value(op, 1, "kafka_cluster_partition_underreplicated", topic="watched", partition="0") == 1,
               LAG_MS / 1000 + 10, message="partition watched-0 under-replicated")
    assert value(op, 1, "kafka_server_replicamanager_isrshrinks_total") >= shrinks + 1
    assert value(op, 1, "kafka_server_replicamanager_underreplicatedpartitions") >= 1
    assert value(op, 1, "kafka_cluster_partition_insyncreplicascount", topic="watched", partition="0") == 2
    events = broker_status(op, 1, since=seq)["events"]
    assert any(e["kind"] == "isr_shrink" and e["topic"] == "watched" for e in events), events
    # the command line says the same, with the bootstrap servers from the environment
    env = {"STRANDLINE_BOOTSTRAP_SERVERS": op.bootstrap}
    status = run_cli("cluster", "status", env=env)
    assert status.returncode == 1, status
    assert "Unhealthy" in status.stdout and "under-replicated" in status.stdout and "watched-0" in status.stdout
    assert f"{victim}\t127.0.0.1" in status.stdout and "registered, not answering" in status.stdout
    described = run_cli("topics", "describe", "--under-replicated-partitions", env=env)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert any(line.startswith("\tTopic: watched\tPartition: 0\tLeader: 1") for line in lines), lines
    assert not any(line.startswith("Topic:") for line in lines)       # Kafka's filters print partitions only
    assert all(f"Isr: {survivors}\t" in line for line in lines if "Topic: watched\t" in line), lines
    assert producer.flush(10) == 0
    # its old ZooKeeper session is still alive: the start waits for it, and says so with a countdown
    assert time.monotonic() - killed_at < SESSION_MS / 1000 - 4
    started = run_cli("cluster", "start", str(victim), "--data-dir", str(op.data_dir), timeout=120)
    assert started.returncode == 0, started.stderr
    assert f"Waiting for broker {victim} to start" in started.stderr, started.stderr
    assert "previous ZooKeeper session expires within" in started.stderr, started.stderr
    poll_until(lambda: value(op, 1, "kafka_cluster_partition_underreplicated", topic="watched", partition="0") == 0,
               30, message="partition watched-0 fully replicated again")
    # Kafka's WARN lines: the leader's for the shrink, the controller's for the death it saw
    leader_log = (op.data_dir / "broker-1" / "broker.log").read_text()
    assert re.search(rf" WARN \[broker 1\] ISR of watched-0 shrank from \[1, 2, 3\] to \[{survivors.replace(',', ', ')}\]",
                     leader_log), leader_log[-2000:]
    controller_log = (op.data_dir / f"broker-{controller}" / "broker.log").read_text()
    # seen gone, or gone and back at once: the new process registers the moment the old session ends
    assert re.search(rf" WARN \[broker {controller}\] Live brokers now .*(restarted \[{victim}\]|gone \[{victim}\])",
                     controller_log), controller_log[-2000:]
    assert value(op, 1, "kafka_server_replicamanager_isrexpands_total") >= expands + 1
    healthy = run_cli("cluster", "status", "--bootstrap-server", op.bootstrap)
    assert healthy.returncode == 0 and "Healthy" in healthy.stdout, healthy
    described = run_cli("topics", "describe", "--topic", "watched", "--bootstrap-server", op.bootstrap).stdout
    assert "\tHW: 2\tLEO: 2\tReplicaLEO: 1=2,2=2,3=2\tReplicaLag: 1=0,2=0,3=0" in described, described
    view = broker_status(op, 1)
    [replica] = [r for r in view["replicas"] if r["topic"] == "watched"]
    assert replica["role"] == "leader" and sorted(replica["isr"]) == [1, 2, 3]     # a follower rejoins at the end
    poll_until(lambda: broker_status(op, 1)["replicas"] and all(
        f["log_end_offset"] == 2 for r in broker_status(op, 1)["replicas"] if r["topic"] == "watched"
        for f in r["followers"].values()), 10, message="followers at the leader's log end offset")


# ---------------------------------------------------------------------------- the console producer and consumer


def cli_in(stdin: bytes, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``strandline ARGS`` with bytes on standard input, and its output as bytes."""
    return subprocess.run(strandline_cmd(*args), input=stdin, capture_output=True, timeout=timeout)


def test_produce_and_consume_keys_values_headers_and_tombstones_in_kcats_formats(op):
    create_topic(op, "console", partitions=3, min_isr=2)
    b = ("--bootstrap-server", op.bootstrap)
    sent = cli_in(b"k1:hello\nk2:world\n\nk3:NULL\nk4:a:b\n", "produce", "--topic", "console", *b,
                  "--key-delimiter", ":", "--header", "origin=cli", "-H", "n=1", "--null-marker", "NULL")
    assert sent.returncode == 0, sent.stderr
    got = cli_in(b"", "consume", "--topic", "console", *b, "--from-beginning", "--exit-at-end",
                 "--format", "%t %k=%s (%S) [%h]\\n")
    assert got.returncode == 0, got.stderr
    assert sorted(got.stdout.decode().splitlines()) == [
        "console k1=hello (5) [origin=cli,n=1]", "console k2=world (5) [origin=cli,n=1]",
        "console k3= (-1) [origin=cli,n=1]", "console k4=a:b (3) [origin=cli,n=1]"]      # the empty line: skipped
    assert got.stderr.decode().strip() == "Processed a total of 4 messages"
    # keyed records land where Java's producer puts them (murmur2), so each key's records stay in order
    placed = {}
    for line in cli_in(b"", "consume", "--topic", "console", *b, "-o", "beginning", "-e", "-J").stdout.splitlines():
        rec = json.loads(line)
        placed[rec["key"]] = rec["partition"]
        if rec["key"] == "k3":
            assert rec["value"] is None and rec["headers"] == [["origin", "cli"], ["n", "1"]]
    assert placed == {key: murmur2_partition(key.encode(), 3) for key in ("k1", "k2", "k3", "k4")}
    # one partition from an offset; N records before the end
    part = placed["k1"]
    one = cli_in(b"", "consume", "--topic", "console", *b, "--partition", str(part), "-o", "0", "-e", "-f", "%o %k\\n")
    assert one.stdout.decode().splitlines()[0] == "0 k1"
    binary = cli_in(b"\x00\xff\xfe\n", "produce", "--topic", "console", *b, "--partition", str(part))
    assert binary.returncode == 0, binary.stderr
    last = cli_in(b"", "consume", "--topic", "console", *b, "--partition", str(part), "-o", "-1", "-e", "-f", "%s")
    assert last.stdout == b"\x00\xff\xfe"


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Java's default partitioner for a keyed record: murmur2 of the key, positive, modulo."""
    m, r, length = 0x5BD1E995, 24, len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length % 4
    tail = key[length - rest:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def test_consume_as_a_group_commits_what_it_printed_and_resumes_there(op):
    create_topic(op, "grouped", partitions=2, min_isr=2)
    b = ("--bootstrap-server", op.bootstrap)
    lines = b"".join(b"%d\n" % i for i in range(1000))
    assert cli_in(lines, "produce", "--topic", "grouped", *b).returncode == 0
    first = cli_in(b"", "consume", "--topic", "grouped", *b, "--group", "readers", "--from-beginning",
                   "--max-messages", "600")
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == 600
    described = run_cli("groups", "describe", "readers", *b)
    committed = sum(int(line.split("Committed: ")[1].split()[0]) for line in described.stdout.splitlines()
                    if "Committed: " in line)
    assert committed == 600, described.stdout
    # --from-beginning only where the group has committed nothing (a partition the first run never read)
    rest = cli_in(b"", "consume", "--topic", "grouped", *b, "--group", "readers", "--from-beginning", "--exit-at-end")
    assert rest.returncode == 0, rest.stderr
    seen = first.stdout.splitlines() + rest.stdout.splitlines()
    assert sorted(int(x) for x in seen) == list(range(1000))          # each record once, none lost


def test_produce_and_consume_refuse_bad_input_in_one_line_and_send_nothing_after_it(op):
    b = ("--bootstrap-server", op.bootstrap)
    create_topic(op, "strict", partitions=1, min_isr=2)
    bad = cli_in(b"a:1\nno delimiter here\nc:3\n", "produce", "--topic", "strict", *b, "-K", ":")
    assert bad.returncode == 2
    assert bad.stderr.decode().strip().splitlines() == [
        "strandline produce: line 2 has no key delimiter ':'; the 1 record(s) before it were sent, nothing after it"]
    kept = cli_in(b"", "consume", "--topic", "strict", *b, "--from-beginning", "-e", "-f", "%k=%s\\n")
    assert kept.stdout == b"a=1\n"
    # exit status 2: bad input; 4: what the command names does not exist (docs/operations.md)
    for args, words, status in ((("consume", "--topic", "no-such-topic", *b, "-e"), "topic no-such-topic does not exist", 4),
                                (("consume", "--topic", "strict", *b, "-f", "%x"), "unknown token %x", 2),
                                (("consume", "--topic", "strict", *b, "--group", "g", "-o", "5"), "--group reads every", 2),
                                (("produce", "--topic", "strict", *b, "-H", "novalue"), "expected NAME=VALUE", 2),
                                (("produce", "--topic", "strict", *b, "-X", "no.such.setting=1"), "no.such.setting", 2),
                                (("produce", "--topic", "strict", *b, "--partition", "7"), "has no partition 7", 4)):
        result = cli_in(b"x\n", *args)
        assert result.returncode == status, (args, result)
        err = result.stderr.decode().strip().splitlines()
        assert len(err) == 1 and words in err[0], (args, err)


def test_bench_produce_and_consume_count_every_record_over_several_processes(op):
    """The load generators (issue 15): Kafka's perf-test lines; what they report is what the log holds."""
    create_topic(op, "loaded", partitions=3, min_isr=2)
    b = ("--bootstrap-server", op.bootstrap)
    sent = run_cli("bench", "produce", "--topic", "loaded", "--num-records", "3001", "--record-size", "200",
                   "--processes", "2", "--throughput", "6000", "--reporting-interval", "0.2", *b)
    assert sent.returncode == 0, sent.stderr
    lines = sent.stdout.strip().splitlines()
    final = re.match(r"^3001 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms "
                     r"max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$", lines[-1])
    assert final, lines
    assert len(lines) >= 3 and all(" records sent, " in line for line in lines[:-1])      # progress as it went
    rate = float(lines[-1].split(", ")[1].split()[0])
    assert rate <= 6000 * 1.15, lines[-1]                  # --throughput is a ceiling on both processes together
    offsets = run_cli("offsets", "get", "--topic", "loaded", *b).stdout.split()
    assert sum(int(line.rsplit(":", 1)[1]) for line in offsets) == 3001
    got = run_cli("bench", "consume", "--topic", "loaded", "--num-records", "2500", "--processes", "2", *b)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip().splitlines()[-1].startswith("2500 records consumed, ")
    more = run_cli("bench", "consume", "--topic", "loaded", "--num-records", "5000", *b)
    assert more.returncode == 0 and more.stdout.strip().splitlines()[-1].startswith("3001 records consumed, ")
    assert "the topic holds 3001 records, fewer than 5000" in more.stderr
    raw = run_cli("bench", "consume", "--topic", "loaded", "--num-records", "2500", "--processes", "2",
                  "--client", "raw", *b)            # Fetch read as bytes: the same records, counted from headers
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout.strip().splitlines()[-1].startswith("2500 records consumed, "), raw.stdout
    raw_all = run_cli("bench", "consume", "--topic", "loaded", "--num-records", "5000", "--client", "raw", *b)
    assert raw_all.returncode == 0 and raw_all.stdout.strip().splitlines()[-1].startswith("3001 records consumed, ")
    for args, words in ((("produce", "--topic", "loaded", "--num-records", "0", "--record-size", "1"),
                         "--num-records must be at least 1"),
                        (("produce", "--topic", "loaded", "--num-records", "5", "--record-size", "1",
                          "--producer-props", "no.such=1"), "no.such"),
                        (("consume", "--topic", "no-such-topic", "--num-records", "5"), "topic no-such-topic does not exist")):
        result = run_cli("bench", *args, *b)
        assert result.returncode == (4 if "does not exist" in words else 2), (args, result)
        err = result.stderr.strip().splitlines()
        assert len(err) == 1 and words in err[0], (args, err)


def test_a_kafka_python_consumer_reads_every_record_through_incremental_fetch_sessions(op):
    """KIP-227 with a stock client: kafka-python 3 opens a fetch session with each leader and then
    fetches incrementally; records produced while it does so all arrive, once, in order."""
    from kafka import KafkaConsumer, TopicPartition

    create_topic(op, "sessioned", partitions=3, min_isr=2)
    producer = Producer({"bootstrap.servers": op.bootstrap, "acks": "all", "linger.ms": 2})
    sent = {p: [] for p in range(3)}

    def send(start: int, count: int) -> None:
        for i in range(start, start + count):
            producer.produce("sessioned", str(i).encode(), partition=i % 3)
            sent[i % 3].append(str(i).encode())
        assert producer.flush(20) == 0

    consumer = KafkaConsumer(bootstrap_servers=op.bootstrap.split(","), group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=200)
    try:
        consumer.assign([TopicPartition("sessioned", p) for p in range(3)])
        consumer.seek_to_beginning()
        got = {p: [] for p in range(3)}

        def read(total: int) -> None:
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < total and time.monotonic() < deadline:
                for tp, records in consumer.poll(timeout_ms=200).items():
                    got[tp.partition].extend(r.value for r in records)

        send(0, 300)
        read(300)
        for _ in range(10):                  # idle polls: incremental fetches that name no partition
            consumer.poll(timeout_ms=100)
        send(300, 300)
        read(600)
        assert got == sent
        handlers = consumer._fetcher._session_handlers
        sessions = {node: (h.next_metadata.session_id, h.next_metadata.epoch) for node, h in handlers.items()}
        assert handlers and all(sid != 0 and epoch > 2 for sid, epoch in sessions.values()), sessions
    finally:
        consumer.close()


# ---------------------------------------------------------------------------- the web console




@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from headless_chromium(tmp_path_factory.mktemp("chromium"))


def page_rows(driver) -> dict[str, str]:
    """The partition rows the page shows now: name -> CSS classes (read in one script call, as the
    page redraws every second)."""
    return driver.execute_script(
        "const rows = {}; for (const r of document.querySelectorAll('#partitions tbody tr'))"
        " rows[r.dataset.partition] = r.className; return rows;")


def test_the_console_shows_partitions_go_under_replicated_when_a_broker_dies_and_come_back(op, browser):
    console = op.info.get("console")
    assert console and console.startswith("http://127.0.0.1:"), op.info
    create_topic(op, "shown", assignment={0: [1, 2, 3], 1: [2, 3, 1]}, min_isr=3)
    browser.get(console)
    poll_until(lambda: page_rows(browser).get("shown-0") == "" and page_rows(browser).get("shown-1") == "", 15,
               message="both partitions of 'shown' on the page, healthy")
    assert "0 under-replicated" in browser.find_element("id", "summary").text
    assert run_cli("cluster", "kill", "3", "--data-dir", str(op.data_dir)).returncode == 0
    producer = Producer({"bootstrap.servers": op.bootstrap, "acks": "1"})
    for p in (0, 1):
        producer.produce("shown", b"after the kill", partition=p)
    assert producer.flush(10) == 0
    poll_until(lambda: all("under-replicated" in page_rows(browser).get(f"shown-{p}", "") for p in (0, 1)),
               LAG_MS / 1000 + 15, message="the page showing shown-0 and shown-1 under-replicated")
    rows = page_rows(browser)
    assert all("under-min-isr" in rows[f"shown-{p}"] for p in (0, 1)), rows       # 2 in the ISR, min 3
    events = browser.execute_script(
        "return [...document.querySelectorAll('#events li')].map(li => li.dataset.kind + ' ' + li.textContent)")
    assert any(e.startswith("isr_shrink") and "shown-" in e for e in events), events
    assert run_cli("cluster", "start", "3", "--data-dir", str(op.data_dir), timeout=120).returncode == 0
    poll_until(lambda: page_rows(browser).get("shown-0") == "" and page_rows(browser).get("shown-1") == "", 30,
               message="the page showing both partitions healthy again")
