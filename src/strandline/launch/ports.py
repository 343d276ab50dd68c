"""Free loopback ports for clusters a process starts on 127.0.0.1 (tests, the lab, benchmarks)."""

from __future__ import annotations

import random
import socket

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST_PORT = 10000


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range, where outgoing connections take their ports."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            low, high = (int(x) for x in f.read().split()[:2])
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_loopback_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """``count`` consecutive ports free on 127.0.0.1, outside the ephemeral range.

    A port taken from the ephemeral range (by binding port 0) can be given, between this check
    and the server's bind, to any outgoing connection on the machine (a client's, a broker's, a
    JVM's), and a broker restarted on its old port can find it taken the same way; outside the
    range only a listener can hold it. The ports come from below the range (from
    ``LOWEST_PORT``), or from above it where a range starting low leaves no room below; where
    neither has room, from the range itself, as binding port 0 would.
    """
    rng = rng or random.Random()
    low, high = ephemeral_range()
    spans = [(LOWEST_PORT, low - 1), (high + 1, 65535), (max(1024, low), high)]
    for first, last in spans:
        if last - first + 1 < count:
            continue
        for _ in range(200):
            base = rng.randrange(first, last - count + 2)
            if all(port_free(port) for port in range(base, base + count)):
                return list(range(base, base + count))
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


def port_free(port: int, reuse_address: bool = False) -> bool:
    """Whether a listener could bind ``port`` on 127.0.0.1 now; with ``reuse_address`` as a server
    binding with SO_REUSEADDR would (a port left in TIME_WAIT by a stopped server is free)."""
    with socket.socket() as s:
        if reuse_address:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
