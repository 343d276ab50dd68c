"""The purgatory of delayed operations: completion by key, expiry, and bounded watch lists."""

from __future__ import annotations

from strandline.replication.purgatory import SWEEP_MS, DelayedCall, Purgatory


def op(keys, deadline: int, results: list, ready: set, conn: int = 1) -> DelayedCall:
    def try_complete(now_ms: int, expired: bool):
        if expired or ready & set(keys):
            results.append((keys, now_ms, expired))
            return [("answer", tuple(keys))]
        return None
    return DelayedCall(conn, deadline, tuple(keys), try_complete)


def test_an_operation_completes_once_by_key_or_by_expiry():
    p, results, ready = Purgatory(), [], set()
    a, b = op([("t", 0), ("t", 1)], 100, results, ready), op([("t", 1)], 50, results, ready)
    p.watch(a)
    p.watch(b)
    assert p.check_keys([("t", 0)], 10) == [] and len(p) == 2
    ready.add(("t", 0))
    assert p.check_keys([("t", 0), ("t", 1)], 20) == [("answer", (("t", 0), ("t", 1)))]
    assert p.next_deadline() == 50
    assert p.expire(49) == [] and p.expire(50) == [("answer", (("t", 1),))]
    assert p.expire(200) == [] and len(p) == 0 and p.next_deadline() is None
    assert [r[2] for r in results] == [False, True]


def test_watch_lists_stay_short_under_many_long_polls_of_many_keys():
    """A fetch session's long poll watches every partition; thousands of polls expiring one after
    another leave each key's list short, and the leftovers of keys never watched again are swept."""
    p, results = Purgatory(), []
    keys = [("t", i) for i in range(2000)]
    for n in range(50):
        p.watch(op(keys, n, results, set()))
        p.expire(n)
    assert len(results) == 50 and len(p) == 0
    assert max(len(ops) for ops in p.by_key.values()) <= 2
    for n in range(SWEEP_MS, SWEEP_MS + 3):        # other keys: the first ones' leftovers get swept
        p.watch(op([("u", 0)], n, results, set()))
        p.expire(n)
    assert list(p.by_key) == [("u", 0)] and len(p.by_key[("u", 0)]) <= 2


def test_a_closed_connection_cancels_its_operations():
    p, results = Purgatory(), []
    p.watch(op([("t", 0)], 100, results, set(), conn=7))
    p.watch(op([("t", 0)], 100, results, set(), conn=8))
    p.cancel_connection(7)
    assert len(p) == 1 and [o.conn_id for o in p.by_key[("t", 0)] if not o.completed] == [8]
    assert p.expire(100) == [("answer", (("t", 0),))]


def test_deadlines_come_from_a_heap_that_skips_completed_operations():
    """Thousands of acks=all produces complete by key between two expiries: the next deadline is
    the earliest live one, operations expire in deadline order, and the completed ones do not pile
    up in the heap."""
    p, results, ready = Purgatory(), [], set()
    for n in range(3000):
        p.watch(op([("t", n)], 10_000 + n, results, ready))
    ready.update(("t", n) for n in range(0, 3000, 2))
    p.check_keys([("t", n) for n in range(3000)], 5)
    assert len(p) == 1500 and p.next_deadline() == 10_001
    assert [k for k, _ in p.expire(10_010)] == ["answer"] * 5
    assert [r[0][0][1] for r in results[-5:]] == [1, 3, 5, 7, 9]
    assert len(p) == 1495 and p.next_deadline() == 10_011
    assert len(p.pending) <= 2 * len(p) + 16
    p.expire(20_000)
    assert len(p) == 0 and p.next_deadline() is None and not p.pending
