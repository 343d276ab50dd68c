"""The broker process: ZooKeeper session, log loading, listener, registration, clean shutdown."""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import json
import logging
import os
import random
import signal
import sys
from pathlib import Path
import time
from dataclasses import dataclass
from typing import Any, Callable

from strandline.broker.apis import api_versions_answer
from strandline.broker.broker import Broker
from strandline.broker.features import FinalizedFeatures
from strandline.broker.dynamic_config import apply_dynamic_broker_configs
from strandline.coordination.cluster_state import (ZooKeeperUnanswered, read_acls, read_cluster_state,
                                                  read_dynamic_broker_configs)
from strandline.core.config import BrokerConfig
from strandline.coordination.metadata import TopicMetadata
from strandline.coordination.znodes import BrokerInfo
from strandline.coordination import acl_znodes
from strandline.coordination import znodes
from strandline.coordination.store import GetData, ZkError
from strandline.errors import StrandlineError
from strandline.log.manager import LogManager
from strandline.runtime.disk import DirectoryLock, OsDisk
from strandline.runtime.monitoring import Monitoring
from strandline.runtime.loggers import current_loggers, install_repeat_limiter, register_level_names
from strandline.errors import describe_exception
from strandline.runtime.clock import now_ms
from strandline.runtime.connection import ListenerSpec
from strandline.runtime.server import BrokerShell, Stopper
from strandline.runtime import tls
from strandline.runtime.channels import ClientSecurity
from strandline.broker.quotas import sanitize
from strandline.security.authenticator import SaslAuthenticator
from strandline.security.sasl import (CLIENT_MECHANISMS, MECHANISMS, SaslContext, client_exchange, jaas_options,
                                      load_mechanisms)
from strandline.runtime.zk import KazooStore
from strandline.runtime.zk_watches import (elect_controller, get_or_create_cluster_id, to_loop,
                                           watch_acl_changes, watch_brokers, watch_config_changes,
                                           watch_controller, watch_delete_topics, watch_features,
                                           watch_isr_changes, watch_reassign_partitions, watch_session)

log = logging.getLogger("strandline.broker")

READY_PREFIX = "strandline broker ready"


def listener_specs(config: BrokerConfig, store: KazooStore,
                   features: FinalizedFeatures | None = None) -> list[ListenerSpec]:
    """How each listener is served: TLS contexts and SASL authenticators from its configuration.
    A listener that cannot be served (no key store, no SASL mechanism) stops start-up with one
    line naming it."""
    specs = []
    load_mechanisms()
    for listener in config.listeners:
        conf = config.listener_config(listener.name)
        ctx = tls.server_context(conf, listener.name, listener.protocol) if listener.uses_ssl else None
        factory = None
        if listener.uses_sasl:
            enabled = list(conf["sasl.enabled.mechanisms"])
            served = [m for m in enabled if m in MECHANISMS]
            if not served:
                raise StrandlineError(f"listener {listener.name} ({listener.protocol}): none of its "
                                      f"sasl.enabled.mechanisms ({', '.join(enabled) or 'none'}) is available; "
                                      f"available: {', '.join(MECHANISMS)}")
            for mechanism in enabled:
                if mechanism not in MECHANISMS:
                    log.warning("Listener %s: SASL mechanism %s is not available; offering %s", listener.name,
                                mechanism, ", ".join(served))
            for mechanism in served:
                try:
                    jaas_options(SaslContext(listener.name, conf), mechanism)
                except ValueError as exc:
                    raise StrandlineError(f"listener {listener.name}: {exc}") from None
            if "OAUTHBEARER" in served:
                _load_jwks(listener.name, conf)
            factory = _authenticator_factory(listener.name, conf, served, store, config, features)
        specs.append(ListenerSpec(listener, ctx, factory, conf["ssl.principal.mapping.rules"],
                                  config["connection.failed.authentication.delay.ms"],
                                  conf["sasl.server.max.receive.size"]))
    return specs


