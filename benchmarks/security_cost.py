"""What TLS and SASL cost: RF=3 acks=all produce over PLAINTEXT and over SASL_SSL, same run.

Two 3-broker clusters, one from ``strandline up`` and one from ``strandline up --security
sasl_ssl`` (TLS, SCRAM-SHA-512, ACLs; brokers replicate over SASL_SSL too), are started one after
the other and kept; then, for ``--rounds`` rounds, interleaved, ``strandline bench produce
--processes 2 --acks all`` sends ``--records`` 1 KiB records to a new RF=3 topic of each (the
secured one with the admin user's ``--command-config``). Prints each run's MB/s and the brokers'
CPU seconds per MB, and the ratio of the medians. A benchmark, not a test:

    .venv/bin/python benchmarks/security_cost.py [--records 300000] [--rounds 3] [--profile DIR]

``--profile DIR`` profiles the first broker of each cluster while each run produces (it needs
ptrace rights over the broker: root, or ``kernel.yama.ptrace_scope=0``):

- py-spy (in the test extras), ``py-spy record --nonblocking --threads --format raw``, writes the
  run's Python stacks to ``DIR/<PLAINTEXT|SASL_SSL>-<round>.txt``; the script prints each part's
  share of the samples (:data:`WHERE`: by the innermost frame that matches; a C call counts in
  the Python line that makes it). py-spy counts a thread that waits for a core as busy, so on a
  loaded machine these shares are of busy time, not of CPU;
- perf, where installed, ``perf record -e cpu-clock`` (samples only while the broker runs on a
  core), to ``DIR/<...>-<round>.perf``; the script prints the CPU by shared object and kernel
  function (:data:`NATIVE`: OpenSSL, the ssl module, the kernel's copies and TCP, libc, the
  interpreter) and each part's CPU ms per MB produced.

``--cprofile`` runs the secured brokers under cProfile instead (``STRANDLINE_PROFILE``); those
profiles are left in the secured cluster's data directory.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from strandline.launch.up import UpCluster

sys.path.insert(0, os.path.dirname(__file__))
from produce_consume import broker_pids, cpu_seconds  # noqa: E402


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strandline.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def sampler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling one broker (every thread, C frames too) until :func:`stop_sampler`."""
    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--threads", "--rate", "200", "--format", "raw",
                             "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def perf_sampler(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    """``perf record`` of one broker's CPU (the cpu-clock: only while it runs), if perf is here."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    return subprocess.Popen([perf, "record", "-e", "cpu-clock", "-F", str(PERF_HZ), "-p", str(pid), "-o", str(out),
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_sampler(spy: subprocess.Popen[bytes] | None, out: Path) -> None:
    if spy is None:
        return
    spy.send_signal(signal.SIGINT)              # py-spy and perf write their output on SIGINT
    _, err = spy.communicate(timeout=60)
    if not out.exists():
        raise SystemExit(f"{spy.args[0]} wrote no profile: {err.decode(errors='replace').strip()[-500:]}")


PERF_HZ = 499
#: perf's samples by (shared object, part of the symbol's name), the first match winning.
NATIVE: list[tuple[str, str, str]] = [
    ("libcrypto", "", "OpenSSL: AES-GCM and the record layer (libcrypto, libssl)"),
    ("libssl", "", "OpenSSL: AES-GCM and the record layer (libcrypto, libssl)"),
    ("_ssl.", "", "the ssl module's C code (_ssl)"),
    ("[kernel", "copy_", "kernel: copying to and from user memory"),
    ("[kernel", "movs", "kernel: copying to and from user memory"),
    ("[kernel", "clear_page", "kernel: page faults and freshly allocated memory"),
    *(("[kernel", name, "kernel: TCP and the loopback device")
      for name in ("tcp", "ip_", "skb", "dev_", "net_rx", "netif", "loopback", "sock")),
    *(("[kernel", name, "kernel: the log's files") for name in ("ext4", "jbd2", "filemap", "fallocate")),
    ("[kernel", "", "kernel: the rest (system calls, epoll, scheduling, memory)"),
    ("libc.", "", "libc (memcpy, malloc)"),
    ("python", "", "the Python interpreter (asyncio, sslproto, Strandline's code)"),
    ("", "", "other C extensions and libraries"),
]


