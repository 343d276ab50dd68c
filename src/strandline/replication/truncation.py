"""Where a replica that becomes a follower cuts its log (SPEC EPO-2, EPO-4).

Leader-epoch mode (the default, KIP-101/KIP-279): the follower asks the leader
OffsetsForLeaderEpoch(its latest epoch) and compares the answer with its own epoch cache. When the
leader answers with an epoch the follower does not have, the follower cuts to where that epoch
ends locally and asks again with its new latest epoch, until both agree on a common prefix. It
never cuts to its high watermark.

Legacy mode (``replication.truncation=high-watermark``, pre-0.11 Kafka): the follower cuts to its
checkpointed high watermark, which loses acknowledged writes and lets replicas diverge (S2/S3).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

UNDEFINED = -1


class EpochLookup(Protocol):
    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]: ...


class TruncationState(NamedTuple):
    offset: int
    """Truncate the local log to this offset (a no-op when it is the LEO)."""
    done: bool
    """False: ask the leader again with the local latest epoch after truncating."""


def after_offsets_for_leader_epoch(leader_epoch: int, leader_end_offset: int, local: EpochLookup,
                                   log_end_offset: int, high_watermark: int) -> TruncationState:
    """KIP-279: the truncation point from one OffsetsForLeaderEpoch answer of the leader.

    ``(leader_epoch, leader_end_offset)`` is the leader's answer: the largest epoch it has at or
    below the one asked for, and where that epoch ends on the leader.
    """
    if leader_end_offset == UNDEFINED:
        return TruncationState(high_watermark, True)        # the leader knows no such epoch at all
    if leader_epoch == UNDEFINED:
        return TruncationState(min(leader_end_offset, log_end_offset), True)
    local_epoch, local_end = local.end_offset_for(leader_epoch, log_end_offset)
    if local_end == UNDEFINED:
        return TruncationState(min(leader_end_offset, log_end_offset), True)
    if local_epoch != leader_epoch:
        # we do not have the leader's epoch: drop our entries above it, then ask again
        return TruncationState(min(local_end, log_end_offset), False)
    return TruncationState(min(local_end, leader_end_offset, log_end_offset), True)


def legacy_truncation_offset(high_watermark: int, log_end_offset: int) -> int:
    """EPO-4 legacy mode: cut to the checkpointed high watermark."""
    return min(high_watermark, log_end_offset)
