"""Reading the whole cluster from ZooKeeper (a new controller, a starting broker): a read
ZooKeeper did not answer must not pass for a node that is not there."""

from __future__ import annotations

import pytest

from strandline.coordination import znodes
from strandline.coordination.cluster_state import ZooKeeperUnanswered, read_cluster_state
from strandline.coordination.store import Create, GetData, OpResult, ZkError
from strandline.sim.zookeeper import MemoryZooKeeper


class UnansweredPath(MemoryZooKeeper):
    """ZooKeeper whose answer to one path's read is lost (the connection dropped)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.lost = path

    def execute(self, ops, session: int = 0):
        results = super().execute(ops, session)
        return [OpResult(ZkError.CONNECTION_LOSS) if isinstance(op, GetData) and op.path == self.lost else res
                for op, res in zip(ops, results)]


@pytest.mark.parametrize("path", [znodes.TopicZNode.path("t"), znodes.ConfigEntityZNode.path("topics", "t"),
                                  znodes.TopicPartitionStateZNode.path("t", 0)])
def test_a_read_zookeeper_did_not_answer_raises_rather_than_leaving_the_topic_or_its_state_out(path):
    zk = UnansweredPath(path)
    zk.execute([Create(znodes.TopicZNode.path("t"), znodes.TopicZNode.encode({0: [1, 2]}), make_parents=True),
                Create(znodes.ConfigEntityZNode.path("topics", "t"),
                       znodes.ConfigEntityZNode.encode({"min.insync.replicas": "2"}), make_parents=True),
                Create(znodes.TopicPartitionStateZNode.path("t", 0),
                       b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}',
                       make_parents=True)])
    with pytest.raises(ZooKeeperUnanswered, match=path):
        read_cluster_state(zk)
    zk.lost = "/nothing"
    _, topics = read_cluster_state(zk)
    assert topics["t"].states[0].isr == (1, 2) and topics["t"].configs["min.insync.replicas"] == 2
