"""The house's rules, read from the imports of src/strandline (docs: architecture):

- the pure core does no I/O: no ``asyncio``, ``socket``, ``time``, ``random``, ``threading``,
  ``kazoo``, ``os``, ``io``, ``logging`` or ``subprocess`` import in its packages;
- the shared vocabulary (:mod:`strandline.core`: effects, outbox, configuration, answering a
  request) sits below the components and imports none of them;
- each component imports only the components below it;
- the core imports none of its drivers (the shells, the lab, the Spark source, the CLI);
- the launcher (``launch``) and the load generators (``load``) import none of the commands that
  use them (the lab, the reference cluster, the CLI, ...);
- no import circle anywhere in src/strandline, counting the imports made only for type checking.

Every rule is also shown to catch what it forbids, on a small tree written to a temporary directory.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src"
CORE = ["core", "protocol", "log", "replication", "controller", "coordination", "broker", "group", "security",
        "transaction"]
FORBIDDEN = {"asyncio", "socket", "time", "random", "threading", "kazoo", "os", "io", "logging", "subprocess"}

# What each package of the core must not import: every package above it, and its peers. From the
# ground up: protocol and the log; the shared vocabulary; ZooKeeper's model of the cluster; the
# components (security's ACL model is imported by coordination, its authorizer reads ZooKeeper);
# the broker that wires them (the composition root and request router).
_ABOVE_CORE = {"coordination", "replication", "controller", "group", "transaction", "broker", "security"}
COMPONENTS = {
    "protocol": {"core", "log"} | _ABOVE_CORE,
    "log": {"core"} | _ABOVE_CORE,
    "core": _ABOVE_CORE,
    "coordination": _ABOVE_CORE - {"coordination", "security"},
    "security": {"broker", "replication", "controller", "group", "transaction"},
    "controller": {"broker", "replication", "group", "transaction"},
    "replication": {"broker", "controller", "group", "transaction"},
    "group": {"broker", "controller", "replication"},
    "transaction": {"broker", "controller", "replication"},
}
DRIVERS = {"runtime", "sim", "lab", "spark", "cli", "console", "fuzz", "load", "reference", "launch"}
#: What starts clusters of processes and loads them sits below the commands that use it: the
#: launcher and the load generators import none of these.
ABOVE_LAUNCH = {"lab", "reference", "cli", "console", "sim", "fuzz", "spark"}
BELOW_COMMANDS = {"launch": ABOVE_LAUNCH | {"load"}, "load": ABOVE_LAUNCH}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path) -> list[tuple[int, list[str]]]:
    """Each import statement of ``path`` (relative ones resolved; those under ``TYPE_CHECKING``
    too): its line, and the modules it names with, for a ``from`` import, ``module.member`` for
    each name it takes (a member may be a submodule)."""
    found = []
    package = module_name(root, path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.append((node.lineno, [alias.name for alias in node.names]))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((node.lineno, [base] + [f"{base}.{alias.name}" for alias in node.names]))
    return found


def forbidden_imports(path: Path, root: Path) -> list[str]:
    return [f"{path.relative_to(root)}:{line} imports {name}"
            for line, names in imports(path, root) for name in names[:1] if name.split(".")[0] in FORBIDDEN]


def crossing_imports(path: Path, root: Path, forbidden: set[str]) -> list[str]:
    """Imports of ``path`` into one of the ``forbidden`` packages of strandline."""
    found = []
    for line, names in imports(path, root):
        for name in names:
            parts = name.split(".")
            if parts[0] == "strandline" and len(parts) > 1 and parts[1] in forbidden:
                found.append(f"{path.relative_to(root)}:{line} imports {name}")
                break
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the tree under ``root`` it imports (``from package import name``
    counts as an import of ``package.name`` when that is a module, else of ``package``)."""
    files = {module_name(root, f): f for f in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges = set()
        for _, names in imports(path, root):
            module, members = names[0], names[1:]
            hits = [m for m in members if m in files] if members else []
            if hits:
                edges.update(hits)
            elif module in files:
                edges.add(module)
        edges.discard(name)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _files(package: str) -> list[Path]:
    files = sorted((SRC / "strandline" / package).rglob("*.py"))
    assert files, f"package {package} has no modules"
    return files


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("package", CORE)
def test_core_package_does_no_io(package):
    assert [p for f in _files(package) for p in forbidden_imports(f, SRC)] == []


def test_the_io_rule_catches_every_forbidden_import(tmp_path):
    lines = [f"import {name}" for name in sorted(FORBIDDEN)] + ["from os.path import join", "import posixpath"]
    root = _write(tmp_path, {"strandline/log/probe.py": "\n".join(lines) + "\n"})
    assert len(forbidden_imports(root / "strandline/log/probe.py", root)) == len(FORBIDDEN) + 1


@pytest.mark.parametrize("package", sorted(COMPONENTS))
def test_a_package_imports_none_above_it_nor_a_peer_it_must_not_know(package):
    assert [p for f in _files(package) for p in crossing_imports(f, SRC, COMPONENTS[package])] == []


@pytest.mark.parametrize("package", sorted(COMPONENTS))
def test_each_package_rule_catches_a_crossing_import(package, tmp_path):
    forbidden = sorted(COMPONENTS[package])
    lines = [f"from strandline.{name} import something" for name in forbidden]
    lines.append("from strandline.errors import BrokenInvariant")        # allowed everywhere
    lines.append("from . import sibling")                                # its own package
    if package != "core" and "core" not in COMPONENTS[package]:
        lines.append("from strandline.core.effects import LogLine")      # the vocabulary: allowed
    root = _write(tmp_path, {f"strandline/{package}/probe.py": "\n".join(lines) + "\n"})
    assert len(crossing_imports(root / f"strandline/{package}/probe.py", root, COMPONENTS[package])) == len(forbidden)


@pytest.mark.parametrize("package", CORE)
def test_the_core_imports_none_of_its_drivers(package):
    assert [p for f in _files(package) for p in crossing_imports(f, SRC, DRIVERS)] == []


def test_the_driver_rule_catches_imports_of_the_shells(tmp_path):
    root = _write(tmp_path, {"strandline/replication/probe.py":
                             "from strandline.lab.runner import execute\nimport strandline.runtime.zk\n"
                             "from ..sim import cluster\n"})
    assert len(crossing_imports(root / "strandline/replication/probe.py", root, DRIVERS)) == 3


@pytest.mark.parametrize("package", sorted(BELOW_COMMANDS))
def test_the_launcher_and_the_load_generators_import_none_of_their_users(package):
    assert [p for f in _files(package) for p in crossing_imports(f, SRC, BELOW_COMMANDS[package])] == []


def test_no_import_circle():
    assert circles(import_graph(SRC)) == []


def test_the_circle_check_catches_a_circle_also_through_type_checking_and_relative_imports(tmp_path):
    root = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import B\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\nB = 1\n",
        "pkg/c.py": "from . import a\nC = 1\n",
        "pkg/d.py": "from pkg import a\n",                # imports into the circle: not part of it
        "pkg/e.py": "import pkg.f\n",
        "pkg/f.py": "import pkg.e\n",
    })
    assert circles(import_graph(root)) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.e", "pkg.f"]]
