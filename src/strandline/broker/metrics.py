"""What a broker reports to monitoring: Kafka's metrics, by the names Prometheus users know.

Kafka exposes its meters and gauges through JMX; dashboards read them through the Prometheus JMX
exporter, whose usual rules turn ``kafka.server:type=ReplicaManager,name=PartitionCount`` into
``kafka_server_replicamanager_partitioncount`` and a meter's count into a ``_total`` counter.
:func:`collect` reads the broker core's components and returns those families as plain data;
the shell (``runtime/monitoring.py``) serves them in Prometheus' text format. Values Kafka keeps
only on the active controller (offline partitions and the like) are 0 on the other brokers, as
in Kafka. Some families have no Kafka broker equivalent and keep the names of the tools that
provide them: ``kafka_consumergroup_current_offset`` and ``kafka_topic_partition_current_offset``
(kafka_exporter's: a group's committed offset at its coordinator, a partition's high watermark
at its leader; their difference is the group's lag), ``strandline_partition_*`` and
``strandline_log_cleaner_*``.

Pure: it only reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Sequence

from strandline.replication.topic_stats import COUNTERS

if TYPE_CHECKING:
    from strandline.broker.broker import Broker


class Family(NamedTuple):
    """One metric family: ``kind`` is ``gauge`` or ``counter`` (a counter's samples are named
    ``<name>_total``); each sample is (labels, value)."""

    name: str
    kind: str
    help: str
    samples: Sequence[tuple[dict[str, str], float]]


def _one(name: str, kind: str, help_text: str, value: float) -> Family:
    return Family(name, kind, help_text, [({}, value)])


def collect(broker: Broker) -> list[Family]:
    """Every family, read now from the broker's components."""
    return (_replica_manager(broker) + _controller(broker) + _fetch_sessions(broker) + _topic_metrics(broker)
            + _purgatories(broker) + _log_cleaner(broker)
            + _partitions(broker) + _groups(broker))


def _replica_manager(broker: Broker) -> list[Family]:
    rm = broker.replica_manager
    partitions = list(rm.partitions.values())
    leaders = [p for p in partitions if p.is_leader]
    under = at_min = under_min = 0
    for p in leaders:
        topic = broker.metadata.topics.get(p.topic)
        min_isr = broker.config.topic_value(topic.configs if topic else {}, "min.insync.replicas")
        under += len(p.isr) < len(p.replicas)
        under_min += len(p.isr) < min_isr
        at_min += len(p.isr) == min_isr
    isr = rm.isr_manager
    prefix = "kafka_server_replicamanager_"
    return [
        _one(prefix + "partitioncount", "gauge", "Partitions with a replica on this broker.", len(partitions)),
        _one(prefix + "leadercount", "gauge", "Partitions this broker leads.", len(leaders)),
        _one(prefix + "underreplicatedpartitions", "gauge",
             "Partitions this broker leads whose ISR is smaller than their replica set.", under),
        _one(prefix + "underminisrpartitioncount", "gauge",
             "Partitions this broker leads whose ISR is below min.insync.replicas.", under_min),
        _one(prefix + "atminisrpartitioncount", "gauge",
             "Partitions this broker leads whose ISR is exactly min.insync.replicas.", at_min),
        _one(prefix + "offlinereplicacount", "gauge", "Replicas in a log dir that failed.", 0),
        _one(prefix + "isrshrinks", "counter", "ISR shrinks of partitions this broker leads (written by it, "
             "or by the controller it proposed them to).", isr.isr_shrinks),
        _one(prefix + "isrexpands", "counter", "ISR expansions of partitions this broker leads (written by it, "
             "or by the controller it proposed them to).", isr.isr_expands),
        _one(prefix + "failedisrupdates", "counter",
             "ISR changes not taken: a write ZooKeeper refused (a conflicting version), or a proposal the "
             "controller refused (AlterIsr).", isr.failed_isr_updates),
    ]


