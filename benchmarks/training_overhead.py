"""End-to-end step time of the real tiny LLaMA (CPU, graph mode) with and without monitoring.

Every run is a fresh ``mftb train`` (1 rank) or ``msrun`` job (2 ranks, data parallel) over the same
data; variants are alternated run by run (round r runs every variant once, in reversed order on odd
rounds) so that the machine's noise hits all of them alike. The step time is the wall clock between
consecutive MFLossMonitor lines (their log timestamps, millisecond resolution), so it includes every
callback; per run the interquartile mean over the steps after warm-up (robust to the odd stall,
finer than the timestamps), then per round the ratio to the round's baseline run, and the median of
those ratios over rounds.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from mindformers_tbplugin.viewer.tensorboard_server import any_free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TINY = REPO / "configs" / "tiny" / "llama_tiny_cpu.yaml"
TINY_DP2 = REPO / "configs" / "tiny" / "llama_tiny_cpu_dp2.yaml"
LAUNCHER = REPO / "scripts" / "msrun_launch.sh"
WARMUP_STEPS = 5  # graph compilation and first allocations
TARGET_SLOWDOWN = 0.01
# Separate trainings check the +1% target only when the baseline's run-to-run spread is below this.
RESOLVABLE_SPREAD = 3 * TARGET_SLOWDOWN

_COLLECTIVES_LINE = re.compile(
    r"(\d+) aggregation interval\(s\), (\d+) collective\(s\) in all; all-reduce per interval: (\d+) bytes, ([0-9.]+) ms"
)
_STEP_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?step:\[\s*(\d+)/\s*\d+\]", re.M)

BASELINE = "MFLossMonitor only"
MFTB_1 = "+ TensorBoardMonitor, log_every 1"
BUILTIN = "+ MindFormers `tensorboard:` (tensorboardX)"
# Both with intervals of exactly aggregate_every steps (aggregate_seconds 0), which they compare.
MFTB_AGG10 = "+ TensorBoardMonitor, log_every 1, aggregate_every 10"
MFTB_AGG1 = "+ TensorBoardMonitor, log_every 1, aggregate_every 1"


def train_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MFTB_NO_AUTOREGISTER", None)
    return env


def _monitor(log_dir: Path, **options: Any) -> dict[str, Any]:
    return {"type": "TensorBoardMonitor", "log_dir": str(log_dir), "experiment": "bench", "log_every": 1, **options}


def _variant_config(variant: str, folder: Path) -> dict[str, Any]:
    """The config changes of one variant: its callbacks and, for MindFormers' own writer, its section."""
    callbacks: list[dict[str, Any]] = [{"type": "MFLossMonitor"}]
    changes: dict[str, Any] = {"callbacks": callbacks}
    if variant == MFTB_1:
        callbacks.append(_monitor(folder / "tb"))
    elif variant == MFTB_AGG10:
        callbacks.append(_monitor(folder / "tb", aggregate_every=10, aggregate_seconds=0))
    elif variant == MFTB_AGG1:
        callbacks.append(_monitor(folder / "tb", aggregate_every=1, aggregate_seconds=0))
    elif variant == BUILTIN:
        # What MindFormers' docs show: MFLossMonitor then writes loss, grad norm, loss scale, timers.
        changes["tensorboard"] = {
            "tensorboard_dir": str(folder / "tbx"),
            "tensorboard_queue_size": 10,
            "log_loss_scale_to_tensorboard": True,
            "log_timers_to_tensorboard": True,
        }
    return changes


def step_times_ms(log_text: str) -> list[float]:
    """Wall-clock milliseconds between consecutive MFLossMonitor lines, after the warm-up steps."""
    stamps = {
        int(step): datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f") for stamp, step in _STEP_LINE.findall(log_text)
    }
    steps = sorted(s for s in stamps if s > WARMUP_STEPS and s - 1 in stamps)
    return [(stamps[s] - stamps[s - 1]).total_seconds() * 1000.0 for s in steps]


def interquartile_mean(values: list[float]) -> float:
    ordered = sorted(values)
    quarter = len(ordered) // 4
    middle = ordered[quarter : len(ordered) - quarter] or ordered
    return statistics.fmean(middle)


