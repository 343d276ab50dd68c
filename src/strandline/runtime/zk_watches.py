"""The broker shell's side of ZooKeeper: the watches that feed the core what changed (the
controller, the live brokers, ISR change notifications, config changes, ACLs, reassignments,
deletions, the finalized features), the controller election at start-up, the cluster id, and
the session's loss and renewal."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from typing import Any, Callable

from strandline.coordination import acl_znodes, zk_layout, znodes
from strandline.coordination.cluster_state import ZooKeeperUnanswered
from strandline.coordination.store import GetData, ZkError
from strandline.core.effects import Effect
from strandline.errors import StrandlineError
from strandline.runtime.clock import now_ms
from strandline.runtime.server import BrokerShell
from strandline.runtime.zk import KazooStore

log = logging.getLogger("strandline.broker")


def from_kazoo(loop: asyncio.AbstractEventLoop, shell: BrokerShell, what: str,
               callback: Callable[..., object]) -> Callable[..., None]:
    """Wrap a watch or listener callback, which kazoo runs on its own thread: whatever it raises
    stops the broker (kazoo would only log it and end the watch, leaving the broker deaf)."""
    def run(*args: Any) -> None:
        try:
            callback(*args)
        except Exception as exc:
            to_loop(loop, shell.stopper.fail, what, exc)
    return run


def to_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: Any) -> None:
    """``fn(*args)`` on the loop's thread, from kazoo's; nothing once the loop has closed (stopping)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass


