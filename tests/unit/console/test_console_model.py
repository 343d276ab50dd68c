"""The console's merge of broker statuses (pure): replica states from the leader's view, problem
flags, group lag against the leader's high watermark, events in time order."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from strandline.console.model import History, cluster_view, topic_byte_counters

BROKERS = {str(b): {"host": "127.0.0.1", "port": 9091 + b, "rack": None} for b in (1, 2, 3)}


def topics(leader: int, isr: list[int]) -> dict:
    return {"t": {"partitions": {"0": {"replicas": [1, 2, 3], "leader": leader, "isr": isr}}},
            "solo": {"partitions": {"0": {"replicas": [3], "leader": 3, "isr": [3]}}}}


def replica(topic: str, role: str, leo: int, hw: int, **extra) -> dict:
    return {"topic": topic, "partition": 0, "leader": 1, "leader_epoch": 4, "role": role, "replicas": [1, 2, 3],
            "log_start_offset": 0, "log_end_offset": leo, "high_watermark": hw, "size": leo * 10, **extra}


def status(broker_id: int, replicas: list[dict], brokers=BROKERS, controller=False, groups=(), events=()) -> dict:
    return {"broker_id": broker_id, "controller_id": 1, "is_controller": controller, "brokers": brokers,
            "topics": topics(1, [1, 2]), "replicas": replicas, "groups": list(groups), "events": list(events)}


def test_replicas_lag_and_flags_come_from_the_leaders_view():
    leader = replica("t", "leader", 100, 90, isr=[1, 2], min_insync_replicas=3,
                     followers={"2": {"log_end_offset": 90, "last_caught_up_ms": 0},
                                "3": {"log_end_offset": 40, "last_caught_up_ms": 0}})
    group = {"group": "g", "state": "Stable", "generation": 3, "members": 1, "protocol": "range",
             "offsets": [{"topic": "t", "partition": 0, "offset": 70}]}
    statuses = {
        1: status(1, [leader], controller=True, groups=[group],
                  events=[{"seq": 1, "time_ms": 20, "broker": 1, "kind": "isr_shrink", "level": "warning",
                           "message": "m", "topic": "t", "partition": 0}]),
        2: status(2, [replica("t", "follower", 95, 90)],
                  events=[{"seq": 1, "time_ms": 10, "broker": 2, "kind": "leader", "level": "info",
                           "message": "m", "topic": None, "partition": None}]),
        3: None,                                    # killed: registered, not answering
    }
    view = cluster_view(statuses)
    t0 = next(p for p in view["partitions"] if p["topic"] == "t")
    assert t0["leader"] == 1 and t0["isr"] == [1, 2] and t0["high_watermark"] == 90
    assert t0["under_replicated"] and t0["under_min_isr"] and not t0["offline"]
    states = {r["broker"]: r for r in t0["replica_states"]}
    assert states[2]["log_end_offset"] == 90 and states[2]["lag"] == 10 and states[2]["in_isr"]
    assert states[3]["log_end_offset"] == 40 and states[3]["lag"] == 60 and not states[3]["in_isr"]
    assert not states[3]["answering"] and states[2]["high_watermark"] == 90
    solo = next(p for p in view["partitions"] if p["topic"] == "solo")
    assert solo["leader_not_answering"] and not solo["offline"]
    assert view["summary"] == {"brokers": 3, "registered": 3, "reachable": 2, "topics": 2, "partitions": 2,
                               "under_replicated": 1, "under_min_isr": 1, "offline": 0, "leader_not_answering": 1,
                               "internal_topics": 0, "internal_partitions": 0}
    [g] = view["groups"]
    assert g["coordinator"] == 1 and g["lag"] == 20 and g["offsets"][0]["end_offset"] == 90
    assert [e["broker"] for e in view["events"]] == [2, 1]            # time order across brokers
    assert view["controller"] == 1 and [b["reachable"] for b in view["brokers"]] == [True, True, False]


def test_a_partition_whose_leader_is_no_longer_registered_is_offline():
    brokers = {k: v for k, v in BROKERS.items() if k != "3"}
    statuses = {1: status(1, [], brokers=brokers, controller=True), 2: status(2, [], brokers=brokers), 3: None}
    statuses[1]["topics"]["solo"]["partitions"]["0"]["leader"] = -1
    view = cluster_view(statuses)
    solo = next(p for p in view["partitions"] if p["topic"] == "solo")
    assert solo["offline"] and solo["leader"] == -1 and not solo["under_replicated"]
    assert solo["replica_states"][0]["role"] == "offline"
    assert view["summary"]["offline"] == 1 and view["summary"]["registered"] == 2


def internal_statuses(offsets_isr: list[int]) -> dict:
    """A cluster of a user topic 'zeta' and 50 partitions of __consumer_offsets whose ISR is
    ``offsets_isr``."""
    topic_map = {"zeta": {"partitions": {"0": {"replicas": [1], "leader": 1, "isr": [1]}}},
                 "__consumer_offsets": {"partitions": {str(i): {"replicas": [1, 2], "leader": 1, "isr": offsets_isr}
                                                       for i in range(50)}}}
    replicas = [{**replica("zeta", "leader", 5, 5, isr=[1]), "replicas": [1]}]
    replicas += [{**replica("__consumer_offsets", "leader", 0, 0, isr=offsets_isr), "partition": i, "replicas": [1, 2]}
                 for i in range(50)]
    st = {**status(1, replicas, controller=True), "topics": topic_map}
    return {1: st, 2: {**status(2, []), "topics": topic_map}}


def test_internal_topics_come_last_marked_and_counted_apart_also_when_unhealthy():
    view = cluster_view(internal_statuses([1]))           # every __consumer_offsets partition under-replicated
    assert view["partitions"][0]["topic"] == "zeta" and not view["partitions"][0]["internal"]
    assert all(p["internal"] for p in view["partitions"][1:]) and len(view["partitions"]) == 51
    assert view["summary"]["internal_topics"] == 1 and view["summary"]["internal_partitions"] == 50
    assert [t["topic"] for t in view["topics"]] == ["zeta", "__consumer_offsets"]
    offsets = view["topics"][1]
    assert offsets == {"topic": "__consumer_offsets", "internal": True, "partitions": 50, "offline": 0,
                       "under_replicated": 50, "under_min_isr": 0, "leader_not_answering": 0}
    healthy = cluster_view(internal_statuses([1, 2]))
    assert healthy["topics"][1]["under_replicated"] == 0


METRICS = """# HELP kafka_server_brokertopicmetrics_bytesin_total Bytes appended from producers.
# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total {total}
kafka_server_brokertopicmetrics_bytesin_total{{topic="a"}} {a_in}
# HELP kafka_server_brokertopicmetrics_bytesout_total Bytes sent to consumers.
# TYPE kafka_server_brokertopicmetrics_bytesout_total counter
kafka_server_brokertopicmetrics_bytesout_total{{topic="a"}} {a_out}
"""


def counters(a_in: float, a_out: float) -> dict:
    return topic_byte_counters(text_string_to_metric_families(METRICS.format(total=a_in, a_in=a_in, a_out=a_out)))


def test_topic_byte_rates_sum_brokers_and_count_a_restarted_brokers_counter_from_zero():
    assert counters(100, 7) == {"a": {"in": 100.0, "out": 7.0}}      # the broker-wide sample is left out
    view = cluster_view(internal_statuses([1, 2]))
    history = History(kept=10)
    history.add(10.0, {1: counters(100, 0), 2: counters(50, 0)}, view)
    history.add(12.0, {1: counters(300, 40), 2: counters(150, 0)}, view)
    history.add(13.0, {1: counters(20, 40), 2: None}, view)            # 1 restarted, 2 not answering
    charts = history.topics()
    assert charts["times"] == [10.0, 12.0, 13.0]
    assert charts["topics"]["a"]["in"] == [None, 150.0, 20.0] and charts["topics"]["a"]["out"] == [None, 20.0, 0.0]
    assert charts["topics"]["zeta"]["in"] == [0.0, 0.0, 0.0]          # known, no traffic: zero
    assert list(charts["topics"])[-1] == "__consumer_offsets"


def test_a_partitions_history_has_each_replicas_leo_its_hw_and_its_events_as_marks():
    history = History(kept=3)
    base = internal_statuses([1, 2])
    for t, leo in ((1.0, 5), (2.0, 8), (3.0, 9), (4.0, 12)):
        statuses = {b: dict(s) for b, s in base.items()}
        statuses[1]["replicas"] = [{**replica("zeta", "leader", leo, leo - 1, isr=[1]), "replicas": [1]}]
        history.add(t, {}, cluster_view(statuses))
    events = [{"seq": 1, "time_ms": 2500, "broker": 1, "kind": "isr_shrink", "level": "warning", "message": "m",
               "topic": "zeta", "partition": 0},
              {"seq": 2, "time_ms": 2600, "broker": 1, "kind": "isr_shrink", "level": "warning", "message": "m",
               "topic": "zeta", "partition": 1},                            # another partition
              {"seq": 3, "time_ms": 500, "broker": 1, "kind": "leader", "level": "info", "message": "m",
               "topic": "zeta", "partition": 0}]                            # before the kept samples
    chart = history.partition("zeta", 0, events)
    assert chart["times"] == [2.0, 3.0, 4.0]                                 # only the last 3 kept
    assert chart["log_end_offsets"] == {"1": [8, 9, 12]} and chart["high_watermark"] == [7, 8, 11]
    assert [(m["time"], m["kind"]) for m in chart["marks"]] == [(2.5, "isr_shrink")]
    assert history.partition("nothere", 0)["times"] == []


def test_the_byte_counters_of_a_brokers_metrics_text_as_the_broker_serves_them():
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import Metric

    from strandline.console.server import byte_counters

    class Counters:
        def collect(self):
            for name, value in (("bytesin", 300), ("bytesout", 70), ("messagesin", 3)):
                metric = Metric(f"kafka_server_brokertopicmetrics_{name}", "help", "counter")
                metric.add_sample(f"kafka_server_brokertopicmetrics_{name}_total", {}, value * 2)
                metric.add_sample(f"kafka_server_brokertopicmetrics_{name}_total", {"topic": "t"}, value)
                yield metric

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Counters())
    assert byte_counters(generate_latest(registry).decode()) == {"t": {"in": 300.0, "out": 70.0}}


def test_keys_and_values_are_shown_as_text_or_hex_and_cut():
    from strandline.console.records import SHOWN_BYTES, show_bytes

    assert show_bytes(None) is None
    assert show_bytes(b"caf\xc3\xa9") == {"text": "café", "size": 5, "truncated": False}
    assert show_bytes(b"\x00\xff") == {"hex": "00ff", "size": 2, "truncated": False}
    assert show_bytes(b"bell\x07") == {"hex": "62656c6c07", "size": 5, "truncated": False}   # not printable
    long = "a" + "é" * SHOWN_BYTES            # the cut falls inside a character: still text
    shown = show_bytes(long.encode())
    assert shown["truncated"] and shown["size"] == 1 + 2 * SHOWN_BYTES
    assert shown["text"] == "a" + "é" * (SHOWN_BYTES // 2 - 1)
