"""Reading the whole cluster from ZooKeeper (a new controller, a starting broker): a read
ZooKeeper did not answer must not pass for a node that is not there."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strandline.coordination import znodes
from strandline.coordination.cluster_state import ZooKeeperUnanswered, read_cluster_state
from strandline.coordination.store import Create, GetChildren, GetData, OpResult, ZkError
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


class Registrations(MemoryZooKeeper):
    """ZooKeeper with broker registrations, read as the shell reads them (kazoo's ``get`` with the
    znode's stat), and the answers to some paths lost."""

    def __init__(self, lost: set[str]) -> None:
        super().__init__()
        self.lost = lost
        self.client = self

    def execute(self, ops, session: int = 0):
        return [OpResult(ZkError.CONNECTION_LOSS) if isinstance(op, GetChildren) and op.path in self.lost else res
                for op, res in zip(ops, super().execute(ops, session))]

    def get(self, path: str):
        from kazoo.exceptions import ConnectionLoss, NoNodeError
        if path in self.lost:
            raise ConnectionLoss()
        [res] = super().execute([GetData(path)])
        if res.error is ZkError.NO_NODE:
            raise NoNodeError()
        return res.data, SimpleNamespace(czxid=self.czxid[path])


@pytest.mark.parametrize("lost", [znodes.BrokerIdsZNode.path(), znodes.BrokerIdZNode.path(2)])
def test_a_new_controllers_read_of_the_live_brokers_raises_rather_than_leaving_a_broker_out(lost):
    """A broker left out of a new controller's view passes for dead: every partition it leads
    gets a new leader (or none), and nothing under /brokers/ids changes to set it right."""
    from strandline.runtime.live_brokers import BrokerListings, read_full_cluster_state

    zk = Registrations({lost})
    for b in (1, 2):
        zk.execute([Create(znodes.BrokerIdZNode.path(b), znodes.BrokerIdZNode.encode(b, "127.0.0.1", 9091 + b, None, 0),
                           make_parents=True)])
    listings = BrokerListings(zk)
    with pytest.raises(ZooKeeperUnanswered):
        read_full_cluster_state(zk, listings)
    zk.lost = set()
    brokers, _, epochs, listing = read_full_cluster_state(zk, listings)
    assert sorted(brokers) == sorted(epochs) == [1, 2]
    assert listing == 1 and listings.read()[2] == 2


def test_ctl_2_a_broker_listing_older_than_a_new_controllers_load_is_not_applied_after_it():
    """The /brokers/ids watch, its retries and a new controller's load of the cluster read the
    live brokers on different threads. A listing read before the load but delivered while it is
    under way used to be applied after it: a broker that had joined since passed for gone and
    lost its leaderships (seen at start-up as "gone [1]", then "new [1]" 2 ms later). Each listing
    carries its number in the order it was read; an older one is not applied."""
    from kio.schema.errors import ErrorCode

    from strandline.core.effects import LogLine, ReadClusterState
    from tests.unit.broker.test_broker_core import Harness

    h = Harness(brokers=(1, 2, 3))
    created = h.call(19, 4, {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": -1,
                                         "assignments": [{"partition_index": 0, "broker_ids": [3, 1]}],
                                         "configs": []}], "timeout": 1000, "validate_only": False})
    assert created.topics[0].error_code == ErrorCode.none
    state_path = znodes.TopicPartitionStateZNode.path("t", 0)
    assert znodes.TopicPartitionStateZNode.decode(h.zk.nodes[state_path][0]).leader == 3

    # broker 1 takes office again (a new term): its load is under way
    [read] = [e for e in h.broker.controller.become_controller(h.broker.controller_epoch + 1, None, "test")
              if isinstance(e, ReadClusterState)]
    older = {b: h.brokers[b] for b in (1, 2)}      # read before broker 3 registered
    assert h.broker.on_brokers_changed(older, {}, h.now, 1) == []
    _, topics = read_cluster_state(h.zk)
    h.logs.clear()
    h.run(h.broker.on_zk_result(read.token, (h.brokers, topics, {}, 2), h.now))
    assert not [e.message for e in h.logs if isinstance(e, LogLine) and "gone [3]" in e.message]
    assert znodes.TopicPartitionStateZNode.decode(h.zk.nodes[state_path][0]).leader == 3
    assert sorted(h.broker.controller.ctx.live_brokers) == [1, 2, 3]

    # a newer listing is applied, whenever it comes
    h.run(h.broker.on_brokers_changed(older, {}, h.now, 3))
    assert sorted(h.broker.controller.ctx.live_brokers) == [1, 2]
    assert znodes.TopicPartitionStateZNode.decode(h.zk.nodes[state_path][0]).leader == 1
    h.run(h.broker.on_brokers_changed(dict(h.brokers), {}, h.now, 2))      # an older one is not
    assert sorted(h.broker.controller.ctx.live_brokers) == [1, 2]
