"""Loopback ports for the clusters tests and the lab start: below the ephemeral range, free."""

from __future__ import annotations

import socket

from strandline.launch import ports as ports_module
from strandline.launch.ports import LOWEST_PORT, ephemeral_range, free_loopback_ports


class Picks:
    """A random source that offers the given bases in order."""

    def __init__(self, *bases: int) -> None:
        self.bases = list(bases)

    def randrange(self, low: int, high: int) -> int:
        base = self.bases.pop(0)
        assert low <= base < high
        return base


def test_ports_are_consecutive_and_below_the_ephemeral_range():
    for _ in range(20):
        ports = free_loopback_ports(4)
        assert ports == list(range(ports[0], ports[0] + 4))
        assert LOWEST_PORT <= ports[0] and ports[-1] < ephemeral_range()[0]


def test_a_range_with_a_listening_port_is_passed_over():
    base = free_loopback_ports(6)[0]
    with socket.socket() as held:
        held.bind(("127.0.0.1", base + 2))
        held.listen()
        assert free_loopback_ports(3, Picks(base, base + 3)) == [base + 3, base + 4, base + 5]


def test_the_ports_right_below_the_range_can_be_picked(monkeypatch):
    base = free_loopback_ports(4)[0]
    monkeypatch.setattr(ports_module, "ephemeral_range", lambda: (base + 4, 60999))
    assert free_loopback_ports(4, Picks(base)) == [base, base + 1, base + 2, base + 3]


def test_a_range_that_starts_low_leaves_the_ports_above_it(monkeypatch):
    """With ip_local_port_range at 1024-50000 (a common tuning) no port below it is left: the ports
    come from above it."""
    monkeypatch.setattr(ports_module, "ephemeral_range", lambda: (1024, 50000))
    for _ in range(10):
        ports = free_loopback_ports(4)
        assert ports[0] > 50000 and ports[-1] <= 65535
