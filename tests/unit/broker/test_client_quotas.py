"""Client quotas in the core: DescribeClientQuotas and AlterClientQuotas with Kafka 2.8's
semantics and ZooKeeper layout (ZkAdminManager, AdminZkClient), DescribeUserScramCredentials,
and the quota resolution and rate measurement of Kafka's ClientQuotaManager."""

from __future__ import annotations

import json

import pytest
from kio.schema.errors import ErrorCode

from strandline.broker.quotas import (CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, ClientQuotaManager, Entity,
                                      QuotaRate, java_double, sanitize, desanitize)
from strandline.coordination.store import Create, GetChildren, GetData
from strandline.protocol import api
from tests.unit.broker.test_broker_core import Harness

DESCRIBE, ALTER, SCRAM = 48, 49, 50
EXACT, DEFAULT_MATCH, SPECIFIED = 0, 1, 2


def alter(h: Harness, entries: list, validate_only: bool = False, version: int = 1) -> list:
    """``entries``: [([(type, name), ...], [(key, value or None to remove), ...]), ...]"""
    resp = h.call(ALTER, version, {"entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops]}
        for entity, ops in entries], "validate_only": validate_only})
    return [(e.error_code, e.error_message, [(x.entity_type, x.entity_name) for x in e.entity]) for e in resp.entries]


def describe(h: Harness, components: list, strict: bool, version: int = 1):
    resp = h.call(DESCRIBE, version, {"components": [
        {"entity_type": t, "match_type": m, "match": n} for t, m, n in components], "strict": strict})
    if resp.error_code != ErrorCode.none:
        return resp.error_code, resp.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in resp.entries}


def znode(h: Harness, path: str):
    [read] = h.zk.execute([GetData(path)])
    return json.loads(read.data) if read.data else read.data


def notifications(h: Harness) -> list[str]:
    [res] = h.zk.execute([GetChildren("/config/changes")])
    return [json.loads(h.zk.execute([GetData(f"/config/changes/{c}")])[0].data)["entity_path"] for c in res.children]


def test_alter_stores_each_entity_where_kafka_does_with_its_notification():
    h = Harness()
    assert alter(h, [([("user", "alice")], [(PRODUCER_BYTE_RATE, 1024.0)]),
                     ([("client-id", "app 1")], [(CONSUMER_BYTE_RATE, 2048.0)]),
                     ([("user", "alice"), ("client-id", None)], [("request_percentage", 12.5)]),
                     ([("user", None)], [("controller_mutation_rate", 1e7)])]) == [
        (ErrorCode.none, None, [("user", "alice")]), (ErrorCode.none, None, [("client-id", "app 1")]),
        (ErrorCode.none, None, [("user", "alice"), ("client-id", None)]), (ErrorCode.none, None, [("user", None)])]
    assert znode(h, "/config/users/alice") == {"version": 1, "config": {"producer_byte_rate": "1024"}}
    assert znode(h, "/config/clients/app%201") == {"version": 1, "config": {"consumer_byte_rate": "2048"}}
    assert znode(h, "/config/users/alice/clients/<default>") == {"version": 1, "config": {"request_percentage": "12.5"}}
    assert znode(h, "/config/users/<default>") == {"version": 1, "config": {"controller_mutation_rate": "1.0E7"}}
    assert sorted(notifications(h)) == ["clients/app%201", "users/<default>", "users/alice",
                                        "users/alice/clients/<default>"]


def test_a_pair_under_a_new_user_creates_its_parents_as_empty_configs():
    h = Harness()
    assert alter(h, [([("client-id", "c"), ("user", "bob")], [(PRODUCER_BYTE_RATE, 100.0)])])[0][0] == ErrorCode.none
    assert znode(h, "/config/users/bob") == {"version": 1, "config": {}}
    assert znode(h, "/config/users/bob/clients/c") == {"version": 1, "config": {"producer_byte_rate": "100"}}
    # a user's own quota later goes into the parent, the pair is kept
    assert alter(h, [([("user", "bob")], [(CONSUMER_BYTE_RATE, 5.0)])])[0][0] == ErrorCode.none
    assert describe(h, [], strict=False) == {
        (("user", "bob"),): {CONSUMER_BYTE_RATE: 5.0},
        (("user", "bob"), ("client-id", "c")): {PRODUCER_BYTE_RATE: 100.0}}


