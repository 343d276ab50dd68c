"""The picture of a lab run: ``timeline.png`` and a self-contained ``timeline.html``.

Per partition, two panels over the run's time (seconds since the workload started):

* **roles**: one lane per replica, coloured by what that broker says it is (leader, follower in
  the ISR, follower out of the ISR) or by why it cannot say (paused, down, unreachable); where
  two brokers say they lead at once (a split brain) their lanes are outlined over that stretch
  of time and the band above the lanes names them;
* **offsets**: each replica's log end offset, the leader's high watermark (and a follower's, as it
  checkpointed it), and every acknowledged write that was lost, marked where and when it was
  acknowledged.

The offsets' legend stands right of the panels, off the data. Fault windows are shaded across
both panels and named below them, after the colours of the roles drawn (only those). The HTML
page holds the figure as inline SVG plus the verdict, the faults and the first lost writes: it
needs no network.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

import html
import io
import math
from pathlib import Path

ROLE_COLOURS = {
    "leader": "#2b8a3e", "isr": "#74c0fc", "out-of-isr": "#ced4da",
    "paused": "#f59f00", "down": "#c92a2a", "unreachable": "#e599f7",
}
FAULT_COLOURS = ["#ffe066", "#ffc9c9", "#d0bfff", "#99e9f2", "#b2f2bb"]
SPLIT_BRAIN_COLOUR = "#e03131"
SPLIT_BRAIN_GID = "split-brain"
SAMPLE_MS = 200          # how long a broker's last sampled view is drawn when none follows


if TYPE_CHECKING:       # matplotlib is imported when a figure is drawn
    from matplotlib.figure import Figure

def _role(view: dict[str, Any], isr_of_leader: set[int]) -> str:
    if view["state"] != "up":
        return str(view["state"])
    if view["leader"] == view["broker"]:
        return "leader"
    return "isr" if view["broker"] in isr_of_leader else "out-of-isr"


def split_brains(views: list[dict[str, Any]], partition: int = 0) -> list[tuple[float, float, tuple[int, ...]]]:
    """``[(start_ms, end_ms, brokers)]``: the stretches of time during which two or more brokers
    each said, in their latest sampled view, that they led ``partition``."""
    pviews = sorted((v for v in views if v["partition"] == partition), key=lambda v: v["time_ms"])
    if not pviews:
        return []
    claims: dict[int, bool] = {}
    out: list[tuple[float, float, tuple[int, ...]]] = []
    current: tuple[int, ...] = ()
    since = 0.0
    for v in pviews:
        claims[v["broker"]] = v["state"] == "up" and v["leader"] == v["broker"]
        leaders = tuple(sorted(b for b, leads in claims.items() if leads))
        now = leaders if len(leaders) > 1 else ()
        if now != current:
            if current:
                out.append((since, v["time_ms"], current))
            current, since = now, v["time_ms"]
    if current:
        out.append((since, pviews[-1]["time_ms"] + SAMPLE_MS, current))
    return out


def _names(brokers: tuple[int, ...]) -> str:
    return ", ".join(str(b) for b in brokers[:-1]) + f" and {brokers[-1]}"


def figure(info: dict[str, Any], views: list[dict[str, Any]], result: dict[str, Any], verdict_line: str) -> Figure:
    """The run's figure (a matplotlib Figure; the caller closes it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = info.get("started_ms") or (views[0]["time_ms"] if views else 0.0)
    partitions = int(info.get("partitions", 1))
    brokers = sorted({v["broker"] for v in views}) or [1, 2, 3]
    faults = [f for f in info.get("faults", []) if f.get("start_ms") is not None]
    width = 14.0
    fig, axes = plt.subplots(2 * partitions, 1, figsize=(width, 4.6 * partitions), sharex=True,
                             gridspec_kw={"height_ratios": [1, 1.6] * partitions}, squeeze=False)
    end = max((v["time_ms"] for v in views), default=t0) - t0
    drawn_roles: set[str] = set()
    for p in range(partitions):
        lanes, offsets = axes[2 * p][0], axes[2 * p + 1][0]
        pviews = [v for v in views if v["partition"] == p]
        # the ISR as the broker that says it leads knows it, over time
        leader_isr: set[int] = set()
        by_broker: dict[int, list[dict[str, Any]]] = {b: [] for b in brokers}
        for v in pviews:
            if v["state"] == "up" and v["leader"] == v["broker"] and v["isr"]:
                leader_isr = {int(x) for x in v["isr"].split(",")}
            v = dict(v, role=_role(v, leader_isr))
            by_broker.setdefault(v["broker"], []).append(v)
        for row, b in enumerate(brokers):
            seq = by_broker.get(b, [])
            for a, nxt in zip(seq, seq[1:] + [None]):
                start = (a["time_ms"] - t0) / 1000
                stop = ((nxt["time_ms"] if nxt else a["time_ms"] + SAMPLE_MS) - t0) / 1000
                lanes.broken_barh([(start, stop - start)], (row - 0.4, 0.8), color=ROLE_COLOURS[a["role"]])
                drawn_roles.add(a["role"])
            xs = [(v["time_ms"] - t0) / 1000 for v in seq if v["leo"] >= 0]
            ys = [v["leo"] for v in seq if v["leo"] >= 0]
            [line] = offsets.step(xs, ys, where="post", linewidth=1.2, label=f"LEO of broker {b}")
            fhw = [((v["time_ms"] - t0) / 1000, v["hw"]) for v in seq if v["hw"] >= 0 and v["leader"] != b]
            if fhw:
                offsets.step([x for x, _ in fhw], [y for _, y in fhw], where="post", linewidth=0.8,
                             linestyle=":", color=line.get_color(), label=f"HW of broker {b} as follower")
        hw = [((v["time_ms"] - t0) / 1000, v["hw"]) for v in pviews if v["hw"] >= 0 and v["leader"] == v["broker"]]
        if hw:
            offsets.step([x for x, _ in hw], [y for _, y in hw], where="post", color="black", linewidth=1.6,
                         linestyle="--", label="HW (leader)")
        lost = [r for r in result.get("lost_records", []) if r["partition"] == p]
        if lost:
            offsets.scatter([(r["acked_ms"] - t0) / 1000 for r in lost], [r["offset"] for r in lost], marker="x",
                            color="#e03131", s=14, zorder=5,
                            label=f"lost acknowledged write ({result['lost']} in all)" if p == 0 else None)
        # the lanes, and above them a band kept free of bars for naming a split brain
        band = len(brokers) - 0.4
        lanes.set_yticks(range(len(brokers)), [f"broker {b}" for b in brokers])
        lanes.set_ylim(-0.6, band + 0.9)
        lanes.axhline(band + 0.1, color="#868e96", linewidth=0.5)
        for start_ms, stop_ms, both in split_brains(views, p):
            start, stop = (start_ms - t0) / 1000, (stop_ms - t0) / 1000
            for b in both:                  # the leaders' own lanes, outlined over that stretch
                lanes.broken_barh([(start, stop - start)], (brokers.index(b) - 0.45, 0.9), facecolor="none",
                                  edgecolor=SPLIT_BRAIN_COLOUR, linewidth=1.5, zorder=3)
            lanes.plot([start, stop], [band + 0.3] * 2, color=SPLIT_BRAIN_COLOUR, linewidth=3,
                       solid_capstyle="butt", gid=SPLIT_BRAIN_GID)
            lanes.text((start + stop) / 2, band + 0.45, f"split brain: brokers {_names(both)} both lead",
                       ha="center", va="bottom", fontsize=8, color=SPLIT_BRAIN_COLOUR, gid=SPLIT_BRAIN_GID)
        system = "" if info.get("cluster", "strandline") == "strandline" else f" on {info['cluster']}"
        lanes.set_title(f"{info['scenario']}{system} - partition {info.get('topic', 'lab')}-{p}", loc="left",
                        fontsize=10)
        offsets.set_ylabel("offset")
        offsets.grid(alpha=0.3)
        for i, f in enumerate(faults):
            start = (f["start_ms"] - t0) / 1000
            stop = ((f["end_ms"] or (t0 + end * 1000)) - t0) / 1000
            for ax in (lanes, offsets):
                ax.axvspan(start, stop, color=FAULT_COLOURS[i % len(FAULT_COLOURS)], alpha=0.35, zorder=0)
        offsets.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=7, frameon=False)
    role_legend = [Patch(color=c, label=k) for k, c in ROLE_COLOURS.items() if k in drawn_roles]
    fault_legend = [Patch(color=FAULT_COLOURS[i % len(FAULT_COLOURS)], alpha=0.35, label=f["label"])
                    for i, f in enumerate(faults)]
    axes[-1][0].set_xlabel("seconds since the workload started")
    # below the panels, in inches from the bottom: the verdict, one line per fault, the roles' colours
    verdict_lines = max(1, math.ceil(len(verdict_line) / 190))
    verdict_in = 0.1 + 0.17 * verdict_lines
    faults_in = 0.2 * len(fault_legend)
    roles_in = 0.3 if role_legend else 0.0
    below = verdict_in + faults_in + roles_in
    height = fig.get_figheight() + below
    fig.set_figheight(height)
    fig.text(0.5, 0.1 / height, verdict_line, ha="center", va="bottom", fontsize=8, wrap=True)
    if fault_legend:
        fig.legend(handles=fault_legend, loc="lower center", ncol=1, fontsize=7, frameon=False, borderaxespad=0,
                   bbox_to_anchor=(0.5, (verdict_in + 0.05) / height))
    if role_legend:
        fig.legend(handles=role_legend, loc="lower center", ncol=len(role_legend), fontsize=7, frameon=False,
                   borderaxespad=0, bbox_to_anchor=(0.5, (verdict_in + faults_in + 0.05) / height))
    fig.tight_layout(rect=(0, (below + 0.05) / height, 0.82, 1))
    return fig