def _fetch_sessions(broker: Broker) -> list[Family]:
    cache = broker.apis.fetch_sessions
    prefix = "kafka_server_fetchsessioncache_"
    return [
        _one(prefix + "numincrementalfetchsessions", "gauge", "Incremental fetch sessions this broker keeps (KIP-227).",
             len(cache.sessions)),
        _one(prefix + "numincrementalfetchpartitionscached", "gauge", "Partitions in those sessions.",
             cache.partitions_cached),
        _one(prefix + "incrementalfetchsessionevictions", "counter", "Sessions evicted to make room for another.",
             cache.evictions),
    ]


def _controller(broker: Broker) -> list[Family]:
    controller = broker.controller
    ctx = controller.ctx
    active = controller.is_active
    offline = imbalance = topics = partitions = 0
    if active and ctx is not None and ctx.ready:
        live = set(ctx.live_brokers)
        for topic, index in ctx.all_partitions():
            partitions += 1
            state = topic.states.get(index)
            leader = state.leader if state is not None else -1
            offline += leader < 0 or leader not in live
            imbalance += leader >= 0 and leader != topic.assignment[index][0]
        topics = len(ctx.topics)
    prefix = "kafka_controller_kafkacontroller_"
    stats = "kafka_controller_controllerstats_"
    return [
        _one(prefix + "activecontrollercount", "gauge", "1 on the active controller, else 0.", int(active)),
        _one(prefix + "offlinepartitionscount", "gauge", "Partitions without a live leader (controller only).",
             offline),
        _one(prefix + "preferredreplicaimbalancecount", "gauge",
             "Partitions not led by their preferred replica (controller only).", imbalance),
        _one(prefix + "globaltopiccount", "gauge", "Topics in the cluster (controller only).", topics),
        _one(prefix + "globalpartitioncount", "gauge", "Partitions in the cluster (controller only).", partitions),
        _one(stats + "leaderelections", "counter",
             "Partitions given a new leader by this broker as controller (the count of Kafka's "
             "LeaderElectionRateAndTimeMs counts election events instead).", controller.elections.leader_elections),
        _one(stats + "uncleanleaderelections", "counter",
             "Leaders written outside the last ISR by this broker as controller (UncleanLeaderElectionsPerSec).",
             controller.elections.unclean_leader_elections),
        _one(stats + "isrchanges", "counter",
             "ISR changes written by this broker as controller as their leaders proposed (AlterIsr, "
             "inter.broker.protocol.version 2.7+; Kafka's IsrChangeRateAndTimeMs counts the controller's "
             "ISR change events instead).", controller.alter_isrs.isr_changes_written),
    ]


_TOPIC_HELP = {
    "bytesin": "Bytes appended from producers.", "messagesin": "Records appended from producers.",
    "bytesout": "Bytes sent to consumers.", "replicationbytesin": "Bytes appended from leaders (as follower).",
    "replicationbytesout": "Bytes sent to followers (as leader).",
    "totalproducerequests": "Partition batches of Produce requests.",
    "failedproducerequests": "Partition batches of Produce requests refused.",
    "totalfetchrequests": "Partitions of Fetch answers.", "failedfetchrequests": "Partitions of Fetch answers with an error.",
    "bytesrejected": "Bytes refused for their size.",
}


def _topic_metrics(broker: Broker) -> list[Family]:
    """Kafka's BrokerTopicMetrics: one sample per topic plus the broker-wide one (no topic label)."""
    stats = broker.replica_manager.topic_stats
    families = []
    for key in COUNTERS:
        samples: list[tuple[dict[str, str], float]] = [({}, stats.total[key])]
        samples += [({"topic": topic}, counts[key]) for topic, counts in sorted(stats.topics.items())]
        families.append(Family("kafka_server_brokertopicmetrics_" + key, "counter", _TOPIC_HELP[key], samples))
    return families


def _log_cleaner(broker: Broker) -> list[Family]:
    """The log cleaner's work; Kafka has no meter of these, so they keep Strandline's prefix."""
    cleaner = broker.cleaner
    totals = cleaner.totals
    read, written = cleaner.io_totals()
    return [
        _one("strandline_log_cleaner_bytes_read", "counter", "Bytes the log cleaner read.", read),
        _one("strandline_log_cleaner_bytes_written", "counter", "Bytes the log cleaner wrote into cleaned segments.",
             written),
        _one("strandline_log_cleaner_records_removed", "counter",
             "Records the log cleaner removed (superseded, or tombstones past delete.retention.ms).",
             totals.records_removed),
        _one("strandline_log_cleaner_passes", "counter", "Cleaning passes completed.", cleaner.passes),
    ]


