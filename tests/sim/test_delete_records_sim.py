"""DeleteRecords (ADM-DR) and leader-epoch truncation (EPO-2, EPO-3), step by step in the simulator.

DeleteRecords cuts a leader's epoch cache from the start: its first epoch then "starts" at the new
log start offset, and whatever the log held before is no longer known by epoch. A follower that
comes back with records of an earlier epoch, never committed, asks the leader where that epoch
ends and hears "at the log start offset". These tests play the ways that answer once left a
replica holding records its leader never had (found by ``sim explore --delete-records``, seeds
7700022, 7700046, 7700057, 7700085, 7700089, 7700097)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strandline.log.config import LogConfig
from strandline.log.log import Log
from strandline.protocol.api import ApiKey
from strandline.protocol.records import iter_batches
from strandline.sim.cluster import SimCluster
from strandline.sim.disk import MemoryDisk
from tests.unit.batches import make_batch
from tests.sim.test_replication_sim import create, produce

TOPIC = "d"


def delete_records(c: SimCluster, broker: int, below: int) -> int:
    body = {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": below}]}], "timeout": 5000}
    resp = c.call(broker, ApiKey.DELETE_RECORDS, 2, body, "admin")
    [p] = resp.topics[0].partitions
    assert p.error_code == ErrorCode.none, p
    return p.low_watermark


def batches(c: SimCluster, broker: int) -> list[tuple[int, int, int]]:
    """(base offset, last offset, CRC) of every batch a replica holds, below its log start offset too."""
    log = c.partition(broker, TOPIC).log
    return [(h.base_offset, h.next_offset - 1, h.crc) for h in log.iter_batch_headers(0)]


def diverge(c: SimCluster, values: list[list[bytes]]) -> None:
    """Broker 3, leader of ``d`` in epoch 0, is cut off from everyone and writes ``values`` (one
    batch each, acks=1, never committed); its session expires and broker 1 leads in epoch 1."""
    c.cut_off(3)
    for batch in values:
        assert produce(c, 3, TOPIC, batch, acks=1).error_code == ErrorCode.none
    c.advance(7000)
    assert c.state(TOPIC).leader == 1 and c.state(TOPIC).leader_epoch >= 1


def rejoin(c: SimCluster) -> None:
    c.heal(3)
    c.advance(10_000)


def test_a_follower_keeps_no_record_of_its_own_below_a_leader_log_start_at_a_batch_boundary():
    """Broker 3 wrote x3, x4 and x5 alone in epoch 0 (three batches); leader 1 wrote a3, then a4
    and a5 in epoch 1 and deleted the records below 4, a batch boundary. Asked where epoch 0 ends,
    it says 4 (its log start), so broker 3 cut at 4 kept x3, took a4 onwards and moved its log start
    to 4: x3 stayed in its log, below its log start (seeds 7700046, 7700085, 7700089, 7700097). It
    now starts afresh there and holds only batches of its leader's."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": "30000", "zookeeper.session.timeout.ms": "6000"})
    create(c, TOPIC, [3, 1, 2])
    assert produce(c, 3, TOPIC, [b"m0", b"m1", b"m2"]).error_code == ErrorCode.none
    diverge(c, [[b"x3"], [b"x4"], [b"x5"]])
    for batch in ([b"a3"], [b"a4", b"a5"], [b"a6"]):
        assert produce(c, 1, TOPIC, batch).error_code == ErrorCode.none
    assert delete_records(c, 1, 4) == 4
    rejoin(c)
    follower = c.partition(3, TOPIC)
    assert follower.log_end_offset == c.partition(1, TOPIC).log_end_offset == 7
    assert set(batches(c, 3)) <= set(batches(c, 1)), (batches(c, 3), batches(c, 1))
    assert follower.log.log_start_offset == 4
    assert 3 in c.state(TOPIC).isr


