"""The web console in headless Chromium against a real three-broker cluster: user topics first
with the numbers `strandline topics describe` prints and the internal topics folded (also when
unhealthy), live charts, the record browser (offset, time, text and hex, headers,
read_committed), consumer groups with members and lag as `strandline groups describe` prints
them, and the controller's own controlled shutdown kept as an event across its restart."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.conftest import ROOT, cluster_fixture, poll_until, run_cli
from tests.integration.browser import headless_chromium

#: `STRANDLINE_DOCS_SCREENSHOTS=1` writes the screenshot where the docs show it
SCREENSHOT = ROOT / "docs" / "img" / "console.png"

cluster = cluster_fixture("console", 3, console=True, overrides=["group.initial.rebalance.delay.ms=0",
                                                  "transaction.state.log.num.partitions=10"])


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from headless_chromium(tmp_path_factory.mktemp("chromium"), "--window-size=1400,1000")


BASE_MS = (int(time.time()) - 120) * 1000       # partition 2's records: one a second from here (a whole second,
                                                # as the page's time input has no milliseconds)


@pytest.fixture(scope="module")
def data(cluster):
    """Topic `orders` (3 partitions, 3 replicas) with text, binary, timestamped and transactional
    records, and group `watchers` with one member that committed all but the last 3 records of
    orders-0."""
    assert run_cli("topics", "create", "--bootstrap-server", cluster.bootstrap, "--topic", "orders",
                   "--partitions", "3", "--replication-factor", "3").returncode == 0
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("orders", key=f"key-{i}", value=json.dumps({"order": i}), partition=0,
                         headers=[("source", b"console-test")])
    producer.produce("orders", key=b"bin", value=b"\x00\xff\x10binary", partition=0)
    for i in range(5):
        producer.produce("orders", value=f"one-{i}", partition=1)
    for i in range(10):
        producer.produce("orders", value=f"at-{i}", partition=2, timestamp=BASE_MS + 1000 * i)
    assert producer.flush(10) == 0
    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "console-test"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("orders", value=b"aborted", partition=1)
    txn.flush(10)
    txn.abort_transaction(10)
    txn.begin_transaction()
    txn.produce("orders", value=b"committed", partition=1)
    txn.commit_transaction(10)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "watchers", "client.id": "watcher-1",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe(["orders"])
    got = 0
    deadline = time.monotonic() + 20
    while got < 27 and time.monotonic() < deadline:        # 11 + 5 + 10 + the committed one
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got += 1
    assert got == 27
    consumer.commit(asynchronous=False)
    for i in range(3):
        producer.produce("orders", value=f"late-{i}", partition=0)
    assert producer.flush(10) == 0
    yield consumer
    consumer.close()


def page_state(driver) -> dict:
    """What the page shows now, read in one script call (it redraws every second); the rows in
    the page's order (ChromeDriver hands objects back with their keys sorted)."""
    state = driver.execute_script("""
        const s = document.getElementById('summary');
        return {summary: s.textContent, user: Number(s.dataset.userPartitions),
                internal: Number(s.dataset.internalPartitions),
                rows: [...document.querySelectorAll('#partitions tbody tr[data-partition]')].map(
                    r => [r.dataset.partition, {cls: r.className, cells: [...r.cells].map(c => c.textContent)}]),
                folded: Object.fromEntries([...document.querySelectorAll('#partitions tbody tr[data-folded]')].map(
                    r => [r.dataset.folded, {count: Number(r.dataset.count), cls: r.className}])),
                events: [...document.querySelectorAll('#events li')].map(li => li.dataset.kind + ' ' + li.textContent)};
    """)
    state["rows"] = dict(state["rows"])
    return state


def describe(cluster) -> dict[str, dict]:
    """`strandline topics describe --topic orders`: partition -> its fields."""
    out = run_cli("topics", "describe", "--bootstrap-server", cluster.bootstrap, "--topic", "orders")
    assert out.returncode == 0, out.stderr
    found = {}
    for line in out.stdout.splitlines():
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        if "Partition" in fields:
            found[f"orders-{fields['Partition']}"] = fields
    return found


def shown_as_described(described: dict[str, dict], driver) -> bool:
    rows = page_state(driver)["rows"]
    for name, fields in described.items():
        row = rows.get(name)
        if row is None:
            return False
        _, leader, epoch, isr, hw, _ = row["cells"]
        if (leader, epoch, hw) != (fields["Leader"], fields["LeaderEpoch"], fields["HW"]) \
                or sorted(re.findall(r"\d+", isr.split("(")[0])) != sorted(fields["Isr"].split(",")):
            return False
    return True


