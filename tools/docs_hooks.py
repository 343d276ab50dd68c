"""The docs site's generated parts, written at build time so that they cannot drift from the code.

``mkdocs.yml`` names this file under ``hooks:``. A page asks for a part with a marker line,
``<!-- strandline:NAME -->``, which :func:`on_page_markdown` replaces with the part:

- ``broker-config``, ``topic-config``, ``group-config``: every configuration key of
  :mod:`strandline.core.config` and :mod:`strandline.core.topic_keys`, with its type, default, valid values and whether it may change
  while the brokers run;
- ``cli``: every command of ``strandline`` with every option, from its argparse parsers;
- ``sim-menu``, ``sim-configs``: what ``strandline sim explore`` may do, and its ``--config`` choices;
- ``lab-scenarios``: the catalogue of ``strandline lab``.

On the requirements page each ``### ID`` section gets the list of the tests that name the ID
(found by reading ``tests/``), and the build fails when a test names an ID the page does not state.
An unknown marker fails the build too. ``tests/unit/project/test_docs.py`` calls these functions directly.
"""

from __future__ import annotations

import ast
import html
import os
import re
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

#: The families of requirement IDs; a test names one as e.g. ``ACK-2`` or ``NET-6b``.
ID_FAMILIES = ("ASG", "CLI", "REP", "ACK", "ISR", "EPO", "CKP", "DUR", "CTL", "NET", "LOSS", "SAFE", "CON",
               "PRO", "SPK", "ELR")
ID_PATTERN = re.compile(r"(?<![A-Za-z0-9_-])((?:%s)-\d{1,2}[a-z]?)(?![A-Za-z0-9_])" % "|".join(ID_FAMILIES))

#: Strings in tests/ that look like requirement IDs and are not, with the reason.
NOT_REQUIREMENTS = {
    "NET-9": "the name of a lab scenario that does not exist, in the test of the lab's answer to one",
}

#: Test files whose IDs are examples, not claims: the tests of this page's generation.
NOT_PROOFS = ("tests/unit/project/test_docs.py",)

MARKER = re.compile(r"^<!-- strandline:([a-z-]+) -->$", re.MULTILINE)
REQUIREMENT_HEADING = re.compile(r"^### ((?:%s)-\d{1,2}[a-z]?)\b" % "|".join(ID_FAMILIES))


class DocsError(Exception):
    """A generated part that cannot be written; the build stops with its message."""


def _cell(text: object) -> str:
    """Text for one cell of a Markdown table."""
    text = html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")
    # emphasis characters are literal outside code spans (the odd-numbered pieces between backticks)
    pieces = text.split("`")
    return "`".join(re.sub(r"([*_])", r"\\\1", p) if i % 2 == 0 else p for i, p in enumerate(pieces))


def _code(text: object) -> str:
    return "`" + str(text).replace("|", "\\|") + "`" if str(text) else ""


# ---------------------------------------------------------------- configuration

def key_cell(name: str) -> str:
    """A configuration key for a table's first column: code that may wrap after a dot only."""
    return "<code>" + html.escape(name).replace(".", ".<wbr>") + "</code>"


def _default_text(key) -> str:
    from strandline.core.config import config_text
    from strandline.core.config_key import LONG_MAX, INT_MAX

    if key.default is None:
        return "(none)"
    if key.default == LONG_MAX and key.kind in ("long", "int"):
        return "Long.MAX_VALUE"
    if key.default == INT_MAX and key.kind in ("long", "int"):
        return "Integer.MAX_VALUE"
    if key.kind == "double" and key.default == 1.7976931348623157e308:
        return "Double.MAX_VALUE"
    text = config_text(key.default)
    return '""' if text == "" else text


def _valid_text(key) -> str:
    if key.kind in ("choice", "list") and key.choices:
        return ("one of " if key.kind == "choice" else "items of ") + ", ".join(key.choices)
    if key.kind in ("int", "long", "double"):
        lo = "" if key.lo is None else f"≥ {key.lo:g}"
        hi = "" if key.hi is None else f"≤ {key.hi:g}"
        return ", ".join(p for p in (lo, hi) if p)
    return ""


#: What a key without a ``doc`` of its own is, where Strandline does more than accept and store it.
DERIVED = {
    "log.roll.ms": "unset: log.roll.hours",
    "log.roll.jitter.ms": "unset: log.roll.jitter.hours",
    "log.retention.ms": "unset: log.retention.minutes, else log.retention.hours",
    "log.flush.interval.ms": "unset: log.flush.scheduler.interval.ms",
    "log.dirs": "unset: log.dir",
    "zookeeper.connection.timeout.ms": "unset: zookeeper.session.timeout.ms",
    "advertised.listeners": "unset: listeners",
}


