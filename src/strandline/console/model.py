"""The console's picture of the cluster, merged from every broker's ``/status``.

Each broker knows part of the truth: a leader knows its partition's ISR, high watermark and each
follower's log end offset; a follower knows its own log; the controller's metadata names every
partition's leader and ISR; a group's coordinator knows its committed offsets. :func:`cluster_view`
puts them together: per partition, each replica's role, log end offset, high watermark, lag
behind the leader and ISR membership, and whether the partition is under-replicated, under
min.insync.replicas or offline; per group, the lag of each committed offset behind the
partition's high watermark; and the brokers' recent events, merged in time order.

Pure: statuses in, a JSON-ready dict out.
"""

from __future__ import annotations

from typing import Any

EVENTS_SHOWN = 200


def cluster_view(statuses: dict[int, dict | None], addresses: dict[int, str] | None = None,
                 events: list[dict] | None = None) -> dict[str, Any]:
    """``statuses``: broker id -> its ``/status`` (None when it did not answer); ``events``: the
    brokers' events as collected so far (default: those in the statuses)."""
    answered = {b: s for b, s in statuses.items() if s is not None}
    controller_id = next((b for b, s in answered.items() if s.get("is_controller")), None)
    reference = answered.get(controller_id) if controller_id is not None else None
    if reference is None and answered:
        reference = answered[min(answered)]
    live = {int(b) for b in (reference or {}).get("brokers", {})}
    if controller_id is None and reference is not None and reference.get("controller_id") in live:
        controller_id = reference["controller_id"]      # registered, not answering: still in office
    known = sorted(set(statuses) | live)
    brokers = []
    for b in known:
        info = (reference or {}).get("brokers", {}).get(str(b), {})
        brokers.append({"id": b, "address": f"{info['host']}:{info['port']}" if info else None,
                        "metrics": (addresses or {}).get(b), "registered": b in live,
                        "reachable": b in answered, "controller": b == controller_id})

    leaders: dict[tuple[str, int], dict] = {}
    own: dict[tuple[str, int], dict[int, dict]] = {}
    for b, s in answered.items():
        for r in s.get("replicas", []):
            key = (r["topic"], r["partition"])
            own.setdefault(key, {})[b] = r
            if r["role"] == "leader" and b in live:
                current = leaders.get(key)
                if current is None or r["leader_epoch"] > current["leader_epoch"]:
                    leaders[key] = {**r, "broker": b}

    partitions = []
    for name, topic in sorted((reference or {}).get("topics", {}).items()):
        for index_text, meta in sorted(topic["partitions"].items(), key=lambda kv: int(kv[0])):
            index = int(index_text)
            key = (name, index)
            lead = leaders.get(key)
            leader = lead["broker"] if lead else meta["leader"]
            isr = lead["isr"] if lead else meta["isr"]
            replicas = meta["replicas"]
            min_isr = lead.get("min_insync_replicas") if lead else None
            leader_leo = lead["log_end_offset"] if lead else None
            rows = []
            for r in replicas:
                mine = own.get(key, {}).get(r)
                if lead and r == leader:
                    leo = lead["log_end_offset"]
                elif lead and str(r) in lead.get("followers", {}):
                    leo = lead["followers"][str(r)]["log_end_offset"]
                else:
                    leo = mine["log_end_offset"] if mine else None
                if leo is not None and leo < 0:
                    leo = mine["log_end_offset"] if mine else None
                rows.append({
                    "broker": r, "role": "leader" if r == leader else "follower" if r in live else "offline",
                    "answering": r in answered,
                    "log_end_offset": leo, "high_watermark": mine["high_watermark"] if mine else None,
                    "lag": max(leader_leo - leo, 0) if leader_leo is not None and leo is not None else None,
                    "in_isr": r in isr,
                })
            offline = leader < 0 or leader not in live
            partitions.append({
                "topic": name, "partition": index, "leader": leader if not offline else -1,
                "leader_epoch": lead["leader_epoch"] if lead else None, "isr": isr, "replicas": replicas,
                "high_watermark": lead["high_watermark"] if lead else None,
                "log_end_offset": leader_leo, "min_insync_replicas": min_isr, "replica_states": rows,
                "offline": offline, "under_replicated": not offline and len(isr) < len(replicas),
                "under_min_isr": not offline and min_isr is not None and len(isr) < min_isr,
                # registered but silent (killed, frozen): the controller acts once its session expires
                "leader_not_answering": not offline and leader not in answered,
                "cleaner": lead.get("cleaner") if lead else None,
            })

    high_watermarks = {(p["topic"], p["partition"]): p["high_watermark"] for p in partitions}
    groups = []
    for b, s in sorted(answered.items()):
        for g in s.get("groups", []):
            offsets = []
            for o in g["offsets"]:
                end = high_watermarks.get((o["topic"], o["partition"]))
                offsets.append({**o, "end_offset": end,
                                "lag": max(end - o["offset"], 0) if end is not None else None})
            groups.append({**g, "coordinator": b, "offsets": offsets,
                           "lag": sum(o["lag"] for o in offsets if o["lag"] is not None)})

    if events is None:
        events = [e for s in answered.values() for e in s.get("events", [])]
    events = sorted(events, key=lambda e: (e["time_ms"], e["broker"], e["seq"]))[-EVENTS_SHOWN:]
    return {
        "controller": controller_id,
        "brokers": brokers,
        "partitions": partitions,
        "groups": groups,
        "events": events,
        "summary": {
            "brokers": len(known), "registered": len(live), "reachable": len(answered),
            "topics": len({p["topic"] for p in partitions}), "partitions": len(partitions),
            "under_replicated": sum(p["under_replicated"] for p in partitions),
            "under_min_isr": sum(p["under_min_isr"] for p in partitions),
            "offline": sum(p["offline"] for p in partitions),
            "leader_not_answering": sum(p["leader_not_answering"] for p in partitions),
        },
    }
