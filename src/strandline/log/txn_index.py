"""The aborted-transaction index of one log segment (``<base offset>.txnindex``, Kafka's TransactionIndex).

One 34-byte entry per transaction whose abort marker lies in the segment, in marker order, in
Kafka's layout: ``int16 version (0), int64 producer id, int64 first offset, int64 last offset (the
abort marker), int64 last stable offset`` (once the abort was written). A read_committed fetch
collects the entries that overlap what it returns (``Log.collect_aborted_txns``) so the client
drops those records.

The file appears with its first entry, like the other indexes; entries are read on first use
and kept in memory (aborts are rare). It is flushed with its segment, and the log rebuilds the
entries of everything it replays after an unclean shutdown.
"""

from __future__ import annotations

import posixpath
import struct

from strandline.errors import BrokenInvariant
from strandline.log.disk import Disk, FileHandle
from strandline.log.producer_state import AbortedTxn

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size                 # 34
VERSION = 0


class CorruptIndexError(BrokenInvariant, ValueError):
    """A transaction index whose size or entry versions are wrong: this broker's own file is broken."""


def encode(txn: AbortedTxn) -> bytes:
    return _ENTRY.pack(VERSION, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)


def decode(data: bytes, path: str = "") -> list[AbortedTxn]:
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"transaction index {path} of {len(data)} bytes is not whole entries")
    entries = []
    for pos in range(0, len(data), ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != VERSION:
            raise CorruptIndexError(f"transaction index {path} has an entry of version {version}")
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


class TransactionIndex:
    def __init__(self, disk: Disk, directory: str, base_offset: int, *, exists: bool | None = None) -> None:
        self.disk = disk
        self.path = posixpath.join(directory, f"{base_offset:020d}{TXN_INDEX_SUFFIX}")
        self._exists = exists              # None: not looked at yet
        self._entries: list[AbortedTxn] | None = None if exists is not False else []
        self._handle: FileHandle | None = None
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, read from the file on first use (a torn last entry is dropped)."""
        if self._entries is None:
            exists = self._exists if self._exists is not None else self.disk.exists(self.path)
            self._exists = exists
            entries: list[AbortedTxn] = []
            if exists:
                data = self.disk.read_file(self.path)
                whole = len(data) - len(data) % ENTRY_SIZE
                entries = decode(data[:whole], self.path)
                if whole != len(data):
                    self._file().truncate(whole)
            self._entries = entries
        return self._entries

    def _file(self) -> FileHandle:
        if self._handle is None:
            self._handle = self.disk.open(self.path)
            self._exists = True
        return self._handle

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"aborted transaction at {txn.last_offset} is not after the last one "
                             f"({entries[-1].last_offset}) in {self.path}")
        self._file().append(encode(txn))
        entries.append(txn)
        self._dirty = True

    def extend(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            self.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose abort marker is at or after ``offset``."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        self._file().truncate(keep * ENTRY_SIZE)
        self._dirty = True

    def unflushed(self) -> bool:
        return self._dirty and self._handle is not None

    def mark_flushed(self) -> None:
        self._dirty = False

    def flush(self) -> None:
        if self._dirty and self._handle is not None:
            self._handle.flush()
            self._dirty = False

    def close(self) -> None:
        if self._handle is not None:
            self.flush()
            self._handle.close()
            self._handle = None

    def delete(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._exists is not False and self.disk.exists(self.path):
            self.disk.remove(self.path)
        self._exists = False
        self._entries = []
