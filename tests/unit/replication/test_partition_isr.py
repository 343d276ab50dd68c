"""Per-partition replication rules on the leader, driven with a test clock (no sleeps).

REP-3 (HW over the ISR, never backwards), ISR-1 (lag by time), ISR-2 (both lastCaughtUpTimeMs
rules), ISR-3 (shrink proposals), ISR-4 (expansion on the fetch path, KAFKA-7128)."""

from __future__ import annotations

from strandline.log.config import LogConfig
from strandline.log.log import Log
from strandline.replication.partition import LeaderAndIsr, Partition
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import make_batch

LAG = 10_000


def leader(isr=(1, 2, 3), now=0, preload=0) -> Partition:
    log = Log.open(MemoryDisk(), "/logs/t-0", "t", 0, LogConfig(), needs_recovery=False)
    p = Partition("t", 0, 1, log, replica_lag_time_max_ms=LAG)
    for _i in range(preload):
        log.append_as_leader(make_batch([b"old"]), 0, now)
    p.make_leader(LeaderAndIsr(1, 1, tuple(isr)), (1, 2, 3), now)
    return p


def append(p: Partition, n: int = 1, now: int = 0) -> None:
    for _ in range(n):
        p.log.append_as_leader(make_batch([b"x"]), p.leader_epoch, now)
        p.maybe_increment_high_watermark(now)


def test_rep_3_hw_is_the_minimum_leo_over_the_isr_and_never_decreases():
    p = leader()
    append(p, 5)
    assert p.high_watermark == 0                     # followers' LEOs unknown yet
    p.update_follower_fetch_state(2, 5, now_ms=10)
    assert p.high_watermark == 0
    assert p.update_follower_fetch_state(3, 3, now_ms=10)
    assert p.high_watermark == 3
    p.update_follower_fetch_state(3, 5, now_ms=20)
    assert p.high_watermark == 5
    p.update_follower_fetch_state(3, 2, now_ms=30)   # a follower that truncated cannot pull HW back
    assert p.high_watermark == 5


def test_isr_2_rule_a_fetch_at_the_leader_leo_is_caught_up_now():
    p = leader()
    append(p, 3)
    p.update_follower_fetch_state(2, 3, now_ms=7_000)
    assert p.remote_replicas[2].last_caught_up_time_ms == 7_000


def test_isr_2_rule_b_a_follower_under_a_steady_trickle_stays_in_sync():
    """Each fetch reaches the LEO the leader had at the previous fetch, never the current one."""
    p = leader(isr=(1, 2))
    now = 0
    for step in range(200):                          # 200 s of writes every 500 ms
        now += 500
        seen_leo = p.log.log_end_offset
        append(p, 1, now)
        p.update_follower_fetch_state(2, seen_leo, now)
        assert p.out_of_sync_replicas(now) == (), f"dropped at step {step}"
    assert p.isr_to_shrink(now) is None


def test_isr_2_a_follower_that_fetches_but_never_catches_up_falls_out():
    p = leader(isr=(1, 2))
    now = 0
    follower_leo = 0
    for _ in range(60):                              # the leader gains 3 per round, the follower 1
        now += 500
        append(p, 3, now)
        follower_leo += 1
        p.update_follower_fetch_state(2, follower_leo, now)
    assert p.out_of_sync_replicas(now) == (2,)
    assert p.isr_to_shrink(now) == (1,)


def test_isr_1_the_lag_is_time_not_messages():
    p = leader(isr=(1, 2, 3))
    append(p, 1000, now=0)                           # far behind in messages...
    p.update_follower_fetch_state(2, 0, now_ms=0)
    p.update_follower_fetch_state(3, 1000, now_ms=0)
    assert p.isr_to_shrink(LAG) is None              # ...but only lag time counts (strictly greater)
    assert p.isr_to_shrink(LAG + 1) == (1, 3)


def test_isr_3_shrinking_advances_the_high_watermark():
    p = leader(isr=(1, 2, 3))
    append(p, 10)
    p.update_follower_fetch_state(2, 10, now_ms=0)
    p.update_follower_fetch_state(3, 4, now_ms=0)
    assert p.high_watermark == 4
    new_isr = p.isr_to_shrink(LAG + 1)
    assert new_isr == (1, 2)
    assert p.apply_isr(new_isr, zk_version=1, now_ms=LAG + 1)
    assert p.high_watermark == 10 and p.zk_version == 1


