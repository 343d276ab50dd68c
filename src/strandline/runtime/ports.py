"""Free loopback ports for clusters a process starts on 127.0.0.1 (tests, the lab, benchmarks)."""

from __future__ import annotations

import random
import socket

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST_PORT = 10000


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (outgoing connections take theirs there)."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_loopback_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """``count`` consecutive ports free on 127.0.0.1, below the ephemeral range.

    A port taken from the ephemeral range (by binding port 0) can be given, between this check
    and the server's bind, to any outgoing connection on the machine (a client's, a broker's, a
    JVM's), and a broker restarted on its old port can find it taken the same way; below the range
    only a listener can hold it.
    """
    rng = rng or random.Random()
    high = min(ephemeral_low(), 65000) - count
    if high <= LOWEST_PORT:
        raise RuntimeError(f"no room for {count} ports below the ephemeral range ({ephemeral_low()})")
    for _ in range(200):
        base = rng.randrange(LOWEST_PORT, high)
        if all(_bindable(port) for port in range(base, base + count)):
            return list(range(base, base + count))
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1 between {LOWEST_PORT} and {high}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