def test_user_topics_first_with_the_numbers_topics_describe_prints_and_internal_topics_folded(cluster, data, browser):
    console = cluster.info.get("console")
    assert console and console.startswith("http://127.0.0.1:"), cluster.info
    browser.get(console)
    described = describe(cluster)
    assert sorted(described) == ["orders-0", "orders-1", "orders-2"]
    poll_until(lambda: shown_as_described(described, browser), 20, interval=0.2,
               message="the page showing orders-0..2 as topics describe does")
    state = page_state(browser)
    assert list(state["rows"]) == ["orders-0", "orders-1", "orders-2"]          # no internal partition row
    assert state["folded"]["__consumer_offsets"]["count"] == 50
    assert state["folded"]["__transaction_state"]["count"] == 10
    assert state["user"] == 3 and state["internal"] == 60
    assert "1 topics, 3 partitions (+ 60 partitions of 2 internal topics, folded)" in state["summary"]
    browser.find_element("id", "show-internal").click()
    poll_until(lambda: len(page_state(browser)["rows"]) == 63, 5, message="63 partition rows")
    rows = list(page_state(browser)["rows"])
    assert rows[:3] == ["orders-0", "orders-1", "orders-2"] and "+ 2 internal topics, 60 partitions" in \
        page_state(browser)["summary"]
    browser.find_element("id", "show-internal").click()
    poll_until(lambda: len(page_state(browser)["rows"]) == 3, 5, message="the internal topics folded again")


def fake_broker_status() -> dict:
    """One broker's /status: a user topic and 50 partitions of __consumer_offsets, all of them
    under-replicated (replicas [1, 2], ISR [1])."""
    topics = {"orders": {"partitions": {"0": {"replicas": [1, 2], "leader": 1, "isr": [1]}}},
              "__consumer_offsets": {"partitions": {str(i): {"replicas": [1, 2], "leader": 1, "isr": [1]}
                                                    for i in range(50)}}}
    replicas = [{"topic": t, "partition": int(i), "leader": 1, "leader_epoch": 0, "role": "leader",
                 "replicas": [1, 2], "log_start_offset": 0, "log_end_offset": 5, "high_watermark": 5, "size": 50,
                 "isr": [1], "min_insync_replicas": 1, "followers": {}}
                for t, topic in topics.items() for i in topic["partitions"]]
    return {"broker_id": 1, "controller_id": 1, "is_controller": True, "timeline": 1, "events": [],
            "brokers": {"1": {"host": "127.0.0.1", "port": 1, "rack": None}}, "topics": topics,
            "replicas": replicas, "groups": []}


def test_internal_topics_stay_folded_when_they_are_unhealthy(browser):
    """Against a broker's /status served by the test: every __consumer_offsets partition
    under-replicated is one folded line, marked under-replicated, below the user's partition."""
    from aiohttp import web

    from strandline.console.server import Console

    started: dict = {}
    stop = threading.Event()

    async def status(request: web.Request) -> web.Response:
        return web.json_response(fake_broker_status())

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="")

    async def serve() -> None:
        app = web.Application()
        app.router.add_get("/status", status)
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        broker = f"http://127.0.0.1:{runner.addresses[0][1]}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        console = Console(f"127.0.0.1:{closed}", addresses={1: broker}, interval_s=0.2)
        started["url"] = await console.start("127.0.0.1", 0)
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await console.close()
        await runner.cleanup()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    cluster_tab = browser.current_window_handle       # the other tests' page stays on the cluster's console
    browser.switch_to.new_window("tab")
    try:
        poll_until(lambda: "url" in started, 10, message="the console serving")
        browser.get(started["url"])
        poll_until(lambda: "orders-0" in page_state(browser)["rows"], 10, message="orders-0 on the page")
        state = page_state(browser)
        assert list(state["rows"]) == ["orders-0"], list(state["rows"])[:5]
        assert state["folded"]["__consumer_offsets"]["count"] == 50
        assert "under-replicated" in state["folded"]["__consumer_offsets"]["cls"]
        assert "1 topics, 1 partitions (+ 50 partitions of 1 internal topics, folded) · 51 under-replicated" \
            in state["summary"]
    finally:
        browser.close()
        browser.switch_to.window(cluster_tab)
        stop.set()
        thread.join(10)