def _purgatories(broker: Broker) -> list[Family]:
    rm = broker.replica_manager
    sizes = {"Produce": rm.writes.purgatory, "Fetch": rm.fetch_purgatory, "DeleteRecords": rm.log_admin.purgatory}
    return [Family("kafka_server_delayedoperationpurgatory_purgatorysize", "gauge",
                   "Requests waiting in a purgatory (acks=all, long-poll fetches, DeleteRecords).",
                   [({"delayedoperation": name}, len(p)) for name, p in sizes.items()])]


def _partitions(broker: Broker) -> list[Family]:
    """Per local replica: its log (Kafka's ``kafka.log:type=Log``), and on the leader the
    partition's replication state (``kafka.cluster:type=Partition``) and high watermark."""
    log_end, log_start, size, segments, hw, role = [], [], [], [], [], []
    under, isr_count, replicas, follower_lag = [], [], [], []
    for (topic, index), p in sorted(broker.replica_manager.partitions.items()):
        labels = {"topic": topic, "partition": str(index)}
        log = p.log
        log_end.append((labels, log.log_end_offset))
        log_start.append((labels, log.log_start_offset))
        size.append((labels, log.size_in_bytes))
        segments.append((labels, len(log.segments)))
        hw.append((labels, p.high_watermark))
        role.append((labels, 1 if p.is_leader else 0))
        if p.is_leader:
            under.append((labels, int(len(p.isr) < len(p.replicas))))
            isr_count.append((labels, len(p.isr)))
            replicas.append((labels, len(p.replicas)))
            for broker_id, state in sorted(p.remote_replicas.items()):
                if broker_id in p.replicas:
                    follower_lag.append(({**labels, "replica": str(broker_id)},
                                         max(log.log_end_offset - state.log_end_offset, 0)))
    return [
        Family("kafka_log_log_logendoffset", "gauge", "The log end offset of this broker's replica.", log_end),
        Family("kafka_log_log_logstartoffset", "gauge", "The log start offset of this broker's replica.", log_start),
        Family("kafka_log_log_size", "gauge", "Bytes in this broker's replica's segments.", size),
        Family("kafka_log_log_numlogsegments", "gauge", "Segments of this broker's replica.", segments),
        Family("kafka_cluster_partition_underreplicated", "gauge",
               "1 when the ISR is smaller than the replica set (leader only).", under),
        Family("kafka_cluster_partition_insyncreplicascount", "gauge", "ISR size (leader only).", isr_count),
        Family("kafka_cluster_partition_replicascount", "gauge", "Replica set size (leader only).", replicas),
        Family("kafka_topic_partition_current_offset", "gauge",
               "The high watermark, the offset consumers read up to (leader only).",
               [(labels, value) for (labels, value), (_, leads) in zip(hw, role) if leads]),
        Family("strandline_partition_high_watermark", "gauge", "This replica's high watermark.", hw),
        Family("strandline_partition_leader", "gauge", "1 when this broker leads the partition.", role),
        Family("strandline_partition_follower_lag", "gauge",
               "Records a follower's log end offset is behind the leader's (leader only, per follower).",
               follower_lag),
    ]


def _groups(broker: Broker) -> list[Family]:
    """Consumer groups this broker coordinates (Kafka's GroupMetadataManager gauges) and their
    committed offsets."""
    coordinator = broker.groups
    groups = [g for g_id, g in sorted(coordinator.groups.items()) if coordinator.owns(g_id)]
    committed = [({"consumergroup": g.group_id, "topic": t, "partition": str(p)}, offset.offset)
                 for g in groups for (t, p), offset in sorted(g.offsets.items())]
    return [
        _one("kafka_coordinator_group_groupmetadatamanager_numgroups", "gauge",
             "Consumer groups this broker coordinates.", len(groups)),
        _one("kafka_coordinator_group_groupmetadatamanager_numoffsets", "gauge",
             "Committed offsets of the groups this broker coordinates.", len(committed)),
        Family("kafka_consumergroup_current_offset", "gauge",
               "A group's committed offset (at its coordinator).", committed),
    ]
