"""The pure core never imports I/O modules (DESIGN.md: one core, two shells)."""

import ast
from pathlib import Path

import pytest

CORE = ["protocol", "log", "replication", "controller", "coordination", "broker", "group"]
FORBIDDEN = {"asyncio", "socket", "time", "random", "threading", "kazoo"}
SRC = Path(__file__).resolve().parents[2] / "src" / "strandline"


def forbidden_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            if name.split(".")[0] in FORBIDDEN:
                found.append(f"{path.relative_to(SRC.parent)}:{node.lineno} imports {name}")
    return found


@pytest.mark.parametrize("package", CORE)
def test_core_package_does_no_io(package):
    files = sorted((SRC / package).rglob("*.py"))
    assert files, f"core package {package} has no modules"
    problems = [p for f in files for p in forbidden_imports(f)]
    assert problems == []


def test_the_check_catches_a_forbidden_import(tmp_path):
    bad = SRC / "broker" / "_layering_probe.py"
    try:
        bad.write_text("import time\nfrom asyncio import sleep\n")
        assert len(forbidden_imports(bad)) == 2
    finally:
        bad.unlink()
