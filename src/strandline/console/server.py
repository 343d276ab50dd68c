"""``strandline console``: a live web page of the cluster, served with aiohttp.

The console finds the brokers through the Kafka protocol (Metadata from the bootstrap servers,
then each broker's ``metrics.port`` from DescribeConfigs), polls every broker's ``/status`` once
a second, and keeps the merged picture (:mod:`strandline.console.model`). A broker of thousands of
partitions takes a while to answer: after a round the console waits at least ``POLL_BACKOFF``
times as long as the slowest answer took (at most ``MAX_REST`` poll intervals), so that
serving it stays a small part of a broker's work. It serves:

It also reads each broker's ``/metrics`` (the per-topic byte counters) in the same round and keeps
the last minutes of samples (:class:`strandline.console.model.History`) for the page's charts,
and asks the groups' coordinators for their members every few rounds. It serves:

- ``/``: the page (static HTML, CSS, a script that fetches ``/api/cluster`` each second, and
  uPlot, vendored in ``static/vendor``, for the charts: no build step, nothing from the network);
- ``/api/cluster``: the merged picture as JSON, with each group's members;
- ``/api/charts?topic=T&partition=P``: every topic's bytes in and out per second and the chosen
  partition's high watermark and replicas' log end offsets over the last minutes, with its
  leader changes and ISR shrinks and expansions as marks;
- ``/api/records?topic=T&partition=P&offset=O|time=MS&limit=N&isolation=read_committed``:
  records read with a Kafka client (:mod:`strandline.console.records`), bounded;
- ``/metrics``: cluster-wide values in Prometheus' text format, among them each consumer group's
  lag per partition (``kafka_consumergroup_lag``, kafka_exporter's name), which no single broker
  knows;
- ``/lab/``: the lab's runs found in ``--lab-dir`` (their ``timeline.html`` and ``timeline.png``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from pathlib import Path
from urllib.parse import quote
from typing import Any, Iterator

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from strandline.console.discovery import metrics_addresses
from strandline.console.records import admin_client, describe_groups, read_records
from strandline.console.model import TOPIC_COUNTERS, History, cluster_view, topic_byte_counters
from strandline.errors import StrandlineError

log = logging.getLogger("strandline.console")

STATIC = Path(__file__).parent / "static"
EVENTS_KEPT = 500
LAB_FILES = {"timeline.html", "timeline.png", "run.json"}
REDISCOVER_S = 5.0
POLL_BACKOFF = 20      # a round of polls is followed by at least this many times its slowest answer of rest
MAX_REST = 10          # but never more than this many poll intervals
GROUPS_EVERY = 5       # rounds between two descriptions of the groups' members
_COUNTER_LINES = tuple(f"{prefix} {name}" for prefix in ("# HELP", "# TYPE") for name in TOPIC_COUNTERS) + \
    tuple(f"{name}_total{{" for name in TOPIC_COUNTERS)


def byte_counters(text: str) -> dict[str, dict[str, float]]:
    """The per-topic byte counters of one broker's ``/metrics`` text (only their lines are parsed)."""
    lines = "\n".join(line for line in text.splitlines() if line.startswith(_COUNTER_LINES))
    return topic_byte_counters(text_string_to_metric_families(lines + "\n"))


