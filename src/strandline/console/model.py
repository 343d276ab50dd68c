"""The console's picture of the cluster, merged from every broker's ``/status``.

Each broker knows part of the truth: a leader knows its partition's ISR, high watermark and each
follower's log end offset; a follower knows its own log; the controller's metadata names every
partition's leader and ISR; a group's coordinator knows its committed offsets. :func:`cluster_view`
puts them together: per partition, each replica's role, log end offset, high watermark, lag
behind the leader and ISR membership, and whether the partition is under-replicated, under
min.insync.replicas or offline; per group, the lag of each committed offset behind the
partition's high watermark; and the brokers' recent events, merged in time order.
Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``) are marked, and counted
apart, so that a page can fold them.

:class:`History` keeps what the console samples over the last minutes, for its charts: each
topic's bytes in and out per second (from the brokers' ``/metrics`` counters) and each
partition's high watermark and replicas' log end offsets (from their ``/status``).

Pure: statuses and samples in, JSON-ready dicts out.
"""

from __future__ import annotations

import collections
from typing import Any, Iterable

EVENTS_SHOWN = 200
#: Kafka's internal topics (Topic.INTERNAL_TOPICS)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
#: what a partition's problem flags are
PROBLEMS = ("offline", "under_replicated", "under_min_isr", "leader_not_answering")


