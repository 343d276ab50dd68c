"""CPU per MB of writing a new file into the page cache, as a broker appends to a segment.

Writes ``--mb`` MB of 256 KiB chunks with ``pwrite`` into a new file (no fsync) and prints the
process's CPU time (user + system) per MB for each 256 MB, then removes the file. The figure is
what a broker pays for the kernel's copy of each appended MB, before any Python: on a machine
where it is high, no broker (Kafka included) gets below it.

On a VM that reports free pages back to its host (virtio-balloon free page reporting: the script
prints ``/sys/module/page_reporting/parameters`` when the kernel has them), the first write into
a page the host took back faults in the host, and the copy costs several times more. Run it twice
in a row to see both: the second run reuses pages the first one freed before they are reported.
The file goes in ``--dir`` (default: the working directory): put it on the file system of the
log dirs, not on a tmpfs, where it would measure shared memory instead. A benchmark, not a test:

    .venv/bin/python benchmarks/page_cache_write.py [--mb 4096] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile

CHUNK = 256 * 1024
STEP_MB = 256


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def page_reporting() -> str:
    base = "/sys/module/page_reporting/parameters"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return "no free page reporting in this kernel"
    values = []
    for name in names:
        try:
            with open(os.path.join(base, name)) as f:
                values.append(f"{name}={f.read().strip()}")
        except OSError:
            pass
    return "free page reporting: " + " ".join(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=4096, help="MB to write (a multiple of 256)")
    parser.add_argument("--dir", default=".", help="where the file goes (the log dirs' file system)")
    args = parser.parse_args()
    if args.mb < STEP_MB or args.mb % STEP_MB:
        parser.error(f"--mb must be a positive multiple of {STEP_MB}")
    print(page_reporting())
    data = os.urandom(CHUNK)
    fd, path = tempfile.mkstemp(prefix="page-cache-write-", dir=args.dir)
    try:
        marks, position, total = [], 0, args.mb << 20
        before = cpu_seconds()
        while position < total:
            os.pwrite(fd, data, position)
            position += CHUNK
            if position % (STEP_MB << 20) == 0:
                now = cpu_seconds()
                marks.append(1000 * (now - before) / STEP_MB)
                before = now
        print(f"pwrite of {CHUNK >> 10} KiB chunks into a new file, CPU ms/MB for each {STEP_MB} MB: "
              + ", ".join(f"{m:.2f}" for m in marks))
        print(f"median {statistics.median(marks):.2f} ms/MB over {args.mb} MB")
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
