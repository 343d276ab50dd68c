"""The pure core never imports I/O modules (DESIGN.md: one core, two shells)."""

import ast
from pathlib import Path

import pytest

CORE = ["protocol", "log", "replication", "controller", "coordination", "broker", "group", "security", "transaction"]
FORBIDDEN = {"asyncio", "socket", "time", "random", "threading", "kazoo"}
SRC = Path(__file__).resolve().parents[2] / "src" / "strandline"


def imports(path: Path, with_members: bool = False) -> list[tuple[int, list[str]]]:
    """Each absolute import statement of ``path``: its line and the modules it names (with
    ``with_members``, also ``module.member`` for each name a ``from`` import takes)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.append((node.lineno, [alias.name for alias in node.names]))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            members = [f"{node.module}.{alias.name}" for alias in node.names] if with_members else []
            found.append((node.lineno, [node.module] + members))
    return found


def forbidden_imports(path: Path) -> list[str]:
    return [f"{path.relative_to(SRC.parent)}:{line} imports {name}"
            for line, names in imports(path) for name in names if name.split(".")[0] in FORBIDDEN]


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


# Each component owns its state and reaches another only through the few methods the broker wires
# (DESIGN.md). Components share the effects vocabulary, the outbox and the configuration; apart
# from those, none imports the broker (the composition root and request router), and none imports
# another component's package except as listed.
SHARED = {"strandline.broker.effects", "strandline.broker.outbox", "strandline.broker.config"}
COMPONENTS = {
    "controller": {"strandline.broker", "strandline.replication", "strandline.group"},
    "replication": {"strandline.broker", "strandline.controller", "strandline.group"},
    "group": {"strandline.broker", "strandline.controller", "strandline.replication"},
    "coordination": {"strandline.broker", "strandline.controller", "strandline.replication", "strandline.group"},
    "log": {"strandline.broker", "strandline.controller", "strandline.replication", "strandline.group",
            "strandline.coordination"},
    "transaction": {"strandline.broker", "strandline.controller", "strandline.replication"},
    "security": {"strandline.broker", "strandline.controller", "strandline.replication", "strandline.group",
                 "strandline.coordination", "strandline.log", "strandline.protocol"},
    "protocol": {"strandline.broker", "strandline.controller", "strandline.replication", "strandline.group",
                 "strandline.coordination", "strandline.log"},
}


def crossing_imports(path: Path, forbidden: set[str]) -> list[str]:
    """Imports of ``path`` (also those only for type checking) into a forbidden package; the shared
    modules are imported by their full name."""
    found = []
    for line, names in imports(path, with_members=True):
        for name in names:
            if name in SHARED or any(name.startswith(s + ".") for s in SHARED):
                continue
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(SRC.parent)}:{line} imports {name}")
                break
    return found


@pytest.mark.parametrize("package", sorted(COMPONENTS))
def test_a_component_imports_no_other_component_it_must_not_know(package):
    files = sorted((SRC / package).rglob("*.py"))
    assert files
    problems = [p for f in files for p in crossing_imports(f, COMPONENTS[package])]
    assert problems == []


@pytest.mark.parametrize("package", sorted(COMPONENTS))
def test_each_component_rule_catches_a_crossing_import(package):
    forbidden = sorted(COMPONENTS[package])
    probe = SRC / package / "_layering_probe.py"
    lines = [f"from {name} import something  # noqa" for name in forbidden]
    lines.append("from strandline.broker.effects import Log  # shared: allowed")
    try:
        probe.write_text("\n".join(lines) + "\n")
        assert len(crossing_imports(probe, COMPONENTS[package])) == len(forbidden)
    finally:
        probe.unlink()


# The shells (runtime, sim), the lab, the Spark source and the CLI drive the core; the core never
# imports any of them.
DRIVERS = {"strandline.runtime", "strandline.sim", "strandline.lab", "strandline.spark", "strandline.cli"}


@pytest.mark.parametrize("package", CORE)
def test_the_core_imports_none_of_its_drivers(package):
    files = sorted((SRC / package).rglob("*.py"))
    problems = [p for f in files for p in crossing_imports(f, DRIVERS)]
    assert problems == []


def test_the_driver_rule_catches_an_import_of_the_lab():
    probe = SRC / "replication" / "_layering_probe.py"
    try:
        probe.write_text("from strandline.lab.runner import execute  # noqa\nimport strandline.runtime.zk  # noqa\n")
        assert len(crossing_imports(probe, DRIVERS)) == 2
    finally:
        probe.unlink()
