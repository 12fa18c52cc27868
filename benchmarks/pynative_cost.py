"""Training-thread cost of TensorBoardMonitor under MindFormers 2.x's PyNative trainer, and of its gradient
hooks, per step.

Real trainings of that trainer on this CPU (MindFormers 2.0.0 in ``.venvs/mf2.0``, built by ``make compat
COMPAT_ENVS=mf2.0``; its CPU stand-ins from tests/compat/mf2x_cpu/), timed by
``benchmarks/probe/pynative_probe.py`` where the monitor works: its ``on_step_begin`` and ``on_step_end``,
its reads in front of LossCallback's and MaxLogitsMonitor's model calls, and the time inside the gradient
hooks during the backward. Models: the tiny Qwen3 (dense) and the tiny DeepSeek-V3 (MoE with expert bias,
multi-token prediction, two micro-batches per step); variants: the monitor at its defaults (log_every 1),
and with per-layer gradient norms (``layer_grad_norms``) at log_every 1 and 10 (hooks only on the logged
steps). Steps after the first 5; medians over the steps, and the hooks' share of the median step.

python -m benchmarks.pynative_cost [--quick]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks.optimizer_state_cost import section_main

REPO = Path(__file__).resolve().parents[1]
MF2X = REPO / "tests" / "compat" / "mf2x_cpu"
PYTHON = REPO / ".venvs" / "mf2.0" / "bin" / "python"
PROBE = REPO / "benchmarks" / "probe" / "pynative_probe.py"
WARMUP = 5
HOOK_TARGET = 0.01  # the gradient hooks' share of a tiny step
BLOCK = 10  # steps per block when the hooks go on and off within one training
MODELS = (
    ("tiny Qwen3 (dense)", "tiny_qwen3_cpu.yaml", 2),
    ("tiny DeepSeek-V3 (MoE, MTP)", "tiny_deepseek3_cpu.yaml", 4),
)
VARIANTS = (
    ("defaults (log_every 1)", {}),
    ("+ layer_grad_norms, log_every 1", {"layer_grad_norms": True}),
    ("+ layer_grad_norms, log_every 10", {"layer_grad_norms": True, "log_every": 10, "aggregate_every": 10}),
)


def _data(folder: Path) -> Path:
    tiny = folder / "tiny.mindrecord"
    subprocess.run(
        [sys.executable, "-m", "mindformers_tbplugin", "make-data", "--output", str(tiny), "--num_samples", "256"],
        check=True,
        capture_output=True,
    )
    xy = folder / "tiny_xy.mindrecord"
    subprocess.run([str(PYTHON), str(MF2X / "make_xy.py"), str(tiny), str(xy)], check=True, capture_output=True)
    return xy


def _run(
    folder: Path, data: Path, model: str, global_batch: int, options: dict, steps: int, block: int = 0
) -> dict[str, list]:
    config = yaml.safe_load((MF2X / model).read_text())
    config["train_dataset"]["dataloader"]["dataset_files"] = str(data)
    config["training"].update(steps=steps, global_batch_size=global_batch)
    monitor = {"type": "TensorBoardMonitor", "log_dir": str(folder / "tb"), "experiment": "bench", **options}
    config["callbacks"] = [monitor]
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    output = folder / "timings.json"
    env = {**os.environ, "PYNATIVE_PROBE_BLOCK": str(block)}
    result = subprocess.run([str(PYTHON), str(PROBE), str(path), str(output)], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"pynative probe failed: {(result.stdout + result.stderr)[-3000:]}")
    return json.loads(output.read_text())


def _median_us(values: list[float]) -> float:
    return statistics.median(values) * 1e6


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    title = "## MindFormers 2.x's PyNative trainer: the monitor's training-thread cost per step"
    if not PYTHON.exists():
        return f"{title}\n\nNot measured: needs `.venvs/mf2.0` (`make compat COMPAT_ENVS=mf2.0`).\n", []
    steps = 25 if quick else 105
    rows, notes, missed = [], [], []
    with tempfile.TemporaryDirectory() as temporary:
        data = _data(Path(temporary))
        for label, model, batch in MODELS:
            for variant, options in VARIANTS:
                folder = Path(temporary) / f"{model}-{len(rows)}"
                folder.mkdir()
                measured = _run(folder, data, model, batch, options, steps)
                timings = {key: values[WARMUP:] for key, values in measured.items()}
                step = _median_us(timings["steps"])
                inside = zip(timings["monitor"], timings["taps"], timings["hooks"], strict=True)
                monitor = _median_us([sum(parts) for parts in inside])
                hooks = [a + b for a, b in zip(timings["hooks"], timings["hook_setup"], strict=True)]
                calls = zip(timings["hook_calls"], timings["hook_setup"], strict=True)
                idle = [count for count, setup in calls if setup == 0.0]
                share = statistics.mean(hooks) * 1e6 / step
                rows.append(
                    f"| {label} | {variant} | {len(timings['steps'])} | {step / 1e3:.1f} | {monitor:.0f} "
                    f"| {_median_us(timings['taps']):.0f} | {statistics.mean(hooks) * 1e6:.0f} | {share:.2%} "
                    f"| {int(sum(idle))} |"
                )
                if options.get("layer_grad_norms"):
                    notes.append(f"- {label}, {variant}: gradient hooks {share:.2%} of the median step (target <= 1%)")
                    if share > HOOK_TARGET:
                        missed.append(f"PyNative gradient hooks {label} {variant}: {share:.2%} of a step")
        blocks = []
        for label, model, batch in MODELS:
            folder = Path(temporary) / f"{model}-blocks"
            folder.mkdir()
            measured = _run(folder, data, model, batch, {"layer_grad_norms": True}, 2 * steps, BLOCK)
            on = set(measured["on_steps"])
            durations = list(enumerate(measured["steps"], start=1))[WARMUP:]
            hooks_on = [seconds for step, seconds in durations if step in on]
            hooks_off = [seconds for step, seconds in durations if step not in on]
            change = statistics.median(hooks_on) / statistics.median(hooks_off) - 1
            blocks.append(
                f"| {label} | {len(durations)} | {_median_us(hooks_off) / 1e3:.1f} | {_median_us(hooks_on) / 1e3:.1f} "
                f"| {change:+.2%} |"
            )
    header = (
        f"{title}\n\n"
        "MindFormers 2.0.0's trainer on this CPU (`.venvs/mf2.0`, its CPU stand-ins), timed on the training "
        "thread by `benchmarks/probe/pynative_probe.py`: the monitor's `on_step_begin` + `on_step_end`, its "
        "reads in front of LossCallback's model calls, and the gradient hooks inside the backward. Steps after "
        f"the first {WARMUP}; medians over steps, the hooks' mean per step (with their registration on a logged "
        "step's begin and the read at its end) and its share of the median step. The last column counts hook "
        "calls on steps that are not logged (hooks are registered only for logged steps, so it must be 0). "
        "Beside it, the classic trainer's figure at the same defaults is the on/off section's column of the time "
        "inside the monitor's step_begin, read ahead and step_end (tiny LLaMA, tiny DeepSeek-V3). "
        "`python -m benchmarks.pynative_cost`.\n\n"
        "| model | monitor | steps | median step ms | monitor on the training thread, median µs per step "
        "| of it: reads ahead of LossCallback µs | gradient hooks, mean µs per step | hooks' share of the step "
        "| hook calls on unlogged steps |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    on_off = (
        "\n\nThe hooks' effect on the step itself (the time inside them counts only what they do on the training "
        "thread, not what the backward waits for): one training per model with `layer_grad_norms` at log_every 1, "
        f"the hooks on and off in blocks of {BLOCK} steps (off, on, on, off, repeated), median step of each.\n\n"
        "| model | steps | median step ms, hooks off | median step ms, hooks on | on vs off |\n|---|---|---|---|---|\n"
    )
    return header + "\n".join(rows) + "\n\n" + "\n".join(notes) + on_off + "\n".join(blocks) + "\n", missed


def main(argv: list[str] | None = None) -> None:
    section_main(argv, "python -m benchmarks.pynative_cost", __doc__, markdown_section)


if __name__ == "__main__":
    main()
