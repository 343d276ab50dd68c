"""Replica assignment, as Kafka's ``AdminUtils.assignReplicasToBrokers`` (SPEC ASG-1..3).

Pure functions: the random start index and replica shift are parameters (the caller draws them
from its own random source, tests fix them).
"""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence


class InvalidReplicationFactor(ValueError):
    pass


class InvalidPartitions(ValueError):
    pass


def check_replication_factor(replication_factor: int, available_brokers: int) -> None:
    """Raise InvalidReplicationFactor unless 0 < ``replication_factor`` <= ``available_brokers``."""
    if replication_factor <= 0:
        raise InvalidReplicationFactor(f"Replication factor must be larger than 0, got {replication_factor}")
    if replication_factor > available_brokers:
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: {available_brokers}")


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _first_replicas(n: int, num_partitions: int, start_index: int, replica_shift: int,
                    start_partition: int) -> Iterator[tuple[int, int, int]]:
    """``(partition, index of its first replica, replica shift)`` of each partition to assign, over
    ``n`` brokers: the shift grows by one every n partitions (ASG-2)."""
    shift = replica_shift
    p = max(0, start_partition)
    for _ in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        yield p, (p + start_index) % n, shift
        p += 1


def assign_replicas(broker_ids: Sequence[int], num_partitions: int, replication_factor: int,
                    start_index: int, replica_shift: int, start_partition: int = 0,
                    racks: Mapping[int, str | None] | None = None) -> dict[int, list[int]]:
    """Assign ``num_partitions`` partitions with ``replication_factor`` replicas each.

    Partition p's first replica is broker ``(p + start) mod n``; follower j sits at
    ``(first + 1 + (shift + j) mod (n - 1)) mod n``, the shift growing by one every n
    partitions (ASG-2). With racks on every broker, replicas are spread over racks (ASG-3).
    """
    if num_partitions <= 0:
        raise InvalidPartitions(f"Number of partitions must be larger than 0, got {num_partitions}")
    check_replication_factor(replication_factor, len(broker_ids))
    brokers = sorted(broker_ids)
    n = len(brokers)
    if racks and all(racks.get(b) for b in brokers):
        return _assign_rack_aware(brokers, racks, num_partitions, replication_factor,
                                  start_index, replica_shift, start_partition)
    result: dict[int, list[int]] = {}
    for p, first, shift in _first_replicas(n, num_partitions, start_index, replica_shift, start_partition):
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[_replica_index(first, shift, j, n)])
        result[p] = replicas
    return result


def _rack_alternated(brokers: Sequence[int], racks: Mapping[int, str | None]) -> list[int]:
    by_rack: dict[str, list[int]] = {}
    for b in brokers:
        by_rack.setdefault(str(racks[b]), []).append(b)
    ordered = [sorted(by_rack[r]) for r in sorted(by_rack)]
    result: list[int] = []
    i = 0
    while len(result) < len(brokers):
        for group in ordered:
            if i < len(group):
                result.append(group[i])
        i += 1
    return result


def _assign_rack_aware(brokers: Sequence[int], racks: Mapping[int, str | None], num_partitions: int,
                       replication_factor: int, start_index: int, replica_shift: int,
                       start_partition: int) -> dict[int, list[int]]:
    arranged = _rack_alternated(brokers, racks)
    n = len(arranged)
    num_racks = len({racks[b] for b in brokers})
    result: dict[int, list[int]] = {}
    for p, first, shift in _first_replicas(n, num_partitions, start_index, replica_shift, start_partition):
        leader = arranged[first]
        replicas = [leader]
        racks_with = {racks[leader]}
        brokers_with = {leader}
        k = 0
        while len(replicas) < replication_factor:
            broker = arranged[_replica_index(first, shift * num_racks, k, n)]
            rack = racks[broker]
            if (rack not in racks_with or len(racks_with) == num_racks) and \
                    (broker not in brokers_with or len(brokers_with) == n):
                replicas.append(broker)
                racks_with.add(rack)
                brokers_with.add(broker)
            k += 1
        result[p] = replicas
    return result
