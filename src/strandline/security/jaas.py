"""JAAS configuration text as Kafka reads ``sasl.jaas.config`` (Kafka's ``JaasConfig``).

``<LoginModule class> <flag> key=value key2="quoted value";``: one or more login modules, each
with a control flag (``required``, ``requisite``, ``sufficient``, ``optional``) and options, each
ended by ``;``. A value is a bare word or a double-quoted string (``\\"`` and ``\\\\`` escaped);
``//`` and ``/* */`` comments are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    """Text that is not a JAAS configuration, with what was wrong."""


@dataclass(frozen=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) with kind ``word``, ``quoted`` or the punctuation itself (``=``, ``;``)."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JaasError("unclosed /* comment")
            i = end + 2
        elif ch in "=;":
            out.append((ch, ch))
            i += 1
        elif ch == '"':
            value, i = [], i + 1
            while True:
                if i >= n:
                    raise JaasError("unclosed quoted value")
                if text[i] == "\\" and i + 1 < n:
                    value.append(text[i + 1])
                    i += 2
                elif text[i] == '"':
                    i += 1
                    break
                else:
                    value.append(text[i])
                    i += 1
            out.append(("quoted", "".join(value)))
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"' and not text.startswith("//", i) \
                    and not text.startswith("/*", i):
                i += 1
            out.append(("word", text[start:i]))
    return out


def parse(text: str) -> list[LoginModule]:
    """Every login module of ``text``; :class:`JaasError` for text that is not JAAS."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0

    def take(kinds: tuple[str, ...], what: str) -> str:
        nonlocal i
        if i >= len(tokens) or tokens[i][0] not in kinds:
            found = repr(tokens[i][1]) if i < len(tokens) else "the end"
            raise JaasError(f"expected {what}, found {found}")
        i += 1
        return tokens[i - 1][1]

    while i < len(tokens):
        name = take(("word",), "a login module class")
        flag = take(("word",), "a control flag").lower()
        if flag not in FLAGS:
            raise JaasError(f"invalid control flag {flag!r} of {name}: one of {', '.join(FLAGS)}")
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            key = take(("word",), "an option name")
            take(("=",), f"= after {key}")
            options[key] = take(("word", "quoted"), f"the value of {key}")
        take((";",), "; at the end of the login module")
        modules.append(LoginModule(name, flag, options))
    if not modules:
        raise JaasError("no login module")
    return modules


def single(text: str) -> LoginModule:
    """The one login module of a ``sasl.jaas.config`` (Kafka accepts exactly one there)."""
    modules = parse(text)
    if len(modules) != 1:
        raise JaasError(f"sasl.jaas.config must name exactly one login module; found {len(modules)}")
    return modules[0]
