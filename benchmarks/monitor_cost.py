"""TensorBoardMonitor's cost in one real training, switched on and off in blocks of steps.

Separate trainings differ by several percent from one process to the next on this machine (see the
end-to-end section), far more than the 1% being looked for. Here one ``mftb train`` of the tiny LLaMA
runs with ``benchmarks/probe/overhead_probe.py``: it forwards every step to a real TensorBoardMonitor
(log_every 1, all defaults) in blocks of ``BLOCK`` steps in the pattern off, on, on, off, and stamps
each step's start. Each group of four blocks gives one ratio (interquartile mean of its "on" steps
over that of its "off" steps); the estimate is the median of those ratios, with a bootstrap 95%
interval over the groups.

The writer thread drains its queue once a second, so its work spills from "on" blocks into "off" ones
and the block comparison cannot attribute it: its CPU time per logged step is measured and added. The
verdict per model and rank count: the upper bound of the 95% interval of the median group ratio over
all its trainings, plus the writer share, <= +1%.

Controls check the method: the same probe with the monitor given nothing in the "on" blocks (A/A: the
interval is the method's own noise; 1 rank, and 2 ranks in the full run) and given only its read of the
step's outputs.

Also shown: the time spent inside the monitor (step begin, read ahead, step end). With several ranks its
mean includes waiting in the monitor's all-reduce for the slower rank, a wait the training's own gradient
all-reduce would otherwise have had; the block comparison shows what is left of it.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks.training_overhead import (
    BIN,
    LAUNCHER,
    REPO,
    TARGET_SLOWDOWN,
    TINY,
    TINY_DP2,
    interquartile_mean,
    make_data,
    train_env,
)
from mindformers_tbplugin.viewer.tensorboard_server import any_free_port

PROBE_DIR = REPO / "benchmarks" / "probe"
DEEPSEEK3 = REPO / "configs" / "tiny" / "deepseek3_tiny_cpu.yaml"
TRAIN_MCORE = REPO / "scripts" / "cpu" / "train_mcore.py"
LLAMA = "tiny LLaMA"
DEEPSEEK3_NAME = "tiny DeepSeek-V3"
BATCH = {LLAMA: 2, DEEPSEEK3_NAME: 4}  # samples per step and rank, as the tiny configs set them
BLOCK = 10
WARMUP_STEPS = 20  # compilation, first allocations, the monitor's one-off records
BOOTSTRAP_SAMPLES = 2000


def median_with_interval(ratios: list[float], seed: int = 0) -> tuple[float, float, float]:
    """Median of ``ratios`` and its bootstrap 95% interval."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(BOOTSTRAP_SAMPLES))
    return statistics.median(ratios), medians[int(0.025 * BOOTSTRAP_SAMPLES)], medians[-int(0.025 * BOOTSTRAP_SAMPLES)]


@dataclass
class ProbeResult:
    group_ratios: list[float]
    on_ms: float  # interquartile mean of all "on" steps
    off_ms: float
    inside_median_us: float
    inside_mean_us: float
    writer_us_per_step: float
    steps: int

    @property
    def writer_share(self) -> float:
        """The writer threads' CPU time per logged step over the step time."""
        return self.writer_us_per_step / (self.off_ms * 1000.0)


