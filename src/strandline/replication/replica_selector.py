"""Which replica a consumer should read from (KIP-392, Kafka's ``RackAwareReplicaSelector``).

With ``replica.selector.class`` set, a leader answers a consumer's Fetch (v11+) that names a
rack with a *preferred read replica* when the leader is in another rack and a live replica in
the consumer's rack holds the fetch offset: the answer carries that broker's id and no records,
and the consumer fetches from it from then on. A follower serves such fetches up to its own high
watermark, so a consumer still sees committed records only (REP-4)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strandline.replication.partition import Partition


def preferred_read_replica(partition: Partition, fetch_offset: int, client_rack: str,
                           brokers: Mapping[int, Any], now_ms: int) -> int:
    """The broker a consumer in ``client_rack`` should fetch this partition from, or -1 for this
    leader: the leader when it is in that rack or no replica there can serve ``fetch_offset``;
    else the follower there with the highest log end offset, the one caught up most recently
    among equals (Kafka's ``ReplicaView.comparator``). ``brokers``: the live brokers, by id."""
    if not client_rack:
        return -1
    leader = brokers.get(partition.local_broker_id)
    if leader is not None and leader.rack == client_rack:
        return -1
    best: tuple[int, int] | None = None
    chosen = -1
    for replica in partition.remote_replicas.values():
        broker = brokers.get(replica.broker_id)
        if broker is None or broker.rack != client_rack:
            continue
        if not replica.log_start_offset <= fetch_offset <= replica.log_end_offset:
            continue        # it does not hold the offset, in the ISR or not
        rank = (replica.log_end_offset, replica.last_caught_up_time_ms - now_ms)
        if best is None or rank > best:
            best, chosen = rank, replica.broker_id
    return chosen