def test_alter_refuses_what_kafka_refuses_and_changes_nothing():
    h = Harness()
    results = alter(h, [([("user", "u")], [("producer_byte_ratex", 1.0)]),
                        ([("user", "u")], [(PRODUCER_BYTE_RATE, 1.5)]),
                        ([("client-id", "c")], [("SCRAM-SHA-256", 1.0)]),
                        ([("user", "u")], [("SCRAM-SHA-256", 1.0)]),
                        ([], [(PRODUCER_BYTE_RATE, 1.0)]),
                        ([("group", "g")], [(PRODUCER_BYTE_RATE, 1.0)]),
                        ([("user", "")], [(PRODUCER_BYTE_RATE, 1.0)]),
                        ([("ip", "1.2.3.4")], [("connection_creation_rate", 1.0)]),
                        ([("user", "..")], [(PRODUCER_BYTE_RATE, 1.0)]),
                        ([("user", "u"), ("client-id", ".")], [(PRODUCER_BYTE_RATE, 1.0)])])
    assert [(code, message) for code, message, _ in results] == [
        (ErrorCode.invalid_request, "Invalid configuration key producer_byte_ratex"),
        (ErrorCode.invalid_request, "Configuration producer_byte_rate must be a LONG value"),
        (ErrorCode.invalid_request, "Invalid configuration key SCRAM-SHA-256"),
        (ErrorCode.unknown_server_error, None),
        (ErrorCode.invalid_request, "Invalid empty client quota entity"),
        (ErrorCode.invalid_request, "Unhandled client quota entity type: group"),
        (ErrorCode.invalid_request, "Empty user not supported"),
        (ErrorCode.invalid_request, "IP quotas (connection_creation_rate) are not supported by Strandline"),
        (ErrorCode.unknown_server_error, None),         # no znode is named . or .. (a relative path)
        (ErrorCode.unknown_server_error, None)]
    assert h.zk.execute([GetChildren("/config/users")])[0].children == ()
    assert notifications(h) == []


def test_validate_only_writes_nothing_and_remove_deletes_a_key():
    h = Harness()
    assert alter(h, [([("user", "u")], [(PRODUCER_BYTE_RATE, 10.0)])], validate_only=True)[0][0] == ErrorCode.none
    assert h.zk.execute([GetChildren("/config/users")])[0].children == ()
    alter(h, [([("user", "u")], [(PRODUCER_BYTE_RATE, 10.0), (CONSUMER_BYTE_RATE, 20.0)])], version=0)
    alter(h, [([("user", "u")], [(PRODUCER_BYTE_RATE, None), ("not_a_key", None)])])
    assert znode(h, "/config/users/u") == {"version": 1, "config": {"consumer_byte_rate": "20"}}
    alter(h, [([("user", "u")], [(CONSUMER_BYTE_RATE, None)])])
    assert znode(h, "/config/users/u") == {"version": 1, "config": {}}      # Kafka keeps the empty entity
    assert describe(h, [], strict=False) == {}


@pytest.fixture(scope="module")
def six():
    h = Harness()
    alter(h, [([("user", "alice")], [(PRODUCER_BYTE_RATE, 1.0)]),
              ([("user", None)], [(PRODUCER_BYTE_RATE, 2.0)]),
              ([("client-id", "c1")], [(PRODUCER_BYTE_RATE, 3.0)]),
              ([("client-id", None)], [(PRODUCER_BYTE_RATE, 4.0)]),
              ([("user", "alice"), ("client-id", "c1")], [(PRODUCER_BYTE_RATE, 5.0)]),
              ([("user", None), ("client-id", "c1")], [(PRODUCER_BYTE_RATE, 6.0)])])
    return h


ALICE, DUSER, C1, DCLIENT = ("user", "alice"), ("user", None), ("client-id", "c1"), ("client-id", None)