def read_on_page(driver, **fields) -> dict:
    """Fills the record browser's form, reads, and returns the status line and the rows."""
    driver.execute_script("""
        const f = arguments[0];
        for (const [id, value] of Object.entries(f)) {
            const input = document.getElementById('records-' + id);
            if (input.type === 'checkbox') input.checked = value; else input.value = value;
            input.dispatchEvent(new Event('change'));
        }
        document.getElementById('records-status').dataset.state = '';
        document.getElementById('records-read').click();
    """, fields)
    poll_until(lambda: driver.execute_script(
        "return document.getElementById('records-status').dataset.state") in ("done", "error"), 15,
        message="the record browser's answer")
    return driver.execute_script("""
        return {status: document.getElementById('records-status').textContent,
                rows: [...document.querySelectorAll('#records tbody tr')].map(r => ({
                    offset: Number(r.dataset.offset), cells: [...r.cells].map(c => c.textContent),
                    classes: [...r.cells].map(c => c.className)}))};
    """)


def test_the_record_browser_shows_keys_values_headers_in_text_or_hex_from_an_offset_or_a_time(cluster, data, browser):
    got = read_on_page(browser, topic="orders", partition="0", **{"from": "offset"}, offset="8", limit="5",
                       committed=False, format="auto")
    assert [r["offset"] for r in got["rows"]] == [8, 9, 10, 11, 12], got
    eight = got["rows"][0]["cells"]
    assert eight[2] == "key-8" and json.loads(eight[3]) == {"order": 8} and eight[4] == "source=console-test"
    binary = got["rows"][2]
    assert binary["cells"][2] == "bin" and binary["cells"][3] == "00ff1062696e617279" and binary["classes"][3] == "hex"
    assert "limited: more follow" in got["status"]                          # 14 records, 5 shown
    as_hex = read_on_page(browser, offset="8", limit="1", format="hex")
    assert as_hex["rows"][0]["cells"][2] == b"key-8".hex()
    # by time: the first record at or after the time
    when = BASE_MS + 5000
    browser.execute_script("""
        const ms = arguments[0];
        document.getElementById('records-time').value =
            new Date(ms - new Date(ms).getTimezoneOffset() * 60000).toISOString().slice(0, 19);""", when)
    at = read_on_page(browser, partition="2", **{"from": "time"}, limit="2", format="auto")
    assert [r["cells"][3] for r in at["rows"]] == ["at-5", "at-6"], at
    # read_committed leaves out the aborted record (and the transactions' markers take offsets)
    everything = read_on_page(browser, partition="1", **{"from": "beginning"}, limit="50", committed=False)
    committed = read_on_page(browser, partition="1", limit="50", committed=True)
    values = [r["cells"][3] for r in everything["rows"]]
    assert values == [f"one-{i}" for i in range(5)] + ["aborted", "committed"], values
    assert [r["cells"][3] for r in committed["rows"]] == [f"one-{i}" for i in range(5)] + ["committed"]
    error = read_on_page(browser, partition="7", committed=False)
    assert error["status"].startswith("error: topic orders has no partition 7") and not error["rows"]


def group_rows(driver) -> dict:
    return driver.execute_script("""
        const g = document.querySelector('#groups tr.group[data-group="watchers"]');
        return {group: g ? [...g.cells].map(c => c.textContent) : null,
                partitions: Object.fromEntries([...document.querySelectorAll(
                    '#groups tr[data-group="watchers"][data-group-partition]')].map(
                    r => [r.dataset.groupPartition, [...r.cells].map(c => c.textContent)]))};
    """)


def test_consumer_groups_show_members_and_lag_as_groups_describe_does(cluster, data, browser):
    out = run_cli("groups", "describe", "--bootstrap-server", cluster.bootstrap, "watchers")
    assert out.returncode == 0, out.stderr
    described = {f"orders-{p}": (c, hw, lag) for p, c, hw, lag in
                 re.findall(r"Partition: (\d+)\tCommitted: (\d+)\tHW: (\d+)\tLag: (\d+)", out.stdout)}
    assert described["orders-0"][2] == "3" and len(described) == 3, out.stdout

    seen: list[dict] = []

    def matches() -> bool:
        rows = group_rows(browser)        # one read of the page, which redraws every second
        seen[:] = [rows]
        if rows["group"] is None or "watcher-1@" not in rows["group"][2]:
            return False
        total = str(sum(int(lag) for _, _, lag in described.values()))
        return rows["group"][1] == "Stable" and rows["group"][-1] == total and all(
            tuple(rows["partitions"].get(name, [None] * 6)[3:6]) == numbers for name, numbers in described.items())

    assert poll_until(matches, 20, interval=0.3, message=f"group watchers (Stable, its total lag) with its member and lag per "
                      f"partition as groups describe prints ({described})")
    assert all(cells[2].startswith("watcher-1@") for cells in seen[0]["partitions"].values()), seen[0]


