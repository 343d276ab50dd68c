"""A group coordinator taking over an offsets partition: its load time before and after the log
cleaner compacts ``__consumer_offsets`` (issue 16), and the cleaner's speed.

One partition of ``__consumer_offsets`` on the real disk (a temporary directory) receives
``--commits`` offset commits (Kafka's record formats, one commit per batch as the coordinator
writes them) from ``--groups`` groups, each committing its ``--partitions`` partitions in turn,
and each group's metadata record every 100 commits. Then:

1. a coordinator loads the partition (reads every batch, replays every record), timed;
2. the log cleaner compacts it (``cleanup.policy=compact``, ``segment.bytes`` as given) in the
   slices it runs in a broker, timed: MB/s cleaned and the longest slice;
3. a coordinator loads it again, timed.

A benchmark, not a test::

    .venv/bin/python benchmarks/offsets_load.py [--commits 1000000] [--groups 100] [--segment-bytes 10485760]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from strandline.group import records as rec  # noqa: E402
from strandline.group.coordinator import GroupCoordinator  # noqa: E402
from strandline.log.cleaner import SLICE_WORK, LogCleaner  # noqa: E402
from strandline.log.config import LogConfig  # noqa: E402
from strandline.log.manager import LogManager  # noqa: E402
from strandline.runtime.disk import OsDisk  # noqa: E402

T0 = 1_700_000_000_000


def fill(log, commits: int, groups: int, partitions: int) -> None:
    group_names = [f"group-{g:03d}" for g in range(groups)]
    member = rec.MemberValue("member-1", None, "client", "/127.0.0.1", 300000, 45000, b"\x00" * 40, b"\x00" * 60)
    for i in range(commits):
        g = i % groups
        p = (i // groups) % partitions
        group = group_names[g]
        value = rec.OffsetValue(i, 5, "", T0 + i)
        records = [(rec.offset_key(group, "events", p), rec.offset_value(value))]
        if (i // groups) % 100 == 0:                 # the group's metadata, every 100 of its commits
            records.append((rec.group_key(group), rec.group_value(rec.GroupValue(
                "consumer", i // 100, "range", "member-1", T0 + i, (member,)))))
        log.append_as_leader(rec.build_batch(records, T0 + i), 0, T0 + i)


def load(log) -> tuple[float, int, dict]:
    coordinator = GroupCoordinator({"offsets.topic.num.partitions": 1, "group.max.size": 1 << 30}, None, lambda: "x")
    start = time.perf_counter()
    data = log.read(log.log_start_offset, 1 << 40, max_offset=log.log_end_offset)
    count = coordinator.load_partition(0, rec.iter_records(data), T0)
    seconds = time.perf_counter() - start
    offsets = {(name, tp): o.offset for name, g in coordinator.groups.items() for tp, o in g.offsets.items()}
    return seconds, count, offsets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=10, help="partitions each group commits")
    parser.add_argument("--segment-bytes", type=int, default=10 * 1024 * 1024)
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="offsets-load-")
    try:
        config = LogConfig(segment_bytes=args.segment_bytes, cleanup_policy=("compact",))
        logs = LogManager(OsDisk(), [root], config)
        logs.startup(T0)
        log = logs.get_or_create_log("__consumer_offsets", 0, config, now_ms=T0)
        t = time.perf_counter()
        fill(log, args.commits, args.groups, args.partitions)
        log.flush()
        print(f"wrote {args.commits} commits of {args.groups} groups: {log.size_in_bytes / 1e6:.1f} MB in "
              f"{len(log.segments)} segments ({time.perf_counter() - t:.1f} s)")

        seconds, count, offsets = load(log)
        print(f"load before compaction: {seconds:.2f} s, {count} records replayed, {len(offsets)} offsets")

        cleaner = LogCleaner(logs, backoff_ms=1 << 40)
        now, slices, longest, started = T0 + args.commits, 0, 0.0, time.perf_counter()
        paused_ms = 0
        while True:
            t = time.perf_counter()
            lines = cleaner.tick(now, lambda key: logs.logs[key].log_end_offset)
            spent = time.perf_counter() - t
            longest = max(longest, spent)
            slices += 1
            if lines:
                break
            pause = max(cleaner.next_deadline_ms() - now, 1)     # the pause a broker's cleaner takes
            paused_ms += pause
            now += pause
        took = time.perf_counter() - started
        stats = cleaner.totals
        print(f"cleaning: {took:.2f} s of work, {stats.bytes_read / 1e6:.1f} MB read "
              f"({stats.bytes_read / 1e6 / took:.1f} MB/s), {stats.bytes_written / 1e6:.2f} MB written, "
              f"{stats.records_removed} records removed, {slices} slices of {SLICE_WORK // 1024} KiB of work, "
              f"longest slice {longest * 1000:.1f} ms; in a broker, with its pauses between slices, about "
              f"{took + paused_ms / 1000:.0f} s")
        print(f"  {lines[0]}")
        print(f"after: {log.size_in_bytes / 1e6:.2f} MB in {len(log.segments)} segments")

        seconds_after, count_after, offsets_after = load(log)
        print(f"load after compaction: {seconds_after:.3f} s, {count_after} records replayed, {len(offsets_after)} offsets "
              f"({seconds / seconds_after:.0f}x faster)")
        assert offsets_after == offsets, "compaction changed the committed offsets"
        logs.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