@pytest.mark.parametrize("components,strict,expected", [
    ([], False, {(ALICE,), (DUSER,), (C1,), (DCLIENT,), (ALICE, C1), (DUSER, C1)}),
    ([], True, set()),
    ([("user", EXACT, "alice")], False, {(ALICE,), (ALICE, C1)}),
    ([("user", EXACT, "alice")], True, {(ALICE,)}),
    ([("user", DEFAULT_MATCH, None)], True, {(DUSER,)}),
    ([("user", DEFAULT_MATCH, None)], False, {(DUSER,), (DUSER, C1)}),
    ([("user", SPECIFIED, None)], True, {(ALICE,), (DUSER,)}),
    ([("client-id", EXACT, "c1")], False, {(C1,), (ALICE, C1), (DUSER, C1)}),
    ([("client-id", SPECIFIED, None), ("user", SPECIFIED, None)], True, {(ALICE, C1), (DUSER, C1)}),
    ([("client-id", EXACT, "c1"), ("user", DEFAULT_MATCH, None)], True, {(DUSER, C1)}),
    ([("client-id", DEFAULT_MATCH, None)], True, {(DCLIENT,)}),
    ([("user", EXACT, "nobody")], False, set()),
])
def test_describe_matches_as_kafka_does(six, components, strict, expected):
    found = describe(six, components, strict)
    assert set(found) == expected
    values = {(ALICE,): 1.0, (DUSER,): 2.0, (C1,): 3.0, (DCLIENT,): 4.0, (ALICE, C1): 5.0, (DUSER, C1): 6.0}
    assert all(found[e] == {PRODUCER_BYTE_RATE: values[e]} for e in found)


def test_describe_refuses_bad_filters_in_one_error():
    h = Harness()
    assert describe(h, [("user", EXACT, "a"), ("user", EXACT, "b")], False) == (
        ErrorCode.invalid_request, "Duplicate user filter component entity type")
    assert describe(h, [("group", EXACT, "a")], False) == (
        ErrorCode.unsupported_version, "Custom entity type 'group' not supported")
    assert describe(h, [("", EXACT, "a")], False) == (
        ErrorCode.invalid_request, "Unexpected empty filter component entity type")
    assert describe(h, [], False, version=0) == {}


def test_kafka_written_entries_are_read_and_other_keys_are_left_out():
    """What a Kafka 2.8 broker or its tools leave in ZooKeeper: Java's double text, SCRAM keys."""
    h = Harness()
    h.zk.execute([Create("/config/users/carol", json.dumps({"version": 1, "config": {
        "consumer_byte_rate": "1.0E7", "SCRAM-SHA-512": "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=8192"}
    }).encode()), Create("/config/users/dave", b'{"version":1,"config":{"SCRAM-SHA-256":"salt=x,stored_key=y,'
                                               b'server_key=z,iterations=4096"}}')])
    assert describe(h, [("user", SPECIFIED, None)], True) == {(("user", "carol"),): {CONSUMER_BYTE_RATE: 1e7}}
    resp = h.call(SCRAM, 0, {"users": [{"name": "carol"}, {"name": "erin"}, {"name": ""}, {"name": ".."}]})
    assert [(r.user, r.error_code, [(i.mechanism, i.iterations) for i in r.credential_infos]) for r in resp.results] \
        == [("carol", ErrorCode.none, [(2, 8192)]), ("erin", ErrorCode.resource_not_found, []),
            ("", ErrorCode.resource_not_found, []), ("..", ErrorCode.unknown_server_error, [])]
    resp = h.call(SCRAM, 0, {"users": None})
    assert [(r.user, [(i.mechanism, i.iterations) for i in r.credential_infos]) for r in resp.results] == [
        ("carol", [(2, 8192)]), ("dave", [(1, 4096)])]


def test_every_broker_applies_a_change_when_notified():
    h = Harness()
    quotas = h.broker.apis.quota_apis
    assert not quotas.produce.enabled
    alter(h, [([("user", "ANONYMOUS"), ("client-id", "p")], [(PRODUCER_BYTE_RATE, 100_000.0)])])
    [res] = h.zk.execute([GetChildren("/config/changes")])
    h.run(h.broker.on_config_changes(list(res.children), h.now))
    assert quotas.produce.resolve("ANONYMOUS", "p") == (("ANONYMOUS", "p"), 100_000.0)
    assert quotas.fetch.resolve("ANONYMOUS", "p") == (("", "p"), None)
    # a restarted broker reads every quota when it loads the cluster
    h.run(h.broker.load_entity_configs(h.now))
    assert quotas.produce.resolve("ANONYMOUS", "p")[1] == 100_000.0