class Console:
    """Polls the brokers and serves the page, the JSON and the metrics."""

    def __init__(self, bootstrap: str, lab_dir: str | None = None, interval_s: float = 1.0,
                 addresses: dict[int, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.lab_dir = Path(lab_dir).resolve() if lab_dir else None
        self.interval_s = interval_s
        self.addresses: dict[int, str] = dict(addresses or {})
        self.statuses: dict[int, dict[str, Any] | None] = {}
        self.events: dict[int, collections.deque[dict[str, Any]]] = {}
        self.last_seq: dict[int, int] = {}
        self.timelines: dict[int, Any] = {}
        self.counters: dict[int, dict[str, Any] | None] = {}
        self.history = History()
        self.members: dict[str, dict[str, Any]] = {}
        self._admin: Any = None
        self._describing: asyncio.Task[None] | None = None
        self.polls = 0
        self.last_poll_s = 0.0          # the slowest status answered in the last round of polls
        self._round_s = 0.0
        self._next_discovery = 0.0
        self.session: aiohttp.ClientSession | None = None
        self.runner: web.AppRunner | None = None
        self._poller: asyncio.Task[None] | None = None
        self.url: str | None = None

    # ------------------------------------------------------------------ polling

    async def discover(self) -> None:
        try:
            _, found = await asyncio.to_thread(metrics_addresses, self.bootstrap, 2.0)
        except StrandlineError as exc:
            log.warning("Cannot reach the cluster at %s: %s", self.bootstrap, exc)
            return
        self.addresses.update(found)

    async def _poll_one(self, broker_id: int, url: str) -> None:
        assert self.session is not None
        since = self.last_seq.get(broker_id, 0)
        started = asyncio.get_running_loop().time()
        try:
            async with self.session.get(f"{url}/status", params={"since": str(since)}) as resp:
                resp.raise_for_status()
                status = await resp.json()
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            self.statuses[broker_id] = None
            return
        self._round_s = max(self._round_s, asyncio.get_running_loop().time() - started)
        if self.timelines.get(broker_id) != status.get("timeline"):      # a new process: its numbering restarts
            self.timelines[broker_id] = status.get("timeline")
            if since:
                self.last_seq[broker_id] = 0
                return await self._poll_one(broker_id, url)
        events = self.events.setdefault(broker_id, collections.deque(maxlen=EVENTS_KEPT))
        # a restarted broker serves again the events it kept in its data dir: each is kept once
        seen = {(e["time_ms"], e["seq"], e["kind"]) for e in events} if not since else set()
        for event in status.get("events", []):
            if (event["time_ms"], event["seq"], event["kind"]) not in seen:
                events.append(event)
            self.last_seq[broker_id] = max(self.last_seq.get(broker_id, 0), event["seq"])
        self.statuses[broker_id] = status
        try:
            async with self.session.get(f"{url}/metrics") as resp:
                resp.raise_for_status()
                self.counters[broker_id] = byte_counters(await resp.text())
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            self.counters[broker_id] = None
        self._round_s = max(self._round_s, asyncio.get_running_loop().time() - started)

    async def poll(self) -> None:
        """One round: every broker's status; brokers not known yet are looked up."""
        registered = {int(b) for s in self.statuses.values() if s for b in s.get("brokers", {})}
        silent = registered - {b for b, s in self.statuses.items() if s is not None}
        now = asyncio.get_running_loop().time()
        # look again for brokers not known or not answering (restarted on another port), not too often
        if not self.addresses or (silent and now >= self._next_discovery):
            self._next_discovery = now + REDISCOVER_S
            await self.discover()
        self.counters = {}
        await asyncio.gather(*(self._poll_one(b, url) for b, url in sorted(self.addresses.items())))
        self.polls += 1
        self.history.add(time.time(), self.counters, self.view(with_extras=False))
        if self.polls % GROUPS_EVERY == 1 and (self._describing is None or self._describing.done()):
            self._describing = asyncio.get_running_loop().create_task(self._describe_groups())

    async def _describe_groups(self) -> None:
        groups = sorted({g["group"] for s in self.statuses.values() if s for g in s.get("groups", [])})
        if not groups:
            self.members = {}
            return
        try:
            if self._admin is None:
                self._admin = await asyncio.to_thread(admin_client, self.bootstrap)
            self.members = await asyncio.to_thread(describe_groups, self._admin, groups)
        except Exception as exc:       # noqa: BLE001 - the next round asks again
            log.debug("Describing the groups failed: %s", exc)

    async def _poll_forever(self) -> None:
        while True:
            self._round_s = 0.0
            await self.poll()
            self.last_poll_s = self._round_s
            await asyncio.sleep(self.poll_interval_s)

    @property
    def poll_interval_s(self) -> float:
        """The rest after a round: ``interval_s``, or ``POLL_BACKOFF`` times the slowest status
        answered in the last round (a broker that did not answer, or the search for brokers, is
        not broker work) if longer, at most ``MAX_REST`` times ``interval_s``."""
        return max(self.interval_s, min(POLL_BACKOFF * self.last_poll_s, MAX_REST * self.interval_s))

    def view(self, with_extras: bool = True) -> dict[str, Any]:
        view = cluster_view(self.statuses, self.addresses,
                            [e for events in self.events.values() for e in events])
        if with_extras:
            view["lab_runs"] = self.lab_runs()
            view["polls"] = self.polls
            for g in view["groups"]:
                described = self.members.get(g["group"])       # described a few rounds ago: if still so
                same = described is not None and _state(described["state"]) == _state(g["state"]) \
                    and len(described["members"]) == g["members"]
                g["member_list"] = described["members"] if described is not None and same else None
        return view

    # ------------------------------------------------------------------ the lab

    def lab_runs(self) -> list[dict[str, Any]]:
        if self.lab_dir is None or not self.lab_dir.is_dir():
            return []
        runs = []
        found = []
        for run_json in self.lab_dir.glob("*/run.json"):
            try:
                found.append((run_json.stat().st_mtime, run_json, json.loads(run_json.read_text())))
            except (OSError, ValueError):
                continue        # being written or removed
        for _, run_json, info in sorted(found, key=lambda f: f[0], reverse=True):
            name = run_json.parent.name
            runs.append({"run": name, "scenario": info.get("scenario"), "summary": info.get("summary"),
                         "verdict": info.get("verdict"), "error": info.get("error"),
                         "timeline": f"/lab/{quote(name)}/timeline.html"
                         if (run_json.parent / "timeline.html").exists() else None})
        return runs[:50]

    # ------------------------------------------------------------------ serving

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/favicon.ico", self._no_icon)
        app.router.add_get("/api/cluster", self._api_cluster)
        app.router.add_get("/api/charts", self._api_charts)
        app.router.add_get("/api/records", self._api_records)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/lab/{run}/{file}", self._lab_file)
        app.router.add_static("/static/", STATIC)
        return app

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    async def _no_icon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def _api_cluster(self, request: web.Request) -> web.Response:
        return web.json_response(self.view())

    async def _api_charts(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {"topics": self.history.topics(), "partition": None}
        topic = request.query.get("topic")
        if topic:
            partition = _int_param(request, "partition", 0)
            events = [e for events in self.events.values() for e in events]
            body["partition"] = self.history.partition(topic, partition, events)
        return web.json_response(body)

    async def _api_records(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        if not topic:
            raise web.HTTPBadRequest(text="topic is required")
        partition = _int_param(request, "partition", 0)
        offset = _int_param(request, "offset", None)
        time_ms = _int_param(request, "time", None)
        limit = _int_param(request, "limit", 50)
        isolation = request.query.get("isolation", "read_uncommitted")
        if isolation not in ("read_committed", "read_uncommitted"):
            raise web.HTTPBadRequest(text="isolation must be read_committed or read_uncommitted")
        try:
            body = await asyncio.to_thread(read_records, self.bootstrap, topic, partition, offset=offset,
                                           time_ms=time_ms, limit=limit,
                                           read_committed=isolation == "read_committed")
        except StrandlineError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(body)

    async def _lab_file(self, request: web.Request) -> web.FileResponse:
        run, name = request.match_info["run"], request.match_info["file"]
        if self.lab_dir is None or name not in LAB_FILES or "/" in run or run.startswith("."):
            raise web.HTTPNotFound()
        path = self.lab_dir / run / name
        if not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    async def _metrics(self, request: web.Request) -> web.Response:
        view = self.view()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_ViewCollector(view))
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self, host: str, port: int) -> str:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0))
        self.runner = web.AppRunner(self.app(), access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, host, port, reuse_address=True).start()
        bound = self.runner.addresses[0]
        self.url = f"http://{bound[0]}:{bound[1]}/"
        await self.poll()
        self._poller = asyncio.get_running_loop().create_task(self._poll_forever())
        return self.url

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        if self._describing is not None:
            self._describing.cancel()
        if self.runner is not None:
            await self.runner.cleanup()
        if self.session is not None:
            await self.session.close()


