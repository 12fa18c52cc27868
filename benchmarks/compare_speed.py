"""``mftb compare`` of two long runs: the comparison alone (two ImportedRun objects in memory) and end to end
(``mftb compare RUN BASELINE --json`` over two run folders written with our event writer, in a child
process: start-up, reading both folders, comparing, the JSON).

Each run has train/loss, train/grad_norm and train/lr at every step; the baseline's loss is the run's
plus noise, so every tag is compared at every step.

python -m benchmarks.compare_speed [--steps N] [--rounds N]
"""

from __future__ import annotations

import argparse
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


def time_in_memory(steps: int, rounds: int) -> list[float]:
    """Seconds of compare_runs + the JSON document, per round."""
    import json

    from mindformers_tbplugin.alignment.criteria import MINDFORMERS
    from mindformers_tbplugin.alignment.report import as_json
    from mindformers_tbplugin.alignment.run_comparison import compare_runs

    run, base = imported_runs(steps)
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        json.dumps(as_json(compare_runs(run, base, MINDFORMERS), "run", "base"))
        seconds.append(time.perf_counter() - start)
    return seconds


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


def time_end_to_end(steps: int, rounds: int) -> list[float]:
    """Seconds of ``mftb compare RUN BASELINE --json PATH`` in a child process, per round."""
    seconds = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, seed in (("run", 0), ("base", 1)):
            write_run_folder(root / name, steps, seed)
        command = [sys.executable, "-m", "mindformers_tbplugin.cli", "compare", str(root / "run"), str(root / "base")]
        for _ in range(rounds):
            start = time.perf_counter()
            result = subprocess.run([*command, "--json", str(root / "out.json")], capture_output=True, text=True)
            seconds.append(time.perf_counter() - start)
            if result.returncode not in (0, 1):
                raise RuntimeError(result.stderr[-2000:])
    return seconds


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    steps, rounds = (100_000, 2) if quick else (1_000_000, 3)
    memory = time_in_memory(steps, rounds)
    end_to_end = time_end_to_end(steps, rounds)
    rows = [
        ("compare_runs + JSON, two ImportedRun objects in memory", memory),
        ("`mftb compare RUN BASELINE --json PATH` (a new process, both folders read)", end_to_end),
    ]
    lines = [
        f"## mftb compare: two runs of {steps:,} steps",
        "",
        "Three tags (train/loss, train/grad_norm, train/lr) at every step, compared at every step against "
        f"MindFormers' migration standard; {rounds} rounds, median (min-max).",
        "",
        "| what | median s | min-max s |",
        "|---|---|---|",
    ]
    lines += [f"| {what} | {statistics.median(s):.2f} | {min(s):.2f}-{max(s):.2f} |" for what, s in rows]
    lines.append("")
    scale = 1_000_000 / steps
    missed = (
        [f"mftb compare end to end {statistics.median(end_to_end) * scale:.1f} s for 1,000,000 steps > {TARGET_S} s"]
        if statistics.median(end_to_end) * scale > TARGET_S
        else []
    )
    return "\n".join(lines), missed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-memory-only", action="store_true", help="skip the end-to-end measurement")
    args = parser.parse_args(argv)
    memory = time_in_memory(args.steps, args.rounds)
    print(f"in memory: median {statistics.median(memory):.3f} s, rounds {[round(s, 3) for s in memory]}")
    if not args.in_memory_only:
        end_to_end = time_end_to_end(args.steps, args.rounds)
        print(f"end to end: median {statistics.median(end_to_end):.3f} s, rounds {[round(s, 3) for s in end_to_end]}")


if __name__ == "__main__":
    main()
