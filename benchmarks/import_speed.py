"""How fast the printed-log readers bring a long training in: a 1,000,000-step log of each, written
here with the format strings of the releases' own code, read by the format's ``read``.

- Megatron-LM: core_r0.16's ``training_log`` line (timestamp prefix, torchrun's ``[default7]:``
  launcher prefix, MoE load-balancing loss and ``mtp_1 loss``), one line per step (--log-interval 1);
- MindFormers: r1.9.0's MFLossMonitor line with the log file's prefix and the progress line after it
  (two lines per step), the loss parts of an MoE/MTP model.

python -m benchmarks.import_speed [--quick]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

from mindformers_tbplugin.imports import megatron_log, mindformers_log
from mindformers_tbplugin.imports.collector_pause import collector_paused
from mindformers_tbplugin.imports.imported_run import ImportedRun

TARGET_S = 10.0
STEPS = 1_000_000
QUICK_STEPS = 5_000
START = datetime(2026, 1, 5, 8, 0, 0)


def _loss(step: int) -> float:
    return 2.0 + 8.0 / math.sqrt(step) + 0.01 * math.sin(step)


def megatron_lines(steps: int) -> Iterator[str]:
    """core_r0.16.0 megatron/training/training.py training_log, every field as it formats it."""
    for it in range(1, steps + 1):
        now = START + timedelta(seconds=it)
        s = f" [{now.strftime('%Y-%m-%d %H:%M:%S.%f')}]"
        s += f" iteration {it:8d}/{steps:8d} |"
        s += f" consumed samples: {it * 256:12d} |"
        s += f" elapsed time per iteration (ms): {1234.5 + it % 7:.1f} |"
        s += f" throughput per GPU (TFLOP/s/GPU): {201.3 + it % 5:.1f} |"
        s += f" learning rate: {3e-4 * min(1.0, it / 2000):.6E} |"
        s += f" global batch size: {256:5d} |"
        s += " {}: {:.6E} |".format("lm loss", _loss(it))
        s += " {}: {:.6E} |".format("load_balancing_loss", 1.0 + 0.001 * math.cos(it))
        s += " {}: {:.6E} |".format("mtp_1 loss", _loss(it) + 0.3)
        s += f" loss scale: {1.0:.1f} |"
        s += f" grad norm: {0.5 + 0.1 * math.sin(it / 10):.3f} |"
        s += f" number of skipped iterations: {0:3d} |"
        s += f" number of nan iterations: {0:3d} |"
        yield "[default7]:" + s + "\n"


def mindformers_lines(steps: int) -> Iterator[str]:
    """r1.9.0 mindformers/core/callback/callback.py print_output_info (not sink mode), with the log file's
    prefix (mindformers/tools/logger.py) and the progress line, 1,000 steps per epoch."""
    per_epoch, epochs = 1000, max(1, steps // 1000)
    for it in range(1, steps + 1):
        epoch, step = (it - 1) // per_epoch + 1, (it - 1) % per_epoch + 1
        loss = _loss(it)
        stamp = (START + timedelta(seconds=it)).strftime("%Y-%m-%d %H:%M:%S,123")
        prefix = f"[INFO] {stamp} [mindformers/core/callback/callback.py:747] print_output_info: "
        loss_info = f"loss:[{loss:5.6f}/{loss + 0.5:5.6f}], "
        separate = f"lm_loss: {loss - 0.3:5.6f}, load_balancing_loss: {1.0:5.6f}, mtp_loss: {0.3:5.6f}, "
        text = ("{ Epoch:[%3d/%3d], step:[%5d/%5d], " + loss_info + separate + "per_step_time: %dms, lr: %s, "
                "overflow cond: %s, loss_scale: %s, global_norm: %s%s") % (
            epoch, epochs, step, per_epoch, 177 + it % 3, "[0.00075]", "False", "1.0",
            f"[{0.5 + 0.1 * math.sin(it / 10):.7f}]", f", train_throughput_per_npu: {12.345:.3f}T",
        )  # fmt: skip
        yield prefix + text + "\n"
        bar = int(50 * it / steps) * "█"
        yield (f"[INFO] {stamp} [mindformers/core/callback/callback.py:766] print_output_info:   "
               f"{100 * it / steps:4.1f}% |{bar:<50}| {12.34567:.5f} samples/s/p  0:10:00 }}\n")  # fmt: skip


def _time_read(read: Callable[[list[Path]], ImportedRun], path: Path, rounds: int) -> tuple[float, float, ImportedRun]:
    """Median wall and CPU seconds of ``rounds`` reads (CPU time: this process's, what a shared machine's
    other load does not add to), each with the cyclic collector paused, as ``mftb import`` reads."""
    walls, cpus, run = [], [], None
    for _ in range(rounds):
        run = None  # the last round's run let go before the next read
        wall, cpu = time.perf_counter(), time.process_time()
        with collector_paused():
            run = read([path])
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    assert run is not None
    return statistics.median(walls), statistics.median(cpus), run


def measure(steps: int, rounds: int) -> list[tuple[str, int, int, float, float, int]]:
    """(format, steps, lines, median wall seconds, median CPU seconds, steps read) per reader."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, make, read in (
            ("Megatron-LM (core_r0.16 line)", megatron_lines, megatron_log.read),
            ("MindFormers 1.9 (MFLossMonitor)", mindformers_lines, mindformers_log.read),
        ):
            path = Path(folder) / "train.log"
            with open(path, "w", encoding="utf-8") as handle:
                handle.writelines(make(steps))
            wall, cpu, run = _time_read(read, path, rounds)
            with open(path, encoding="utf-8") as handle:
                count = sum(1 for _ in handle)
            rows.append((name, steps, count, wall, cpu, len(run.scalars["train/loss"])))
    return rows


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    steps, rounds = (QUICK_STEPS, 1) if quick else (STEPS, 3)
    rows = measure(steps, rounds)
    table = [
        "## mftb import: printed training logs, lines per second",
        "",
        f"A {steps:,}-step log of each format, written with the release's own format strings "
        "(benchmarks/import_speed.py), read by the format's reader (`read`, one process, every step kept, "
        "the cyclic garbage collector paused as `mftb import` pauses it); "
        f"median of {rounds} read(s), wall and CPU time. Target: under {TARGET_S:.0f} s for 1,000,000 steps.",
        "",
        "| format | steps | lines | seconds | CPU seconds | lines/s | steps read |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    missed = []
    for name, count, lines, wall, cpu, read_steps in rows:
        table.append(
            f"| {name} | {count:,} | {lines:,} | {wall:.2f} | {cpu:.2f} | {lines / wall:,.0f} | {read_steps:,} |"
        )
        if not quick and wall > TARGET_S:
            missed.append(f"{name}: {wall:.1f} s for {count:,} steps (target {TARGET_S:.0f} s)")
    return "\n".join(table) + "\n", missed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    text, missed = markdown_section(parser.parse_args().quick)
    print(text)
    print("missed:", missed or "none")
