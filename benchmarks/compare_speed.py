"""``mftb compare`` of two long runs: the comparison alone (two ImportedRun objects in memory) and end to end
(``mftb compare RUN BASELINE --json`` over two run folders written with our event writer, in a child
process: start-up, reading both folders, comparing, the JSON).

Each run has train/loss, train/grad_norm and train/lr at every step; the baseline's loss is the run's
plus noise, so every tag is compared at every step.

python -m benchmarks.compare_speed [--steps N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 5.0


def _series(steps: int, seed: int) -> dict[str, dict[int, float]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.arange(1, steps + 1)
    loss = 2.0 + 8.0 / np.sqrt(x) + rng.normal(0, 0.01, steps)
    norm = 1.0 + rng.normal(0, 0.05, steps) ** 2
    lr = 3e-4 * np.minimum(x / 2000, 1.0)
    return {
        tag: dict(zip(x.tolist(), values.tolist(), strict=True))
        for tag, values in (("train/loss", loss), ("train/grad_norm", norm), ("train/lr", lr))
    }


def imported_runs(steps: int):  # -> tuple[ImportedRun, ImportedRun]
    from mindformers_tbplugin.imports.imported_run import ImportedRun

    return tuple(ImportedRun(source=[], format="benchmark", scalars=_series(steps, seed)) for seed in (0, 1))


def time_in_memory(steps: int, rounds: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of compare_runs + the JSON document, per round."""
    import json

    from mindformers_tbplugin.alignment.criteria import MINDFORMERS
    from mindformers_tbplugin.alignment.report import as_json
    from mindformers_tbplugin.alignment.run_comparison import compare_runs

    run, base = imported_runs(steps)
    seconds = []
    for _ in range(rounds):
        start, cpu = time.perf_counter(), time.process_time()
        json.dumps(as_json(compare_runs(run, base, MINDFORMERS), "run", "base"))
        seconds.append((time.perf_counter() - start, time.process_time() - cpu))
    return seconds


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_run_folder(folder: Path, steps: int, seed: int) -> None:
    """One run folder: an event file of ``steps`` events, 3 scalars each, written as TensorBoardMonitor does."""
    from mindformers_tbplugin.tfevents.event_file import EventFile
    from mindformers_tbplugin.tfevents.events import scalars_event

    folder.mkdir(parents=True)
    series = _series(steps, seed)
    event_file = EventFile(folder)
    wall = time.time() - steps
    for step in range(1, steps + 1):
        event_file.write(scalars_event(step, wall + step, {tag: points[step] for tag, points in series.items()}))
    event_file.close()


def time_end_to_end(steps: int, rounds: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of ``mftb compare RUN BASELINE --json PATH`` in a child process, per round."""
    seconds = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, seed in (("run", 0), ("base", 1)):
            write_run_folder(root / name, steps, seed)
        command = [sys.executable, "-m", "mindformers_tbplugin.cli", "compare", str(root / "run"), str(root / "base")]
        for _ in range(rounds):
            start, cpu = time.perf_counter(), _children_cpu()
            result = subprocess.run([*command, "--json", str(root / "out.json")], capture_output=True, text=True)
            seconds.append((time.perf_counter() - start, _children_cpu() - cpu))
            if result.returncode not in (0, 1):
                raise RuntimeError(result.stderr[-2000:])
    return seconds


def _row(what: str, rounds: list[tuple[float, float]]) -> str:
    wall, cpu = [w for w, _ in rounds], [c for _, c in rounds]
    return (
        f"| {what} | {statistics.median(wall):.2f} | {min(wall):.2f}-{max(wall):.2f} | {statistics.median(cpu):.2f} |"
    )


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    steps, rounds = (20_000, 2) if quick else (1_000_000, 3)
    memory = time_in_memory(steps, rounds)
    end_to_end = time_end_to_end(steps, rounds)
    lines = [
        f"## mftb compare: two runs of {steps:,} steps",
        "",
        "Three tags (train/loss, train/grad_norm, train/lr) at every step, compared at every step against "
        f"MindFormers' migration standard; {rounds} rounds, median (min-max) wall time, and the CPU time "
        "(user + system) of the same work, which other processes on the machine do not inflate.",
        "",
        "| what | median s | min-max s | CPU s |",
        "|---|---|---|---|",
        _row("compare_runs + JSON, two ImportedRun objects in memory", memory),
        _row("`mftb compare RUN BASELINE --json PATH` (a new process; both folders read)", end_to_end),
        "",
        f"Of the end-to-end CPU time, the comparison is {statistics.median(c for _, c in memory):.2f} s; the rest "
        f"is the interpreter's start and reading the two folders ({6 * steps:,} points) through "
        f"`imports/tensorboard_folder.py`. Load average during the measurement: {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores.",
        "",
    ]
    # judged at full size only: at the quick size the interpreter's start would dominate
    cpu = statistics.median(c for _, c in end_to_end)
    missed = [f"mftb compare end to end {cpu:.1f} CPU s for 1,000,000 steps > {TARGET_S} s"]
    return "\n".join(lines), missed if not quick and cpu > TARGET_S else []


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-memory-only", action="store_true", help="skip the end-to-end measurement")
    args = parser.parse_args(argv)
    rows = [_row("in memory", time_in_memory(args.steps, args.rounds))]
    if not args.in_memory_only:
        rows.append(_row("end to end", time_end_to_end(args.steps, args.rounds)))
    print("\n".join(["| what | median s | min-max s | CPU s |", *rows]))


if __name__ == "__main__":
    main()
