"""How ``strandline produce`` reads records from lines and ``strandline consume`` prints them.

The consumer's ``--format`` takes kcat's ``-f`` tokens:

    %t topic   %p partition   %o offset   %T timestamp (ms)   %k key   %K key length
    %s value   %S value length   %h headers (name=value,...)   %%  a percent sign
    \\n \\r \\t \\\\  newline, carriage return, tab, backslash

A null key or value prints as nothing, its length as -1 (as kcat). ``--json`` prints one JSON
object per record instead. Everything here works on bytes and is free of I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

DEFAULT_FORMAT = "%s\\n"


class FormatError(ValueError):
    """A --format string with a token that is not one of kcat's."""


@dataclass(frozen=True)
class Record:
    """One consumed record, as the formats see it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _headers(r: Record) -> bytes:
    return b",".join(name.encode() + b"=" + (v or b"") for name, v in r.headers)


_FIELDS: dict[str, Callable[[Record], bytes]] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: str(r.partition).encode(),
    "o": lambda r: str(r.offset).encode(),
    "T": lambda r: str(r.timestamp).encode(),
    "k": lambda r: r.key or b"",
    "K": lambda r: str(-1 if r.key is None else len(r.key)).encode(),
    "s": lambda r: r.value or b"",
    "S": lambda r: str(-1 if r.value is None else len(r.value)).encode(),
    "h": _headers,
}
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}


def compile_format(fmt: str) -> Callable[[Record], bytes]:
    """A function printing one record in ``fmt``; FormatError names a token that is not known."""
    parts: list[bytes | Callable[[Record], bytes]] = []
    literal: list[str] = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        nxt = fmt[i + 1] if i + 1 < len(fmt) else ""
        if ch == "%":
            if nxt == "%":
                literal.append("%")
            elif nxt in _FIELDS:
                if literal:
                    parts.append("".join(literal).encode())
                    literal = []
                parts.append(_FIELDS[nxt])
            else:
                raise FormatError(f"unknown token %{nxt} in format {fmt!r} (known: %t %p %o %T %k %K %s %S %h %%)")
            i += 2
        elif ch == "\\" and nxt in _ESCAPES:
            literal.append(_ESCAPES[nxt])
            i += 2
        else:
            literal.append(ch)
            i += 1
    if literal:
        parts.append("".join(literal).encode())

    def render(r: Record) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(r) for p in parts)

    return render


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


def render_json(r: Record) -> bytes:
    """One record as a JSON line; keys, values and header values as UTF-8 text (null when null)."""
    return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                       "headers": [[n, _text(v)] for n, v in r.headers], "key": _text(r.key),
                       "value": _text(r.value)}).encode() + b"\n"


class InputError(ValueError):
    """A line of producer input that cannot be made a record."""


@dataclass(frozen=True)
class LineParser:
    """Turns one input line (without its newline) into a key and a value.

    ``key_delimiter``: the line is split at its first occurrence into key and value (kcat's
    ``-K``; Kafka's ``parse.key``); a line without it is refused, naming the line. ``null_marker``:
    a key or value equal to it is sent as null (Kafka's ``null.marker``), so ``k1:NULL`` makes a
    tombstone for ``k1``.
    """

    key_delimiter: bytes | None = None
    null_marker: bytes | None = None

    def parse(self, line: bytes, number: int) -> tuple[bytes | None, bytes | None]:
        key: bytes | None = None
        value: bytes | None = line
        if self.key_delimiter is not None:
            at = line.find(self.key_delimiter)
            if at < 0:
                raise InputError(f"line {number} has no key delimiter {self.key_delimiter.decode(errors='replace')!r}")
            key, value = line[:at], line[at + len(self.key_delimiter):]
        if self.null_marker is not None:
            key = None if key == self.null_marker else key
            value = None if value == self.null_marker else value
        return key, value


def parse_header(text: str) -> tuple[str, bytes]:
    """``NAME=VALUE`` of ``--header`` (kcat's ``-H``)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise InputError(f"--header {text!r}: expected NAME=VALUE")
    return name, value.encode()
