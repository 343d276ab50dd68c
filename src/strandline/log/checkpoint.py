"""Kafka's checkpoint text files, written atomically (SPEC CKP-1, CKP-2).

Offsets (``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``; one file per log dir)::

    0
    <count>
    <topic> <partition> <offset>

Leader epochs (``leader-epoch-checkpoint``, one per partition directory)::

    0
    <count>
    <epoch> <start offset>

Writes go through ``Disk.write_file_atomic`` (``.tmp``, fsync, rename, fsync the directory). A
read of a malformed file (wrong version, count not matching the entries, bad entry) raises a
:class:`MalformedCheckpoint` naming the file, like Kafka's ``IOException`` that takes the log dir
offline: the broker's own state is broken, so it stops (even while it handles a request).
"""

from __future__ import annotations

from strandline.errors import BrokenInvariant
from strandline.log.disk import Disk

VERSION = 0


class MalformedCheckpoint(BrokenInvariant, ValueError):
    """A checkpoint file of this broker's that cannot be read."""


def _entries(disk: Disk, path: str, fields: int) -> list[list[str]] | None:
    if not disk.exists(path):
        return None
    try:
        text = disk.read_file(path).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedCheckpoint(f"malformed checkpoint file {path}: not UTF-8 text") from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():  # tolerate trailing blank lines only
        lines.pop()
    if len(lines) < 2:
        raise MalformedCheckpoint(f"malformed checkpoint file {path}: missing version or count line")
    if lines[0].strip() != str(VERSION):
        raise MalformedCheckpoint(f"malformed checkpoint file {path}: unrecognized version {lines[0].strip()!r}")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise MalformedCheckpoint(f"malformed checkpoint file {path}: bad entry count {lines[1].strip()!r}") from None
    body = lines[2:]
    if count != len(body):
        raise MalformedCheckpoint(f"malformed checkpoint file {path}: expected {count} entries, found {len(body)}")
    entries = []
    for number, line in enumerate(body, start=3):
        parts = line.split()
        if len(parts) != fields:
            raise MalformedCheckpoint(f"malformed checkpoint file {path}: line {number} {line!r} "
                             f"should have {fields} fields")
        entries.append(parts)
    return entries


def _int(path: str, value: str, line: list[str]) -> int:
    try:
        return int(value)
    except ValueError:
        raise MalformedCheckpoint(f"malformed checkpoint file {path}: bad number in {' '.join(line)!r}") from None


def offsets_text(offsets: dict[tuple[str, int], int]) -> bytes:
    """An offsets checkpoint file's content."""
    lines = [str(VERSION), str(len(offsets))]
    for (topic, partition), offset in sorted(offsets.items()):
        lines.append(f"{topic} {partition} {offset}")
    return ("\n".join(lines) + "\n").encode()


def write_offsets(disk: Disk, path: str, offsets: dict[tuple[str, int], int]) -> None:
    disk.write_file_atomic(path, offsets_text(offsets))


def read_offsets(disk: Disk, path: str) -> dict[tuple[str, int], int]:
    """The offsets in ``path``; an empty dict if the file does not exist."""
    entries = _entries(disk, path, 3)
    if entries is None:
        return {}
    return {(e[0], _int(path, e[1], e)): _int(path, e[2], e) for e in entries}


def write_epochs(disk: Disk, path: str, entries: list[tuple[int, int]]) -> None:
    lines = [str(VERSION), str(len(entries))] + [f"{epoch} {start}" for epoch, start in entries]
    disk.write_file_atomic(path, ("\n".join(lines) + "\n").encode())


def read_epochs(disk: Disk, path: str) -> list[tuple[int, int]]:
    """The ``(epoch, start offset)`` entries in ``path``; empty if the file does not exist."""
    entries = _entries(disk, path, 2)
    if entries is None:
        return []
    return [(_int(path, e[0], e), _int(path, e[1], e)) for e in entries]
