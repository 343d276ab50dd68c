"""``strandline lab compare SCENARIO``: one scenario on Strandline's brokers and on Apache Kafka
3.9's, with the same seed, network, workload, faults, sampler and audit; one verdict line per
system (with its numbers) and both timelines one above the other in one image.

A system that cannot play the scenario (:func:`strandline.lab.kafka.unplayable`) says so in one
line and is left out. The exit status is 0 when every run on every system that played had the
outcome SPEC.md expects, 1 when one did not, 3 when no system could play it here.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from strandline.lab import history, timeline
from strandline.lab.kafka import CLUSTERS, unplayable
from strandline.lab.network import unavailable_reason
from strandline.lab.runner import NOT_RUN, _interruptible, _runs_root, _say, execute, find_scenario, summary_table, \
    verdict
from strandline.lab.scenarios import SAFE


def stack_images(pngs: list[Path], out: Path) -> Path:
    """``pngs`` one above the other (centred, on white) in one PNG at ``out``."""
    from PIL import Image

    images = [Image.open(p).convert("RGB") for p in pngs]
    try:
        width = max(i.width for i in images)
        canvas = Image.new("RGB", (width, sum(i.height for i in images)), "white")
        y = 0
        for i in images:
            canvas.paste(i, ((width - i.width) // 2, y))
            y += i.height
        canvas.save(out)
    finally:
        for i in images:
            i.close()
    return out


def compare_command(name: str, seed: int | None, data_dir: str | None, trials: int = 1,
                    systems: tuple[str, ...] = CLUSTERS) -> int:
    scenario = find_scenario(name)
    playing = []
    for system in systems:
        cannot = unplayable(scenario, system)
        if cannot:
            _say(cannot)
        else:
            playing.append(system)
    if not playing:
        return NOT_RUN
    reason = unavailable_reason()
    if scenario.needs_network and reason:
        _say(f"{scenario.name}: skipped: {reason}")
        return NOT_RUN
    if scenario is SAFE and reason:
        _say(f"{scenario.name}: no network partitions among the faults: {reason}")
    _interruptible()
    seed = seed if seed is not None else random.randrange(1 << 31)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = _runs_root(data_dir)
    runs: dict[str, list[Path]] = {}
    for trial in range(trials):        # the systems in turn, trial by trial: both see the same machine's load
        for system in playing:
            run_dir = root / (f"{scenario.name}-{system}-{stamp}" + (f"-{trial:03d}" if trials > 1 else ""))
            _say(f"{scenario.name} on {system}: run {trial + 1}/{trials} in {run_dir} (seed {seed + trial})")
            info = execute(scenario, run_dir, seed + trial, network_ok=reason is None, system=system)
            for f in info["faults"]:
                _say(f"  fault: {f['label']}")
            if info.get("error"):
                _say(f"  error: {info['error']}")
            runs.setdefault(system, []).append(run_dir)
    from strandline.lab.audit import audit

    dirs = [d for system in playing for d in runs[system]]
    results = dict(zip(dirs, audit(dirs)))
    all_ok = True
    pngs: dict[int, list[Path]] = {}
    lines = []
    for system in playing:
        for trial, run_dir in enumerate(runs[system]):
            info = history.read_run(run_dir)
            views = history.read_views(run_dir)
            ok, line = verdict(scenario, info, results[run_dir], views)
            all_ok &= ok
            png, _ = timeline.draw(run_dir, info, views, results[run_dir], f"{system}: {line}")
            pngs.setdefault(trial, []).append(png)
            lines.append(f"{system}" + (f" ({run_dir.name})" if trials > 1 else "") + f": {line}")
    for trial, images in pngs.items():
        out = root / (f"{scenario.name}-compare-{stamp}" + (f"-{trial:03d}" if trials > 1 else "") + ".png")
        _say(f"  timelines: {stack_images(images, out)}")
    for line in lines:
        _say(line)
    if trials > 1:
        for system in playing:
            _say(f"{system}:\n" + summary_table(scenario, runs[system], [results[d] for d in runs[system]]))
    return 0 if all_ok else 1
