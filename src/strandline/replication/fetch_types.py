"""What a Fetch asks of each partition and what its answer holds, as the replica manager reads
them (:mod:`strandline.replication.replica_manager`), fetch sessions keep them
(:mod:`strandline.replication.fetch_session`) and parked fetches wait with them
(:mod:`strandline.replication.purgatory`)."""

from __future__ import annotations

from typing import Protocol, TypedDict

from kio.schema.errors import ErrorCode

from strandline.log.disk import FileRegion


class FetchPartitionRequest(Protocol):
    """A partition as a Fetch names it: a request's own (kio's ``FetchPartition``), or a session's
    :class:`~strandline.replication.fetch_session.SessionPartition`, which keeps the same names. Versions that lack a field read its
    default (``getattr(p, "current_leader_epoch", -1)``, ``log_start_offset``, ``last_fetched_epoch``)."""

    @property
    def partition(self) -> int: ...

    @property
    def fetch_offset(self) -> int: ...

    @property
    def partition_max_bytes(self) -> int: ...


class FetchedPartition(TypedDict):
    """One partition's entry in a Fetch answer, as the replica manager reads it."""
    partition_index: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None    # (producer id, first offset); None: read_uncommitted
    preferred_read_replica: int     # KIP-392: the broker to fetch from instead (-1: this one)
    records: bytes | FileRegion     # whole batches (a FileRegion: a segment's tail for the shell to sendfile)


class FetchedTopic(TypedDict):
    """One topic of a Fetch answer: its partitions' entries."""
    topic: str
    partitions: list[FetchedPartition]