def _load_jwks(name: str, conf: dict[str, Any]) -> None:
    """OAUTHBEARER with signed tokens (KIP-768): the JWKS of ``sasl.oauthbearer.jwks.endpoint.url``,
    a file: URL read at each authentication (so that a rotated key set is used) or an http(s) one
    fetched in the background (:mod:`strandline.runtime.jwks`: a start-up whose endpoint does not
    answer goes on, refusing signed tokens until it does); the listener's validator is checked
    now, so that a configuration that cannot work stops the start."""
    from strandline.runtime import jwks
    from strandline.security import oauthbearer

    url = conf.get(oauthbearer.JWKS_ENDPOINT_URL)
    try:
        if url:
            kind, where = oauthbearer.jwks_endpoint(url)
            if kind == "file":
                path = Path(where)
                if not path.is_file():
                    raise oauthbearer.ConfigError(f"{oauthbearer.JWKS_ENDPOINT_URL}={url!r}: no such file")
                conf[oauthbearer.JWKS] = lambda: path.read_text()
            else:
                source = jwks.endpoint(name, oauthbearer.listener_validation_config(SaslContext(name, conf)), url)
                conf[oauthbearer.JWKS] = source
                conf[oauthbearer.JWKS_KEY_ID_MISSING] = source.key_id_missing
        oauthbearer.validator(oauthbearer.listener_validation_config(SaslContext(name, conf)))
        if isinstance(conf.get(oauthbearer.JWKS), jwks.HttpJwks):
            conf[oauthbearer.JWKS].start()
    except oauthbearer.ConfigError as exc:
        raise StrandlineError(f"listener {name}: {exc}") from None


def _authenticator_factory(name: str, conf: dict[str, Any], mechanisms: list[str], store: KazooStore,
                           config: BrokerConfig,
                           features: FinalizedFeatures | None = None) -> Callable[[], SaslAuthenticator]:
    def scram_credential(user: str, mechanism: str) -> str | None:
        """The user's stored SCRAM credential (``/config/users/<user>``), read from ZooKeeper."""
        [res] = store.execute([GetData(f"/config/users/{sanitize(user)}")])
        if res.error is not ZkError.NONE or not res.data:
            return None
        try:
            config = json.loads(res.data).get("config") or {}
        except ValueError:
            return None
        value = config.get(mechanism)
        return value if isinstance(value, str) else None

    def context(now: int) -> SaslContext:
        return SaslContext(name, conf, scram_credential, now)

    max_reauth_ms = conf["connections.max.reauth.ms"]
    return lambda: SaslAuthenticator(mechanisms, context, max_reauth_ms,
                                     versions=functools.partial(api_versions_answer, config, features=features))


def inter_broker_security(config: BrokerConfig) -> ClientSecurity | None:
    """How this broker connects to the others' inter-broker listener: TLS with the listener's
    trust store (the host name checked with ``ssl.endpoint.identification.algorithm=https``), SASL
    with ``sasl.mechanism.inter.broker.protocol`` and the JAAS config's username and password."""
    name = config.inter_broker_listener
    listener = next(l for l in config.advertised_listeners if l.name == name)
    if listener.protocol == "PLAINTEXT":
        return None
    conf = config.listener_config(name)
    ctx = tls.client_context(conf, name) if listener.uses_ssl else None
    sasl = None
    if listener.uses_sasl:
        mechanism = conf["sasl.mechanism.inter.broker.protocol"]
        if mechanism not in CLIENT_MECHANISMS:
            raise StrandlineError(f"sasl.mechanism.inter.broker.protocol {mechanism}: brokers authenticate to each "
                                  f"other with {', '.join(CLIENT_MECHANISMS)}")
        options = jaas_options(SaslContext(name, conf), mechanism)
        if "username" not in options or "password" not in options:
            raise StrandlineError(f"listener {name}: the {mechanism} JAAS config (listener.name.{name.lower()}."
                                  f"{mechanism.lower()}.sasl.jaas.config or sasl.jaas.config) needs the broker's "
                                  f"own username and password")
        sasl = (mechanism, client_exchange(mechanism, options["username"], options["password"]))
    return ClientSecurity(ctx, sasl)