def test_resolution_follows_kafkas_order_and_shares_the_rate_as_kafka_does():
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    levels = [(Entity(None, DEFAULT), ("", "c")), (Entity(None, "c"), ("", "c")), (Entity(DEFAULT, None), ("u", "")),
              (Entity(DEFAULT, DEFAULT), ("u", "c")), (Entity(DEFAULT, "c"), ("u", "c")), (Entity("u", None), ("u", "")),
              (Entity("u", DEFAULT), ("u", "c")), (Entity("u", "c"), ("u", "c"))]
    assert m.resolve("u", "c") == (("", "c"), None)
    for value, (entity, tags) in enumerate(levels, start=1):        # each more specific level wins
        m.update(entity, {PRODUCER_BYTE_RATE: str(value), CONSUMER_BYTE_RATE: "1"})
        assert m.resolve("u", "c") == (tags, float(value))
    m.update(Entity("u", "c"), {CONSUMER_BYTE_RATE: "1"})           # its producer quota removed
    assert m.resolve("u", "c") == (("u", "c"), 7.0)
    assert m.resolve("v", "d") == (("v", "d"), 4.0)                  # <default>/clients/<default>, per pair
    assert m.resolve("u", "c%2F") == (("u", "c%2F"), 7.0)


def test_rate_and_throttle_time_as_kafka_computes_them():
    rate = QuotaRate(0)
    rate.record(10_000, 0)
    assert rate.window_ms(0) == 10_000 and rate.measure(0) == 1000.0     # at least 10 windows
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    m.update(Entity("u", None), {PRODUCER_BYTE_RATE: "1000"})
    t = 1_000_000
    assert m.record("u", "c", 10_000, t) == 0                # exactly the quota over 10 s
    # 5,000 more: 15,000 over 10 s = 1,500/s; (1500 - 1000) / 1000 * 10 s = 5 s
    assert m.record("u", "c", 5_000, t) == 5000
    # a steady 2,000/s for 20 s settles at Kafka's 11-sample window
    m2 = ClientQuotaManager(PRODUCER_BYTE_RATE)
    m2.update(Entity(None, "c"), {PRODUCER_BYTE_RATE: "1000"})
    for s in range(20):
        throttle = m2.record("u", "c", 2000, t + s * 1000)
    assert throttle == round((2000 * 11 / 10.0 - 1000) / 1000 * 10_000)
    assert m2.max_window_bytes("u", "c") == 10_000


def test_names_and_numbers_as_java_writes_them():
    assert sanitize("User:CN=a b,O=*~") == "User%3ACN%3Da%20b%2CO%3D%2A%7E"
    assert desanitize("User%3ACN%3Da%20b%2CO%3D%2A%7E") == "User:CN=a b,O=*~"
    assert [java_double(v) for v in (1000.0, 1e7, 1.5e-4, 12.5, 0.001, 2.5e20)] == [
        "1000.0", "1.0E7", "1.5E-4", "12.5", "0.001", "2.5E20"]


def _throttle_of(h: Harness, conn: int = 1) -> int:
    return h.sent[conn][-1].throttle_ms


def test_a_producer_over_its_quota_is_told_and_its_connection_muted():
    """Kafka's produce quota: the request's bytes count; over the quota, the answer carries the
    throttle time and the connection reads nothing more for that long (Send.throttle_ms)."""
    from tests.unit.batches import make_batch

    h = Harness()
    h.create("t")
    alter(h, [([("client-id", "test")], [(PRODUCER_BYTE_RATE, 1000.0)])])
    h.run(h.broker.apis.quota_apis.load(h.now))
    throttles = []
    for _ in range(3):
        h.produce("t", make_batch([b"x" * 4000]))
        throttles.append(_throttle_of(h))
        resp = h.response(0, 7)
        assert resp.partition_responses if False else resp.responses[0].partition_responses[0].error_code == 0
        assert resp.throttle_time.total_seconds() * 1000 == throttles[-1]
    # ~4.1 KB each over 10 s: within 1 KB/s until the third; then (rate - 1000) / 1000 * 10 s
    assert throttles[0] == 0 and throttles[1] == 0 and throttles[2] > 0, throttles
    sizes = 3 * h.broker.apis.arrivals.size
    assert throttles[2] == round((sizes / 10.0 - 1000) / 1000 * 10_000)
    # the same client id on another connection shares the rate; another client id has no quota
    h.run(h.broker.handle_request(2, h.frame(0, 7, h.produce_body("t", make_batch([b"y" * 4000]))), h.now))
    assert _throttle_of(h, 2) > throttles[2]
    other = api.encode_request(0, 7, 99, "other", h.produce_body("t", make_batch([b"y" * 4000])))
    h.run(h.broker.handle_request(3, other, h.now))
    assert _throttle_of(h, 3) == 0