def test_isr_4_a_caught_up_follower_rejoins():
    p = leader(isr=(1, 2))
    append(p, 8)
    p.update_follower_fetch_state(2, 8, now_ms=0)
    assert p.high_watermark == 8
    p.update_follower_fetch_state(3, 5, now_ms=0)
    assert p.isr_to_expand(3) is None                # below the HW
    p.update_follower_fetch_state(3, 8, now_ms=1)
    assert p.isr_to_expand(3) == (1, 2, 3)
    assert p.isr_to_expand(2) is None                # already a member


def test_isr_4_kafka_7128_expansion_needs_the_leader_epoch_start_offset():
    """A new leader's HW can lag its epoch start; reaching that stale HW is not enough to join."""
    p = leader(isr=(1,), preload=10)                 # became leader with LEO 10, HW restored to 0
    assert p.leader_epoch_start_offset == 10 and p.high_watermark == 10
    p.high_watermark = 6                             # as after a restart with an older checkpoint
    p.update_follower_fetch_state(2, 7, now_ms=0)
    assert p.isr_to_expand(2) is None                # LEO 7 >= HW 6 but < epoch start 10
    p.update_follower_fetch_state(2, 10, now_ms=1)
    assert p.isr_to_expand(2) == (1, 2)


def test_hw_waits_for_a_recently_caught_up_follower_outside_the_isr():
    """KAFKA-4485: a follower caught up within the lag time counts for the HW, so it can rejoin."""
    p = leader(isr=(1,))
    append(p, 5, now=0)
    p.update_follower_fetch_state(2, 3, now_ms=100)  # rule (b): caught up as of the previous fetch
    p.update_follower_fetch_state(2, 5, now_ms=200)  # rule (a)
    append(p, 2, now=300)
    assert p.high_watermark == 5                     # held at the follower's LEO, not the leader's 7


def test_ack_1_ack_2_check_enough_replicas_reach_offset():
    """ACK-1: an acks=all write is acknowledged once the HW reaches its end; ACK-2: NOT_ENOUGH_
    REPLICAS_AFTER_APPEND when the ISR is smaller than min.insync.replicas by then; a broker that
    no longer leads answers NOT_LEADER_OR_FOLLOWER."""
    from kio.schema.errors import ErrorCode
    p = leader(isr=(1, 2))
    append(p, 3)
    assert p.check_enough_replicas_reach_offset(3, 2) == (False, ErrorCode.none)
    p.update_follower_fetch_state(2, 3, now_ms=0)
    assert p.check_enough_replicas_reach_offset(3, 2) == (True, ErrorCode.none)
    p.apply_isr((1,), 1, now_ms=0)
    assert p.check_enough_replicas_reach_offset(3, 2) == (True, ErrorCode.not_enough_replicas_after_append)
    p.make_follower(LeaderAndIsr(2, 2, (2,)), (1, 2, 3))
    assert p.check_enough_replicas_reach_offset(3, 1) == (False, ErrorCode.not_leader_or_follower)


def test_a_follower_takes_its_leaders_high_watermark_up_to_its_own_log_end():
    p = leader()
    append(p, 4)
    p.make_follower(LeaderAndIsr(2, 2, (1, 2, 3)), (1, 2, 3))
    assert p.update_follower_high_watermark(9) and p.high_watermark == 4     # not past its LEO
    assert not p.update_follower_high_watermark(2) and p.high_watermark == 4  # never back
    assert p.truncate_to(3) == 4 and p.high_watermark == 3                    # down with the log


def test_only_the_partition_writes_a_partitions_high_watermark():
    """The high watermark has one writer, :class:`Partition`: no module assigns another object's
    ``high_watermark`` (each class may keep its own, as a fetch session keeps what it last sent)."""
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[3] / "src" / "strandline"
    paths = sorted(root.rglob("*.py"))
    assert len(paths) > 100, f"no source under {root}"      # the scan reads the tree, not an empty folder
    writers = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and t.attr == "high_watermark" and not (
                            isinstance(t.value, ast.Name) and t.value.id == "self"):
                        writers.append(f"{path.relative_to(root)}:{t.lineno}")
    assert writers == []
