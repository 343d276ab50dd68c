"""The replication hot path compiled with mypyc, loaded only while it matches its source.

The broker's Produce and Fetch path is ordinary, type-annotated Python (the modules of
:data:`MODULES`). ``strandline speedups build`` (``make`` runs it) compiles them with
mypyc into C extensions kept beside the interpreter (``<sys.prefix>/strandline-speedups``), with a
manifest of each source's SHA-256. The same source then runs two to three times faster: no
bytecode interpretation and no dictionary lookups for attributes, as a compiled language would
run it.

:func:`install` (called by ``strandline/__init__.py``, before any of these modules is imported)
puts a finder in front of the import system that loads the compiled modules only when every
source still hashes as it did at the build: the modules are compiled as one group and call one
another directly, so a group with any source edited since loads none of it, and the source runs
instead (a warning says so). ``STRANDLINE_PURE_PYTHON=1`` always runs the source (for a profiler
such as py-spy, which sees no Python frames inside compiled code, and for tests that replace a
method of one of these classes). A machine without a C compiler runs the source: the build says
so in one line and the broker works the same.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path

#: The modules compiled, as one mypyc group.
MODULES = (
    "strandline.protocol.frames",
    "strandline.protocol.hot_readers",
    "strandline.protocol.hot_responses",
    "strandline.protocol.records",
    "strandline.replication.purgatory",
    "strandline.replication.fetch_session",
    "strandline.replication.partition",
    "strandline.replication.replica_manager",
    "strandline.replication.leader_writes",
    "strandline.replication.validation",
    "strandline.log.log",
    "strandline.log.segment",
    "strandline.log.index",
)
GROUP = "strandline_speedups"
MANIFEST = "manifest.json"
PURE_ENV = "STRANDLINE_PURE_PYTHON"
MYPY_OPTIONS = ("--ignore-missing-imports", "--follow-imports=silent")

SOURCE_ROOT = Path(__file__).resolve().parents[1]        # the directory holding strandline/


def target_dir() -> Path:
    """Where this interpreter's compiled modules live."""
    return Path(sys.prefix) / "strandline-speedups"


def source_path(module: str) -> Path:
    return SOURCE_ROOT.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes() -> dict[str, str]:
    return {m: hashlib.sha256(source_path(m).read_bytes()).hexdigest() for m in MODULES}


def _extension_suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or importlib.machinery.EXTENSION_SUFFIXES[0]


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled group's modules (and its shared library) in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.suffix = _extension_suffix()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != f"{GROUP}__mypyc" and fullname not in MODULES:
            return None
        location = self.directory.joinpath(*fullname.split(".")).with_name(fullname.rsplit(".", 1)[-1] + self.suffix)
        if not location.exists():
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(location))
        return importlib.util.spec_from_file_location(fullname, location, loader=loader)


def stale_reason(directory: Path) -> str | None:
    """Why the compiled group in ``directory`` must not be loaded (None: it may)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return "not built"
    if manifest.get("python") != sys.version or manifest.get("modules") != list(MODULES):
        return "built for another interpreter or module list"
    try:
        hashes = source_hashes()
    except OSError as exc:
        return f"a source cannot be read ({exc})"
    edited = [m for m in MODULES if manifest.get("sources", {}).get(m) != hashes[m]]
    if edited:
        return f"{', '.join(edited)} edited since the build"
    return None


#: What :func:`install` decided, for the broker's start-up line (:func:`describe`).
_decision = "source (the compiled hot path was not looked for)"


def install() -> bool:
    """Load the compiled modules from now on, if they match their sources (True: they will)."""
    global _decision
    if os.environ.get(PURE_ENV):
        _decision = f"source ({PURE_ENV} is set)"
        return False
    directory = target_dir()
    reason = "not built" if not (directory / MANIFEST).exists() else stale_reason(directory)
    if reason is None and any(m in sys.modules for m in MODULES):
        reason = "part of it was imported as source first"
    if reason is not None:
        _decision = f"source ({reason})"
        if reason != "not built":
            warnings.warn(f"strandline: running the hot path as source, not compiled: {reason} (make compiles "
                          f"it again)", RuntimeWarning, stacklevel=2)
        return False
    sys.meta_path.insert(0, _CompiledFinder(directory))
    _decision = f"compiled with mypyc ({len(MODULES)} modules, {directory})"
    return True


def describe() -> str:
    """How this process runs the hot path: compiled, or as source and why."""
    return _decision


def build() -> str:
    """Compile :data:`MODULES` into :func:`target_dir`; returns the line to print."""
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError as exc:
        return f"strandline speedups: not compiled ({exc.name} is not installed); the hot path runs as source"
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc") is None:
        return "strandline speedups: not compiled (no C compiler); the hot path runs as source"
    directory = target_dir()
    hashes = source_hashes()
    work = Path(tempfile.mkdtemp(prefix="strandline-speedups-"))
    here = os.getcwd()
    try:
        os.chdir(SOURCE_ROOT)
        paths = [str(source_path(m).relative_to(SOURCE_ROOT)) for m in MODULES]
        extensions = mypycify([*MYPY_OPTIONS, f"--cache-dir={work / 'mypy'}", *paths], opt_level="3",
                              target_dir=str(work / "c"), group_name=GROUP)
        built = work / "lib"
        setup(name=GROUP, ext_modules=extensions, packages=[], py_modules=[],
              script_args=["-q", "build_ext", "--build-lib", str(built), "--build-temp", str(work / "tmp")])
        if directory.exists():
            shutil.rmtree(directory)
        shutil.copytree(built, directory)
        (directory / MANIFEST).write_text(json.dumps({"python": sys.version, "modules": list(MODULES),
                                                      "sources": hashes}, indent=1))
    finally:
        os.chdir(here)
        shutil.rmtree(work, ignore_errors=True)
    return f"strandline speedups: compiled {len(MODULES)} modules of the hot path with mypyc into {directory}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["build"]:
        try:
            print(build(), flush=True)
        except SystemExit as exc:           # mypyc's type check or the C build failed: say so, run as source
            print(f"strandline speedups: not compiled (the build failed: {exc}); the hot path runs as source")
        return 0
    if args == ["status"]:
        print(f"the replication hot path runs {describe()}")
        return 0
    print("usage: strandline speedups build|status", file=sys.stderr)
    return 2