def cluster_view(statuses: dict[int, dict[str, Any] | None], addresses: dict[int, str] | None = None,
                 events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
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

    leaders: dict[tuple[str, int], dict[str, Any]] = {}
    own: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for b, s in answered.items():
        for r in s.get("replicas", []):
            key = (r["topic"], r["partition"])
            own.setdefault(key, {})[b] = r
            if r["role"] == "leader" and b in live:
                current = leaders.get(key)
                if current is None or r["leader_epoch"] > current["leader_epoch"]:
                    leaders[key] = {**r, "broker": b}

    partitions = []
    for name, topic in sorted((reference or {}).get("topics", {}).items(),
                              key=lambda kv: (kv[0] in INTERNAL_TOPICS, kv[0])):
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
                "topic": name, "partition": index, "internal": name in INTERNAL_TOPICS, "leader": leader if not offline else -1,
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

    topics: dict[str, dict[str, Any]] = {}
    for p in partitions:
        t = topics.setdefault(p["topic"], {"topic": p["topic"], "internal": p["internal"], "partitions": 0,
                                           **{k: 0 for k in PROBLEMS}})
        t["partitions"] += 1
        for k in PROBLEMS:
            t[k] += bool(p[k])

    if events is None:
        events = [e for s in answered.values() for e in s.get("events", [])]
    events = sorted(events, key=lambda e: (e["time_ms"], e["broker"], e["seq"]))[-EVENTS_SHOWN:]
    return {
        "controller": controller_id,
        "brokers": brokers,
        "partitions": partitions,
        "groups": groups,
        "events": events,
        # user topics first, then the internal ones
        "topics": sorted(topics.values(), key=lambda t: (t["internal"], t["topic"])),
        "summary": {
            "brokers": len(known), "registered": len(live), "reachable": len(answered),
            "topics": len(topics), "partitions": len(partitions),
            "internal_topics": sum(t["internal"] for t in topics.values()),
            "internal_partitions": sum(p["internal"] for p in partitions),
            "under_replicated": sum(p["under_replicated"] for p in partitions),
            "under_min_isr": sum(p["under_min_isr"] for p in partitions),
            "offline": sum(p["offline"] for p in partitions),
            "leader_not_answering": sum(p["leader_not_answering"] for p in partitions),
        },
    }


# ---------------------------------------------------------------------------- history, for the charts

#: the counters of Kafka's BrokerTopicMetrics the charts show, by their series' name
TOPIC_COUNTERS = {"kafka_server_brokertopicmetrics_bytesin": "in", "kafka_server_brokertopicmetrics_bytesout": "out"}
SAMPLES_KEPT = 600          # 10 minutes at one sample a second
PARTITIONS_CHARTED = 500    # partitions whose history is kept (user topics first)
MARK_KINDS = frozenset({"leader", "isr_shrink", "isr_expand", "offline", "unclean"})


def topic_byte_counters(families: Iterable[Any]) -> dict[str, dict[str, float]]:
    """topic -> {"in": bytes, "out": bytes} from one broker's metric families (prometheus_client's
    parsed ``/metrics``, which names a counter's family without its ``_total``); the broker-wide
    samples (no topic label) are left out."""
    found: dict[str, dict[str, float]] = {}
    for family in families:
        series = TOPIC_COUNTERS.get(family.name)
        if series is None:
            continue
        for sample in family.samples:
            topic = sample.labels.get("topic")
            if topic is not None and sample.name.endswith("_total"):
                found.setdefault(topic, {"in": 0.0, "out": 0.0})[series] = sample.value
    return found


#: one round of polls: (time, each topic's "in" and "out" bytes per second, each charted partition's
#: (high watermark, log end offset by broker))
_Round = tuple[float, dict[str, dict[str, float]], dict[tuple[str, int], tuple[int, dict[int, int]]]]

class History:
    """The console's samples over the last ``kept`` rounds of polls.

    Each round (:meth:`add`) brings its time (seconds), each answering broker's byte counters per
    topic (:func:`topic_byte_counters`) and the merged view (:func:`cluster_view`). A topic's rate
    is the growth of its counters, summed over brokers, over the time since the broker's previous
    sample; a counter that went down is a restarted broker's, counted from zero, as Prometheus'
    ``rate`` does. A partition's samples are its high watermark and its replicas' log end offsets."""

    def __init__(self, kept: int = SAMPLES_KEPT, partitions_kept: int = PARTITIONS_CHARTED) -> None:
        self.kept = kept
        self.partitions_kept = partitions_kept
        self.rounds: collections.deque[_Round] = collections.deque(maxlen=kept)
        self._last: dict[int, tuple[float, dict[str, dict[str, float]]]] = {}

    def add(self, t: float, counters: dict[int, dict[str, dict[str, float]] | None], view: dict[str, Any]) -> None:
        rates: dict[str, dict[str, float]] = {}
        for broker, now in counters.items():
            if now is None:
                continue
            before = self._last.get(broker)
            self._last[broker] = (t, now)
            if before is None or t <= before[0]:
                continue
            elapsed = t - before[0]
            for topic, values in now.items():
                rate = rates.setdefault(topic, {"in": 0.0, "out": 0.0})
                for series, value in values.items():
                    old = before[1].get(topic, {}).get(series, 0.0)
                    rate[series] += (value - old if value >= old else value) / elapsed
        for p in view["partitions"]:           # a topic with no traffic yet is charted at zero
            rates.setdefault(p["topic"], {"in": 0.0, "out": 0.0})
        partitions: dict[tuple[str, int], tuple[int, dict[int, int]]] = {}
        for p in view["partitions"][:self.partitions_kept]:
            partitions[(p["topic"], p["partition"])] = (
                p["high_watermark"], {r["broker"]: r["log_end_offset"] for r in p["replica_states"]})
        self.rounds.append((t, rates, partitions))

    def topics(self) -> dict[str, Any]:
        """Aligned series for a chart of every topic: ``{"times": [...], "topics": {name: {"in":
        [...], "out": [...]}}}``, rates in bytes per second, None where a round has no value; the
        first round (nothing to compare with) is left out."""
        rounds = [r for r in self.rounds if r[1]]
        names = sorted({name for _, rates, _ in rounds for name in rates}, key=lambda n: (n in INTERNAL_TOPICS, n))
        return {"times": [t for t, _, _ in rounds],
                "topics": {n: {s: [rates[n][s] if n in rates else None for _, rates, _ in rounds] for s in ("in", "out")}
                           for n in names}}

    def partition(self, topic: str, partition: int, events: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
        """One partition's aligned series: ``{"times", "high_watermark", "log_end_offsets": {broker:
        [...]}, "marks"}``; the marks are the events about it (leader changes, ISR shrinks and
        expansions, going offline) within the time the series cover, their time in seconds."""
        key = (topic, partition)
        rounds = [(t, parts[key]) for t, _, parts in self.rounds if key in parts]
        brokers = sorted({b for _, (_, leos) in rounds for b in leos})
        times = [t for t, _ in rounds]
        marks = []
        if times:
            marks = [{"time": e["time_ms"] / 1000.0, "kind": e["kind"], "broker": e["broker"], "message": e["message"]}
                     for e in events if e.get("topic") == topic and e.get("partition") == partition
                     and e["kind"] in MARK_KINDS and times[0] <= e["time_ms"] / 1000.0 <= times[-1] + 1.0]
        return {"topic": topic, "partition": partition, "times": times,
                "high_watermark": [hw for _, (hw, _) in rounds],
                "log_end_offsets": {str(b): [leos.get(b) for _, (_, leos) in rounds] for b in brokers},
                "marks": marks}
