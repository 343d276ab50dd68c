"""One class per znode: Kafka's path, and its data in Kafka's JSON (SPEC CTL-1), a module per
family of znodes (``brokers``, ``topics``, ``configs``, ``controller``, ``admin``, ``cluster``,
``consumers``), all of them importable from here.

The formats are those of Kafka 2.x ``core/src/main/scala/kafka/zk/ZkData.scala`` (2.6 baseline;
the topic id of 2.8+ is carried too, so Metadata v10+ can return it). Every ``encode`` is a pure
function of its arguments (timestamps are parameters), and every ``decode`` accepts what real
Kafka writes, in any key order, and raises ``ValueError`` naming the znode on malformed data.

JSON is written compactly (``{"a":1}``) like Kafka's Jackson encoder. Kafka builds most of these
objects from hash maps, so its key order is arbitrary; ours is fixed (``version`` first) and
readers never depend on it.

The znode's ``Stat`` (version, ephemeral owner, czxid) is not part of its data: a partition
state's ``zk_version`` is the stat version the store returned with the bytes
(``OpResult.version``), passed to ``TopicPartitionStateZNode.decode``.

The ACL authorizer's znodes are in ``coordination.acl_znodes``.
"""

from __future__ import annotations

from strandline.coordination.znode_json import new_cluster_id, uuid_from_base64, uuid_to_base64
from strandline.coordination.znodes.admin import (
    DeleteTopicsTopicZNode, DeleteTopicsZNode, IsrChangeNotificationSequenceZNode, IsrChangeNotificationZNode,
    PreferredReplicaElectionZNode, ReassignPartitionsZNode)
from strandline.coordination.znodes.brokers import BrokerIdsZNode, BrokerIdZNode, BrokerInfo, BrokerSequenceIdZNode
from strandline.coordination.znodes.cluster import ClusterIdZNode, FeatureZNode, ProducerIdBlockZNode
from strandline.coordination.znodes.configs import (
    ConfigEntityChangeNotificationSequenceZNode, ConfigEntityChangeNotificationZNode, ConfigEntityTypeZNode,
    ConfigEntityZNode)
from strandline.coordination.znodes.consumers import ConsumerOffsetZNode
from strandline.coordination.znodes.controller import ControllerEpochZNode, ControllerZNode
from strandline.coordination.znodes.topics import (
    LeaderAndIsr, TopicAssignment, TopicPartitionStateZNode, TopicPartitionsZNode, TopicPartitionZNode, TopicsZNode,
    TopicZNode)

__all__ = [
    "BrokerIdZNode", "BrokerIdsZNode", "BrokerInfo", "BrokerSequenceIdZNode", "ClusterIdZNode", "FeatureZNode",
    "ConfigEntityChangeNotificationZNode", "ConfigEntityTypeZNode", "ConfigEntityZNode", "ConsumerOffsetZNode",
    "ControllerEpochZNode",
    "ControllerZNode", "DeleteTopicsTopicZNode", "DeleteTopicsZNode", "IsrChangeNotificationSequenceZNode",
    "IsrChangeNotificationZNode", "ConfigEntityChangeNotificationSequenceZNode", "LeaderAndIsr", "PERSISTENT_PATHS",
    "PreferredReplicaElectionZNode", "ProducerIdBlockZNode", "ReassignPartitionsZNode", "TopicAssignment",
    "TopicPartitionStateZNode", "TopicPartitionZNode", "TopicPartitionsZNode", "TopicZNode", "TopicsZNode",
    "new_cluster_id", "uuid_from_base64", "uuid_to_base64",
]


#: The persistent paths Kafka makes sure exist at broker startup (``ZkData.PersistentZkPaths``, 2.6),
#: in Kafka's order, plus ``/cluster`` (Kafka creates it with ``/cluster/id``).
PERSISTENT_PATHS: tuple[str, ...] = (
    "/consumers",
    BrokerIdsZNode.path(),
    TopicsZNode.path(),
    ConfigEntityChangeNotificationZNode.path(),
    DeleteTopicsZNode.path(),
    BrokerSequenceIdZNode.path(),
    IsrChangeNotificationZNode.path(),
    ProducerIdBlockZNode.path(),
    "/log_dir_event_notification",
    *(ConfigEntityTypeZNode.path(t) for t in ConfigEntityTypeZNode.TYPES),
    "/cluster",
)