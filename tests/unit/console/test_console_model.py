"""The console's merge of broker statuses (pure): replica states from the leader's view, problem
flags, group lag against the leader's high watermark, events in time order."""

from __future__ import annotations

from strandline.console.model import cluster_view

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
                               "under_replicated": 1, "under_min_isr": 1, "offline": 0, "leader_not_answering": 1}
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