def lock_log_dirs(log_dirs: list[str]) -> list[DirectoryLock]:
    """Lock every log dir as Kafka does: two brokers never share one."""
    locks: list[DirectoryLock] = []
    for log_dir in log_dirs:
        lock = DirectoryLock(log_dir)
        if not lock.acquire():
            for held in locks:
                held.release()
            raise StrandlineError(f"Failed to acquire lock on file .lock in {log_dir}. A Kafka instance in another "
                                  f"process or thread is using this directory ({lock.holder()}).")
        locks.append(lock)
    return locks


@dataclass
class Running:
    """What start-up has built so far."""

    broker: Broker | None = None
    shell: BrokerShell | None = None
    monitoring: Monitoring | None = None
    started: bool = False


async def _read_cluster_state(store: KazooStore, patience_s: float
                              ) -> tuple[dict[int, BrokerInfo], dict[str, TopicMetadata]]:
    """The cluster as ZooKeeper has it; a read it did not answer is made again for ``patience_s``."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return await asyncio.to_thread(read_cluster_state, store, log.warning)
        except ZooKeeperUnanswered as exc:
            if time.monotonic() > deadline:
                raise
            log.warning("%s; reading the cluster again", exc)
            await asyncio.sleep(1.0)


async def start_up(config: BrokerConfig, store: KazooStore, stopper: Stopper, running: Running) -> None:
    """Open the ZooKeeper session, load the logs, listen, register, elect, load the cluster, watch."""
    loop = asyncio.get_running_loop()
    v = config.values
    broker_id = config.broker_id
    await asyncio.to_thread(store.start, v["zookeeper.connection.timeout.ms"] / 1000.0)
    await asyncio.to_thread(store.ensure_persistent_paths)
    cluster_id = await asyncio.to_thread(get_or_create_cluster_id, store)
    brokers, topics = await _read_cluster_state(store, v["zookeeper.session.timeout.ms"] / 1000.0)
    dynamic = await asyncio.to_thread(read_dynamic_broker_configs, store, broker_id, log.warning)
    changed, warnings = apply_dynamic_broker_configs(config, *dynamic)
    for warning in warnings:
        log.warning("%s", warning)
    if changed:
        log.info("Dynamic broker configs in effect: %s", ", ".join(f"{k}={v}" for k, v in sorted(
            {**config.dynamic_default, **config.dynamic_broker}.items()) if k in config.values))
    logs = LogManager(OsDisk(), v["log.dirs"], config.log_config())
    began = now_ms()
    await asyncio.to_thread(logs.startup, began, {n: config.log_config(t.configs) for n, t in topics.items()})
    if logs.recovered_uncleanly:
        log.info("Recovered logs after an unclean shutdown in %d ms: %s", now_ms() - began, logs.recovery_stats)
    else:
        log.info("Loaded logs after a clean shutdown in %d ms (no recovery): %s",
                 now_ms() - began, logs.recovery_stats)
    broker = running.broker = Broker(config, logs, rng=random.Random(), now_ms=now_ms(), loggers=current_loggers())
    if broker.authorizer.enabled:       # every ACL is known before the first client is served
        await asyncio.to_thread(store.ensure_paths, acl_znodes.ACL_PATHS)
        broker.authorizer.load(await asyncio.to_thread(read_acls, store, log.warning))
    metrics_port = config.metrics_port
    monitoring = running.monitoring = Monitoring(broker) if metrics_port else None
    if monitoring is None:
        v["metrics.port"] = 0     # what DescribeConfigs reports: no endpoint
    specs = listener_specs(config, store, broker.features)
    shell = running.shell = BrokerShell(broker, store, v["socket.request.max.bytes"], stopper, monitoring,
                                        inter_broker_security(config))
    freeze_start_up_objects()           # its one full collection before anyone is served
    for spec in specs:
        port = await shell.listen(spec.listener.host, spec.listener.port, spec)
        if spec.listener.port == 0:
            config.bound(spec.listener.name, port)
    adv = config.advertised
    endpoints = config.registered_endpoints()
    me = BrokerInfo.of(broker_id, endpoints, v["broker.rack"])
    brokers[broker_id] = me
    metrics_address: tuple[str, int] | None = None
    if monitoring is not None and metrics_port is not None:
        try:
            metrics_address = await monitoring.start(config.listener.host, metrics_port, v["metrics.port"] == -1)
            v["metrics.port"] = metrics_address[1]     # what DescribeConfigs reports: the port in use
        except OSError as exc:
            raise StrandlineError(f"cannot serve metrics.port {config.metrics_port} on {config.listener.host}: "
                                  f"{exc.strerror or exc}") from None
    wait_s = v["zookeeper.session.timeout.ms"] / 1000.0 + 5.0
    broker.on_registered(await asyncio.to_thread(store.register_broker, broker_id, adv.host, adv.port,
                                                 v["broker.rack"], wait_s, endpoints,
                                                 broker.registration_clean_shutdown()))
    controller_id, controller_epoch, epoch_version = await asyncio.to_thread(elect_controller, store, broker_id)
    shell.run("loading the cluster", lambda: broker.load_metadata(
        cluster_id, brokers, topics, controller_id, controller_epoch, now_ms(), epoch_version))
    shell.run("loading the client quotas and group configs", lambda: broker.load_entity_configs(now_ms()))
    await asyncio.to_thread(watch_brokers, store, loop, shell)
    await asyncio.to_thread(watch_isr_changes, store, loop, shell)
    await asyncio.to_thread(watch_config_changes, store, loop, shell)
    await asyncio.to_thread(watch_reassign_partitions, store, loop, shell)
    await asyncio.to_thread(watch_delete_topics, store, loop, shell)
    await asyncio.to_thread(watch_features, store, loop, shell)
    if broker.authorizer.enabled:
        await asyncio.to_thread(watch_acl_changes, store, loop, shell)
    await asyncio.to_thread(watch_controller, store, loop, shell)
    def register_again() -> None:       # on kazoo's new session, from a worker thread
        now = config.advertised             # a dynamic advertised.listeners may have changed it
        epoch = store.register_broker(broker_id, now.host, now.port, v["broker.rack"], wait_s,
                                      config.registered_endpoints(),
                                      clean_shutdown=broker.registration_clean_shutdown())
        to_loop(loop, shell.run, "registering the broker again", lambda: broker.on_registered(epoch, now_ms()))

    watch_session(store, loop, shell, register_again)
    running.started = True
    if stopper.failure is None:
        log.info("Broker %d serving on %s (controller %d, epoch %d)", broker_id,
                 ", ".join(f"{n}://{h}:{p}" for n, h, p, _ in endpoints), controller_id, controller_epoch)
        metrics = f" metrics=http://{adv.host}:{metrics_address[1]}" if metrics_address is not None else ""
        others = "".join(f" {n.lower()}={h}:{p}" for n, h, p, _ in endpoints if n != adv.name)
        print(f"{READY_PREFIX} id={broker_id} listener={adv.host}:{adv.port}{metrics}{others}", flush=True)


async def serve(config: BrokerConfig) -> int:
    """Run the broker until SIGINT or SIGTERM (0; during start-up it stops at once) or until a task
    or callback of the shell fails (1, after one ERROR line)."""
    loop = asyncio.get_running_loop()
    stopper = Stopper(loop)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopper.requested.set)
    v = config.values
    broker_id = config.broker_id
    locks = lock_log_dirs(v["log.dirs"])
    store = KazooStore(v["zookeeper.connect"], v["zookeeper.session.timeout.ms"],
                       v["zookeeper.connection.timeout.ms"])
    running = Running()
    starting = loop.create_task(start_up(config, store, stopper, running))
    stop = loop.create_task(stopper.requested.wait())
    try:
        await asyncio.wait([starting, stop], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            log.info("Broker %d stopping during start-up", broker_id)
            starting.cancel()
            await asyncio.wait([starting])
        elif (failed := starting.exception()) is not None:
            raise failed
        else:
            await stop
            if stopper.failure is None and running.shell is not None:
                log.info("Broker %d shutting down", broker_id)
                await controlled_shutdown(running.shell, config)
    finally:
        stop.cancel()
        if running.monitoring is not None:
            await running.monitoring.close()
        if running.shell is not None:
            await running.shell.close()
        if running.started and running.broker is not None and stopper.failure is None:
            registration = await own_registration(store, broker_id)
            try:
                running.broker.shutdown(registration)
            except Exception as exc:
                stopper.fail("the clean shutdown", exc)
        store.listeners.clear()  # closing our own session is not an expiry
        await asyncio.to_thread(store.stop)
        for lock in locks:
            lock.release()
        log.info("Broker %d stopped", broker_id)
    return 0 if stopper.failure is None else 1


async def own_registration(store: KazooStore, broker_id: int) -> BrokerInfo | None:
    """This broker's registration as ZooKeeper holds it now (None if it cannot be read within a few
    seconds): whether a controller handled the unclean shutdown this life began with."""
    try:
        [res] = await asyncio.wait_for(asyncio.to_thread(store.execute, [GetData(znodes.BrokerIdZNode.path(broker_id))]),
                                       5.0)
        return znodes.BrokerIdZNode.decode(res.data, broker_id) if res.error is ZkError.NONE else None
    except (asyncio.TimeoutError, ValueError, TypeError, KeyError):
        return None


async def controlled_shutdown(shell: BrokerShell, config: BrokerConfig) -> None:
    """CTL-9: have the controller move our leaderships away first, within a bounded time."""
    v = config.values
    attempts = v["controlled.shutdown.max.retries"] + 1
    limit_s = attempts * (v["controlled.shutdown.retry.backoff.ms"] + 5000) / 1000.0
    shell.run("starting the controlled shutdown", lambda: shell.broker.begin_controlled_shutdown(now_ms()))
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


#: Net allocations of tracked objects between two young garbage collections (CPython's default: 700).
GC_YOUNG_THRESHOLD = 50_000


def tune_garbage_collector() -> None:
    """Collect the young generation every ``GC_YOUNG_THRESHOLD`` allocations rather than every 700.

    With CPython's default, the temporaries of one request about thousands of partitions (a
    LeaderAndIsr, an UpdateMetadata, the controller's 10,000 partition states) outlive two young
    collections while the request is being handled, reach the oldest generation and so set off full
    collections: with 10,000 partitions a broker ran one every second or two when busy, each
    0.1-0.9 s with the event loop stopped, and almost none found garbage (a controlled shutdown
    spent 1.6 s of its 6 s in them). Garbage without cycles goes by reference counting either way;
    a young collection of 50,000 objects takes about a millisecond (tens on a loaded machine).
    """
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def freeze_start_up_objects() -> None:
    """Leave what start-up made (modules, classes, protocol schemas, the configuration, the logs
    loaded: most of the heap) out of every later collection: collect once, then ``gc.freeze()`` it,
    before the broker listens.

    A full collection looks at every tracked object; without this, the first one while the broker
    serves (gen2, once start-up's young collections have added up) stopped the event loop for 20-100
    ms at 10 MB/s, mostly walking start-up's objects (1-22 ms with them frozen), and each later one
    walks them again. Frozen objects are still freed by reference counting; only a reference cycle
    among them would stay.
    """
    gc.collect()
    gc.freeze()


def run_broker(config: BrokerConfig) -> int:
    tune_allocator()
    tune_garbage_collector()
    register_level_names()                              # log4j's names, as in Kafka's server.log
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s [broker {config.broker_id}] %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    install_repeat_limiter()                            # a line repeated many times is counted, not repeated
    profile_path = os.environ.get("STRANDLINE_PROFILE")
    try:
        if profile_path:
            import cProfile

            profiler = cProfile.Profile()
            try:
                return profiler.runcall(asyncio.run, serve(config))
            finally:
                profiler.dump_stats(f"{profile_path}.{config.broker_id}")
        return asyncio.run(serve(config))
    except (StrandlineError, OSError) as exc:
        print(f"strandline broker: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        log.error("Stopping the broker: start-up failed: %s", describe_exception(exc))
        return 1
