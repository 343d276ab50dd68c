"""The broker process: ZooKeeper session, log loading, listener, registration, clean shutdown."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import random
import signal
import sys

from strandline.broker.broker import Broker
from strandline.broker.cluster_state import read_cluster_state
from strandline.broker.config import BrokerConfig
from strandline.coordination.znodes import BrokerInfo
from strandline.controller import zk_layout
from strandline.coordination import znodes
from strandline.coordination.store import GetChildren, GetData, ZkError
from strandline.errors import StrandlineError
from strandline.log.manager import LogManager
from strandline.runtime.disk import OsDisk
from strandline.runtime.server import BrokerShell, now_ms
from strandline.runtime.zk import KazooStore

log = logging.getLogger("strandline.broker")

READY_PREFIX = "strandline broker ready"


def read_live_brokers(store: KazooStore, children: list[str]) -> tuple[dict[int, BrokerInfo], dict[int, int]]:
    """Registrations under ``/brokers/ids`` and their broker epochs (the znode's czxid, as Kafka)."""
    brokers: dict[int, BrokerInfo] = {}
    epochs: dict[int, int] = {}
    for child in children:
        try:
            data, stat = store.client.get(znodes.BrokerIdZNode.path(int(child)))
        except Exception:  # gone since the listing, or ZooKeeper unreachable: the next event tells
            continue
        info = znodes.BrokerIdZNode.decode(data, int(child))
        brokers[info.id] = info
        epochs[info.id] = stat.czxid
    return brokers, epochs


def read_full_cluster_state(store: KazooStore) -> tuple:
    """(brokers, topics, broker epochs) for a newly elected controller."""
    _, topics = read_cluster_state(store)
    [ids] = store.execute([GetChildren(znodes.BrokerIdsZNode.path())])
    brokers, epochs = read_live_brokers(store, list(ids.children))
    return brokers, topics, epochs


def watch_controller(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed ``/controller`` to the core: when it disappears every broker runs for it (CTL-1)."""
    def on_data(data: bytes | None, version: int) -> None:  # kazoo's thread (the first call: ours)
        controller = znodes.ControllerZNode.decode(data) if data else None
        loop.call_soon_threadsafe(lambda: shell.apply(shell.broker.on_controller_changed(controller, now_ms())))

    store.watch_data(znodes.ControllerZNode.path(), on_data)


def watch_brokers(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed changes of ``/brokers/ids`` to the core (the controller acts on them, CTL-2)."""
    def on_children(children: list[str]) -> None:  # kazoo's thread (the first call: ours)
        brokers, epochs = read_live_brokers(store, children)
        loop.call_soon_threadsafe(
            lambda: shell.apply(shell.broker.on_brokers_changed(brokers, epochs, now_ms())))

    store.watch_children(znodes.BrokerIdsZNode.path(), on_children)


def watch_isr_changes(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell) -> None:
    """Feed ``/isr_change_notification`` to the core (the controller propagates ISR changes, ISR-6)."""
    def on_children(children: list[str]) -> None:  # kazoo's thread (the first call: ours)
        loop.call_soon_threadsafe(
            lambda: shell.apply(shell.broker.on_isr_change_notifications(list(children), now_ms())))

    store.watch_children(znodes.IsrChangeNotificationZNode.path(), on_children)


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


def watch_session(store: KazooStore, loop: asyncio.AbstractEventLoop, shell: BrokerShell, register) -> None:
    """When the ZooKeeper session expires a controller resigns at once (NET-8); kazoo then opens a
    new session and the broker registers again."""
    state = {"lost": False}

    def on_state(name: str) -> None:  # kazoo's thread
        if name == "LOST":
            state["lost"] = True
            loop.call_soon_threadsafe(log.warning, "ZooKeeper session expired; registering again on reconnect")
            loop.call_soon_threadsafe(lambda: shell.apply(shell.broker.on_session_lost(now_ms())))
        elif name == "CONNECTED" and state["lost"]:
            state["lost"] = False
            loop.call_soon_threadsafe(lambda: loop.create_task(asyncio.to_thread(register)))

    store.add_listener(on_state)


async def serve(config: BrokerConfig) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    v = config.values
    broker_id = config.broker_id
    store = KazooStore(v["zookeeper.connect"], v["zookeeper.session.timeout.ms"],
                       v["zookeeper.connection.timeout.ms"])
    await asyncio.to_thread(store.start, v["zookeeper.connection.timeout.ms"] / 1000.0)
    shell = None
    broker = None
    try:
        await asyncio.to_thread(store.ensure_persistent_paths)
        cluster_id = await asyncio.to_thread(get_or_create_cluster_id, store)
        brokers, topics = await asyncio.to_thread(read_cluster_state, store)
        logs = LogManager(OsDisk(), v["log.dirs"], config.log_config())
        started = now_ms()
        await asyncio.to_thread(logs.startup, started, {n: config.log_config(t.configs) for n, t in topics.items()})
        if logs.recovered_uncleanly:
            log.info("Recovered logs after an unclean shutdown in %d ms: %s", now_ms() - started, logs.recovery_stats)
        else:
            log.info("Loaded logs after a clean shutdown in %d ms (no recovery): %s",
                     now_ms() - started, logs.recovery_stats)
        broker = Broker(config, logs, rng=random.Random(), now_ms=now_ms())
        adv = config.advertised
        me = BrokerInfo(broker_id, adv.host, adv.port, v["broker.rack"])
        brokers[broker_id] = me
        shell = BrokerShell(broker, store, v["socket.request.max.bytes"])
        await shell.listen(config.listener.host, config.listener.port)
        wait_s = v["zookeeper.session.timeout.ms"] / 1000.0 + 5.0
        await asyncio.to_thread(store.register_broker, broker_id, adv.host, adv.port, v["broker.rack"], wait_s)
        controller_id, controller_epoch, epoch_version = await asyncio.to_thread(elect_controller, store, broker_id)
        shell.apply(broker.load_metadata(cluster_id, brokers, topics, controller_id, controller_epoch, now_ms(),
                                         epoch_version))
        await asyncio.to_thread(watch_brokers, store, loop, shell)
        await asyncio.to_thread(watch_isr_changes, store, loop, shell)
        await asyncio.to_thread(watch_controller, store, loop, shell)
        watch_session(store, loop, shell, lambda: store.register_broker(
            broker_id, adv.host, adv.port, v["broker.rack"], wait_s))
        log.info("Broker %d serving on %s:%d (controller %d, epoch %d)", broker_id, adv.host, adv.port,
                 controller_id, controller_epoch)
        print(f"{READY_PREFIX} id={broker_id} listener={adv.host}:{adv.port}", flush=True)
        await stop.wait()
        log.info("Broker %d shutting down", broker_id)
        await controlled_shutdown(shell, config)
    finally:
        if shell is not None:
            await shell.close()
        if broker is not None:
            broker.shutdown()
        store.listeners.clear()  # closing our own session is not an expiry
        await asyncio.to_thread(store.stop)
        log.info("Broker %d stopped", broker_id)


async def controlled_shutdown(shell: BrokerShell, config: BrokerConfig) -> None:
    """CTL-9: have the controller move our leaderships away first, within a bounded time."""
    v = config.values
    attempts = v["controlled.shutdown.max.retries"] + 1
    limit_s = attempts * (v["controlled.shutdown.retry.backoff.ms"] + 5000) / 1000.0
    shell.apply(shell.broker.begin_controlled_shutdown(now_ms()))
    try:
        await asyncio.wait_for(shell.controlled_shutdown_done.wait(), limit_s)
    except asyncio.TimeoutError:
        log.warning("Controlled shutdown did not finish within %.0f s; stopping anyway", limit_s)


def tune_allocator() -> None:
    """Serve large buffers (request frames, fetch reads) from the reusable heap, not fresh mmaps.

    glibc maps every allocation above its mmap threshold afresh, and first-touch page faults then
    dominate the cost of copying megabyte-sized record batches.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 256 << 20)   # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1024 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def run_broker(config: BrokerConfig) -> int:
    tune_allocator()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s [broker {config.broker_id}] %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    profile_path = os.environ.get("STRANDLINE_PROFILE")
    try:
        if profile_path:
            import cProfile

            profiler = cProfile.Profile()
            try:
                profiler.runcall(asyncio.run, serve(config))
            finally:
                profiler.dump_stats(f"{profile_path}.{config.broker_id}")
        else:
            asyncio.run(serve(config))
    except StrandlineError as exc:
        print(f"strandline broker: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"strandline broker: {exc}", file=sys.stderr)
        return 1
    return 0
