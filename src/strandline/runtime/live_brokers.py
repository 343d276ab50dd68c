"""Reading the live brokers (``/brokers/ids``) from ZooKeeper, for the broker's shell.

The ``/brokers/ids`` watch (on kazoo's thread), its retries (on a timer's) and a new controller's
load of the cluster (on a worker thread) each read the live brokers, and their answers reach the
event loop in any order. :class:`BrokerListings` makes the reads one at a time and numbers them in
the order they were made, so that the controller can tell an older listing delivered late from a
newer one (``Broker.on_brokers_changed``), as Kafka's controller, which reads ``/brokers/ids``
on its own event thread when it handles each change, never sees them out of order.
"""

from __future__ import annotations

import logging
import threading

from kazoo.exceptions import NoNodeError

from strandline.coordination import znodes
from strandline.coordination.cluster_state import ZooKeeperUnanswered, answered, read_cluster_state
from strandline.coordination.store import GetChildren
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import BrokerInfo
from strandline.runtime.zk import KazooStore

log = logging.getLogger("strandline.broker")


def read_live_brokers(store: KazooStore, children: list[str]) -> tuple[dict[int, BrokerInfo], dict[int, int]]:
    """Registrations under ``/brokers/ids`` and their broker epochs (the znode's czxid, as Kafka).
    Raises :class:`ZooKeeperUnanswered` when a read got no answer: a broker left out would pass for
    one that is gone."""
    brokers: dict[int, BrokerInfo] = {}
    epochs: dict[int, int] = {}
    for child in children:
        path = znodes.BrokerIdZNode.path(int(child))
        try:
            data, stat = store.client.get(path)
        except NoNodeError:     # gone since the listing: the children watch reports it
            continue
        except Exception as exc:
            raise ZooKeeperUnanswered(f"ZooKeeper did not answer the read of {path} ({type(exc).__name__})") from exc
        info = znodes.BrokerIdZNode.decode(data, int(child))
        brokers[info.id] = info
        epochs[info.id] = stat.czxid
    return brokers, epochs


def list_live_brokers(store: KazooStore) -> tuple[dict[int, BrokerInfo], dict[int, int]]:
    """:func:`read_live_brokers` of every child of ``/brokers/ids``."""
    path = znodes.BrokerIdsZNode.path()
    [ids] = store.execute([GetChildren(path)])
    return read_live_brokers(store, sorted(answered(path, ids).children))


class BrokerListings:
    """One broker's reads of the live brokers: one at a time, numbered 1, 2, ... in the order made."""

    def __init__(self, store: KazooStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._made = 0

    def read(self) -> tuple[dict[int, BrokerInfo], dict[int, int], int]:
        """(brokers, broker epochs, this listing's number); raises :class:`ZooKeeperUnanswered`."""
        with self._lock:
            brokers, epochs = list_live_brokers(self.store)
            self._made += 1
            return brokers, epochs, self._made


def read_full_cluster_state(store: KazooStore, listings: BrokerListings
                            ) -> tuple[dict[int, BrokerInfo], dict[str, TopicMetadata], dict[int, int], int]:
    """(brokers, topics, broker epochs, listing number) for a newly elected controller; raises
    :class:`ZooKeeperUnanswered` (the shell reads again) rather than leave anything out."""
    _, topics = read_cluster_state(store, log.warning)
    brokers, epochs, listing = listings.read()
    return brokers, topics, epochs, listing