def native(profile: Path) -> dict[str, int]:
    """A ``perf record`` profile's samples by :data:`NATIVE`'s parts."""
    done = subprocess.run(["perf", "report", "-i", str(profile), "--no-children", "--sort", "dso,sym", "--stdio",
                           "-F", "sample,dso,sym", "-g", "none", "--percent-limit", "0"],
                          capture_output=True, text=True, timeout=300)
    counts: dict[str, int] = {}
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        dso, sym = fields[1], fields[-1]
        part = next(name for d, within, name in NATIVE if d in dso and within in sym)
        counts[part] = counts.get(part, 0) + int(fields[0])
    return counts


def print_native(profiles: dict[str, list[Path]], megabytes: float) -> None:
    """Each part's share of the first broker's CPU (perf) and its CPU ms per MB produced."""
    names = list(profiles)
    totals = {}
    for name in names:
        merged: dict[str, int] = {}
        for path in profiles[name]:
            for part, n in native(path).items():
                merged[part] = merged.get(part, 0) + n
        totals[name] = merged
    print(f"{'the first broker CPU (perf record -e cpu-clock)':66}" + "".join(f"{n:>26}" for n in names))
    for part in [*dict.fromkeys(p for _, _, p in NATIVE), "all"]:
        row = f"{part:66}"
        for name in names:
            merged = totals[name]
            n = sum(merged.values()) if part == "all" else merged.get(part, 0)
            share = n / sum(merged.values()) if merged else 0.0
            ms = n / PERF_HZ * 1000 / (megabytes * len(profiles[name]))
            row += f"{n:7d} {share:6.1%} {ms:6.2f} ms/MB"
        print(row)


#: Where a sample's CPU goes: the first of these its stack matches, from the innermost frame out
#: (a frame is ``function (file:line)``, a C call counted in the Python line calling it); the last
#: two take what is left, by whether Strandline's code runs under the event loop's callback.
WHERE: list[tuple[str, str]] = [
    ("EpollSelector.select", "(waiting in epoll_wait: not CPU, left out)"),
    ("SSLObject.read (", "TLS: decrypting records (SSLObject.read)"),
    ("SSLObject.write (", "TLS: encrypting records (SSLObject.write)"),
    ("SSLObject.do_handshake (", "TLS: handshakes"),
    ("(ssl.py:", "TLS: the ssl module's other Python"),
    ("SSLProtocol.buffer_updated (", "asyncio sslproto: copying received records into its MemoryBIO"),
    ("SSLProtocol._process_outgoing (", "asyncio sslproto: copying records out of its MemoryBIO"),
    ("(asyncio/sslproto.py:", "asyncio sslproto: its other Python"),
    ("._read_ready__", "socket reads (recv_into)"),
    ("send_now (", "socket writes (writev, sendfile, transport.write)"),
    ("_SelectorSocketTransport.write (", "socket writes (writev, sendfile, transport.write)"),
    ("_SelectorSocketTransport._write_", "socket writes (writev, sendfile, transport.write)"),
    ("(strandline/runtime/disk.py:", "log writes (pwrite, preallocation)"),
    ("crc_ok (", "record CRC checks"),
    ("(strandline/", "Strandline's Python (requests, replication, log)"),
    ("", "asyncio's loop and the rest"),
]
#: The samples of the threads beside the event loop's.
OTHER_THREADS = "other threads (log preallocation, ZooKeeper, workers)"


