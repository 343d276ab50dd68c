"""The lab's network: every broker in its own network namespace, partitions made with nftables.

Layout of one lab run (``index`` keeps concurrent runs apart)::

    root namespace: bridge slbr<index>  10.201.<index>.1/24   the lab itself: producers, sampler
                                        10.201.<index>.2/32   ZooKeeper (listens there only)
    namespace sl<index>b<id>: veth      10.201.<index>.<10+id>  broker <id>, port 9092

Each broker namespace holds one nftables table, ``inet strandline_lab``, with an input and an
output chain. A cut of the traffic from node A to node B is one rule in B's input chain
(``ip saddr A drop``), and for ZooKeeper, which lives in the root namespace, also one in the
broker's output chain. Dropping (not rejecting) is what a partition looks like to TCP: the peer
learns nothing until its own timeouts fire. ``heal`` flushes the chains; ``close`` deletes the
namespaces, the veths and the bridge, so that nothing outlives the run.

Root is needed (network namespaces and nftables). :func:`unavailable_reason` says why a
partition cannot be made on this machine, in one line.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass, field

from strandline.errors import StrandlineError

ZOOKEEPER = "zk"
CLIENTS = "clients"
TABLE = "strandline_lab"


def unavailable_reason() -> str | None:
    """None when partitions can be made here, else one line saying why not."""
    if os.geteuid() != 0:
        return "network partitions need root (network namespaces and nftables)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"network partitions need the `{tool}` command (Debian: apt-get install " \
                   f"{'iproute2' if tool == 'ip' else 'nftables'})"
    return None


class NetworkError(StrandlineError):
    pass


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # its own session: a Ctrl-C at the terminal reaches the lab, which then cleans up, not `ip` halfway
    result = subprocess.run(list(args), capture_output=True, text=True, start_new_session=True)
    if check and result.returncode != 0:
        raise NetworkError(f"{' '.join(args)}: {result.stderr.strip() or result.returncode}")
    return result


LOCK_DIR = "/run/lock" if os.path.isdir("/run/lock") else "/tmp"


def _reserve_index() -> tuple[int, int]:
    """A subnet index no other lab on this machine holds: (index, fd of its lock file). The lock
    (flock) is held for the whole run, so two labs never share (or delete) each other's network."""
    existing = set(os.listdir("/sys/class/net"))
    start = os.getpid() % 200
    for k in range(200):
        index = (start + k) % 200 + 20
        if f"slbr{index}" in existing:
            continue
        fd = os.open(os.path.join(LOCK_DIR, f"strandline-lab-{index}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return index, fd
    raise NetworkError("no free lab subnet: 200 labs are running")


@dataclass
class LabNetwork:
    """Namespaces, veths and a bridge for ``broker_ids``; every rule it adds is remembered."""

    broker_ids: list[int]
    index: int = -1
    created: bool = False
    cuts: set[tuple[str, str]] = field(default_factory=set)
    made: list[tuple[str, str]] = field(default_factory=list)   # ("netns"|"link", name), in creation order
    _lock_fd: int = -1

    @property
    def bridge(self) -> str:
        return f"slbr{self.index}"

    def namespace(self, broker_id: int) -> str:
        return f"sl{self.index}b{broker_id}"

    def address(self, node: str | int) -> str:
        if node == CLIENTS:
            return f"10.201.{self.index}.1"
        if node == ZOOKEEPER:
            return f"10.201.{self.index}.2"
        return f"10.201.{self.index}.{10 + int(node)}"

    def exec_prefix(self, broker_id: int) -> list[str]:
        """The command prefix that runs a program inside the broker's namespace."""
        return ["ip", "netns", "exec", self.namespace(broker_id)]

    def create(self) -> None:
        if self.index < 0:
            self.index, self._lock_fd = _reserve_index()
        self.created = True
        net = f"10.201.{self.index}"
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self.made.append(("link", self.bridge))
        _run("ip", "addr", "add", f"{net}.1/24", "dev", self.bridge)
        _run("ip", "addr", "add", f"{net}.2/32", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for b in self.broker_ids:
            ns, outer, inner = self.namespace(b), f"sl{self.index}v{b}", f"sl{self.index}p{b}"
            _run("ip", "netns", "add", ns)
            self.made.append(("netns", ns))
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            self.made.append(("link", outer))
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "link", "set", outer, "master", self.bridge, "up")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.address(b)}/24", "dev", inner)
            _run("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
            self._nft(b, f"add table inet {TABLE}")
            for hook in ("input", "output"):
                self._nft(b, f"add chain inet {TABLE} {hook} {{ type filter hook {hook} priority 0 ; policy accept ; }}")

    def _nft(self, broker_id: int, command: str) -> None:
        _run("ip", "netns", "exec", self.namespace(broker_id), "nft", command)

    # -- partitions ----------------------------------------------------------------------------------

    def cut(self, src: str | int, dst: str | int) -> None:
        """Drop every packet from ``src`` to ``dst`` (one way). Nodes are broker ids, ZOOKEEPER or CLIENTS."""
        if isinstance(dst, int):
            self._nft(dst, f"add rule inet {TABLE} input ip saddr {self.address(src)} drop")
        elif isinstance(src, int):
            self._nft(src, f"add rule inet {TABLE} output ip daddr {self.address(dst)} drop")
        else:
            raise NetworkError(f"cannot cut {src} from {dst}: one side must be a broker")
        self.cuts.add((str(src), str(dst)))

    def cut_requests(self, src: int, dst: int, port: int) -> None:
        """Drop what ``src`` sends to ``dst``'s listener ``port``: ``src`` can no longer ask ``dst``
        anything (fetch, produce, control requests), while ``dst`` still reaches ``src``'s listener."""
        self._nft(dst, f"add rule inet {TABLE} input ip saddr {self.address(src)} tcp dport {port} drop")
        self.cuts.add((str(src), f"{dst}:{port}"))

    def cut_both(self, a: str | int, b: str | int) -> None:
        self.cut(a, b)
        self.cut(b, a)

    def isolate(self, broker_id: int, from_clients: bool = False) -> None:
        """Cut ``broker_id`` from every other broker and from ZooKeeper (and the clients if asked)."""
        for other in self.broker_ids:
            if other != broker_id:
                self.cut_both(broker_id, other)
        self.cut_both(broker_id, ZOOKEEPER)
        if from_clients:
            self.cut_both(broker_id, CLIENTS)

    def heal(self) -> None:
        for b in self.broker_ids:
            for hook in ("input", "output"):
                self._nft(b, f"flush chain inet {TABLE} {hook}")
        self.cuts.clear()

    def close(self) -> None:
        """Remove what ``create`` made (and only that); safe to call twice and after a failed ``create``."""
        for kind, name in reversed(self.made):
            if kind == "netns":
                _run("ip", "netns", "del", name, check=False)   # takes its veth end and nft table along
            else:
                _run("ip", "link", "del", name, check=False)
        self.made.clear()
        self.created = False
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