def status_events(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/status", timeout=5) as resp:
        return json.loads(resp.read())["events"]


def save_screenshot(driver, path: Path) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(height + 40, 4000))
    driver.execute_script("window.scrollTo(0, 0)")
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)


def test_charts_and_the_controllers_controlled_shutdown_kept_across_its_restart(cluster, data, browser, tmp_path):
    # the charts: bytes in of orders, and orders-0's replicas and HW as topics describe says
    poll_until(lambda: browser.execute_script(
        "const c = document.getElementById('chart-partition-plot');"
        "return c.dataset.partition === 'orders-0' && c.querySelector('canvas') !== null"
        " && document.querySelector('#chart-in canvas') !== null"), 10, message="the charts drawn")
    hw = describe(cluster)["orders-0"]["HW"]
    poll_until(lambda: browser.execute_script(
        "return document.getElementById('chart-partition-plot').dataset.lastHw") == hw, 10,
        message=f"the chart of orders-0 ending at HW {hw}")
    legend = browser.execute_script("return [...document.querySelectorAll('#chart-partition-plot .u-series')]"
                                    ".map(s => s.textContent)")
    assert sum("LEO of replica" in s for s in legend) == 3 and any(s.startswith("HW") for s in legend), legend
    charts = json.loads(urllib.request.urlopen(cluster.info["console"] + "api/charts", timeout=5).read())
    assert max(v or 0 for v in charts["topics"]["topics"]["orders"]["in"]) > 0      # the late records

    # a controlled shutdown of the controller: partitions under-replicated, internal topics still folded
    controller = next(b for b in (1, 2, 3) if json.loads(urllib.request.urlopen(
        f"{next(x['metrics'] for x in cluster.info['brokers'] if x['id'] == b)}/status", timeout=5).read())
        ["is_controller"])
    led = [name for name, f in describe(cluster).items() if f["Leader"] == str(controller)]
    assert run_cli("cluster", "stop", str(controller), "--data-dir", str(cluster.data_dir)).returncode == 0
    poll_until(lambda: all("under-replicated" in r["cls"] for r in page_state(browser)["rows"].values())
               and "under-replicated" in page_state(browser)["folded"]["__consumer_offsets"]["cls"], 20,
               interval=0.3, message="orders and the folded __consumer_offsets under-replicated")
    state = page_state(browser)
    assert len(state["rows"]) == 3 and state["folded"]["__consumer_offsets"]["count"] == 50
    assert "1 topics, 3 partitions (+ 60 partitions of 2 internal topics, folded)" in state["summary"]
    assert run_cli("cluster", "start", str(controller), "--data-dir", str(cluster.data_dir),
                   timeout=60).returncode == 0
    url = next(x["metrics"] for x in cluster.info["brokers"] if x["id"] == controller)
    own = [e for e in status_events(url) if e["kind"] == "controlled_shutdown"]
    assert [e["message"].split(":")[0] for e in own] == [f"Controlled shutdown of broker {controller}"]
    mine = f"controlled_shutdown broker {controller}"

    def shown_once() -> bool:
        events = page_state(browser)["events"]
        return [e for e in events if e.startswith("controlled_shutdown") and f"broker {controller} " in e
                and f"Controlled shutdown of broker {controller}" in e].__len__() == 1
    poll_until(shown_once, 20, interval=0.3, message=f"{mine}: shown once on the page")
    events = page_state(browser)["events"]
    assert not any("__consumer_offsets" in e or "__transaction_state" in e for e in events)     # folded too
    assert int(browser.execute_script("return document.getElementById('events-hidden').dataset.hidden")) > 0
    poll_until(lambda: all(r["cls"] == "" for r in page_state(browser)["rows"].values()), 30, interval=0.3,
               message="orders healthy again")
    # the leader change of a partition the controller led is a mark on its chart
    if led:
        browser.execute_script("const s = document.getElementById('chart-partition'); s.value = arguments[0];"
                               "s.dispatchEvent(new Event('change'));", led[0].replace("orders-", "orders/"))
        poll_until(lambda: "leader" in (browser.execute_script(
            "return document.getElementById('chart-partition-plot').dataset.marks") or ""), 10,
            message=f"a leader change marked on the chart of {led[0]}")
    read_on_page(browser, topic="orders", partition="0", **{"from": "offset"}, offset="8", limit="5",
                 committed=False, format="auto")
    path = SCREENSHOT if os.environ.get("STRANDLINE_DOCS_SCREENSHOTS") == "1" else tmp_path / "console.png"
    save_screenshot(browser, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 50_000
