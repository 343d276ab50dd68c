"""``strandline sim explore --spark``: the explorer's seeds as Spark tasks.

The seed range is cut into slices, one Spark task each; a task runs its seeds one after the other
in the executor's Python worker and hands back each run's :class:`~strandline.sim.explore.RunResult`.
The driver takes the results as the tasks end (in the order of the seeds) and prints the same
lines as a run on one machine, so a failing seed replays anywhere with ``strandline sim replay``.

Local mode (``local[*]``, every core of this machine) by default; ``--master`` names any cluster
(``spark://host:7077``, ``yarn``, ...). The executors need Python with Strandline's dependencies
installed (they are PySpark's own workers); Strandline itself is shipped to them with the job, as a
zip of the installed package.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import strandline

if TYPE_CHECKING:
    from strandline.sim.explore import RunResult

#: one run: (seed, config name, duration in ms, the Explorer's keyword options)
Job = tuple[int, str, int, dict[str, Any]]


def _run_slice(jobs: Iterable[Job]) -> Iterator[RunResult]:
    from strandline.sim.explore import run_seed

    for seed, config, duration_ms, options in jobs:
        yield run_seed(seed, config, duration_ms=duration_ms, **options)


def _package_zip(directory: str) -> str:
    """A zip of the ``strandline`` package, for the executors' Python path."""
    root = Path(strandline.__file__).resolve().parent
    path = os.path.join(directory, "strandline.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(root.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                zf.write(file, Path("strandline") / file.relative_to(root))
    return path


def run(jobs: list[Job], master: str | None = None, slices: int | None = None) -> Iterator[RunResult]:
    """Run ``jobs`` (``(seed, config, duration_ms, options)``) as Spark tasks on ``master``
    (``local[*]`` by default); yields each :class:`RunResult` in the order of ``jobs``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master or "local[*]").appName("strandline-sim-explore")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.task.maxFailures", "1"))
    log_path = os.path.join(tempfile.gettempdir(), f"strandline-sim-spark-{os.getpid()}.log")
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)              # the JVM inherits it: Spark's start-up chatter lands in the file
    os.close(fd)
    try:
        spark = builder.getOrCreate()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    try:
        sc = spark.sparkContext
        sc.setLogLevel("ERROR")
        with tempfile.TemporaryDirectory(prefix="strandline-sim-") as scratch:
            master_url = sc.master
            assert master_url is not None       # a started context's
            if not master_url.startswith("local"):
                sc.addPyFile(_package_zip(scratch))
            count = slices or max(1, min(len(jobs), sc.defaultParallelism * 4))
            rdd = sc.parallelize(jobs, count).mapPartitions(_run_slice)
            yield from rdd.toLocalIterator(prefetchPartitions=True)
    finally:
        spark.stop()