def _state(name: str | None) -> str:
    """A group's state as both names compare: Kafka's ``PreparingRebalance`` and the Admin
    client's ``PREPARING_REBALANCE``."""
    return (name or "").replace("_", "").lower()


def _int_param(request: web.Request, name: str, default: Any) -> Any:
    value = request.query.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer") from None


class _ViewCollector:
    def __init__(self, view: dict[str, Any]) -> None:
        self.view = view

    def collect(self) -> Iterator[GaugeMetricFamily]:
        summary = self.view["summary"]
        for key, help_text in (("under_replicated", "Partitions whose ISR is smaller than their replica set."),
                               ("under_min_isr", "Partitions whose ISR is below min.insync.replicas."),
                               ("offline", "Partitions without a live leader."),
                               ("reachable", "Brokers whose status the console read."),
                               ("registered", "Brokers registered in ZooKeeper.")):
            yield GaugeMetricFamily(f"strandline_cluster_{key}", help_text, value=summary[key])
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Records a group's committed offset is behind the "
                                "partition's high watermark.", labels=["consumergroup", "topic", "partition"])
        for g in self.view["groups"]:
            for o in g["offsets"]:
                if o["lag"] is not None:
                    lag.add_metric([g["group"], o["topic"], str(o["partition"])], o["lag"])
        yield lag


async def serve(bootstrap: str, host: str, port: int, lab_dir: str | None, ready: Any = None) -> None:
    """Run the console until cancelled; ``ready(url)`` is called once it serves."""
    console = Console(bootstrap, lab_dir)
    try:
        url = await console.start(host, port)
        if ready is not None:
            ready(url)
        await asyncio.Event().wait()
    finally:
        await console.close()
