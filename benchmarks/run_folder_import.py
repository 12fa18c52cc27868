"""What ``mftb import`` spends beside reading its source: writing the imported run as a run folder
(``imports/run_writer.py``), and reading such a folder back (``read_source``, what a comparison or
a live baseline does with an imported run or one of ours).

A 1,000,000-step run with the tags a Megatron-LM or MindFormers log yields (loss, its LM part, lr,
grad norm, loss scale, step time, each at every step); wall and CPU time (the machine is shared).

python -m benchmarks.run_folder_import [--quick]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from mindformers_tbplugin.imports.detect import read_source
from mindformers_tbplugin.imports.imported_run import ImportedRun
from mindformers_tbplugin.imports.run_writer import write_run
from mindformers_tbplugin.pipeline import metrics as m

STEPS = 1_000_000
QUICK_STEPS = 20_000
TAGS = (m.TRAIN_LOSS, m.TRAIN_LOSS_LM, m.TRAIN_LR, m.TRAIN_GRAD_NORM, m.TRAIN_LOSS_SCALE, m.PERF_STEP_TIME_MS)


def imported_run(steps: int) -> ImportedRun:
    run = ImportedRun(source=[Path("train.log")], format="megatron-log")
    for index, tag in enumerate(TAGS):
        run.scalars[tag] = {step: 2.0 + index + 8.0 / math.sqrt(step) for step in range(1, steps + 1)}
    run.wall_times = {step: 1_767_600_000.0 + step for step in range(1, steps + 1)}
    run.averaged_over = {m.TRAIN_LOSS: 1}
    return run


def measure(steps: int) -> list[tuple[str, float, float, int]]:
    """(what, wall seconds, CPU seconds, points) for writing, then reading back, one run."""
    run = imported_run(steps)
    points = steps * len(TAGS)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        wall, cpu = time.perf_counter(), time.process_time()
        write_run(run, Path(folder) / "run")
        rows.append(("write_run (the run folder)", time.perf_counter() - wall, time.process_time() - cpu, points))
        del run
        wall, cpu = time.perf_counter(), time.process_time()
        back = read_source([Path(folder) / "run"])
        read_points = sum(map(len, back.scalars.values()))
        rows.append(
            ("read_source (the run folder)", time.perf_counter() - wall, time.process_time() - cpu, read_points)
        )
    return rows


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    steps = QUICK_STEPS if quick else STEPS
    rows = measure(steps)
    table = [
        "## mftb import: writing the run folder, and reading one back",
        "",
        f"A {steps:,}-step imported run of {len(TAGS)} tags (benchmarks/run_folder_import.py): written as a run "
        "folder by `write_run`, then read back by `read_source`, as a comparison reads an imported run or one of "
        "ours; one round each, wall and CPU time.",
        "",
        "| stage | steps | points | seconds | CPU seconds | points/s (CPU) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for what, wall, cpu, points in rows:
        table.append(f"| {what} | {steps:,} | {points:,} | {wall:.2f} | {cpu:.2f} | {points / cpu:,.0f} |")
    return "\n".join(table) + "\n", []


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    text, _ = markdown_section(parser.parse_args().quick)
    print(text)