def analyse(record: dict) -> ProbeResult:
    starts, on_steps = record["starts"], set(record["on_steps"])
    # starts[i] is the start of step i + 1; a step lasts until the next one starts.
    durations = {index + 1: (starts[index + 1] - starts[index]) * 1000.0 for index in range(len(starts) - 1)}
    groups: dict[int, dict[bool, list[float]]] = {}
    for step, ms in durations.items():
        if step > record["warmup_steps"]:
            groups.setdefault(step // (4 * record["block"]), {True: [], False: []})[step in on_steps].append(ms)
    ratios = [
        interquartile_mean(group[True]) / interquartile_mean(group[False])
        for group in groups.values()
        if group[True] and group[False]
    ]
    counted_on = [step for step in on_steps if step >= record["warmup_steps"]]
    inside_us = [seconds * 1e6 for seconds in record["inside_seconds"]]
    return ProbeResult(
        group_ratios=ratios,
        on_ms=interquartile_mean([ms for group in groups.values() for ms in group[True]]),
        off_ms=interquartile_mean([ms for group in groups.values() for ms in group[False]]),
        inside_median_us=statistics.median(inside_us),
        inside_mean_us=statistics.fmean(inside_us),
        writer_us_per_step=record["writer_cpu_seconds"] / max(len(counted_on), 1) * 1e6,
        steps=len(durations),
    )


def run_probe(
    ranks: int, steps: int, data: Path, model: str = LLAMA, options: dict | None = None, forward: str = "all"
) -> ProbeResult:
    """One probe training (``ranks`` > 1: an msrun job, data parallel); rank 0's result. ``model``: the tiny
    LLaMA, or the tiny DeepSeek-V3 (mcore, MoE + MTP). The monitor has its defaults but log_every 1;
    ``options``: TensorBoardMonitor options over those; ``forward``: what the monitor gets in the "on" blocks
    (the probe's ``FORWARD``: everything, or a control)."""
    with tempfile.TemporaryDirectory(prefix="mftb-bench-probe-") as name:
        folder = Path(name)
        base = DEEPSEEK3 if model == DEEPSEEK3_NAME else TINY if ranks == 1 else TINY_DP2
        config = yaml.safe_load(base.read_text())
        config["output_dir"] = str(folder / "output")
        # The monitor's defaults, whatever the model: what a user's one YAML entry gets.
        monitor = {"log_dir": str(folder / "tb"), "experiment": "probe", "log_every": 1, **(options or {})}
        probe = {
            "type": "OverheadProbe",
            "auto_register": "overhead_probe.OverheadProbe",
            "block": BLOCK,
            "warmup_steps": WARMUP_STEPS,
            "output": str(folder / "probe"),
            "monitor": monitor,
            "forward": forward,
            "pin": ranks > 1,
        }
        own = [entry for entry in config["callbacks"] if entry["type"] in ("MFLossMonitor", "TopkBiasBalanceCallback")]
        config["callbacks"] = [*own, probe]
        config_path = folder / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        data_args = ["--train_dataset_dir", str(data), "--num_samples", str(steps * BATCH[model] * ranks)]
        if model == DEEPSEEK3_NAME:
            argv = [str(BIN / "python"), str(TRAIN_MCORE), "--config", str(config_path), *data_args]
        elif ranks == 1:
            argv = [str(BIN / "mftb"), "train", "--config", str(config_path), *data_args]
        else:
            argv = ["bash", str(LAUNCHER), "--config", str(config_path), "--worker_num", str(ranks)]
            argv += ["--master_port", str(any_free_port()), "--output_dir", str(folder / "output"), "--", *data_args]
        # REGISTER_PATH for MindFormers' auto_register, PYTHONPATH for the launcher's validation.
        env = {**train_env(), "REGISTER_PATH": str(PROBE_DIR), "PYTHONPATH": str(PROBE_DIR)}
        result = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=1800)
        output = folder / "probe" / "rank_0.json"
        if result.returncode != 0 or not output.exists():
            raise RuntimeError(f"probe training ({ranks} rank(s)) failed:\n{(result.stdout + result.stderr)[-3000:]}")
        return analyse(json.loads(output.read_text()))


def _percent(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.2f}%"


