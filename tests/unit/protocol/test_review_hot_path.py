"""Hot-path findings of a review: a fetch answer that retention overtakes in the same event, a
large min_bytes at a segment boundary, an unknown error code in a follower's Fetch answer, and a
size prefix without its frame."""

from __future__ import annotations

import random
import struct

import pytest

from strandline.broker.broker import Broker
from strandline.core.config import BrokerConfig
from strandline.log.manager import LogManager
from strandline.runtime.disk import OsDisk
from strandline.sim.zookeeper import MemoryZooKeeper
from tests.unit.batches import make_batch
from tests.unit.broker.test_broker_core import Harness

VALUE = b"v" * 1000


class DiskHarness(Harness):
    """The core harness on a real disk (so that Fetch reads may be FileRegions)."""

    def __init__(self, root, **overrides):
        from strandline.coordination.znodes import BrokerInfo
        props = {"broker.id": "1", "zookeeper.connect": "zk:2181", "log.dirs": str(root)}
        props.update(overrides)
        self.config = BrokerConfig.from_properties(props)
        self.disk = OsDisk()
        self.now = 1_700_000_000_000
        logs = LogManager(self.disk, [str(root)], self.config.log_config())
        logs.startup(self.now)
        self.broker = Broker(self.config, logs, rng=random.Random(1), now_ms=self.now)
        self.zk = MemoryZooKeeper()
        self.brokers = {1: BrokerInfo(1, "127.0.0.1", 9092)}
        self.correlation = 0
        self.sent = {}
        self.logs = []
        self.run(self.broker.load_metadata("cluster", self.brokers, {}, 1, 1, self.now))


def two_segments(h: DiskHarness, timestamp_ms: int, **configs) -> None:
    """Segment 0: 5 batches of ~10 KB (>= REGION_MIN_BYTES, closed); segment 1 (active): 10 more."""
    h.create("t", configs={"segment.bytes": "52000", **configs})
    for _ in range(15):
        h.produce("t", make_batch([VALUE] * 10, timestamp_ms=timestamp_ms))
        h.sent.pop(1, None)
    log = h.broker.replica_manager.partitions[("t", 0)].log
    assert len(log.segments) >= 2


def test_a_fetch_that_expires_in_the_tick_that_runs_retention_is_still_sent_whole(tmp_path):
    """Broker.tick answers expired fetches (expire_delayed) and only then runs log-retention, in one
    event: the answer holds a FileRegion of a segment that retention deleted before the shell
    sends it. The old code had read the bytes; now the answer cannot be sent at all."""
    h = DiskHarness(tmp_path, **{"log.retention.check.interval.ms": "500"})
    two_segments(h, timestamp_ms=1000, **{"retention.ms": "60000"})   # records far older than that
    h.sent.clear()
    # a consumer asking for more than segment 0's tail waits (the read stops at the segment's end)
    h.request(1, 11, h.fetch_body("t", 0, max_wait=500, min_bytes=1 << 20), conn=5)
    assert 5 not in h.sent
    h.tick(500)            # the fetch expires and re-reads segment 0; retention deletes segment 0
    body = h.response(1, 11, conn=5)      # every buffer of the answer still readable
    assert body.responses[0].partitions[0].records


def test_a_consumer_with_a_large_min_bytes_is_not_held_at_a_segment_boundary(tmp_path):
    """Before the change a read crossed segments; now a read that is the tail (>= 32 KiB) of an old
    segment stops there, so a fetch with min_bytes above that tail waits its whole max_wait (and
    waits again on every re-check) although a full answer is available. Kafka completes such a
    DelayedFetch at once ("Case F": the fetch offset is on an older segment)."""
    h = DiskHarness(tmp_path)
    two_segments(h, timestamp_ms=h.now)
    h.sent.clear()
    h.request(1, 11, h.fetch_body("t", 0, max_wait=30_000, min_bytes=100_000), conn=5)
    assert 5 in h.sent, "the fetch is parked although 150 KB are readable"


def unknown_error_fetch_answer(correlation_id: int) -> bytes:
    """A Fetch v11 answer for r-0 whose partition error code this version does not know."""
    frame = struct.pack(">iihii", correlation_id, 0, 0, 0, 1) + struct.pack(">h", 1) + b"r" + struct.pack(">i", 1)
    return frame + struct.pack(">ihqqqi", 0, 9999, 0, 0, 0, -1) + struct.pack(">ii", -1, 0)


def test_the_fetch_reader_refuses_what_kio_refuses():
    from strandline.protocol import api
    from strandline.protocol.api import ApiKey
    from strandline.protocol.frames import ProtocolError
    from strandline.protocol.hot_readers import decode_fetch_response
    frame = unknown_error_fetch_answer(7)
    with pytest.raises(ProtocolError):
        api.decode_response(ApiKey.FETCH, 11, frame)       # kio: not a valid ErrorCode
    assert decode_fetch_response(frame) is None


def test_a_fetch_answer_with_an_unknown_error_code_backs_the_fetcher_off_instead_of_raising():
    """With kio the follower logs 'Bad FETCH answer' and backs off; the hand reader hands the raw
    code on and ErrorCode(9999) raises out of the core (the shell stops the broker)."""
    from strandline.core.effects import BrokerSend
    h = Harness(brokers=(1, 2))
    sends = []
    run = h.run

    def capture(effects):
        from strandline.core.effects import ReadClusterState, ZkRequest
        from strandline.coordination.cluster_state import read_cluster_state
        pending = list(effects)
        while pending:
            e = pending.pop(0)
            if isinstance(e, BrokerSend):
                sends.append(e)
            elif isinstance(e, ZkRequest):
                pending.extend(h.broker.on_zk_result(e.token, h.zk.run(e.ops, e.transaction), h.now))
            elif isinstance(e, ReadClusterState):
                _, topics = read_cluster_state(h.zk)
                pending.extend(h.broker.on_zk_result(e.token, (h.brokers, topics, {}, None), h.now))
            else:
                run([e])
    h.run = capture
    h.call(19, 4, {"topics": [{"name": "r", "num_partitions": -1, "replication_factor": -1,
                               "assignments": [{"partition_index": 0, "broker_ids": [2, 1]}], "configs": []}],
                   "timeout": 1000, "validate_only": False})
    h.tick(1)
    fetch = [s for s in sends if s.broker_id == 2 and int.from_bytes(bytes(s.frame[:2]), "big") == 1]
    assert fetch, "the follower sent no Fetch"
    h.run(h.broker.on_broker_response(fetch[-1].token, unknown_error_fetch_answer(fetch[-1].token), h.now))


def test_four_bytes_from_a_peer_do_not_commit_the_whole_announced_frame():
    """A size prefix alone (100 MiB, within socket.request.max.bytes) used to cost nothing until
    the bytes came; now the decoder allocates and zero-fills a bytearray of that size at once, so
    a peer that sends 4 bytes per connection and stops makes the broker commit 100 MiB each."""
    import tracemalloc
    from strandline.protocol.frames import FrameDecoder
    decoder = FrameDecoder(104857600)
    tracemalloc.start()
    try:
        decoder.feed(struct.pack(">i", 100 << 20) + b"x")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 1 << 20, f"{held} bytes held for 1 byte of payload"