def broker_config_table() -> str:
    from strandline.core.config import BROKER_KEYS, DYNAMIC_BROKER_KEYS

    rows = ["| key | type | default | valid values | dynamic | notes |", "|---|---|---|---|---|---|"]
    for name in sorted(BROKER_KEYS):
        key = BROKER_KEYS[name]
        notes = key.doc or DERIVED.get(name, "")
        rows.append(f"| {key_cell(name)} | {key.kind} | {_cell(_default_text(key))} | {_cell(_valid_text(key))} "
                    f"| {'yes' if name in DYNAMIC_BROKER_KEYS else 'read-only'} | {_cell(notes)} |")
    return "\n".join(rows)


def _overridable_table(what: str, table) -> str:
    """A table of topic or group keys: each with the broker key it defaults from (or its own default)."""
    rows = [f"| {what} key | type | default from broker key | valid values |", "|---|---|---|---|"]
    for name in sorted(table):
        broker_key, key = table[name]
        own = _default_text(key)
        default = _code(broker_key) if broker_key else _cell(own) if own.strip('"') else "(none: empty)"
        rows.append(f"| {key_cell(name)} | {key.kind} | {default} | {_cell(_valid_text(key) or key.doc)} |")
    return "\n".join(rows)


def topic_config_table() -> str:
    from strandline.core.topic_keys import TOPIC_KEYS

    return _overridable_table("topic", TOPIC_KEYS)


def group_config_table() -> str:
    from strandline.core.group_keys import GROUP_KEYS

    return _overridable_table("group", GROUP_KEYS)


# ---------------------------------------------------------------- the command line

def _subcommands(parser):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            return [(name, sub, helps.get(name)) for name, sub in action.choices.items()]
    return []


def commands() -> list[tuple[str, object, str | None]]:
    """Every leaf command of ``strandline``: (its words, its parser, its one-line help)."""
    from strandline.cli.main import build_parser

    found = []

    def walk(words: str, parser, help_text: str | None) -> None:
        subs = _subcommands(parser)
        if not subs:
            found.append((words, parser, help_text))
        for name, sub, sub_help in subs:
            walk(f"{words} {name}", sub, sub_help or help_text if not _subcommands(sub) else sub_help)

    walk("strandline", build_parser(), None)
    return found


@contextmanager
def _plain_environment():
    """Defaults as they are without STRANDLINE_* variables, usage lines 100 columns wide (argparse
    wraps them to the terminal's width); the environment as it was afterwards."""
    saved = {k: os.environ.get(k) for k in ("STRANDLINE_BOOTSTRAP_SERVERS", "STRANDLINE_DATA_DIR", "COLUMNS")}
    os.environ.pop("STRANDLINE_BOOTSTRAP_SERVERS", None)
    os.environ.pop("STRANDLINE_DATA_DIR", None)
    os.environ["COLUMNS"] = "100"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _option_rows(parser) -> list[str]:
    import argparse

    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += " " + (action.metavar or action.dest.upper())
        else:
            name = action.metavar or action.dest
        help_text = formatter._expand_help(action) if action.help else ""
        if action.choices and not isinstance(action.choices, dict):
            help_text = f"{{{','.join(map(str, action.choices))}}} " + help_text
        if action.required and action.option_strings:
            help_text = "required. " + help_text
        rows.append(f"| {_code(name)} | {_cell(help_text)} |")
    return rows


def cli_reference() -> str:
    with _plain_environment():
        return _cli_reference()


