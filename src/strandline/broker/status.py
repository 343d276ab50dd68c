"""One broker's view of the cluster as plain data, for the operator's console and tools.

:func:`status` reads what this broker holds: its replicas (role, leader epoch, log start and end
offsets, high watermark), on the partitions it leads the ISR and each follower's log end offset
as the leader last saw it (what no Kafka API returns), the brokers and controller its metadata
names, the consumer groups it coordinates with their committed offsets, and for each compacted
replica the log cleaner's state (last cleaned offset, dirty ratio). It is JSON-ready.
Pure: it only reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strandline.broker.broker import Broker


def status(broker: Broker) -> dict[str, Any]:
    md = broker.metadata
    controller = broker.controller
    replicas = []
    for (topic, index), p in sorted(broker.replica_manager.partitions.items()):
        entry: dict[str, Any] = {
            "topic": topic, "partition": index, "leader": p.leader_id, "leader_epoch": p.leader_epoch,
            "role": "leader" if p.is_leader else "follower", "replicas": list(p.replicas),
            "log_start_offset": p.log.log_start_offset, "log_end_offset": p.log.log_end_offset,
            "high_watermark": p.high_watermark, "size": p.log.size_in_bytes,
        }
        if p.log.config.compacts:
            entry["cleaner"] = broker.cleaner.log_state((topic, index), p.log, p.high_watermark)
        if p.is_leader:
            topic_md = md.topics.get(topic)
            entry["isr"] = list(p.isr)
            entry["min_insync_replicas"] = broker.config.topic_value(topic_md.configs if topic_md else {},
                                                                     "min.insync.replicas")
            entry["followers"] = {str(b): {"log_end_offset": s.log_end_offset,
                                           "last_caught_up_ms": s.last_caught_up_time_ms}
                                  for b, s in sorted(p.remote_replicas.items()) if b in p.replicas}
        replicas.append(entry)
    coordinator = broker.groups
    groups = []
    for group_id, g in sorted(coordinator.groups.items()):
        if not coordinator.owns(group_id):
            continue
        groups.append({"group": group_id, "state": g.state, "generation": g.generation,
                       "members": len(g.members), "protocol": g.protocol,
                       "offsets": [{"topic": t, "partition": i, "offset": o.offset}
                                   for (t, i), o in sorted(g.offsets.items())]})
    topics = {name: {"partitions": {str(i): {"replicas": list(r),
                                             "leader": t.states[i].leader if i in t.states else -1,
                                             "isr": list(t.states[i].isr) if i in t.states else []}
                                     for i, r in sorted(t.assignment.items())}}
              for name, t in sorted(md.topics.items())}
    cleaner = broker.cleaner
    cleaner_read, cleaner_written = cleaner.io_totals()
    return {
        "broker_id": broker.broker_id,
        "log_cleaner": {"enabled": cleaner.enabled, "passes": cleaner.passes, "aborted": cleaner.aborted,
                        "bytes_read": cleaner_read, "bytes_written": cleaner_written,
                        "records_removed": cleaner.totals.records_removed},
        "controller_id": md.controller_id,
        "is_controller": controller.is_active,
        "brokers": {str(b.id): {"host": b.host, "port": b.port, "rack": b.rack} for b in md.brokers.values()},
        "topics": topics,
        "replicas": replicas,
        "groups": groups,
    }