def test_a_follower_whose_log_ends_inside_a_batch_at_the_leader_log_start_takes_that_batch():
    """As above, with leader 1's a3 and a4 in one batch and the records below 4 deleted: the
    leader's log start lies inside that batch. Broker 3, cut at 4, asked for offset 4 and got the
    batch from 3, which it refused after its own x3 on every fetch, for ever (seed 7700022). It now
    drops x3, starts its log at 3 and takes the batch (KAFKA-6975), and rejoins the ISR."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": "30000", "zookeeper.session.timeout.ms": "6000"})
    create(c, TOPIC, [3, 1, 2])
    assert produce(c, 3, TOPIC, [b"m0", b"m1", b"m2"]).error_code == ErrorCode.none
    diverge(c, [[b"x3"], [b"x4", b"x5"]])
    for batch in ([b"a3", b"a4"], [b"a5"]):
        assert produce(c, 1, TOPIC, batch).error_code == ErrorCode.none
    assert delete_records(c, 1, 4) == 4
    rejoin(c)
    assert c.partition(3, TOPIC).log_end_offset == c.partition(1, TOPIC).log_end_offset == 6
    assert set(batches(c, 3)) <= set(batches(c, 1)), (batches(c, 3), batches(c, 1))
    assert 3 in c.state(TOPIC).isr
    assert not any("failed" in line for line in c.brokers[3].log), c.brokers[3].log


def test_a_leader_restarted_before_its_log_start_checkpoint_keeps_the_deleted_records_deleted():
    """Leader 1 deleted the records below 4; its leader-epoch checkpoint says so (written with
    the log's next flush), its log-start-offset checkpoint does not yet (written every
    log.flush.start.offset.checkpoint.interval.ms). It restarts and leads again. Its log started
    again at 0 while its epochs began at 4: broker 3, back with x0 to x5 of epoch 0, heard that
    epoch 0 ended at 4, kept x0 to x2 and appended the leader's records after them, below a high
    watermark, where consumers read them (seed 7700057). The log start now follows the epochs."""
    c = SimCluster((1, 2, 3), **{"replica.lag.time.max.ms": "30000", "zookeeper.session.timeout.ms": "6000"})
    create(c, TOPIC, [3, 1])
    diverge(c, [[b"x0", b"x1", b"x2"], [b"x3", b"x4"], [b"x5"]])
    for batch in ([b"a0", b"a1", b"a2"], [b"a3", b"a4"], [b"a5"]):
        assert produce(c, 1, TOPIC, batch).error_code == ErrorCode.none
    assert delete_records(c, 1, 4) == 4
    c.partition(1, TOPIC).log.flush()                 # the epoch checkpoint, not the log start's
    c.crash(1, lose_unflushed=False)
    c.start(1)
    c.advance(1000)
    assert c.state(TOPIC).leader == 1
    assert c.partition(1, TOPIC).log.log_start_offset == 4
    rejoin(c)
    assert c.partition(3, TOPIC).log_end_offset == c.partition(1, TOPIC).log_end_offset == 6
    assert set(batches(c, 3)) <= set(batches(c, 1)), (batches(c, 3), batches(c, 1))


def test_a_log_whose_epochs_begin_above_its_checkpointed_start_starts_there():
    """Log.open: the leader-epoch checkpoint was cut from the start at 4 (DeleteRecords) while the
    log-start-offset checkpoint still says 0: the log starts at 4, and no offset below is served."""
    disk = MemoryDisk()
    log = Log.open(disk, "/data/d-0", TOPIC, 0, LogConfig())
    for epoch, values in ((0, [b"a0", b"a1", b"a2"]), (1, [b"a3", b"a4"]), (1, [b"a5"])):
        log.append_as_leader(make_batch(values), epoch, 0)
    assert log.maybe_increment_log_start_offset(4)
    log.flush()
    log.close()
    again = Log.open(disk, "/data/d-0", TOPIC, 0, LogConfig(), log_start_offset=0, recovery_point=6)
    assert again.log_start_offset == 4
    assert again.leader_epoch_cache.epoch_entries() == [(1, 4)]
    assert [h.base_offset for _, h in iter_batches(again.read(4, 1 << 20))] == [3, 5]
