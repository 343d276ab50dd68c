"""Kafka's checkpoint text files, written atomically (SPEC CKP-1, CKP-2).

Offsets (``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``)::

    0
    <count>
    <topic> <partition> <offset>

Leader epochs (``leader-epoch-checkpoint``, per partition)::

    0
    <count>
    <epoch> <start offset>
"""

from __future__ import annotations

from strandline.log.disk import Disk

VERSION = 0


def _lines(disk: Disk, path: str) -> list[list[str]] | None:
    if not disk.exists(path):
        return None
    text = disk.read_file(path).decode("utf-8", errors="replace")
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or lines[0] != [str(VERSION)]:
        raise ValueError(f"malformed checkpoint file {path}: unknown version or missing header")
    try:
        count = int(lines[1][0])
    except (ValueError, IndexError):
        raise ValueError(f"malformed checkpoint file {path}: bad entry count") from None
    if count != len(lines) - 2:
        raise ValueError(f"malformed checkpoint file {path}: expected {count} entries, found {len(lines) - 2}")
    return lines[2:]


def write_offsets(disk: Disk, path: str, offsets: dict[tuple[str, int], int]) -> None:
    body = [str(VERSION), str(len(offsets))]
    body += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    disk.write_file_atomic(path, ("\n".join(body) + "\n").encode())


def read_offsets(disk: Disk, path: str) -> dict[tuple[str, int], int]:
    lines = _lines(disk, path)
    if lines is None:
        return {}
    result = {}
    for entry in lines:
        if len(entry) != 3:
            raise ValueError(f"malformed checkpoint file {path}: bad entry {' '.join(entry)!r}")
        try:
            result[(entry[0], int(entry[1]))] = int(entry[2])
        except ValueError:
            raise ValueError(f"malformed checkpoint file {path}: bad entry {' '.join(entry)!r}") from None
    return result


def write_epochs(disk: Disk, path: str, entries: list[tuple[int, int]]) -> None:
    body = [str(VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    disk.write_file_atomic(path, ("\n".join(body) + "\n").encode())


def read_epochs(disk: Disk, path: str) -> list[tuple[int, int]]:
    lines = _lines(disk, path)
    if lines is None:
        return []
    try:
        return [(int(e), int(o)) for e, o in lines]
    except ValueError:
        raise ValueError(f"malformed checkpoint file {path}: bad entry") from None