def _part(frames: list[str]) -> str:
    """The part of the innermost frame that matches one of :data:`WHERE`'s patterns; frames below
    the event loop's callbacks in Strandline's own code are its Python."""
    for frame in reversed(frames):
        for pattern, name in WHERE[:-2]:
            if pattern in frame:
                return name
    inner = frames[next((i for i, f in enumerate(frames) if "Handle._run (" in f), 0):]
    return WHERE[-2][1] if any(WHERE[-2][0] in f for f in inner) else WHERE[-1][1]


def where(profile: Path) -> dict[str, int]:
    """Samples of a ``py-spy --format raw`` profile by :data:`WHERE`'s parts."""
    counts: dict[str, int] = {}
    for line in profile.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        frames = stack.split(";")
        part = _part(frames[1:]) if frames[0].endswith("MainThread") else OTHER_THREADS
        counts[part] = counts.get(part, 0) + int(n)
    return counts


def print_where(profiles: dict[str, list[Path]]) -> None:
    """Each part's samples and share of the busy samples (epoll's left out), per protocol."""
    names = list(profiles)
    totals = {}
    for name in names:
        merged: dict[str, int] = {}
        for path in profiles[name]:
            for part, n in where(path).items():
                merged[part] = merged.get(part, 0) + n
        totals[name] = merged
    print(f"{'where the first broker is busy (py-spy)':68}" + "".join(f"{n:>16}" for n in names))
    for part in dict.fromkeys([*(p for _, p in WHERE), OTHER_THREADS]):
        row = f"{part:68}"
        for name in names:
            merged = totals[name]
            busy = sum(n for p, n in merged.items() if not p.startswith("("))
            n = merged.get(part, 0)
            row += f"{n:7d} {n / busy:7.1%}" if busy and not part.startswith("(") else f"{n:7d} {'':7}"
        print(row)