def watch_controller(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed ``/controller`` to the core: when it disappears every broker runs for it (CTL-1)."""
    what = "the /controller watch"

    def on_data(data: bytes | None, version: int) -> None:  # kazoo's thread (the first call: ours)
        controller = znodes.ControllerZNode.decode(data) if data else None
        to_loop(loop, shell.run, what, lambda: shell.broker.on_controller_changed(controller, now_ms()))

    store.watch_data(znodes.ControllerZNode.path(), from_kazoo(loop, shell, what, on_data))


def watch_brokers(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed changes of ``/brokers/ids`` to the core (the controller acts on them, CTL-2)."""
    what = "the /brokers/ids watch"

    watched: set[str] = set()           # ids with a data watch (it follows the znode across re-registrations)
    lock = threading.Lock()

    def report() -> None:
        """Read the live brokers (afresh: a watch event's own list may be older than a listing
        read since) and hand them to the core with their listing's number."""
        try:
            brokers, epochs, listing = shell.broker_listings.read()
        except ZooKeeperUnanswered as exc:      # not "no brokers": read them all again shortly
            log.warning("%s; reading the live brokers again in 1 s", exc)
            retry = threading.Timer(1.0, from_kazoo(loop, shell, what, report))
            retry.daemon = True
            retry.start()
            return
        to_loop(loop, shell.run, what, lambda: shell.broker.on_brokers_changed(brokers, epochs, now_ms(), listing))

    def watch_registration(child: str) -> None:
        """A broker that rewrites its registration (a new advertised listener) is a broker
        modification: its data watch reports the brokers again."""
        first = [True]

        def on_data(data: bytes | None, version: int) -> None:
            if first[0] or data is None:        # registrations and departures: the children watch's
                first[0] = False
                return
            report()

        store.watch_data(znodes.BrokerIdZNode.path(int(child)), from_kazoo(loop, shell, what, on_data))

    def on_children(children: list[str]) -> None:  # kazoo's thread (the first call: ours)
        report()
        with lock:
            fresh = [c for c in children if c not in watched]
            watched.update(fresh)
        for child in fresh:
            watch_registration(child)

    store.watch_children(znodes.BrokerIdsZNode.path(), from_kazoo(loop, shell, what, on_children))


def _feed_children(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell, path: str,
                   deliver: Callable[[list[str], int], list[Effect]]) -> None:
    """Hand the core ``deliver(children, now_ms)`` now and after every change of ``path``'s children."""
    what = f"the {path} watch"

    def on_children(children: list[str]) -> None:  # kazoo's thread (the first call: ours)
        to_loop(loop, shell.run, what, lambda: deliver(list(children), now_ms()))

    store.watch_children(path, from_kazoo(loop, shell, what, on_children))


def _feed_data(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell, path: str,
               deliver: Callable[[bytes | None, int], list[Effect]]) -> None:
    """Hand the core ``deliver(data, version)`` now and after every change of ``path``'s data
    (``None, -1`` while it does not exist)."""
    what = f"the {path} watch"

    def on_data(data: bytes | None, version: int) -> None:  # kazoo's thread (the first call: ours)
        to_loop(loop, shell.run, what, lambda: deliver(data, version))

    store.watch_data(path, from_kazoo(loop, shell, what, on_data))


def watch_config_changes(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed ``/config/changes`` to the core (dynamic topic and broker configs)."""
    _feed_children(store, loop, shell, znodes.ConfigEntityChangeNotificationZNode.path(),
                   shell.broker.on_config_changes)


def watch_acl_changes(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed ``/kafka-acl-changes`` and ``/kafka-acl-extended-changes`` to the core's authorizer."""
    for root in (acl_znodes.AclChangeNotificationZNode.LITERAL, acl_znodes.AclChangeNotificationZNode.EXTENDED):
        _feed_children(store, loop, shell, root, functools.partial(shell.broker.on_acl_changes, root))


def watch_reassign_partitions(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed ``/admin/reassign_partitions`` to the core (the controller starts what it lists, CTL-11)."""
    _feed_data(store, loop, shell, znodes.ReassignPartitionsZNode.path(),
               lambda data, version: shell.broker.on_reassign_partitions_changed(data, now_ms()))


def watch_features(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed ``/feature`` to the core: the cluster's finalized feature levels (KIP-584)."""
    _feed_data(store, loop, shell, znodes.FeatureZNode.path(), shell.broker.on_features_changed)


def watch_delete_topics(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed ``/admin/delete_topics`` to the core (the controller takes up a deletion recorded there)."""
    _feed_children(store, loop, shell, znodes.DeleteTopicsZNode.path(), shell.broker.on_delete_topics_changed)


def watch_isr_changes(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed ``/isr_change_notification`` to the core (the controller propagates ISR changes, ISR-6)."""
    _feed_children(store, loop, shell, znodes.IsrChangeNotificationZNode.path(),
                   shell.broker.on_isr_change_notifications)


def elect_controller(store: KazooStore, broker_id: int) -> tuple[int, int, int | None]:
    """Try to become controller (ephemeral /controller + /controller_epoch + 1); returns
    (controller id, epoch, version of /controller_epoch when we won)."""
    for _ in range(10):
        [epoch_res] = store.execute([GetData(znodes.ControllerEpochZNode.path())])
        if epoch_res.error is ZkError.NO_NODE:
            epoch, version = 0, -1
        else:
            epoch, version = znodes.ControllerEpochZNode.decode(epoch_res.data), epoch_res.version
        results = store.transaction(zk_layout.controller_election_ops(broker_id, epoch + 1, version, now_ms()))
        if all(r.error is ZkError.NONE for r in results):
            return broker_id, epoch + 1, results[1].version
        [ctl] = store.execute([GetData(znodes.ControllerZNode.path())])
        if ctl.error is ZkError.NONE:
            [epoch_res] = store.execute([GetData(znodes.ControllerEpochZNode.path())])
            current = znodes.ControllerEpochZNode.decode(epoch_res.data) if epoch_res.error is ZkError.NONE else 0
            return znodes.ControllerZNode.decode(ctl.data), current, None
    raise StrandlineError("could not elect a controller in ZooKeeper")


def get_or_create_cluster_id(store: KazooStore) -> str:
    from strandline.coordination.store import Create

    path = znodes.ClusterIdZNode.path()
    [res] = store.execute([GetData(path)])
    if res.error is ZkError.NONE:
        return znodes.ClusterIdZNode.decode(res.data)
    cluster_id = znodes.new_cluster_id()
    [created] = store.execute([Create(path, znodes.ClusterIdZNode.encode(cluster_id), make_parents=True)])
    if created.error is ZkError.NODE_EXISTS:
        [res] = store.execute([GetData(path)])
        return znodes.ClusterIdZNode.decode(res.data)
    return cluster_id


def watch_session(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell,
                  register: Callable[[], None]) -> None:
    """When the ZooKeeper session expires a controller resigns at once (NET-8); kazoo then opens a
    new session and the broker registers again."""
    state = {"lost": False}
    what = "the ZooKeeper session listener"

    def on_state(name: str) -> None:  # kazoo's thread
        if name == "LOST":
            state["lost"] = True
            to_loop(loop, log.warning, "ZooKeeper session expired; registering again on reconnect")
            to_loop(loop, shell.run, what, lambda: shell.broker.on_session_lost(now_ms()))
        elif name == "CONNECTED" and state["lost"]:
            state["lost"] = False
            to_loop(loop, lambda: shell.spawn("registering the broker again in ZooKeeper", asyncio.to_thread(register)))

    store.add_listener(from_kazoo(loop, shell, what, on_state))