def _write_config(base: Path, folder: Path, variant: str) -> Path:
    config = yaml.safe_load(base.read_text())
    config.update(_variant_config(variant, folder))
    config["output_dir"] = str(folder / "output")
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _run_once(ranks: int, variant: str, data: Path, samples: int) -> tuple[list[float], str]:
    """Step times of one training, and its log (rank 0's under msrun)."""
    with tempfile.TemporaryDirectory(prefix="mftb-bench-") as name:
        folder = Path(name)
        data_args = ["--train_dataset_dir", str(data), "--num_samples", str(samples)]
        if ranks == 1:
            config = _write_config(TINY, folder, variant)
            argv = [str(BIN / "mftb"), "train", "--config", str(config), *data_args]
            log_file = None
        else:
            config = _write_config(TINY_DP2, folder, variant)
            argv = [
                "bash",
                str(LAUNCHER),
                "--config",
                str(config),
                "--worker_num",
                str(ranks),
                "--master_port",
                str(any_free_port()),
                "--output_dir",
                str(folder / "output"),
                "--",
                *data_args,
            ]
            log_file = folder / "output" / "msrun_log" / "0" / "worker_0.log"
        result = subprocess.run(argv, cwd=folder, env=train_env(), capture_output=True, text=True, timeout=900)
        output = result.stdout + result.stderr
        if result.returncode != 0:
            raise RuntimeError(f"{variant} ({ranks} rank(s)) failed:\n{output[-3000:]}")
        text = log_file.read_text(errors="replace") if log_file else output
        times = step_times_ms(text)
        if not times:
            raise RuntimeError(f"{variant}: no MFLossMonitor step lines found in the training output")
        if variant != BASELINE and ranks == 1 and not list(folder.rglob("*tfevents*")):
            raise RuntimeError(f"{variant}: the training wrote no event file")
        return times, text


@dataclass
class VariantResult:
    variant: str
    run_ms: list[float] = field(default_factory=list)  # interquartile mean per run
    ratios: list[float] = field(default_factory=list)  # per round, to the round's baseline run
    collectives: set[tuple[int, int]] = field(default_factory=set)  # (aggregation intervals, collectives)
    payloads: set[int] = field(default_factory=set)  # all-reduce bytes per interval
    reduce_ms: list[float] = field(default_factory=list)  # all-reduce ms per interval, per run

    @property
    def median_ms(self) -> float:
        return statistics.median(self.run_ms)

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios) if self.ratios else 1.0


def measure(ranks: int, variants: list[str], rounds: int, steps: int, data: Path) -> list[VariantResult]:
    samples = steps * 2 * ranks  # batch 2 per rank
    results = {variant: VariantResult(variant) for variant in variants}
    for round_index in range(rounds):
        order = variants if round_index % 2 == 0 else variants[::-1]
        this_round = {}
        for variant in order:
            times, log_text = _run_once(ranks, variant, data, samples)
            this_round[variant] = interquartile_mean(times)
            for intervals, calls, payload, reduce_ms in _COLLECTIVES_LINE.findall(log_text):
                results[variant].collectives.add((int(intervals), int(calls)))
                results[variant].payloads.add(int(payload))
                results[variant].reduce_ms.append(float(reduce_ms))
        for variant, ms in this_round.items():
            results[variant].run_ms.append(ms)
            if variant != BASELINE:
                results[variant].ratios.append(ms / this_round[BASELINE])
    return list(results.values())


def _table(results: list[VariantResult]) -> list[str]:
    lines = [
        "| variant | median ms/step | min-max over runs | vs MFLossMonitor only (median of per-round ratios) |",
        "|---|---|---|---|",
    ]
    for result in results:
        spread = f"{min(result.run_ms):.2f}-{max(result.run_ms):.2f}"
        relative = "baseline" if result.variant == BASELINE else f"{(result.ratio - 1) * 100:+.2f}%"
        lines.append(f"| {result.variant} | {result.median_ms:.2f} | {spread} | {relative} |")
    return lines


def _baseline(results: list[VariantResult]) -> VariantResult:
    return next(r for r in results if r.variant == BASELINE)


def baseline_spread(results: list[VariantResult]) -> float | None:
    """The baseline's run-to-run spread (max - min) over its median; None with a single run."""
    baseline = _baseline(results)
    if len(baseline.run_ms) < 2:
        return None
    return (max(baseline.run_ms) - min(baseline.run_ms)) / baseline.median_ms


def resolves_target(results: list[VariantResult]) -> bool:
    """Whether these runs can tell a +1% slowdown from none: the baseline's own spread must be small."""
    spread = baseline_spread(results)
    return spread is not None and spread <= RESOLVABLE_SPREAD


