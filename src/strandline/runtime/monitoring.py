"""The broker's HTTP endpoint for operators: ``/metrics`` (Prometheus) and ``/status`` (JSON).

It runs on the broker's own event loop (aiohttp), so reading the core never races with the
events that change it. ``/metrics`` serves the families of :mod:`strandline.broker.metrics`, the
request-time histograms the shell measures and the process's own (CPU, memory, the garbage
collector's pauses), in Prometheus' text format (prometheus_client).
``/status`` serves :func:`strandline.broker.status.status` plus this broker's recent cluster
events (leader changes, ISR shrinks and expansions, broker deaths, offline partitions, controlled
shutdowns), newest last, kept across restarts in a small ring file in its first log dir;
``/status?since=<seq>`` returns only the events after ``seq``.
"""

from __future__ import annotations

import bisect
import collections
import gc
import json
import logging
import os
import time
from typing import Any, Iterator

from aiohttp import web
from prometheus_client import (CollectorRegistry, GCCollector, Histogram, ProcessCollector, disable_created_metrics,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from strandline.broker import metrics as core_metrics
from strandline.broker.broker import Broker
from strandline.broker.status import status
from strandline.protocol.api import ApiKey
from strandline.runtime.disk import PREALLOCATOR, Preallocator

#: request times in ms, from 0.5 ms to long-poll fetches
BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
EVENTS_KEPT = 1000
#: the file of a broker's events in its first log dir (not a partition's directory name)
EVENTS_FILE = "strandline-events.jsonl"
#: garbage collector pauses in seconds, from 0.1 ms to a second
GC_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

log = logging.getLogger("strandline.broker")

disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated; no *_created samples: Kafka's meters have none

_NAMES = {int(k): "".join(w.capitalize() for w in k.name.split("_")) for k in ApiKey}


def request_name(frame: bytes | bytearray) -> str:
    """Kafka's ``request`` tag of RequestMetrics: the API's name, with Fetch split into
    ``FetchConsumer`` and ``FetchFollower`` (a replica id of 0 or more; followers send v14 or
    below)."""
    api_key = int.from_bytes(frame[0:2], "big")
    name = _NAMES.get(api_key, str(api_key))
    if api_key == ApiKey.FETCH:
        version = int.from_bytes(frame[2:4], "big")
        client_id_len = int.from_bytes(frame[8:10], "big", signed=True)
        at = 10 + max(client_id_len, 0) + (1 if version >= 12 else 0)     # v12+: the header's tagged fields
        if version < 15 and len(frame) >= at + 4 and int.from_bytes(frame[at:at + 4], "big", signed=True) >= 0:
            return "FetchFollower"
        return "FetchConsumer"
    return name


class RequestMetrics:
    """Kafka's ``kafka.network:type=RequestMetrics,name=TotalTimeMs``: from a request's arrival
    to its answer being handed to the socket, per API."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.histogram = Histogram("kafka_network_requestmetrics_totaltimems",
                                   "Time from a request's arrival to its answer, in ms.", ["request"],
                                   buckets=BUCKETS_MS, registry=registry)
        self._by_name: dict[str, Any] = {}

    def observe(self, name: str, arrived: float, now: float) -> None:
        child = self._by_name.get(name)
        if child is None:
            child = self._by_name[name] = self.histogram.labels(request=name)
        child.observe((now - arrived) * 1000.0)


class GcMetrics:
    """The interpreter's garbage collections, as a JVM's reach Prometheus (the JMX exporter's
    ``jvm_gc_collection_seconds``): ``python_gc_collection_seconds``, each collection's pause by
    generation (the event loop, and so every request, waits it out), and
    ``python_gc_frozen_objects``, the objects start-up left out of every collection
    (``broker_main.freeze_start_up_objects``).

    The pauses are counted in plain lists by a ``gc.callbacks`` hook, which may run in any thread
    and in the middle of any allocation: it takes no lock and calls into no metrics library."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._started = 0.0
        self._counts = [[0] * (len(GC_BUCKETS_S) + 1) for _ in range(3)]     # per generation; the last: +Inf
        self._sums = [0.0, 0.0, 0.0]
        registry.register(self)
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        generation = info["generation"]
        self._sums[generation] += pause
        self._counts[generation][bisect.bisect_left(GC_BUCKETS_S, pause)] += 1

    def collect(self) -> Iterator[Metric]:
        pauses = HistogramMetricFamily("python_gc_collection_seconds", "Pauses of the garbage collector, in seconds.",
                                       labels=["generation"])
        for generation in range(3):
            buckets, total = [], 0
            for bound, count in zip([*map(str, GC_BUCKETS_S), "+Inf"], self._counts[generation]):
                total += count
                buckets.append((bound, total))
            pauses.add_metric([str(generation)], buckets, self._sums[generation])
        yield pauses
        yield GaugeMetricFamily("python_gc_frozen_objects",
                                "Objects left out of every garbage collection (frozen after start-up).",
                                value=gc.get_freeze_count())

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)