def ssl_speed(megabytes: int = 64) -> tuple[str, float, float]:
    """(cipher, CPU ms per MB, encrypting, decrypting) of two ``ssl.SSLObject`` s over memory BIOs
    (TLS 1.3, this machine's OpenSSL), 256 KiB written and read back at a time into a reused buffer,
    through the BIOs as asyncio's SSL transport does: what the record protection and the BIOs'
    copies cost, with no socket."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "speed")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    with tempfile.NamedTemporaryFile(suffix=".pem") as pem:
        pem.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()) + cert.public_bytes(serialization.Encoding.PEM))
        pem.flush()
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(pem.name)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client, server = client_ctx.wrap_bio(c_in, c_out), server_ctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):                                 # the handshake, over the BIOs
        for end in (client, server):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    piece, buf = os.urandom(256 * 1024), memoryview(bytearray(256 * 1024))

    def run(pieces: int) -> tuple[float, float]:
        encrypting = decrypting = 0.0
        for _ in range(pieces):
            start = time.thread_time()
            client.write(piece)
            chunk = c_out.read()
            middle = time.thread_time()
            s_in.write(chunk)
            while True:
                try:
                    if not server.read(len(buf), buf):
                        break
                except ssl.SSLWantReadError:
                    break
            encrypting, decrypting = encrypting + middle - start, decrypting + time.thread_time() - middle
        return encrypting, decrypting
    run(16)                                             # warm: the BIOs' memory touched once
    encrypting, decrypting = run(megabytes * 4)
    return str(client.cipher()[0]), encrypting * 1000 / megabytes, decrypting * 1000 / megabytes


def produce(bootstrap: str, records: int, config: list[str], pids: list[int], profile: Path | None = None
            ) -> tuple[float, float]:
    """(MB/s as bench produce reports it, brokers' CPU seconds per MB sent); ``profile``: where
    the first broker's samples go."""
    topic = f"cost-{uuid.uuid4().hex[:8]}"
    made = cli("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, "--partitions", "6",
               "--replication-factor", "3", *config)
    if made.returncode != 0:
        raise SystemExit(f"cannot create {topic}: {made.stderr.strip()}")
    spy = sampler(pids[0], profile) if profile is not None else None
    perf_out = profile.with_suffix(".perf") if profile is not None else None
    perf = perf_sampler(pids[0], perf_out) if perf_out is not None else None
    before = cpu_seconds(pids)
    done = cli("bench", "produce", "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
               "--record-size", "1024", "--acks", "all", "--processes", "2", "--producer-props", "linger.ms=5",
               "batch.size=262144", *config)
    if done.returncode != 0:
        raise SystemExit(f"bench produce failed: {done.stderr.strip()[-500:]}")
    used = cpu_seconds(pids) - before
    if profile is not None and perf_out is not None:
        stop_sampler(spy, profile)
        stop_sampler(perf, perf_out)
    m = re.search(r"([\d.]+) MB/sec", done.stdout.strip().splitlines()[-1])
    if m is None:
        raise SystemExit(f"no MB/sec in bench's last line: {done.stdout.strip().splitlines()[-1]}")
    return float(m.group(1)), used / (records * 1024 / 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, metavar="DIR", help="profile the first broker of each cluster (py-spy; perf too where installed)")
    parser.add_argument("--base-port", type=int, default=39300, help="the plain cluster's; the secured one's is 100 "
                        "above, each ZooKeeper's 81 above its cluster's")
    parser.add_argument("--cprofile", action="store_true", help="run the secured brokers under cProfile")
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="strandline-security-cost-"))
    plain = UpCluster(root / "plain", 3, args.base_port, args.base_port + 81, console=False, stderr=root / "plain-up.log")
    env = dict(os.environ, STRANDLINE_PROFILE=str(root / "secure" / "broker.prof")) if args.cprofile else None
    secure = UpCluster(root / "secure", 3, args.base_port + 100, args.base_port + 181, console=False, stderr=root / "secure-up.log",
                       security="sasl_ssl", env=env)
    results: dict[str, list[tuple[float, float]]] = {"PLAINTEXT": [], "SASL_SSL": []}
    try:
        plain.start(timeout=300)
        secure.start(timeout=300)
        config = ["--command-config", str(root / "secure" / "security" / "admin.properties")]
        for round_no in range(1, args.rounds + 1):
            for name, cluster, extra in (("PLAINTEXT", plain, []), ("SASL_SSL", secure, config)):
                out = args.profile / f"{name}-{round_no}.txt" if args.profile is not None else None
                mb_s, cpu_per_mb = produce(cluster.bootstrap, args.records, extra, broker_pids(str(cluster.data_dir)),
                                           out)
                results[name].append((mb_s, cpu_per_mb))
                print(f"round {round_no} {name:9} {mb_s:7.1f} MB/s, brokers {cpu_per_mb * 1000:6.1f} CPU ms per MB",
                      flush=True)
    finally:
        plain.stop()
        secure.stop()
        if args.cprofile:
            print(f"profiles of the secured brokers: {root / 'secure'}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    med = {name: (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
           for name, rows in results.items()}
    print(f"median: PLAINTEXT {med['PLAINTEXT'][0]:.1f} MB/s, SASL_SSL {med['SASL_SSL'][0]:.1f} MB/s "
          f"({med['SASL_SSL'][0] / med['PLAINTEXT'][0]:.2f} of it); brokers' CPU per MB "
          f"{med['PLAINTEXT'][1] * 1000:.1f} and {med['SASL_SSL'][1] * 1000:.1f} ms")
    if args.profile is not None:
        print_where({name: sorted(args.profile.glob(f"{name}-*.txt")) for name in results})
        cipher, encrypting, decrypting = ssl_speed()
        print(f"ssl.SSLObject alone ({cipher}): encrypting {encrypting:.2f}, decrypting {decrypting:.2f} CPU ms per MB")
        if shutil.which("perf"):
            print_native({name: sorted(args.profile.glob(f"{name}-*.perf")) for name in results},
                         args.records * 1024 / 1e6)


if __name__ == "__main__":
    main()
