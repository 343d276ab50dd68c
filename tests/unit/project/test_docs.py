"""The docs site's generated parts (tools/docs_hooks.py) against the code they describe: every
configuration key, every command and option of `strandline`, every requirement ID the tests name.
`make docs` (which `make test` runs first) builds the site itself with `mkdocs build --strict`."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest

from strandline.core.config import BROKER_KEYS
from strandline.core.topic_keys import TOPIC_KEYS

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "tools" / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


def _key(cell: str) -> str:
    return re.sub(r"<[^>]+>", "", cell).strip()


def _first_cells(table: str) -> set[str]:
    return {_key(line.split("|")[1]) for line in table.splitlines()[2:]}


def test_the_configuration_page_lists_every_broker_and_topic_key():
    page = hooks.render((DOCS / "configuration.md").read_text(), "configuration.md")
    broker = _first_cells(hooks.broker_config_table())
    topic = _first_cells(hooks.topic_config_table())
    assert broker == set(BROKER_KEYS)
    assert topic == set(TOPIC_KEYS)
    for key in [*BROKER_KEYS, *TOPIC_KEYS]:
        assert f"| {hooks.key_cell(key)} |" in page, key


def test_the_configuration_table_shows_kafkas_defaults_and_which_keys_are_dynamic():
    rows = {_key(line.split("|")[1]): [c.strip() for c in line.split("|")[2:-1]]
            for line in hooks.broker_config_table().splitlines()[2:]}
    assert rows["min.insync.replicas"][:4] == ["int", "1", "≥ 1", "yes"]
    assert rows["zookeeper.session.timeout.ms"][1] == "18000"
    assert rows["replica.lag.time.max.ms"][3] == "read-only"
    assert rows["replication.truncation"][2] == "one of leader-epoch, high-watermark"


def _leaf_parsers(parser: argparse.ArgumentParser, words: str):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaf_parsers(sub, f"{words} {name}")


def test_the_command_reference_names_every_command_and_every_option():
    from strandline.cli.main import build_parser

    page = hooks.render((DOCS / "cli.md").read_text(), "cli.md")
    leaves = list(_leaf_parsers(build_parser(), "strandline"))
    assert len(leaves) > 30
    for words, parser in leaves:
        start = page.index(f"### `{words}`\n")
        end = page.find("\n### ", start + 1)
        section = page[start:end if end >= 0 else None]
        named = {name.split(" ")[0] for cell in re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE)
                 for name in cell.split(", ")}
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings or [action.metavar or action.dest]:
                assert option in named, (words, option)


def test_the_requirements_page_states_every_id_the_tests_name_and_lists_those_tests():
    text = (DOCS / "requirements.md").read_text()
    assert hooks.missing_requirements(text) == []
    named = hooks.tests_naming()
    assert "tests/unit/project/test_docs.py" not in str(named)          # this file names no requirement
    page = hooks.render(text, "requirements.md")
    for rid in hooks.stated_ids(text):
        section = page[page.index(f"### {rid}"):]
        section = section[:section.find("\n#", 1)]
        for where in named.get(rid, ()):
            assert f"- `{where}`" in section, (rid, where)
    assert "- `tests/sim/test_replication_sim.py::test_net_4_" in page


def test_a_requirement_named_by_a_test_and_missing_from_the_page_fails_the_build():
    text = (DOCS / "requirements.md").read_text()
    without = re.sub(r"^### LOSS-3\b.*$", "### (removed)", text, flags=re.MULTILINE)
    assert hooks.missing_requirements(without) == ["LOSS-3"]
    with pytest.raises(hooks.DocsError, match="LOSS-3"):
        hooks.render(without, "requirements.md")


def test_every_page_renders_and_an_unknown_marker_fails():
    for page in DOCS.glob("*.md"):
        rendered = hooks.render(page.read_text(), page.name)
        assert "<!-- strandline:" not in rendered, page.name
    with pytest.raises(hooks.DocsError, match="no-such-part"):
        hooks.render("<!-- strandline:no-such-part -->\n", "x.md")


def test_the_readme_is_short_and_its_links_lead_to_pages_that_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert "docs/requirements.md" in links
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link
    assert "../" not in readme and "SPEC.md" not in readme and "DESIGN.md" not in readme


def test_a_pipe_escaped_for_github_in_a_tables_code_span_loses_its_backslash_and_nothing_else():
    assert hooks.table_code_pipes("| `a\\|b` | c\\|d |\n`e\\|f`") == "| `a|b` | c\\|d |\n`e\\|f`"
    assert hooks._cell("run *one* `x_y*` a_b") == "run \\*one\\* `x_y*` a\\_b"
