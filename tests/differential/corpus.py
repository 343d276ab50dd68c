"""The differential corpus: request sequences sent to Kafka 3.9 and to Strandline, in this order.

Every API key and version a Kafka 2.8 broker answers (docs/compatibility.md, "API versions") is
sent at least once; versions Strandline deliberately does not serve are sent too and expect the
documented difference (:data:`KEPT`). Around them, the errors a client meets: unknown topics,
asking a follower, bad config names and values, offsets out of range, fenced leader epochs,
asking a broker that is not the coordinator, oversized batches, broken records, invalid topic
names, duplicate entries.

A new case is a few lines: ``one(name, api, version, body, to=...)`` or, for every version of a
range, ``each(name, api, versions, body, to=...)``; bodies and targets are values or functions
of the side's :class:`~tests.differential.runner.Ctx` (``c.t("name")`` is a name of this run,
``c.answers[label]`` an earlier answer of that side).
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Iterable

from tests.differential import records as rec
from tests.differential.runner import Case, Ctx, Step
from tests.differential.wire import Raw

P = "responses.0.partitions.0."     # a Fetch answer's only partition

# -- the topic layout, the same on both clusters: explicit assignments, leaders = first replica ---
LAYOUT: dict[str, tuple[list[list[int]], dict[str, str]]] = {
    "p1": ([[1, 2, 3]], {}),
    "p3": ([[1, 2, 3], [2, 3, 1], [3, 1, 2]], {}),
    "two": ([[1, 2]], {}),
    "small": ([[2, 3, 1]], {"max.message.bytes": "1024"}),
    "compact": ([[3, 1, 2]], {"cleanup.policy": "compact"}),
    "moving": ([[1, 2]], {}),
    "del": ([[2, 1, 3]], {}),
    "cfg": ([[1, 2, 3]], {"retention.ms": "600000"}),
    "txn": ([[2, 3, 1]], {}),
    "old": ([[1, 2, 3]], {}),
}

#: Differences kept, each with its reason (docs/compatibility.md, "Differential tests", says more).
KEPT: dict[str, str] = {
    "controlled-shutdown-v0-v1": "ControlledShutdown v0 and v1 carry no broker epoch: Strandline refuses them with "
                                 "STALE_BROKER_EPOCH (a forgery cannot be told apart); Kafka acts on them "
                                 "(here BROKER_NOT_AVAILABLE for an unknown broker)",
    "no-broker-epoch": "LeaderAndIsr v0-v1, StopReplica v0, UpdateMetadata v0-v4 carry no broker epoch: Strandline "
                       "refuses them with STALE_BROKER_EPOCH (a client's cannot be told from the controller's); "
                       "Kafka takes them (here STALE_CONTROLLER_EPOCH for controller epoch 0)",
    "unknown-broker-assignment": "CreateTopics with a replica on a broker that is not registered: Kafka (ZooKeeper "
                                 "mode) creates the topic, which stays offline, and answers REQUEST_TIMED_OUT once the "
                                 "request's timeout has passed; Strandline refuses it with INVALID_REPLICA_ASSIGNMENT",
    "fetch-error-offsets": "a Fetch answer's partition with an error (OFFSET_OUT_OF_RANGE here) carries the "
                           "partition's high watermark, last stable and log start offsets in Strandline, -1 in Kafka",
    "leaders-serve-consumers": "without replica.selector.class only leaders serve consumers (CLI-2); Kafka lets a "
                               "follower serve Fetch v11+ (KIP-392) whatever the selector",
    "fetch-session-resend": "an incremental fetch that moves a partition's fetch offset hears the partition again "
                            "in Strandline (its high watermark and offsets); Kafka leaves it out when nothing changed",
    "list-offsets-v0-by-time": "ListOffsets v0 by timestamp: Kafka dates each segment by its file's modification "
                               "time, Strandline by its largest record timestamp",
    "duplicate-append-time": "a duplicate idempotent batch: Kafka answers the first append's timestamp as "
                             "log_append_time even in a CreateTime topic, Strandline -1 (the field means nothing there)",
    "producer-last-timestamp": "DescribeProducers' last_timestamp after a transaction ended: Kafka takes the "
                               "marker's (the coordinator's clock), Strandline keeps the last data batch's",
    "reassignment-epochs": "a reassignment bumps the leader epoch once per phase in Kafka (3 here), once per "
                           "leader change or ISR shrink in Strandline (2); both only grow",
    "config-value-errors": "AlterConfigs/IncrementalAlterConfigs with a bad value (or APPEND to a non-list): "
                           "INVALID_REQUEST as Kafka 2.8's ZkAdminManager answers; Kafka 3.9 answers INVALID_CONFIG",
    "unknown-config-operation": "IncrementalAlterConfigs with an operation that does not exist: Kafka fails with "
                                "UNKNOWN_SERVER_ERROR, Strandline answers INVALID_REQUEST",
    "describe-configs-v0-is-default": "DescribeConfigs v0's is_default: true for a default value in Strandline, as "
                                      "Kafka up to 2.6 wrote it; Kafka 2.7+ never sets the field (false)",
    "api-versions": "ApiVersions lists Strandline's own table (docs/compatibility.md), not Kafka 3.9's; v3's "
                    "finalized features name transaction.version at the broker's transaction.version (2 by "
                    "default, as a fresh Kafka 4.0 cluster; a Kafka 3.9 cluster on ZooKeeper finalizes none)",
}


def broker(n: int) -> Callable[[Ctx], int]:
    return lambda c: n


def leader(topic: str, p: int = 0) -> Callable[[Ctx], int]:
    return lambda c: LAYOUT[topic][0][p][0]


def follower(topic: str, p: int = 0) -> Callable[[Ctx], int]:
    return lambda c: LAYOUT[topic][0][p][1]


def outsider(topic: str, p: int = 0) -> Callable[[Ctx], int]:
    """A broker holding no replica of the partition."""
    return lambda c: next(b for b in (1, 2, 3) if b not in LAYOUT[topic][0][p])


def controller() -> Callable[[Ctx], int]:
    return lambda c: c.controller()


def coordinator(key: str, key_type: int = 0) -> Callable[[Ctx], int]:
    return lambda c: c.coordinator(c.t(key), key_type)


def not_coordinator(key: str, key_type: int = 0) -> Callable[[Ctx], int]:
    return lambda c: next(b for b in (1, 2, 3) if b != c.coordinator(c.t(key), key_type))


def one(name: str, api: int, version: int, body: Any, to=None, kept=None, **kw) -> Case:
    return Case(f"{name}-v{version}", [Step(api, version, body, to, **kw)], kept)


def each(name: str, api: int, versions: Iterable[int], body: Any, to=None, kept=None, **kw) -> list[Case]:
    """One case per version, the same body (a version's schema keeps the fields it has)."""
    return [one(name, api, v, body, to, kept, **kw) for v in versions]


# -- helpers for bodies -------------------------------------------------------------------------

def produce(topic: str, records: bytes | Callable[[Ctx], bytes], p: int = 0, acks: int = -1,
            txn: str | None = None) -> Callable[[Ctx], dict]:
    def body(c: Ctx) -> dict:
        data = records(c) if callable(records) else records
        return {"transactional_id": c.t(txn) if txn else None, "acks": acks, "timeout": 10000,
                "topic_data": [{"name": c.t(topic), "partition_data": [{"index": p, "records": data}]}]}
    return body


def fetch(topic: str, offset: int = 0, p: int = 0, epoch: int = -1, max_bytes: int = 1 << 20,
          session_id: int = 0, session_epoch: int = -1, isolation: int = 0) -> Callable[[Ctx], dict]:
    def body(c: Ctx) -> dict:
        return {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": isolation,
                "session_id": session_id, "session_epoch": session_epoch,
                "topics": [{"topic": c.t(topic), "partitions": [
                    {"partition": p, "current_leader_epoch": epoch, "fetch_offset": offset, "log_start_offset": -1,
                     "partition_max_bytes": max_bytes}]}],
                "forgotten_topics_data": [], "rack_id": ""}
    return body


def list_offsets(topic: str, timestamp: int, p: int = 0, epoch: int = -1, dup: bool = False) -> Callable[[Ctx], dict]:
    def body(c: Ctx) -> dict:
        parts = [{"partition_index": p, "current_leader_epoch": epoch, "timestamp": timestamp, "max_num_offsets": 1}]
        return {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": c.t(topic), "partitions": parts * (2 if dup else 1)}]}
    return body


def metadata(*topics: str, auto: bool = False) -> Callable[[Ctx], dict]:
    def body(c: Ctx) -> dict:
        return {"topics": [{"name": _name(c, t)} for t in topics],
                "allow_auto_topic_creation": auto, "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
    return body


def _name(c: Ctx, name: str) -> str:
    """``=literal`` is sent as is (an invalid or foreign name); other names are this run's."""
    return name[1:] if name.startswith("=") else c.t(name)


def create(*topics: dict, validate_only: bool = False, timeout: int = 10000) -> Callable[[Ctx], dict]:
    """CreateTopics of ``topics``: dicts with name (see :func:`_name`), and num_partitions and
    replication_factor, or assignments (a list of replica lists), and configs."""
    def body(c: Ctx) -> dict:
        out = []
        for t in topics:
            out.append({"name": _name(c, t["name"]), "num_partitions": t.get("num_partitions", -1),
                        "replication_factor": t.get("replication_factor", -1),
                        "assignments": [{"partition_index": i, "broker_ids": r}
                                        for i, r in enumerate(t.get("assignments", []))],
                        "configs": [{"name": k, "value": v} for k, v in t.get("configs", {}).items()]})
        return {"topics": out, "timeout": timeout, "validate_only": validate_only}
    return body


def leaders_known(*topics: str) -> Callable[[Any], bool]:
    """Metadata's answer names a leader for every partition of every topic asked."""
    def ok(answer: Any) -> bool:
        if not isinstance(answer, dict):
            return False
        ts = answer["topics"]
        return len(ts) == len(topics) and all(t["error_code"] == 0 and t["partitions"] and
                                              all(p["leader_id"] >= 0 and p["error_code"] == 0
                                                  for p in t["partitions"]) for t in ts)
    return ok


def hw_is(n: int) -> Callable[[Any], bool]:
    def ok(answer: Any) -> bool:
        try:
            return answer["responses"][0]["partitions"][0]["high_watermark"] == n
        except (TypeError, KeyError, IndexError):
            return False
    return ok


def wait_replicated(topic: str, n: int, p: int = 0) -> list[Step]:
    """The leader's high watermark at ``n``: every replica in the ISR holds the ``n`` records."""
    return [Step(1, 4, fetch(topic, offset=0, p=p), leader(topic, p), compare=False, until=hw_is(n))]


# -- the corpus ---------------------------------------------------------------------------------

def build() -> list[Case]:
    cases: list[Case] = []
    add = cases.append

    # the layout, created with explicit assignments, then waited for on every broker
    layout = [{"name": name, "assignments": assignment, "configs": configs}
              for name, (assignment, configs) in LAYOUT.items()]
    add(Case("create-layout", [Step(19, 5, create(*layout), controller())] +
             [Step(3, 7, metadata(*LAYOUT), broker(b), compare=False, until=leaders_known(*LAYOUT))
              for b in (1, 2, 3)]))

    # ApiVersions: the lists differ by design; everything else is compared
    cases += each("api-versions", 18, range(0, 4), {"client_software_name": "differential",
                                                   "client_software_version": "1.0"},
                  kept=("api-versions", ("api_keys.*", "finalized_features_epoch", "finalized_features.*")))
    cases += each("api-versions-bad-software-name", 18, [3], {"client_software_name": "no spaces allowed!",
                                                             "client_software_version": "1.0"})

    # Metadata, every version: known topics, an unknown one, an invalid name
    cases += each("metadata", 3, range(0, 12), metadata("p1", "p3", "two"))
    cases += each("metadata-unknown-topic", 3, range(1, 12), metadata("p1", "nosuch"))
    cases += each("metadata-invalid-name", 3, [1, 4, 9, 11], metadata("=bad name!", "=" + "x" * 250))

    # Produce, every version, to the leader; v0-v2 carry message sets of format v0 and v1
    for v in range(0, 10):
        data = rec.legacy(0, b"v0-a", b"v0-b") if v == 0 else rec.legacy(1, f"m{v}".encode()) if v < 3 \
            else rec.batch(f"p{v}-a".encode(), f"p{v}-b".encode())
        add(one("produce", 0, v, produce("p1", data), leader("p1")))
    cases += each("produce-to-follower", 0, [3, 9], produce("p1", rec.batch(b"x")), follower("p1"))
    cases += each("produce-to-outsider", 0, [9], produce("two", rec.batch(b"x")), outsider("two"))
    cases += each("produce-unknown-topic", 0, [2, 9], produce("nosuch", rec.batch(b"x")))
    cases += each("produce-unknown-partition", 0, [9], produce("p1", rec.batch(b"x"), p=7), leader("p1"))
    cases += each("produce-too-large", 0, [3, 9], produce("small", rec.batch(b"y" * 2000)), leader("small"))
    cases += each("produce-bad-crc", 0, [3, 9], produce("p1", rec.bad_crc(rec.batch(b"z"))), leader("p1"))
    cases += each("produce-magic-1-in-v3", 0, [3, 9], produce("p1", rec.legacy(1, b"old")), leader("p1"))
    cases += each("produce-magic-3", 0, [9], produce("p1", rec.magic(rec.batch(b"z"), 3)), leader("p1"))
    cases += each("produce-bad-acks", 0, [9], produce("p1", rec.batch(b"z"), acks=2), leader("p1"))
    cases += each("produce-compact-no-key", 0, [9], produce("compact", rec.batch(b"nokey")), leader("compact"))
    cases += each("produce-compact-keyed", 0, [9], produce("compact", rec.keyed((b"k", b"v"))), leader("compact"))
    cases += each("produce-invalid-topic-name", 0, [9], produce("=bad name!", rec.batch(b"z")))
    cases += each("produce-old-gzip", 0, [2], produce("old", rec.legacy(1, b"g1", b"g2", codec=1)), leader("old"))

    # every replica caught up: 2 (v0) + 1 + 1 + 2 * 7 (v3-v9) = 18 records in p1
    add(Case("p1-replicated", wait_replicated("p1", 18)))

    # Fetch, every version, from the leader; v0-v3 read down-converted message sets
    cases += each("fetch", 1, range(0, 13), fetch("p1"), leader("p1"))
    cases += each("fetch-middle", 1, [4, 12], fetch("p1", offset=5), leader("p1"))
    cases += each("fetch-out-of-range", 1, [0, 4, 12], fetch("p1", offset=1000), leader("p1"),
                  kept=("fetch-error-offsets", (f"{P}high_watermark", f"{P}last_stable_offset", f"{P}log_start_offset")))
    cases += each("fetch-unknown-topic", 1, [4, 12], fetch("nosuch"), broker(1))
    cases += each("fetch-follower", 1, [4, 10], fetch("p1"), follower("p1"))
    cases += each("fetch-follower", 1, [11, 12], fetch("p1"), follower("p1"), kept=("leaders-serve-consumers", (f"{P}*",)))
    cases += each("fetch-outsider", 1, [11, 12], fetch("two"), outsider("two"))
    cases += each("fetch-epoch-too-new", 1, [9, 12], fetch("p1", epoch=7), leader("p1"))
    cases += each("fetch-max-bytes-small", 1, [3, 12], fetch("p1", max_bytes=10), leader("p1"))
    add(Case("fetch-session-v12", kept=("fetch-session-resend", ("1.responses.0",)), steps=[
        Step(1, 12, fetch("p1", session_epoch=0), leader("p1"), label="full"),
        Step(1, 12, lambda c: fetch("p1", offset=18, session_id=c.answers["full"]["session_id"],
                                    session_epoch=1)(c), leader("p1")),
        Step(1, 12, lambda c: fetch("p1", offset=18, session_id=c.answers["full"]["session_id"],
                                    session_epoch=5)(c), leader("p1")),
    ]))
    cases += each("fetch-unknown-session", 1, [7, 12], fetch("p1", session_id=123456, session_epoch=3), leader("p1"))

    # ListOffsets, every version: earliest, latest, by timestamp; a follower; an unknown topic
    for ts, label in ((-2, "earliest"), (-1, "latest"), (rec.TS, "timestamp")):
        cases += [Case(f"list-offsets-{label}-v{v}", [Step(2, v, list_offsets("p1", ts), leader("p1"))],
                       ("list-offsets-v0-by-time", ("topics.0.partitions.0.old_style_offsets.0",))
                       if (v, label) == (0, "timestamp") else None) for v in range(0, 7)]
    cases += each("list-offsets-follower", 2, [0, 1, 6], list_offsets("p1", -1), follower("p1"))
    cases += each("list-offsets-unknown-topic", 2, [1, 6], list_offsets("nosuch", -1))
    cases += each("list-offsets-epoch-too-new", 2, [4, 6], list_offsets("p1", -1, epoch=9), leader("p1"))
    cases += each("list-offsets-duplicate", 2, [1, 2, 6], list_offsets("p1", -1, dup=True), leader("p1"))

    # OffsetForLeaderEpoch, every version
    def ofle(topic: str, epoch: int, current: int = -1) -> Callable[[Ctx], dict]:
        return lambda c: {"replica_id": -1, "topics": [{"topic": c.t(topic), "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]}
    cases += each("offset-for-leader-epoch", 23, range(0, 5), ofle("p1", 0), leader("p1"))
    cases += each("offset-for-leader-epoch-unknown-epoch", 23, [2, 4], ofle("p1", 5), leader("p1"))
    cases += each("offset-for-leader-epoch-follower", 23, [0, 4], ofle("p1", 0), follower("p1"))
    cases += each("offset-for-leader-epoch-unknown-topic", 23, [4], ofle("nosuch", 0))
    cases += each("offset-for-leader-epoch-fenced-too-new", 23, [2, 4], ofle("p1", 0, current=3), leader("p1"))

    cases += groups()
    cases += transactions()
    cases += admin()
    cases += configs()
    cases += sasl_token_scram_isr_apis()
    return cases


# -- hand-laid bodies (versions no library here describes) ----------------------------------------

def i8(n: int) -> bytes:
    return struct.pack(">b", n)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def s16(text: str | None) -> bytes:
    if text is None:
        return i16(-1)
    data = text.encode()
    return i16(len(data)) + data


def arr(*items: bytes) -> bytes:
    return i32(len(items)) + b"".join(items)


# -- groups -------------------------------------------------------------------------------------

def _join(group: str, version: int, member: Callable[[Ctx], str] | str = "") -> Callable[[Ctx], dict]:
    return lambda c: {"group_id": c.t(group), "session_timeout": 10000, "rebalance_timeout": 10000,
                      "member_id": member(c) if callable(member) else member, "group_instance_id": None,
                      "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": subscription(c, "p1")}]}


def subscription(c: Ctx, *topics: str) -> bytes:
    """A consumer's subscription (ConsumerProtocolSubscription v0): the topics, no user data."""
    return i16(0) + arr(*(s16(c.t(t)) for t in topics)) + i32(-1)


def _member(label: str) -> Callable[[Ctx], str]:
    return lambda c: c.answers[label]["member_id"]


def _generation(label: str) -> Callable[[Ctx], int]:
    return lambda c: c.answers[label]["generation_id"]


def _commit(group: str, offset: int, label: str | None = None, topic: str = "p1", p: int = 0
            ) -> Callable[[Ctx], dict]:
    def body(c: Ctx) -> dict:
        return {"group_id": c.t(group),
                "generation_id_or_member_epoch": c.answers[label]["generation_id"] if label else -1,
                "member_id": c.answers[label]["member_id"] if label else "", "group_instance_id": None,
                "retention_time_ms": -1,
                "topics": [{"name": _name(c, topic), "partitions": [
                    {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
                     "committed_metadata": "m"}]}]}
    return body


def _fetch_offsets(group: str, topics: list[str] | None = ("p1",)) -> Callable[[Ctx], dict]:
    return lambda c: {"group_id": c.t(group), "require_stable": False,
                      "topics": None if topics is None else [{"name": c.t(t), "partition_indexes": [0]}
                                                             for t in topics]}


def group_flow(i: int) -> Case:
    """JoinGroup v``i`` and, at the versions beside it, SyncGroup, Heartbeat, OffsetCommit,
    OffsetFetch, DescribeGroups and LeaveGroup of a one-member group."""
    g = f"g{i}"
    sv, hv, lv, ocv, ofv, dv = min(i, 5), min(i, 4), min(i, 4), min(i + 2, 8), min(i + 1, 7), min(i, 5)
    to = coordinator(g)
    steps = [Step(11, i, _join(g, i), to, label="j0")]
    join = "j0"
    if i >= 4:      # KIP-394: the first join is answered MEMBER_ID_REQUIRED with the member id to use
        steps.append(Step(11, i, _join(g, i, _member("j0")), to, label="j"))
        join = "j"
    steps += [
        Step(14, sv, lambda c: {"group_id": c.t(g), "generation_id": _generation(join)(c),
                                "member_id": _member(join)(c), "protocol_type": "consumer",
                                "protocol_name": "range",
                                "assignments": [{"member_id": _member(join)(c), "assignment": b"\0\1a"}]}, to),
        Step(12, hv, lambda c: {"group_id": c.t(g), "generation_id": _generation(join)(c),
                                "member_id": _member(join)(c)}, to),
        Step(12, hv, lambda c: {"group_id": c.t(g), "generation_id": _generation(join)(c) + 5,
                                "member_id": _member(join)(c)}, to),
        Step(12, hv, lambda c: {"group_id": c.t(g), "generation_id": _generation(join)(c),
                                "member_id": "nobody"}, to),
        Step(8, ocv, lambda c: _commit(g, 3 + i, join)(c), to),
        Step(8, ocv, lambda c: _commit(g, 3, join, topic="nosuch")(c), to),
        Step(8, ocv, lambda c: {**_commit(g, 3, join)(c), "generation_id_or_member_epoch": 99}, to),
        Step(9, ofv, _fetch_offsets(g), to),
        Step(15, dv, lambda c: {"groups": [c.t(g), c.t("nogroup")], "include_authorized_operations": False}, to),
        Step(11, i, _join(g, i, "unknown-member"), not_coordinator(g)),
    ]
    if lv < 3:
        steps.append(Step(13, lv, lambda c: {"group_id": c.t(g), "member_id": _member(join)(c)}, to))
    else:
        steps.append(Step(13, lv, lambda c: {"group_id": c.t(g), "members": [
            {"member_id": _member(join)(c), "group_instance_id": None}, {"member_id": "gone", "group_instance_id": None}]},
            to))
    steps.append(Step(15, dv, lambda c: {"groups": [c.t(g)]}, to))
    return Case(f"group-flow-join-v{i}", steps)


def groups() -> list[Case]:
    cases: list[Case] = []
    cases += each("find-coordinator-group", 10, range(0, 4), lambda c: {"key": c.t("g0"), "key_type": 0},
                  until=_coordinator_ready)
    cases += each("find-coordinator-bad-key-type", 10, [1, 3], lambda c: {"key": c.t("g0"), "key_type": 7})
    cases += [group_flow(i) for i in range(0, 8)]
    cases += each("heartbeat-unknown-group", 12, [0, 4], lambda c: {"group_id": c.t("nogroup"), "generation_id": 1,
                                                                   "member_id": "m"}, coordinator("nogroup"))
    cases += each("sync-group-unknown-member", 14, [0, 5], lambda c: {"group_id": c.t("g0"), "generation_id": 1,
                                                                     "member_id": "m", "protocol_type": "consumer",
                                                                     "protocol_name": "range", "assignments": []},
                  coordinator("g0"))
    cases += each("join-group-bad-session-timeout", 11, [0, 7],
                  lambda c: {**_join("gbad", 0)(c), "session_timeout": 1}, coordinator("gbad"))
    cases += each("join-group-empty-protocol-type", 11, [5],
                  lambda c: {**_join("gbad", 0)(c), "protocol_type": ""}, coordinator("gbad"))
    # offsets of a group without members (the admin client's and kafka-consumer-groups' way)
    cases += [Case(f"offset-commit-simple-v{v}", [Step(8, v, _commit(f"simple{v}", 7 + v), coordinator(f"simple{v}")),
                                                  Step(9, min(v, 7), _fetch_offsets(f"simple{v}"),
                                                       coordinator(f"simple{v}"))])
              for v in range(0, 9)]
    # v0 keeps offsets in ZooKeeper, on any broker; the coordinator (v1+) does not see them
    cases.append(Case("offset-commit-zookeeper-v0", [
        Step(8, 0, _commit("zk", 3), broker(1)), Step(9, 0, _fetch_offsets("zk"), broker(3)),
        Step(8, 0, _commit("zk", 4, topic="nosuch"), broker(2)),
        Step(9, 0, _fetch_offsets("zk", ["nosuch"]), broker(2)),
        Step(9, 1, _fetch_offsets("zk"), coordinator("zk"))]))
    cases += each("offset-fetch-all", 9, range(2, 8), _fetch_offsets("simple2", None), coordinator("simple2"))
    cases += each("offset-fetch-unknown-group", 9, [0, 1, 7], _fetch_offsets("nogroup"), coordinator("nogroup"))
    cases += each("offset-commit-not-coordinator", 8, [2, 8], _commit("simple2", 1), not_coordinator("simple2"))
    cases += each("offset-fetch-not-coordinator", 9, [1, 7], _fetch_offsets("simple2"), not_coordinator("simple2"))
    cases += each("list-groups", 16, range(0, 5), {"states_filter": []}, lambda c: [1, 2, 3])
    # OffsetDelete: an empty group's offset, then unknown group and topic
    cases.append(Case("offset-delete-v0", [
        Step(8, 8, _commit("od", 4), coordinator("od"), compare=False),
        Step(47, 0, lambda c: {"group_id": c.t("od"), "topics": [{"name": c.t("p1"), "partitions": [
            {"partition_index": 0}]}]}, coordinator("od")),
        Step(9, 7, _fetch_offsets("od"), coordinator("od")),
        Step(47, 0, lambda c: {"group_id": c.t("nogroup"), "topics": [{"name": c.t("p1"), "partitions": [
            {"partition_index": 0}]}]}, coordinator("nogroup")),
        Step(47, 0, lambda c: {"group_id": c.t("od"), "topics": [{"name": c.t("p1"), "partitions": [
            {"partition_index": 0}]}]}, not_coordinator("od")),
    ]))
    # DeleteGroups: the groups of the flows (empty once their member left), unknown, not empty
    cases += [Case(f"delete-groups-v{v}", [
        Step(42, v, lambda c, v=v: {"groups_names": [c.t(f"simple{v + 2}"), c.t("nogroup")]},
             coordinator(f"simple{v + 2}"))]) for v in range(0, 3)]
    cases.append(Case("delete-groups-not-empty-v2", [
        Step(11, 0, _join("busy", 0), coordinator("busy"), label="j"),
        Step(42, 2, lambda c: {"groups_names": [c.t("busy")]}, coordinator("busy")),
        Step(47, 0, lambda c: {"group_id": c.t("busy"), "topics": [{"name": c.t("p1"), "partitions": [
            {"partition_index": 0}]}]}, coordinator("busy")),
        Step(13, 0, lambda c: {"group_id": c.t("busy"), "member_id": _member("j")(c)}, coordinator("busy")),
    ]))
    return cases


# -- transactions -------------------------------------------------------------------------------

def _init(txn: str | None, timeout: int = 60000) -> Callable[[Ctx], dict]:
    return lambda c: {"transactional_id": c.t(txn) if txn else None, "transaction_timeout": timeout,
                      "producer_id": -1, "producer_epoch": -1}


def _coordinator_ready(answer: Any) -> bool:
    """Not COORDINATOR_LOAD_IN_PROGRESS nor COORDINATOR_NOT_AVAILABLE (an internal topic's
    partition still being created or loaded) nor CONCURRENT_TRANSACTIONS (an earlier transaction's
    markers still being written)."""
    return isinstance(answer, dict) and answer.get("error_code") not in (14, 15, 51)


def _pid(label: str) -> Callable[[Ctx], tuple[int, int]]:
    return lambda c: (c.answers[label]["producer_id"], c.answers[label]["producer_epoch"])


def txn_flow(i: int) -> Case:
    """AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn v``i`` (InitProducerId v``i``
    too) of one transaction, then the fenced epoch and the errors of a finished transaction."""
    t, g = f"t{i}", f"tg{i}"
    to = coordinator(t, 1)

    def pe(c: Ctx) -> dict:
        pid, epoch = _pid("init")(c)
        return {"transactional_id": c.t(t), "producer_id": pid, "producer_epoch": epoch}

    def add_partitions(c: Ctx) -> dict:
        p = pe(c)
        return {"v3_and_below_transactional_id": p["transactional_id"], "v3_and_below_producer_id": p["producer_id"],
                "v3_and_below_producer_epoch": p["producer_epoch"],
                "v3_and_below_topics": [{"name": c.t("txn"), "partitions": [0]}]}

    steps = [
        Step(22, min(i, 4), _init(t), to, label="init", until=_coordinator_ready),
        Step(24, i, add_partitions, to),
        Step(0, 9, lambda c: produce("txn", rec.transactional(f"t{i}".encode(), producer_id=_pid("init")(c)[0],
                                                              producer_epoch=_pid("init")(c)[1]), txn=t)(c),
             leader("txn")),
        Step(25, i, lambda c: {**pe(c), "group_id": c.t(g)}, to),
        Step(28, i, lambda c: {**pe(c), "group_id": c.t(g), "generation_id": -1, "member_id": "",
                               "group_instance_id": None,
                               "topics": [{"name": c.t("p1"), "partitions": [
                                   {"partition_index": 0, "committed_offset": 2, "committed_leader_epoch": -1,
                                    "committed_metadata": ""}]}]}, coordinator(g)),
        Step(26, i, lambda c: {**pe(c), "committed": True}, to),
        Step(26, i, lambda c: {**pe(c), "producer_epoch": pe(c)["producer_epoch"] - 1, "committed": True}, to),
        Step(24, i, lambda c: {**add_partitions(c), "v3_and_below_producer_id": 424242}, to),
        Step(26, i, lambda c: {**pe(c), "committed": True}, not_coordinator(t, 1)),
    ]
    return Case(f"txn-flow-v{i}", steps)


def transactions() -> list[Case]:
    cases: list[Case] = []
    cases += each("find-coordinator-txn", 10, range(1, 4), lambda c: {"key": c.t("t0"), "key_type": 1},
                  until=_coordinator_ready)
    cases += each("init-producer-id-idempotent", 22, range(0, 5), _init(None), until=_coordinator_ready)
    cases += each("init-producer-id-bad-timeout", 22, [0, 4], _init("tbad", timeout=1 << 30), coordinator("tbad", 1),
                  until=_coordinator_ready)
    cases += each("init-producer-id-not-coordinator", 22, [0, 4], _init("tbad"), not_coordinator("tbad", 1))
    cases += [txn_flow(i) for i in range(0, 4)]
    # a new InitProducerId fences the producer: its epoch's produce is refused
    cases.append(Case("txn-fenced-epoch", [
        Step(22, 4, _init("tf"), coordinator("tf", 1), label="init", compare=False, until=_coordinator_ready),
        Step(22, 4, _init("tf"), coordinator("tf", 1), label="init2", until=_coordinator_ready),
        Step(24, 3, lambda c: {"v3_and_below_transactional_id": c.t("tf"),
                               "v3_and_below_producer_id": _pid("init")(c)[0],
                               "v3_and_below_producer_epoch": _pid("init")(c)[1],
                               "v3_and_below_topics": [{"name": c.t("txn"), "partitions": [0]}]},
             coordinator("tf", 1)),
        Step(0, 9, lambda c: produce("txn", rec.batch(b"late", producer_id=_pid("init")(c)[0],
                                                      producer_epoch=_pid("init")(c)[1], sequence=0))(c),
             leader("txn")),
        Step(0, 9, lambda c: produce("txn", rec.batch(b"seq-gap", producer_id=_pid("init2")(c)[0],
                                                      producer_epoch=_pid("init2")(c)[1], sequence=5))(c),
             leader("txn")),
    ]))
    cases.append(Case("idempotent-produce", kept=("duplicate-append-time",
                                                  ("2.responses.0.partition_responses.0.log_append_time",)), steps=[
        Step(22, 4, _init(None), label="init", compare=False, until=_coordinator_ready),
        Step(0, 9, lambda c: produce("two", rec.batch(b"i0", producer_id=_pid("init")(c)[0],
                                                      producer_epoch=_pid("init")(c)[1], sequence=0))(c),
             leader("two")),
        Step(0, 9, lambda c: produce("two", rec.batch(b"i0", producer_id=_pid("init")(c)[0],
                                                      producer_epoch=_pid("init")(c)[1], sequence=0))(c),
             leader("two")),
        Step(0, 9, lambda c: produce("two", rec.batch(b"i2", producer_id=_pid("init")(c)[0],
                                                      producer_epoch=_pid("init")(c)[1], sequence=2))(c),
             leader("two")),
    ]))
    last_ts = ("producer-last-timestamp", ("topics.0.partitions.0.active_producers.*.last_timestamp",))
    cases += each("describe-producers", 61, [0], lambda c: {"topics": [{"name": c.t("txn"), "partition_indexes": [0]}]},
                  leader("txn"), kept=last_ts)
    cases += each("describe-producers-follower", 61, [0],
                  lambda c: {"topics": [{"name": c.t("txn"), "partition_indexes": [0]}]}, follower("txn"),
                  kept=last_ts)
    cases += each("describe-producers-outsider", 61, [0],
                  lambda c: {"topics": [{"name": c.t("two"), "partition_indexes": [0]}]}, outsider("two"))
    cases += each("write-txn-markers", 27, [0, 1], {"markers": []}, leader("txn"))
    return cases


# -- administration -----------------------------------------------------------------------------

def admin() -> list[Case]:
    cases: list[Case] = []
    ctl = controller()
    cases += [Case(f"create-topics-v{v}", [
        Step(19, v, create({"name": f"ct{v}", "num_partitions": 2, "replication_factor": 2}), ctl),
        Step(19, v, create({"name": f"ct{v}", "num_partitions": 1, "replication_factor": 1},
                           {"name": f"ct{v}-rf", "num_partitions": 1, "replication_factor": 4},
                           {"name": f"ct{v}-bad-config", "num_partitions": 1, "replication_factor": 1,
                            "configs": {"no.such.config": "1"}},
                           {"name": f"ct{v}-bad-value", "num_partitions": 1, "replication_factor": 1,
                            "configs": {"retention.ms": "soon"}},
                           {"name": "=bad name!", "num_partitions": 1, "replication_factor": 1},
                           {"name": f"ct{v}-zero", "num_partitions": 0, "replication_factor": 1},
                           {"name": f"ct{v}-assign", "assignments": [[1, 1]]}), ctl),
        Step(19, v, create({"name": f"ct{v}-v", "num_partitions": 1, "replication_factor": 1}, validate_only=True),
             ctl),
    ]) for v in range(0, 8)]
    cases += each("create-topics-unknown-broker", 19, [0, 7], create({"name": "assign-99", "assignments": [[99]]},
                                                                      timeout=1000), ctl,
                  kept=("unknown-broker-assignment", ("topics.0.error_code",)))
    cases += each("create-topics-duplicate", 19, [1, 7], create({"name": "dup", "num_partitions": 1,
                                                                  "replication_factor": 1},
                                                                 {"name": "dup", "num_partitions": 1,
                                                                  "replication_factor": 1}), ctl)
    cases += each("create-topics-not-controller", 19, [0, 7],
                  create({"name": "nc", "num_partitions": 1, "replication_factor": 1}),
                  lambda c: next(b for b in (1, 2, 3) if b != c.controller()))
    cases += [Case(f"delete-topics-v{v}", [
        Step(20, v, lambda c, v=v: {"topic_names": [c.t(f"ct{v}")], "topics": [{"name": c.t(f"ct{v}")}],
                                    "timeout": 30000}, ctl),
        Step(20, v, lambda c: {"topic_names": [c.t("nosuch")], "topics": [{"name": c.t("nosuch")}],
                               "timeout": 30000}, ctl),
    ]) for v in range(0, 7)]
    cases += each("delete-topics-unknown-id", 20, [6], {"topics": [{"name": None, "topic_id": "b3f1b6a5-0c6e-4a5d-8b8e-1c2d3e4f5a6b"}],
                                                        "timeout": 30000}, ctl)
    cases += each("delete-topics-not-controller", 20, [0, 6],
                  lambda c: {"topic_names": [c.t("ct7")], "topics": [{"name": c.t("ct7")}], "timeout": 30000},
                  lambda c: next(b for b in (1, 2, 3) if b != c.controller()))
    # DeleteRecords: 5 records in "del", then every version, beyond the end, on a follower
    add = cases.append
    add(Case("del-produce", [Step(0, 9, produce("del", rec.batch(*[b"d%d" % i for i in range(6)])), leader("del"))]
             + wait_replicated("del", 6)))

    def delete_records(offset: int, topic: str = "del") -> Callable[[Ctx], dict]:
        return lambda c: {"topics": [{"name": c.t(topic), "partitions": [{"partition_index": 0, "offset": offset}]}],
                          "timeout": 30000}
    cases += [one("delete-records", 21, v, delete_records(v + 1), leader("del")) for v in range(0, 3)]
    cases += each("delete-records-beyond-end", 21, [0, 2], delete_records(100), leader("del"))
    cases += each("delete-records-follower", 21, [2], delete_records(4), follower("del"))
    cases += each("delete-records-unknown-topic", 21, [2], delete_records(1, "nosuch"))
    cases += each("list-offsets-after-delete-records", 2, [1, 6], list_offsets("del", -2), leader("del"))
    cases += each("fetch-before-log-start", 1, [4, 12], fetch("del", offset=0), leader("del"),
                  kept=("fetch-error-offsets", (f"{P}high_watermark", f"{P}last_stable_offset", f"{P}log_start_offset")))
    # CreatePartitions
    cases += [Case(f"create-partitions-v{v}", [
        Step(19, 5, create({"name": f"cp{v}", "assignments": [[1, 2, 3]]}), ctl, compare=False),
        Step(37, v, lambda c, v=v: {"topics": [
            {"name": c.t(f"cp{v}"), "count": 2, "assignments": [{"broker_ids": [2, 3, 1]}]},
            {"name": c.t("p3"), "count": 2, "assignments": None},
            {"name": c.t("nosuch"), "count": 2, "assignments": None},
            {"name": c.t("p1"), "count": 3, "assignments": [{"broker_ids": [1, 99, 2]}, {"broker_ids": [1, 2, 3]}]},
            {"name": c.t("two"), "count": 2, "assignments": [{"broker_ids": [1]}]},
        ], "timeout": 30000, "validate_only": False}, ctl),
        Step(37, v, lambda c, v=v: {"topics": [{"name": c.t(f"cp{v}"), "count": 5, "assignments": None}],
                                    "timeout": 30000, "validate_only": True}, ctl),
    ]) for v in range(0, 4)]
    # ElectLeaders
    cases += each("elect-leaders-preferred", 43, range(0, 3), lambda c: {
        "election_type": 0, "topic_partitions": [{"topic": c.t("p3"), "partitions": [0, 1, 2]},
                                                 {"topic": c.t("nosuch"), "partitions": [0]}], "timeout": 30000}, ctl)
    cases += each("elect-leaders-unclean", 43, [1, 2], lambda c: {
        "election_type": 1, "topic_partitions": [{"topic": c.t("p1"), "partitions": [0]}], "timeout": 30000}, ctl)
    # reassignments: "moving" goes from [1, 2] to [2, 3]
    cases.append(Case("reassignment-v0", kept=("reassignment-epochs", ("4.topics.0.partitions.0.leader_epoch",)), steps=[
        Step(46, 0, {"timeout": 30000, "topics": None}, ctl),
        Step(45, 0, lambda c: {"timeout": 30000, "topics": [
            {"name": c.t("moving"), "partitions": [{"partition_index": 0, "replicas": [2, 3]},
                                                   {"partition_index": 4, "replicas": [2, 3]}]},
            {"name": c.t("nosuch"), "partitions": [{"partition_index": 0, "replicas": [2, 3]}]},
            {"name": c.t("p1"), "partitions": [{"partition_index": 0, "replicas": [1, 99]}]},
            {"name": c.t("two"), "partitions": [{"partition_index": 0, "replicas": None}]}]}, ctl),
        Step(46, 0, lambda c: {"timeout": 30000, "topics": [{"name": c.t("moving"), "partition_indexes": [0]}]}, ctl,
             compare=False, until=lambda a: a != "<connection closed>" and not a["topics"]),
        Step(3, 9, metadata("moving"), ctl, compare=False,
             until=lambda a: a["topics"][0]["partitions"][0]["replica_nodes"] == [2, 3]),
        Step(3, 9, metadata("moving"), ctl),
        Step(46, 0, lambda c: {"timeout": 30000, "topics": [{"name": c.t("moving"), "partition_indexes": [0]}]}, ctl),
    ]))
    cases += each("reassignment-not-controller", 45, [0], lambda c: {"timeout": 30000, "topics": [
        {"name": c.t("two"), "partitions": [{"partition_index": 0, "replicas": [2, 1]}]}]},
        lambda c: next(b for b in (1, 2, 3) if b != c.controller()))
    # log dirs
    cases += each("describe-log-dirs", 35, range(0, 3), lambda c: {"topics": [{"topic": c.t("two"),
                                                                               "partitions": [0]}]}, broker(1))
    cases += each("describe-log-dirs-all", 35, [2], {"topics": []}, broker(3))
    cases += each("alter-replica-log-dirs", 34, range(0, 3), lambda c: {"dirs": [
        {"path": "/nonexistent/dir", "topics": [{"name": c.t("two"), "partitions": [0]}]}]}, broker(1))
    # ACLs: neither cluster has an authorizer
    acl = {"resource_type": 2, "resource_name": "x", "resource_pattern_type": 3, "principal": "User:a",
           "host": "*", "operation": 3, "permission_type": 3}
    cases += each("describe-acls-no-authorizer", 29, [0, 1, 2], {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
        "host_filter": None, "operation": 1, "permission_type": 1})
    cases += each("create-acls-no-authorizer", 30, [0, 1, 2], {"creations": [acl]})
    cases += each("delete-acls-no-authorizer", 31, [0, 1, 2], {"filters": [{
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
        "host_filter": None, "operation": 1, "permission_type": 1}]})
    # the controller's own APIs, from a client: a stale broker epoch (v2+) or controller epoch
    cases += control_apis()
    return cases


def control_apis() -> list[Case]:
    cases: list[Case] = []
    # one body per API with every version's fields (each version's schema keeps those it has); the
    # versions without a broker epoch are refused by Strandline, taken by Kafka (the unknown epoch)
    no_epoch = ("no-broker-epoch", ("error_code",))
    lai = {"controller_id": 9, "controller_epoch": 0, "broker_epoch": 0, "type": 0, "ungrouped_partition_states": [],
           "topic_states": [], "live_leaders": []}
    cases += each("leader-and-isr-no-epoch", 4, [0, 1], lai, kept=no_epoch)
    cases += each("leader-and-isr-stale", 4, range(2, 6), lai)
    stop = {"controller_id": 9, "controller_epoch": 0, "broker_epoch": 0, "delete_partitions": False,
            "ungrouped_partitions": [], "topics": [], "topic_states": []}
    cases += each("stop-replica-no-epoch", 5, [0], stop, kept=no_epoch)
    cases += each("stop-replica-stale", 5, range(1, 4), stop)
    update = {"controller_id": 9, "controller_epoch": 0, "broker_epoch": 0, "ungrouped_partition_states": [],
              "topic_states": [], "live_brokers": []}
    cases += each("update-metadata-no-epoch", 6, range(0, 5), update, kept=no_epoch)
    cases += each("update-metadata-stale", 6, range(5, 8), update)
    # ControlledShutdown of broker 99 (v0-v1 carry no broker epoch) and of broker 1 with a stale epoch
    cases.append(one("controlled-shutdown", 7, 0, Raw(i32(99), header_v0=True), controller(),
                     kept=("controlled-shutdown-v0-v1", ("error_code",))))
    cases.append(one("controlled-shutdown", 7, 1, Raw(i32(99)), controller(),
                     kept=("controlled-shutdown-v0-v1", ("error_code",))))
    cases += each("controlled-shutdown-stale", 7, [2], Raw(i32(1) + i64(0)), controller())
    cases += each("controlled-shutdown-stale", 7, [3], {"broker_id": 1, "broker_epoch": 0}, controller())
    cases += each("controlled-shutdown-not-controller", 7, [3], {"broker_id": 1, "broker_epoch": 0},
                  lambda c: next(b for b in (1, 2, 3) if b != c.controller()))
    return cases


# -- configs ------------------------------------------------------------------------------------

TOPIC, BROKER = 2, 4


def configs() -> list[Case]:
    cases: list[Case] = []
    keys = ["retention.ms", "cleanup.policy", "max.message.bytes", "min.insync.replicas", "segment.bytes"]

    def describe(kind: int, name: str | Callable[[Ctx], str], keys: list[str] | None, synonyms: bool = False
                 ) -> Callable[[Ctx], dict]:
        return lambda c: {"resources": [{"resource_type": kind, "resource_name": name(c) if callable(name) else name,
                                         "configuration_keys": keys}],
                          "include_synonyms": synonyms, "include_documentation": False}
    cfg = lambda c: c.t("cfg")      # noqa: E731
    cases += each("describe-configs-topic", 32, range(1, 5), describe(TOPIC, cfg, keys, synonyms=True))
    cases += each("describe-configs-compact", 32, [4], describe(TOPIC, lambda c: c.t("compact"), ["cleanup.policy"]))
    cases += each("describe-configs-unknown-topic", 32, [1, 4], describe(TOPIC, lambda c: c.t("nosuch"), keys))
    cases += each("describe-configs-unknown-key", 32, [4], describe(TOPIC, cfg, ["no.such.key"]))
    bkeys = ["log.retention.hours", "message.max.bytes", "log.cleaner.threads", "unclean.leader.election.enable"]
    cases += each("describe-configs-broker", 32, [1, 4], describe(BROKER, "2", bkeys, synonyms=True), broker(2))
    cases += each("describe-configs-other-broker", 32, [4], describe(BROKER, "3", bkeys), broker(2))
    cases += each("describe-configs-broker-default", 32, [4], describe(BROKER, "", bkeys), broker(2))
    cases += each("describe-configs-topic", 32, [0], describe(TOPIC, cfg, keys),
                  kept=("describe-configs-v0-is-default", ("results.0.configs.*.is_default",)))
    cases += each("describe-configs-unknown-topic", 32, [0], describe(TOPIC, lambda c: c.t("nosuch"), keys))

    def alter(name: str, configs: dict[str, str], validate_only: bool = False, kind: int = TOPIC
              ) -> Callable[[Ctx], dict]:
        return lambda c: {"resources": [{"resource_type": kind, "resource_name": _name(c, name),
                                         "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                          "validate_only": validate_only}
    cases += [Case(f"alter-configs-v{v}", [
        Step(33, v, alter("cfg", {"retention.ms": str(700000 + v), "segment.bytes": "2000000"}), ctl_or_any()),
        Step(32, 4, describe(TOPIC, cfg, keys), broker(1)),
        Step(33, v, alter("cfg", {"retention.ms": "soon"}), ctl_or_any()),
        Step(33, v, alter("cfg", {"no.such.config": "1"}), ctl_or_any()),
        Step(33, v, alter("nosuch", {"retention.ms": "1"}), ctl_or_any()),
        Step(33, v, alter("cfg", {"retention.ms": "1"}, validate_only=True), ctl_or_any()),
    ], ("config-value-errors", ("2.responses.0.error_code",))) for v in range(0, 3)]

    def incremental(name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False,
                    kind: int = TOPIC) -> Callable[[Ctx], dict]:
        return lambda c: {"resources": [{"resource_type": kind, "resource_name": _name(c, name),
                                         "configs": [{"name": k, "config_operation": op, "value": v}
                                                     for k, op, v in ops]}],
                          "validate_only": validate_only}
    cases += [Case(f"incremental-alter-configs-v{v}", [
        Step(44, v, incremental("cfg", [("retention.ms", 0, "800000"), ("segment.bytes", 1, None)]), ctl_or_any()),
        Step(44, v, incremental("cfg", [("cleanup.policy", 2, "compact")]), ctl_or_any()),
        Step(32, 4, describe(TOPIC, cfg, keys), broker(1)),
        Step(44, v, incremental("cfg", [("cleanup.policy", 3, "delete")]), ctl_or_any()),
        Step(32, 4, describe(TOPIC, cfg, keys), broker(1)),
        Step(44, v, incremental("cfg", [("retention.ms", 0, "soon")]), ctl_or_any()),
        Step(44, v, incremental("cfg", [("retention.ms", 2, "1")]), ctl_or_any()),
        Step(44, v, incremental("cfg", [("retention.ms", 0, "1"), ("retention.ms", 1, None)]), ctl_or_any()),
        Step(44, v, incremental("nosuch", [("retention.ms", 0, "1")]), ctl_or_any()),
        Step(44, v, incremental("cfg", [("cleanup.policy", 0, "delete")]), ctl_or_any()),
    ], ("config-value-errors", ("5.responses.0.error_code", "6.responses.0.error_code"))) for v in range(0, 2)]
    cases += each("incremental-alter-configs-unknown-operation", 44, [0, 1],
                  incremental("cfg", [("retention.ms", 7, "1")]), ctl_or_any(),
                  kept=("unknown-config-operation", ("responses.0.error_code",)))
    cases += each("incremental-alter-configs-broker", 44, [1], incremental(
        "=2", [("log.cleaner.threads", 0, "2"), ("log.retention.hours", 0, "1")], kind=BROKER), broker(2))
    cases += each("incremental-alter-configs-broker-validate", 44, [1], incremental(
        "=2", [("log.cleaner.threads", 0, "2")], validate_only=True, kind=BROKER), broker(2))
    return cases


def ctl_or_any() -> Callable[[Ctx], int]:
    """Topic configs are altered by any broker (it writes ZooKeeper): broker 1."""
    return broker(1)


# -- SASL, delegation tokens, client quotas, SCRAM credentials, AlterIsr, features, cluster -----

def sasl_token_scram_isr_apis() -> list[Case]:
    cases: list[Case] = []
    cases += each("sasl-handshake", 17, [0, 1], {"mechanism": "PLAIN"})
    cases += each("sasl-authenticate", 36, range(0, 3), {"auth_bytes": b"\0a\0b"})
    # delegation tokens, laid out by hand (v0 is not in kio; kio refuses the -1 timestamps)
    token = (("error_code", "int16"), ("principal_type", "string"), ("principal_name", "string"),
             ("issue_timestamp", "int64"), ("expiry_timestamp", "int64"), ("max_timestamp", "int64"),
             ("token_id", "string"))
    compact = tuple((n, "compact_string" if k == "string" else k) for n, k in token)
    cases += each("create-delegation-token", 38, [0, 1], Raw(arr() + i64(-1), head=token))
    cases += each("create-delegation-token", 38, [2], Raw(b"\1" + i64(-1) + b"\0", flexible=True, head=compact))
    expiry = (("error_code", "int16"), ("expiry_timestamp", "int64"))
    for name, key in (("renew-delegation-token", 39), ("expire-delegation-token", 40)):
        cases += each(name, key, [0, 1], Raw(i32(1) + b"h" + i64(1000), head=expiry))
        cases += each(name, key, [2], Raw(b"\2h" + i64(1000) + b"\0", flexible=True, head=expiry))
    cases += each("describe-delegation-token", 41, [0, 1], Raw(i32(-1), head=(("error_code", "int16"),
                                                                              ("tokens", "int32"))))
    cases += each("describe-delegation-token", 41, [2], Raw(b"\0\0", flexible=True))
    # client quotas: DescribeClientQuotas and AlterClientQuotas; SCRAM credentials are read (from the
    # same znodes), not written
    cases += each("describe-client-quotas", 48, [0, 1], {"components": [], "strict": False})
    cases += each("alter-client-quotas", 49, [0, 1], {"entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": "differential"}],
        "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}], "validate_only": True})
    cases += each("describe-user-scram-credentials", 50, [0], {"users": None})
    cases += each("alter-user-scram-credentials", 51, [0], {"deletions": [], "upsertions": []}, controller())
    cases += each("alter-user-scram-credentials-not-controller", 51, [0],
                  {"deletions": [{"name": "differential-nobody", "mechanism": 1}], "upsertions": []},
                  lambda c: next(b for b in (1, 2, 3) if b != c.controller()))
    # Kafka's validation, then a deletion of a credential that does not exist (one user each: the
    # order of Kafka's results is a hash set's)
    for name, alteration in (("too-few-iterations", {"upsertions": [{
            "name": "differential-few", "mechanism": 1, "iterations": 1024, "salt": b"s" * 16,
            "salted_password": b"p" * 32}], "deletions": []}),
            ("unknown-mechanism", {"upsertions": [], "deletions": [{"name": "differential-mech", "mechanism": 9}]}),
            ("missing-credential", {"upsertions": [], "deletions": [{"name": "differential-nobody", "mechanism": 2}]})):
        cases += each(f"alter-user-scram-credentials-{name}", 51, [0], alteration, controller())
    # AlterIsr from a client: broker 1 with epoch 0 is not its registration (STALE_BROKER_EPOCH);
    # elsewhere NOT_CONTROLLER
    alter_isr = Raw(i32(1) + i64(0) + b"\1\0", flexible=True, head=(("throttle_time_ms", "int32"),
                                                                  ("error_code", "int16")))
    cases += each("alter-isr", 56, [0], alter_isr, controller())
    cases += each("alter-isr-not-controller", 56, [0], alter_isr,
                  lambda c: next(b for b in (1, 2, 3) if b != c.controller()))
    cases += each("update-features", 57, [0], {"timeout": 30000, "feature_updates": []}, controller())
    cases += each("update-features-not-controller", 57, [0], {"timeout": 30000, "feature_updates": []},
                  lambda c: next(b for b in (1, 2, 3) if b != c.controller()))
    cases += each("describe-cluster", 60, [0], {"include_cluster_authorized_operations": False}, broker(2))
    cases += each("describe-cluster-operations", 60, [0], {"include_cluster_authorized_operations": True}, broker(3))
    return cases


CASES = build()
