"""The console server without a cluster: the page, the JSON, the metrics, and the lab's runs
(only their timeline files are served)."""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp

from strandline.console.server import Console


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_console_serves_its_page_and_the_labs_runs_without_a_cluster(tmp_path):
    run = tmp_path / "SAFE-20261123-000"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"scenario": "SAFE", "summary": "acks=all, min ISR 2"}))
    (run / "timeline.html").write_text("<html>the timeline</html>")
    (run / "history.jsonl").write_text("secret")

    async def scenario() -> dict:
        console = Console(f"127.0.0.1:{closed_port()}", lab_dir=str(tmp_path), interval_s=0.05)
        url = await console.start("127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as http:
                async def get(path: str) -> tuple[int, str]:
                    async with http.get(url.rstrip("/") + path) as resp:
                        return resp.status, await resp.text()
                return {path: await get(path) for path in (
                    "/", "/static/console.js", "/api/cluster", "/metrics", f"/lab/{run.name}/timeline.html",
                    f"/lab/{run.name}/history.jsonl", "/lab/../timeline.html", "/static/vendor/uPlot.iife.min.js",
                    "/api/charts?topic=t&partition=0", "/api/records?partition=0",
                    "/api/records?topic=t&partition=x", "/api/records?topic=t&isolation=dirty")}
        finally:
            await console.close()

    answers = asyncio.run(scenario())
    assert answers["/"][0] == 200 and "<title>Strandline console</title>" in answers["/"][1]
    assert answers["/static/console.js"][0] == 200
    view = json.loads(answers["/api/cluster"][1])
    assert view["summary"]["brokers"] == 0 and view["polls"] >= 1          # no cluster: an empty picture
    assert view["lab_runs"] == [{"run": run.name, "scenario": "SAFE", "summary": "acks=all, min ISR 2",
                                 "verdict": None, "error": None, "timeline": f"/lab/{run.name}/timeline.html"}]
    assert "strandline_cluster_reachable 0.0" in answers["/metrics"][1]
    assert answers[f"/lab/{run.name}/timeline.html"] == (200, "<html>the timeline</html>")
    assert answers[f"/lab/{run.name}/history.jsonl"][0] == 404
    assert answers["/lab/../timeline.html"][0] == 404
    page = answers["/"][1]
    assert "/static/vendor/uPlot.iife.min.js" in page and "http" not in page.replace("http-equiv", "")  # offline
    assert answers["/static/vendor/uPlot.iife.min.js"][0] == 200
    charts = json.loads(answers["/api/charts?topic=t&partition=0"][1])
    assert charts["partition"]["times"] == [] and charts["topics"] == {"times": [], "topics": {}}
    assert answers["/api/records?partition=0"] == (400, "topic is required")
    assert answers["/api/records?topic=t&partition=x"] == (400, "partition must be an integer")
    assert answers["/api/records?topic=t&isolation=dirty"][0] == 400


def test_the_console_polls_a_slow_broker_less_often():
    """A broker of thousands of partitions takes long to build its status: the console rests
    POLL_BACKOFF times a round's duration after it, so that it does not keep the broker busy."""
    from aiohttp import web

    from strandline.console.server import MAX_REST, POLL_BACKOFF

    async def scenario() -> tuple[int, float, int]:
        served = 0

        async def slow_status(request: web.Request) -> web.Response:
            nonlocal served
            served += 1
            await asyncio.sleep(0.1)
            return web.json_response({"broker_id": 1, "brokers": {}, "topics": {}, "replicas": [], "groups": [],
                                      "timeline": 1, "events": []})

        app = web.Application()
        app.router.add_get("/status", slow_status)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        console = Console(f"127.0.0.1:{closed_port()}", interval_s=0.2, addresses={1: f"http://127.0.0.1:{port}"})
        await console.start("127.0.0.1", 0)
        try:
            await asyncio.sleep(1.0)
            return served, console.poll_interval_s, console.polls
        finally:
            await console.close()
            await runner.cleanup()

    served, interval, polls = asyncio.run(scenario())
    assert interval == min(POLL_BACKOFF * 0.1, MAX_REST * 0.2) == 2.0
    assert served == polls <= 2       # not 5 rounds at the configured 0.2 s