class Timeline:
    """This broker's recent cluster events, numbered so a reader can ask for what is new.

    With a ``path`` (``strandline-events.jsonl`` in the first log dir) each event is also appended
    to that file, one JSON line, and a new process reads the file back, so that the events of a
    broker's earlier lives (its own controlled shutdown as controller, say) outlive a restart; its
    numbering goes on from the last event kept. The file is a ring: once it holds twice
    ``EVENTS_KEPT`` lines it is rewritten with the last ``EVENTS_KEPT`` (to a temporary file,
    renamed over it). A file that cannot be read or written costs only the events' persistence,
    with one warning."""

    def __init__(self, broker_id: int, path: str | None = None) -> None:
        self.broker_id = broker_id
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=EVENTS_KEPT)
        self.seq = 0
        self.started_ms = time.time_ns() // 1_000_000    # names this process's timeline (seq starts again)
        self.path = path
        self._lines = 0
        self._file: Any = None
        if path is not None:
            self._load(path)

    def _load(self, path: str) -> None:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except FileNotFoundError:
            return
        except OSError as exc:
            self._give_up(exc)
            return
        self._lines = len(lines)
        for line in lines:
            try:
                event = json.loads(line)
                self.seq = max(self.seq, int(event["seq"]))
            except (ValueError, KeyError, TypeError):
                continue            # a line cut by a crash
            self.events.append(event)

    def _give_up(self, exc: OSError) -> None:
        log.warning("Cannot keep the cluster events in %s (%s); they last only as long as this process",
                    self.path, exc.strerror or exc)
        self.path = None

    def _persist(self, event: dict[str, Any]) -> None:
        assert self.path is not None
        try:
            if self._lines + 1 >= 2 * EVENTS_KEPT:
                self.close()
                temporary = self.path + ".tmp"
                with open(temporary, "w", encoding="utf-8") as f:
                    f.writelines(json.dumps(e) + "\n" for e in self.events)
                os.replace(temporary, self.path)
                self._lines = len(self.events)
            else:
                if self._file is None:        # kept open: an election of many partitions is many lines
                    self._file = open(self.path, "a", encoding="utf-8", buffering=1)
                self._file.write(json.dumps(event) + "\n")
                self._lines += 1
        except OSError as exc:
            self.close()
            self._give_up(exc)

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    def record(self, kind: str, message: str, partition: tuple[str, int] | None, level: str) -> None:
        self.seq += 1
        event = {"seq": self.seq, "time_ms": time.time_ns() // 1_000_000, "broker": self.broker_id,
                 "kind": kind, "level": level, "message": message,
                 "topic": partition[0] if partition else None,
                 "partition": partition[1] if partition else None}
        self.events.append(event)
        if self.path is not None:
            self._persist(event)

    def since(self, seq: int) -> list[dict[str, Any]]:
        return [e for e in self.events if e["seq"] > seq]


class CoreCollector:
    """prometheus_client's view of the broker core (read at each scrape, on the loop)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        for family in core_metrics.collect(self.broker):
            metric = Metric(family.name, family.help, family.kind)
            sample = family.name + "_total" if family.kind == "counter" else family.name
            for labels, value in family.samples:
                metric.add_sample(sample, labels, value)
            yield metric


class PreallocatorCollector:
    """The counters of the process's segment block reservations (:class:`~strandline.runtime.disk.Preallocator`)."""

    def __init__(self, preallocator: Preallocator) -> None:
        self.preallocator = preallocator

    def collect(self) -> Iterator[Metric]:
        pre = self.preallocator
        yield CounterMetricFamily("strandline_log_segment_preallocated_bytes",
                                  "Disk blocks reserved ahead of log segment appends, in bytes.", value=pre.reserved)
        yield CounterMetricFamily("strandline_log_segment_preallocations_skipped",
                                  "Reservations not made: the segment was cut, rolled, deleted or replaced before "
                                  "the reservation thread reached it.", value=pre.skipped)
        yield CounterMetricFamily("strandline_log_segment_preallocation_failures",
                                  "Reservations the file system refused (a full disk) or that failed; the appends "
                                  "allocate as they go.", value=pre.failed)
        yield GaugeMetricFamily("strandline_log_segment_preallocation_unsupported_devices",
                                "Devices whose file system cannot reserve blocks ahead (no fallocate): their "
                                "segments reserve nothing.", value=pre.unsupported_devices)


class Monitoring:
    """The registry, the timeline and the HTTP server of one broker."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(CoreCollector(broker))
        self.requests = RequestMetrics(self.registry)
        # the process's CPU, memory and open files, and its collections, by prometheus_client's names
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.gc = GcMetrics(self.registry)
        self.registry.register(PreallocatorCollector(PREALLOCATOR))
        log_dirs = broker.config["log.dirs"]
        self.timeline = Timeline(broker.broker_id, os.path.join(log_dirs[0], EVENTS_FILE) if log_dirs else None)
        self.runner: web.AppRunner | None = None
        self.address: tuple[str, int] | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/status", self._status)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _status(self, request: web.Request) -> web.Response:
        try:
            since = int(request.query.get("since", "0"))
        except ValueError:
            raise web.HTTPBadRequest(text="since must be an event number") from None
        body = status(self.broker)
        body["timeline"] = self.timeline.started_ms
        body["events"] = self.timeline.since(since)
        return web.json_response(body)

    async def start(self, host: str, port: int, any_port_if_taken: bool = False) -> tuple[str, int]:
        """Serve on ``host:port``; with ``any_port_if_taken`` (the default port, not one the
        operator chose) a port in use is replaced by a free one, with a warning. Returns the address
        it serves on."""
        self.runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self.runner.setup()
        try:
            site = web.TCPSite(self.runner, host, port, reuse_address=True)
            await site.start()
        except OSError as exc:
            if not any_port_if_taken:
                await self.close()
                raise
            site = web.TCPSite(self.runner, host, 0, reuse_address=True)
            await site.start()
            log.warning("Port %d for metrics is taken (%s); serving them on port %d instead", port,
                        exc.strerror or exc, self.runner.addresses[0][1])
        host, port = self.runner.addresses[0][:2]
        self.address = (host, port)
        return self.address

    async def close(self) -> None:
        self.gc.close()
        self.timeline.close()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
