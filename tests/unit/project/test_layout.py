"""Where tests live: ``tests/unit/<package>/`` for the in-process tests of one package of
``src/strandline`` (``project/`` for the rules of the whole tree), ``tests/sim/`` for the tests that
run the deterministic simulator, ``tests/integration/`` for real processes, ``tests/clients/`` for
stock clients' own test suites run against Strandline (``make kafka-python-suite``, not in ``make test``)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
PACKAGES = {p.name for p in (TESTS.parent / "src" / "strandline").iterdir() if p.is_dir() and p.name != "__pycache__"}


def misplaced(tests: Path, packages: set[str]) -> list[str]:
    """Test modules of ``tests`` that are not where the layout says."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        where = path.relative_to(tests).parts
        simulated = path.name.endswith("_sim.py") or path.name.startswith("test_sim_")
        if where[0] == "unit":
            if simulated or len(where) != 3 or where[1] not in packages | {"project"}:
                found.append(str(path.relative_to(tests)))
        elif where[0] == "sim":
            if not simulated or len(where) != 2:
                found.append(str(path.relative_to(tests)))
        elif where[0] not in ("integration", "differential", "clients"):
            found.append(str(path.relative_to(tests)))
    return found


def test_every_test_module_is_where_the_layout_says():
    assert misplaced(TESTS, PACKAGES) == []


def test_every_test_folder_is_a_package():
    folders = {p.parent for p in TESTS.rglob("test_*.py")}
    assert [str(f.relative_to(TESTS)) for f in sorted(folders) if not (f / "__init__.py").exists()] == []


def test_the_layout_check_catches_misplaced_modules(tmp_path):
    for name in ["unit/test_flat.py", "unit/log/test_log_ok.py", "unit/nowhere/test_x.py", "unit/log/test_x_sim.py",
                 "sim/test_not_simulated.py", "sim/test_ok_sim.py", "elsewhere/test_y.py"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert misplaced(tmp_path, {"log"}) == ["elsewhere/test_y.py", "sim/test_not_simulated.py", "unit/log/test_x_sim.py",
                                            "unit/nowhere/test_x.py", "unit/test_flat.py"]
