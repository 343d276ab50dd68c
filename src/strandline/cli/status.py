"""``strandline cluster status``: brokers, the controller and partitions with a problem."""

from __future__ import annotations

import argparse

from strandline.console.discovery import read_cluster
from typing import Any


def problems(view: dict[str, Any]) -> list[str]:
    """What makes the cluster unhealthy, one phrase each (empty: healthy)."""
    s = view["summary"]
    found = []
    silent = [b["id"] for b in view["brokers"] if not (b["registered"] and b["reachable"])]
    if silent:
        found.append(f"broker(s) {', '.join(map(str, silent))} not registered or not answering")
    if view["controller"] is None:
        found.append("no controller")
    for key, words in (("offline", "offline"), ("under_min_isr", "under min.insync.replicas"),
                       ("under_replicated", "under-replicated"), ("leader_not_answering", "led by a broker not answering")):
        if s[key]:
            names = [f"{p['topic']}-{p['partition']}" for p in view["partitions"] if p[key]]
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            found.append(f"{s[key]} partition(s) {words} ({shown})")
    return found


def run(args: argparse.Namespace) -> int:
    view = read_cluster(args.bootstrap_server)
    s = view["summary"]
    print(f"Brokers: {s['registered']} registered, {s['reachable']} answering; controller "
          f"{view['controller'] if view['controller'] is not None else 'none'}")
    for b in view["brokers"]:
        state = "up" if b["registered"] and b["reachable"] else \
            "registered, not answering" if b["registered"] else "not registered"
        role = " (controller)" if b["controller"] else ""
        print(f"  {b['id']}\t{b['address'] or '-'}\t{state}{role}")
    print(f"Partitions: {s['partitions']} in {s['topics']} topics; {s['under_replicated']} under-replicated, "
          f"{s['under_min_isr']} under min.insync.replicas, {s['offline']} offline")
    found = problems(view)
    if found:
        print("Unhealthy: " + "; ".join(found))
        return 1
    print("Healthy")
    return 0
