"""The principal of an SSL client: KIP-371's ``ssl.principal.mapping.rules``, as Kafka's
``SslPrincipalMapper`` applies them to the distinguished name of the client's certificate.

``ssl.principal.mapping.rules`` is a list of rules separated by commas, each tried in turn:

- ``RULE:pattern/replacement/`` (optionally ``/L`` or ``/U`` at the end: lower or upper case the
  result): when ``pattern`` (a regular expression) matches the whole DN, the principal name is the
  DN with every match of ``pattern`` replaced by ``replacement`` (``$1`` is group 1; a reference to
  a group the pattern lacks is kept as literal text); ``\\/`` is a ``/`` in either part;
- ``DEFAULT``: the DN itself.

A DN no rule applies to has no principal (:class:`NoMatchingRule`). The connection's principal is
``User:<name>``. Patterns are Java regular expressions read by Python's :mod:`re`; what the
rules commonly use (classes, groups, lazy and possessive quantifiers, anchors, ``(?<name>...)``)
means the same in both.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

DEFAULT_RULES = "DEFAULT"

_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")
_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<([A-Za-z][A-Za-z0-9]*)>")


class InvalidRule(ValueError):
    """``ssl.principal.mapping.rules`` that Kafka refuses, with the rule at fault."""


class NoMatchingRule(ValueError):
    """No rule gives the DN a principal name: the client is not authenticated."""


def _java_pattern(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(_NAMED_GROUP.sub(r"(?P<\1>", pattern))
    except re.error as exc:
        raise InvalidRule(f"Invalid rule pattern {pattern!r}: {exc}") from None


def _escape_literal_back_references(unescaped: str, groups: int) -> str:
    """Kafka's ``escapeLiteralBackReferences``: a ``$N`` naming no group becomes literal ``\\$N``
    (``$123`` with 12 groups is group 12 followed by 3). Positions are those of the unescaped
    text, as Kafka computes them."""
    if groups == 0:
        return unescaped
    value = unescaped
    for ref in _BACK_REFERENCE.finditer(unescaped):
        number = ref.group(1)
        if number.startswith("0"):
            continue
        index = int(number)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = ref.start(1)
            value = value[:start - 1] + "\\" + value[start - 1:]
    return value


def _java_replacement(template: str, match: re.Match[str]) -> str:
    """What Java's ``Matcher.appendReplacement`` writes for ``template``: ``\\x`` is ``x``, ``$N``
    the longest group number that exists, ``${name}`` a named group."""
    out: list[str] = []
    groups = match.re.groups
    i = 0
    while i < len(template):
        ch = template[i]
        if ch == "\\":
            if i + 1 == len(template):
                raise ValueError("character to be escaped is missing")
            out.append(template[i + 1])
            i += 2
            continue
        if ch != "$":
            out.append(ch)
            i += 1
            continue
        i += 1
        if i == len(template):
            raise ValueError("Illegal group reference: group index is missing")
        ref: int | str
        if template[i] == "{":
            end = template.find("}", i)
            if end < 0:
                raise ValueError("named capturing group is missing trailing '}'")
            ref, i = template[i + 1:end], end + 1
            if ref not in match.re.groupindex:
                raise ValueError(f"No group with name {{{ref}}}")
        else:
            if not template[i].isdigit() or not template[i].isascii():
                raise ValueError("Illegal group reference")
            number = int(template[i])
            i += 1
            while i < len(template) and template[i].isascii() and template[i].isdigit() and \
                    number * 10 + int(template[i]) <= groups:
                number = number * 10 + int(template[i])
                i += 1
            if number > groups:
                raise ValueError(f"No group {number}")
            ref = number
        value = match.group(ref)
        if value is not None:
            out.append(value)
    return "".join(out)


@dataclass(frozen=True)
class Rule:
    pattern: str | None = None           # None: DEFAULT
    replacement: str | None = None
    to_lower: bool = False
    to_upper: bool = False

    @property
    def is_default(self) -> bool:
        return self.pattern is None

    def apply(self, dn: str) -> str | None:
        """The principal name this rule gives ``dn``, or None when it does not apply."""
        if self.pattern is None:
            return dn
        compiled = _java_pattern(self.pattern)
        if compiled.fullmatch(dn) is None:
            return None
        template = _escape_literal_back_references(self.replacement or "", compiled.groups)
        try:
            result = compiled.sub(lambda m: _java_replacement(template, m), dn)
        except ValueError as exc:
            raise NoMatchingRule(f"rule {self} cannot map {dn}: {exc}") from None
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        """As Kafka prints a rule."""
        if self.pattern is None:
            return "DEFAULT"
        text = "RULE:" + self.pattern
        if self.replacement is not None:
            text += "/" + self.replacement
        if self.to_lower:
            text += "/L"
        elif self.to_upper:
            text += "/U"
        return text


def parse_rules(rules: str | None) -> tuple[Rule, ...]:
    """``ssl.principal.mapping.rules`` (None: ``DEFAULT``); :class:`InvalidRule` for a rule
    Kafka refuses. Empty rules are ignored."""
    text = DEFAULT_RULES if rules is None else rules
    found: list[Rule] = []
    for piece in _SPLITTER.finditer(text.strip()):
        rule = piece.group(1)
        match = _PARSER.match(rule)
        if match is None:                # cannot happen: the last alternative matches anything
            raise InvalidRule(f"Invalid rule: {rule}")
        if match.end() != len(rule):
            raise InvalidRule(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end():]}`")
        if match.group(1) is not None:
            found.append(Rule())
        elif match.group(2) is not None:
            _java_pattern(match.group(2))
            found.append(Rule(match.group(2), match.group(4), match.group(6) == "L", match.group(6) == "U"))
    return tuple(found)


@functools.lru_cache(maxsize=64)
def _mapper(rules: str | None) -> tuple[Rule, ...]:
    return parse_rules(rules)


def principal_name(dn: str, rules: tuple[Rule, ...]) -> str:
    """The name the first rule that applies gives ``dn``; :class:`NoMatchingRule` if none does."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    raise NoMatchingRule(f"No rules apply to {dn}, rules [{', '.join(str(r) for r in rules)}]")


def ssl_principal(dn: str, rules: str | None) -> str:
    """The principal name of a client whose certificate's subject is ``dn`` (RFC 2253, as Java's
    ``X500Principal.getName()`` writes it) under ``ssl.principal.mapping.rules``; the principal
    is ``User:<name>``. :class:`InvalidRule` for bad rules, :class:`NoMatchingRule` when none
    applies."""
    return principal_name(dn, _mapper(rules))
