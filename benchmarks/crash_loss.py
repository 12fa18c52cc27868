"""What a crash costs: points lost after SIGKILL for a given flush_secs, and time to close on SIGTERM.

A child process writes one point every 20 ms through RunWriter (as TensorBoardMonitor does at
log_every 1 with 20 ms steps) and prints each step after handing it over; the parent kills it and
counts the printed steps missing from disk.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP_SECONDS = 0.02

_CHILD = """
import sys, time
from mindformers_tbplugin.tfevents.registry import get_writer
run_dir, flush_secs, mode, pause = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
writer = get_writer(run_dir, flush_secs=flush_secs)
if mode == "queue":
    for step in range(1, 20001):
        writer.add_scalars(step, {"train/loss": 1.0, "train/lr": 0.1})
    print("ready", flush=True)
    time.sleep(600)
step = 0
while True:
    step += 1
    writer.add_scalars(step, {"train/loss": 1.0 / step})
    print(step, flush=True)
    time.sleep(pause)
"""


def _points_on_disk(run_dir: Path) -> int:
    # Imported here: loading tensorboard's protobufs before MindSpore (another section) breaks MindSpore.
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return sum(
        1
        for path in run_dir.glob("*tfevents*")
        for event in EventFileLoader(str(path)).Load()
        if event.HasField("summary")
    )


def points_lost_after_sigkill(flush_secs: float, run_seconds: float) -> tuple[int, int]:
    """(steps handed to the writer, steps missing from disk) when SIGKILL lands mid-run."""
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder) / "run"
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(run_dir), str(flush_secs), "steps", str(STEP_SECONDS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(run_seconds)
        child.send_signal(signal.SIGKILL)
        printed = [line for line in child.communicate()[0].split() if line.isdigit()]
        handed = int(printed[-1]) if printed else 0
        return handed, handed - _points_on_disk(run_dir)


def sigterm_close_seconds() -> tuple[float, int]:
    """(seconds from SIGTERM to exit, points on disk) with 20,000 points queued and never flushed."""
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder) / "run"
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(run_dir), "3600", "queue", "0"], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout.readline().strip() == "ready"
        start = time.perf_counter()
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=120)
        return time.perf_counter() - start, _points_on_disk(run_dir)


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    lines = [
        "## Crash safety: points lost after SIGKILL, time to close on SIGTERM",
        "",
        f"A child writes one point every {STEP_SECONDS * 1000:.0f} ms through RunWriter and is killed mid-run.",
        "",
        "| flush_secs | run before SIGKILL (s) | points handed over | points lost | seconds of points lost |",
        "|---|---|---|---|---|",
    ]
    missed = []
    for flush_secs in (1.0, 10.0):
        run_seconds = flush_secs * (2.5 if quick else 3.5)
        handed, lost = points_lost_after_sigkill(flush_secs, run_seconds)
        lost_seconds = lost * STEP_SECONDS
        lines.append(f"| {flush_secs:g} | {run_seconds:g} | {handed} | {lost} | {lost_seconds:.2f} |")
        if lost_seconds > flush_secs + 0.5:
            missed.append(f"SIGKILL with flush_secs {flush_secs:g} lost {lost_seconds:.2f} s of points")
    seconds, on_disk = sigterm_close_seconds()
    lines += [
        "",
        f"SIGTERM with 20,000 queued, unflushed points: closed in **{seconds:.2f} s**, {on_disk} points on disk.",
        "",
        "Fewer seconds than flush_secs can be lost: the file buffer (8 KiB) reaches the OS whenever it fills.",
        "",
    ]
    if on_disk != 20000:
        missed.append(f"SIGTERM close wrote {on_disk} of 20000 points")
    return "\n".join(lines), missed