def _cli_reference() -> str:
    parts = []
    for words, parser, help_text in commands():
        parts.append(f"### `{words}`\n")
        description = parser.description or help_text
        if description:
            parts.append(_cell(description).replace("\\|", "|") + "\n")
        usage = parser.format_usage().strip().removeprefix("usage: ")
        parts.append(f"```\n{usage}\n```\n")
        rows = _option_rows(parser)
        if rows:
            parts.append("| option | meaning |\n|---|---|\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


# ---------------------------------------------------------------- the simulator and the lab

def sim_menu() -> str:
    from strandline.sim import menu

    rows = ["| name | kind |", "|---|---|"]
    kinds = [(menu.FAULT_FAMILIES, "a family of faults"), (menu.ADMIN_FAMILIES, "an operator's requests"),
             (menu.WORKLOAD_OPTIONS, "a workload option")]
    for names, kind in kinds:
        rows += [f"| `{name}` | {kind} |" for name in names]
    return "\n".join(rows)


def sim_configs() -> str:
    from strandline.sim.configs import CONFIGS

    rows = ["| `--config` | configs | acknowledgements checked | must lose some | power loss | transactions |",
            "|---|---|---|---|---|---|"]
    for name, c in CONFIGS.items():
        configs = ", ".join(f"`{k}={v}`" for k, v in [*sorted(c.broker.items()), *c.topic])
        acks = ", ".join("all" if a == -1 else str(a) for a in sorted(c.checked_acks))
        rows.append(f"| `{name}` | {configs} | acks={acks} | {'yes' if c.must_lose else 'no'} | {c.power_loss} "
                    f"| {'yes' if c.transactions else 'no'} |")
    return "\n".join(rows)


def lab_scenarios() -> str:
    from strandline.lab.scenarios import SAFE, SCENARIOS

    rows = ["| scenario | what happens | expected | acks | min.insync.replicas | needs root |",
            "|---|---|---|---|---|---|"]
    for s in [*SCENARIOS.values(), SAFE]:
        rows.append(f"| `{s.name}` | {_cell(s.summary)} | {_cell(s.expectation)} | {s.acks} | {s.min_isr} "
                    f"| {'yes' if s.needs_network else 'no'} |")
    return "\n".join(rows)


# ---------------------------------------------------------------- requirements and their tests

@lru_cache(maxsize=1)
def tests_naming() -> dict[str, tuple[str, ...]]:
    """Each requirement ID named in tests/: the tests that name it (``path::Class::test``), or the
    file where the name is outside any test (a module docstring)."""
    named: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        text = path.read_text()
        if not ID_PATTERN.search(text):
            continue
        rel = path.relative_to(ROOT).as_posix()
        if rel in NOT_PROOFS:
            continue
        spans = []
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                spans.append((start, node.end_lineno, node))
        for lineno, line in enumerate(text.splitlines(), 1):
            for match in ID_PATTERN.finditer(line):
                rid = match.group(1)
                # the innermost test function around the line, else its class, else the file
                around = [(s, e, n) for s, e, n in spans if s <= lineno <= e]
                funcs = [n for s, e, n in around if not isinstance(n, ast.ClassDef)]
                classes = [n for s, e, n in around if isinstance(n, ast.ClassDef)]
                where = rel
                if classes:
                    where += "::" + min(classes, key=lambda n: n.end_lineno - n.lineno).name
                if funcs:
                    where += "::" + min(funcs, key=lambda n: n.end_lineno - n.lineno).name
                entries = named.setdefault(rid, [])
                if where not in entries:
                    entries.append(where)
    return {rid: tuple(where) for rid, where in sorted(named.items())}


def stated_ids(markdown: str) -> list[str]:
    return [m.group(1) for line in markdown.splitlines() if (m := REQUIREMENT_HEADING.match(line))]


def missing_requirements(markdown: str) -> list[str]:
    """IDs that tests name and the requirements page does not state."""
    stated = set(stated_ids(markdown))
    return sorted(rid for rid in tests_naming() if rid not in stated and rid not in NOT_REQUIREMENTS)


def _tests_list(rid: str) -> str:
    where = tests_naming().get(rid, ())
    if not where:
        return "*Tests:* none names it yet.\n"
    return "*Tests that name it:*\n\n" + "\n".join(f"- `{w}`" for w in where) + "\n"


def requirements_with_tests(markdown: str) -> str:
    """The requirements page with each ``### ID`` section followed by the tests that name the ID."""
    missing = missing_requirements(markdown)
    if missing:
        raise DocsError("tests name requirement IDs that docs/requirements.md does not state: " + ", ".join(missing))
    out: list[str] = []
    current: str | None = None
    for line in markdown.splitlines():
        if line.startswith("#") and current is not None:
            out += [_tests_list(current), ""]
            current = None
        if m := REQUIREMENT_HEADING.match(line):
            current = m.group(1)
        out.append(line)
    if current is not None:
        out += ["", _tests_list(current)]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- the hook

PARTS = {
    "broker-config": broker_config_table,
    "topic-config": topic_config_table,
    "group-config": group_config_table,
    "cli": cli_reference,
    "sim-menu": sim_menu,
    "sim-configs": sim_configs,
    "lab-scenarios": lab_scenarios,
}


CODE_SPAN = re.compile(r"`[^`\n]*`")


def table_code_pipes(markdown: str) -> str:
    """A pipe in a code span of a table row is written ``\\|`` for GitHub, where it would end the
    cell; Python-Markdown keeps code spans whole and would show the backslash: drop it."""
    def row(line: str) -> str:
        return CODE_SPAN.sub(lambda m: m.group(0).replace("\\|", "|"), line) if line.startswith("|") else line
    return "\n".join(row(line) for line in markdown.split("\n"))


def render(markdown: str, src_path: str) -> str:
    """A page's Markdown with its markers replaced (and, for the requirements page, its tests)."""
    def part(match: re.Match) -> str:
        name = match.group(1)
        if name not in PARTS:
            raise DocsError(f"{src_path}: unknown marker <!-- strandline:{name} --> (known: {', '.join(PARTS)})")
        return PARTS[name]()

    markdown = MARKER.sub(part, markdown)
    if Path(src_path).name == "requirements.md":
        markdown = requirements_with_tests(markdown)
    return table_code_pipes(markdown)


def on_pre_build(config, **kwargs):
    tests_naming.cache_clear()      # `mkdocs serve` builds again when tests change


def on_page_markdown(markdown, page, config, files, **kwargs):
    try:
        return render(markdown, page.file.src_path)
    except DocsError as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(str(exc)) from None