def test_a_consumer_over_its_quota_gets_an_empty_answer_and_the_bytes_are_taken_back():
    from tests.unit.batches import make_batch

    h = Harness()
    h.create("t")
    for _ in range(4):
        h.produce("t", make_batch([b"z" * 5000]))
        h.response(0, 7)
    alter(h, [([("user", "ANONYMOUS")], [(CONSUMER_BYTE_RATE, 1000.0)])])
    h.run(h.broker.apis.quota_apis.load(h.now))
    quota = h.broker.apis.quota_apis.fetch
    assert quota.max_window_bytes("ANONYMOUS", "test") == 10_000
    h.request(1, 11, h.fetch_body("t", 0))
    first = h.response(1, 11)
    got = len(first.responses[0].partitions[0].records)
    assert 5000 < got <= 10_000 + 5100 and first.throttle_time.total_seconds() == 0    # at most one batch past the cap
    h.request(1, 11, h.fetch_body("t", 2))
    assert _throttle_of(h) > 0
    second = h.response(1, 11)
    assert second.responses == () and second.throttle_time.total_seconds() > 0
    assert quota.sensors[("ANONYMOUS", "")].measure(h.now) == got / 10.0          # the refused bytes taken back


def test_a_throttled_connection_reads_nothing_more_until_its_throttle_time_has_passed():
    """In the simulator (as in the shell): the answer over the quota goes out at once, with its
    throttle time, and the connection's next request waits that long, as Kafka mutes the channel;
    every broker learnt the quota from the change notification."""
    from strandline.sim.cluster import SimCluster
    from tests.sim.test_replication_sim import create, produce_request

    c = SimCluster((1, 2))
    create(c, "q", [1, 2])
    resp = c.call(2, ALTER, 1, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "producer"}],
                                             "ops": [{"key": PRODUCER_BYTE_RATE, "value": 1000.0, "remove": False}]}],
                                "validate_only": False}, "admin")
    assert resp.entries[0].error_code == ErrorCode.none
    c.settle()
    c.advance(100)
    throttles = []
    for _ in range(3):
        produce_request(c, 1, "q", [b"x" * 4000])
        c.settle()
        waited = 0
        while not c.inbox[(1, "producer")] and waited < 1000:
            c.advance(1)
            waited += 1
        answer = c.response(1, 0, 7, "producer")
        throttles.append(round(answer.throttle_time.total_seconds() * 1000))
    assert throttles[:2] == [0, 0] and throttles[2] > 1000, throttles
    produce_request(c, 1, "q", [b"y"])              # sent at once: the broker reads it only after the throttle
    c.settle()
    c.advance(throttles[2] - 100)
    assert not c.inbox[(1, "producer")]
    c.advance(400)
    assert c.response(1, 0, 7, "producer").responses[0].partition_responses[0].error_code == ErrorCode.none


def test_a_throttled_full_fetch_keeps_no_new_session():
    from tests.unit.batches import make_batch

    h = Harness()
    h.create("t")
    for _ in range(3):
        h.produce("t", make_batch([b"z" * 6000]))
        h.response(0, 7)
    alter(h, [([("client-id", "test")], [(CONSUMER_BYTE_RATE, 1000.0)])])
    h.run(h.broker.load_entity_configs(h.now))
    body = {**h.fetch_body("t", 0), "session_epoch": 0}          # a full fetch asking for a session
    first = h.call(1, 11, body)
    assert first.session_id != 0 and first.responses
    second = h.call(1, 11, {**h.fetch_body("t", 1), "session_epoch": 0})
    assert second.throttle_time.total_seconds() > 0 and second.responses == () and second.session_id == 0
    assert list(h.broker.apis.fetch_sessions.sessions) == [first.session_id]
