"""Every ``type: ignore`` in the packages mypy checks strictly names its error code and says why.

``make typecheck`` runs this after mypy over the packages listed in pyproject.toml's
``[tool.mypy] packages`` and ``modules``. A suppression passes only as ``# type: ignore[code]  # reason`` on one
line; mypy itself refuses one without a code (``ignore-without-code``) and one that suppresses
nothing (``warn_unused_ignores``, part of ``strict``). Exits 1 listing the lines that fail.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_IGNORE = re.compile(r"#\s*type:\s*ignore\b(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


def unexplained(path: Path) -> list[str]:
    """``path:line: text`` of each ``type: ignore`` in ``path`` without a code or without a reason."""
    bad = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = _IGNORE.search(line)
        if match is None:
            continue
        reason = match["rest"].strip()
        if not match["codes"] or not reason.startswith("#") or not reason.lstrip("#").strip():
            bad.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return bad


def main() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mypy = config["tool"]["mypy"]
    paths = [path for package in mypy["packages"]
             for path in sorted((ROOT / "src" / Path(*package.split("."))).rglob("*.py"))]
    for module in mypy.get("modules", []):
        path = ROOT / "src" / Path(*module.split("."))
        paths.append(path / "__init__.py" if path.is_dir() else path.with_suffix(".py"))
    bad = [entry for path in paths for entry in unexplained(path)]
    for entry in bad:
        print(entry)
    if bad:
        print(f"{len(bad)} type: ignore without an error code and a reason (# type: ignore[code]  # why)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