def _noise_note(results: list[VariantResult]) -> str:
    spread = baseline_spread(results)
    if spread is None:
        return "Noise: a single run per variant; no spread to report."
    if spread <= RESOLVABLE_SPREAD:
        return f"Noise: the baseline's run-to-run spread is {spread:.1%} of its median; the target is checked here."
    return (
        f"Noise: the baseline's own run-to-run spread is {spread:.1%} of its median over "
        f"{len(_baseline(results).run_ms)} runs on this shared machine, more than "
        f"{RESOLVABLE_SPREAD:.0%}: these runs cannot resolve a {TARGET_SLOWDOWN:.0%} difference, so the "
        "percentages above are not checked against the target; the in-process measurement below is."
    )


def make_data(folder: Path, samples: int) -> Path:
    path = folder / "tiny.mindrecord"
    argv = [str(BIN / "mftb"), "make-data", "--output", str(path), "--num_samples", str(samples)]
    subprocess.run(argv, env=train_env(), check=True, capture_output=True)
    return path


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    rounds, steps = (1, 60) if quick else (5, 300)
    dp2_rounds, dp2_steps = (0, 0) if quick else (5, 150)
    missed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mftb-bench-data-") as name:
        data = make_data(Path(name), max(steps * 2, dp2_steps * 4))
        single = measure(1, [BASELINE, MFTB_1, BUILTIN], rounds, steps, data)
        dual = measure(2, [BASELINE, MFTB_AGG10, MFTB_AGG1], dp2_rounds, dp2_steps, data) if dp2_rounds else []
    by_name = {r.variant: r for r in single}
    ours, builtin = by_name[MFTB_1], by_name[BUILTIN]
    lines = [
        "## End-to-end step time: tiny LLaMA, CPU, graph mode",
        "",
        f"1 rank, `mftb train`, {steps} steps per run, {rounds} round(s) of alternating runs. Step time = wall "
        f"clock between consecutive MFLossMonitor log lines (every callback included); per run the "
        f"interquartile mean over steps {WARMUP_STEPS + 1}-{steps}.",
        "",
        *_table(single),
        "",
        _noise_note(single),
        "",
        f"TensorBoardMonitor vs MindFormers' built-in tensorboardX writer: step time ratio "
        f"**{builtin.median_ms / ours.median_ms:.3f}x** (built-in / ours, medians over runs).",
        "",
    ]
    if resolves_target(single) and (ours.ratio - 1) > TARGET_SLOWDOWN:
        missed.append(f"1 rank: TensorBoardMonitor {(ours.ratio - 1) * 100:+.2f}% > +{TARGET_SLOWDOWN:.0%}")
    if builtin.median_ms <= ours.median_ms:
        missed.append("1 rank: TensorBoardMonitor is not faster than MindFormers' tensorboardX writer")
    if dual:
        lines += [
            f"2 ranks, data parallel under msrun (`scripts/msrun_launch.sh`), {dp2_steps} steps per run, "
            f"{dp2_rounds} rounds; step times of rank 0.",
            "",
            *_table(dual),
            "",
            _noise_note(dual),
            "",
        ]
        for result in dual:
            for intervals, calls in sorted(result.collectives):
                lines.append(
                    f"- {result.variant}: {intervals} aggregation intervals, {calls} collectives in all "
                    f"(rank 0's log): {calls / max(intervals, 1):.2f} per interval, whatever the number of metrics."
                )
            if result.reduce_ms:
                payload = ", ".join(f"{size:,}" for size in sorted(result.payloads))
                lines.append(
                    f"  All-reduce per interval: {payload} bytes, {statistics.median(result.reduce_ms):.3f} ms "
                    f"(median over runs, {min(result.reduce_ms):.3f}-{max(result.reduce_ms):.3f}; rank 0's "
                    "training thread, waiting for the other rank included)."
                )
        lines.append("")
        for result in dual:
            # One all-gather at train begin agrees on the run folder; the rest are per interval.
            if any(calls - 1 > intervals for intervals, calls in result.collectives):
                missed.append(f"2 ranks: {result.variant}: more than 1 collective per aggregation interval")
        agg10 = {r.variant: r for r in dual}[MFTB_AGG10]
        if resolves_target(dual) and (agg10.ratio - 1) > TARGET_SLOWDOWN:
            missed.append(f"2 ranks: aggregate_every 10 {(agg10.ratio - 1) * 100:+.2f}% > +{TARGET_SLOWDOWN:.0%}")
    else:
        lines += ["2 ranks: not run with `--quick` (each msrun job takes half a minute).", ""]
    if rounds < 5:
        lines += [f"Only {rounds} round(s) (`--quick`): the ratios above are indicative, not a verdict.", ""]
    return "\n".join(lines), missed