# (model, ranks, trainings, steps per training); 2 ranks only in the full run (an msrun job each). A step's
# time varies by 10-15% from one to the next on this machine with 1 rank: 750-1500 groups of four blocks
# narrow a 95% interval to about +-0.3%; runs of one plan still differ by up to 0.4%. Two ranks whose threads
# migrate over the two cores vary by 25% (a 4,000-step A/A interval 5 points wide); each pinned to a core of
# its own (the probe's pin), about 1 point. Any other load on the machine widens them.
FULL_PLAN = [(LLAMA, 1, 3, 20000), (LLAMA, 2, 3, 8000), (DEEPSEEK3_NAME, 1, 3, 10000)]
QUICK_PLAN = [(LLAMA, 1, 1, 400), (DEEPSEEK3_NAME, 1, 1, 300)]
# Controls of the method, one tiny LLaMA training each (what the monitor gets in the "on" blocks, ranks, steps):
# nothing (A/A), and only its read of the step's outputs ahead of the callbacks.
CONTROLS = {"none": "nothing (A/A)", "reads": "only the read of the step's outputs"}
FULL_CONTROLS = [("none", 1, 20000), ("reads", 1, 20000), ("none", 2, 8000)]
QUICK_CONTROLS = [("none", 1, 200), ("reads", 1, 200)]


