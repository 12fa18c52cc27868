"""``mftb import`` end to end: a 1,000,000-step printed log of each format (benchmarks/import_speed.py's
lines) brought in by the command in a new process, read and written as a run folder, with Python's cyclic
garbage collector paused as the command pauses it, and beside it the same command with the pause made a
no-op (``imports/collector_pause.py``), the two alternated round by round; wall time of each process and
its CPU time (user + system).

python -m benchmarks.import_end_to_end [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.import_speed import QUICK_STEPS, STEPS, TARGET_S, megatron_lines, mindformers_lines

# The command as `mftb import` runs it; "without": collector_paused replaced by a no-op first.
CHILD = """
import contextlib, sys
from mindformers_tbplugin.imports import collector_pause
if sys.argv[1] == "without":
    collector_pause.collector_paused = contextlib.nullcontext
from mindformers_tbplugin.cli import main
sys.exit(main(["import", sys.argv[2], "--logdir", sys.argv[3], "--name", "run"]))
"""
VARIANTS = ("with", "without")


def _import(variant: str, log: Path, logdir: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, tags written) of one `mftb import` in a new process."""
    before = os.times()
    wall = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", CHILD, variant, str(log), str(logdir)], capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - wall
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    tags = sum(1 for line in result.stdout.splitlines() if " points, steps " in line)
    return wall, cpu, tags


def measure(steps: int, rounds: int) -> list[tuple[str, str, list[float], list[float], int]]:
    """(format, variant, walls, CPU times, tags) per format and variant."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, make in (("Megatron-LM (core_r0.16 line)", megatron_lines), ("MindFormers 1.9", mindformers_lines)):
            log = Path(folder) / "train.log"
            with open(log, "w", encoding="utf-8") as handle:
                handle.writelines(make(steps))
            times: dict[str, tuple[list[float], list[float]]] = {variant: ([], []) for variant in VARIANTS}
            tags = 0
            for round_ in range(rounds):
                for variant in VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]:
                    logdir = Path(folder) / f"out_{variant}_{round_}"
                    wall, cpu, tags = _import(variant, log, logdir)
                    times[variant][0].append(wall)
                    times[variant][1].append(cpu)
                    shutil.rmtree(logdir)
            rows += [(name, variant, *times[variant], tags) for variant in VARIANTS]
    return rows


def markdown_section(quick: bool, rounds: int = 3) -> tuple[str, list[str]]:
    steps = QUICK_STEPS if quick else STEPS
    rows = measure(steps, 1 if quick else rounds)
    lines = [
        "## mftb import: end to end",
        "",
        f"`mftb import LOG --logdir DIR` of a {steps:,}-step log of each format (the lines of "
        "benchmarks/import_speed.py) in a new process: read, then written as a run folder. Beside it the same "
        "command with its pause of Python's cyclic garbage collector made a no-op, alternated round by round; "
        "median (min-max) wall seconds and CPU seconds (user + system). Target: under "
        f"{TARGET_S:.0f} s for 1,000,000 steps (`python -m benchmarks.import_end_to_end`).",
        "",
        "| log | tags | collector | median s | min-max s | CPU s |",
        "|---|---:|---|---:|---|---:|",
    ]
    missed = []
    for name, variant, walls, cpus, tags in rows:
        paused = "paused (as `mftb import`)" if variant == "with" else "not paused"
        lines.append(
            f"| {name} | {tags} | {paused} | {statistics.median(walls):.2f} | {min(walls):.2f}-{max(walls):.2f} "
            f"| {statistics.median(cpus):.2f} |"
        )
        if not quick and variant == "with" and statistics.median(walls) > TARGET_S:
            missed.append(f"mftb import end to end, {name}: {statistics.median(walls):.1f} s for {steps:,} steps")
    return "\n".join(lines) + "\n", missed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    text, missed = markdown_section(arguments.quick, arguments.rounds)
    print(text)
    print("missed:", missed or "none")