def draw(run_dir: Path, info: dict[str, Any], views: list[dict[str, Any]], result: dict[str, Any], verdict_line: str) -> tuple[Path, Path]:
    """Write timeline.png and timeline.html into ``run_dir``; returns both paths."""
    import matplotlib.pyplot as plt

    fig = figure(info, views, result, verdict_line)
    try:
        png = run_dir / "timeline.png"
        fig.savefig(png, dpi=110)
        svg = io.StringIO()
        fig.savefig(svg, format="svg")
    finally:
        plt.close(fig)
    page = run_dir / "timeline.html"
    page.write_text(_page(info, result, verdict_line, svg.getvalue()))
    return png, page


def _page(info: dict[str, Any], result: dict[str, Any], verdict_line: str, svg: str) -> str:
    svg = svg[svg.index("<svg"):]                    # drop the XML prologue: inline in HTML
    faults = "".join(f"<li>{html.escape(f['label'])}</li>" for f in info.get("faults", []))
    lost_rows = "".join(
        f"<tr><td>{html.escape(r['value'])}</td><td>{r['partition']}</td><td>{r['offset']}</td></tr>"
        for r in result.get("lost_records", [])[:200])
    settings = ", ".join(f"{k}={info[k]}" for k in ("acks", "enable.idempotence", "min.insync.replicas",
                                                     "unclean.leader.election.enable") if k in info)
    counts = ", ".join(f"{k}: {result.get(k, 0)}" for k in ("lost", "duplicated", "reordered", "unexpected",
                                                            "divergent_batches"))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(info['scenario'])} - Strandline lab</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1300px}} td,th{{padding:2px 8px;text-align:left}}
.verdict{{font-weight:bold}} svg{{max-width:100%;height:auto}}</style></head><body>
<h1>{html.escape(info['scenario'])}: {html.escape(info.get('summary', ''))}</h1>
<p class="verdict">{html.escape(verdict_line)}</p>
<p>{html.escape(settings)}; network: {html.escape(info.get('network', ''))}; seed {info.get('seed')}</p>
<p>{html.escape(counts)}; operations: {html.escape(str(result.get('ops', {})))}</p>
<h2>Faults</h2><ul>{faults or '<li>none</li>'}</ul>
{svg}
<h2>Lost acknowledged writes (first 200)</h2>
<table><tr><th>value</th><th>partition</th><th>offset when acknowledged</th></tr>{lost_rows}</table>
</body></html>
"""