def markdown_section(
    quick: bool, models: tuple[str, ...] = (LLAMA, DEEPSEEK3_NAME), rank_counts: tuple[int, ...] = (1, 2)
) -> tuple[str, list[str]]:
    """The section, and the missed targets; ``models`` and ``rank_counts``: the rows to run (e.g. one model's
    alone, or its 2-rank rows and controls alone)."""
    plan = [row for row in (QUICK_PLAN if quick else FULL_PLAN) if row[0] in models and row[1] in rank_counts]
    with tempfile.TemporaryDirectory(prefix="mftb-bench-data-") as name:
        controls = (QUICK_CONTROLS if quick else FULL_CONTROLS) if LLAMA in models else []
        controls = [control for control in controls if control[1] in rank_counts]
        samples: dict[str, int] = {}  # per model, the most any of its trainings reads
        for model, ranks, steps in [*((m, r, s) for m, r, _, s in plan), *((LLAMA, r, s) for _, r, s in controls)]:
            samples[model] = max(samples.get(model, 0), steps * BATCH[model] * ranks)
        make = {LLAMA: make_data, DEEPSEEK3_NAME: make_mcore_data}
        data = {model: make[model](Path(name), count) for model, count in samples.items()}
        results = [
            ((model, ranks), steps, run_probe(ranks, steps, data[model], model))
            for model, ranks, runs, steps in plan
            for _ in range(runs)
        ]
        control_results = [
            (forward, ranks, steps, run_probe(ranks, steps, data[LLAMA], LLAMA, forward=forward))
            for forward, ranks, steps in controls
        ]
    lines = [
        "## TensorBoardMonitor on and off within one training",
        "",
        "Tiny LLaMA and tiny DeepSeek-V3 (mcore: MoE + MTP, with TopkBiasBalanceCallback: loss parts at every "
        "step, expert loads, model FLOPs, per-layer gradient norms), CPU, graph mode, with MFLossMonitor: `mftb "
        "train` (1 rank) or an msrun job (2 ranks, data parallel, step times of rank 0; each rank's threads pinned to "
        "a core of its own, as on a host with cores to spare per rank, the monitor's writer thread sharing the "
        "training's core). In each training a real "
        "TensorBoardMonitor with its defaults but log_every 1 (aggregate_every 10 stretched by aggregate_seconds 2.0, "
        "moe_every 10, "
        "optimizer_state_every and param_norm_every 100; not the bundled demo configs' schedules of 1 to 16 "
        "steps, set for their 64-step runs) gets the steps of "
        f"blocks of {BLOCK} in the pattern off, on, on, off (`benchmarks/probe/overhead_probe.py`; in the off "
        "blocks it reads no accumulators either). Steps after "
        f"{WARMUP_STEPS}; per group of four blocks the ratio of interquartile means on / off; the median ratio "
        "with a bootstrap 95% interval over groups. One process for both variants: no process-to-process "
        "noise. The writer threads' CPU time, which the blocks cannot attribute (the writer drains once a "
        "second), is measured and added.",
        "",
        "| model | ranks | training | steps | step ms off | step ms on | on vs off (median of group ratios) "
        "| 95% interval | groups | writer threads CPU µs/step "
        "| inside step_begin + read ahead + step_end median µs | mean µs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts, missed = [], []
    for key in dict.fromkeys(key for key, _, _ in results):
        model, ranks = key
        mine = [(steps, result) for k, steps, result in results if k == key]
        for index, (steps, result) in enumerate(mine, 1):
            ratio, low, high = median_with_interval(result.group_ratios)
            lines.append(
                f"| {model} | {ranks} | {index} | {steps} | {result.off_ms:.2f} | {result.on_ms:.2f} | "
                f"{_percent(ratio)} | {_percent(low)} to {_percent(high)} | {len(result.group_ratios)} | "
                f"{result.writer_us_per_step:.1f} | {result.inside_median_us:.1f} | {result.inside_mean_us:.1f} |"
            )
        pooled = [ratio for _, result in mine for ratio in result.group_ratios]
        ratio, low, high = median_with_interval(pooled)
        writer = statistics.fmean(result.writer_share for _, result in mine)
        lines.append(
            f"| {model} | {ranks} | all | | | | **{_percent(ratio)}** | {_percent(low)} to {_percent(high)} | "
            f"{len(pooled)} | {writer * 100:.2f}% of the step | | |"
        )
        # The target is on the interval's upper bound, with the writer threads' share added.
        total = high - 1 + writer
        verdict = (
            f"{model}, {ranks} rank(s): on vs off {_percent(ratio)}, upper 95% bound {_percent(high)} + writer "
            f"threads {writer * 100:.2f}% = {total * 100:+.2f}%"
        )
        verdicts.append(f"- {verdict} (target <= +{TARGET_SLOWDOWN:.0%})")
        if total > TARGET_SLOWDOWN and not quick:  # one short training cannot resolve 1%
            missed.append(f"{verdict} > +{TARGET_SLOWDOWN:.0%}")
    lines += ["", *verdicts, ""]
    if control_results:
        lines += _control_lines(control_results)
    if quick:
        lines += ["Only one short training per model (`--quick`): indicative, not a verdict.", ""]
    return "\n".join(lines), missed


def _control_lines(control_results: list[tuple[str, int, int, ProbeResult]]) -> list[str]:
    """The controls' table: the same probe and analysis, the monitor given less in the "on" blocks."""
    lines = [
        f'Controls of the method ({LLAMA}, one training each): the same probe, but in the "on" blocks '
        "the monitor (built, started, its writer thread running) gets nothing at all, an A/A comparison whose "
        "interval is the method's own noise; or only its read of the step's outputs ahead of MindFormers' "
        "callbacks (the device reads; the wait for the step's graph moves there from MFLossMonitor).",
        "",
        "| the monitor gets | ranks | steps | step ms off | step ms on | on vs off | 95% interval | groups "
        "| writer threads CPU µs/step | inside median µs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for forward, ranks, steps, result in control_results:
        ratio, low, high = median_with_interval(result.group_ratios)
        lines.append(
            f"| {CONTROLS[forward]} | {ranks} | {steps} | {result.off_ms:.2f} | {result.on_ms:.2f} | "
            f"{_percent(ratio)} | {_percent(low)} to {_percent(high)} | {len(result.group_ratios)} | "
            f"{result.writer_us_per_step:.1f} | {result.inside_median_us:.1f} |"
        )
    return [*lines, ""]


def make_mcore_data(folder: Path, samples: int) -> Path:
    """Data with labels for the mcore models (they do not shift input_ids themselves)."""
    path = folder / "mcore_xy.mindrecord"
    argv = [str(BIN / "mftb"), "make-data", "--output", str(path), "--num_samples", str(samples)]
    subprocess.run([*argv, "--vocab_size", "1000", "--labels"], env=train_env(), check=True, capture_output=True)
    return path
